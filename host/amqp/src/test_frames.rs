//! Performatives as a client or fe2o3 sends them, for the tests of the
//! guard, the tap and the fuzzing of both: each with the fields that
//! matter to them as arguments and the rest as SDKs fill them.

use fe2o3_amqp::types::definitions::{Handle, ReceiverSettleMode, Role, SenderSettleMode};
use fe2o3_amqp::types::messaging::{Source, Target, TargetArchetype};
use fe2o3_amqp::types::performatives::{
    Attach, Begin, ChannelMax, Flow, MaxFrameSize, Open, Transfer,
};

/// A client's `open`, naming `hostname`.
pub(crate) fn open(hostname: Option<&str>) -> Open {
    Open {
        container_id: "client".to_owned(),
        hostname: hostname.map(str::to_owned),
        max_frame_size: MaxFrameSize(65_536),
        channel_max: ChannelMax(64),
        idle_time_out: None,
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// A `begin`, answering `remote_channel` if given.
pub(crate) fn begin(remote_channel: Option<u16>) -> Begin {
    Begin {
        remote_channel,
        next_outgoing_id: 0,
        incoming_window: 100,
        outgoing_window: 100,
        handle_max: Handle(255),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// An `attach` of link `name` on `handle` in `role`, to `target` if given.
pub(crate) fn attach(name: &str, handle: u32, role: Role, target: Option<&str>) -> Attach {
    Attach {
        name: name.to_owned(),
        handle: Handle(handle),
        role,
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode: ReceiverSettleMode::Second,
        source: target.map(|_| Box::new(Source::default())),
        target: target.map(|address| {
            Box::new(TargetArchetype::Target(Target {
                address: Some(address.to_owned()),
                ..Target::default()
            }))
        }),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: None,
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// A link's `flow`: its delivery count and credit.
pub(crate) fn flow(handle: u32, delivery_count: Option<u32>, link_credit: u32) -> Flow {
    Flow {
        next_incoming_id: None,
        incoming_window: 100,
        next_outgoing_id: 0,
        outgoing_window: 100,
        handle: Some(Handle(handle)),
        delivery_count,
        link_credit: Some(link_credit),
        available: None,
        drain: false,
        echo: false,
        properties: None,
    }
}

/// A `transfer` of delivery `delivery_id` on `handle`, tagged `tag`.
pub(crate) fn transfer(handle: u32, delivery_id: u32, tag: Vec<u8>, more: bool) -> Transfer {
    Transfer {
        handle: Handle(handle),
        delivery_id: Some(delivery_id),
        delivery_tag: Some(tag.into()),
        message_format: Some(0),
        settled: Some(false),
        more,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: true,
    }
}
