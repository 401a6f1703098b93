//! Consumers' inbox records (decision 0051): written in a settlement's
//! commit, asked by `Transport::inbox_contains`, purged as they expire.

use std::collections::HashMap;
use std::time::SystemTime;

use nimbus_transport::InboxRecord;

use crate::records::StoreOp;

/// How many inbox records may be written between two purges of expired ones.
const INBOX_PURGE_EVERY: usize = 10_000;

/// Consumers' inbox records in memory: (scope, key) → expiry. The log holds
/// the same, written in the settlement's commit.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    records: HashMap<(String, String), SystemTime>,
    writes_since_purge: usize,
}

impl Inbox {
    /// Records kept, expired ones not purged yet included.
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether `key` is recorded in `scope` and not expired at `now`.
    pub(crate) fn contains(&self, scope: &str, key: &str, now: SystemTime) -> bool {
        // Keys are short; the tuple allocation is cheaper than a second map level.
        self.records
            .get(&(scope.to_owned(), key.to_owned()))
            .is_some_and(|expires| *expires > now)
    }

    /// Records each of `records`, and now and then forgets expired ones.
    pub(super) fn record(
        &mut self,
        records: &[InboxRecord],
        now: SystemTime,
        ops: &mut Vec<StoreOp>,
    ) {
        for record in records {
            self.records.insert(
                (record.scope.clone(), record.key.clone()),
                record.expires_at,
            );
            ops.push(StoreOp::PutInbox {
                scope: record.scope.clone(),
                key: record.key.clone(),
                expires: record.expires_at,
            });
        }
        self.writes_since_purge += records.len();
        if self.writes_since_purge >= INBOX_PURGE_EVERY {
            self.writes_since_purge = 0;
            self.records.retain(|_, expires| *expires > now);
            ops.push(StoreOp::PruneInbox { before: now });
        }
    }

    /// Restores a record the log holds (at open).
    pub(super) fn restore(&mut self, scope: String, key: String, expires: SystemTime) {
        self.records.insert((scope, key), expires);
    }
}
