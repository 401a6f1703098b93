//! The NimBus topology: which topics, subscriptions and rules NimBus needs
//! for a set of endpoints, and making a transport carry them through its
//! `Admin` trait.
//!
//! The host calls [`provision`] at start-up (and whenever a handler is
//! added) with a [`Topology`]: the endpoints, the event types each consumes
//! and any extra producer topics. It makes the transport carry the NimBus
//! topology of `reference/nimbus-platform.md` §2: the `Resolver` topic, each
//! endpoint's topic with its session inbox, Resolver forwarder, `Deferred`
//! parking and `DeferredProcessor` subscriptions, and on every producer
//! topic one forwarding subscription per consumer with one rule per event
//! type it consumes. [`prune`] is the separate, explicit removal of
//! forwarders for event types no longer consumed (the host calls it when a
//! handler is deleted). It lives here, beside the names it routes on
//! ([`crate::addr`], [`crate::prop`]), so every fixed id and property name
//! in a rule is the one the engine and the Resolver read; the transport
//! offers only the generic `Admin` operations.
//!
//! Key decisions (`docs/decisions/0060-topology-provisioning.md`):
//! - **Zero churn.** Provisioning compares before it mutates and returns a
//!   [`ProvisionReport`] of every mutation; applied twice, the second report
//!   is empty. It never deletes what it does not recognise; only a
//!   subscription whose session flag or forward target differs is deleted
//!   and re-created, as upstream does. Other settings that differ (lock
//!   duration, TTL, ...) are reported as [`SettingsDrift`], never "fixed",
//!   because the only fix is to re-create the subscription and lose its
//!   messages.
//! - **An endpoint consumes its own follow-ups.** Upstream skips the
//!   forwarder from a topic to itself; in nimbus every handler publishes
//!   to its own endpoint's topic, so an endpoint consuming a type it also
//!   publishes would silently never receive it. The self-forwarder is named
//!   `fwd-{E}` because `E` is taken by the endpoint's inbox; endpoint names
//!   may not start with `fwd-`, nor be one of NimBus's fixed ids, so names
//!   never collide.
//! - **Parked messages never expire silently** (SEMANTICS.md §4, F9): the
//!   `Deferred` subscription has no TTL and dead-letters on expiry should a
//!   message carry its own TTL.
//!
//! Inside: [`naming`](self) rules for names come first, the layout a
//! topology expects is built on them, and provisioning applies the layout.

mod layout;
mod naming;
mod provision;

pub use layout::{Endpoint, Requirement, Topology, forwarder_name, forwarding_rule, requirements};
pub use naming::{
    MAX_ENDPOINT_NAME, MAX_EVENT_TYPE, TopologyError, check_endpoint_name, check_event_type,
};
pub use provision::{
    Mutation, ProvisionError, ProvisionReport, SettingsDrift, endpoint_topics, provision, prune,
};
