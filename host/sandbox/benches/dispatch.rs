//! `cargo bench -p nimbus-sandbox --bench dispatch`
//!
//! (a) Per-event cost of a fresh store + instance + `handle` call carrying a
//!     ~300-byte `OrderPlaced` payload through `tests/guests/order-decision`
//!     (deserialize and decide, nothing else), side by side with the same
//!     source compiled natively; also through `examples/orders` (the same
//!     work plus a config lookup and a log line, two host calls) and
//!     `tests/guests/noop` (the floor); and through a naive wasmtime set-up
//!     (`dispatch/naive.rs`), the issue's reference point. The variants are interleaved batch by
//!     batch so machine noise hits them alike; the report is the median of
//!     per-batch means, and the ratio wasm/native.
//! (b) Hot-swap latency: atomic rename of a component whose compiled form is
//!     cached → first event served by the new version, through the real
//!     directory watcher.
//!
//! A plain harness (no criterion): it prints medians and ratios from one
//! run, which is what the project reports. Guests come from
//! `scripts/build-guests.sh` (or `NIMBUS_GUESTS_DIR`);
//! `NIMBUS_BENCH_COMPARE_DIR=<dir>` adds the three guests from another
//! build of the guests (another SDK allocator, another profile) to the same
//! interleaved run, so a guest-side change is measured side by side.
//!
//! Diagnostics (not benchmarks): `NIMBUS_BENCH_PROFILE=<guest>:<events>`
//! runs one guest in a loop for a profiler (`NIMBUS_BENCH_SCAN=1` resets its
//! slot with `PAGEMAP_SCAN`); `NIMBUS_BENCH_PAGES=<guest>` prints which pages
//! of linear memory one event writes.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark harness")]
#![allow(missing_docs, reason = "benchmark harness")]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nimbus_handler::{Event, Outcome};
use nimbus_sandbox::{Digest, Limits, Registry, Sandbox, SandboxConfig};

/// A ~300-byte `OrderPlaced`, as NimBus writes it.
const ORDER: &str = r#"{"OrderId":"o-100234","Customer":"acme-industrial-supplies","Total":1234.5,"Currency":"EUR","Lines":[{"Sku":"A-1001","Quantity":2,"UnitPrice":100.0},{"Sku":"B-2002","Quantity":5,"UnitPrice":150.5},{"Sku":"C-3003","Quantity":1,"UnitPrice":281.0}],"Channel":"web","PlacedBy":"buyer@acme.example"}"#;

const BATCHES: usize = 101;
const PER_BATCH: usize = 200;
const SWAPS: usize = 21;

// The deserialize-and-decide work (`examples/orders`' payload type and
// decision), from the source file the `order-decision` guest is built from,
// so both sides run the same code.
#[path = "../../../tests/guests/order-decision/src/decision.rs"]
#[allow(
    dead_code,
    unreachable_pub,
    reason = "shared with the guest, where these are its public items; fields are deserialized, not read"
)]
mod decision;

use decision::{Decision, OrderPlaced, decide};

#[path = "dispatch/naive.rs"]
mod naive;

/// The native side: what the guest's SDK and handler do with the payload.
fn native_decision(payload: &str) -> Decision {
    match serde_json::from_str::<OrderPlaced>(payload) {
        Ok(order) => decide(&order, None),
        Err(error) => Decision::Permanent("InvalidPayload", error.to_string()),
    }
}

fn guests_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NIMBUS_GUESTS_DIR") {
        return PathBuf::from(dir);
    }
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("wasm32-wasip2/release")
}

fn guest(name: &str) -> Vec<u8> {
    guest_from(&guests_dir(), name)
}

fn guest_from(dir: &Path, name: &str) -> Vec<u8> {
    let path = dir.join(format!("{}.wasm", name.replace('-', "_")));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run scripts/build-guests.sh (same CARGO_TARGET_DIR) first",
            path.display()
        )
    })
}

fn order_event() -> Event {
    Event {
        event_id: "e-1".into(),
        event_type: "OrderPlaced".into(),
        message_id: "m-1".into(),
        session_id: "o-100234".into(),
        payload: ORDER.into(),
        ..Event::default()
    }
}

/// The event a guest of the diagnostics claims: `Noop` for `noop`, else the
/// order.
fn event_for(guest: &str) -> Event {
    if guest == "noop" {
        Event {
            event_type: "Noop".into(),
            ..order_event()
        }
    } else {
        order_event()
    }
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Per-batch cost per event: wall-clock and this thread's CPU time (user +
/// system, so page faults count). On a shared, loaded machine the CPU time
/// is the steadier figure: it leaves out time the thread sat descheduled.
#[derive(Default)]
struct Samples {
    wall_us: Vec<f64>,
    cpu_us: Vec<f64>,
}

impl Samples {
    fn measure(&mut self, mut batch: impl FnMut()) {
        let wall = Instant::now();
        let cpu = cpu_time::ThreadTime::now();
        for _ in 0..PER_BATCH {
            batch();
        }
        let per_event = |d: Duration| d.as_secs_f64() * 1e6 / PER_BATCH as f64;
        self.cpu_us.push(per_event(cpu.elapsed()));
        self.wall_us.push(per_event(wall.elapsed()));
    }

    fn medians(&self) -> (f64, f64) {
        (median(self.wall_us.clone()), median(self.cpu_us.clone()))
    }
}

fn bench_dispatch() {
    assert!(
        ORDER.len() >= 280 && ORDER.len() <= 340,
        "payload is {} bytes",
        ORDER.len()
    );
    let sandbox_with = |keep_resident_bytes: usize, pagemap_scan: bool| {
        Sandbox::new(SandboxConfig {
            keep_resident_bytes,
            pagemap_scan,
            ..SandboxConfig::default()
        })
        .unwrap()
    };
    let load = |sandbox: &Sandbox, name: &str| {
        sandbox
            .load_bytes(name, &guest(name), Limits::default(), BTreeMap::new())
            .unwrap()
    };
    let defaults = SandboxConfig::default();
    let default_sandbox = sandbox_with(defaults.keep_resident_bytes, defaults.pagemap_scan);
    let decision = load(&default_sandbox, "order-decision");
    // cargo's own build of the same guest, before the slimming post-step.
    // Absent when the guests were built by plain cargo rather than the script.
    let full_decision = std::fs::read(guests_dir().join("full/order_decision.wasm")).ok();
    if full_decision.is_none() {
        eprintln!("no full/order_decision.wasm beside the guests: naive rows skipped");
    }
    let naive_pooled = full_decision
        .as_deref()
        .map(|bytes| naive::Naive::new(bytes, true));
    let naive_on_demand = full_decision
        .as_deref()
        .map(|bytes| naive::Naive::new(bytes, false));
    let orders = load(&default_sandbox, "orders");
    let noop = load(&default_sandbox, "noop");
    // The same component with other resident-memory settings, to show where
    // the time goes (see docs/decisions/0003-dispatch-cost.md).
    let resident_variants: Vec<(String, _)> = [
        (0usize, true),
        (64 << 10, true),
        (128 << 10, true),
        (1 << 20, true),
        (256 << 10, true),
        (64 << 10, false),
        (128 << 10, false),
        (256 << 10, false),
    ]
    .into_iter()
    .map(|(bytes, pagemap)| {
        let label = format!(
            "{:>4} KiB resident{}",
            bytes >> 10,
            if pagemap { "" } else { ", no PAGEMAP_SCAN" }
        );
        (label, load(&sandbox_with(bytes, pagemap), "orders"))
    })
    .collect();
    // `NIMBUS_BENCH_COMPARE_DIR=<dir>`: the same three guests from another
    // build (e.g. another allocator or profile), run interleaved with these.
    let compare_dir = std::env::var_os("NIMBUS_BENCH_COMPARE_DIR").map(PathBuf::from);
    let compared: Vec<(String, _)> = compare_dir
        .iter()
        .flat_map(|dir| {
            ["order-decision", "orders", "noop"]
                .into_iter()
                .filter_map(|name| {
                    // A build from before a guest existed lacks it: skip it.
                    let path = dir.join(format!("{}.wasm", name.replace('-', "_")));
                    let Ok(bytes) = std::fs::read(&path) else {
                        eprintln!("{}: absent, not compared", path.display());
                        return None;
                    };
                    let version = default_sandbox
                        .load_bytes(name, &bytes, Limits::default(), BTreeMap::new())
                        .unwrap();
                    let build = dir.file_name().unwrap_or(dir.as_os_str()).to_string_lossy();
                    Some((format!("{name} from compare dir {build}"), version))
                })
        })
        .collect();
    let event = order_event();
    let noop_event = Event {
        event_type: "Noop".into(),
        ..order_event()
    };
    // Sanity: both sides reach the same decision, and so does the example.
    assert_eq!(
        decision.invoke(event.clone()).report.result,
        Ok(Outcome::Completed)
    );
    assert_eq!(native_decision(ORDER), Decision::Completed);
    for naive in naive_pooled.iter().chain(&naive_on_demand) {
        assert!(naive.invoke("OrderPlaced", ORDER));
    }
    assert_eq!(
        orders.invoke(event.clone()).report.result,
        Ok(Outcome::Completed)
    );
    assert_eq!(
        noop.invoke(noop_event.clone()).report.result,
        Ok(Outcome::Completed)
    );

    let mut wasm = Samples::default();
    let mut wasm_orders = Samples::default();
    let mut naive_pooled_samples = Samples::default();
    let mut naive_on_demand_samples = Samples::default();
    let mut wasm_noop = Samples::default();
    let mut native = Samples::default();
    let mut variants: Vec<Samples> = resident_variants
        .iter()
        .map(|_| Samples::default())
        .collect();
    let mut compared_samples: Vec<Samples> = compared.iter().map(|_| Samples::default()).collect();
    for _ in 0..BATCHES {
        wasm.measure(|| {
            black_box(decision.invoke(black_box(event.clone())));
        });
        for (naive, samples) in [
            (&naive_pooled, &mut naive_pooled_samples),
            (&naive_on_demand, &mut naive_on_demand_samples),
        ] {
            if let Some(naive) = naive {
                samples.measure(|| {
                    black_box(naive.invoke("OrderPlaced", black_box(&event.payload)));
                });
            }
        }
        wasm_orders.measure(|| {
            black_box(orders.invoke(black_box(event.clone())));
        });
        wasm_noop.measure(|| {
            black_box(noop.invoke(black_box(noop_event.clone())));
        });
        native.measure(|| {
            // Clone the payload too, as the wasm side's event is cloned.
            let payload = black_box(event.payload.clone());
            black_box(native_decision(&payload));
        });
        for ((_, version), samples) in resident_variants.iter().zip(&mut variants) {
            samples.measure(|| {
                black_box(version.invoke(black_box(event.clone())));
            });
        }
        for ((label, version), samples) in compared.iter().zip(&mut compared_samples) {
            let event = if label.starts_with("noop") {
                &noop_event
            } else {
                &event
            };
            samples.measure(|| {
                black_box(version.invoke(black_box(event.clone())));
            });
        }
    }
    let default_resident = SandboxConfig::default().keep_resident_bytes >> 10;
    let default_scan = if SandboxConfig::default().pagemap_scan {
        "scan"
    } else {
        "no scan"
    };
    let ((wasm_wall, wasm_cpu), (native_wall, native_cpu)) = (wasm.medians(), native.medians());
    let ((orders_wall, orders_cpu), (noop_wall, noop_cpu)) =
        (wasm_orders.medians(), wasm_noop.medians());
    println!(
        "dispatch: median µs per event over {BATCHES} interleaved batches of {PER_BATCH}, payload {} bytes",
        ORDER.len()
    );
    println!(
        "  ({default_resident} KiB resident, {default_scan}; wasm = fresh store + instance + call)   wall  thread-cpu"
    );
    println!("  wasm   deserialize+decide (order-decision)    {wasm_wall:8.2}  {wasm_cpu:8.2}");
    println!("  native deserialize+decide (same source)       {native_wall:8.2}  {native_cpu:8.2}");
    println!(
        "  ratio wasm / native                           {:7.1}x  {:7.1}x",
        wasm_wall / native_wall,
        wasm_cpu / native_cpu
    );
    // DESIGN.md's reference set-ups, on cargo's unslimmed build of the
    // guest with all of WASI linked (benches/dispatch/naive.rs); DESIGN.md
    // reported 22 µs pooled and 38.6 µs on-demand for its own guest.
    if naive_pooled.is_some() {
        let (pooled_wall, pooled_cpu) = naive_pooled_samples.medians();
        let (on_demand_wall, on_demand_cpu) = naive_on_demand_samples.medians();
        println!(
            "  wasm   naive reference set-up, pooled         {pooled_wall:8.2}  {pooled_cpu:8.2}   (unslimmed, full WASI)"
        );
        println!(
            "  wasm   naive reference set-up, on-demand      {on_demand_wall:8.2}  {on_demand_cpu:8.2}   (unslimmed, full WASI)"
        );
    }
    println!(
        "  wasm   orders example (+ config get, log line) {orders_wall:8.2}  {orders_cpu:8.2}"
    );
    println!("  wasm   noop (instance + call, no work)        {noop_wall:8.2}  {noop_cpu:8.2}");
    for ((label, _), samples) in resident_variants.iter().zip(&variants) {
        let (wall, cpu) = samples.medians();
        println!("  wasm   orders, {label:<32}  {wall:8.2}  {cpu:8.2}");
    }
    for ((label, _), samples) in compared.iter().zip(&compared_samples) {
        let (wall, cpu) = samples.medians();
        println!("  wasm   {label:<40}  {wall:8.2}  {cpu:8.2}");
    }
}

fn bench_hot_swap() {
    let root = tempfile::tempdir().unwrap();
    let handlers = root.path().join("handlers");
    let endpoint = handlers.join("ep");
    std::fs::create_dir_all(&endpoint).unwrap();
    let config = SandboxConfig {
        cache_dir: Some(root.path().join("cache")),
        ..SandboxConfig::default()
    };
    let debounce = config.watch_debounce;
    let sandbox = Sandbox::new(config).unwrap();
    let versions = [guest("swap-v1"), guest("swap-v2")];
    // Warm the cache with both versions' compiled forms.
    for bytes in &versions {
        sandbox
            .load_bytes("swap", bytes, Limits::default(), BTreeMap::new())
            .unwrap();
    }
    let target = endpoint.join("swap.wasm");
    std::fs::write(&target, &versions[0]).unwrap();
    let registry = Registry::open(sandbox.clone(), &handlers).unwrap();
    let _watching = registry.watch().unwrap();
    let mut latencies = Vec::with_capacity(SWAPS);
    let swap_event = Event {
        event_type: "Swap".into(),
        payload: "{}".into(),
        ..order_event()
    };
    for i in 1..=SWAPS {
        let bytes = &versions[i % 2];
        let digest = Digest::of(bytes);
        let temp = endpoint.join(".swap.wasm.tmp");
        std::fs::write(&temp, bytes).unwrap();
        let start = Instant::now();
        std::fs::rename(&temp, &target).unwrap();
        loop {
            let version = registry.lookup("ep", "Swap").unwrap();
            if version.digest() == digest {
                let invocation = version.invoke(swap_event.clone());
                assert_eq!(invocation.digest, digest);
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "swap never happened"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        latencies.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let compiles_after_warmup = sandbox.cache_stats().compiles;
    let max = latencies.iter().copied().fold(0.0, f64::max);
    println!("hot swap: rename of a cached component → first event served by it ({SWAPS} swaps)");
    println!(
        "  median {:7.1} ms   max {max:7.1} ms   (watcher quiet period {} ms)",
        median(latencies),
        debounce.as_millis()
    );
    println!(
        "  compilations: {compiles_after_warmup} (both versions compiled once during warm-up)"
    );
    let _ = Arc::clone(&registry);
}

/// `NIMBUS_BENCH_PROFILE=<guest>:<events>`: only invoke that guest, for a
/// profiler (`perf record`, `valgrind --tool=callgrind`) to count where the
/// per-event work goes. `NIMBUS_BENCH_CACHE=<dir>` keeps the compiled form
/// there, so a run under valgrind does not compile with cranelift.
fn profile(spec: &str) {
    let (name, events) = spec
        .split_once(':')
        .expect("NIMBUS_BENCH_PROFILE=<guest>:<events>");
    let events: usize = events.parse().expect("a number of events");
    // A small pool: valgrind cannot reserve the default pool's address space.
    let sandbox = Sandbox::new(SandboxConfig {
        cache_dir: std::env::var_os("NIMBUS_BENCH_CACHE").map(PathBuf::from),
        max_concurrent_instances: 2,
        max_memory_bytes: Limits::default().memory_bytes,
        // `NIMBUS_BENCH_SCAN=1`: reset slots with `PAGEMAP_SCAN`.
        pagemap_scan: std::env::var_os("NIMBUS_BENCH_SCAN").is_some(),
        ..SandboxConfig::default()
    })
    .unwrap();
    let version = sandbox
        .load_bytes(name, &guest(name), Limits::default(), BTreeMap::new())
        .unwrap();
    // What the instantiation has to link, per event.
    eprintln!("{name} imports: {:?}", version.imports());
    eprintln!("{name} exports: {:?}", version.exports());
    let event = event_for(name);
    assert_eq!(
        version.invoke(event.clone()).report.result,
        Ok(Outcome::Completed)
    );
    for _ in 0..events {
        black_box(version.invoke(black_box(event.clone())));
    }
}

/// `NIMBUS_BENCH_PAGES=<guest>`: which 4 KiB pages of linear memory one
/// event writes (Linux only). One pool slot, reset with `PAGEMAP_SCAN`, so
/// after an event the slot's privately written pages are exactly the ones
/// the event dirtied; untouched image pages stay mapped from the image file
/// and untouched zero pages stay absent or the shared zero page.
fn pages(name: &str) {
    let sandbox = Sandbox::new(SandboxConfig {
        max_concurrent_instances: 1,
        max_memory_bytes: Limits::default().memory_bytes,
        pagemap_scan: true,
        ..SandboxConfig::default()
    })
    .unwrap();
    let version = sandbox
        .load_bytes(name, &guest(name), Limits::default(), BTreeMap::new())
        .unwrap();
    let event = event_for(name);
    for _ in 0..3 {
        assert_eq!(
            version.invoke(event.clone()).report.result,
            Ok(Outcome::Completed)
        );
    }
    // The slot: the mapping of the memory image, and the reservation around it.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let parse = |line: &str| {
        let range = line.split_whitespace().next().unwrap();
        let (start, end) = range.split_once('-').unwrap();
        (
            usize::from_str_radix(start, 16).unwrap(),
            usize::from_str_radix(end, 16).unwrap(),
        )
    };
    let lines: Vec<&str> = maps.lines().collect();
    let image_at = lines
        .iter()
        .position(|l| l.contains("wasm-memory-image"))
        .expect("no memory image mapped: a guest without data segments?");
    let (image_start, image_end) = parse(lines[image_at]);
    // Linear memory starts in the anonymous mapping just before the image
    // (the stack, for a stack-first Rust guest); look 1 MiB either side.
    let from = image_start.saturating_sub(1 << 20);
    let to = image_end + (1 << 20);
    let mut pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
    let page = 4096;
    let mut entries = vec![0u8; (to - from) / page * 8];
    pagemap
        .seek(SeekFrom::Start((from / page * 8) as u64))
        .unwrap();
    pagemap.read_exact(&mut entries).unwrap();
    println!(
        "{name}: pages present after 3 events, relative to the image mapping's start \
         (image: {} KiB)",
        (image_end - image_start) >> 10
    );
    let (mut written, mut file, mut other) = (0, 0, 0);
    for (i, entry) in entries.chunks_exact(8).enumerate() {
        let entry = u64::from_le_bytes(entry.try_into().unwrap());
        if entry >> 63 == 0 {
            continue;
        }
        let address = from + i * page;
        let rel = address as isize - image_start as isize;
        let kind = if entry >> 61 & 1 == 1 {
            file += 1;
            "image page, read or never touched, not written"
        } else if entry >> 56 & 1 == 1 {
            written += 1;
            "written (private copy)"
        } else {
            other += 1;
            "other (the shared zero page: read, never written)"
        };
        println!("  {:+8} KiB  {kind}", rel / 1024);
    }
    println!("  written {written}, image {file}, other {other}");
}

fn main() {
    if let Ok(name) = std::env::var("NIMBUS_BENCH_PAGES") {
        pages(&name);
        return;
    }
    if let Ok(spec) = std::env::var("NIMBUS_BENCH_PROFILE") {
        profile(&spec);
        return;
    }
    // `cargo test --benches` runs bench binaries with `--bench` absent: keep it quick then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("run with `cargo bench -p nimbus-sandbox --bench dispatch`");
        return;
    }
    bench_dispatch();
    bench_hot_swap();
}
