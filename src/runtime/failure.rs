//! What a reconcile fails with. Every controller meets the Kubernetes API, its backend and the
//! Secrets it owns, so those failures are one type, classified here once; what only one controller
//! can meet (a spec it refuses, a provider it cannot use) is its own [`ControllerFailure`].

use crate::cluster::SecretError;
use crate::error::{BackendError, ErrorClass, classify_kube};

use super::ReconcileError;

/// A reconcile's failure: a shared one, or the controller's own (`E`).
#[derive(Debug, thiserror::Error)]
pub enum Failure<E> {
    #[error("kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error(transparent)]
    Own(E),
}

/// The failures only one controller can meet, each saying what it means.
pub trait ControllerFailure: std::error::Error + Send + Sync + 'static {
    /// Its label in `keeper_reconcile_errors_total{reason}`.
    fn reason(&self) -> &'static str;
    fn class(&self) -> ErrorClass;
    /// The `Ready=False` condition reason it shows.
    fn condition_reason(&self) -> &'static str;
    /// The condition reason a backend failure shows in this controller: `BackendError` unless
    /// the controller can say more (credentials the backend refused, say).
    fn backend_condition_reason(_error: &BackendError) -> &'static str {
        "BackendError"
    }
}

impl<E: ControllerFailure> From<E> for Failure<E> {
    fn from(own: E) -> Self {
        Failure::Own(own)
    }
}

impl<E> Failure<E> {
    /// Whether the API refused a write because the namespace is being deleted.
    pub fn namespace_terminating(&self) -> bool {
        match self {
            Failure::Kube(e) | Failure::Secret(SecretError::Kube(e)) => {
                crate::error::namespace_terminating(e)
            }
            _ => false,
        }
    }
}

impl<E: ControllerFailure> ReconcileError for Failure<E> {
    fn reason(&self) -> &'static str {
        match self {
            Failure::Kube(_) => "kube",
            Failure::Backend(_) => "backend",
            Failure::Secret(_) => "secret",
            Failure::Own(e) => e.reason(),
        }
    }

    fn class(&self) -> ErrorClass {
        match self {
            Failure::Kube(e) => classify_kube(e),
            Failure::Backend(e) => e.class,
            Failure::Secret(e) => e.class(),
            Failure::Own(e) => e.class(),
        }
    }

    fn condition_reason(&self) -> &'static str {
        match self {
            Failure::Kube(_) => "KubernetesError",
            Failure::Backend(e) => E::backend_condition_reason(e),
            Failure::Secret(e) => e.condition_reason(),
            Failure::Own(e) => e.condition_reason(),
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    /// A controller that refuses specs and tells refused credentials apart.
    #[derive(Debug, thiserror::Error)]
    #[error("bad spec")]
    struct Refused;

    impl ControllerFailure for Refused {
        fn reason(&self) -> &'static str {
            "invalid_spec"
        }
        fn class(&self) -> ErrorClass {
            ErrorClass::Permanent
        }
        fn condition_reason(&self) -> &'static str {
            "InvalidSpec"
        }
        fn backend_condition_reason(error: &BackendError) -> &'static str {
            match error.code.as_str() {
                "AccessDenied" => "AccessDenied",
                _ => "BackendError",
            }
        }
    }

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Status::failure(message, reason).with_code(code).boxed())
    }

    fn backend(class: ErrorClass, code: &str) -> BackendError {
        BackendError::new("s3", "create_bucket", class, code, "refused")
    }

    #[test]
    fn a_controllers_own_failure_speaks_for_itself_and_converts_with_a_question_mark() {
        fn refuse() -> Result<(), Failure<Refused>> {
            Err(Refused)?
        }
        let failure = refuse().unwrap_err();
        assert!(matches!(failure, Failure::Own(Refused)));
        assert_eq!(failure.to_string(), "bad spec");
        assert_eq!(failure.reason(), "invalid_spec");
        assert_eq!(failure.class(), ErrorClass::Permanent);
        assert_eq!(failure.condition_reason(), "InvalidSpec");
    }

    #[test]
    fn a_backend_failure_keeps_the_backends_class_and_the_controller_names_its_reason() {
        let denied: Failure<Refused> = backend(ErrorClass::Permanent, "AccessDenied").into();
        assert_eq!(denied.class(), ErrorClass::Permanent);
        assert_eq!(denied.condition_reason(), "AccessDenied");
        assert_eq!(denied.reason(), "backend");
        let busy: Failure<Refused> = backend(ErrorClass::Transient, "SlowDown").into();
        assert_eq!(busy.class(), ErrorClass::Transient);
        assert_eq!(busy.condition_reason(), "BackendError");
    }

    #[test]
    fn kubernetes_and_secret_failures_are_classified_as_the_api_answered() {
        let gone: Failure<Refused> = api(404, "NotFound", "not found").into();
        assert_eq!(gone.class(), ErrorClass::NotFound);
        assert_eq!(gone.condition_reason(), "KubernetesError");
        assert_eq!(gone.reason(), "kube");
        let conflict: Failure<Refused> = SecretError::Conflict {
            namespace: "team-a".into(),
            name: "creds".into(),
            holder: "belongs to Deployment web".into(),
        }
        .into();
        assert_eq!(conflict.class(), ErrorClass::Permanent);
        assert_eq!(conflict.condition_reason(), "SecretConflict");
        assert_eq!(conflict.reason(), "secret");
    }

    #[test]
    fn a_write_refused_in_a_terminating_namespace_is_told_apart_directly_or_through_a_secret() {
        let refused = || {
            api(
                403,
                "Forbidden",
                "secrets \"x\" is forbidden: unable to create new content in namespace team-a \
                 because it is being terminated",
            )
        };
        assert!(Failure::<Refused>::Kube(refused()).namespace_terminating());
        assert!(Failure::<Refused>::Secret(SecretError::Kube(refused())).namespace_terminating());
        let forbidden = api(403, "Forbidden", "secrets \"x\" is forbidden: no");
        assert!(!Failure::<Refused>::Kube(forbidden).namespace_terminating());
        assert!(!Failure::Own(Refused).namespace_terminating());
    }
}
