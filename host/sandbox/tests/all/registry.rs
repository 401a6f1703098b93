//! The handlers directory and the registry, driven by explicit reconciles
//! (the watcher is tested in `hot_swap.rs`).

use crate::support;

use std::time::Duration;

use nimbus_handler::Outcome;
use nimbus_sandbox::{ArtifactSource, Digest, Registry};
use support::{HandlersDir, event, guest, sandbox, sandbox_with};

fn digest_of(crate_name: &str) -> Digest {
    Digest::of(&std::fs::read(guest(crate_name)).expect("read guest"))
}

#[test]
fn events_are_dispatched_by_endpoint_and_event_type() {
    let dir = HandlersDir::new();
    dir.install("billing", "orders", &guest("orders"));
    dir.install("billing", "noop", &guest("noop"));
    dir.install("warehouse", "swap", &guest("swap-v1"));
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let snapshot = registry.snapshot();
    assert_eq!(
        snapshot.lookup("billing", "OrderPlaced").map(|v| v.name()),
        Some("orders")
    );
    assert_eq!(
        snapshot.lookup("billing", "Noop").map(|v| v.name()),
        Some("noop")
    );
    assert_eq!(
        snapshot.lookup("warehouse", "Swap").map(|v| v.name()),
        Some("swap")
    );
    assert!(snapshot.lookup("billing", "Swap").is_none());
    assert!(snapshot.lookup("warehouse", "Noop").is_none());
    assert_eq!(snapshot.event_types("billing"), ["Noop", "OrderPlaced"]);

    let noop = registry.lookup("billing", "Noop").expect("noop");
    // Its log lines name the endpoint: one component may serve several.
    assert_eq!(noop.endpoint(), Some("billing"));
    assert_eq!(
        noop.invoke(event("Noop", "{}")).report.result,
        Ok(Outcome::Completed)
    );
}

#[test]
fn one_event_type_in_two_endpoints_is_fan_out() {
    let dir = HandlersDir::new();
    dir.install("billing", "noop", &guest("noop"));
    dir.install("audit", "noop", &guest("noop"));
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let snapshot = registry.snapshot();
    assert_eq!(snapshot.endpoints_for("Noop"), ["audit", "billing"]);
    assert!(snapshot.handlers().all(|s| s.last_error.is_none()));
}

#[test]
fn two_components_of_one_endpoint_claiming_one_event_type_is_an_error_and_the_first_keeps_serving()
{
    let dir = HandlersDir::new();
    dir.install("ep", "a-swap", &guest("swap-v1"));
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    dir.install("ep", "b-swap", &guest("swap-v2"));
    registry.reconcile().expect("reconcile");

    let snapshot = registry.snapshot();
    let serving = snapshot.lookup("ep", "Swap").expect("still served");
    assert_eq!(serving.name(), "a-swap");
    assert_eq!(serving.digest(), digest_of("swap-v1"));
    let rejected = snapshot
        .handlers()
        .find(|s| s.key.handler == "b-swap")
        .expect("status of the newcomer");
    assert!(rejected.serving.is_none());
    let error = rejected.last_error.as_deref().expect("an error");
    assert!(
        error.contains("`Swap`") && error.contains("a-swap") && error.contains("b-swap"),
        "{error}"
    );
}

#[test]
fn an_invalid_file_dropped_in_leaves_the_old_version_serving() {
    let dir = HandlersDir::new();
    dir.install("ep", "swap", &guest("swap-v1"));
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    dir.install_bytes("ep", "swap", b"\0asm this is not a component");
    registry.reconcile().expect("reconcile");

    let snapshot = registry.snapshot();
    let serving = snapshot.lookup("ep", "Swap").expect("still served");
    assert_eq!(serving.digest(), digest_of("swap-v1"));
    let status = snapshot.handlers().next().expect("status");
    assert!(
        status
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("not a valid handler component")),
        "{:?}",
        status.last_error
    );
    let invocation = serving.invoke(event("Swap", "{}"));
    assert_eq!(invocation.report.result, Ok(Outcome::Completed));
    let (swaps, last_swap) = (status.swaps, status.last_swap);

    // The good file put back: the error clears, and no swap is counted,
    // since the version serving never changed.
    dir.install("ep", "swap", &guest("swap-v1"));
    registry.reconcile().expect("reconcile");
    let snapshot = registry.snapshot();
    let status = snapshot.handlers().next().expect("status");
    assert_eq!(status.last_error, None);
    assert_eq!((status.swaps, status.last_swap), (swaps, last_swap));
    let serving = snapshot.lookup("ep", "Swap").expect("served");
    assert_eq!(serving.digest(), digest_of("swap-v1"));
}

/// Runs `f` on a thread of its own that cannot bypass file permissions:
/// these tests run as root, whose DAC override (a per-thread capability)
/// would read a mode-000 directory anyway. Dropping it for one thread leaves
/// the rest of the test binary as it was.
fn without_permission_override<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                for capability in [
                    caps::Capability::CAP_DAC_OVERRIDE,
                    caps::Capability::CAP_DAC_READ_SEARCH,
                ] {
                    // Not held (not root, or already dropped): nothing to drop.
                    if caps::has_cap(None, caps::CapSet::Effective, capability).unwrap_or(false) {
                        caps::drop(None, caps::CapSet::Effective, capability)
                            .expect("drop a capability this thread holds");
                    }
                }
                f()
            })
            .join()
            .expect("the thread without the override panicked")
    })
}

#[test]
fn an_unreadable_endpoint_directory_keeps_its_handlers_and_holds_up_no_other_endpoint() {
    use std::os::unix::fs::PermissionsExt;

    let dir = HandlersDir::new();
    dir.install("billing", "noop", &guest("noop"));
    dir.install("warehouse", "swap", &guest("swap-v1"));
    // Deleted at the end: unregistered at once, to see what was read.
    let registry = Registry::open(no_removal_grace(), dir.path()).expect("opens");
    let billing = dir.path().join("billing");
    std::fs::set_permissions(&billing, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    dir.install("warehouse", "swap", &guest("swap-v2"));

    let reconciled = without_permission_override(|| {
        assert!(
            std::fs::read_dir(&billing).is_err(),
            "the test cannot make a directory unreadable here"
        );
        registry.reconcile()
    });
    std::fs::set_permissions(&billing, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    reconciled.expect("one endpoint's directory does not fail the reconcile");

    let snapshot = registry.snapshot();
    assert_eq!(
        snapshot
            .lookup("warehouse", "Swap")
            .expect("served")
            .digest(),
        digest_of("swap-v2"),
        "the other endpoint's swap went ahead"
    );
    assert_eq!(
        snapshot
            .lookup("billing", "Noop")
            .expect("still served")
            .digest(),
        digest_of("noop"),
        "the unreadable endpoint's handler was unregistered"
    );
    let problem = snapshot
        .problems()
        .iter()
        .find(|p| p.contains("billing"))
        .expect("the unreadable directory is reported");
    assert!(
        problem.contains("cannot be read") && problem.contains("keeps serving"),
        "{problem}"
    );

    // Readable again: the problem goes, and what it holds is read.
    dir.remove("billing", "noop");
    registry.reconcile().expect("reconcile");
    let snapshot = registry.snapshot();
    assert!(snapshot.lookup("billing", "Noop").is_none());
    assert!(snapshot.problems().is_empty(), "{:?}", snapshot.problems());
}

#[test]
fn a_half_written_file_is_never_loaded_and_the_finished_one_is() {
    let dir = HandlersDir::new();
    let path = dir.install("ep", "swap", &guest("swap-v1"));
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let v2 = std::fs::read(guest("swap-v2")).expect("read");
    // An in-place write caught half-way.
    std::fs::write(&path, &v2[..v2.len() / 2]).expect("partial write");
    registry.reconcile().expect("reconcile");
    assert_eq!(
        registry.lookup("ep", "Swap").expect("served").digest(),
        digest_of("swap-v1")
    );
    std::fs::write(&path, &v2).expect("finish the write");
    registry.reconcile().expect("reconcile");
    let snapshot = registry.snapshot();
    assert_eq!(
        snapshot.lookup("ep", "Swap").expect("served").digest(),
        digest_of("swap-v2")
    );
    assert!(snapshot.handlers().all(|s| s.last_error.is_none()));
}

/// A sandbox that unregisters a deleted component at once.
fn no_removal_grace() -> nimbus_sandbox::Sandbox {
    sandbox_with(None, |c| c.removal_grace = Duration::ZERO)
}

#[test]
fn a_deleted_component_serves_through_the_grace_and_a_file_back_in_time_is_a_swap() {
    let dir = HandlersDir::new();
    dir.install("ep", "swap", &guest("swap-v1"));
    let grace = Duration::from_millis(200);
    let registry =
        Registry::open(sandbox_with(None, |c| c.removal_grace = grace), dir.path()).expect("opens");

    // Deleted, then a new version copied in within the grace: a swap.
    dir.remove("ep", "swap");
    registry.reconcile().expect("reconcile");
    let removing = registry.snapshot();
    let status = removing.handlers().next().expect("still listed");
    assert_eq!(status.state(), "removing");
    assert!(status.removing_at.is_some());
    assert_eq!(
        removing.lookup("ep", "Swap").expect("serves").digest(),
        digest_of("swap-v1")
    );
    dir.install("ep", "swap", &guest("swap-v2"));
    registry.reconcile().expect("reconcile");
    let swapped = registry.snapshot();
    let status = swapped.handlers().next().expect("listed");
    assert_eq!((status.state(), status.removing_at), ("serving", None));
    assert_eq!(
        swapped.lookup("ep", "Swap").expect("serves").digest(),
        digest_of("swap-v2")
    );

    // A broken file, then deleted for good: the load error went with the
    // file, and it is unregistered once the grace has passed.
    dir.install_bytes("ep", "swap", b"not wasm");
    registry.reconcile().expect("reconcile");
    assert_eq!(
        registry.snapshot().handlers().next().map(|s| s.state()),
        Some("serving-previous")
    );
    dir.remove("ep", "swap");
    registry.reconcile().expect("reconcile");
    let removing = registry.snapshot();
    let status = removing.handlers().next().expect("listed");
    assert_eq!((status.state(), &status.last_error), ("removing", &None));
    assert!(registry.lookup("ep", "Swap").is_some(), "within the grace");
    std::thread::sleep(grace + Duration::from_millis(50));
    registry.reconcile().expect("reconcile");
    assert!(registry.lookup("ep", "Swap").is_none());
    assert_eq!(registry.snapshot().handlers().count(), 0);
}

/// A grace longer than the clock can add is a day long, not a panic of
/// the thread that reconciles.
#[test]
fn a_grace_too_long_for_the_clock_is_a_day() {
    let dir = HandlersDir::new();
    dir.install("ep", "swap", &guest("swap-v1"));
    let registry = Registry::open(
        sandbox_with(None, |c| c.removal_grace = Duration::MAX),
        dir.path(),
    )
    .expect("opens");
    dir.remove("ep", "swap");
    let before = std::time::SystemTime::now();
    registry.reconcile().expect("reconcile");
    let snapshot = registry.snapshot();
    let status = snapshot.handlers().next().expect("still listed");
    let removing_at = status.removing_at.expect("removing");
    let grace = removing_at.duration_since(before).expect("after now");
    assert!(
        grace <= nimbus_sandbox::MAX_REMOVAL_GRACE + Duration::from_secs(60),
        "{grace:?}"
    );
    assert!(grace >= nimbus_sandbox::MAX_REMOVAL_GRACE - Duration::from_secs(60));
}

#[test]
fn deleting_a_component_without_a_grace_unregisters_its_event_types() {
    let dir = HandlersDir::new();
    dir.install("ep", "swap", &guest("swap-v1"));
    dir.install("ep", "noop", &guest("noop"));
    let registry = Registry::open(no_removal_grace(), dir.path()).expect("opens");
    let before = registry.snapshot();
    dir.remove("ep", "swap");
    registry.reconcile().expect("reconcile");
    let after = registry.snapshot();
    assert!(after.lookup("ep", "Swap").is_none());
    assert!(after.lookup("ep", "Noop").is_some());
    assert!(after.handlers().all(|s| s.key.handler != "swap"));
    assert!(after.generation() > before.generation());
    // A snapshot taken before keeps working: in-flight work finishes on it.
    let old = before.lookup("ep", "Swap").expect("old snapshot");
    assert_eq!(
        old.invoke(event("Swap", "{}")).report.result,
        Ok(Outcome::Completed)
    );
}

#[test]
fn a_restart_loads_from_the_cache_without_compiling() {
    let cache = tempfile::tempdir().expect("cache dir");
    let dir = HandlersDir::new();
    dir.install("ep", "orders", &guest("orders"));
    dir.install("ep", "noop", &guest("noop"));

    let first = sandbox_with(Some(cache.path()), |_| {});
    let registry = Registry::open(first.clone(), dir.path()).expect("opens");
    assert_eq!(first.cache_stats().compiles, 2);
    assert_eq!(first.cache_stats().hits, 0);
    drop(registry);

    let restarted = sandbox_with(Some(cache.path()), |_| {});
    let registry = Registry::open(restarted.clone(), dir.path()).expect("reopens");
    assert_eq!(
        restarted.cache_stats().compiles,
        0,
        "nothing is compiled again"
    );
    assert_eq!(restarted.cache_stats().hits, 2);
    let noop = registry.lookup("ep", "Noop").expect("noop");
    assert_eq!(noop.artifact_source(), ArtifactSource::CacheHit);
    assert_eq!(
        noop.invoke(event("Noop", "{}")).report.result,
        Ok(Outcome::Completed)
    );
}

#[test]
fn a_corrupt_cache_entry_is_recompiled_not_trusted() {
    let cache = tempfile::tempdir().expect("cache dir");
    let noop = std::fs::read(guest("noop")).expect("read");
    let first = sandbox_with(Some(cache.path()), |_| {});
    first
        .load_bytes("noop", &noop, Default::default(), Default::default())
        .expect("loads");
    for entry in std::fs::read_dir(cache.path()).expect("list cache") {
        let path = entry.expect("entry").path();
        std::fs::write(&path, b"garbage").expect("corrupt");
    }
    let restarted = sandbox_with(Some(cache.path()), |_| {});
    let version = restarted
        .load_bytes("noop", &noop, Default::default(), Default::default())
        .expect("recompiles");
    assert_eq!(version.artifact_source(), ArtifactSource::Compiled);
    assert_eq!(
        version.invoke(event("Noop", "{}")).report.result,
        Ok(Outcome::Completed)
    );
}

#[test]
fn a_manifest_sets_limits_and_config_and_a_change_to_it_reloads() {
    let dir = HandlersDir::new();
    dir.install("ep", "orders", &guest("orders"));
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let order = r#"{"OrderId":"o-1","Customer":"acme","Total":150.0,"Lines":[{"Sku":"A","Quantity":1,"UnitPrice":150.0}]}"#;
    let first = registry.lookup("ep", "OrderPlaced").expect("orders");
    assert_eq!(
        first.invoke(event("OrderPlaced", order)).report.result,
        Ok(Outcome::Completed)
    );

    dir.manifest(
        "ep",
        "orders",
        "[limits]\nmemory = \"32MiB\"\ntimeout = \"2s\"\n[config]\nreject_over_total = \"100\"\n",
    );
    registry.reconcile().expect("reconcile");
    let second = registry.lookup("ep", "OrderPlaced").expect("orders");
    assert_eq!(second.limits().memory_bytes, 32 << 20);
    assert_eq!(second.limits().timeout, std::time::Duration::from_secs(2));
    assert_eq!(
        second.config().get("reject_over_total").map(String::as_str),
        Some("100")
    );
    let error = second
        .invoke(event("OrderPlaced", order))
        .report
        .result
        .expect_err("over the configured total");
    assert_eq!(error.error_type, "OrderRejected", "{error}");
}

#[test]
fn a_bad_manifest_is_a_load_error_naming_the_key_and_the_old_version_keeps_serving() {
    let dir = HandlersDir::new();
    dir.install("ep", "noop", &guest("noop"));
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    dir.manifest("ep", "noop", "[limits]\nmemory = \"a lot\"\n");
    registry.reconcile().expect("reconcile");
    let snapshot = registry.snapshot();
    assert!(snapshot.lookup("ep", "Noop").is_some());
    let error = snapshot
        .handlers()
        .next()
        .and_then(|s| s.last_error.clone())
        .expect("error recorded");
    assert!(error.contains("limits.memory"), "{error}");
}

#[test]
fn stray_components_outside_an_endpoint_are_reported_not_loaded() {
    let dir = HandlersDir::new();
    std::fs::copy(guest("noop"), dir.path().join("noop.wasm")).expect("copy");
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let snapshot = registry.snapshot();
    assert_eq!(snapshot.handlers().count(), 0);
    assert!(snapshot.problems().iter().any(|p| p.contains("noop.wasm")));
}

#[test]
fn a_missing_handlers_directory_is_a_clear_error() {
    let dir = HandlersDir::new();
    let missing = dir.path().join("nope");
    let error = Registry::open(sandbox(), &missing).err().expect("fails");
    assert!(error.to_string().contains("nope"), "{error}");
}

#[test]
fn a_component_whose_subscriptions_waits_in_wasi_fails_to_load_at_its_deadline() {
    let dir = HandlersDir::new();
    dir.install("ep", "noop", &guest("noop"));
    dir.install("ep", "slow-start", &guest("slow-start"));
    dir.manifest("ep", "slow-start", "[limits]\ntimeout = \"300ms\"\n");
    // The load used to wait out the guest's hour in WASI (on the watcher
    // thread, which then swapped in nothing else); the guard is far above
    // the deadline, so a slow CI machine cannot fail it.
    let (opened, open) = std::sync::mpsc::channel();
    let path = dir.path().to_owned();
    std::thread::spawn(move || {
        let _ = opened.send(Registry::open(sandbox(), &path));
    });
    let registry = open
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the load ended")
        .expect("opens");

    let snapshot = registry.snapshot();
    assert!(snapshot.lookup("ep", "SlowStart").is_none());
    let noop = snapshot
        .lookup("ep", "Noop")
        .expect("the other component serves");
    assert_eq!(
        noop.invoke(event("Noop", "{}")).report.result,
        Ok(Outcome::Completed)
    );
    let status = snapshot
        .handlers()
        .find(|s| s.key.handler == "slow-start")
        .expect("its status");
    assert!(status.serving.is_none());
    let error = status.last_error.as_deref().expect("a load error");
    assert!(
        error.contains("`subscriptions`") && error.contains("Timeout"),
        "{error}"
    );
}

#[test]
fn a_load_error_is_one_line() {
    let dir = HandlersDir::new();
    // Not wasm at all: the parser's message printed the expected and
    // actual magic bytes as pretty-printed arrays.
    dir.install_bytes("ep", "random", &[0x7f, 0x45, 0x4c, 0x46, 2, 1, 1, 0, 9, 9]);
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let snapshot = registry.snapshot();
    let status = snapshot.handlers().next().expect("status");
    let error = status.last_error.as_deref().expect("a load error");
    assert!(error.contains("not a WebAssembly file"), "{error}");
    assert!(!error.contains('\n'), "{error}");
}

/// What outcomes record: the component's digest alone without settings of
/// its own; with a manifest that changes them, a suffix that follows the
/// effective settings (not the manifest's text), so a manifest-only fix is a
/// new version in the audit trail.
#[test]
fn a_version_id_follows_the_settings_a_manifest_gives() {
    let dir = HandlersDir::new();
    dir.install("ep", "swap", &guest("swap-v1"));
    let registry = Registry::open(sandbox(), dir.path()).expect("opens");
    let id = || {
        registry
            .lookup("ep", "Swap")
            .expect("served")
            .id()
            .to_owned()
    };
    let plain = id();
    assert_eq!(plain, digest_of("swap-v1").to_string());

    dir.manifest("ep", "swap", "[config]\nreject_over_total = \"100\"\n");
    registry.reconcile().expect("reconcile");
    let configured = id();
    assert!(
        configured.starts_with(&format!("{plain}+")) && configured.len() == plain.len() + 13,
        "{configured}"
    );

    dir.manifest(
        "ep",
        "swap",
        "# the same settings, written differently\n[config]\nreject_over_total = '100'\n",
    );
    registry.reconcile().expect("reconcile");
    assert_eq!(id(), configured, "same settings, same version");

    dir.manifest("ep", "swap", "[config]\nreject_over_total = \"500\"\n");
    registry.reconcile().expect("reconcile");
    let fixed = id();
    assert!(fixed.starts_with(&format!("{plain}+")), "{fixed}");
    assert_ne!(fixed, configured, "a config fix is a new version");

    // Log lines name it short, with the suffix that tells the two apart.
    let short = registry.lookup("ep", "Swap").expect("served").short_id();
    let (_, suffix) = fixed.split_once('+').expect("a settings suffix");
    assert_eq!(
        short,
        format!("{}+{suffix}", digest_of("swap-v1").short()),
        "{fixed}"
    );
}

/// A version id covers what the handler's own files say, not the host's
/// `[sandbox]` defaults: hosts with different defaults (and the offline
/// tools, with none) name one version alike, and a manifest that sets a
/// limit is a version of its own even when the value equals a default.
#[test]
fn a_version_id_does_not_depend_on_the_hosts_default_limits() {
    let dir = HandlersDir::new();
    dir.install("ep", "swap", &guest("swap-v1"));
    let id_under = |timeout: std::time::Duration| {
        let sandbox = sandbox_with(None, |config| config.default_limits.timeout = timeout);
        let registry = Registry::open(sandbox, dir.path()).expect("opens");
        registry
            .lookup("ep", "Swap")
            .expect("served")
            .id()
            .to_owned()
    };
    let plain = digest_of("swap-v1").to_string();
    assert_eq!(id_under(std::time::Duration::from_secs(5)), plain);
    assert_eq!(id_under(std::time::Duration::from_secs(10)), plain);

    dir.manifest("ep", "swap", "[limits]\ntimeout = \"5s\"\n");
    let declared = id_under(std::time::Duration::from_secs(5));
    assert!(declared.starts_with(&format!("{plain}+")), "{declared}");
    assert_eq!(
        id_under(std::time::Duration::from_secs(10)),
        declared,
        "the same manifest under another host default"
    );
    dir.manifest("ep", "swap", "[limits]\ntimeout = \"5000ms\"\n");
    assert_eq!(
        id_under(std::time::Duration::from_secs(10)),
        declared,
        "the same limit written differently"
    );
    dir.manifest("ep", "swap", "[limits]\ntimeout = \"6s\"\n");
    assert_ne!(id_under(std::time::Duration::from_secs(5)), declared);
}
