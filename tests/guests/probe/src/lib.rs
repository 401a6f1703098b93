//! `probe`: claims `Probe` and tries what a sandboxed handler must not be
//! able to do: read a file (`/etc/passwd`), list the working directory, read
//! environment variables (`HOME`, `PATH`, and how many there are) and open a
//! TCP connection to `127.0.0.1:80`. It never fails because of what it finds:
//! it logs each result and publishes them as a `ProbeResult` follow-up
//! (message id `{event id}:probe`), then completes. In a correct sandbox the
//! payload reads
//!
//! ```json
//! {"file":"denied: ...","dir":"denied: ...","env":null,"path":null,"env_count":0,"socket":"denied: ..."}
//! ```

use std::io::Read;
use std::net::TcpStream;

use nimbus_guest::{Context, Error, Event, FollowUp, Handler, Outcome};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

/// Any JSON payload.
#[derive(Deserialize)]
pub struct Probe(IgnoredAny);

impl Event for Probe {
    const EVENT_TYPE: &'static str = "Probe";
}

/// What the probe saw; each string starts with `denied: ` when the attempt
/// failed, followed by the error.
#[derive(Debug, Serialize)]
pub struct ProbeResult {
    /// Reading `/etc/passwd`.
    pub file: String,
    /// Listing `.`.
    pub dir: String,
    /// `HOME`, if the variable was visible.
    pub env: Option<String>,
    /// `PATH`, if the variable was visible.
    pub path: Option<String>,
    /// How many environment variables were visible.
    pub env_count: usize,
    /// Connecting to `127.0.0.1:80`.
    pub socket: String,
}

impl Event for ProbeResult {
    const EVENT_TYPE: &'static str = "ProbeResult";
}

fn denied(e: &std::io::Error) -> String {
    format!("denied: {e}")
}

fn probe() -> ProbeResult {
    let file = match std::fs::File::open("/etc/passwd") {
        Ok(mut f) => {
            let mut text = String::new();
            match f.read_to_string(&mut text) {
                Ok(n) => format!("read {n} bytes"),
                Err(e) => format!("opened, but {}", denied(&e)),
            }
        }
        Err(e) => denied(&e),
    };
    let dir = match std::fs::read_dir(".") {
        Ok(entries) => format!("listed {} entries", entries.count()),
        Err(e) => denied(&e),
    };
    let socket = match TcpStream::connect("127.0.0.1:80") {
        Ok(stream) => format!("connected to {:?}", stream.peer_addr().ok()),
        Err(e) => denied(&e),
    };
    ProbeResult {
        file,
        dir,
        env: std::env::var("HOME").ok(),
        path: std::env::var("PATH").ok(),
        env_count: std::env::vars_os().count(),
        socket,
    }
}

/// Probes the sandbox.
pub struct Prober;

impl Handler<Probe> for Prober {
    fn handle(&self, _: Probe, ctx: &Context) -> Result<Outcome, Error> {
        let seen = probe();
        nimbus_guest::info!(ctx, {
            file: seen.file,
            dir: seen.dir,
            env: format!("{:?}", seen.env),
            path: format!("{:?}", seen.path),
            env_count: seen.env_count,
            socket: seen.socket,
        }, "probe: what the sandbox let through");
        ctx.publish(FollowUp::event(format!("{}:probe", ctx.event_id()), &seen))?;
        Ok(Outcome::Completed)
    }
}

nimbus_guest::export!(Prober => Probe);
