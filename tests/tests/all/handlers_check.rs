//! `nimbus handlers check FILE`.

use nimbus_blackbox_tests::{Scratch, guest};

#[test]
fn check_prints_event_types_digest_imports_exports_and_limits_as_json() {
    let scratch = Scratch::new();
    let path = scratch.install("billing", "orders", "orders");
    scratch.write(
        "handlers/billing/orders.toml",
        b"[limits]\nmemory = \"32MiB\"\ntimeout = \"2s\"\n[config]\nreject_over_total = \"100\"\n",
    );
    let run = scratch.run(&["handlers", "check", path.to_str().expect("utf-8"), "--json"]);
    run.expect_code(0);
    let json = run.json();
    assert_eq!(json["name"], "orders");
    assert_eq!(json["event_types"], serde_json::json!(["OrderPlaced"]));
    let digest = json["digest"].as_str().expect("digest");
    assert!(
        digest.starts_with("sha256:") && digest.len() == 7 + 64,
        "{digest}"
    );
    assert_eq!(json["limits"]["memory_bytes"], 32 << 20);
    assert_eq!(json["limits"]["timeout_ms"], 2000);
    assert_eq!(json["config"]["reject_over_total"], "100");
    let imports: Vec<&str> = json["imports"]
        .as_array()
        .expect("imports")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(imports.contains(&"nimbus:handler/log@0.1.0"), "{imports:?}");
    assert_eq!(
        json["exports"],
        serde_json::json!(["nimbus:handler/dispatch@0.1.0"])
    );
}

#[test]
fn check_prints_text_by_default() {
    let scratch = Scratch::new();
    let run = scratch.run(&["handlers", "check", guest("noop").to_str().expect("utf-8")]);
    run.expect_code(0);
    let text = run.stdout();
    assert!(text.contains("event types: Noop"), "{text}");
    assert!(text.contains("digest:      sha256:"), "{text}");
    // No manifest beside it: said, not a blank line.
    assert!(
        text.contains("config keys: none (a manifest's [config] sets them)"),
        "{text}"
    );
}

#[test]
fn a_second_check_is_served_from_the_compile_cache() {
    let scratch = Scratch::new();
    let file = guest("noop");
    let file = file.to_str().expect("utf-8");
    let first = scratch.run(&["handlers", "check", file, "--json"]);
    assert_eq!(first.expect_code(0).json()["artifact"], "compiled");
    let second = scratch.run(&["handlers", "check", file, "--json"]);
    assert_eq!(second.expect_code(0).json()["artifact"], "cache_hit");
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let scratch = Scratch::new();
    let run = scratch.run(&["handlers", "check", "/definitely/not/here.wasm"]);
    run.expect_code(1);
    assert!(
        run.stderr().contains("/definitely/not/here.wasm"),
        "{}",
        run.stderr()
    );
    assert!(
        run.stderr().contains("no such component"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_directory_is_refused_pointing_at_handlers_list() {
    let scratch = Scratch::new();
    scratch.install("billing", "noop", "noop");
    let dir = scratch.handlers();
    let run = scratch.run(&["handlers", "check", dir.to_str().expect("utf-8")]);
    run.expect_code(1);
    assert!(
        run.stderr().contains("is a directory") && run.stderr().contains("handlers list"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_file_that_is_not_a_component_is_rejected_with_the_reason() {
    let scratch = Scratch::new();
    let path = scratch.write("bogus.wasm", b"hello, I am not wasm");
    let run = scratch.run(&["handlers", "check", path.to_str().expect("utf-8")]);
    run.expect_code(1);
    let stderr = run.stderr();
    assert!(stderr.contains("bogus.wasm"), "{stderr}");
    assert!(stderr.contains("not a valid handler component"), "{stderr}");
}

#[test]
fn a_bad_manifest_is_rejected_naming_the_key() {
    let scratch = Scratch::new();
    let path = scratch.install("ep", "noop", "noop");
    scratch.write(
        "handlers/ep/noop.toml",
        b"[limits]\ntimeout = \"5 fortnights\"\n",
    );
    let run = scratch.run(&["handlers", "check", path.to_str().expect("utf-8")]);
    run.expect_code(1);
    assert!(run.stderr().contains("limits.timeout"), "{}", run.stderr());

    scratch.write("handlers/ep/noop.toml", b"[limits]\nmemmory = \"5MiB\"\n");
    let run = scratch.run(&["handlers", "check", path.to_str().expect("utf-8")]);
    run.expect_code(1);
    assert!(run.stderr().contains("memmory"), "{}", run.stderr());
}
