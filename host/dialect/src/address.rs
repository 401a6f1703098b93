//! Link addresses as the SDKs write them, read as one (spec §A.5.1).
//!
//! Python writes full URIs (`amqps://localhost:5672/orders/Subscriptions/billing`,
//! the scheme `amqps` even without TLS), .NET absolute paths
//! (`/orders/Subscriptions/billing`), and both name `$management` nodes
//! bare (`orders/Subscriptions/billing/$management`). Service Bus names are
//! compared ignoring case, so the keywords are too; the names are kept as
//! written, for the broker to resolve.

/// What a link's address names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// The claims-based-security node, where tokens are put.
    Cbs,
    /// A topic, a subscription, or a subscription's dead-letter queue.
    Entity(EntityAddress),
    /// The `$management` node of an entity (request/response operations).
    Management(EntityAddress),
}

/// A topic or one of its subscriptions, and which queue of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityAddress {
    /// The topic, as written.
    pub topic: String,
    /// The subscription, as written, when the address names one.
    pub subscription: Option<String>,
    /// The main queue or a dead-letter queue.
    pub sub_queue: SubQueue,
}

/// Which queue of an entity an address names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubQueue {
    /// The entity itself.
    Main,
    /// `/$DeadLetterQueue`.
    DeadLetter,
    /// `/$Transfer/$DeadLetterQueue`.
    TransferDeadLetter,
}

/// Why an address names nothing this endpoint serves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// No path at all.
    #[error("the address '{0}' names no entity")]
    Empty(String),
    /// A path that is neither a topic nor `{topic}/Subscriptions/{name}`.
    #[error(
        "the address '{0}' is not a topic, `topic/Subscriptions/name`, or one of their \
         `$DeadLetterQueue` or `$management` nodes"
    )]
    Unrecognised(String),
}

/// The claims-based-security node, where tokens are put (spec §A.4).
pub const CBS_NODE: &str = "$cbs";

/// What an entity's request/response node adds to the entity's path.
pub const MANAGEMENT_SUFFIX: &str = "/$management";

/// What a subscription's dead-letter queue adds to the subscription's path.
pub const DEAD_LETTER_SUFFIX: &str = "/$DeadLetterQueue";

/// What a subscription's transfer dead-letter queue adds to its path.
pub const TRANSFER_DEAD_LETTER_SUFFIX: &str = "/$Transfer/$DeadLetterQueue";

/// The keyword between a topic and its subscription in a path.
const SUBSCRIPTIONS: &str = "Subscriptions";

impl Node {
    /// Reads `address` in any of the SDKs' forms.
    ///
    /// # Errors
    ///
    /// [`AddressError`] when it names no topic or subscription.
    pub fn parse(address: &str) -> Result<Node, AddressError> {
        let path = path_of(address);
        if path.is_empty() {
            return Err(AddressError::Empty(address.to_owned()));
        }
        if path.eq_ignore_ascii_case(CBS_NODE) {
            return Ok(Node::Cbs);
        }
        // Each suffix is matched against the path with a leading slash, so
        // an entity whose whole name were `$management` is not one.
        let slashed = format!("/{path}");
        let (slashed, management) = strip_suffix(&slashed, MANAGEMENT_SUFFIX);
        let (slashed, sub_queue) = match strip_suffix(slashed, TRANSFER_DEAD_LETTER_SUFFIX) {
            (rest, true) => (rest, SubQueue::TransferDeadLetter),
            (rest, false) => match strip_suffix(rest, DEAD_LETTER_SUFFIX) {
                (rest, true) => (rest, SubQueue::DeadLetter),
                (rest, false) => (rest, SubQueue::Main),
            },
        };
        let unrecognised = || AddressError::Unrecognised(address.to_owned());
        let segments: Vec<&str> = slashed
            .strip_prefix('/')
            .ok_or_else(unrecognised)?
            .split('/')
            .collect();
        if segments.iter().any(|s| s.is_empty() || s.starts_with('$')) {
            return Err(unrecognised());
        }
        let entity = match segments.as_slice() {
            [topic] => EntityAddress {
                topic: (*topic).to_owned(),
                subscription: None,
                sub_queue,
            },
            [topic, keyword, subscription] if keyword.eq_ignore_ascii_case(SUBSCRIPTIONS) => {
                EntityAddress {
                    topic: (*topic).to_owned(),
                    subscription: Some((*subscription).to_owned()),
                    sub_queue,
                }
            }
            _ => return Err(unrecognised()),
        };
        // A topic's own dead-letter queue is not something Service Bus has.
        if entity.subscription.is_none() && sub_queue != SubQueue::Main {
            return Err(unrecognised());
        }
        Ok(if management {
            Node::Management(entity)
        } else {
            Node::Entity(entity)
        })
    }
}

impl EntityAddress {
    /// `subscription` of `topic`, or its dead-letter queue.
    pub fn subscription(
        topic: impl Into<String>,
        subscription: impl Into<String>,
        sub_queue: SubQueue,
    ) -> EntityAddress {
        EntityAddress {
            topic: topic.into(),
            subscription: Some(subscription.into()),
            sub_queue,
        }
    }

    /// The entity's path as Service Bus writes it (`orders`,
    /// `orders/Subscriptions/billing`), without a queue suffix: what a
    /// token's audience must cover.
    pub fn entity_path(&self) -> String {
        match &self.subscription {
            Some(subscription) => format!("{}/{SUBSCRIPTIONS}/{subscription}", self.topic),
            None => self.topic.clone(),
        }
    }

    /// The path of the queue the address names: the entity's, with
    /// `/$DeadLetterQueue` for its dead-letter queue. An SDK's token for a
    /// dead-letter receiver names this path.
    pub fn queue_path(&self) -> String {
        let entity = self.entity_path();
        match self.sub_queue {
            SubQueue::Main => entity,
            SubQueue::DeadLetter => format!("{entity}{DEAD_LETTER_SUFFIX}"),
            SubQueue::TransferDeadLetter => format!("{entity}{TRANSFER_DEAD_LETTER_SUFFIX}"),
        }
    }
}

impl From<nimbus_transport::SubQueue> for SubQueue {
    fn from(queue: nimbus_transport::SubQueue) -> SubQueue {
        match queue {
            nimbus_transport::SubQueue::Main => SubQueue::Main,
            nimbus_transport::SubQueue::DeadLetter => SubQueue::DeadLetter,
        }
    }
}

/// The address of the `$management` node of the entity at `path` (a
/// topic, a subscription, or a dead-letter queue's path).
pub fn management_node(path: &str) -> String {
    format!("{path}{MANAGEMENT_SUFFIX}")
}

/// Whether `path` names a dead-letter queue (its suffix compared ignoring
/// case, as Service Bus compares names).
pub fn is_dead_letter_queue(path: &str) -> bool {
    strip_suffix(path, DEAD_LETTER_SUFFIX).1
}

/// The path of `address`, without a scheme and authority, leading or
/// trailing slashes.
fn path_of(address: &str) -> &str {
    let path = match address.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("", |slash| &rest[slash..]),
        None => address,
    };
    path.trim_matches('/')
}

/// `text` without `suffix` (compared ignoring ASCII case), and whether it
/// was there.
fn strip_suffix<'a>(text: &'a str, suffix: &str) -> (&'a str, bool) {
    let Some(split) = text.len().checked_sub(suffix.len()) else {
        return (text, false);
    };
    match (text.get(..split), text.get(split..)) {
        (Some(rest), Some(tail)) if tail.eq_ignore_ascii_case(suffix) => (rest, true),
        _ => (text, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(topic: &str, subscription: Option<&str>, sub_queue: SubQueue) -> EntityAddress {
        EntityAddress {
            topic: topic.to_owned(),
            subscription: subscription.map(str::to_owned),
            sub_queue,
        }
    }

    #[test]
    fn the_three_forms_of_each_address_read_alike() {
        let cases = [
            (
                "orders/Subscriptions/billing",
                Node::Entity(entity("orders", Some("billing"), SubQueue::Main)),
            ),
            (
                "orders",
                Node::Entity(entity("orders", None, SubQueue::Main)),
            ),
            (
                "orders/Subscriptions/billing/$DeadLetterQueue",
                Node::Entity(entity("orders", Some("billing"), SubQueue::DeadLetter)),
            ),
            (
                "orders/Subscriptions/billing/$Transfer/$DeadLetterQueue",
                Node::Entity(entity(
                    "orders",
                    Some("billing"),
                    SubQueue::TransferDeadLetter,
                )),
            ),
            (
                "orders/Subscriptions/billing/$management",
                Node::Management(entity("orders", Some("billing"), SubQueue::Main)),
            ),
            (
                "orders/Subscriptions/billing/$DeadLetterQueue/$management",
                Node::Management(entity("orders", Some("billing"), SubQueue::DeadLetter)),
            ),
            (
                "orders/$management",
                Node::Management(entity("orders", None, SubQueue::Main)),
            ),
        ];
        for (path, node) in cases {
            for written in [
                path.to_owned(),
                format!("/{path}"),
                format!("amqps://localhost:5672/{path}"),
                format!("amqp://127.0.0.1/{path}/"),
            ] {
                assert_eq!(Node::parse(&written), Ok(node.clone()), "{written}");
            }
        }
    }

    #[test]
    fn keywords_ignore_case_and_names_are_kept_as_written() {
        assert_eq!(
            Node::parse("amqps://h/Orders/SUBSCRIPTIONS/Billing/$deadletterqueue/$MANAGEMENT"),
            Ok(Node::Management(entity(
                "Orders",
                Some("Billing"),
                SubQueue::DeadLetter
            )))
        );
        assert_eq!(Node::parse("$CBS"), Ok(Node::Cbs));
        assert_eq!(Node::parse("/$cbs"), Ok(Node::Cbs));
    }

    #[test]
    fn addresses_naming_nothing_are_refused_with_the_address() {
        for bad in ["", "/", "amqps://localhost:5672", "amqps://localhost:5672/"] {
            assert!(
                matches!(Node::parse(bad), Err(AddressError::Empty(_))),
                "{bad}"
            );
        }
        for bad in [
            "orders/billing",
            "orders/Subscriptions",
            "orders/Subscriptions/billing/extra",
            "orders//billing",
            "$management",
            "orders/$DeadLetterQueue",
            "orders/Subscriptions/$DeadLetterQueue",
        ] {
            let error = Node::parse(bad).expect_err(bad);
            assert!(error.to_string().contains(bad), "{error}");
        }
    }

    #[test]
    fn the_paths_a_client_writes_read_back_as_what_it_named() {
        let dead_letters = EntityAddress::subscription("orders", "billing", SubQueue::DeadLetter);
        let path = dead_letters.queue_path();
        assert_eq!(path, "orders/Subscriptions/billing/$DeadLetterQueue");
        assert!(is_dead_letter_queue(&path));
        assert!(is_dead_letter_queue(&path.to_ascii_lowercase()));
        assert!(!is_dead_letter_queue(&dead_letters.entity_path()));
        assert_eq!(Node::parse(&path), Ok(Node::Entity(dead_letters.clone())));
        assert_eq!(
            Node::parse(&management_node(&path)),
            Ok(Node::Management(dead_letters))
        );
        assert_eq!(
            SubQueue::from(nimbus_transport::SubQueue::DeadLetter),
            SubQueue::DeadLetter
        );
    }

    #[test]
    fn the_entity_path_is_what_a_token_covers() {
        let Ok(Node::Entity(dead_letters)) =
            Node::parse("amqps://h/orders/Subscriptions/billing/$DeadLetterQueue")
        else {
            panic!("an entity");
        };
        assert_eq!(dead_letters.entity_path(), "orders/Subscriptions/billing");
    }
}
