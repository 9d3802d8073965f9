//! RDS errors, classified once by operation and error code into the [`BackendError`] the
//! controller sees.

use std::error::Error as StdError;

use aws_sdk_rds::config::http::HttpResponse;
use aws_sdk_rds::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_rds::operation::delete_db_instance::DeleteDBInstanceError;
use aws_sdk_rds::operation::modify_db_instance::ModifyDBInstanceError;

use super::BACKEND;
use crate::backends::call::BackendOutcome;
use crate::error::{BackendError, ErrorClass};

/// One failed RDS call, classified where the code is known; [`RdsBackend`](super::RdsBackend) returns it as a
/// [`BackendError`] naming the operation. Its `keeper_backend_requests_total{outcome}` label is
/// the class's, as for every backend.
#[derive(Debug)]
pub(super) struct RdsError {
    class: ErrorClass,
    code: String,
    message: String,
}

impl RdsError {
    pub(super) fn new(
        class: ErrorClass,
        code: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        RdsError {
            class,
            code: code.into(),
            message: message.into(),
        }
    }

    pub(super) fn not_found(message: String) -> Self {
        RdsError::new(ErrorClass::NotFound, "DBInstanceNotFound", message)
    }

    pub(super) fn already_exists(message: String) -> Self {
        RdsError::new(ErrorClass::Conflict, "DBInstanceAlreadyExists", message)
    }

    /// The instance is busy (creating, modifying, deleting): a conflict that resolves itself.
    pub(super) fn invalid_state(message: String) -> Self {
        RdsError::new(ErrorClass::Conflict, "InvalidDBInstanceState", message)
    }

    pub(super) fn into_backend(self, operation: &'static str) -> BackendError {
        BackendError::new(BACKEND, operation, self.class, self.code, self.message)
    }
}

impl BackendOutcome for RdsError {
    fn outcome(&self) -> &'static str {
        self.class.label()
    }
}

/// Whether a classified RDS error means missing permissions or unusable credentials.
pub fn is_access_denied(error: &BackendError) -> bool {
    ACCESS_DENIED_CODES.contains(&error.code.as_str())
}

/// Error codes AWS uses for throttling across its query-protocol services.
const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "RequestThrottled",
    "RequestThrottledException",
];

/// Error codes of credentials that expired: the AWS credential chain refreshes them, so they
/// heal by themselves like throttling does.
const EXPIRED_CODES: &[&str] = &["ExpiredToken", "ExpiredTokenException", "RequestExpired"];

/// Error codes for missing permissions or unusable credentials.
const ACCESS_DENIED_CODES: &[&str] = &[
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
    "AuthFailure",
    "MissingAuthenticationToken",
];

pub(super) fn message<E: ProvideErrorMetadata + StdError>(e: &E) -> String {
    e.message()
        .map(str::to_string)
        .unwrap_or_else(|| e.to_string())
}

/// Maps an SDK error to an [`RdsError`]. `modeled` recognises the operation's modeled faults
/// (which the SDK matches by type, not by code); the rest is classified by error code and
/// HTTP status.
pub(super) fn classify<E>(
    err: SdkError<E, HttpResponse>,
    modeled: impl FnOnce(&E) -> Option<RdsError>,
) -> RdsError
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    match err {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let e = service.into_err();
            if let Some(error) = modeled(&e) {
                return error;
            }
            let code = e.code().unwrap_or("Unknown").to_string();
            let text = message(&e);
            match code.as_str() {
                "DBInstanceNotFound" => RdsError::not_found(text),
                "DBInstanceAlreadyExists" => RdsError::already_exists(text),
                "InvalidDBInstanceState" => RdsError::invalid_state(text),
                c if THROTTLING_CODES.contains(&c) => {
                    RdsError::new(ErrorClass::Transient, code, text)
                }
                c if EXPIRED_CODES.contains(&c) => RdsError::new(ErrorClass::Transient, code, text),
                c if ACCESS_DENIED_CODES.contains(&c) => {
                    RdsError::new(ErrorClass::Permanent, code, text)
                }
                _ if status >= 500 => RdsError::new(ErrorClass::Transient, code, text),
                // A request RDS refuses as it stands (validation, quota, missing subnet group).
                _ => RdsError::new(ErrorClass::Permanent, code, text),
            }
        }
        // Timeouts, connection failures, unparseable responses and requests that could not be
        // built (for example credentials not yet loadable) all heal by themselves or with the
        // environment; retry them with backoff.
        other => RdsError::new(
            ErrorClass::Transient,
            "Unavailable",
            aws_sdk_rds::error::DisplayErrorContext(&other).to_string(),
        ),
    }
}

/// The faults `ModifyDBInstance` and `DeleteDBInstance` model alike: a missing instance, or one
/// busy in another change. Each operation has its own error type, with its own matchers.
pub(super) trait InstanceFaults: ProvideErrorMetadata + StdError {
    fn is_not_found(&self) -> bool;
    fn is_invalid_state(&self) -> bool;
}

impl InstanceFaults for ModifyDBInstanceError {
    fn is_not_found(&self) -> bool {
        self.is_db_instance_not_found_fault()
    }
    fn is_invalid_state(&self) -> bool {
        self.is_invalid_db_instance_state_fault()
    }
}

impl InstanceFaults for DeleteDBInstanceError {
    fn is_not_found(&self) -> bool {
        self.is_db_instance_not_found_fault()
    }
    fn is_invalid_state(&self) -> bool {
        self.is_invalid_db_instance_state_fault()
    }
}

/// The modeled faults of an operation that acts on an existing instance (see [`classify`]).
pub(super) fn instance_fault<E: InstanceFaults>(e: &E) -> Option<RdsError> {
    if e.is_not_found() {
        Some(RdsError::not_found(message(e)))
    } else if e.is_invalid_state() {
        Some(RdsError::invalid_state(message(e)))
    } else {
        None
    }
}
