//! `nimbus broker verify` through the binary: a sound log is reported file
//! by file and exits 0; bytes flipped in the middle of a segment written at
//! `fsync` durability make it exit 1 naming the file and the byte, as
//! `nimbus run` then refuses to start; neither changes a file. It will not
//! read a directory a running host holds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nimbus_blackbox_tests::Scratch;
use nimbus_blackbox_tests::orders::{order, publish};
use nimbus_blackbox_tests::running::{RunningHost, config_text};

/// Every file of the broker's log, with its bytes.
fn log_files(data: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    std::fs::read_dir(data.join("broker").join("broker-log"))
        .expect("the broker log")
        .map(|entry| {
            let path = entry.expect("an entry").path();
            let bytes = std::fs::read(&path).expect("read a log file");
            (path, bytes)
        })
        .collect()
}

/// The last `NAME  ok, N bytes of data` line of a report for a segment
/// holding frames past its header: the file and where its data ends.
fn last_segment_with_data(report: &str, log_dir: &Path) -> (PathBuf, u64) {
    report
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.trim().split_once(char::is_whitespace)?;
            let bytes = rest
                .trim()
                .strip_prefix("ok, ")?
                .strip_suffix(" bytes of data")?;
            let bytes: u64 = bytes.parse().ok()?;
            (name.ends_with(".log") && bytes > 1024).then(|| (log_dir.join(name), bytes))
        })
        .next_back()
        .unwrap_or_else(|| panic!("no segment with data in the report:\n{report}"))
}

#[test]
fn verify_reports_a_sound_log_and_names_the_damaged_byte_of_a_broken_one() {
    let scratch = Scratch::new();
    scratch.install("billing", "orders", "orders");
    let config = config_text("").replace(r#"durability = "os""#, r#"durability = "fsync""#);
    let host = RunningHost::start_with_config(&scratch, &config);
    // Paused: the events stay in the log, one commit each.
    host.cli(&["pause", "billing"]).expect_code(0);
    for i in 0..60 {
        publish(
            &host,
            "OrderPlaced",
            &format!("s-{i}"),
            &order(&format!("o-{i}"), false),
        );
    }
    let data = scratch.path("data");
    let data_arg = data.to_str().expect("utf-8 path");

    let busy = scratch.run_raw(&["broker", "verify", data_arg]);
    busy.expect_code(1);
    assert!(
        busy.stderr().contains("a nimbus host is running on")
            && busy.stderr().contains("stop it first"),
        "{}",
        busy.stderr()
    );
    let (code, _) = host.terminate();
    assert_eq!(code, Some(0));

    let before = log_files(&data);
    let sound = scratch.run_raw(&["broker", "verify", data_arg]);
    sound.expect_code(0);
    let report = sound.stdout();
    assert!(report.contains("sound: "), "{report}");
    assert!(report.contains(" messages"), "{report}");
    assert_eq!(log_files(&data), before, "verify changes nothing");

    // Through the configuration, as an operator with only the config at hand.
    let by_config = scratch.run_raw(&[
        "broker",
        "verify",
        "--config",
        scratch.path("nimbus.toml").to_str().expect("utf-8 path"),
    ]);
    by_config.expect_code(0);
    assert_eq!(by_config.stdout(), report);
    // The broker's own directory, as the broker's errors name it, will do.
    let broker_dir = data.join("broker");
    let by_broker_dir =
        scratch.run_raw(&["broker", "verify", broker_dir.to_str().expect("utf-8 path")]);
    by_broker_dir.expect_code(0);
    assert_eq!(by_broker_dir.stdout(), report);

    let log_dir = data.join("broker").join("broker-log");
    let (segment, data_len) = last_segment_with_data(&report, &log_dir);
    let middle = data_len / 2;
    let mut bytes = std::fs::read(&segment).expect("read the segment");
    let at = usize::try_from(middle).expect("fits");
    for byte in &mut bytes[at..at + 4] {
        *byte ^= 0xa5;
    }
    std::fs::write(&segment, &bytes).expect("damage the segment");
    let damaged = log_files(&data);

    let refused = scratch.run_raw(&["broker", "verify", data_arg]);
    refused.expect_code(1);
    let segment_name = segment.display().to_string();
    assert!(
        refused.stderr().contains(&segment_name)
            && refused.stderr().contains("is damaged at byte")
            && refused.stderr().contains("not a torn tail"),
        "{}",
        refused.stderr()
    );
    assert!(
        refused.stdout().contains("refused: "),
        "{}",
        refused.stdout()
    );
    assert_eq!(log_files(&data), damaged, "verify changes nothing");

    let run = scratch.run_host_to_exit();
    run.expect_code(1);
    assert!(
        run.stderr().contains(&segment_name) && run.stderr().contains("is damaged at byte"),
        "{}",
        run.stderr()
    );
    assert_eq!(log_files(&data), damaged, "a refused host changes nothing");
}

#[test]
fn verify_of_a_directory_without_a_log_says_so() {
    let scratch = Scratch::new();
    let empty = scratch.path("nothing-here");
    std::fs::create_dir_all(&empty).expect("dir");
    let run = scratch.run_raw(&["broker", "verify", empty.to_str().expect("utf-8 path")]);
    run.expect_code(1);
    assert!(
        run.stderr().contains("no broker log here"),
        "{}",
        run.stderr()
    );
    assert_eq!(
        std::fs::read_dir(&empty).expect("dir").count(),
        0,
        "verify creates nothing"
    );
}
