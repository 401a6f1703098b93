//! The open files the host may have: raised to the most the system allows
//! at start, and shared out so the AMQP endpoint cannot take them all.
//!
//! Every connection is a file descriptor. Under the common soft limit of
//! 1,024, a thousand idle AMQP connections once left the HTTP API unable
//! to accept (`/health` timed out) and filled the log with "Too many open
//! files" (issue 40). The soft limit is only a default: the host raises it
//! to the hard limit, as servers do, and caps the endpoint's connections
//! below what is left after a reserve for the API, the broker's and the
//! Resolver's files, and the handlers directory.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors kept back from the AMQP endpoint: the API's connections,
/// the broker's segments and checkpoints, SQLite, the watcher, logs.
pub(crate) const RESERVE: u64 = 512;

/// The process's open-file limit after [`raise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenFiles {
    /// The limit in force (`None`: unlimited).
    pub(crate) soft: Option<u64>,
}

/// Raises the soft open-file limit to the hard limit. A system that
/// refuses leaves it as it was; either way the limit in force is answered.
pub(crate) fn raise() -> OpenFiles {
    let limit = getrlimit(Resource::Nofile);
    let before = limit.current;
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    let soft = if raised.current != before && setrlimit(Resource::Nofile, raised).is_ok() {
        getrlimit(Resource::Nofile).current
    } else {
        before
    };
    OpenFiles { soft }
}

impl OpenFiles {
    /// How many AMQP connections to serve when `configured` are asked for:
    /// no more than the limit leaves after [`RESERVE`] (and at least one).
    pub(crate) fn amqp_connections(self, configured: usize) -> usize {
        match self.soft {
            None => configured,
            Some(soft) => {
                let left = usize::try_from(soft.saturating_sub(RESERVE)).unwrap_or(usize::MAX);
                configured.min(left).max(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_gets_what_the_reserve_leaves() {
        let files = |soft| OpenFiles { soft };
        assert_eq!(files(Some(1024)).amqp_connections(1024), 512);
        assert_eq!(files(Some(1_048_576)).amqp_connections(1024), 1024);
        assert_eq!(files(None).amqp_connections(1024), 1024);
        assert_eq!(files(Some(100)).amqp_connections(1024), 1);
    }

    #[test]
    fn raising_reaches_the_hard_limit() {
        let raised = raise();
        assert_eq!(raised.soft, getrlimit(Resource::Nofile).maximum);
    }
}
