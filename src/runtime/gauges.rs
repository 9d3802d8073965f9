//! Gauges computed from a controller's cache at scrape time, such as `keeper_buckets{phase}`:
//! nothing to keep in sync when objects come and go, and deleted objects drop out by themselves.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use kube::runtime::reflector::Store;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGaugeVec, Opts};

use super::Uid;

type Classify<K> = Box<dyn Fn(&K) -> Option<String> + Send + Sync>;

/// Counts the cached objects per label value; objects classified as `None` are not counted.
/// `always` lists label values reported even at zero, so dashboards see every phase.
pub struct StoreGauge<K: kube::Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    gauge: IntGaugeVec,
    label: String,
    always: Vec<String>,
    classify: Classify<K>,
}

impl<K: kube::Resource<DynamicType = ()> + Clone + 'static> StoreGauge<K> {
    /// `fixed` are constant labels such as `kind="S3Bucket"`; `label` is the counted dimension
    /// (empty for a plain count).
    pub fn new(
        name: &str,
        help: &str,
        store: Store<K>,
        fixed: &[(&str, &str)],
        label: &str,
        always: &[&str],
        classify: impl Fn(&K) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        let names: Vec<&str> = if label.is_empty() {
            vec![]
        } else {
            vec![label]
        };
        // Fixed labels are constant labels, so that controllers can each register a gauge of the
        // same name (such as `keeper_deletion_blocked{kind}`, with the same help text): the
        // registry tells them apart by their constant label values and merges them at scrape.
        let opts = Opts::new(name, help).const_labels(
            fixed
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        StoreGauge {
            store,
            gauge: IntGaugeVec::new(opts, &names).expect("valid gauge"),
            label: label.to_string(),
            always: always.iter().map(|s| s.to_string()).collect(),
            classify: Box::new(classify),
        }
    }

    fn labels<'a>(&'a self, value: &'a str) -> Vec<&'a str> {
        if self.label.is_empty() {
            vec![]
        } else {
            vec![value]
        }
    }
}

impl<K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static> Collector
    for StoreGauge<K>
{
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut counts: BTreeMap<String, i64> =
            self.always.iter().map(|v| (v.clone(), 0)).collect();
        for obj in self.store.state() {
            if let Some(value) = (self.classify)(&obj) {
                *counts.entry(value).or_default() += 1;
            }
        }
        self.gauge.reset();
        for (value, count) in &counts {
            self.gauge
                .with_label_values(&self.labels(value))
                .set(*count);
        }
        self.gauge.collect()
    }
}

/// `keeper_deletion_blocked{kind}`: how many objects of `kind` wait on the user to be deleted.
/// Every controller registers one for its kind; name and help are defined once, here, because
/// the registry merges same-named gauges only when their help text is the same.
pub fn deletion_blocked<K>(
    kind: &str,
    store: Store<K>,
    blocked: impl Fn(&K) -> bool + Send + Sync + 'static,
) -> StoreGauge<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    StoreGauge::new(
        "keeper_deletion_blocked",
        "Resources whose deletion waits on the user (condition DeletionBlocked=True), by kind.",
        store,
        &[("kind", kind)],
        "",
        &[""],
        move |obj: &K| blocked(obj).then(String::new),
    )
}

/// What a controller's workers last started on, per object uid: the [`triggers::requested`] key
/// of the object as the reconcile saw it. An object whose key differs has a change (spec,
/// annotations, labels, finalizers, deletion) no worker has started on yet: it waits in the queue.
///
/// [`triggers::requested`]: crate::cluster::triggers::requested
#[derive(Clone, Default)]
pub struct Started(Arc<Mutex<HashMap<Uid, u64>>>);

impl Started {
    /// A worker starts on `obj`.
    pub fn record<K: kube::Resource>(&self, obj: &K) {
        if let Some(uid) = Uid::stored(obj) {
            let key = crate::cluster::triggers::requested(obj);
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(uid, key);
        }
    }

    /// Whether `obj` has a change no worker has started on.
    fn waits<K: kube::Resource>(&self, obj: &K) -> bool {
        let Some(uid) = Uid::stored(obj) else {
            return false;
        };
        let started = self.0.lock().unwrap_or_else(|e| e.into_inner());
        started.get(&uid) != Some(&crate::cluster::triggers::requested(obj))
    }

    /// Forgets `obj`, which keeper let go of (its finalizer removed, or being deleted without
    /// it), so that the record holds only objects keeper still works on.
    pub fn forget<K: kube::Resource>(&self, obj: &K) {
        if let Some(uid) = Uid::stored(obj) {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&uid);
        }
    }
}

/// `keeper_work_queue_depth{controller}`: objects with a change the controller's workers have not
/// started on yet (0 on a standby, which does not work its queue). It grows when changes come
/// faster than the workers (`runtime.concurrency`) take them.
pub fn queue_depth<K>(
    controller: &str,
    store: Store<K>,
    started: Started,
    leadership: crate::leader::Leadership,
) -> StoreGauge<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    StoreGauge::new(
        "keeper_work_queue_depth",
        "Objects with a change (spec, annotations, labels, finalizers, deletion) no worker of the controller has started on yet.",
        store,
        &[("controller", controller)],
        "",
        &[""],
        move |obj: &K| (leadership.is_leader() && started.waits(obj)).then(String::new),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    fn configmap(name: &str, phase: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm.data = Some([("phase".to_string(), phase.to_string())].into());
        cm
    }

    #[test]
    fn the_queue_depth_counts_changes_no_worker_started_on() {
        let with_uid = |name: &str, generation: i64| {
            let mut cm = configmap(name, "Ready");
            cm.metadata.uid = Some(format!("uid-{name}"));
            cm.metadata.generation = Some(generation);
            cm
        };
        let (reader, mut writer) = store::<ConfigMap>();
        for name in ["a", "b", "c"] {
            writer.apply_watcher_event(&Event::Apply(with_uid(name, 1)));
        }
        let started = Started::default();
        let depth = |started: &Started| {
            let registry = prometheus::Registry::new();
            let gauge = queue_depth(
                "test",
                reader.clone(),
                started.clone(),
                crate::leader::Leadership::always(),
            );
            registry.register(Box::new(gauge)).unwrap();
            prometheus::TextEncoder::new()
                .encode_to_string(&registry.gather())
                .unwrap()
        };
        // Nothing started yet: all three wait.
        assert!(depth(&started).contains(r#"keeper_work_queue_depth{controller="test"} 3"#));
        started.record(&with_uid("a", 1));
        started.record(&with_uid("b", 1));
        assert!(depth(&started).contains(r#"keeper_work_queue_depth{controller="test"} 1"#));
        // A new change of `a` waits again until a worker starts on it.
        writer.apply_watcher_event(&Event::Apply(with_uid("a", 2)));
        assert!(depth(&started).contains(r#"keeper_work_queue_depth{controller="test"} 2"#));
        started.record(&with_uid("a", 2));
        started.record(&with_uid("c", 1));
        assert!(depth(&started).contains(r#"keeper_work_queue_depth{controller="test"} 0"#));
        started.forget(&with_uid("c", 1));
        assert_eq!(started.0.lock().unwrap().len(), 2, "forgotten");
    }

    #[test]
    fn counts_cached_objects_per_label_and_reports_zeros() {
        let (reader, mut writer) = store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Apply(configmap("a", "Ready")));
        writer.apply_watcher_event(&Event::Apply(configmap("b", "Ready")));
        writer.apply_watcher_event(&Event::Apply(configmap("c", "Failed")));
        let gauge = StoreGauge::new(
            "keeper_things",
            "Things by phase.",
            reader,
            &[("kind", "Thing")],
            "phase",
            &["Pending", "Ready", "Failed"],
            |cm: &ConfigMap| cm.data.as_ref()?.get("phase").cloned(),
        );
        let registry = prometheus::Registry::new();
        registry.register(Box::new(gauge)).unwrap();
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        assert!(
            text.contains(r#"keeper_things{kind="Thing",phase="Ready"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"keeper_things{kind="Thing",phase="Failed"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"keeper_things{kind="Thing",phase="Pending"} 0"#),
            "{text}"
        );
    }

    #[test]
    fn gauges_of_one_name_with_different_fixed_labels_share_a_registry() {
        let (reader, mut writer) = store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Apply(configmap("a", "Blocked")));
        let registry = prometheus::Registry::new();
        for kind in ["A", "B"] {
            let gauge = StoreGauge::new(
                "keeper_blocked",
                "Blocked things.",
                reader.clone(),
                &[("kind", kind)],
                "",
                &[""],
                move |cm: &ConfigMap| {
                    (kind == "A" && cm.data.as_ref()?.get("phase")? == "Blocked").then(String::new)
                },
            );
            registry.register(Box::new(gauge)).unwrap();
        }
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        assert!(text.contains(r#"keeper_blocked{kind="A"} 1"#), "{text}");
        assert!(text.contains(r#"keeper_blocked{kind="B"} 0"#), "{text}");
    }

    #[test]
    fn every_kind_can_register_its_deletion_blocked_gauge_in_one_registry() {
        let registry = prometheus::Registry::new();
        for kind in ["S3Tenant", "S3Bucket", "CloudDatabase"] {
            let (reader, mut writer) = store::<ConfigMap>();
            writer.apply_watcher_event(&Event::Apply(configmap("a", "Blocked")));
            let gauge = deletion_blocked(kind, reader, |cm: &ConfigMap| {
                cm.data
                    .as_ref()
                    .is_some_and(|d| d.get("phase").is_some_and(|p| p == "Blocked"))
            });
            registry.register(Box::new(gauge)).unwrap();
        }
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        for kind in ["S3Tenant", "S3Bucket", "CloudDatabase"] {
            assert!(
                text.contains(&format!("keeper_deletion_blocked{{kind=\"{kind}\"}} 1")),
                "{text}"
            );
        }
    }
}
