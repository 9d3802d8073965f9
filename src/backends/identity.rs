//! Which backend keeper is talking to (audit 2, N5): a StorageGRID grid's id, an AWS account, or
//! an S3-compatible store's endpoint and bucket owner. Recorded in status when keeper creates
//! something, and compared before keeper would create it again: a 404 from another grid (a changed
//! endpoint, a DNS switch to a disaster-recovery grid, a proxy answering 404) must never read as
//! "deleted outside keeper" and hand applications a new, empty account or bucket.
//!
//! Looked up once per provider and process ([`IdentityCache`]): steady state costs no call.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::OnceCell;

use crate::error::{BackendError, ErrorClass};

/// The `code` of the error that refuses a re-create on another backend, and the condition reason
/// the controllers report it under.
pub const IDENTITY_CHANGED: &str = "BackendIdentityChanged";

/// The annotation by which a person confirms that the backend keeper now reaches is the right
/// one (a legitimate endpoint move): its value must be the live identity the refusal names, so a
/// confirmation never carries over to yet another backend.
pub const CONFIRM_ANNOTATION: &str = "keeper.dev/confirm-backend-identity";

/// The identity of a StorageGRID grid: its id.
pub fn storagegrid(grid_id: &str) -> String {
    format!("storagegrid:{grid_id}")
}

/// The identity of an S3-compatible store: its endpoint and the canonical id of the owner of the
/// provider keys' buckets (on AWS the account's canonical user id).
pub fn s3_owner(endpoint: &str, owner_id: &str) -> String {
    format!("s3:{} owner={owner_id}", endpoint.trim_end_matches('/'))
}

/// A provider's identity, looked up at most once per process (only a success is kept: a failed
/// lookup is tried again on the next use). Clones share the value.
#[derive(Clone, Default)]
pub struct IdentityCache(Arc<OnceCell<String>>);

impl IdentityCache {
    /// The identity, from `lookup` the first time.
    pub async fn get<F, Fut>(&self, lookup: F) -> Result<String, BackendError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<String, BackendError>>,
    {
        self.0.get_or_try_init(lookup).await.cloned()
    }

    /// The identity if it was looked up already (no call).
    pub fn known(&self) -> Option<String> {
        self.0.get().cloned()
    }
}

/// What may happen before keeper creates again something it had recorded as created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recreate {
    /// The live backend is the recorded one: go ahead.
    Same,
    /// Nothing was recorded (made by a keeper from before identities were recorded): go ahead
    /// as before, and record the live identity with the create.
    Unrecorded,
    /// Another backend, confirmed by a person with [`CONFIRM_ANNOTATION`]: go ahead and record
    /// the live identity.
    Confirmed,
    /// Another backend, not confirmed: create nothing.
    Refused { recorded: String, live: String },
}

/// Compares the recorded identity with the live one, given the value of [`CONFIRM_ANNOTATION`].
pub fn before_recreate(recorded: Option<&str>, live: &str, confirmed: Option<&str>) -> Recreate {
    match recorded {
        None => Recreate::Unrecorded,
        Some(recorded) if recorded == live => Recreate::Same,
        Some(_) if confirmed.map(str::trim) == Some(live) => Recreate::Confirmed,
        Some(recorded) => Recreate::Refused {
            recorded: recorded.to_string(),
            live: live.to_string(),
        },
    }
}

/// The identity to keep in status once the resource is known to exist on the live backend: the
/// recorded one, or the live one on first sight (an object an older keeper made). A found
/// resource replaces a recorded identity only when a person confirmed the live one.
pub fn on_sight(recorded: Option<&str>, live: &str, confirmed: Option<&str>) -> String {
    match recorded {
        Some(_) if confirmed.map(str::trim) == Some(live) => live.to_string(),
        Some(recorded) => recorded.to_string(),
        None => live.to_string(),
    }
}

/// What keeper would do about something it recorded as created and the live backend says does
/// not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMissing {
    /// Create it again (a live resource).
    Recreate,
    /// Count it as deleted and let the finalizer go (a resource being deleted).
    CountAsGone,
}

/// Whether keeper may `act` on `what` (as a message names it), which it recorded as created on
/// `recorded` and which is missing on the `live` backend: only when the live backend is the
/// recorded one, a person confirmed it, or none was recorded (made by an older keeper). Another
/// backend's "not found" says nothing about the original: re-created, applications would get
/// empty storage; counted as gone, the original would be left behind untracked. `Err` carries
/// the refusal, for the resource `kind` `namespace/name` (to name the confirming command).
pub fn on_missing(
    act: OnMissing,
    what: &str,
    recorded: Option<&str>,
    live: &str,
    confirmed: Option<&str>,
    (kind, namespace, name): (&str, &str, &str),
) -> Result<(), String> {
    let Recreate::Refused { recorded, live } = before_recreate(recorded, live, confirmed) else {
        return Ok(());
    };
    Err(match act {
        OnMissing::Recreate => format!(
            "{what} was created on {recorded}, but keeper now reaches {live}, where it does not exist: keeper creates no new, empty one there (a changed endpoint, a DNS switch or a proxy answering 404 would hand applications empty storage); {}",
            confirm_hint(kind, namespace, name, &live)
        ),
        OnMissing::CountAsGone => format!(
            "{what} was created on {recorded}, but keeper now reaches {live}, where it does not exist: keeper does not count it as deleted and keeps the finalizer, which would otherwise leave the original behind untracked; point keeper back at the recorded backend, or, if the original is gone for good, confirm with {}",
            confirm_command(kind, namespace, name, &live)
        ),
    })
}

/// The sentence a refusal ends with: how a person confirms a legitimate move.
pub fn confirm_hint(kind: &str, namespace: &str, name: &str, live: &str) -> String {
    format!(
        "if the move is intended, confirm the new backend with {} (keeper then creates it there); otherwise point keeper back at the recorded backend",
        confirm_command(kind, namespace, name, live)
    )
}

/// The command (in backticks) by which a person confirms `live` as the backend of resource
/// `kind` `namespace/name`.
pub fn confirm_command(kind: &str, namespace: &str, name: &str, live: &str) -> String {
    format!("`kubectl annotate {kind} {name} -n {namespace} {CONFIRM_ANNOTATION}={live}`")
}

/// A refused re-create as a permanent backend error with code [`IDENTITY_CHANGED`].
pub fn changed_error(
    backend: &'static str,
    operation: &'static str,
    message: String,
) -> BackendError {
    BackendError::new(
        backend,
        operation,
        ErrorClass::Permanent,
        IDENTITY_CHANGED,
        message,
    )
}

/// Whether `error` is a refused re-create.
pub fn is_changed(error: &BackendError) -> bool {
    error.code == IDENTITY_CHANGED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_backends_not_found_never_counts_as_deleted_unless_confirmed() {
        let at = ("s3tenant", "ns", "t");
        assert_eq!(
            on_missing(
                OnMissing::CountAsGone,
                "account 1",
                Some("g:a"),
                "g:a",
                None,
                at
            ),
            Ok(())
        );
        assert_eq!(
            on_missing(OnMissing::CountAsGone, "account 1", None, "g:b", None, at),
            Ok(())
        );
        assert_eq!(
            on_missing(
                OnMissing::CountAsGone,
                "account 1",
                Some("g:a"),
                "g:b",
                Some("g:b"),
                at
            ),
            Ok(())
        );
        let refused = on_missing(
            OnMissing::CountAsGone,
            "account 1",
            Some("g:a"),
            "g:b",
            Some("g:c"),
            at,
        )
        .unwrap_err();
        assert!(
            refused.contains("g:a")
                && refused.contains("keeps the finalizer")
                && refused.contains(&format!(
                    "kubectl annotate s3tenant t -n ns {CONFIRM_ANNOTATION}=g:b"
                )),
            "{refused}"
        );
    }

    #[test]
    fn a_recreate_on_the_recorded_backend_goes_ahead() {
        assert_eq!(before_recreate(Some("g:1"), "g:1", None), Recreate::Same);
    }

    #[test]
    fn a_recreate_on_another_backend_is_refused_unless_that_one_is_confirmed() {
        assert_eq!(
            before_recreate(Some("g:1"), "g:2", None),
            Recreate::Refused {
                recorded: "g:1".into(),
                live: "g:2".into()
            }
        );
        // A confirmation names one backend: it never lets a third one through.
        assert!(matches!(
            before_recreate(Some("g:1"), "g:3", Some("g:2")),
            Recreate::Refused { .. }
        ));
        assert_eq!(
            before_recreate(Some("g:1"), "g:2", Some(" g:2 ")),
            Recreate::Confirmed
        );
    }

    #[test]
    fn without_a_record_the_recreate_goes_ahead_as_before() {
        assert_eq!(before_recreate(None, "g:2", None), Recreate::Unrecorded);
    }

    #[test]
    fn a_found_resource_records_the_live_identity_only_when_none_is_recorded_or_confirmed() {
        assert_eq!(on_sight(None, "g:2", None), "g:2");
        assert_eq!(on_sight(Some("g:1"), "g:2", None), "g:1");
        assert_eq!(on_sight(Some("g:1"), "g:2", Some("g:3")), "g:1");
        assert_eq!(on_sight(Some("g:1"), "g:2", Some("g:2")), "g:2");
    }

    #[tokio::test]
    async fn the_identity_is_looked_up_once_and_failures_are_not_kept() {
        let cache = IdentityCache::default();
        let failed = cache
            .get(|| async { Err(changed_error("s3", "list_buckets", "down".into())) })
            .await;
        assert!(failed.is_err());
        assert_eq!(cache.known(), None);
        assert_eq!(
            cache.get(|| async { Ok("a".to_string()) }).await.unwrap(),
            "a"
        );
        assert_eq!(
            cache.get(|| async { Ok("b".to_string()) }).await.unwrap(),
            "a"
        );
        assert_eq!(cache.clone().known().as_deref(), Some("a"));
    }
}
