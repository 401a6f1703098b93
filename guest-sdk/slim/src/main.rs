//! `nimbus-guest-slim IN.wasm OUT.wasm`: writes the slimmed component (or, if
//! it must not be slimmed, says why on stderr and exits with status 2, writing
//! nothing). `scripts/build-guests.sh` runs it on every guest it builds.

use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "usage: nimbus-guest-slim IN.wasm OUT.wasm

Strips the WASI stdio, environment and exit imports that Rust's std links into
a wasm32-wasip2 handler component for its panic path only (fewer host functions
to wire up per event). OUT may be IN. Exit status: 0 written (or nothing to
strip: OUT is a copy of IN), 2 refused (the handler uses what would be
stripped, imports other WASI interfaces, or is a preview 1 build: ship IN as
it is; nothing written), 1 error.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let [input, output] = args.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::FAILURE;
    };
    let bytes = match std::fs::read(input) {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!("nimbus-guest-slim: reading {input}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let slimmed = match nimbus_guest_slim::slim(&bytes) {
        Ok(slimmed) => slimmed,
        Err(
            e @ (nimbus_guest_slim::SlimError::UsesStdio { .. }
            | nimbus_guest_slim::SlimError::OtherWasi(_)
            | nimbus_guest_slim::SlimError::Preview1(_)),
        ) => {
            eprintln!("nimbus-guest-slim: {input} kept whole: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("nimbus-guest-slim: {input}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = write_atomically(Path::new(output), &slimmed.component) {
        eprintln!("nimbus-guest-slim: writing {output}: {e}");
        return ExitCode::FAILURE;
    }
    eprintln!(
        "nimbus-guest-slim: {input}: stripped {} imports ({} -> {} bytes)",
        slimmed.stripped.len(),
        bytes.len(),
        slimmed.component.len()
    );
    ExitCode::SUCCESS
}

/// Writes beside the target and renames: a reader (the hot-swap watcher, or
/// cargo's hard link to the same file) never sees a half-written component.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".slim-tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
