//! Several topics locked together: a root topic and every topic it can
//! reach by auto-forwarding, locked in topic-id order, so two operations
//! that need the same topics cannot deadlock. Publishes, settlements and
//! scheduled activations take their locks here; a topic that forwards
//! nowhere takes only its own.

use std::collections::BTreeMap;
use std::sync::{Arc, MutexGuard};

use super::{Inner, TopicState};
use crate::state::TopicCore;

/// Several topics locked together, in id order.
pub(crate) struct Locked<'a> {
    names: Vec<&'a str>,
    guards: Vec<MutexGuard<'a, TopicCore>>,
}

impl Locked<'_> {
    pub(crate) fn get(&self, name: &str) -> Option<&TopicCore> {
        let i = self.names.iter().position(|n| *n == name)?;
        Some(&*self.guards[i])
    }

    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut TopicCore> {
        let i = self.names.iter().position(|n| *n == name)?;
        Some(&mut *self.guards[i])
    }
}

impl Inner {
    /// Topics reachable from `roots` through forwarding, found by locking
    /// one topic at a time. Missing roots are reported.
    fn forward_closure(&self, roots: &[&str]) -> Result<Vec<Arc<TopicState>>, String> {
        let mut seen: BTreeMap<String, Arc<TopicState>> = BTreeMap::new();
        let mut todo: Vec<String> = Vec::new();
        for root in roots {
            let topic = self.topic(root).ok_or_else(|| (*root).to_owned())?;
            if seen
                .insert(topic.name.clone(), Arc::clone(&topic))
                .is_none()
            {
                todo.push(topic.name.clone());
            }
        }
        while let Some(name) = todo.pop() {
            let Some(topic) = seen.get(&name).cloned() else {
                continue;
            };
            let targets: Vec<String> = topic
                .lock()
                .subs
                .values()
                .filter_map(|s| s.settings.forward_to.clone())
                .collect();
            for target in targets {
                if seen.contains_key(&target) {
                    continue;
                }
                if let Some(t) = self.topic(&target) {
                    seen.insert(target.clone(), t);
                    todo.push(target);
                }
            }
        }
        Ok(seen.into_values().collect())
    }

    /// Runs `f` with `roots` and every topic they forward to locked (in id
    /// order). `Err(name)` when a root topic does not exist.
    pub(crate) fn with_topics<R>(
        &self,
        roots: &[&str],
        f: impl FnOnce(&mut Locked<'_>) -> R,
    ) -> Result<R, String> {
        // Fast path: one topic that forwards nowhere needs only its own lock.
        if let [root] = roots {
            let topic = self.topic(root).ok_or_else(|| (*root).to_owned())?;
            let guard = topic.lock();
            if guard.deleted {
                return Err((*root).to_owned());
            }
            if guard.subs.values().all(|s| s.settings.forward_to.is_none()) {
                let mut locked = Locked {
                    names: vec![topic.name.as_str()],
                    guards: vec![guard],
                };
                return Ok(f(&mut locked));
            }
        }
        loop {
            let mut topics = self.forward_closure(roots)?;
            topics.sort_by_key(|t| t.id);
            let guards: Vec<MutexGuard<'_, TopicCore>> = topics.iter().map(|t| t.lock()).collect();
            let mut locked = Locked {
                names: topics.iter().map(|t| t.name.as_str()).collect(),
                guards,
            };
            for root in roots {
                if locked.get(root).is_none_or(|c| c.deleted) {
                    return Err((*root).to_owned());
                }
            }
            // The topology may have changed between finding and locking.
            let complete = locked.guards.iter().all(|core| {
                core.subs.values().all(|s| {
                    s.settings.forward_to.as_deref().is_none_or(|target| {
                        locked.get(target).is_some() || self.topic(target).is_none()
                    })
                })
            });
            if complete {
                return Ok(f(&mut locked));
            }
        }
    }
}
