//! Which namespaces may use a provider (audit F6, issue #11): a provider's `allowedNamespaces`
//! lists namespaces by name and/or admits them by a label selector; without it every namespace
//! may. The decision is a pure function of the restriction and the namespace's labels, so the
//! tenant controller asks it before any backend call and unit tests cover it without a cluster.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use serde::Deserialize;

/// Which namespaces may use a provider (its `allowedNamespaces` in the configuration): those
/// listed in `names`, and those whose labels match `selector` (a Kubernetes label selector). A
/// provider without `allowedNamespaces` serves every namespace.
#[derive(Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllowedNamespaces {
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub selector: Option<LabelSelector>,
}

/// A provider's `allowedNamespaces`, checked once at start (a bad selector operator stops keeper
/// with the field named, instead of denying every tenant later).
#[derive(Debug, Clone, PartialEq)]
pub struct Restriction {
    names: Vec<String>,
    selector: Option<Selector>,
    /// The selector as configured, for messages (`team=a,tier in (gold)`).
    selector_text: Option<String>,
}

/// Whether a namespace may use a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    Allowed,
    /// The message says which provider, which namespace, and what would admit it.
    Denied(String),
}

impl Restriction {
    pub fn new(allowed: &AllowedNamespaces) -> Result<Self, String> {
        if allowed.names.is_empty() && allowed.selector.is_none() {
            // An empty restriction would lock every tenant out; say so at start instead.
            return Err("give `names`, `selector` or both (leave allowedNamespaces out to allow every namespace)".to_string());
        }
        let selector = allowed
            .selector
            .clone()
            .map(Selector::try_from)
            .transpose()
            .map_err(|e| format!("selector: {e}"))?;
        Ok(Restriction {
            names: allowed.names.clone(),
            selector_text: selector.as_ref().map(ToString::to_string),
            selector,
        })
    }

    /// Whether the decision needs the namespace's labels (only with a selector).
    pub fn needs_labels(&self) -> bool {
        self.selector.is_some()
    }

    /// Whether `namespace`, whose labels are `labels` (`None`: unknown, such as a namespace that
    /// does not exist; a selector never admits it), is admitted.
    pub fn admits(&self, namespace: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
        self.names.iter().any(|n| n == namespace)
            || matches!((&self.selector, labels), (Some(selector), Some(labels)) if selector.matches(labels))
    }

    /// What it admits, for messages: `the namespaces a, b and namespaces labelled team=a`.
    pub fn describe(&self) -> String {
        let mut admits = Vec::new();
        if !self.names.is_empty() {
            admits.push(format!("the namespaces {}", self.names.join(", ")));
        }
        if let Some(text) = &self.selector_text {
            admits.push(if text.is_empty() {
                "every existing namespace".to_string()
            } else {
                format!("namespaces labelled {text}")
            });
        }
        admits.join(" and ")
    }

    /// The decision for a tenant of `provider` in `namespace`, whose labels are `labels`.
    pub fn access(
        &self,
        provider: &str,
        namespace: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Access {
        if self.admits(namespace, labels) {
            return Access::Allowed;
        }
        Access::Denied(format!(
            "provider {provider:?} may not be used from namespace {namespace:?}: keeper's \
             configuration allows it only for {}; nothing was created or changed on the backend. \
             Ask the platform team to allow this namespace, or use another provider",
            self.describe()
        ))
    }
}

/// The decision for `namespace` under a provider's optional restriction (none: allowed).
pub fn access(
    provider: &str,
    allowed: Option<&AllowedNamespaces>,
    namespace: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> Access {
    match allowed.map(Restriction::new) {
        None => Access::Allowed,
        Some(Ok(restriction)) => restriction.access(provider, namespace, labels),
        // Configuration validation refuses this at start; never allow on a broken restriction.
        Some(Err(e)) => Access::Denied(format!(
            "provider {provider:?} has an invalid allowedNamespaces: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn by_label(key: &str, value: &str) -> AllowedNamespaces {
        AllowedNamespaces {
            names: Vec::new(),
            selector: Some(LabelSelector {
                match_labels: Some(labels(&[(key, value)])),
                match_expressions: None,
            }),
        }
    }

    #[test]
    fn without_a_restriction_every_namespace_is_allowed() {
        assert_eq!(access("grid", None, "anything", None), Access::Allowed);
    }

    #[test]
    fn listed_namespaces_are_allowed_and_others_denied_with_what_would_admit_them() {
        let allowed = AllowedNamespaces {
            names: vec!["team-a".into(), "team-b".into()],
            selector: None,
        };
        assert_eq!(
            access("grid", Some(&allowed), "team-b", None),
            Access::Allowed
        );
        let Access::Denied(message) = access("grid", Some(&allowed), "team-c", None) else {
            panic!("team-c is not listed");
        };
        assert!(message.contains(r#"provider "grid""#), "{message}");
        assert!(message.contains(r#"namespace "team-c""#), "{message}");
        assert!(message.contains("team-a, team-b"), "{message}");
        assert!(message.contains("nothing was created"), "{message}");
    }

    #[test]
    fn a_selector_admits_namespaces_by_their_labels() {
        let allowed = by_label("keeper.dev/storage", "grid");
        let matching = labels(&[("keeper.dev/storage", "grid"), ("other", "x")]);
        assert_eq!(
            access("grid", Some(&allowed), "team-a", Some(&matching)),
            Access::Allowed
        );
        let other = labels(&[("keeper.dev/storage", "s3")]);
        let Access::Denied(message) = access("grid", Some(&allowed), "team-a", Some(&other)) else {
            panic!("label value differs");
        };
        assert!(
            message.contains("namespaces labelled keeper.dev/storage=grid"),
            "{message}"
        );
        // Unknown labels (a namespace keeper cannot see) never match.
        assert!(matches!(
            access("grid", Some(&allowed), "team-a", None),
            Access::Denied(_)
        ));
    }

    #[test]
    fn names_and_selector_each_admit() {
        let mut allowed = by_label("tier", "gold");
        allowed.names = vec!["ops".into()];
        assert_eq!(access("p", Some(&allowed), "ops", None), Access::Allowed);
        assert_eq!(
            access("p", Some(&allowed), "x", Some(&labels(&[("tier", "gold")]))),
            Access::Allowed
        );
        let Access::Denied(message) = access("p", Some(&allowed), "x", Some(&labels(&[]))) else {
            panic!("neither listed nor labelled");
        };
        assert!(
            message.contains("the namespaces ops and namespaces labelled tier=gold"),
            "{message}"
        );
    }

    #[test]
    fn match_expressions_are_honoured() {
        let allowed = AllowedNamespaces {
            names: Vec::new(),
            selector: Some(LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "env".into(),
                    operator: "In".into(),
                    values: Some(vec!["prod".into(), "staging".into()]),
                }]),
            }),
        };
        let restriction = Restriction::new(&allowed).unwrap();
        assert!(restriction.needs_labels());
        assert_eq!(
            restriction.access("p", "a", Some(&labels(&[("env", "staging")]))),
            Access::Allowed
        );
        assert!(matches!(
            restriction.access("p", "a", Some(&labels(&[("env", "dev")]))),
            Access::Denied(_)
        ));
    }

    #[test]
    fn an_empty_or_malformed_restriction_is_refused() {
        let err = Restriction::new(&AllowedNamespaces::default()).unwrap_err();
        assert!(err.contains("names") && err.contains("selector"), "{err}");
        let bad = AllowedNamespaces {
            names: Vec::new(),
            selector: Some(LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "env".into(),
                    operator: "Near".into(),
                    values: None,
                }]),
            }),
        };
        assert!(Restriction::new(&bad).is_err());
        assert!(matches!(
            access("p", Some(&bad), "a", Some(&labels(&[]))),
            Access::Denied(_)
        ));
        let names_only = Restriction::new(&AllowedNamespaces {
            names: vec!["a".into()],
            selector: None,
        })
        .unwrap();
        assert!(!names_only.needs_labels());
    }
}
