//! Which changes of a watched kind trigger a reconcile of the objects it maps to.
//!
//! A controller that watches another kind (the tenant controller watches S3Buckets) would by
//! default reconcile on every change of every watched object, status writes included: with
//! hundreds of buckets per tenant, each bucket's progress re-reconciles its tenant many times
//! over. [`changed`] passes on a watched object only when what the controller reads of it (its
//! `key`) differs from the last time it was seen, and always when it is deleted or first seen.
//! kube's `predicate_filter` does the first part but drops a deletion whose key did not change,
//! which is exactly the event a tenant waiting for its last bucket to go needs.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use futures::{Stream, StreamExt, future};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use super::informer::{Change, Watched};

/// The objects of `changes` (an informer's) whose `key` changed since they were last seen, the
/// deleted ones, and those seen for the first time.
pub fn changed<K: Watched>(
    changes: impl Stream<Item = Change<K>> + Send + 'static,
    key: fn(&K) -> u64,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
    let mut seen: HashMap<ObjectRef<K>, u64> = HashMap::new();
    changes
        .map(move |change| match change {
            Change::Applied(obj) => {
                let value = key(&obj);
                let previous = seen.insert(ObjectRef::from_obj(&*obj), value);
                (previous != Some(value)).then(|| Ok(K::clone(&obj)))
            }
            Change::Deleted(obj) => {
                seen.remove(&ObjectRef::from_obj(&*obj));
                Some(Ok(K::clone(&obj)))
            }
        })
        .filter_map(future::ready)
}

/// What asks a controller for work on its own object: the spec (its generation), annotations
/// (requests such as a drain), labels, finalizers and the deletion. Status is not in it: keeper
/// writes it, and a reconcile triggered by its own status write would only observe the backend
/// again to find what it just reported.
pub fn requested<K: Resource>(obj: &K) -> u64 {
    let meta = obj.meta();
    key_of((
        &meta.uid,
        meta.generation,
        meta.deletion_timestamp.is_some(),
        &meta.finalizers,
        &meta.annotations,
        &meta.labels,
    ))
}

/// A [`changed`] key: what a controller reads of a watched object, hashed.
pub fn key_of(read: impl Hash) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    read.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use futures::stream;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn map(name: &str, watched: &str, other: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            data: Some(
                [("watched", watched), ("other", other)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ConfigMap::default()
        })
    }

    fn watched(m: &ConfigMap) -> u64 {
        m.data.as_ref().unwrap()["watched"].len() as u64
    }

    async fn passed(changes: Vec<Change<ConfigMap>>) -> Vec<String> {
        changed(stream::iter(changes), watched)
            .map(|r| {
                let m = r.unwrap();
                format!("{}={}", m.metadata.name.unwrap(), m.data.unwrap()["other"])
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn only_changes_of_the_key_deletions_and_first_sightings_pass() {
        use Change::*;
        let got = passed(vec![
            Applied(map("a", "x", "1")),
            Applied(map("b", "x", "1")),
            // What the key does not read changes (a status write): filtered.
            Applied(map("a", "x", "2")),
            // A relist hands every object again: unchanged keys are filtered.
            Applied(map("b", "x", "2")),
            // The key changes: passed.
            Applied(map("a", "xx", "3")),
            // Deleted without a change of the key: still passed.
            Deleted(map("b", "x", "4")),
            // Seen again after its deletion (a new object of the same name): passed.
            Applied(map("b", "x", "5")),
        ])
        .await;
        assert_eq!(got, ["a=1", "b=1", "a=3", "b=4", "b=5"]);
    }

    #[test]
    fn status_writes_ask_for_no_work_while_spec_annotations_and_deletion_do() {
        use crate::api::{S3Bucket, S3BucketStatus};
        let mut bucket = S3Bucket::new(
            "b",
            serde_json::from_value(serde_json::json!({"tenantRef": {"name": "t"}})).unwrap(),
        );
        bucket.metadata.generation = Some(1);
        let before = requested(&bucket);
        let mut reported = bucket.clone();
        reported.status = Some(S3BucketStatus {
            object_count: Some(3),
            ..Default::default()
        });
        reported.metadata.resource_version = Some("7".into());
        assert_eq!(requested(&reported), before);
        let mut edited = bucket.clone();
        edited.metadata.generation = Some(2);
        let mut annotated = bucket.clone();
        annotated.metadata.annotations = Some([("keeper.dev/drain".into(), "1".into())].into());
        let mut finalized = bucket.clone();
        finalized.metadata.finalizers = Some(vec!["keeper.dev/bucket-cleanup".into()]);
        let mut deleted = bucket.clone();
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        for changed in [edited, annotated, finalized, deleted] {
            assert_ne!(requested(&changed), before, "{changed:?}");
        }
    }
}
