//! Error types, one per operation, converging on [`Error`].

use std::path::PathBuf;

/// Creating the sandbox failed (engine configuration, cache directory).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// wasmtime refused the engine configuration.
    #[error("cannot configure the wasm engine: {0}")]
    Engine(String),
    /// The cache directory cannot be created.
    #[error("cannot create the compile cache directory {path}: {source}")]
    CacheDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The configuration is inconsistent.
    #[error("invalid sandbox configuration: {0}")]
    Config(String),
}

/// A handler manifest (`<name>.toml`) is invalid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The file cannot be read.
    #[error("cannot read manifest {path}: {source}")]
    Read {
        /// The manifest.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for a manifest (unknown key, wrong type).
    #[error("invalid manifest {path}: {message}")]
    Parse {
        /// The manifest.
        path: PathBuf,
        /// The parser's message, which names the key.
        message: String,
    },
    /// A key has a value the sandbox cannot use.
    #[error("invalid manifest {path}: `{key}`: {message}")]
    Value {
        /// The manifest.
        path: PathBuf,
        /// The key, e.g. `limits.memory`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
}

/// Loading one handler component failed; nothing was registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The component file cannot be read.
    #[error("cannot read component {path}: {source}")]
    Read {
        /// The component.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The manifest beside the component is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The bytes are not a valid component for this engine.
    #[error("{name}: not a valid handler component: {message}")]
    Compile {
        /// The handler name.
        name: String,
        /// wasmtime's reason.
        message: String,
    },
    /// The component does not fit the `nimbus:handler` world (missing
    /// export, an import the host does not provide).
    #[error("{name}: does not implement nimbus:handler/handler@0.1.0: {message}")]
    Link {
        /// The handler name.
        name: String,
        /// wasmtime's reason.
        message: String,
    },
    /// Instantiating it or calling `subscriptions` failed.
    #[error("{name}: failed validation: {message}")]
    Validate {
        /// The handler name.
        name: String,
        /// What went wrong.
        message: String,
    },
    /// The file changed while it was being loaded, every time it was read.
    #[error("{path}: the file kept changing while it was being loaded; write then rename")]
    Unstable {
        /// The component.
        path: PathBuf,
    },
}

/// A registry operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The handlers directory cannot be read.
    #[error("cannot read handlers directory {path}: {reason}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why. Said in the message, not chained as a source: a caller
        /// printing the chain said the OS error twice.
        reason: std::io::Error,
    },
    /// Two components of one endpoint claim the same event type.
    #[error(
        "endpoint `{endpoint}`: event type `{event_type}` is claimed by `{serving}` and by `{rejected}`; `{serving}` keeps serving it"
    )]
    Conflict {
        /// The endpoint.
        endpoint: String,
        /// The contested event type.
        event_type: String,
        /// The handler already serving it.
        serving: String,
        /// The handler that was refused.
        rejected: String,
    },
    /// A component failed to load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The file system watcher could not be started.
    #[error("cannot watch handlers directory {path}: {message}")]
    Watch {
        /// The directory.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// Any sandbox error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// See [`SandboxError`].
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// See [`LoadError`].
    #[error(transparent)]
    Load(#[from] LoadError),
    /// See [`ManifestError`].
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// See [`RegistryError`].
    #[error(transparent)]
    Registry(#[from] RegistryError),
}
