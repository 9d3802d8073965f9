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
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::informer::{Change, Watched};

/// The objects of `changes` (an informer's) whose `key` changed since they were last seen, the
/// deleted ones, and those seen for the first time.
pub fn changed<K: Watched>(
    changes: impl Stream<Item = Change<K>> + Send + 'static,
    key: fn(&K) -> u64,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
    passed(changes, key, Sightings::Pass)
}

/// Like [`changed`], but an object seen for the first time does not pass. For what keeper
/// writes itself (its Secrets) a first sighting is keeper's own create, or the initial list of
/// a start that reconciles every owner anyway: only a later change or a deletion, someone
/// else's, asks for work.
pub fn edited<K: Watched>(
    changes: impl Stream<Item = Change<K>> + Send + 'static,
    key: fn(&K) -> u64,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
    passed(changes, key, Sightings::Record)
}

/// The cached objects `reads` picks: those a change of another kind maps to (the buckets of a
/// tenant, the tenants of a namespace).
pub fn cached_where<K: Watched>(store: &Store<K>, reads: impl Fn(&K) -> bool) -> Vec<ObjectRef<K>> {
    store
        .state()
        .iter()
        .filter(|obj| reads(obj))
        .map(|obj| ObjectRef::from_obj(obj.as_ref()))
        .collect()
}

/// Whether an object seen for the first time passes.
#[derive(Clone, Copy, PartialEq)]
enum Sightings {
    Pass,
    Record,
}

fn passed<K: Watched>(
    changes: impl Stream<Item = Change<K>> + Send + 'static,
    key: fn(&K) -> u64,
    first: Sightings,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
    // Keyed by a hash of the object's namespace and name, not by its reference (name,
    // namespace, uid and resourceVersion: about 200 bytes with 10,000 objects each, and four
    // strings copied per event). Two objects sharing a hash can only make a trigger pass that
    // would not have (each overwrites the other's key), never hold one back unless their keys
    // are also equal.
    let mut seen: HashMap<u64, u64> = HashMap::new();
    changes
        .map(move |change| match change {
            Change::Applied(obj) => {
                let value = key(&obj);
                match seen.insert(identity(&*obj), value) {
                    None => first == Sightings::Pass,
                    Some(previous) => previous != value,
                }
                .then(|| Ok(K::clone(&obj)))
            }
            Change::Deleted(obj) => {
                seen.remove(&identity(&*obj));
                Some(Ok(K::clone(&obj)))
            }
        })
        .filter_map(future::ready)
}

/// Which object `obj` is (its namespace and name), hashed.
fn identity<K: Resource>(obj: &K) -> u64 {
    let meta = obj.meta();
    key_of((&meta.namespace, &meta.name))
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

    /// What a watch of objects a and b hands a subscriber, in order.
    fn changes() -> Vec<Change<ConfigMap>> {
        use Change::*;
        vec![
            // First sightings (for keeper's Secrets: its own create, or a start's list).
            Applied(map("a", "x", "1")),
            Applied(map("b", "x", "1")),
            // What the key does not read changes (a status write): filtered.
            Applied(map("a", "x", "2")),
            // A relist hands every object again: unchanged keys are filtered.
            Applied(map("b", "x", "2")),
            // The key changes (someone's edit): passed.
            Applied(map("a", "xx", "3")),
            // Deleted without a change of the key: still passed.
            Deleted(map("b", "x", "4")),
            // Seen again after its deletion (a new object of the same name, or keeper writing
            // its Secret back): a first sighting.
            Applied(map("b", "x", "5")),
        ]
    }

    async fn through(passed: impl Stream<Item = Result<ConfigMap, watcher::Error>>) -> Vec<String> {
        passed
            .map(|r| {
                let m = r.unwrap();
                format!("{}={}", m.metadata.name.unwrap(), m.data.unwrap()["other"])
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn changes_of_the_key_and_deletions_pass_and_first_sightings_only_where_asked() {
        let changed = through(changed(stream::iter(changes()), watched)).await;
        assert_eq!(changed, ["a=1", "b=1", "a=3", "b=4", "b=5"]);
        let edited = through(edited(stream::iter(changes()), watched)).await;
        assert_eq!(edited, ["a=3", "b=4"]);
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
