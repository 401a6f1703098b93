//! The slimmer on the real guest components `scripts/build-guests.sh` built
//! (cargo's output, kept in `.../wasm32-wasip2/release/full/`), and the
//! slimmed components run through the real sandbox beside the full ones.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nimbus_guest_slim::{STRIPPABLE_INTERFACES, SlimError, slim};
use nimbus_handler::Event;
use nimbus_sandbox::{HandlerVersion, Invocation, Limits, Sandbox, SandboxConfig};
use wasmparser::{KnownCustom, Name, Parser, Payload};

/// The unslimmed components: `NIMBUS_GUESTS_DIR`, else
/// `$CARGO_TARGET_DIR/wasm32-wasip2/release`, else the workspace's `target`;
/// then `full/`, where `scripts/build-guests.sh` keeps cargo's output.
fn full_guest(crate_name: &str) -> Vec<u8> {
    let dir = match std::env::var_os("NIMBUS_GUESTS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
            .join("wasm32-wasip2")
            .join("release"),
    };
    let path = dir
        .join("full")
        .join(format!("{}.wasm", crate_name.replace('-', "_")));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "unslimmed guest {} is missing ({e}): run scripts/build-guests.sh \
             with the same CARGO_TARGET_DIR",
            path.display()
        )
    })
}

fn sandbox() -> Sandbox {
    Sandbox::new(SandboxConfig {
        max_concurrent_instances: 8,
        ..SandboxConfig::default()
    })
    .expect("sandbox starts")
}

fn load(sandbox: &Sandbox, name: &str, bytes: &[u8]) -> HandlerVersion {
    sandbox
        .load_bytes(name, bytes, Limits::default(), BTreeMap::new())
        .expect("component loads")
}

fn event(event_type: &str, payload: &str) -> Event {
    Event {
        event_id: "evt-1".into(),
        event_type: event_type.into(),
        message_id: "msg-1".into(),
        session_id: "session-1".into(),
        payload: payload.into(),
        ..Event::default()
    }
}

/// What an invocation answered, without the fields that name the version
/// (digest) or measure it (duration).
fn answer(invocation: &Invocation) -> String {
    format!(
        "{:?} / {:?} / {:?}",
        invocation.report.result, invocation.report.follow_ups, invocation.logs
    )
}

/// The function names in the main core module's name section.
fn function_names(component: &[u8]) -> Vec<String> {
    let module = Parser::new(0)
        .parse_all(component)
        .find_map(|p| match p.unwrap() {
            Payload::ModuleSection {
                unchecked_range, ..
            } => Some(&component[unchecked_range.start as usize..unchecked_range.end as usize]),
            _ => None,
        })
        .expect("a core module");
    let mut names = Vec::new();
    for payload in Parser::new(0).parse_all(module) {
        if let Payload::CustomSection(section) = payload.unwrap()
            && let KnownCustom::Name(reader) = section.as_known()
        {
            for name in reader {
                if let Name::Function(map) = name.unwrap() {
                    names.extend(map.into_iter().map(|n| n.unwrap().name.to_owned()));
                }
            }
        }
    }
    names
}

#[test]
fn a_handler_that_does_not_print_keeps_only_the_handler_imports() {
    let full = full_guest("noop");
    let slimmed = slim(&full).expect("noop is slimmed");
    assert_eq!(slimmed.stripped.len(), 19, "{:?}", slimmed.stripped);
    for import in &slimmed.stripped {
        let interface = import.split('@').next().unwrap();
        assert!(STRIPPABLE_INTERFACES.contains(&interface), "{import}");
    }
    assert!(slimmed.component.len() < full.len());

    let sandbox = sandbox();
    let before = load(&sandbox, "noop-full", &full);
    let after = load(&sandbox, "noop", &slimmed.component);
    assert!(before.imports().iter().any(|i| i.starts_with("wasi:")));
    assert!(
        after
            .imports()
            .iter()
            .all(|i| i.starts_with("nimbus:handler/")),
        "{:?}",
        after.imports()
    );
    assert_eq!(after.exports(), before.exports());
    assert_eq!(after.event_types(), before.event_types());
}

#[test]
fn the_slimmed_orders_answers_every_event_like_the_full_one() {
    let full = full_guest("orders");
    let slimmed = slim(&full).expect("orders is slimmed").component;
    let sandbox = sandbox();
    let before = load(&sandbox, "orders-full", &full);
    let after = load(&sandbox, "orders", &slimmed);
    let order = r#"{"OrderId":"o-1","Customer":"acme","Total":10.0,"Lines":[{"Sku":"A","Quantity":2,"UnitPrice":5.0}]}"#;
    let events = [
        event("OrderPlaced", order),
        event(
            "OrderPlaced",
            r#"{"OrderId":"o-2","Customer":"fail","Total":1.0,"Lines":[{"Sku":"A","Quantity":1,"UnitPrice":1.0}]}"#,
        ),
        event(
            "OrderPlaced",
            r#"{"OrderId":"o-3","Customer":"acme","Total":0.0,"Lines":[]}"#,
        ),
        event("OrderPlaced", r#"{"OrderId":"o-4","Lines":[{"Sku":1}]}"#),
        event("OrderPlaced", "not json"),
        event("Unknown", "{}"),
    ];
    let mut outcomes = Vec::new();
    for e in events {
        let (a, b) = (before.invoke(e.clone()), after.invoke(e));
        assert_eq!(answer(&b), answer(&a));
        assert_ne!(b.digest, a.digest, "two different components ran");
        outcomes.push(b.report.result.is_ok());
    }
    assert_eq!(
        outcomes,
        [true, false, false, false, false, false],
        "the events cover each answer"
    );
}

#[test]
fn a_panic_in_a_slimmed_handler_is_failed_panic_with_its_message() {
    let slimmed = slim(&full_guest("panicker"))
        .expect("panicker is slimmed")
        .component;
    let sandbox = sandbox();
    let invocation = load(&sandbox, "panicker", &slimmed).invoke(event("Panic", "{}"));
    let error = invocation
        .report
        .result
        .expect_err("the panic fails the event");
    assert_eq!(error.error_type, "Panic", "{error}");
    assert!(
        error
            .message
            .contains("panicker: deliberate panic for the host's tests"),
        "{error}"
    );
}

#[test]
fn a_handler_that_writes_to_stdout_is_refused_naming_the_function() {
    let err = slim(&full_guest("echo")).expect_err("echo prints: refused");
    match &err {
        SlimError::UsesStdio { function, .. } => {
            assert!(function.contains("std::io::stdio::"), "{err}")
        }
        other => panic!("expected UsesStdio, got {other}"),
    }
}

#[test]
fn a_handler_that_imports_the_filesystem_is_refused_naming_the_import() {
    let err = slim(&full_guest("probe")).expect_err("probe opens files: refused");
    assert!(matches!(err, SlimError::OtherWasi(_)), "{err}");
    assert!(err.to_string().contains("wasi:filesystem/"), "{err}");
}

#[test]
fn slimming_twice_returns_the_slimmed_component_unchanged() {
    let once = slim(&full_guest("notifier")).expect("slimmed").component;
    let twice = slim(&once).expect("nothing left to strip");
    assert!(twice.stripped.is_empty());
    assert_eq!(twice.component, once);
}

#[test]
fn the_stubs_are_named_after_the_import_they_replace_and_other_names_are_kept() {
    let full = full_guest("noop");
    let slimmed = slim(&full).expect("slimmed").component;
    let names = function_names(&slimmed);
    assert!(
        names.contains(&"stripped-import:wasi:cli/exit@0.2.0#exit".to_owned()),
        "{names:?}"
    );
    let full_names = function_names(&full);
    for name in full_names
        .iter()
        .filter(|n| !n.starts_with("__wasm_import_"))
    {
        assert!(names.contains(name), "{name} kept");
    }
}

#[test]
fn a_core_module_or_garbage_is_a_clear_error() {
    let core_module = b"\0asm\x01\0\0\0";
    let err = slim(core_module).expect_err("a core module is refused");
    assert!(err.to_string().contains("core module"), "{err}");
    let err = slim(b"not wasm at all").expect_err("garbage is refused");
    assert!(matches!(err, SlimError::NotAComponent(_)), "{err}");
}
