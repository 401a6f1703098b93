//! The AMQP endpoint as `nimbus run` serves it: the embedded broker in the
//! Service Bus dialect, with `[amqp]`'s keys, TLS and message size, as many
//! connections as the open-file limit leaves room for, and the check that
//! keeps SDK clients from claiming the Manager's authority.
//!
//! Only the assembly is here; the endpoint itself is `nimbus-amqp`'s.

use std::sync::Arc;

use nimbus_amqp::Endpoint;
use nimbus_broker::Broker;
use nimbus_dialect::SharedAccessKey;
use nimbus_wire::ControlKey;

use crate::config::{AmqpKey, ValidConfig};
use crate::open_files::{self, OpenFiles};

/// The endpoint over `broker`, configured as `config` says.
pub(crate) fn endpoint(
    config: &ValidConfig,
    broker: Arc<Broker>,
    control_key: ControlKey,
    open_files: OpenFiles,
) -> Endpoint<Broker> {
    let amqp = &config.config.amqp;
    let keys: Vec<SharedAccessKey> = amqp.keys.iter().map(AmqpKey::shared_access_key).collect();
    let configured = amqp.max_connections;
    let connections = open_files.amqp_connections(configured);
    if connections < configured {
        tracing::warn!(
            configured,
            serving = connections,
            open_file_limit = ?open_files.soft,
            "the process may open too few files for [amqp] max_connections: the endpoint \
             serves fewer, keeping {} for the API and the data files (raise the hard \
             limit, e.g. `ulimit -Hn`, LimitNOFILE= in a systemd unit)",
            open_files::RESERVE
        );
    }
    // SDK clients may not claim the Manager's authority: a control request
    // or `From = Manager` needs the Manager's signature (another host's
    // Manager publishing here has it).
    let endpoint = Endpoint::new(broker, keys, amqp.max_message_bytes())
        .with_max_connections(connections)
        .with_publish_check(crate::control::publish_check(control_key));
    match config.amqp_tls.clone() {
        Some(tls) => endpoint.with_tls(tls),
        None => endpoint,
    }
}
