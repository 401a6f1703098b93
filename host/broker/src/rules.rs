//! Subscription rules: compiled SQL filters and actions (from
//! `nimbus-sqlfilter`), and the property views they read and write a
//! [`Message`] through.

use std::borrow::Cow;

use nimbus_sqlfilter::{
    ActionError, EvalError, MessageProperties, MessagePropertiesMut, SqlFilter, SqlRuleAction,
    Value,
};
use nimbus_transport::{AdminError, Message, PropertyValue, RuleDescription};

/// A rule ready to evaluate.
#[derive(Debug, Clone)]
pub(crate) struct CompiledRule {
    pub(crate) description: RuleDescription,
    filter: SqlFilter,
    action: Option<SqlRuleAction>,
}

/// What one rule's filter says of one message.
pub(crate) enum RuleOutcome {
    NoMatch,
    /// Matched a rule without action.
    Matched,
    /// Matched a rule with an action: a copy goes through
    /// [`CompiledRule::transform`].
    MatchedWithAction,
    /// Evaluating the filter failed.
    Failed(String),
}

impl CompiledRule {
    /// Parses the rule; a bad filter or action names the position.
    pub(crate) fn compile(description: RuleDescription) -> Result<CompiledRule, AdminError> {
        let filter =
            SqlFilter::parse(&description.filter).map_err(|e| AdminError::InvalidRule {
                rule: description.name.clone(),
                text: description.filter.clone(),
                position: e.position.offset,
                message: format!("{} (filter, {})", e.message, e.position),
            })?;
        let action = match &description.action {
            None => None,
            Some(text) => {
                Some(
                    SqlRuleAction::parse(text).map_err(|e| AdminError::InvalidRule {
                        rule: description.name.clone(),
                        text: text.clone(),
                        position: e.position.offset,
                        message: format!("{} (action, {})", e.message, e.position),
                    })?,
                )
            }
        };
        Ok(CompiledRule {
            description,
            filter,
            action,
        })
    }

    /// Evaluates the rule's filter against `message`, with `seq` as its
    /// sequence number. The action is applied apart, by
    /// [`CompiledRule::transform`], so the router can give the last use of
    /// a message the message itself rather than a copy.
    pub(crate) fn evaluate(&self, message: &Message, seq: i64) -> RuleOutcome {
        let view = View { message, seq };
        match self.filter.evaluate(&view) {
            Ok(false) => RuleOutcome::NoMatch,
            Err(error) => RuleOutcome::Failed(eval_failure(&self.description.name, &error)),
            Ok(true) if self.action.is_some() => RuleOutcome::MatchedWithAction,
            Ok(true) => RuleOutcome::Matched,
        }
    }

    /// Whether the action, if any, cannot fail: then its copy may be made
    /// from the message itself once no other use of it remains.
    pub(crate) fn action_cannot_fail(&self) -> bool {
        self.action.as_ref().is_none_or(SqlRuleAction::cannot_fail)
    }

    /// Applies the rule's action to `message` (this rule's own copy of the
    /// original); a rule without an action returns it as it is. On failure,
    /// the message comes back as the statements before the failing one left
    /// it.
    pub(crate) fn transform(
        &self,
        mut message: Message,
        seq: i64,
    ) -> Result<Message, Box<(String, Message)>> {
        let Some(action) = &self.action else {
            return Ok(message);
        };
        let mut view = ViewMut {
            message: &mut message,
            seq,
        };
        match action.apply(&mut view) {
            Ok(()) => Ok(message),
            Err(error) => Err(Box::new((
                format!("rule '{}' action failed: {error}", self.description.name),
                message,
            ))),
        }
    }
}

fn eval_failure(rule: &str, error: &EvalError) -> String {
    format!("rule '{rule}' filter failed: {error}")
}

struct View<'a> {
    message: &'a Message,
    seq: i64,
}

struct ViewMut<'a> {
    message: &'a mut Message,
    seq: i64,
}

fn system<'a>(message: &'a Message, seq: i64, name: &str) -> Option<Value<'a>> {
    let text = |v: &'a Option<String>| v.as_deref().map(|s| Value::String(Cow::Borrowed(s)));
    match name {
        "MessageId" => text(&message.message_id),
        "CorrelationId" => text(&message.correlation_id),
        "SessionId" => text(&message.session_id),
        "ReplyToSessionId" => text(&message.reply_to_session_id),
        "To" => text(&message.to),
        "ReplyTo" => text(&message.reply_to),
        "Label" | "Subject" => text(&message.subject),
        "ContentType" => text(&message.content_type),
        "SequenceNumber" | "EnqueuedSequenceNumber" => Some(Value::Int(seq)),
        "Size" => i64::try_from(message.body.len()).ok().map(Value::Int),
        "TimeToLive" => message
            .time_to_live
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .map(Value::Int),
        _ => None,
    }
}

fn user<'a>(message: &'a Message, name: &str) -> Option<Value<'a>> {
    message.properties.get(name).map(|value| match value {
        PropertyValue::String(s) => Value::String(Cow::Borrowed(s)),
        PropertyValue::Int(i) => Value::Int(*i),
        PropertyValue::Float(f) => Value::Float(*f),
        PropertyValue::Bool(b) => Value::Bool(*b),
    })
}

impl MessageProperties for View<'_> {
    fn system(&self, name: &str) -> Option<Value<'_>> {
        system(self.message, self.seq, name)
    }

    fn user(&self, name: &str) -> Option<Value<'_>> {
        user(self.message, name)
    }
}

impl MessageProperties for ViewMut<'_> {
    fn system(&self, name: &str) -> Option<Value<'_>> {
        system(self.message, self.seq, name)
    }

    fn user(&self, name: &str) -> Option<Value<'_>> {
        user(self.message, name)
    }
}

fn to_property(value: Value<'_>) -> PropertyValue {
    match value {
        Value::String(s) => PropertyValue::String(s.into_owned()),
        Value::Int(i) => PropertyValue::Int(i),
        Value::Float(f) => PropertyValue::Float(f),
        Value::Bool(b) => PropertyValue::Bool(b),
    }
}

impl MessagePropertiesMut for ViewMut<'_> {
    fn set_user(&mut self, name: &str, value: Value<'_>) {
        self.message
            .properties
            .insert(name.to_owned(), to_property(value));
    }

    fn remove_user(&mut self, name: &str) {
        self.message.properties.remove(name);
    }

    fn set_system(&mut self, name: &str, value: Value<'_>) -> Result<(), ActionError> {
        let slot = match name {
            "MessageId" => &mut self.message.message_id,
            "CorrelationId" => &mut self.message.correlation_id,
            "SessionId" => &mut self.message.session_id,
            "ReplyToSessionId" => &mut self.message.reply_to_session_id,
            "To" => &mut self.message.to,
            "ReplyTo" => &mut self.message.reply_to,
            "Label" | "Subject" => &mut self.message.subject,
            "ContentType" => &mut self.message.content_type,
            _ => {
                return Err(ActionError::SystemPropertyNotSettable {
                    name: name.to_owned(),
                    reason: "the broker assigns it".to_owned(),
                });
            }
        };
        match value {
            Value::String(s) => {
                *slot = Some(s.into_owned());
                Ok(())
            }
            other => Err(ActionError::SystemPropertyType {
                name: name.to_owned(),
                expected: "string",
                found: other.type_name(),
            }),
        }
    }
}
