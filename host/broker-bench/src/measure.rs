//! What every system's run records and reports, so nimbus, RabbitMQ and
//! JetStream figures are computed by the very same code.

use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};

/// Completions and their latencies, counted only while `measuring` is set.
#[derive(Default)]
pub(crate) struct Record {
    pub(crate) measuring: AtomicBool,
    completed: AtomicU64,
    latencies_us: Mutex<Vec<u32>>,
}

impl Record {
    /// One message completed (its settlement acknowledged or, for the
    /// AMQP / JetStream clients, sent); `published_at` is when its publish
    /// call started.
    pub(crate) fn complete(&self, published_at: Instant) {
        if self.measuring.load(Ordering::Relaxed) {
            let us = u32::try_from(published_at.elapsed().as_micros()).unwrap_or(u32::MAX);
            self.completed.fetch_add(1, Ordering::Relaxed);
            self.latencies_us
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(us);
        }
    }
}

/// One scenario's figures.
pub(crate) struct Outcome {
    pub(crate) rate: f64,
    /// CPU time (user + system) per measured message of this process and,
    /// when given, the server process.
    pub(crate) cpu_us_per_message: Option<f64>,
    pub(crate) p50_us: u32,
    pub(crate) p99_us: u32,
    pub(crate) max_us: u32,
    pub(crate) measured: u64,
    pub(crate) total: u64,
}

/// Measures one running load: warm up, then count completions for
/// `seconds`, then returns what to report once the load has drained.
pub(crate) struct Window {
    started: Instant,
    cpu_before: Option<Duration>,
    server_pid: Option<u32>,
}

impl Window {
    /// Starts measuring now.
    pub(crate) fn open(record: &Record, server_pid: Option<u32>) -> Self {
        record.measuring.store(true, Ordering::Relaxed);
        Self {
            started: Instant::now(),
            cpu_before: cpu_now(server_pid),
            server_pid,
        }
    }

    /// Stops measuring; `total` and `completed` are checked by the caller
    /// after draining, so only the figures are computed here.
    pub(crate) fn close(self, record: &Record) -> Closed {
        record.measuring.store(false, Ordering::Relaxed);
        Closed {
            elapsed: self.started.elapsed(),
            cpu: self
                .cpu_before
                .zip(cpu_now(self.server_pid))
                .map(|(before, after)| after.saturating_sub(before)),
        }
    }
}

/// A closed measuring window.
pub(crate) struct Closed {
    elapsed: Duration,
    cpu: Option<Duration>,
}

impl Closed {
    /// The figures, once the run drained and every message published was
    /// completed (`completed == total`, else the run fails).
    pub(crate) fn outcome(self, record: &Record, completed: u64, total: u64) -> Result<Outcome> {
        ensure!(
            completed == total,
            "{total} messages published but {completed} completed"
        );
        let measured = record.completed.load(Ordering::Relaxed);
        let mut latencies = std::mem::take(
            &mut *record
                .latencies_us
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        ensure!(!latencies.is_empty(), "nothing completed while measuring");
        latencies.sort_unstable();
        let at = |q: f64| {
            let i = ((latencies.len() as f64 - 1.0) * q).round() as usize;
            latencies[i.min(latencies.len() - 1)]
        };
        Ok(Outcome {
            rate: measured as f64 / self.elapsed.as_secs_f64(),
            cpu_us_per_message: self
                .cpu
                .map(|cpu| cpu.as_secs_f64() * 1e6 / measured as f64),
            p50_us: at(0.50),
            p99_us: at(0.99),
            max_us: at(1.0),
            measured,
            total,
        })
    }
}

/// The 16-byte header every body starts with: publish time (µs since
/// `epoch`) and the message's index within its session / queue / subject;
/// the rest is zeros up to `len`.
pub(crate) fn body(len: usize, epoch: Instant, index: u64) -> Vec<u8> {
    let now_us = u64::try_from(epoch.elapsed().as_micros()).unwrap_or(u64::MAX);
    let mut body = vec![0u8; len.max(16)];
    body[..8].copy_from_slice(&now_us.to_le_bytes());
    body[8..16].copy_from_slice(&index.to_le_bytes());
    body
}

/// Reads a body's header back: (publish instant, index).
pub(crate) fn parse_body(body: &[u8], epoch: Instant) -> Result<(Instant, u64)> {
    ensure!(body.len() >= 16, "body of {} bytes: too short", body.len());
    let mut stamp = [0u8; 8];
    stamp.copy_from_slice(&body[..8]);
    let mut index = [0u8; 8];
    index.copy_from_slice(&body[8..16]);
    Ok((
        epoch + Duration::from_micros(u64::from_le_bytes(stamp)),
        u64::from_le_bytes(index),
    ))
}

/// CPU time of this process plus, when given, the server process.
fn cpu_now(server_pid: Option<u32>) -> Option<Duration> {
    let own = process_cpu("self")?;
    match server_pid {
        None => Some(own),
        Some(pid) => Some(own + process_cpu(&pid.to_string())?),
    }
}

/// User + system CPU time of a process so far (all its threads), from
/// `/proc/PID/stat` (Linux; clock ticks of 1/100 s, the kernel's `USER_HZ`
/// on every common architecture). `None` elsewhere.
fn process_cpu(pid: &str) -> Option<Duration> {
    const TICKS_PER_SECOND: u64 = 100;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at
    // field 3 (state); utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(") ")?.1;
    let mut fields = rest.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis(
        (utime + stime) * 1000 / TICKS_PER_SECOND,
    ))
}
