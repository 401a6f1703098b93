//! Which core-module imports may be stripped.

use crate::error::SlimError;

/// The WASI interfaces whose imports are stripped: what wasi-libc's stdio,
/// environment and exit bring in. Matched without the `@version`.
pub const STRIPPABLE_INTERFACES: &[&str] = &[
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
];

/// One imported function of the core module.
#[derive(Debug, Clone)]
pub(crate) struct FuncImport {
    /// The import's module name, e.g. `wasi:cli/stdout@0.2.0`.
    pub(crate) module: String,
    /// The import's field name, e.g. `get-stdout`.
    pub(crate) name: String,
    /// Its type index in the core module.
    pub(crate) type_index: u32,
    /// Whether it is stripped.
    pub(crate) strip: bool,
}

impl FuncImport {
    /// `module#name`, as the component model spells a lowered import.
    pub(crate) fn label(&self) -> String {
        format!("{}#{}", self.module, self.name)
    }

    /// Whether this is `wasi:cli/environment#get-environment`, the one
    /// stripped import whose stub returns a value (an empty list) instead of
    /// trapping: std's panic path reads `RUST_BACKTRACE` through it.
    pub(crate) fn is_get_environment(&self) -> bool {
        interface(&self.module) == "wasi:cli/environment" && self.name == "get-environment"
    }
}

fn interface(module: &str) -> &str {
    module.split('@').next().unwrap_or(module)
}

/// Classifies one function import; refuses a preview 1 build and any WASI
/// interface outside [`STRIPPABLE_INTERFACES`].
pub(crate) fn classify(module: &str, name: &str, type_index: u32) -> Result<FuncImport, SlimError> {
    if module.starts_with("wasi_snapshot_preview1") || module.starts_with("wasi_unstable") {
        return Err(SlimError::Preview1(format!("{module}#{name}")));
    }
    let strip = STRIPPABLE_INTERFACES.contains(&interface(module));
    if !strip && module.starts_with("wasi:") {
        return Err(SlimError::OtherWasi(format!("{module}#{name}")));
    }
    Ok(FuncImport {
        module: module.to_owned(),
        name: name.to_owned(),
        type_index,
        strip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_environment_and_exit_are_stripped_whatever_their_version() {
        for (module, name) in [
            ("wasi:cli/stdout@0.2.0", "get-stdout"),
            ("wasi:cli/environment@0.2.6", "get-environment"),
            ("wasi:io/streams@0.2.0", "[method]output-stream.write"),
        ] {
            assert!(
                classify(module, name, 0).expect("classified").strip,
                "{module}"
            );
        }
    }

    #[test]
    fn handler_imports_are_kept() {
        let import = classify("nimbus:handler/log@0.1.0", "write", 3).expect("classified");
        assert!(!import.strip);
        assert_eq!(import.label(), "nimbus:handler/log@0.1.0#write");
    }

    #[test]
    fn other_wasi_interfaces_and_preview1_are_refused() {
        let err =
            classify("wasi:filesystem/preopens@0.2.0", "get-directories", 0).expect_err("refused");
        assert!(
            err.to_string()
                .contains("wasi:filesystem/preopens@0.2.0#get-directories"),
            "{err}"
        );
        let err = classify("wasi_snapshot_preview1", "fd_write", 0).expect_err("refused");
        assert!(matches!(err, SlimError::Preview1(_)), "{err}");
    }

    #[test]
    fn only_get_environment_is_recognised_as_such() {
        let env = classify("wasi:cli/environment@0.2.0", "get-environment", 0).expect("ok");
        assert!(env.is_get_environment());
        let exit = classify("wasi:cli/exit@0.2.0", "exit", 0).expect("ok");
        assert!(!exit.is_get_environment());
    }
}
