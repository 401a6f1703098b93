//! Why a component was not slimmed.

/// Why [`crate::slim`] refused or failed. A refusal means the component must
/// be shipped as it was built; nothing is lost.
#[derive(Debug, thiserror::Error)]
pub enum SlimError {
    /// The input is not a WebAssembly component (a core module, or not wasm).
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    /// The component embeds no core module.
    #[error("the component embeds no core module")]
    NoCoreModule,
    /// The input could not be parsed.
    #[error("malformed wasm: {0}")]
    Malformed(#[from] wasmparser::BinaryReaderError),
    /// Built through the WASI preview 1 adapter (not a `wasm32-wasip2` build).
    #[error(
        "the core module imports `{0}` (a WASI preview 1 build through the adapter); \
         only wasm32-wasip2 components are slimmed"
    )]
    Preview1(String),
    /// Imports a WASI interface outside the stdio/environment/exit set, which
    /// may hand out the streams or pollables the stripped functions serve.
    #[error(
        "the component imports `{0}`, a WASI interface other than stdio, environment and exit: \
         its streams would need the stdio functions, so nothing is stripped"
    )]
    OtherWasi(String),
    /// The handler's own code can reach what would be stripped.
    #[error(
        "the handler uses std's stdio, environment or exit (`{function}`{}); \
         its output and exit code need the WASI imports, so nothing is stripped",
        .import.as_ref().map(|i| format!(", which reaches `{i}`")).unwrap_or_default()
    )]
    UsesStdio {
        /// The function that shows the use.
        function: String,
        /// The stripped import it reaches, when found by reachability.
        import: Option<String>,
    },
    /// Re-encoding the module or the component failed.
    #[error("re-encoding failed: {0}")]
    Encode(String),
}
