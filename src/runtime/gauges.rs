//! Gauges computed from a controller's cache at scrape time, such as `keeper_buckets{phase}`:
//! nothing to keep in sync when objects come and go, and deleted objects drop out by themselves.

use std::collections::BTreeMap;

use kube::runtime::reflector::Store;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGaugeVec, Opts};

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
}
