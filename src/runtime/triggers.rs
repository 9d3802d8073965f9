//! Which changes of a watched kind trigger a reconcile of the objects it maps to.
//!
//! A controller that watches another kind (the tenant controller watches S3Buckets) would by
//! default reconcile on every change of every watched object, status writes included: with
//! hundreds of buckets per tenant, each bucket's progress re-reconciles its tenant many times
//! over. [`changed`] passes on a watched object only when what the controller reads of it (its
//! `key`) differs from the last time it was seen, and always when it is deleted or first seen.
//! kube's `predicate_filter` does the first part but drops a deletion whose key did not change,
//! which is exactly the event a tenant waiting for its last bucket to go needs.

use std::collections::{HashMap, HashSet};

use futures::{Stream, StreamExt, future};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

/// The objects of `events` (a watcher stream) whose `key` changed since they were last seen,
/// the deleted ones, and those seen for the first time; errors pass through.
pub fn changed<K, S>(
    events: S,
    key: fn(&K) -> u64,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let mut seen: HashMap<ObjectRef<K>, u64> = HashMap::new();
    // The objects of a relist in progress: what it did not list is gone and is forgotten.
    let mut relisted: Option<HashSet<ObjectRef<K>>> = None;
    events
        .map(move |event| match event {
            Ok(watcher::Event::Apply(obj)) | Ok(watcher::Event::InitApply(obj)) => {
                let at = ObjectRef::from_obj(&obj);
                if let Some(listed) = relisted.as_mut() {
                    listed.insert(at.clone());
                }
                let value = key(&obj);
                let previous = seen.insert(at, value);
                (previous != Some(value)).then_some(Ok(obj))
            }
            Ok(watcher::Event::Delete(obj)) => {
                seen.remove(&ObjectRef::from_obj(&obj));
                Some(Ok(obj))
            }
            Ok(watcher::Event::Init) => {
                relisted = Some(HashSet::new());
                None
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(listed) = relisted.take() {
                    seen.retain(|at, _| listed.contains(at));
                }
                None
            }
            Err(e) => Some(Err(e)),
        })
        .filter_map(future::ready)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn map(name: &str, watched: &str, other: &str) -> ConfigMap {
        ConfigMap {
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
        }
    }

    fn watched(m: &ConfigMap) -> u64 {
        m.data.as_ref().unwrap()["watched"].len() as u64
    }

    async fn passed(events: Vec<watcher::Event<ConfigMap>>) -> Vec<String> {
        changed(stream::iter(events.into_iter().map(Ok)), watched)
            .map(|r| {
                let m = r.unwrap();
                format!("{}={}", m.metadata.name.unwrap(), m.data.unwrap()["other"])
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn only_changes_of_the_key_deletions_and_first_sightings_pass() {
        use watcher::Event::*;
        let got = passed(vec![
            Init,
            InitApply(map("a", "x", "1")),
            InitApply(map("b", "x", "1")),
            InitDone,
            // What the key does not read changes (a status write): filtered.
            Apply(map("a", "x", "2")),
            // The key changes: passed.
            Apply(map("a", "xx", "3")),
            // Deleted without a change of the key: still passed.
            Delete(map("b", "x", "4")),
            // Seen again after its deletion (a new object of the same name): passed.
            Apply(map("b", "x", "5")),
        ])
        .await;
        assert_eq!(got, ["a=1", "b=1", "a=3", "b=4", "b=5"]);
    }

    #[tokio::test]
    async fn a_relist_passes_only_what_changed_meanwhile() {
        use watcher::Event::*;
        let got = passed(vec![
            InitApply(map("a", "x", "1")),
            InitApply(map("b", "x", "1")),
            InitDone,
            // The watch was cut and the watcher lists again.
            Init,
            InitApply(map("a", "x", "2")),
            InitApply(map("b", "yy", "2")),
            InitDone,
            // c was deleted while the watch was cut: forgotten, so when one of that name comes
            // back it is new.
            Init,
            InitApply(map("c", "x", "1")),
            InitDone,
            Init,
            InitDone,
            Init,
            InitApply(map("c", "x", "3")),
            InitDone,
        ])
        .await;
        assert_eq!(got, ["a=1", "b=1", "b=2", "c=1", "c=3"]);
    }

    #[tokio::test]
    async fn errors_pass_through() {
        let events = stream::iter(vec![Err(watcher::Error::NoResourceVersion)]);
        let got: Vec<_> = changed::<ConfigMap, _>(events, watched).collect().await;
        assert!(matches!(got[..], [Err(watcher::Error::NoResourceVersion)]));
    }
}
