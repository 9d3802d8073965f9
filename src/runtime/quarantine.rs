//! Objects that do not decode as their kind (a field of the wrong type, kept by a looser CRD
//! version or written around admission): the informer holds them out of its cache so that the
//! rest of the kind goes on ([`crate::cluster::informer`]); this reports each one on the object
//! itself, so its owner sees what to fix: the failed phase (the deleting phase when it is being
//! deleted: keeper cannot clean up what it cannot read), `Ready=False` with reason
//! `InvalidObject` and the path of the field, and one Warning event.
//!
//! Only the leader reports, once per object, generation and error in a process: keeper's own
//! status write changes the object without fixing it, and must not report again.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use kube::core::error_boundary::InvalidObject;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{Keeper, KeeperStatus, Next, Note, Outcome};
use crate::cluster::informer::Informer;
use crate::cluster::{Kube, Target};
use crate::leader::Leadership;

/// The condition and event reason of an object keeper cannot read.
pub const INVALID_OBJECT: &str = "InvalidObject";

/// What is wrong with `raw` as a `K`, with the path to the field
/// (`spec.versioning: invalid type: ...`); `None` when it decodes (it was fixed meanwhile).
fn locate<K: DeserializeOwned>(raw: Value) -> Option<String> {
    serde_path_to_error::deserialize::<_, K>(raw)
        .err()
        .map(|e| format!("{}: {}", e.path(), e.inner()))
}

/// The status patch and events that report `invalid` on itself. `detail` says which field is
/// wrong when keeper could tell; else the decoder's own message stands.
fn report<K: Keeper>(invalid: &InvalidObject, detail: Option<String>) -> (Value, Vec<Note>) {
    let meta = &invalid.metadata;
    let deleting = meta.deletion_timestamp.is_some();
    let kind = K::kind(&());
    let wrong = detail.unwrap_or_else(|| invalid.error.clone());
    let consequence = if deleting {
        "its deletion waits (keeper cannot clean up what it cannot read) until the object is fixed"
    } else {
        "keeper leaves the object and what it made as they are until the object is fixed"
    };
    let message = format!("keeper cannot read this {kind}: {wrong}; {consequence}");
    let mut outcome = Outcome::new(K::Status::default(), Next::AwaitChange);
    outcome.status.set_observed_generation(meta.generation);
    outcome.fail(INVALID_OBJECT, message, meta.generation, deleting);
    let status = serde_json::to_value(&outcome.status).expect("a status serializes");
    // Only what the report is about: the rest of the status (a drain's progress, an account id)
    // is not known here and stays as it is.
    let patch = json!({"status": {
        "phase": status["phase"],
        "observedGeneration": status["observedGeneration"],
        "conditions": status["conditions"],
    }});
    (patch, outcome.notes)
}

/// Reports the objects of `K` that `informer` holds apart, while this process leads; on taking
/// over it reports those held then.
pub async fn report_invalid<K: Keeper>(
    kube: Arc<dyn Kube>,
    informer: &Informer<K>,
    leadership: Leadership,
) {
    let mut reported = HashSet::new();
    let mut acquired = Box::pin(leadership.acquired());
    while acquired.next().await.is_some() {
        let mut invalid = Box::pin(informer.invalid());
        while let Some(obj) = invalid.next().await {
            if !leadership.is_leader() {
                break;
            }
            let meta = &obj.metadata;
            let key = (meta.uid.clone(), meta.generation, obj.error.clone());
            if reported.contains(&key) {
                continue;
            }
            if report_one::<K>(kube.as_ref(), &obj).await {
                reported.insert(key);
            }
        }
    }
}

/// Reports one object; whether it is done (written, or gone).
async fn report_one<K: Keeper>(kube: &dyn Kube, invalid: &InvalidObject) -> bool {
    let target = Target::named::<K>(&invalid.metadata);
    tracing::warn!(kind = %K::kind(&()), namespace = %target.namespace, name = %target.name,
        error = %invalid.error, "object does not decode; left alone until it is fixed");
    let detail = match kube.raw_object(&target).await {
        Ok(Some(raw)) => match locate::<K>(raw) {
            Some(detail) => Some(detail),
            // It decodes now: the informer hears of the fix and releases it.
            None => return true,
        },
        Ok(None) => return true,
        Err(e) => {
            tracing::debug!(error = %e, "could not read the raw object; reporting without a path");
            None
        }
    };
    let (patch, notes) = report::<K>(invalid, detail);
    match kube.patch_status(&target, patch).await {
        Ok(()) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return true,
        Err(e) => {
            // Tried again when the object changes, or at the next relist or takeover.
            tracing::warn!(error = %e, "could not report an undecodable object");
            return false;
        }
    }
    for note in &notes {
        kube.publish(&target, note).await;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BucketPhase, S3Bucket};
    use crate::cluster::fake::{Call, FakeKube};
    use crate::runtime::conditions;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use kube::api::ObjectMeta;

    fn bad_bucket(deleting: bool) -> (InvalidObject, Value) {
        let raw = json!({
            "apiVersion": "keeper.dev/v1alpha1",
            "kind": "S3Bucket",
            "metadata": {"name": "b", "namespace": "ns", "uid": "u1", "generation": 3},
            "spec": {"tenantRef": {"name": "t"}, "bucketName": "bucket-b", "versioning": "yes"},
        });
        let mut metadata: ObjectMeta = serde_json::from_value(raw["metadata"].clone()).unwrap();
        if deleting {
            metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        }
        let error = serde_json::from_value::<kube::core::DeserializeGuard<S3Bucket>>(raw.clone())
            .unwrap()
            .0
            .unwrap_err()
            .error;
        (InvalidObject { error, metadata }, raw)
    }

    #[test]
    fn the_path_of_the_wrong_field_is_named() {
        let (_, raw) = bad_bucket(false);
        let detail = locate::<S3Bucket>(raw.clone()).unwrap();
        assert!(
            detail.starts_with("spec.versioning: invalid type"),
            "{detail}"
        );
        let mut fixed = raw;
        fixed["spec"]["versioning"] = json!(true);
        assert_eq!(locate::<S3Bucket>(fixed), None);
    }

    #[test]
    fn an_undecodable_object_is_failed_with_the_reason_and_one_warning() {
        let (invalid, _) = bad_bucket(false);
        let (patch, notes) = report::<S3Bucket>(&invalid, Some("spec.versioning: wrong".into()));
        let status: crate::api::S3BucketStatus =
            serde_json::from_value(patch["status"].clone()).unwrap();
        assert_eq!(status.phase, Some(BucketPhase::Failed));
        assert_eq!(status.observed_generation, Some(3));
        let ready = &status.conditions[0];
        assert_eq!(ready.type_, conditions::READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", INVALID_OBJECT)
        );
        assert!(ready.message.contains("spec.versioning: wrong"));
        assert_eq!(ready.observed_generation, Some(3));
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].reason, INVALID_OBJECT);
        assert_eq!(
            patch["status"].as_object().unwrap().len(),
            3,
            "only phase, generation and conditions: {patch}"
        );
    }

    #[test]
    fn an_undecodable_object_being_deleted_says_its_deletion_waits() {
        let (invalid, _) = bad_bucket(true);
        let (patch, notes) = report::<S3Bucket>(&invalid, None);
        assert_eq!(patch["status"]["phase"], "Deleting");
        assert!(
            notes[0].message.contains("deletion waits"),
            "{}",
            notes[0].message
        );
        assert!(
            notes[0].message.contains(&invalid.error),
            "the decoder's message stands"
        );
    }

    /// A fake API that stores `raw` as bucket `ns/b`.
    fn storing(raw: Value) -> FakeKube {
        let kube = FakeKube::default();
        kube.raw_objects
            .lock()
            .unwrap()
            .insert(("ns".into(), "b".into()), raw);
        kube
    }

    #[tokio::test]
    async fn reporting_writes_the_status_and_an_event_and_nothing_for_a_fixed_object() {
        let (invalid, raw) = bad_bucket(false);
        let kube = storing(raw.clone());
        assert!(report_one::<S3Bucket>(&kube, &invalid).await);
        let calls = kube.calls.lock().unwrap().clone();
        assert!(
            matches!(&calls[..], [Call::PatchStatus { .. }, Call::Publish { .. }]),
            "{calls:?}"
        );
        let Call::PatchStatus { patch, .. } = &calls[0] else {
            unreachable!()
        };
        let message = patch["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap();
        assert!(message.contains("spec.versioning"), "{message}");

        // Fixed before keeper read it: nothing to report.
        let mut fixed = raw;
        fixed["spec"]["versioning"] = json!(false);
        let kube = storing(fixed);
        assert!(report_one::<S3Bucket>(&kube, &invalid).await);
        assert!(kube.calls.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_failed_report_is_tried_again() {
        let (invalid, raw) = bad_bucket(false);
        let kube = storing(raw);
        *kube.fail_next_write.lock().unwrap() = Some(500);
        assert!(!report_one::<S3Bucket>(&kube, &invalid).await);
        assert!(report_one::<S3Bucket>(&kube, &invalid).await);
    }
}
