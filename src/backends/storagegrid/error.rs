//! Why a StorageGRID call failed, classified for the controllers and the metrics, and how an
//! answer is read: the success envelope's `data`, the error envelope's message.

use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::backends::call::BackendOutcome;
use crate::error::{BackendError, ErrorClass};

/// Why a management call failed, classified for the controllers and the metrics.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// 404: the account, bucket, user, group or key does not exist. The only "gone".
    #[error("{operation}: not found: {message}")]
    NotFound {
        operation: &'static str,
        message: String,
    },
    /// 409: a conflict, such as a bucket that is not empty or an account that still has buckets.
    #[error("{operation}: conflict: {message}")]
    Conflict {
        operation: &'static str,
        message: String,
    },
    /// The login itself was refused (401 on `/authorize`): wrong credentials. Permanent until
    /// the credentials change.
    #[error("{operation}: sign-in refused for user {username:?}: {message}")]
    BadCredentials {
        operation: &'static str,
        username: String,
        message: String,
    },
    /// A fresh token was refused with 401 too. Transient: nothing says the credentials are wrong.
    #[error("{operation}: request refused with 401 even after signing in again: {message}")]
    Unauthorized {
        operation: &'static str,
        message: String,
    },
    /// Another 4xx (400, 403, 422, ...): the request is invalid or not permitted. Permanent.
    #[error("{operation}: rejected with HTTP {status}: {message}")]
    Rejected {
        operation: &'static str,
        status: u16,
        message: String,
    },
    /// 5xx, 408 or 429: the grid could not answer now. Transient.
    #[error("{operation}: server error HTTP {status}: {message}")]
    Server {
        operation: &'static str,
        status: u16,
        message: String,
    },
    /// Connection failure or timeout. Transient.
    #[error("{operation}: request failed: {source}")]
    Transport {
        operation: &'static str,
        #[source]
        source: reqwest::Error,
    },
    /// A 2xx whose body is not what the contract says. Transient (proxies in the way, upgrades),
    /// and above all never read as "gone".
    #[error("{operation}: unexpected response: {message}")]
    InvalidResponse {
        operation: &'static str,
        message: String,
    },
}

impl Error {
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// The grid refused the request without acting on it: throttled (429) or unavailable (503).
    pub fn not_acted_on(&self) -> bool {
        matches!(
            self,
            Error::Server {
                status: 429 | 503,
                ..
            }
        )
    }

    /// Errors that will not go away by retrying the same request: bad credentials and rejected
    /// (validation, permission) requests. Controllers report these and wait for a change.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Error::BadCredentials { .. } | Error::Rejected { .. })
    }
}

// The grid client's errors map into the one `BackendError` of keeper, so controllers see one
// type.
impl From<Error> for BackendError {
    fn from(e: Error) -> Self {
        use Error as E;
        // The message without the operation (the BackendError names it once).
        let (operation, class, code, message) = match &e {
            E::NotFound { operation, message } => (
                *operation,
                ErrorClass::NotFound,
                "HTTP 404".into(),
                message.clone(),
            ),
            E::Conflict { operation, message } => (
                *operation,
                ErrorClass::Conflict,
                "HTTP 409".into(),
                message.clone(),
            ),
            E::BadCredentials {
                operation,
                username,
                message,
            } => (
                *operation,
                ErrorClass::Permanent,
                "BadCredentials".into(),
                format!("sign-in refused for user {username:?}: {message}"),
            ),
            E::Rejected {
                operation,
                status,
                message,
            } => (
                *operation,
                ErrorClass::Permanent,
                format!("HTTP {status}"),
                message.clone(),
            ),
            E::Unauthorized { operation, message } => (
                *operation,
                ErrorClass::Transient,
                "HTTP 401".into(),
                format!("refused even after signing in again: {message}"),
            ),
            E::Server {
                operation,
                status,
                message,
            } => (
                *operation,
                ErrorClass::Transient,
                format!("HTTP {status}"),
                message.clone(),
            ),
            E::Transport { operation, source } => (
                *operation,
                ErrorClass::Transient,
                "Transport".into(),
                source.to_string(),
            ),
            E::InvalidResponse { operation, message } => (
                *operation,
                ErrorClass::Transient,
                "InvalidResponse".into(),
                message.clone(),
            ),
        };
        BackendError::new("storagegrid", operation, class, code, message)
    }
}

impl BackendOutcome for Error {
    fn outcome(&self) -> &'static str {
        match self {
            Error::NotFound { .. } => "not_found",
            Error::Conflict { .. } => "conflict",
            Error::BadCredentials { .. } | Error::Rejected { .. } => "permanent",
            Error::Unauthorized { .. }
            | Error::Server { .. }
            | Error::Transport { .. }
            | Error::InvalidResponse { .. } => "transient",
        }
    }
}

/// `data` of a success envelope.
pub(super) fn data<T: DeserializeOwned>(operation: &'static str, text: &str) -> Result<T, Error> {
    #[derive(serde::Deserialize)]
    struct Envelope<T> {
        data: T,
    }
    serde_json::from_str::<Envelope<T>>(text)
        .map(|e| e.data)
        .map_err(|e| Error::InvalidResponse {
            operation,
            message: format!("cannot read the response body: {e}"),
        })
}

/// The error class of a non-2xx status (401 is handled by the caller). Classes follow the HTTP
/// status only: the contract says never to match on `key` or `text`.
pub(super) fn classify(operation: &'static str, status: StatusCode, text: &str) -> Error {
    let message = error_message(text);
    let code = status.as_u16();
    match status {
        StatusCode::NOT_FOUND => Error::NotFound { operation, message },
        StatusCode::CONFLICT => Error::Conflict { operation, message },
        StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS => Error::Server {
            operation,
            status: code,
            message,
        },
        s if s.is_client_error() => Error::Rejected {
            operation,
            status: code,
            message,
        },
        _ => Error::Server {
            operation,
            status: code,
            message,
        },
    }
}

/// The human text of an error envelope (`message.text` plus per-field `errors[].text`), or a
/// short excerpt of a body that is not an envelope (a proxy's HTML page, say).
pub(super) fn error_message(text: &str) -> String {
    let Ok(body) = serde_json::from_str::<Value>(text) else {
        return excerpt(text);
    };
    let mut parts: Vec<String> = Vec::new();
    if let Some(main) = message_text(&body["message"]) {
        parts.push(main);
    }
    if let Some(errors) = body["errors"].as_array() {
        parts.extend(errors.iter().filter_map(message_text));
    }
    if parts.is_empty() {
        excerpt(text)
    } else {
        parts.join("; ")
    }
}

pub(super) fn message_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("text").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

pub(super) fn excerpt(text: &str) -> String {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return "(empty body)".to_string();
    }
    let mut out: String = trimmed.chars().take(200).collect();
    if trimmed.chars().count() > 200 {
        out.push('…');
    }
    out
}
