//! The `$management` requests this client makes (spec §A.10, §A.11), as
//! fe2o3-amqp-management requests: a map with string keys for a body, an
//! answer with `statusCode`. The operations and keys are the dialect's
//! ([`nimbus_dialect::management`]).

use fe2o3_amqp::types::messaging::{AmqpValue, Message as AmqpMessage};
use fe2o3_amqp::types::primitives::{Array, OrderedMap, Value};
use fe2o3_amqp_management::error::Error as ManagementError;
use fe2o3_amqp_management::{Request, Response};
use nimbus_dialect::management::{field, key, map, operation};

/// `schedule-message`: each message whole, with its id and session.
pub(crate) struct ScheduleMessages {
    pub messages: Vec<ScheduledMessage>,
}

pub(crate) struct ScheduledMessage {
    pub message_id: String,
    pub session_id: Option<String>,
    pub encoded: Vec<u8>,
}

impl Request for ScheduleMessages {
    const OPERATION: &'static str = operation::SCHEDULE_MESSAGE;
    type Response = SequenceNumbers;
    type Body = AmqpValue<Value>;

    fn encode_body(self) -> Self::Body {
        let messages = self
            .messages
            .into_iter()
            .map(|message| {
                let mut entry = OrderedMap::new();
                entry.insert(
                    Value::String(key::MESSAGE_ID.to_owned()),
                    Value::String(message.message_id),
                );
                if let Some(session_id) = message.session_id {
                    entry.insert(
                        Value::String(key::SESSION_ID.to_owned()),
                        Value::String(session_id),
                    );
                }
                entry.insert(
                    Value::String(key::MESSAGE.to_owned()),
                    Value::Binary(message.encoded.into()),
                );
                Value::Map(entry)
            })
            .collect();
        AmqpValue(map([(key::MESSAGES, Value::List(messages))]))
    }
}

/// The sequence numbers `schedule-message` answers, in order.
pub(crate) struct SequenceNumbers(pub Vec<i64>);

impl Response for SequenceNumbers {
    const STATUS_CODE: u16 = 200;
    type Body = AmqpValue<Value>;
    type Error = ManagementError;

    fn decode_message(message: AmqpMessage<Self::Body>) -> Result<Self, Self::Error> {
        let AmqpValue(Value::Map(body)) = message.body else {
            return Err(ManagementError::DecodeError(None));
        };
        let numbers = match field(&body, key::SEQUENCE_NUMBERS) {
            Some(Value::Array(Array(numbers))) => numbers,
            Some(Value::List(numbers)) => numbers,
            _ => return Err(ManagementError::DecodeError(None)),
        };
        numbers
            .iter()
            .map(|n| match n {
                Value::Long(n) => Ok(*n),
                _ => Err(ManagementError::DecodeError(None)),
            })
            .collect::<Result<_, _>>()
            .map(SequenceNumbers)
    }
}

/// `cancel-scheduled-message`.
pub(crate) struct CancelScheduled {
    pub sequence_numbers: Vec<i64>,
}

impl Request for CancelScheduled {
    const OPERATION: &'static str = operation::CANCEL_SCHEDULED_MESSAGE;
    type Response = Empty;
    type Body = AmqpValue<Value>;

    fn encode_body(self) -> Self::Body {
        let numbers = self.sequence_numbers.into_iter().map(Value::Long).collect();
        AmqpValue(map([(key::SEQUENCE_NUMBERS, Value::Array(Array(numbers)))]))
    }
}

/// An answer whose body does not matter.
pub(crate) struct Empty;

impl Response for Empty {
    const STATUS_CODE: u16 = 200;
    type Body = Option<AmqpValue<Value>>;
    type Error = ManagementError;

    fn decode_message(_message: AmqpMessage<Self::Body>) -> Result<Self, Self::Error> {
        Ok(Empty)
    }
}

/// An answer's body map, whatever the operation (an empty body reads as an
/// empty map).
pub(crate) struct MapAnswer(pub OrderedMap<Value, Value>);

impl MapAnswer {
    /// The value under `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        field(&self.0, key)
    }
}

impl Response for MapAnswer {
    const STATUS_CODE: u16 = 200;
    type Body = Option<AmqpValue<Value>>;
    type Error = ManagementError;

    fn decode_message(message: AmqpMessage<Self::Body>) -> Result<Self, Self::Error> {
        match message.body {
            Some(AmqpValue(Value::Map(map))) => Ok(MapAnswer(map)),
            Some(AmqpValue(Value::Null)) | None => Ok(MapAnswer(OrderedMap::new())),
            Some(_) => Err(ManagementError::DecodeError(None)),
        }
    }
}

/// Operations whose request is a map and whose answer is read as a map.
macro_rules! map_operation {
    ($($name:ident => $operation:expr),* $(,)?) => {
        $(
            pub(crate) struct $name(pub Vec<(&'static str, Value)>);

            impl Request for $name {
                const OPERATION: &'static str = $operation;
                type Response = MapAnswer;
                type Body = AmqpValue<Value>;

                fn encode_body(self) -> Self::Body {
                    AmqpValue(Value::Map(
                        self.0
                            .into_iter()
                            .map(|(key, value)| (Value::String(key.to_owned()), value))
                            .collect(),
                    ))
                }
            }
        )*
    };
}

map_operation! {
    GetSessionState => operation::GET_SESSION_STATE,
    SetSessionState => operation::SET_SESSION_STATE,
    RenewSessionLock => operation::RENEW_SESSION_LOCK,
    RenewLock => operation::RENEW_LOCK,
    Peek => operation::PEEK_MESSAGE,
}
