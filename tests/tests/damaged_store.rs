//! A host whose Resolver store was damaged on disk refuses to start and
//! names the file, rather than starting to answer the operator with 500s.

use std::io::{Seek as _, SeekFrom, Write as _};

use nimbus_blackbox_tests::Scratch;
use nimbus_blackbox_tests::orders::{order, publish};
use nimbus_blackbox_tests::running::RunningHost;

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

    let run = scratch.run_host_to_exit();
    run.expect_code(1);
    assert!(
        run.stderr().contains(&store.display().to_string()) && run.stderr().contains("damaged"),
        "{}",
        run.stderr()
    );
    assert!(!run.stdout().contains("API:"), "{}", run.stdout());
}
