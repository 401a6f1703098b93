//! Hot swap through the directory watcher, under concurrent load.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nimbus_handler::Outcome;
use nimbus_sandbox::{Digest, Registry};
use support::{HandlersDir, event, guest, sandbox, sandbox_with, wait_for};

const WORKERS: usize = 4;

fn digest_of(crate_name: &str) -> Digest {
    Digest::of(&std::fs::read(guest(crate_name)).expect("read guest"))
}

/// The `Version` the swap guests put in their follow-up.
fn served_version(invocation: &nimbus_sandbox::Invocation) -> u64 {
    let follow_up = invocation
        .report
        .follow_ups
        .first()
        .expect("a SwapServed follow-up");
    let payload: serde_json::Value = serde_json::from_str(&follow_up.payload).expect("JSON");
    payload["Version"].as_u64().expect("Version")
}

#[test]
fn hot_swap_under_concurrent_invocations_fails_none_and_each_runs_on_exactly_one_version() {
    let dir = HandlersDir::new();
    dir.install("ep", "swap", &guest("swap-v1"));
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let _watching = registry.watch().expect("watch");
    let (v1, v2) = (digest_of("swap-v1"), digest_of("swap-v2"));

    let stop = Arc::new(AtomicBool::new(false));
    let seen_v2 = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let registry = Arc::clone(&registry);
            let stop = Arc::clone(&stop);
            let seen_v2 = Arc::clone(&seen_v2);
            std::thread::spawn(move || {
                let mut runs = Vec::new();
                let mut counted = false;
                while !stop.load(Ordering::SeqCst) {
                    let version = registry.lookup("ep", "Swap").expect("always served");
                    let mut event = event("Swap", "{}");
                    event.event_id = format!("w{worker}-{}", runs.len());
                    let invocation = version.invoke(event);
                    assert_eq!(
                        invocation.digest,
                        version.digest(),
                        "reports the version it ran on"
                    );
                    if invocation.digest != v1 && !counted {
                        counted = true;
                        seen_v2.fetch_add(1, Ordering::SeqCst);
                    }
                    runs.push(invocation);
                }
                runs
            })
        })
        .collect();

    // Swap while the workers run.
    dir.install("ep", "swap", &guest("swap-v2"));
    wait_for(&registry, "swap-v2 serving", |r| {
        r.lookup("ep", "Swap").is_some_and(|v| v.digest() == v2)
    });
    // Let every worker run on the new version before stopping.
    // (A worker that died, e.g. on a failed assertion, ends the wait too;
    // its panic is reported by the join below.)
    while seen_v2.load(Ordering::SeqCst) < WORKERS && !workers.iter().any(|w| w.is_finished()) {
        std::thread::yield_now();
    }
    stop.store(true, Ordering::SeqCst);

    let mut total = 0;
    for worker in workers {
        let runs = worker.join().expect("worker");
        total += runs.len();
        let mut switched = false;
        for invocation in &runs {
            assert_eq!(
                invocation.report.result,
                Ok(Outcome::Completed),
                "no invocation fails"
            );
            let version = served_version(invocation);
            if invocation.digest == v1 {
                assert_eq!(version, 1, "v1's digest with v2's behaviour");
                assert!(!switched, "never back to v1 after v2");
            } else {
                assert_eq!(invocation.digest, v2);
                assert_eq!(version, 2, "v2's digest with v1's behaviour");
                switched = true;
            }
        }
        assert!(switched, "every worker observed the switch");
        assert_eq!(runs.first().map(|i| i.digest), Some(v1), "started on v1");
    }
    assert!(total >= 2 * WORKERS);
    let status = registry.snapshot();
    let status = status.handlers().next().expect("status");
    assert_eq!(status.swaps, 2, "initial load plus one swap");
    assert!(status.last_swap.is_some());
}

#[test]
fn the_watcher_keeps_the_old_version_when_a_broken_file_arrives_and_reports_why() {
    let dir = HandlersDir::new();
    dir.install("ep", "swap", &guest("swap-v1"));
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let _watching = registry.watch().expect("watch");
    dir.install_bytes("ep", "swap", b"not wasm at all");
    wait_for(&registry, "the load error to be reported", |r| {
        r.snapshot().handlers().any(|s| s.last_error.is_some())
    });
    let serving = registry.lookup("ep", "Swap").expect("still served");
    assert_eq!(serving.digest(), digest_of("swap-v1"));
    assert_eq!(
        serving.invoke(event("Swap", "{}")).report.result,
        Ok(Outcome::Completed)
    );
}

#[test]
fn the_watcher_unregisters_a_deleted_component_and_registers_a_new_endpoint() {
    let dir = HandlersDir::new();
    dir.install("ep", "swap", &guest("swap-v1"));
    // Nothing changes in the directory after the deletion: the watcher
    // wakes for the grace's end on its own.
    let sandbox = sandbox_with(None, |c| c.removal_grace = Duration::from_secs(2));
    let registry = Registry::open(sandbox, dir.path()).expect("opens");
    let mut changes = registry.subscribe();
    let _watching = registry.watch().expect("watch");

    dir.install("audit", "noop", &guest("noop"));
    wait_for(&registry, "the new endpoint", |r| {
        r.lookup("audit", "Noop").is_some()
    });
    assert!(
        changes.has_changed().expect("sender alive"),
        "a change notification was sent"
    );
    assert!(
        changes
            .borrow_and_update()
            .lookup("audit", "Noop")
            .is_some()
    );

    dir.remove("ep", "swap");
    wait_for(&registry, "Swap to be marked for removal, serving", |r| {
        let snapshot = r.snapshot();
        snapshot.handlers().any(|s| s.state() == "removing")
            && snapshot.lookup("ep", "Swap").is_some()
    });
    wait_for(&registry, "Swap to be unregistered", |r| {
        r.lookup("ep", "Swap").is_none()
    });
    assert!(registry.lookup("audit", "Noop").is_some());
}

#[test]
fn the_watcher_reloads_when_only_the_manifest_changes() {
    let dir = HandlersDir::new();
    dir.install("ep", "noop", &guest("noop"));
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let _watching = registry.watch().expect("watch");
    dir.manifest("ep", "noop", "[config]\ngreeting = \"hello\"\n");
    wait_for(&registry, "the manifest's config", |r| {
        r.lookup("ep", "Noop")
            .is_some_and(|v| v.config().get("greeting").is_some_and(|g| g == "hello"))
    });
}

#[cfg(unix)]
mod symlinks {
    use std::os::unix::fs::symlink;
    use std::path::{Path, PathBuf};

    use super::*;

    /// Copies `crate_name`'s component to `dir/file`, by write then rename.
    fn put(dir: &Path, file: &str, crate_name: &str) -> PathBuf {
        std::fs::create_dir_all(dir).expect("mkdir");
        let temp = dir.join(format!(".{file}.tmp"));
        std::fs::copy(guest(crate_name), &temp).expect("copy");
        let path = dir.join(file);
        std::fs::rename(&temp, &path).expect("rename");
        path
    }

    #[test]
    fn the_watcher_swaps_when_ln_sfn_replaces_the_link() {
        let dir = HandlersDir::new();
        let store = tempfile::tempdir().expect("tempdir");
        let v1 = put(store.path(), "v1.wasm", "swap-v1");
        let v2 = put(store.path(), "v2.wasm", "swap-v2");
        std::fs::create_dir(dir.path().join("ep")).expect("mkdir");
        let link = dir.component_path("ep", "swap");
        symlink(&v1, &link).expect("link");
        let registry = Registry::open(sandbox(), dir.path()).expect("opens");
        assert_eq!(
            registry.lookup("ep", "Swap").expect("v1").digest(),
            digest_of("swap-v1")
        );
        let _watching = registry.watch().expect("watch");

        let ln = std::process::Command::new("ln")
            .arg("-sfn")
            .arg(&v2)
            .arg(&link)
            .status()
            .expect("run ln");
        assert!(ln.success());
        wait_for(&registry, "v2 to serve through the replaced link", |r| {
            r.lookup("ep", "Swap")
                .is_some_and(|v| v.digest() == digest_of("swap-v2"))
        });
        assert!(registry.snapshot().problems().is_empty());
    }

    #[test]
    fn the_watcher_sees_changes_behind_links_to_targets_outside_the_directory() {
        let dir = HandlersDir::new();
        let store = tempfile::tempdir().expect("tempdir");
        let component = put(store.path(), "swap.wasm", "swap-v1");
        std::fs::create_dir(dir.path().join("ep")).expect("mkdir");
        symlink(&component, dir.component_path("ep", "swap")).expect("link");
        let registry = Registry::open(sandbox(), dir.path()).expect("opens");
        let _watching = registry.watch().expect("watch");

        // An endpoint directory linked in while watching: the link's
        // creation is seen, and so must be what is added behind it later.
        let audit = store.path().join("audit");
        put(&audit, "noop.wasm", "noop");
        symlink(&audit, dir.path().join("audit")).expect("link endpoint");
        wait_for(&registry, "the linked endpoint", |r| {
            r.lookup("audit", "Noop").is_some()
        });
        put(&audit, "swap.wasm", "swap-v2");
        wait_for(&registry, "a component added behind the link", |r| {
            r.lookup("audit", "Swap").is_some()
        });

        // A linked component rewritten in place, outside the directory.
        std::fs::write(&component, std::fs::read(guest("swap-v2")).expect("read"))
            .expect("rewrite");
        wait_for(&registry, "the rewritten target to serve", |r| {
            r.lookup("ep", "Swap")
                .is_some_and(|v| v.digest() == digest_of("swap-v2"))
        });
    }

    #[test]
    fn the_watcher_sees_every_rebuild_of_a_linked_file_renamed_over_its_target() {
        let dir = HandlersDir::new();
        let store = tempfile::tempdir().expect("tempdir");
        let component = put(store.path(), "swap.wasm", "swap-v1");
        std::fs::create_dir(dir.path().join("ep")).expect("mkdir");
        symlink(&component, dir.component_path("ep", "swap")).expect("link");
        let registry = Registry::open(sandbox(), dir.path()).expect("opens");
        assert_eq!(
            registry.lookup("ep", "Swap").expect("v1").digest(),
            digest_of("swap-v1")
        );
        let _watching = registry.watch().expect("watch");

        // Each rebuild renames a new file over the target, as build tools
        // and deploy scripts do: a new inode every time, so a watch on the
        // file itself would see the first rebuild and none after it.
        for crate_name in ["swap-v2", "swap-v1"] {
            put(store.path(), "swap.wasm", crate_name);
            wait_for(
                &registry,
                &format!("{crate_name} to serve through the link"),
                |r| {
                    r.lookup("ep", "Swap")
                        .is_some_and(|v| v.digest() == digest_of(crate_name))
                },
            );
        }
        assert!(registry.snapshot().problems().is_empty());
    }

    #[test]
    fn the_watcher_sees_changes_behind_an_endpoint_linked_before_it_started() {
        let dir = HandlersDir::new();
        let store = tempfile::tempdir().expect("tempdir");
        let audit = store.path().join("audit");
        put(&audit, "noop.wasm", "noop");
        symlink(&audit, dir.path().join("audit")).expect("link endpoint");
        let registry = Registry::open(sandbox(), dir.path()).expect("opens");
        assert!(registry.lookup("audit", "Noop").is_some());
        let _watching = registry.watch().expect("watch");

        put(&audit, "swap.wasm", "swap-v1");
        wait_for(&registry, "a component added behind the link", |r| {
            r.lookup("audit", "Swap").is_some()
        });
    }
}
