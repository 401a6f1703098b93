//! Request parsing with errors in the API's shape (axum's own rejections
//! are plain text).

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::api::ApiError;

/// The JSON body as `T`; an empty body is `T::default()` when `optional`.
pub(crate) fn json<T: DeserializeOwned + Default>(
    body: &Bytes,
    optional: bool,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return if optional {
            Ok(T::default())
        } else {
            Err(ApiError::bad_request("the request needs a JSON body"))
        };
    }
    // The path names the field at fault (`endpoint: invalid type ...`).
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut deserializer)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid: {e}")))
}

/// The query string as `T`, refusing it with a 400 that names the problem.
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| ApiQuery(q))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

/// An optional text field: absent and blank are the same.
pub(crate) fn given(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

/// An optional id where blank is a mistake, not a request for a fresh
/// one: a script whose `$SESSION` came out empty would otherwise lose its
/// ordering (or its duplicate detection) without a word.
pub(crate) fn optional_id(field: &str, value: Option<String>) -> Result<Option<String>, ApiError> {
    match value {
        Some(v) if v.trim().is_empty() => Err(ApiError::bad_request(format!(
            "{field} is empty: give one, or leave it out for a fresh one"
        ))),
        // Service Bus refuses longer message and session ids; the embedded
        // broker would take them, and the same traffic must run on both.
        Some(v) if v.len() > nimbus_sandbox::MAX_MESSAGE_ID_LEN => {
            Err(ApiError::bad_request(format!(
                "{field} is {} bytes, over Service Bus's limit of {}",
                v.len(),
                nimbus_sandbox::MAX_MESSAGE_ID_LEN
            )))
        }
        other => Ok(other),
    }
}

/// A listing's `limit`: `default` when not given, else between 1 and
/// [`crate::api::MAX_LIMIT`], refused naming `limit` outside that.
pub(crate) fn limit(given: Option<usize>, default: usize) -> Result<usize, ApiError> {
    match given {
        None => Ok(default.min(crate::api::MAX_LIMIT)),
        Some(0) => Err(ApiError::bad_request("limit: must be at least 1")),
        Some(n) if n > crate::api::MAX_LIMIT => Err(ApiError::bad_request(format!(
            "limit: {n} is over the maximum of {} (narrow the listing with its filters instead)",
            crate::api::MAX_LIMIT
        ))),
        Some(n) => Ok(n),
    }
}
