//! Resource definitions: the built-in kinds and those served from CRDs.

use serde_json::{Value, json};
use std::sync::Arc;

/// How stored objects are presented for one resource endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Stored as served.
    Plain,
    /// events.k8s.io/v1 view of core/v1 events.
    EventsV1,
}

/// A printer column (CRD `additionalPrinterColumns` or a built-in column).
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// One served resource (group, version, plural).
#[derive(Debug, Clone)]
pub struct ResDef {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status_sub: bool,
    /// Key of the object store bucket (several views can share one).
    pub store_key: String,
    pub view: View,
    /// The openAPIV3Schema of the served version (CRDs only).
    pub schema: Option<Value>,
    pub columns: Vec<Column>,
    pub crd: bool,
    /// Field selector labels accepted besides metadata.name / metadata.namespace.
    pub field_labels: Vec<(&'static str, &'static str)>,
}

impl ResDef {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
    pub fn group_version(&self) -> String {
        self.api_version()
    }
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
    pub fn verbs(&self) -> Vec<&'static str> {
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
    /// Discovery entry (APIResource).
    pub fn discovery(&self) -> Vec<Value> {
        let mut main = json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": self.verbs(),
        });
        if !self.short_names.is_empty() {
            main["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            main["categories"] = json!(self.categories);
        }
        let mut out = vec![main];
        if self.status_sub {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        out
    }
}

fn col(name: &str, type_: &str, path: &str, priority: i64) -> Column {
    Column {
        name: name.into(),
        type_: type_.into(),
        format: String::new(),
        description: String::new(),
        priority,
        json_path: path.into(),
    }
}

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
    categories: &[&str],
    status_sub: bool,
) -> ResDef {
    ResDef {
        group: group.into(),
        version: version.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: categories.iter().map(|s| s.to_string()).collect(),
        status_sub,
        store_key: format!("{group}/{plural}"),
        view: View::Plain,
        schema: None,
        columns: vec![],
        crd: false,
        field_labels: vec![],
    }
}

pub const CRD_KEY: &str = "apiextensions.k8s.io/customresourcedefinitions";
pub const NS_KEY: &str = "/namespaces";
pub const VWC_KEY: &str = "admissionregistration.k8s.io/validatingwebhookconfigurations";
pub const EVENTS_KEY: &str = "/events";

const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject.kind", "involvedObject.kind"),
    ("involvedObject.namespace", "involvedObject.namespace"),
    ("involvedObject.name", "involvedObject.name"),
    ("involvedObject.uid", "involvedObject.uid"),
    ("involvedObject.apiVersion", "involvedObject.apiVersion"),
    (
        "involvedObject.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("involvedObject.fieldPath", "involvedObject.fieldPath"),
    ("reason", "reason"),
    ("reportingComponent", "reportingComponent"),
    ("source", "source.component"),
    ("type", "type"),
];

/// The built-in resources this emulator serves.
pub fn builtins() -> Vec<Arc<ResDef>> {
    let mut v = Vec::new();
    let mut ns = builtin(
        "",
        "v1",
        "namespaces",
        "Namespace",
        false,
        &["ns"],
        &[],
        true,
    );
    ns.columns = vec![col("Status", "string", ".status.phase", 0)];
    ns.field_labels = vec![("status.phase", "status.phase")];
    v.push(ns);
    let mut secret = builtin("", "v1", "secrets", "Secret", true, &[], &[], false);
    secret.columns = vec![
        col("Type", "string", ".type", 0),
        col("Data", "integer", "#datacount", 0),
    ];
    secret.field_labels = vec![("type", "type")];
    v.push(secret);
    let mut cm = builtin(
        "",
        "v1",
        "configmaps",
        "ConfigMap",
        true,
        &["cm"],
        &[],
        false,
    );
    cm.columns = vec![col("Data", "integer", "#datacount", 0)];
    v.push(cm);
    let mut svc = builtin(
        "",
        "v1",
        "services",
        "Service",
        true,
        &["svc"],
        &["all"],
        true,
    );
    svc.columns = vec![
        col("Type", "string", ".spec.type", 0),
        col("Cluster-IP", "string", ".spec.clusterIP", 0),
    ];
    v.push(svc);
    v.push(builtin(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        &["sa"],
        &[],
        false,
    ));
    let mut ev = builtin("", "v1", "events", "Event", true, &["ev"], &[], false);
    ev.columns = vec![
        col("Last Seen", "string", "#lastseen", 0),
        col("Type", "string", ".type", 0),
        col("Reason", "string", ".reason", 0),
        col("Object", "string", "#involved", 0),
        col("Message", "string", ".message", 0),
    ];
    ev.field_labels = EVENT_FIELDS.to_vec();
    v.push(ev);
    let mut ev1 = builtin(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        true,
        &["ev"],
        &[],
        false,
    );
    ev1.store_key = EVENTS_KEY.into();
    ev1.view = View::EventsV1;
    ev1.field_labels = EVENT_FIELDS.to_vec();
    v.push(ev1);
    let mut lease = builtin(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        &[],
        &[],
        false,
    );
    lease.columns = vec![col("Holder", "string", ".spec.holderIdentity", 0)];
    v.push(lease);
    let mut dep = builtin(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        true,
        &["deploy"],
        &["all"],
        true,
    );
    dep.columns = vec![
        col("Ready", "string", "#deployready", 0),
        col("Up-to-date", "integer", ".status.updatedReplicas", 0),
        col("Available", "integer", ".status.availableReplicas", 0),
    ];
    v.push(dep);
    v.push(builtin(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        &["pdb"],
        &[],
        false,
    ));
    v.push(builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        true,
        &[],
        &[],
        false,
    ));
    v.push(builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        &[],
        &[],
        false,
    ));
    v.push(builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        &[],
        &[],
        false,
    ));
    v.push(builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[],
        &[],
        false,
    ));
    let mut crd = builtin(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        &["api-extensions"],
        true,
    );
    crd.columns = vec![col("Created At", "date", "#created", 0)];
    v.push(crd);
    v.push(builtin(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        false,
        &[],
        &["api-extensions"],
        false,
    ));
    v.into_iter().map(Arc::new).collect()
}

/// Resource definitions (one per served version) for a CRD object.
pub fn from_crd(crd: &Value) -> Vec<Arc<ResDef>> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default().to_string();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default().to_string();
    let kind = names["kind"].as_str().unwrap_or_default().to_string();
    let singular = names["singular"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let mut out = Vec::new();
    for ver in spec["versions"].as_array().cloned().unwrap_or_default() {
        if ver["served"].as_bool() == Some(false) {
            continue;
        }
        let columns = ver["additionalPrinterColumns"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| Column {
                        name: c["name"].as_str().unwrap_or_default().into(),
                        type_: c["type"].as_str().unwrap_or("string").into(),
                        format: c["format"].as_str().unwrap_or_default().into(),
                        description: c["description"].as_str().unwrap_or_default().into(),
                        priority: c["priority"].as_i64().unwrap_or(0),
                        json_path: c["jsonPath"].as_str().unwrap_or_default().into(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(Arc::new(ResDef {
            group: group.clone(),
            version: ver["name"].as_str().unwrap_or_default().into(),
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            namespaced,
            short_names: strs(&names["shortNames"]),
            categories: strs(&names["categories"]),
            status_sub: ver["subresources"]["status"].is_object(),
            store_key: format!("{group}/{plural}"),
            view: View::Plain,
            schema: Some(ver["schema"]["openAPIV3Schema"].clone()),
            columns,
            crd: true,
            field_labels: vec![],
        }));
    }
    out
}
