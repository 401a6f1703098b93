//! A host whose Resolver store was damaged on disk refuses to start and
//! names the file, rather than starting to answer the operator with 500s.

use std::io::{Seek as _, SeekFrom, Write as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nimbus_blackbox_tests::orders::{order, publish};
use nimbus_blackbox_tests::running::RunningHost;
use nimbus_blackbox_tests::{Run, Scratch, nimbus_bin};

#[test]
fn a_damaged_resolver_store_stops_the_host_naming_the_file() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let host = RunningHost::start(&scratch, "");
    let mut last = String::new();
    for i in 0..40 {
        last = publish(&host, "OrderPlaced", &format!("s-{i}"), &order("o", false));
    }
    host.wait_status("s-39", &last, "Completed");
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));

    // Every page after the header overwritten, as a failing disk leaves them.
    let store = scratch.path("data/resolver.db");
    let len = std::fs::metadata(&store).expect("the store exists").len();
    assert!(
        len > 4096,
        "the store has pages past its header: {len} bytes"
    );
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&store)
        .expect("open the store");
    file.seek(SeekFrom::Start(4096)).expect("seek");
    let noise: Vec<u8> = (0..len - 4096)
        .map(|i| u8::try_from((i * 7919 + 13) % 251).expect("below 251"))
        .collect();
    file.write_all(&noise).expect("overwrite");
    drop(file);

    let config = scratch.path("nimbus.toml");
    let config = config.to_str().expect("utf-8 path");
    let mut child = Command::new(nimbus_bin())
        .args(["run", "--config", config])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nimbus run");
    let started = Instant::now();
    while child.try_wait().expect("wait for nimbus run").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("nimbus run started on a damaged store");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = Run {
        output: child.wait_with_output().expect("nimbus run's output"),
    };
    run.expect_code(1);
    assert!(
        run.stderr().contains(&store.display().to_string()) && run.stderr().contains("damaged"),
        "{}",
        run.stderr()
    );
    assert!(!run.stdout().contains("API:"), "{}", run.stdout());
}
