//! What the registry makes of the handlers directory's layout: endpoint
//! names the topology would refuse, symbolic links, stray files. Driven by
//! explicit reconciles (the watcher's side is in `hot_swap.rs`).

use crate::support;

use std::path::Path;

use nimbus_handler::Outcome;
use nimbus_sandbox::{Digest, Registry, Snapshot};
use nimbus_wire::topology::{Endpoint, Topology};
use support::{HandlersDir, event, guest, sandbox};

fn digest_of(crate_name: &str) -> Digest {
    Digest::of(&std::fs::read(guest(crate_name)).expect("read guest"))
}

fn problem<'a>(snapshot: &'a Snapshot, needle: &str) -> &'a str {
    snapshot
        .problems()
        .iter()
        .find(|p| p.contains(needle))
        .unwrap_or_else(|| panic!("no problem about {needle}: {:#?}", snapshot.problems()))
}

/// The topology the host would provision for `snapshot`, as it builds it.
fn topology_of(snapshot: &Snapshot) -> Topology {
    snapshot
        .endpoints()
        .fold(Topology::new(), |topology, name| {
            topology.endpoint(Endpoint::new(name).consumes(snapshot.event_types(name)))
        })
}

#[test]
fn endpoint_directories_the_topology_refuses_are_problems_and_the_others_serve() {
    let dir = HandlersDir::new();
    let too_long = "e".repeat(48);
    dir.install("billing", "noop", &guest("noop"));
    for endpoint in ["Resolver", "Retry", "fwd-x", too_long.as_str()] {
        dir.install(endpoint, "noop", &guest("noop"));
    }
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let snapshot = registry.snapshot();

    assert_eq!(snapshot.endpoints().collect::<Vec<_>>(), ["billing"]);
    assert!(
        snapshot.handlers().all(|s| s.key.endpoint == "billing"),
        "{:?}",
        snapshot
            .handlers()
            .map(|s| s.key.to_string())
            .collect::<Vec<_>>()
    );
    assert!(problem(&snapshot, "Resolver").contains("'Resolver' is a NimBus fixed id"));
    assert!(problem(&snapshot, "Retry").contains("'Retry' is a NimBus fixed id"));
    assert!(problem(&snapshot, "fwd-x").contains("reserved for self-forwarders"));
    assert!(problem(&snapshot, &too_long).contains("must be 1 to 46 characters"));
    topology_of(&snapshot)
        .validate()
        .expect("what the registry serves can be provisioned");
}

#[test]
fn an_endpoint_differing_only_in_case_from_a_serving_one_is_a_problem_and_changes_nothing() {
    let dir = HandlersDir::new();
    dir.install("billing", "noop", &guest("noop"));
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let before = registry.snapshot();

    // `Billing` sorts before `billing`: being first by name must not be
    // enough to displace the endpoint serving now.
    dir.install("Billing", "swap", &guest("swap-v1"));
    registry.reconcile().expect("reconcile");
    let snapshot = registry.snapshot();
    assert_eq!(snapshot.endpoints().collect::<Vec<_>>(), ["billing"]);
    assert!(snapshot.lookup("billing", "Noop").is_some());
    assert!(snapshot.lookup("Billing", "Swap").is_none());
    assert!(problem(&snapshot, "Billing").contains(
        "endpoint name 'Billing' is the same as 'billing' to Service Bus (names ignore case)"
    ));
    assert!(
        snapshot.generation() > before.generation(),
        "a new problem is a change"
    );
    topology_of(&snapshot).validate().expect("provisionable");

    // Opened afresh with both present, the choice does not depend on the
    // directory's order, and it is the same every time.
    for _ in 0..2 {
        let reopened = Registry::open(sandbox(), dir.path()).expect("reopens");
        let snapshot = reopened.snapshot();
        assert_eq!(snapshot.endpoints().collect::<Vec<_>>(), ["Billing"]);
        assert!(problem(&snapshot, "billing").contains("'Billing' is used"));
        topology_of(&snapshot).validate().expect("provisionable");
    }
}

#[test]
fn stray_files_and_subdirectories_of_an_endpoint_are_reported_and_private_names_are_not() {
    let dir = HandlersDir::new();
    dir.install("billing", "noop", &guest("noop"));
    let billing = dir.path().join("billing");
    std::fs::create_dir(billing.join("sub")).expect("mkdir");
    std::fs::copy(guest("noop"), billing.join("sub/noop.wasm")).expect("copy");
    std::fs::copy(guest("echo"), billing.join("Echo.WASM")).expect("copy");
    std::fs::write(billing.join("README.txt"), "notes").expect("write");
    // Quiet: temporary, swap and backup files, Finder's droppings.
    for quiet in [
        ".DS_Store",
        ".noop.toml.swp",
        "noop.toml~",
        ".echo.wasm.tmp",
    ] {
        std::fs::write(billing.join(quiet), "x").expect("write");
    }
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let snapshot = registry.snapshot();

    assert_eq!(
        snapshot
            .handlers()
            .map(|s| s.key.to_string())
            .collect::<Vec<_>>(),
        ["billing/noop"]
    );
    assert!(problem(&snapshot, "sub: ignored").contains("its subdirectories are not read"));
    assert!(problem(&snapshot, "Echo.WASM").contains("`.wasm`, in lower case"));
    assert!(problem(&snapshot, "README.txt").contains("not a component (`.wasm`) or a manifest"));
    assert_eq!(snapshot.problems().len(), 3, "{:#?}", snapshot.problems());
}

#[test]
fn a_file_that_is_not_a_component_fails_with_one_plain_sentence() {
    let dir = HandlersDir::new();
    // An ELF header: the parser's own message prints the expected and found
    // magic bytes as Debug arrays.
    dir.install_bytes("ep", "random", &[0x7f, 0x45, 0x4c, 0x46, 2, 1, 1, 0, 9, 9]);
    dir.install_bytes("ep", "empty", b"");
    // The smallest core module: magic and version 1, no sections.
    dir.install_bytes("ep", "core", b"\0asm\x01\0\0\0");
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let snapshot = registry.snapshot();
    let error = |handler: &str| {
        snapshot
            .handlers()
            .find(|s| s.key.handler == handler)
            .and_then(|s| s.last_error.clone())
            .expect("a load error")
    };
    assert_eq!(
        error("random"),
        "random: not a valid handler component: not a WebAssembly file (it does not start with \\0asm)"
    );
    assert_eq!(
        error("empty"),
        "empty: not a valid handler component: the file is empty"
    );
    let core = error("core");
    assert!(
        core.starts_with(
            "core: not a valid handler component: a core WebAssembly module, not a component"
        ) && core.contains("wasm32-wasip2"),
        "{core}"
    );
}

#[cfg(unix)]
mod symlinks {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A directory outside the handlers directory holding `crate_name`'s
    /// component under `file`, as a deployment tool or a volume would.
    fn outside(root: &Path, file: &str, crate_name: &str) -> std::path::PathBuf {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::copy(guest(crate_name), &path).expect("copy");
        path
    }

    #[test]
    fn linked_components_manifests_and_endpoint_directories_are_followed() {
        let dir = HandlersDir::new();
        let elsewhere = tempfile::tempdir().expect("tempdir");
        let store = elsewhere.path();
        std::fs::create_dir(dir.path().join("billing")).expect("mkdir");
        symlink(
            outside(store, "noop.wasm", "noop"),
            dir.component_path("billing", "noop"),
        )
        .expect("link component");
        std::fs::write(store.join("noop.toml"), "[config]\ngreeting = \"linked\"\n")
            .expect("write manifest");
        symlink(
            store.join("noop.toml"),
            dir.path().join("billing/noop.toml"),
        )
        .expect("link manifest");
        outside(store, "audit/swap.wasm", "swap-v1");
        symlink(store.join("audit"), dir.path().join("audit")).expect("link endpoint");

        let registry = Registry::open(sandbox(), dir.path()).expect("opens");
        let snapshot = registry.snapshot();
        assert!(snapshot.problems().is_empty(), "{:#?}", snapshot.problems());
        let noop = snapshot
            .lookup("billing", "Noop")
            .expect("linked component");
        assert_eq!(
            noop.config().get("greeting").map(String::as_str),
            Some("linked"),
            "the linked manifest applies"
        );
        assert_eq!(
            noop.invoke(event("Noop", "{}")).report.result,
            Ok(Outcome::Completed)
        );
        assert!(
            snapshot.lookup("audit", "Swap").is_some(),
            "linked endpoint directory"
        );
    }

    #[test]
    fn replacing_a_link_swaps_the_version_and_a_dangling_one_keeps_the_old_serving() {
        let dir = HandlersDir::new();
        let elsewhere = tempfile::tempdir().expect("tempdir");
        let v1 = outside(elsewhere.path(), "v1.wasm", "swap-v1");
        let v2 = outside(elsewhere.path(), "v2.wasm", "swap-v2");
        std::fs::create_dir(dir.path().join("ep")).expect("mkdir");
        let link = dir.component_path("ep", "swap");
        symlink(&v1, &link).expect("link");
        let registry = Registry::open(sandbox(), dir.path()).expect("opens");
        assert_eq!(
            registry.lookup("ep", "Swap").expect("v1").digest(),
            digest_of("swap-v1")
        );

        // `ln -sfn v2.wasm swap.wasm`, atomically: link beside, rename over.
        let temp = dir.path().join("ep/.swap.wasm.link");
        symlink(&v2, &temp).expect("new link");
        std::fs::rename(&temp, &link).expect("replace link");
        registry.reconcile().expect("reconcile");
        let snapshot = registry.snapshot();
        assert_eq!(
            snapshot.lookup("ep", "Swap").expect("v2").digest(),
            digest_of("swap-v2")
        );
        assert!(snapshot.problems().is_empty(), "{:#?}", snapshot.problems());

        // Its target removed: reported, and v2 keeps serving rather than
        // the handler being unregistered.
        std::fs::remove_file(&v2).expect("remove target");
        registry.reconcile().expect("reconcile");
        let snapshot = registry.snapshot();
        assert!(
            problem(&snapshot, "swap.wasm").contains("dangling symbolic link to"),
            "{:#?}",
            snapshot.problems()
        );
        assert_eq!(
            snapshot
                .lookup("ep", "Swap")
                .expect("still served")
                .digest(),
            digest_of("swap-v2")
        );
        let status = snapshot.handlers().next().expect("status");
        assert!(
            status
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("cannot read component")),
            "{:?}",
            status.last_error
        );
    }

    #[test]
    fn a_dangling_manifest_link_is_a_load_error_not_default_settings() {
        let dir = HandlersDir::new();
        dir.install("ep", "noop", &guest("noop"));
        dir.manifest("ep", "noop", "[config]\ngreeting = \"hello\"\n");
        let registry = Registry::open(sandbox(), dir.path()).expect("opens");
        let manifest = dir.path().join("ep/noop.toml");
        std::fs::remove_file(&manifest).expect("remove manifest");
        symlink(dir.path().join("ep/missing.toml"), &manifest).expect("dangling link");
        registry.reconcile().expect("reconcile");

        let snapshot = registry.snapshot();
        assert!(problem(&snapshot, "noop.toml").contains("dangling symbolic link"));
        let serving = snapshot.lookup("ep", "Noop").expect("still served");
        assert_eq!(
            serving.config().get("greeting").map(String::as_str),
            Some("hello"),
            "the version with the manifest's settings keeps serving"
        );
        let error = snapshot
            .handlers()
            .next()
            .and_then(|s| s.last_error.clone())
            .expect("a load error");
        assert!(
            error.contains("noop.toml") && error.contains("target does not exist"),
            "{error}"
        );
    }

    #[test]
    fn a_dangling_endpoint_link_is_a_problem_naming_it() {
        let dir = HandlersDir::new();
        dir.install("billing", "noop", &guest("noop"));
        symlink(dir.path().join("gone"), dir.path().join("audit")).expect("dangling link");
        let registry = Registry::open(sandbox(), dir.path()).expect("opens");
        let snapshot = registry.snapshot();
        assert!(problem(&snapshot, "audit").contains("dangling symbolic link to"));
        assert!(snapshot.lookup("billing", "Noop").is_some());
    }
}
