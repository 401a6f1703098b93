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
//! Names starting with `.` or ending with `~` are ignored quietly, so a
//! writer can write `.orders.wasm.tmp` and rename it into place, and editor
//! backups, `.DS_Store` or a Kubernetes volume's `..data` stay out of the
//! way. Everything else that is not used is reported as a problem rather
//! than skipped: a stray file, a subdirectory of an endpoint, an extension
//! in the wrong case, an endpoint name the topology would refuse. A user
//! who dropped a file in and sees nothing happen should be told why.
//!
//! Symbolic links are followed (Kubernetes mounts a ConfigMap's files as
//! links); a link whose target is missing is a problem naming the link.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::FileType;
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
    /// Every symbolic link the scan followed (endpoint directories and
    /// files): the watcher watches their targets too, which may lie outside
    /// the directory it watches.
    pub(crate) links: Vec<PathBuf>,
    /// Endpoints whose directory could not be listed (permissions, an I/O
    /// error): what they serve stays as it is until it can be read again.
    pub(crate) unreadable: BTreeSet<String>,
}

impl DirScan {
    /// Adds what one endpoint's scan found.
    fn absorb(&mut self, endpoint: DirScan) {
        self.components.extend(endpoint.components);
        self.problems.extend(endpoint.problems);
        self.links.extend(endpoint.links);
    }
}

/// Names a writer or a tool keeps for itself: temporary files renamed into
/// place, editor swap and backup files, `.DS_Store`, a volume's `..data`.
fn ignored(name: &str) -> bool {
    name.starts_with('.') || name.ends_with('~')
}

/// What a directory entry is, after following a symbolic link.
enum Kind {
    Dir,
    File,
    /// A FIFO, socket or device: reading one could block the reload.
    Special,
    /// A link whose target does not exist (or cannot be reached); the
    /// problem is already recorded.
    Broken,
}

/// Follows `path` if it is a symbolic link, recording the link (for the
/// watcher) or the problem when its target cannot be reached.
fn resolve(path: &Path, file_type: FileType, scan: &mut DirScan) -> Kind {
    let kind = |file_type: FileType| {
        if file_type.is_dir() {
            Kind::Dir
        } else if file_type.is_file() {
            Kind::File
        } else {
            Kind::Special
        }
    };
    if !file_type.is_symlink() {
        return kind(file_type);
    }
    match std::fs::metadata(path) {
        Ok(target) => {
            scan.links.push(path.to_owned());
            kind(target.file_type())
        }
        Err(error) => {
            let target = std::fs::read_link(path)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".to_owned());
            scan.problems
                .push(if error.kind() == std::io::ErrorKind::NotFound {
                    format!(
                        "{}: dangling symbolic link to {target} (its target does not exist)",
                        path.display()
                    )
                } else {
                    format!(
                        "{}: symbolic link to {target} cannot be followed: {error}",
                        path.display()
                    )
                });
            Kind::Broken
        }
    }
}

/// Why a FIFO, socket or device is skipped.
fn special(path: &Path) -> String {
    format!(
        "{}: ignored: not a regular file or a directory",
        path.display()
    )
}

/// The entries of `dir` that are not quietly ignored, sorted by name so
/// that problems (and which of two clashing endpoints wins) do not depend
/// on the file system's order.
fn entries(dir: &Path) -> std::io::Result<Vec<(String, PathBuf, FileType)>> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if ignored(&name) {
            continue;
        }
        entries.push((name, entry.path(), entry.file_type()?));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(entries)
}

/// Lists the components under `dir`. `known` are the endpoints the registry
/// has now: of two directories whose names differ only in case (one topic to
/// Service Bus), the known one keeps serving, else the first by name.
pub(crate) fn scan(dir: &Path, known: &BTreeSet<&str>) -> std::io::Result<DirScan> {
    let mut scan = DirScan::default();
    let mut endpoints: Vec<(String, PathBuf)> = Vec::new();
    for (name, path, file_type) in entries(dir)? {
        match resolve(&path, file_type, &mut scan) {
            Kind::Broken => {}
            Kind::Special => scan.problems.push(special(&path)),
            Kind::Dir => match nimbus_wire::topology::check_endpoint_name(&name) {
                Ok(()) => endpoints.push((name, path)),
                Err(error) => scan
                    .problems
                    .push(format!("{}: ignored: {error}", path.display())),
            },
            Kind::File if name.to_ascii_lowercase().ends_with(".wasm") => {
                scan.problems.push(format!(
                    "{}: a component must be inside an endpoint directory, e.g. {}",
                    path.display(),
                    dir.join("<endpoint>").join(&name).display()
                ));
            }
            Kind::File => scan.problems.push(format!(
                "{}: ignored: only endpoint directories belong in the handlers directory",
                path.display()
            )),
        }
    }
    for (name, path) in without_case_clashes(endpoints, known, &mut scan.problems) {
        // One endpoint's unreadable directory must not hold up the others'
        // swaps, nor unregister its own handlers: a permissions slip while
        // deploying is fixed in place, and the versions loaded keep serving.
        let mut endpoint = DirScan::default();
        match scan_endpoint(&name, &path, &mut endpoint) {
            Ok(()) => scan.absorb(endpoint),
            Err(error) => {
                scan.problems.push(format!(
                    "{}: cannot be read ({error}); endpoint '{name}' keeps serving the \
                     handlers it had until it can be read again",
                    path.display()
                ));
                scan.unreadable.insert(name);
            }
        }
    }
    Ok(scan)
}

/// Drops every endpoint whose name equals another's ignoring case, keeping
/// one per name: Service Bus entity names ignore case, so both would be one
/// topic and the topology refuses them (which would stop provisioning for
/// every endpoint). The one kept is the one serving now, so adding
/// `Billing` beside a running `billing` cannot unregister it.
fn without_case_clashes(
    endpoints: Vec<(String, PathBuf)>,
    known: &BTreeSet<&str>,
    problems: &mut Vec<String>,
) -> Vec<(String, PathBuf)> {
    let mut groups: BTreeMap<String, Vec<(String, PathBuf)>> = BTreeMap::new();
    for (name, path) in endpoints {
        groups
            .entry(name.to_ascii_lowercase())
            .or_default()
            .push((name, path));
    }
    let mut kept = Vec::new();
    for (_, mut group) in groups {
        // `group` is sorted by name (`entries` sorted them).
        let keep = group
            .iter()
            .position(|(name, _)| known.contains(name.as_str()))
            .unwrap_or(0);
        let winner = group.swap_remove(keep);
        for (name, path) in &group {
            problems.push(format!(
                "{}: ignored: endpoint name '{name}' is the same as '{}' to Service Bus \
                 (names ignore case), and '{}' is used; rename or remove one",
                path.display(),
                winner.0,
                winner.0
            ));
        }
        kept.push(winner);
    }
    kept.sort_by(|a, b| a.0.cmp(&b.0));
    kept
}

fn scan_endpoint(endpoint: &str, dir: &Path, scan: &mut DirScan) -> std::io::Result<()> {
    let mut manifests = Vec::new();
    for (name, path, file_type) in entries(dir)? {
        let kind = resolve(&path, file_type, scan);
        match kind {
            Kind::Dir => {
                scan.problems.push(format!(
                    "{}: ignored: an endpoint directory holds components and manifests; \
                     its subdirectories are not read",
                    path.display()
                ));
                continue;
            }
            Kind::Special => {
                scan.problems.push(special(&path));
                continue;
            }
            Kind::File | Kind::Broken => {}
        }
        if let Some(handler) = name.strip_suffix(".wasm") {
            // A broken link is still this handler's component: it fails to
            // read like a half-deployed file, so the version serving now
            // keeps serving instead of being unregistered.
            scan.components.insert(
                HandlerKey {
                    endpoint: endpoint.to_owned(),
                    handler: handler.to_owned(),
                },
                path,
            );
        } else if matches!(kind, Kind::Broken) {
            // Reported by `resolve`; a broken manifest link fails its
            // component's load when the registry reads it.
        } else if let Some(handler) = name.strip_suffix(".toml") {
            manifests.push((handler.to_owned(), path));
        } else {
            let lower = name.to_ascii_lowercase();
            let why = if lower.ends_with(".wasm") {
                "the extension of a component is `.wasm`, in lower case"
            } else if lower.ends_with(".toml") {
                "the extension of a manifest is `.toml`, in lower case"
            } else {
                "not a component (`.wasm`) or a manifest (`.toml`)"
            };
            scan.problems
                .push(format!("{}: ignored: {why}", path.display()));
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

    fn scan_of(root: &Path) -> DirScan {
        scan(root, &BTreeSet::new()).expect("scan")
    }

    #[test]
    fn components_are_found_per_endpoint_and_strays_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for endpoint in ["billing", "warehouse", "bad name", "billing/sub"] {
            std::fs::create_dir_all(root.join(endpoint)).expect("mkdir");
        }
        for file in [
            "billing/orders.wasm",
            "billing/orders.toml",
            "billing/.orders.wasm.tmp",
            "billing/orders.toml~",
            "billing/.DS_Store",
            "billing/README.md",
            "billing/Echo.WASM",
            "billing/Echo.Toml",
            "billing/lonely.toml",
            "billing/sub/noop.wasm",
            "warehouse/orders.wasm",
            "stray.wasm",
            "notes.txt",
            ".hidden",
        ] {
            std::fs::write(root.join(file), b"x").expect("write");
        }
        let scan = scan_of(root);
        let keys: Vec<String> = scan.components.keys().map(ToString::to_string).collect();
        assert_eq!(keys, ["billing/orders", "warehouse/orders"]);
        let problem = |needle: &str| {
            scan.problems
                .iter()
                .find(|p| p.contains(needle))
                .unwrap_or_else(|| panic!("no problem about {needle}: {:?}", scan.problems))
        };
        assert!(problem("stray.wasm").contains("inside an endpoint directory"));
        assert!(problem("notes.txt").contains("only endpoint directories"));
        assert!(problem("lonely.toml").contains("manifest without a component"));
        assert!(problem("bad name").contains("only letters, digits"));
        assert!(problem("README.md").contains("not a component"));
        assert!(problem("Echo.WASM").contains("`.wasm`, in lower case"));
        assert!(problem("Echo.Toml").contains("`.toml`, in lower case"));
        assert!(problem("sub: ignored").contains("subdirectories are not read"));
        assert_eq!(scan.problems.len(), 8, "{:#?}", scan.problems);
        assert!(scan.links.is_empty());
    }

    #[test]
    fn names_the_topology_refuses_are_problems_not_endpoints() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let long = "a".repeat(47);
        for endpoint in [
            "billing",
            "Resolver",
            "retry",
            "fwd-x",
            &long,
            &"b".repeat(46),
        ] {
            std::fs::create_dir_all(root.join(endpoint)).expect("mkdir");
            std::fs::write(root.join(endpoint).join("h.wasm"), b"x").expect("write");
        }
        let scan = scan_of(root);
        let endpoints: BTreeSet<&str> = scan
            .components
            .keys()
            .map(|k| k.endpoint.as_str())
            .collect();
        assert_eq!(
            endpoints,
            BTreeSet::from(["billing", "b".repeat(46).as_str()])
        );
        assert_eq!(scan.problems.len(), 4, "{:#?}", scan.problems);
        for (name, reason) in [
            ("Resolver", "'Resolver' is a NimBus fixed id"),
            ("retry", "'Retry' is a NimBus fixed id"),
            ("fwd-x", "reserved for self-forwarders"),
            (long.as_str(), "1 to 46 characters"),
        ] {
            assert!(
                scan.problems.iter().any(|p| p
                    .contains(&format!("endpoint name '{name}' is invalid"))
                    && p.contains(reason)),
                "{name}: {:#?}",
                scan.problems
            );
        }
    }

    #[test]
    fn of_endpoints_that_differ_in_case_one_is_kept_the_serving_one_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for endpoint in ["billing", "Billing", "BILLING"] {
            std::fs::create_dir_all(root.join(endpoint)).expect("mkdir");
            std::fs::write(root.join(endpoint).join("h.wasm"), b"x").expect("write");
        }
        let endpoints = |scan: &DirScan| -> Vec<String> {
            scan.components.keys().map(|k| k.endpoint.clone()).collect()
        };

        // Nothing serves yet: the first by name, whatever the directory order.
        let fresh = scan_of(root);
        assert_eq!(endpoints(&fresh), ["BILLING"]);
        assert_eq!(fresh.problems.len(), 2, "{:#?}", fresh.problems);
        assert!(
            fresh
                .problems
                .iter()
                .all(|p| p.contains("names ignore case") && p.contains("'BILLING' is used")),
            "{:#?}",
            fresh.problems
        );

        let serving = scan(root, &BTreeSet::from(["billing"])).expect("scan");
        assert_eq!(endpoints(&serving), ["billing"]);
        assert!(
            serving
                .problems
                .iter()
                .any(|p| p.contains("endpoint name 'Billing' is the same as 'billing'")),
            "{:#?}",
            serving.problems
        );
    }
}
