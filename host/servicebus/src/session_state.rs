//! What this transport keeps in a Service Bus session's state: the
//! engine's state and the session's inbox records, in one value, so one
//! `set-session-state` writes both (decision 0137). Service Bus has no
//! inbox of its own, and a settlement's steps cannot be one transaction
//! there; state and inbox written together never disagree.
//!
//! Layout: the magic `nimbus-state/1\n`, the engine's state (a u32 length,
//! `u32::MAX` for none, then the bytes), a u32 count of records, and each
//! record as a u16-length scope, a u16-length key and its expiry in ms
//! since 1970 (i64), all big-endian. A state without the magic was written
//! by someone else (a NimBus .NET subscriber): it is the engine's state as
//! it is, with no inbox.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MAGIC: &[u8] = b"nimbus-state/1\n";
const NO_STATE: u32 = u32::MAX;

/// The most inbox records a session keeps: the newest, about 100 bytes
/// each. The inbox guards against a redelivery of a message just handled
/// (a crash between a settlement's steps); a duplicate older than the last
/// thousand of its session is not recognised.
pub(crate) const MAX_RECORDS: usize = 1000;

/// One inbox record: a message of this session already handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InboxRecord {
    pub scope: String,
    pub key: String,
    pub expires_at: SystemTime,
}

/// A session's state as this transport keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Stored {
    pub engine: Option<Vec<u8>>,
    pub inbox: Vec<InboxRecord>,
}

/// Why a stored state does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the session state is cut short or damaged ({0})")]
pub(crate) struct Damaged(&'static str);

impl Stored {
    /// Reads what `set-session-state` wrote; `None` is no state at all.
    pub(crate) fn read(bytes: Option<&[u8]>) -> Result<Stored, Damaged> {
        let Some(bytes) = bytes else {
            return Ok(Stored::default());
        };
        let Some(mut rest) = bytes.strip_prefix(MAGIC) else {
            return Ok(Stored {
                engine: Some(bytes.to_vec()),
                inbox: Vec::new(),
            });
        };
        let mut take = |n: usize, what: &'static str| -> Result<&[u8], Damaged> {
            if rest.len() < n {
                return Err(Damaged(what));
            }
            let (head, tail) = rest.split_at(n);
            rest = tail;
            Ok(head)
        };
        let u32_of = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let length = u32_of(take(4, "engine state length")?);
        let engine = if length == NO_STATE {
            None
        } else {
            Some(take(length as usize, "engine state")?.to_vec())
        };
        let count = u32_of(take(4, "inbox count")?);
        let mut inbox = Vec::new();
        for _ in 0..count {
            let mut text = |what: &'static str| -> Result<String, Damaged> {
                let n = take(2, what)?;
                let n = usize::from(u16::from_be_bytes([n[0], n[1]]));
                String::from_utf8(take(n, what)?.to_vec()).map_err(|_| Damaged(what))
            };
            let scope = text("inbox scope")?;
            let key = text("inbox key")?;
            let ms = take(8, "inbox expiry")?;
            let ms = i64::from_be_bytes(ms.try_into().map_err(|_| Damaged("inbox expiry"))?);
            let expires_at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
            inbox.push(InboxRecord {
                scope,
                key,
                expires_at,
            });
        }
        Ok(Stored { engine, inbox })
    }

    /// The bytes to store; `None` when there is nothing (the state is
    /// cleared).
    pub(crate) fn write(&self) -> Option<Vec<u8>> {
        // An engine state that happens to open with the mark is wrapped, so
        // it is not read back as ours.
        let like_ours = self
            .engine
            .as_ref()
            .is_some_and(|state| state.starts_with(MAGIC));
        if self.inbox.is_empty() && !like_ours {
            // Nothing of ours to keep: the engine's state as it is, which a
            // .NET reader of the same session also reads.
            return self.engine.clone();
        }
        let mut out = MAGIC.to_vec();
        match &self.engine {
            Some(state) => {
                out.extend(
                    u32::try_from(state.len())
                        .unwrap_or(NO_STATE - 1)
                        .to_be_bytes(),
                );
                out.extend(state);
            }
            None => out.extend(NO_STATE.to_be_bytes()),
        }
        out.extend(u32::try_from(self.inbox.len()).unwrap_or(0).to_be_bytes());
        for record in &self.inbox {
            for text in [&record.scope, &record.key] {
                let bytes = &text.as_bytes()[..text.len().min(usize::from(u16::MAX))];
                out.extend(u16::try_from(bytes.len()).unwrap_or(u16::MAX).to_be_bytes());
                out.extend(bytes);
            }
            let ms = record
                .expires_at
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            out.extend(ms.to_be_bytes());
        }
        Some(out)
    }

    /// Drops records that have expired by `now`, and the oldest beyond
    /// [`MAX_RECORDS`]: the state is one value Service Bus caps at its
    /// message size (256 KB on Standard), rewritten on every settlement.
    pub(crate) fn forget_expired(&mut self, now: SystemTime) {
        self.inbox.retain(|record| record.expires_at > now);
        if self.inbox.len() > MAX_RECORDS {
            let excess = self.inbox.len() - MAX_RECORDS;
            self.inbox.drain(..excess);
        }
    }

    pub(crate) fn contains(&self, scope: &str, key: &str, now: SystemTime) -> bool {
        self.inbox
            .iter()
            .any(|r| r.scope == scope && r.key == key && r.expires_at > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_and_inbox_read_back_and_a_foreign_state_is_the_engines() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let stored = Stored {
            engine: Some(b"engine".to_vec()),
            inbox: vec![InboxRecord {
                scope: "billing".to_owned(),
                key: "k1".to_owned(),
                expires_at: now + Duration::from_secs(60),
            }],
        };
        let bytes = stored.write().expect("bytes");
        let read = Stored::read(Some(&bytes)).expect("reads");
        assert_eq!(read, stored);
        assert!(read.contains("billing", "k1", now));
        assert!(!read.contains("billing", "k1", now + Duration::from_secs(61)));
        assert_eq!(
            Stored::read(Some(b"written by .NET"))
                .expect("reads")
                .engine
                .as_deref(),
            Some(&b"written by .NET"[..])
        );
        assert!(Stored::read(Some(&bytes[..bytes.len() - 3])).is_err());
        assert_eq!(Stored::default().write(), None);
        let no_engine = Stored {
            engine: None,
            ..stored
        };
        assert_eq!(
            Stored::read(no_engine.write().as_deref()).expect("reads"),
            no_engine
        );
    }

    #[test]
    fn the_inbox_keeps_the_newest_records_and_an_engine_state_like_ours_is_kept() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let mut stored = Stored::default();
        for n in 0..MAX_RECORDS + 5 {
            stored.inbox.push(InboxRecord {
                scope: "s".to_owned(),
                key: format!("k{n}"),
                expires_at: now + Duration::from_secs(60),
            });
        }
        stored.forget_expired(now);
        assert_eq!(stored.inbox.len(), MAX_RECORDS);
        assert!(!stored.contains("s", "k4", now) && stored.contains("s", "k5", now));
        let odd = Stored {
            engine: Some([MAGIC, b"engine"].concat()),
            inbox: Vec::new(),
        };
        assert_eq!(Stored::read(odd.write().as_deref()).expect("reads"), odd);
    }
}
