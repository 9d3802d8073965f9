//! One classification of backend failures, shared by every backend (StorageGRID, S3, IAM, RDS)
//! and by the Kubernetes API, and one policy that turns a class into what the controller does.
//!
//! Classification is per operation and error code, not per HTTP status: each backend client maps
//! its answers into a [`BackendError`] where it knows what the call meant (a 409 from DeleteBucket
//! is "not empty", from CreateBucket `BucketAlreadyOwnedByYou` is success). The controllers then
//! see one type, and "only NotFound means gone" is one rule ([`BackendError::is_gone`]).

use std::fmt;

/// What a failed call means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// May heal by itself (5xx, throttling, timeouts, connection failures, expired tokens):
    /// retried with per-object exponential backoff.
    Transient,
    /// Needs a change by the user or the platform team (validation, permissions, bad
    /// credentials): reported as `Ready=False`, retried slowly and on every change.
    Permanent,
    /// The backend's state disagrees with the request right now (a concurrent change, a
    /// resource that is busy or not empty): looked at again soon, not reported as a failure.
    Conflict,
    /// The thing does not exist. The only class that may be read as "gone".
    NotFound,
}

impl ErrorClass {
    /// The `outcome` label of `keeper_backend_requests_total` (snake_case, low cardinality).
    pub fn label(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
            ErrorClass::Conflict => "conflict",
            ErrorClass::NotFound => "not_found",
        }
    }
}

/// A failed backend call, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendError {
    /// `storagegrid`, `s3`, `iam`, `rds` or `kubernetes`.
    pub backend: &'static str,
    /// The operation in snake_case, such as `create_bucket`.
    pub operation: &'static str,
    pub class: ErrorClass,
    /// The backend's error code (`NoSuchBucket`, `DBInstanceNotFound`, `HTTP 503`, ...).
    pub code: String,
    /// The backend's message, for conditions and logs (never carries secrets).
    pub message: String,
}

impl BackendError {
    pub fn new(
        backend: &'static str,
        operation: &'static str,
        class: ErrorClass,
        code: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        BackendError {
            backend,
            operation,
            class,
            code: code.into(),
            message: message.into(),
        }
    }

    /// Whether the call proved the thing absent. Only `NotFound` does: a timeout, a 5xx, a
    /// refused request or an unparseable answer never counts as "gone".
    pub fn is_gone(&self) -> bool {
        self.class == ErrorClass::NotFound
    }

    pub fn is_conflict(&self) -> bool {
        self.class == ErrorClass::Conflict
    }

    pub fn is_permanent(&self) -> bool {
        self.class == ErrorClass::Permanent
    }

    pub fn is_transient(&self) -> bool {
        self.class == ErrorClass::Transient
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} failed", self.backend, self.operation)?;
        if !self.code.is_empty() {
            write!(f, " ({})", self.code)?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for BackendError {}

impl crate::metrics::BackendOutcome for BackendError {
    fn outcome(&self) -> &'static str {
        self.class.label()
    }
}

/// Classifies a Kubernetes API error the same way: 404 is gone, 409 a conflict (retry on fresh
/// state), 400/403/422 need a change, everything else (5xx, 429, transport) is transient.
pub fn classify_kube(error: &kube::Error) -> ErrorClass {
    match error {
        kube::Error::Api(status) => match status.code {
            404 => ErrorClass::NotFound,
            409 => ErrorClass::Conflict,
            400 | 401 | 403 | 422 => ErrorClass::Permanent,
            _ => ErrorClass::Transient,
        },
        _ => ErrorClass::Transient,
    }
}

/// What the shared reconcile flow does with an error of a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Retry with the object's exponential backoff.
    Backoff,
    /// Look again after this long; nothing is reported as failed.
    Requeue(std::time::Duration),
    /// Set `Ready=False` with the error's reason and message (phase `Failed` unless deleting),
    /// one Warning event per change, and retry after this long (a spec change retries at once).
    Fail(std::time::Duration),
}

/// How soon a conflict or a vanished dependency is looked at again.
pub const CONFLICT_RETRY: std::time::Duration = std::time::Duration::from_secs(5);
/// How often an object in a permanent error looks again on its own.
pub const PERMANENT_RETRY: std::time::Duration = std::time::Duration::from_secs(300);

/// The one policy: every controller's errors go through it.
pub fn policy(class: ErrorClass) -> Policy {
    match class {
        ErrorClass::Transient => Policy::Backoff,
        // Something moved between our look and our call: the next look decides.
        ErrorClass::Conflict | ErrorClass::NotFound => Policy::Requeue(CONFLICT_RETRY),
        ErrorClass::Permanent => Policy::Fail(PERMANENT_RETRY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(class: ErrorClass) -> BackendError {
        BackendError::new("s3", "delete_bucket", class, "X", "m")
    }

    #[test]
    fn only_not_found_means_gone() {
        assert!(error(ErrorClass::NotFound).is_gone());
        for class in [
            ErrorClass::Transient,
            ErrorClass::Permanent,
            ErrorClass::Conflict,
        ] {
            assert!(!error(class).is_gone(), "{class:?} must never read as gone");
        }
    }

    #[test]
    fn the_policy_backs_off_transient_fails_permanent_and_requeues_the_rest() {
        assert_eq!(policy(ErrorClass::Transient), Policy::Backoff);
        assert_eq!(policy(ErrorClass::Permanent), Policy::Fail(PERMANENT_RETRY));
        assert_eq!(
            policy(ErrorClass::Conflict),
            Policy::Requeue(CONFLICT_RETRY)
        );
        assert_eq!(
            policy(ErrorClass::NotFound),
            Policy::Requeue(CONFLICT_RETRY)
        );
    }

    #[test]
    fn kubernetes_errors_classify_by_status() {
        let api = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("m", "r")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert_eq!(classify_kube(&api(404)), ErrorClass::NotFound);
        assert_eq!(classify_kube(&api(409)), ErrorClass::Conflict);
        assert_eq!(classify_kube(&api(422)), ErrorClass::Permanent);
        assert_eq!(classify_kube(&api(503)), ErrorClass::Transient);
        assert_eq!(classify_kube(&api(429)), ErrorClass::Transient);
    }

    #[test]
    fn the_message_names_backend_operation_and_code() {
        let e = BackendError::new(
            "rds",
            "create_db_instance",
            ErrorClass::Permanent,
            "InvalidParameterValue",
            "bad class",
        );
        assert_eq!(
            e.to_string(),
            "rds create_db_instance failed (InvalidParameterValue): bad class"
        );
    }
}

// Each backend client's own error type maps into the one `BackendError` here, so controllers
// see one type. The clients classify per operation and code where the meaning depends on the
// call (see `s3::S3Store::create_bucket`, `s3::S3Store::delete_bucket`).

impl From<super::storagegrid::Error> for BackendError {
    fn from(e: super::storagegrid::Error) -> Self {
        use super::storagegrid::Error as E;
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

impl From<super::s3::S3Error> for BackendError {
    fn from(e: super::s3::S3Error) -> Self {
        BackendError::new("s3", e.operation, e.classified(), e.code, e.message)
    }
}

#[cfg(test)]
mod mapping_tests {
    use super::*;
    use crate::backends::{s3, storagegrid};

    #[test]
    fn grid_errors_map_by_meaning() {
        let e: BackendError = storagegrid::Error::Conflict {
            operation: "delete_container",
            message: "not empty".into(),
        }
        .into();
        assert_eq!(
            (e.class, e.operation),
            (ErrorClass::Conflict, "delete_container")
        );
        let e: BackendError = storagegrid::Error::Rejected {
            operation: "create_account",
            status: 400,
            message: "bad".into(),
        }
        .into();
        assert_eq!(e.class, ErrorClass::Permanent);
        let e: BackendError = storagegrid::Error::Server {
            operation: "get_account",
            status: 503,
            message: "busy".into(),
        }
        .into();
        assert_eq!(e.class, ErrorClass::Transient);
    }

    #[test]
    fn s3_errors_map_by_code_before_status() {
        let s3 = |class, code: &str| -> BackendError {
            s3::S3Error {
                operation: "delete_bucket",
                class,
                code: code.into(),
                message: String::new(),
            }
            .into()
        };
        assert_eq!(
            s3(s3::ErrorClass::Permanent, "NoSuchBucket").class,
            ErrorClass::NotFound
        );
        assert_eq!(
            s3(s3::ErrorClass::Permanent, "BucketNotEmpty").class,
            ErrorClass::Conflict
        );
        assert_eq!(
            s3(s3::ErrorClass::Transient, "SlowDown").class,
            ErrorClass::Transient
        );
        assert_eq!(
            s3(s3::ErrorClass::Permanent, "AccessDenied").class,
            ErrorClass::Permanent
        );
    }
}
