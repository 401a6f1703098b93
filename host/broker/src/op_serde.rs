//! How the fields of a [`StoreOp`](crate::records::StoreOp) that are not
//! plain data are written to the log, and the time encoding they share.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A time as signed milliseconds since the Unix epoch: any `SystemTime`
/// encodes (serde's own form refuses times before the epoch, and a message's
/// scheduled time is the publisher's to choose).
pub(crate) mod time_ms {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer};

    use crate::op_serde::{from_millis, millis};

    pub(crate) fn serialize<S: Serializer>(time: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(millis(*time))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        i64::deserialize(d).map(from_millis)
    }

    pub(crate) mod option {
        use std::time::SystemTime;

        use serde::{Deserialize, Deserializer, Serializer};

        use crate::op_serde::{from_millis, millis};

        pub(crate) fn serialize<S: Serializer>(
            time: &Option<SystemTime>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match time {
                Some(time) => s.serialize_some(&millis(*time)),
                None => s.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<SystemTime>, D::Error> {
            Option::<i64>::deserialize(d).map(|ms| ms.map(from_millis))
        }
    }
}

/// [`TopicSettings`](nimbus_transport::TopicSettings), which belongs to
/// another crate and is `non_exhaustive`, through a mirror of its fields.
pub(crate) mod topic_settings {
    use std::time::Duration;

    use nimbus_transport::TopicSettings;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Stored {
        default_message_ttl: Option<Duration>,
        duplicate_detection_window: Option<Duration>,
    }

    pub(crate) fn serialize<S: Serializer>(
        settings: &TopicSettings,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        Stored {
            default_message_ttl: settings.default_message_ttl,
            duplicate_detection_window: settings.duplicate_detection_window,
        }
        .serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<TopicSettings, D::Error> {
        let stored = Stored::deserialize(d)?;
        let mut settings = TopicSettings::default();
        settings.default_message_ttl = stored.default_message_ttl;
        settings.duplicate_detection_window = stored.duplicate_detection_window;
        Ok(settings)
    }
}

/// [`SubscriptionSettings`](nimbus_transport::SubscriptionSettings), as
/// [`topic_settings`].
pub(crate) mod subscription_settings {
    use std::time::Duration;

    use nimbus_transport::SubscriptionSettings;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Stored {
        requires_session: bool,
        lock_duration: Duration,
        max_delivery_count: u32,
        default_message_ttl: Option<Duration>,
        dead_letter_on_expiry: bool,
        forward_to: Option<String>,
    }

    pub(crate) fn serialize<S: Serializer>(
        settings: &SubscriptionSettings,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        Stored {
            requires_session: settings.requires_session,
            lock_duration: settings.lock_duration,
            max_delivery_count: settings.max_delivery_count,
            default_message_ttl: settings.default_message_ttl,
            dead_letter_on_expiry: settings.dead_letter_on_expiry,
            forward_to: settings.forward_to.clone(),
        }
        .serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<SubscriptionSettings, D::Error> {
        let stored = Stored::deserialize(d)?;
        let mut settings = SubscriptionSettings::default();
        settings.requires_session = stored.requires_session;
        settings.lock_duration = stored.lock_duration;
        settings.max_delivery_count = stored.max_delivery_count;
        settings.default_message_ttl = stored.default_message_ttl;
        settings.dead_letter_on_expiry = stored.dead_letter_on_expiry;
        settings.forward_to = stored.forward_to;
        Ok(settings)
    }
}

/// `time` as signed milliseconds since the Unix epoch, saturating.
pub(crate) fn millis(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// The time `ms` milliseconds from the Unix epoch.
pub(crate) fn from_millis(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}
