//! One classification of backend failures, shared by every backend (StorageGRID, S3, IAM, RDS)
//! and by the Kubernetes API (`runtime::policy` turns a class into what the controller does).
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

/// Classifies a Kubernetes API error the same way: 404 is gone, 409 a conflict (retry on fresh
/// state), 400/403/422 need a change, everything else (5xx, 429, transport) is transient.
///
/// Except a create refused because its namespace is being deleted ([`namespace_terminating`]):
/// transient. Nobody has anything to change, and it does not last: the namespace controller is
/// deleting the object that asked too, and that object's next reconcile is its cleanup (or the
/// controller has learnt to write nothing there). Reported as a permanent failure, every object
/// of a deleted namespace warned of it.
pub fn classify_kube(error: &kube::Error) -> ErrorClass {
    match error {
        _ if namespace_terminating(error) => ErrorClass::Transient,
        kube::Error::Api(status) => match status.code {
            404 => ErrorClass::NotFound,
            409 => ErrorClass::Conflict,
            400 | 401 | 403 | 422 => ErrorClass::Permanent,
            _ => ErrorClass::Transient,
        },
        _ => ErrorClass::Transient,
    }
}

/// The cause Kubernetes' NamespaceLifecycle admission gives when it refuses new content in a
/// namespace being deleted (`forbidden: unable to create new content in namespace X because it is
/// being terminated`).
const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";

/// Whether the API refused a write because the object's namespace is being deleted: a 403 with
/// the `NamespaceTerminating` cause (or, from an API server that gives no cause, its message).
pub fn namespace_terminating(error: &kube::Error) -> bool {
    let kube::Error::Api(status) = error else {
        return false;
    };
    status.code == 403
        && (status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == NAMESPACE_TERMINATING))
            || status.message.contains("because it is being terminated"))
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

    /// What the API server answers a create in a namespace being deleted, with the
    /// admission's cause or (an API server that gives none) its message only.
    fn refused_in_terminating_namespace(with_cause: bool) -> kube::Error {
        let message = "secrets \"b-credentials\" is forbidden: unable to create new content in namespace team-a because it is being terminated";
        let status = if with_cause {
            serde_json::json!({
                "status": "Failure", "code": 403, "reason": "Forbidden", "message": "forbidden",
                "details": {"name": "b-credentials", "kind": "secrets", "causes": [
                    {"reason": NAMESPACE_TERMINATING, "message": "namespace team-a is being terminated", "field": "metadata.namespace"},
                ]},
            })
        } else {
            serde_json::json!({"status": "Failure", "code": 403, "reason": "Forbidden", "message": message})
        };
        kube::Error::Api(
            serde_json::from_value::<kube::core::Status>(status)
                .unwrap()
                .boxed(),
        )
    }

    #[test]
    fn a_create_refused_in_a_namespace_being_deleted_is_transient_not_permanent() {
        for with_cause in [true, false] {
            let refused = refused_in_terminating_namespace(with_cause);
            assert!(namespace_terminating(&refused), "{refused}");
            assert_eq!(classify_kube(&refused), ErrorClass::Transient, "{refused}");
        }
        // Any other 403 still needs a change (RBAC).
        let denied = kube::Error::Api(
            kube::core::Status::failure("secrets is forbidden: User cannot create", "Forbidden")
                .with_code(403)
                .boxed(),
        );
        assert!(!namespace_terminating(&denied));
        assert_eq!(classify_kube(&denied), ErrorClass::Permanent);
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
