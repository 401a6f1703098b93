//! Publishing: a message through a topic's subscriptions' rules (filters
//! and actions), auto-forwarding (up to [`MAX_FORWARD_HOPS`]), duplicate
//! detection and scheduling, to one copy per matching subscription, as a
//! [`Plan`]. Nothing changes until the plan is applied, so a publish that
//! cannot route is refused whole.

use std::time::SystemTime;

use nimbus_transport::{Message, PublishError, TransientError};

use super::Inner;
use super::locking::Locked;
use super::plan::Plan;
use crate::commit::OnCommit;
use crate::rules::{CompiledRule, RuleOutcome};
use crate::state::{Entry, EntryStatus, Scheduled, SubCore, TopicCore};

/// Most auto-forward hops a message may take; beyond it the copy goes to
/// the forwarding subscription's dead-letter queue (Service Bus allows 4).
pub const MAX_FORWARD_HOPS: u32 = 4;

/// Dead-letter reason when a forward chain is too long.
pub const REASON_MAX_HOPS: &str = "MaxTransferHopCountExceeded";
/// Dead-letter reason when a forward target topic does not exist.
pub const REASON_FORWARD_TARGET_MISSING: &str = "ForwardToTargetNotFound";
/// Dead-letter reason when a rule's filter or action fails on a message.
pub const REASON_FILTER_FAILED: &str = "FilterEvaluationException";

/// What one subscription's rules made of a message being routed.
enum RouteMatch<'r> {
    /// A filter or an action failed: the original is dead-lettered there.
    Failed(String),
    /// What goes to the subscription, in rule order.
    Copies(Vec<SubCopy<'r>>),
}

impl RouteMatch<'_> {
    /// How many uses of the original it takes.
    fn uses(&self) -> usize {
        match self {
            RouteMatch::Failed(_) => 1,
            RouteMatch::Copies(copies) => copies
                .iter()
                .filter(|c| !matches!(c, SubCopy::Made(_)))
                .count(),
        }
    }
}

/// One message a subscription's rules send it.
enum SubCopy<'r> {
    /// The original (a rule without an action matched).
    Original,
    /// A rule's action applied to a scratch copy, made while filters ran,
    /// since an action that can fail must leave the original whole for the
    /// dead-letter queue.
    Made(Box<Message>),
    /// A rule whose action cannot fail: applied to a use of the original
    /// (the message itself, when that is its last use).
    Transform(&'r CompiledRule),
}

/// One message routing sends a subscription.
enum Outgoing {
    Deliver(Message),
    /// To its dead-letter queue, with why.
    DeadLetter(Message, String),
}

/// The message being routed, handed out as clones until its last use,
/// which gets the original itself.
struct Original {
    message: Option<Message>,
    uses_left: usize,
}

impl Original {
    fn new(message: Message, uses: usize) -> Self {
        Original {
            message: Some(message),
            uses_left: uses,
        }
    }

    /// The message for one more use: a clone while others follow, the
    /// original for the last one.
    fn take(&mut self) -> Message {
        debug_assert!(self.message.is_some(), "the original was taken already");
        self.uses_left = self.uses_left.saturating_sub(1);
        if self.uses_left == 0 {
            self.message.take().unwrap_or_default()
        } else {
            self.message.clone().unwrap_or_default()
        }
    }
}

impl Inner {
    /// Publishes atomically (the data-plane entry point).
    pub(crate) async fn publish(
        &self,
        topic: &str,
        messages: Vec<Message>,
    ) -> Result<Vec<i64>, PublishError> {
        self.healthy()?;
        let now = self.now();
        let outcome = self
            .with_topics(&[topic], |locked| {
                let mut plan = Plan::default();
                for message in messages {
                    self.plan_publish(locked, topic, message, now, &mut plan)?;
                }
                plan.check_size(self.max_request_bytes)
                    .map_err(|reason| PublishError::InvalidMessage { reason })?;
                let sequence_numbers = std::mem::take(&mut plan.sequence_numbers);
                let mut ops = Vec::new();
                let mut on_commit = OnCommit::default();
                self.apply_plan(locked, plan, now, &mut ops, &mut on_commit);
                if ops.is_empty() {
                    // Every message was a duplicate. Its original may not be
                    // committed yet; an empty request still queues behind it,
                    // so this acknowledgement cannot overtake that commit.
                    ops.push(self.high_water());
                }
                Ok::<_, PublishError>((sequence_numbers, self.submit_with(ops, on_commit)))
            })
            .map_err(|topic| PublishError::TopicNotFound { topic })??;
        let (sequence_numbers, ack) = outcome;
        ack.committed().await.map_err(TransientError::from)?;
        Ok(sequence_numbers)
    }

    /// Plans publishing `message` to `topic` at the root (not forwarded).
    pub(super) fn plan_publish(
        &self,
        locked: &Locked<'_>,
        topic: &str,
        mut message: Message,
        now: SystemTime,
        plan: &mut Plan,
    ) -> Result<(), PublishError> {
        let core = locked
            .get(topic)
            .ok_or_else(|| PublishError::TopicNotFound {
                topic: topic.to_owned(),
            })?;
        let sender_id = message.message_id.is_some();
        if !sender_id {
            let mut buffer = uuid::Uuid::encode_buffer();
            let id = uuid::Uuid::new_v4().simple().encode_lower(&mut buffer);
            message.message_id = Some(id.to_owned());
        }
        let message_id = message.message_id.clone().unwrap_or_default();
        if sender_id && let Some(window) = core.settings.duplicate_detection_window {
            let earlier = plan
                .dedup
                .iter()
                .find(|(t, id, _)| t == topic && *id == message_id)
                .map(|(_, _, seq)| *seq)
                .or_else(|| {
                    core.dedup
                        .get(&message_id)
                        .filter(|(at, _)| *at + window > now)
                        .map(|(_, seq)| *seq)
                });
            if let Some(seq) = earlier {
                plan.sequence_numbers.push(seq);
                return Ok(());
            }
        }
        let seq = self.alloc();
        if sender_id && core.settings.duplicate_detection_window.is_some() {
            plan.dedup.push((topic.to_owned(), message_id, seq));
        }
        plan.sequence_numbers.push(seq);
        match message.scheduled_enqueue_time {
            Some(at) if at > now => {
                // Check now that it would route, so a bad message is refused
                // to the sender rather than lost at activation.
                let mut dry = Plan::default();
                self.route(locked, topic, message.clone(), seq, now, 0, &mut dry)?;
                dry.check_size(self.max_request_bytes).map_err(|reason| {
                    PublishError::InvalidMessage {
                        reason: format!("when it falls due, {reason}"),
                    }
                })?;
                plan.scheduled
                    .push((topic.to_owned(), seq, Scheduled { at, message }));
                Ok(())
            }
            _ => self.route(locked, topic, message, seq, now, 0, plan),
        }
    }

    /// Fans `message` out to the subscriptions of `topic` whose rules match.
    ///
    /// Takes the message by value: the last use of the original (a plain
    /// placement, or a copy through an action that cannot fail, such as a
    /// forwarder's) gets it moved rather than cloned. At steady load most
    /// publishes have one use per topic, so they clone nothing here.
    #[expect(
        clippy::too_many_arguments,
        reason = "one recursive routing step needs all of them"
    )]
    pub(super) fn route(
        &self,
        locked: &Locked<'_>,
        topic: &str,
        message: Message,
        seq: i64,
        now: SystemTime,
        hops: u32,
        plan: &mut Plan,
    ) -> Result<(), PublishError> {
        let core = locked
            .get(topic)
            .ok_or_else(|| PublishError::TopicNotFound {
                topic: topic.to_owned(),
            })?;
        // Evaluate every rule first, so the uses of the original are known
        // before any placement takes it.
        let mut matches: Vec<(&String, &SubCore, RouteMatch)> = Vec::with_capacity(core.subs.len());
        for (sub_name, sub) in &core.subs {
            let mut copies = Vec::new();
            let mut failure = None;
            for rule in &sub.rules {
                match rule.evaluate(&message, seq) {
                    RuleOutcome::NoMatch => {}
                    RuleOutcome::Matched => {
                        // One plain match sends the original once, ahead
                        // of the rules' copies.
                        if !matches!(copies.first(), Some(SubCopy::Original)) {
                            copies.insert(0, SubCopy::Original);
                        }
                    }
                    RuleOutcome::MatchedWithAction if rule.action_cannot_fail() => {
                        copies.push(SubCopy::Transform(rule));
                    }
                    RuleOutcome::MatchedWithAction => match rule.transform(message.clone(), seq) {
                        Ok(copy) => copies.push(SubCopy::Made(Box::new(copy))),
                        Err(failed) => failure = Some(failed.0),
                    },
                    RuleOutcome::Failed(reason) => failure = Some(reason),
                }
            }
            let matched = match failure {
                Some(reason) => RouteMatch::Failed(reason),
                None => RouteMatch::Copies(copies),
            };
            matches.push((sub_name, sub, matched));
        }
        let mut original = Original::new(message, matches.iter().map(|(_, _, m)| m.uses()).sum());
        let mut forwards: Vec<(String, Message)> = Vec::new();
        for (sub_name, sub, matched) in matches {
            // What goes to the subscription, or to its dead-letter queue
            // with why: the original when a filter or an action failed, or
            // (should an action `action_cannot_fail` passed fail after all)
            // the copy as it was left, rather than lose it.
            let copies: Vec<Outgoing> = match matched {
                RouteMatch::Failed(reason) => vec![Outgoing::DeadLetter(original.take(), reason)],
                RouteMatch::Copies(copies) => copies
                    .into_iter()
                    .map(|copy| match copy {
                        SubCopy::Original => Outgoing::Deliver(original.take()),
                        SubCopy::Made(copy) => Outgoing::Deliver(*copy),
                        SubCopy::Transform(rule) => match rule.transform(original.take(), seq) {
                            Ok(copy) => Outgoing::Deliver(copy),
                            Err(failed) => {
                                let (reason, partial) = *failed;
                                Outgoing::DeadLetter(partial, reason)
                            }
                        },
                    })
                    .collect(),
            };
            for copy in copies {
                let copy = match copy {
                    Outgoing::Deliver(copy) => copy,
                    Outgoing::DeadLetter(message, reason) => {
                        plan.placements.push((
                            topic.to_owned(),
                            sub_name.clone(),
                            true,
                            self.entry(
                                message,
                                seq,
                                now,
                                core,
                                sub,
                                Some((REASON_FILTER_FAILED, reason)),
                            ),
                        ));
                        continue;
                    }
                };
                if let Some(target) = &sub.settings.forward_to {
                    let dead = if hops >= MAX_FORWARD_HOPS {
                        Some((
                            REASON_MAX_HOPS,
                            format!("more than {MAX_FORWARD_HOPS} auto-forward hops"),
                        ))
                    } else if locked.get(target).is_none_or(|c| c.deleted) {
                        Some((
                            REASON_FORWARD_TARGET_MISSING,
                            format!("forward target topic '{target}' does not exist"),
                        ))
                    } else {
                        None
                    };
                    match dead {
                        Some(dead) => plan.placements.push((
                            topic.to_owned(),
                            sub_name.clone(),
                            true,
                            self.entry(copy, seq, now, core, sub, Some(dead)),
                        )),
                        None => forwards.push((target.clone(), copy)),
                    }
                } else {
                    if sub.settings.requires_session && copy.session_id.is_none() {
                        return Err(PublishError::InvalidMessage {
                            reason: format!(
                                "subscription '{topic}/{sub_name}' requires a session id and \
                                 the message '{}' has none",
                                copy.message_id.as_deref().unwrap_or_default()
                            ),
                        });
                    }
                    plan.placements.push((
                        topic.to_owned(),
                        sub_name.clone(),
                        false,
                        self.entry(copy, seq, now, core, sub, None),
                    ));
                }
            }
        }
        for (target, copy) in forwards {
            let forwarded_seq = self.alloc();
            self.route(locked, &target, copy, forwarded_seq, now, hops + 1, plan)?;
        }
        Ok(())
    }

    fn entry(
        &self,
        message: Message,
        seq: i64,
        now: SystemTime,
        topic: &TopicCore,
        sub: &SubCore,
        dead: Option<(&str, String)>,
    ) -> Entry {
        let ttl = [
            message.time_to_live,
            sub.settings.default_message_ttl,
            topic.settings.default_message_ttl,
        ]
        .into_iter()
        .flatten()
        .min();
        let (reason, description) = match dead {
            Some((r, d)) => (Some(r.to_owned()), Some(d)),
            None => (None, None),
        };
        Entry {
            id: self.alloc(),
            seq,
            message,
            enqueued: now,
            expires: ttl.map(|t| now + t),
            failures: 0,
            dead_letter_reason: reason,
            dead_letter_description: description,
            status: EntryStatus::Available,
            commit: None,
        }
    }
}
