//! What one handler run produced, as the engine settles it.

use crate::{FollowUp, HandlerError, Outcome};

/// One handler run: its answer, the follow-ups it asked for (held until
/// the answer is known), and the version that ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The handler's outcome, or its error (the host's `Trap`, `Timeout`,
    /// `MemoryLimit` and `Panic` included).
    pub result: Result<Outcome, HandlerError>,
    /// Follow-up events, in the order the handler published them: sent at
    /// settlement if the result is `Ok`, dropped on an error.
    pub follow_ups: Vec<FollowUp>,
    /// The identity of the handler version that ran (the sandbox's
    /// `sha256:…` version id), recorded with the outcome; empty when none
    /// ran.
    pub version: String,
}

impl Report {
    /// A run that failed before any version ran, or whose version is lost:
    /// `error`, no follow-ups, `version` as given.
    pub fn failed(error: HandlerError, version: String) -> Self {
        Report {
            result: Err(error),
            follow_ups: Vec::new(),
            version,
        }
    }
}
