//! Opening: the store reads the log, and memory is rebuilt from what it
//! holds (topics, subscriptions, rules recompiled, entries into their
//! queues, session state, scheduled messages and expiries re-armed on the
//! timer heap, dedup and inbox records still live); then the timer task
//! starts.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};

use super::inbox::Inbox;
use super::options::BrokerOptions;
use super::timer_task::timer_task;
use super::{Inner, TopicState};
use crate::commit::Wakeups;
use crate::error::OpenError;
use crate::rules::CompiledRule;
use crate::state::{Entry, EntryStatus, Scheduled, SubCore, TopicCore};
use crate::store::Store;
use crate::timers::{TimerEvent, Timers};

/// Opens the store, rebuilds memory state and starts the timer task.
pub(crate) fn open(options: BrokerOptions) -> Result<Arc<Inner>, OpenError> {
    let (store, snapshot) =
        Store::open(&options.data_dir, options.durability, options.segment_bytes)?;
    let path = options.data_dir.join(crate::log::DIR_NAME);
    let now = options.clock.now();
    let timers = Arc::new(Timers::default());
    let mut sequence = snapshot.sequence;
    let mut topics: BTreeMap<String, TopicCore> = BTreeMap::new();
    for (name, settings) in snapshot.topics {
        topics.insert(name, TopicCore::new(settings));
    }
    let mut incarnation = 0u64;
    for (topic, name, settings) in snapshot.subscriptions {
        if let Some(core) = topics.get_mut(&topic) {
            incarnation += 1;
            core.subs.insert(name, SubCore::new(settings, incarnation));
        }
    }
    for (topic, sub, name, filter, action) in snapshot.rules {
        let mut description = nimbus_transport::RuleDescription::new(name, filter);
        description.action = action;
        let compiled = CompiledRule::compile(description).map_err(|e| OpenError::Corrupt {
            path: path.display().to_string(),
            reason: format!("stored rule on '{topic}/{sub}' no longer parses: {e}"),
        })?;
        if let Some(s) = topics.get_mut(&topic).and_then(|c| c.subs.get_mut(&sub)) {
            s.rules.push(compiled);
        }
    }
    let mut wake = Wakeups::default();
    for loaded in snapshot.entries {
        let row = loaded.row;
        sequence = sequence.max(row.id).max(row.seq);
        let Some(sub) = topics
            .get_mut(&row.topic)
            .and_then(|c| c.subs.get_mut(&row.subscription))
        else {
            continue;
        };
        let entry = Entry {
            id: row.id,
            seq: row.seq,
            message: loaded.decoded,
            enqueued: row.enqueued,
            expires: row.expires,
            failures: row.failures,
            dead_letter_reason: row.dead_letter_reason,
            dead_letter_description: row.dead_letter_description,
            status: EntryStatus::Available,
            commit: None,
        };
        if row.dead_letter {
            sub.dead_letter.insert(entry, &mut wake);
        } else {
            if let Some(expires) = entry.expires {
                timers.push(
                    expires,
                    TimerEvent::Expiry {
                        topic: row.topic.clone(),
                        subscription: row.subscription.clone(),
                        key: sub.main.partition_key(&entry.message),
                        id: entry.id,
                    },
                );
            }
            sub.main.insert(entry, &mut wake);
        }
    }
    for (topic, sub, session, state) in snapshot.session_states {
        if let Some(s) = topics.get_mut(&topic).and_then(|c| c.subs.get_mut(&sub)) {
            s.main.set_state(&session, Some(state), &mut wake);
        }
    }
    for (seq, topic, at, message) in snapshot.scheduled {
        sequence = sequence.max(seq);
        if let Some(core) = topics.get_mut(&topic) {
            timers.push(
                at,
                TimerEvent::Scheduled {
                    topic: topic.clone(),
                    seq,
                },
            );
            core.scheduled.insert(seq, Scheduled { at, message });
        }
    }
    for (topic, message_id, at, seq) in snapshot.dedup {
        sequence = sequence.max(seq);
        if let Some(core) = topics.get_mut(&topic)
            && let Some(window) = core.settings.duplicate_detection_window
            && at + window > now
        {
            core.dedup.insert(message_id.clone(), (at, seq));
            core.dedup_order.push_back((at, message_id));
        }
    }
    let mut inbox = Inbox::default();
    for (scope, key, expires) in snapshot.inbox {
        if expires > now {
            inbox.restore(scope, key, expires);
        }
    }
    let mut map = BTreeMap::new();
    let mut next_topic_id = 0u64;
    for (name, core) in topics {
        next_topic_id += 1;
        map.insert(
            name.clone(),
            Arc::new(TopicState {
                id: next_topic_id,
                name,
                core: Mutex::new(core),
            }),
        );
    }
    let inner = Arc::new(Inner {
        clock: options.clock,
        store,
        topics: RwLock::new(map),
        sequence: AtomicI64::new(sequence.max(incarnation_floor(incarnation))),
        next_topic_id: AtomicU64::new(next_topic_id),
        next_holder: AtomicU64::new(0),
        timers: Arc::clone(&timers),
        inbox: Mutex::new(inbox),
        max_request_bytes: options.max_request_bytes,
    });
    tokio::spawn(timer_task(Arc::downgrade(&inner), timers));
    Ok(inner)
}

fn incarnation_floor(incarnation: u64) -> i64 {
    i64::try_from(incarnation).unwrap_or(0)
}
