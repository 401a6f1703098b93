//! [`BrokerOptions`]: how to open a broker (its data directory, durability,
//! clock, segment size and request limit).

use std::path::PathBuf;
use std::sync::Arc;

use super::plan::DEFAULT_MAX_REQUEST_BYTES;
use crate::clock::{Clock, SystemClock};
use crate::durability::Durability;
use crate::store;

/// How to open a broker.
#[derive(Clone)]
pub struct BrokerOptions {
    pub(crate) data_dir: PathBuf,
    pub(crate) durability: Durability,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) segment_bytes: u64,
    pub(crate) max_request_bytes: usize,
}

impl std::fmt::Debug for BrokerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerOptions")
            .field("data_dir", &self.data_dir)
            .field("durability", &self.durability)
            .field("segment_bytes", &self.segment_bytes)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish_non_exhaustive()
    }
}

impl BrokerOptions {
    /// A broker keeping its data in `data_dir`, at `fsync` durability, on
    /// the system clock.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        BrokerOptions {
            data_dir: data_dir.into(),
            durability: Durability::default(),
            clock: Arc::new(SystemClock),
            segment_bytes: store::DEFAULT_SEGMENT_BYTES,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
        }
    }

    /// Sets the size at which the log starts a new segment (64 MiB by
    /// default). Sealed segments are folded into a snapshot in the
    /// background, so the log on disk stays within about twice what is live
    /// plus a segment or two. Smaller segments mean more, smaller compactions.
    pub fn log_segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes.max(1);
        self
    }

    /// Sets the most bytes of messages one request may store (256 MiB by
    /// default, at most that): a publish with every copy its routing
    /// makes, or a settlement with its publishes. A larger request is
    /// refused with a reason. Whatever sends through the broker must fit
    /// its own requests under it: nimbus's engine needs ~4 MiB for one
    /// event's settlement at the API's largest payload, so `nimbus.toml`
    /// holds it at 16 MiB or more; tests lower it to cross it cheaply.
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes.clamp(1, DEFAULT_MAX_REQUEST_BYTES);
        self
    }

    /// Sets the durability level.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets the clock (tests pass a [`ManualClock`](crate::ManualClock)).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}
