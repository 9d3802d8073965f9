//! Authorization as kube-apiserver's `--authorization-mode=RBAC` decides it: the privileged group
//! `system:masters` may do anything, everyone else gets exactly what the stored Roles,
//! ClusterRoles, RoleBindings and ClusterRoleBindings (rbac.authorization.k8s.io/v1) grant, plus
//! kube's bootstrap grants to every authenticated user (`system:discovery`, `system:basic-user`,
//! `system:public-info-viewer`), which are evaluated here rather than stored as objects.
//!
//! The rule matching follows `k8s.io/kubernetes/pkg/apis/rbac/v1` (`VerbMatches`,
//! `APIGroupMatches`, `ResourceMatches` with `*/subresource`, `ResourceNameMatches`,
//! `NonResourceURLMatches` with a trailing `*`), and a binding whose role is missing is skipped
//! and named in the denial's reason (`RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`),
//! as kube's RBAC authorizer does. Aggregated ClusterRoles are not aggregated (their stored rules
//! count).

use crate::auth::{Attributes, UserInfo};
use crate::store::{State, meta_str};
use serde_json::{Value, json};

/// The group whose members every request is allowed for (kube's `system:masters`).
pub const PRIVILEGED_GROUP: &str = "system:masters";
const AUTHENTICATED: &str = "system:authenticated";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// What the authorizer decided, with kube's reason (`RBAC: allowed by ...` or the errors met).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

/// kube's bootstrap ClusterRoles bound to `system:authenticated` (`system:discovery`,
/// `system:basic-user`, `system:public-info-viewer`), as (name, rules).
fn bootstrap_roles() -> [(&'static str, Value); 3] {
    [
        (
            "system:discovery",
            json!([{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*",
                "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"]}]),
        ),
        (
            "system:basic-user",
            json!([{"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
                   {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
                    "resources": ["selfsubjectreviews"]}]),
        ),
        (
            "system:public-info-viewer",
            json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"]}]),
        ),
    ]
}

/// Decides one request the way kube-apiserver's privileged-group and RBAC authorizers do.
pub fn authorize(st: &State, user: &UserInfo, attrs: &Attributes) -> Decision {
    if user.groups.iter().any(|g| g == PRIVILEGED_GROUP) {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    let mut errors = Vec::new();
    if user.groups.iter().any(|g| g == AUTHENTICATED) {
        for (role, rules) in bootstrap_roles() {
            if rules_allow(&rules, attrs) {
                return allowed(format!(
                    "ClusterRoleBinding \"{role}\" of ClusterRole \"{role}\" to Group \"{AUTHENTICATED}\""
                ));
            }
        }
    }
    let cluster_wide = objects(st, "clusterrolebindings", None).map(|b| (b, ""));
    let ns = attrs.namespace.as_str();
    let in_namespace = objects(st, "rolebindings", Some(ns))
        .filter(|_| !ns.is_empty())
        .map(|b| (b, ns));
    for (binding, ns) in cluster_wide.chain(in_namespace) {
        let Some(subject) = matching_subject(binding, user, ns) else {
            continue;
        };
        let role_ref = &binding["roleRef"];
        match role_rules(st, role_ref, ns) {
            Ok(rules) if rules_allow(rules, attrs) => {
                let name = meta_str(binding, "name");
                let binding = if ns.is_empty() {
                    format!("ClusterRoleBinding \"{name}\"")
                } else {
                    format!("RoleBinding \"{name}/{ns}\"")
                };
                return allowed(format!(
                    "{binding} of {} \"{}\" to {}",
                    role_ref["kind"].as_str().unwrap_or_default(),
                    role_ref["name"].as_str().unwrap_or_default(),
                    describe_subject(subject, ns)
                ));
            }
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
    }
    let reason = match errors.len() {
        0 => String::new(),
        1 => format!("RBAC: {}", errors[0]),
        _ => format!("RBAC: [{}]", errors.join(", ")),
    };
    Decision {
        allowed: false,
        reason,
    }
}

fn allowed(by: String) -> Decision {
    Decision {
        allowed: true,
        reason: format!("RBAC: allowed by {by}"),
    }
}

/// The stored objects of one RBAC resource, all of them or those of one namespace.
fn objects<'a>(
    st: &'a State,
    plural: &str,
    ns: Option<&'a str>,
) -> impl Iterator<Item = &'a Value> {
    let key = format!("{RBAC_GROUP}/{plural}");
    match ns {
        Some(ns) => st.in_namespace(&key, ns),
        None => st.objects_of(&key),
    }
    .map(|(_, v)| v)
}

/// The first subject of `binding` that `user` is (kube's `appliesTo`): a ServiceAccount subject
/// without a namespace means one in the binding's namespace.
fn matching_subject<'a>(binding: &'a Value, user: &UserInfo, ns: &str) -> Option<&'a Value> {
    binding["subjects"].as_array()?.iter().find(|s| {
        let name = s["name"].as_str().unwrap_or_default();
        match s["kind"].as_str().unwrap_or_default() {
            "User" => user.name == name,
            "Group" => user.groups.iter().any(|g| g == name),
            "ServiceAccount" => {
                let sa_ns = s["namespace"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .unwrap_or(ns);
                !sa_ns.is_empty() && user.name == format!("system:serviceaccount:{sa_ns}:{name}")
            }
            _ => false,
        }
    })
}

fn describe_subject(subject: &Value, binding_ns: &str) -> String {
    let kind = subject["kind"].as_str().unwrap_or_default();
    let name = subject["name"].as_str().unwrap_or_default();
    if kind == "ServiceAccount" {
        let ns = subject["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(binding_ns);
        format!("{kind} \"{name}/{ns}\"")
    } else {
        format!("{kind} \"{name}\"")
    }
}

/// The rules of a binding's `roleRef` (a Role in `ns`, or a ClusterRole), or kube's NotFound text.
fn role_rules<'a>(st: &'a State, role_ref: &Value, ns: &str) -> Result<&'a Value, String> {
    let name = role_ref["name"].as_str().unwrap_or_default();
    let (plural, kind, ns) = match role_ref["kind"].as_str() {
        Some("Role") => ("roles", "role", ns),
        _ => ("clusterroles", "clusterrole", ""),
    };
    st.get(&format!("{RBAC_GROUP}/{plural}"), ns, name)
        .map(|r| &r["rules"])
        .ok_or_else(|| format!("{kind}.{RBAC_GROUP} \"{name}\" not found"))
}

fn rules_allow(rules: &Value, attrs: &Attributes) -> bool {
    rules
        .as_array()
        .is_some_and(|rules| rules.iter().any(|r| rule_allows(r, attrs)))
}

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

/// kube's `RuleAllows`: resource rules for resource requests, nonResourceURLs for the others.
pub fn rule_allows(rule: &Value, attrs: &Attributes) -> bool {
    let verb_ok = strings(&rule["verbs"]).any(|v| v == "*" || v == attrs.verb);
    if !verb_ok {
        return false;
    }
    if !attrs.resource_request {
        return strings(&rule["nonResourceURLs"]).any(|u| {
            u == "*"
                || u == attrs.path
                || u.strip_suffix('*')
                    .is_some_and(|prefix| attrs.path.starts_with(prefix))
        });
    }
    let group_ok = strings(&rule["apiGroups"]).any(|g| g == "*" || g == attrs.api_group);
    let combined = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let resource_ok = strings(&rule["resources"]).any(|r| {
        r == "*"
            || r == combined
            || (!attrs.subresource.is_empty()
                && r.strip_prefix("*/") == Some(attrs.subresource.as_str()))
    });
    let names: Vec<&str> = strings(&rule["resourceNames"]).collect();
    let name_ok = names.is_empty() || names.contains(&attrs.name.as_str());
    group_ok && resource_ok && name_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            resource_request: true,
            verb: verb.into(),
            api_group: group.into(),
            api_version: "v1".into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: "ns".into(),
            name: name.into(),
            path: String::new(),
        }
    }

    #[test]
    fn subresources_need_their_own_rule_or_a_star_slash_rule() {
        let main =
            json!({"verbs": ["update"], "apiGroups": ["keeper.dev"], "resources": ["s3buckets"]});
        let status = attrs("update", "keeper.dev", "s3buckets", "status", "b");
        assert!(!rule_allows(&main, &status));
        let any_status =
            json!({"verbs": ["update"], "apiGroups": ["keeper.dev"], "resources": ["*/status"]});
        assert!(rule_allows(&any_status, &status));
        assert!(!rule_allows(
            &any_status,
            &attrs("update", "keeper.dev", "s3buckets", "finalizers", "b")
        ));
        assert!(!rule_allows(
            &any_status,
            &attrs("update", "keeper.dev", "s3buckets", "", "b")
        ));
    }

    #[test]
    fn resource_names_restrict_to_named_objects_and_exclude_collections() {
        let rule = json!({"verbs": ["*"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"]});
        assert!(rule_allows(&rule, &attrs("get", "", "secrets", "", "a")));
        assert!(!rule_allows(&rule, &attrs("get", "", "secrets", "", "b")));
        assert!(!rule_allows(&rule, &attrs("list", "", "secrets", "", "")));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_trailing_star() {
        let rule = json!({"verbs": ["get"], "nonResourceURLs": ["/apis/*", "/version"]});
        let path = |p: &str| Attributes {
            resource_request: false,
            verb: "get".into(),
            path: p.into(),
            ..attrs("get", "", "", "", "")
        };
        assert!(rule_allows(&rule, &path("/apis/keeper.dev/v1")));
        assert!(rule_allows(&rule, &path("/version")));
        assert!(!rule_allows(&rule, &path("/version/x")));
        assert!(!rule_allows(&rule, &path("/api")));
    }
}
