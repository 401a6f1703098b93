//! What the log's ops add up to: the live rows, folded in log order.
//!
//! Used twice: at open, to rebuild the broker from the snapshot and the
//! segments after it; and by the compactor, to fold sealed segments into the
//! next snapshot, which is this state written back out as ops.

use std::collections::BTreeMap;
use std::time::SystemTime;

use nimbus_transport::{SubscriptionSettings, TopicSettings};

use crate::records::{EntryRow, LoadedEntry, Snapshot, StoreOp};

#[derive(Debug)]
struct RuleRow {
    order: i64,
    filter: String,
    action: Option<String>,
}

#[derive(Debug)]
struct ScheduledRow {
    topic: String,
    at: SystemTime,
    message: Vec<u8>,
}

/// Every live row, keyed as the rows of the earlier SQLite schema were (so
/// the fold does what its statements did).
#[derive(Debug, Default)]
pub(crate) struct LiveState {
    sequence: i64,
    topics: BTreeMap<String, TopicSettings>,
    subscriptions: BTreeMap<(String, String), SubscriptionSettings>,
    rules: BTreeMap<(String, String, String), RuleRow>,
    entries: BTreeMap<i64, EntryRow>,
    scheduled: BTreeMap<i64, ScheduledRow>,
    session_states: BTreeMap<(String, String, String), Vec<u8>>,
    dedup: BTreeMap<(String, String), (SystemTime, i64)>,
    inbox: BTreeMap<(String, String), SystemTime>,
}

impl LiveState {
    /// Applies one op. An op on a row that is gone (an update of a deleted
    /// entry) changes nothing, as the SQL statements it replaced did.
    pub(crate) fn apply(&mut self, op: StoreOp) {
        match op {
            StoreOp::PutTopic { name, settings } => {
                self.topics.insert(name, settings);
            }
            StoreOp::DeleteTopic { name } => {
                self.topics.remove(&name);
                self.subscriptions.retain(|(t, _), _| *t != name);
                self.rules.retain(|(t, _, _), _| *t != name);
                self.entries.retain(|_, e| e.topic != name);
                self.scheduled.retain(|_, s| s.topic != name);
                self.session_states.retain(|(t, _, _), _| *t != name);
                self.dedup.retain(|(t, _), _| *t != name);
            }
            StoreOp::PutSubscription {
                topic,
                name,
                settings,
            } => {
                self.subscriptions.insert((topic, name), settings);
            }
            StoreOp::DeleteSubscription { topic, name } => {
                self.subscriptions.remove(&(topic.clone(), name.clone()));
                self.rules
                    .retain(|(t, s, _), _| !(*t == topic && *s == name));
                self.entries
                    .retain(|_, e| !(e.topic == topic && e.subscription == name));
                self.session_states
                    .retain(|(t, s, _), _| !(*t == topic && *s == name));
            }
            StoreOp::PutRule {
                topic,
                subscription,
                name,
                filter,
                action,
                order,
            } => {
                self.rules.insert(
                    (topic, subscription, name),
                    RuleRow {
                        order,
                        filter,
                        action,
                    },
                );
            }
            StoreOp::DeleteRule {
                topic,
                subscription,
                name,
            } => {
                self.rules.remove(&(topic, subscription, name));
            }
            StoreOp::InsertEntry(row) => {
                self.entries.insert(row.id, *row);
            }
            StoreOp::DeleteEntry { id } => {
                self.entries.remove(&id);
            }
            StoreOp::UpdateEntry {
                id,
                failures,
                message,
            } => {
                if let Some(entry) = self.entries.get_mut(&id) {
                    entry.failures = failures;
                    if let Some(message) = message {
                        entry.message = message;
                    }
                }
            }
            StoreOp::MoveToDeadLetter {
                id,
                failures,
                reason,
                description,
            } => {
                if let Some(entry) = self.entries.get_mut(&id) {
                    entry.dead_letter = true;
                    entry.failures = failures;
                    entry.dead_letter_reason = Some(reason);
                    entry.dead_letter_description = Some(description);
                }
            }
            StoreOp::InsertScheduled {
                seq,
                topic,
                at,
                message,
            } => {
                self.scheduled
                    .insert(seq, ScheduledRow { topic, at, message });
            }
            StoreOp::DeleteScheduled { seq } => {
                self.scheduled.remove(&seq);
            }
            StoreOp::SetSessionState {
                topic,
                subscription,
                session,
                state,
            } => {
                let key = (topic, subscription, session);
                match state {
                    Some(state) => {
                        self.session_states.insert(key, state);
                    }
                    None => {
                        self.session_states.remove(&key);
                    }
                }
            }
            StoreOp::PutDedup {
                topic,
                message_id,
                at,
                seq,
            } => {
                self.dedup.insert((topic, message_id), (at, seq));
            }
            StoreOp::PruneDedup { topic, before } => {
                self.dedup
                    .retain(|(t, _), (at, _)| !(*t == topic && *at < before));
            }
            StoreOp::PutInbox {
                scope,
                key,
                expires,
            } => {
                self.inbox.insert((scope, key), expires);
            }
            StoreOp::PruneInbox { before } => {
                self.inbox.retain(|_, expires| *expires > before);
            }
            StoreOp::SequenceHighWater(n) => {
                self.sequence = self.sequence.max(n);
            }
        }
    }

    /// The rows as the broker loads them, messages decoded.
    pub(crate) fn into_snapshot(self) -> Result<Snapshot, String> {
        let mut entries = Vec::with_capacity(self.entries.len());
        for (id, row) in self.entries {
            let decoded =
                crate::codec::decode(&row.message).map_err(|e| format!("entry {id}: {e}"))?;
            entries.push(LoadedEntry { row, decoded });
        }
        let mut scheduled = Vec::with_capacity(self.scheduled.len());
        for (seq, row) in self.scheduled {
            let message = crate::codec::decode(&row.message)
                .map_err(|e| format!("scheduled message {seq}: {e}"))?;
            scheduled.push((seq, row.topic, row.at, message));
        }
        let mut rules: Vec<_> = self.rules.into_iter().collect();
        rules.sort_by_key(|(_, rule)| rule.order);
        let mut dedup: Vec<_> = self
            .dedup
            .into_iter()
            .map(|((topic, id), (at, seq))| (topic, id, at, seq))
            .collect();
        dedup.sort_by_key(|(_, _, at, _)| *at);
        Ok(Snapshot {
            sequence: self.sequence,
            topics: self.topics.into_iter().collect(),
            subscriptions: self
                .subscriptions
                .into_iter()
                .map(|((topic, name), settings)| (topic, name, settings))
                .collect(),
            rules: rules
                .into_iter()
                .map(|((topic, sub, name), rule)| (topic, sub, name, rule.filter, rule.action))
                .collect(),
            entries,
            scheduled,
            session_states: self
                .session_states
                .into_iter()
                .map(|((topic, sub, session), state)| (topic, sub, session, state))
                .collect(),
            dedup,
            inbox: self
                .inbox
                .into_iter()
                .map(|((scope, key), expires)| (scope, key, expires))
                .collect(),
        })
    }

    /// The state as ops that rebuild it from nothing: a snapshot's content.
    pub(crate) fn into_ops(self) -> impl Iterator<Item = StoreOp> {
        let sequence = std::iter::once(StoreOp::SequenceHighWater(self.sequence));
        let topics = self
            .topics
            .into_iter()
            .map(|(name, settings)| StoreOp::PutTopic { name, settings });
        let subscriptions = self
            .subscriptions
            .into_iter()
            .map(|((topic, name), settings)| StoreOp::PutSubscription {
                topic,
                name,
                settings,
            });
        let rules = self
            .rules
            .into_iter()
            .map(|((topic, subscription, name), rule)| StoreOp::PutRule {
                topic,
                subscription,
                name,
                filter: rule.filter,
                action: rule.action,
                order: rule.order,
            });
        let entries = self
            .entries
            .into_values()
            .map(|row| StoreOp::InsertEntry(Box::new(row)));
        let scheduled = self
            .scheduled
            .into_iter()
            .map(|(seq, row)| StoreOp::InsertScheduled {
                seq,
                topic: row.topic,
                at: row.at,
                message: row.message,
            });
        let session_states =
            self.session_states
                .into_iter()
                .map(
                    |((topic, subscription, session), state)| StoreOp::SetSessionState {
                        topic,
                        subscription,
                        session,
                        state: Some(state),
                    },
                );
        let dedup = self
            .dedup
            .into_iter()
            .map(|((topic, message_id), (at, seq))| StoreOp::PutDedup {
                topic,
                message_id,
                at,
                seq,
            });
        let inbox = self
            .inbox
            .into_iter()
            .map(|((scope, key), expires)| StoreOp::PutInbox {
                scope,
                key,
                expires,
            });
        sequence
            .chain(topics)
            .chain(subscriptions)
            .chain(rules)
            .chain(entries)
            .chain(scheduled)
            .chain(session_states)
            .chain(dedup)
            .chain(inbox)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn entry(id: i64, topic: &str, subscription: &str) -> StoreOp {
        StoreOp::InsertEntry(Box::new(EntryRow {
            id,
            topic: topic.into(),
            subscription: subscription.into(),
            dead_letter: false,
            seq: id,
            enqueued: UNIX_EPOCH + Duration::from_secs(100),
            expires: None,
            failures: 0,
            dead_letter_reason: None,
            dead_letter_description: None,
            message: crate::codec::encode(&nimbus_transport::Message::new(vec![
                u8::try_from(id).unwrap_or(0),
            ])),
        }))
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn ops() -> Vec<StoreOp> {
        let sub = |topic: &str, name: &str| StoreOp::PutSubscription {
            topic: topic.into(),
            name: name.into(),
            settings: SubscriptionSettings::sessions(),
        };
        let rule = |topic: &str, sub: &str, name: &str, order| StoreOp::PutRule {
            topic: topic.into(),
            subscription: sub.into(),
            name: name.into(),
            filter: "1=1".into(),
            action: None,
            order,
        };
        let state = |topic: &str, sub: &str| StoreOp::SetSessionState {
            topic: topic.into(),
            subscription: sub.into(),
            session: "k".into(),
            state: Some(vec![9]),
        };
        vec![
            StoreOp::PutTopic {
                name: "a".into(),
                settings: TopicSettings::default(),
            },
            StoreOp::PutTopic {
                name: "b".into(),
                settings: TopicSettings::default()
                    .with_duplicate_detection(Duration::from_secs(60)),
            },
            sub("a", "keep"),
            sub("a", "gone"),
            sub("b", "s"),
            rule("a", "keep", "second", 2),
            rule("a", "keep", "first", 1),
            rule("a", "gone", "r", 3),
            state("a", "keep"),
            state("a", "gone"),
            state("b", "s"),
            entry(1, "a", "keep"),
            entry(2, "a", "gone"),
            entry(3, "b", "s"),
            entry(4, "a", "keep"),
            entry(5, "a", "keep"),
            StoreOp::DeleteEntry { id: 4 },
            StoreOp::UpdateEntry {
                id: 1,
                failures: 3,
                message: None,
            },
            StoreOp::MoveToDeadLetter {
                id: 5,
                failures: 1,
                reason: "why".into(),
                description: "because".into(),
            },
            StoreOp::UpdateEntry {
                id: 4,
                failures: 9,
                message: None,
            },
            StoreOp::InsertScheduled {
                seq: 6,
                topic: "a".into(),
                at: at(500),
                message: crate::codec::encode(&nimbus_transport::Message::new(vec![6])),
            },
            StoreOp::InsertScheduled {
                seq: 7,
                topic: "b".into(),
                at: at(500),
                message: crate::codec::encode(&nimbus_transport::Message::new(vec![7])),
            },
            StoreOp::PutDedup {
                topic: "a".into(),
                message_id: "old".into(),
                at: at(10),
                seq: 1,
            },
            StoreOp::PutDedup {
                topic: "a".into(),
                message_id: "new".into(),
                at: at(30),
                seq: 2,
            },
            StoreOp::PruneDedup {
                topic: "a".into(),
                before: at(20),
            },
            StoreOp::PutInbox {
                scope: "e".into(),
                key: "expired".into(),
                expires: at(10),
            },
            StoreOp::PutInbox {
                scope: "e".into(),
                key: "kept".into(),
                expires: at(30),
            },
            StoreOp::PruneInbox { before: at(10) },
            StoreOp::SequenceHighWater(40),
            StoreOp::SequenceHighWater(12),
            StoreOp::DeleteSubscription {
                topic: "a".into(),
                name: "gone".into(),
            },
            StoreOp::DeleteTopic { name: "b".into() },
        ]
    }

    fn fold(ops: impl IntoIterator<Item = StoreOp>) -> LiveState {
        let mut live = LiveState::default();
        for op in ops {
            live.apply(op);
        }
        live
    }

    /// The snapshot as comparable text (`Snapshot` holds types without `PartialEq`).
    fn described(live: LiveState) -> String {
        format!("{:?}", live.into_snapshot().unwrap())
    }

    #[test]
    fn deletes_cascade_and_prunes_keep_what_is_inside_the_window() {
        let snapshot = fold(ops()).into_snapshot().unwrap();
        assert_eq!(snapshot.sequence, 40);
        let topics: Vec<_> = snapshot.topics.iter().map(|t| t.0.as_str()).collect();
        assert_eq!(topics, ["a"]);
        let subs: Vec<_> = snapshot
            .subscriptions
            .iter()
            .map(|s| s.1.as_str())
            .collect();
        assert_eq!(subs, ["keep"]);
        let rules: Vec<_> = snapshot.rules.iter().map(|r| r.2.as_str()).collect();
        assert_eq!(rules, ["first", "second"], "in creation order");
        let entries: Vec<_> = snapshot
            .entries
            .iter()
            .map(|e| (e.row.id, e.row.failures, e.row.dead_letter))
            .collect();
        assert_eq!(entries, [(1, 3, false), (5, 1, true)]);
        assert_eq!(
            snapshot.entries[1].row.dead_letter_reason.as_deref(),
            Some("why")
        );
        let scheduled: Vec<_> = snapshot.scheduled.iter().map(|s| s.0).collect();
        assert_eq!(scheduled, [6]);
        assert_eq!(snapshot.session_states.len(), 1);
        let dedup: Vec<_> = snapshot.dedup.iter().map(|d| d.1.as_str()).collect();
        assert_eq!(dedup, ["new"]);
        let inbox: Vec<_> = snapshot.inbox.iter().map(|i| i.1.as_str()).collect();
        assert_eq!(inbox, ["kept"]);
    }

    #[test]
    fn a_state_written_out_as_ops_and_read_back_is_the_same_state() {
        let written: Vec<StoreOp> = fold(ops()).into_ops().collect();
        let mut frame = Vec::new();
        crate::log::encode_frame(&written, &mut frame).unwrap();
        let mut rest = &frame[8..];
        let mut read_back = Vec::new();
        while !rest.is_empty() {
            let (op, tail) = postcard::take_from_bytes::<StoreOp>(rest).unwrap();
            read_back.push(op);
            rest = tail;
        }
        assert_eq!(described(fold(read_back)), described(fold(ops())));
    }
}
