//! The namespace controller, as kube-controller-manager runs it: a namespace being deleted is
//! emptied by API DELETEs of its objects (propagation Background), so validating admission
//! webhooks review each one (operation DELETE, user [`USER`]) and a denial leaves that object
//! in place. What is left and why is reported on the namespace's status conditions with kube's
//! types, reasons and messages; the controller looks again every [`RETRY`] (and at once when a
//! namespace starts terminating) until the namespace is empty, when the store removes it.

use super::*;
use crate::resources::NS_KEY;
use std::collections::BTreeMap;

/// Who the namespace controller deletes as (kube-controller-manager with
/// `--use-service-account-credentials`, as kubeadm and most distributions run it).
pub const USER: &str = "system:serviceaccount:kube-system:namespace-controller";

/// How soon a namespace that is not empty yet is looked at again.
pub const RETRY: Duration = Duration::from_secs(1);

/// The userInfo admission webhooks see for the controller's requests.
pub(super) fn user_info() -> Value {
    json!({
        "username": USER,
        "uid": "namespace-controller",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
    })
}

/// Runs until the task is aborted.
pub async fn run(shared: Arc<Shared>) {
    let mut changes = shared.lock().tx.subscribe();
    loop {
        let terminating = shared.lock().terminating_namespaces();
        for ns in terminating {
            sync(&shared, &ns).await;
        }
        // Wake early when a namespace starts terminating; otherwise retry on the timer.
        let started = async {
            loop {
                match changes.recv().await {
                    Ok(c) if c.store_key == NS_KEY && is_deleting(&c.obj) => return,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                }
            }
        };
        let _ = tokio::time::timeout(RETRY, started).await;
    }
}

/// One pass over namespace `ns`: DELETE what is not being deleted yet, then report.
async fn sync(shared: &Arc<Shared>, ns: &str) {
    let content: Vec<(Arc<ResDef>, String)> = {
        let st = shared.lock();
        let mut content = Vec::new();
        for key in st.store_keys() {
            let names: Vec<String> = st
                .in_namespace(key, ns)
                .filter(|(_, o)| !is_deleting(o))
                .map(|((_, name), _)| name.clone())
                .collect();
            if names.is_empty() {
                continue;
            }
            if let Some(def) = st.def_for_key(key).filter(|d| d.namespaced) {
                content.extend(names.into_iter().map(|name| (def.clone(), name)));
            }
        }
        content
    };
    let ctx = Ctx {
        query: HashMap::from([("propagationPolicy".to_string(), "Background".to_string())]),
        headers: HeaderMap::new(),
        body: Bytes::new(),
        user: user_info(),
        watch_cut: None,
    };
    let mut failures = Vec::new();
    for (def, name) in content {
        let target = Target {
            def: def.clone(),
            ns: Some(ns.to_string()),
            name: Some(name.clone()),
            sub: String::new(),
        };
        match write(shared, "delete", &target, &ctx, None).await {
            Ok(_) => {}
            Err(e) if e.code == 404 => {}
            Err(e) => {
                tracing::info!(namespace = ns, resource = %def.plural, %name, error = %e.message, "namespace content not deleted");
                failures.push(e.message);
            }
        }
    }
    report(&mut shared.lock(), ns, &failures);
}

fn resource_name(def: &ResDef) -> String {
    if def.group.is_empty() {
        def.plural.clone()
    } else {
        format!("{}.{}", def.plural, def.group)
    }
}

/// Writes the namespace's deletion conditions (only when they change).
fn report(st: &mut State, ns: &str, failures: &[String]) {
    let Some(namespace) = st.get(NS_KEY, "", ns).cloned() else {
        return;
    };
    if !is_deleting(&namespace) {
        return;
    }
    let mut remaining: BTreeMap<String, usize> = BTreeMap::new();
    let mut finalizing: BTreeMap<String, usize> = BTreeMap::new();
    for key in st.store_keys() {
        let mut objects = st.in_namespace(key, ns).peekable();
        if objects.peek().is_none() {
            continue;
        }
        let Some(def) = st.def_for_key(key).filter(|d| d.namespaced) else {
            continue;
        };
        for (_, o) in objects {
            *remaining.entry(resource_name(&def)).or_default() += 1;
            for f in finalizers(o) {
                *finalizing.entry(f).or_default() += 1;
            }
        }
    }
    let counted = |m: &BTreeMap<String, usize>, what: &str| {
        m.iter()
            .map(|(k, n)| format!("{k} {what} {n} resource instances"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let failed = match failures {
        [] => None,
        [one] => Some(one.clone()),
        many => Some(format!("[{}]", many.join(", "))),
    };
    let wanted = [
        (
            "NamespaceDeletionDiscoveryFailure",
            false,
            "ResourcesDiscovered",
            "All resources successfully discovered".to_string(),
        ),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            false,
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".to_string(),
        ),
        match failed {
            Some(errors) => (
                "NamespaceDeletionContentFailure",
                true,
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {errors}",
                    failures.len()
                ),
            ),
            None => (
                "NamespaceDeletionContentFailure",
                false,
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization".to_string(),
            ),
        },
        if remaining.is_empty() {
            (
                "NamespaceContentRemaining",
                false,
                "ContentRemoved",
                "All content successfully removed".to_string(),
            )
        } else {
            (
                "NamespaceContentRemaining",
                true,
                "SomeResourcesRemain",
                format!(
                    "Some resources are remaining: {}",
                    counted(&remaining, "has")
                ),
            )
        },
        if finalizing.is_empty() {
            (
                "NamespaceFinalizersRemaining",
                false,
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished".to_string(),
            )
        } else {
            (
                "NamespaceFinalizersRemaining",
                true,
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    counted(&finalizing, "in")
                ),
            )
        },
    ];
    let old = namespace["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let conditions: Vec<Value> = wanted
        .into_iter()
        .map(|(type_, status, reason, message)| {
            let status = if status { "True" } else { "False" };
            let previous = old.iter().find(|c| c["type"] == type_);
            let since = previous
                .filter(|c| c["status"] == status)
                .and_then(|c| c["lastTransitionTime"].as_str())
                .map(str::to_string)
                .unwrap_or_else(store::now);
            json!({"type": type_, "status": status, "lastTransitionTime": since,
                   "reason": reason, "message": message})
        })
        .collect();
    if conditions == old {
        return;
    }
    let mut updated = namespace;
    updated["status"]["conditions"] = json!(conditions);
    st.replace(NS_KEY, "", ns, updated);
    st.gc();
}
