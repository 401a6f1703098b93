//! The handlers directory layout: one subdirectory per endpoint, one
//! component per handler, an optional manifest beside it.
//!
//! ```text
//! handlers/
//!   billing/                 endpoint `billing`
//!     orders.wasm            handler `orders`
//!     orders.toml            its manifest (optional)
//!     notifier.wasm
//!   warehouse/               endpoint `warehouse`
//!     orders.wasm            same file name, another endpoint: fine
//! ```
//!
//! Names starting with `.` and files that are not `.wasm` or `.toml` are
//! ignored, so a writer can write `.orders.wasm.tmp` and rename it into place.
//! A `.wasm` file directly under `handlers/` belongs to no endpoint: it is
//! reported as a problem, not loaded.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// One handler's place in the handlers directory.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct HandlerKey {
    /// The endpoint (the subdirectory's name).
    pub endpoint: String,
    /// The handler (the component's file name without `.wasm`).
    pub handler: String,
}

impl fmt::Display for HandlerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.endpoint, self.handler)
    }
}

/// What a scan of the handlers directory found.
#[derive(Debug, Default)]
pub(crate) struct DirScan {
    pub(crate) components: BTreeMap<HandlerKey, PathBuf>,
    pub(crate) problems: Vec<String>,
}

fn ignored(name: &str) -> bool {
    name.starts_with('.')
}

/// Endpoint names become topic names: keep them to what Service Bus allows.
pub(crate) fn valid_endpoint_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 50
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Lists the components under `dir`.
pub(crate) fn scan(dir: &Path) -> std::io::Result<DirScan> {
    let mut scan = DirScan::default();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if ignored(&name) {
            continue;
        }
        let path = entry.path();
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            if !valid_endpoint_name(&name) {
                scan.problems.push(format!(
                    "{}: `{name}` is not a valid endpoint name (use letters, digits, `-`, `_`, `.`; at most 50)",
                    path.display()
                ));
                continue;
            }
            scan_endpoint(&name, &path, &mut scan)?;
        } else if name.ends_with(".wasm") {
            scan.problems.push(format!(
                "{}: a component must be inside an endpoint directory, e.g. {}",
                path.display(),
                dir.join("<endpoint>").join(&name).display()
            ));
        }
    }
    Ok(scan)
}

fn scan_endpoint(endpoint: &str, dir: &Path, scan: &mut DirScan) -> std::io::Result<()> {
    let mut manifests = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if ignored(&name) || !entry.file_type()?.is_file() {
            continue;
        }
        if let Some(handler) = name.strip_suffix(".wasm") {
            scan.components.insert(
                HandlerKey {
                    endpoint: endpoint.to_owned(),
                    handler: handler.to_owned(),
                },
                entry.path(),
            );
        } else if let Some(handler) = name.strip_suffix(".toml") {
            manifests.push((handler.to_owned(), entry.path()));
        }
    }
    for (handler, path) in manifests {
        let key = HandlerKey {
            endpoint: endpoint.to_owned(),
            handler,
        };
        if !scan.components.contains_key(&key) {
            scan.problems.push(format!(
                "{}: manifest without a component ({}.wasm is missing)",
                path.display(),
                key.handler
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_found_per_endpoint_and_strays_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("billing")).expect("mkdir");
        std::fs::create_dir_all(root.join("warehouse")).expect("mkdir");
        std::fs::create_dir_all(root.join("bad name")).expect("mkdir");
        for file in [
            "billing/orders.wasm",
            "billing/orders.toml",
            "billing/.orders.wasm.tmp",
            "billing/README.md",
            "billing/lonely.toml",
            "warehouse/orders.wasm",
            "stray.wasm",
        ] {
            std::fs::write(root.join(file), b"x").expect("write");
        }
        let scan = scan(root).expect("scan");
        let keys: Vec<String> = scan.components.keys().map(ToString::to_string).collect();
        assert_eq!(keys, ["billing/orders", "warehouse/orders"]);
        assert_eq!(scan.problems.len(), 3, "{:?}", scan.problems);
        assert!(scan.problems.iter().any(|p| p.contains("stray.wasm")));
        assert!(scan.problems.iter().any(|p| p.contains("lonely.toml")));
        assert!(scan.problems.iter().any(|p| p.contains("bad name")));
    }
}
