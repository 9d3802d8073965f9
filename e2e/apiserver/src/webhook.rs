//! Validating admission webhooks (admissionregistration.k8s.io/v1).

use crate::error::ApiError;
use crate::resources::{ResDef, VWC_KEY};
use crate::selectors::LabelSelector;
use crate::store::State;
use base64::Engine;
use serde_json::{Value, json};
use std::time::Duration;

/// A webhook that matched a request.
#[derive(Debug, Clone)]
pub struct Hook {
    pub name: String,
    /// Where to POST, or why the service reference cannot be reached.
    pub url: Result<String, String>,
    pub ca_bundle: Vec<u8>,
    pub timeout: u64,
    pub fail_open: bool,
}

fn has(list: &Value, want: &str) -> bool {
    list.as_array().is_some_and(|a| {
        a.iter()
            .any(|v| v.as_str() == Some(want) || v.as_str() == Some("*"))
    })
}

fn resource_matches(list: &Value, plural: &str, sub: &str) -> bool {
    list.as_array().is_some_and(|a| {
        a.iter().filter_map(Value::as_str).any(|r| {
            if r == "*/*" {
                return true;
            }
            let (res, rsub) = r.split_once('/').unwrap_or((r, ""));
            (res == "*" || res == plural) && (rsub == "*" || rsub == sub)
        })
    })
}

/// Webhooks whose rules and selectors match the request, in configuration order.
#[allow(clippy::too_many_arguments)]
pub fn matching(
    st: &State,
    def: &ResDef,
    op: &str,
    sub: &str,
    ns: &str,
    obj: Option<&Value>,
    old: Option<&Value>,
) -> Vec<Hook> {
    let mut out = Vec::new();
    // Like kube-apiserver, webhook configurations themselves are never sent to webhooks.
    if def.store_key == VWC_KEY {
        return out;
    }
    let ns_labels = if def.namespaced {
        st.get(crate::resources::NS_KEY, "", ns)
            .map(|n| n["metadata"]["labels"].clone())
            .unwrap_or(Value::Null)
    } else if def.plural == "namespaces" && def.group.is_empty() {
        obj.or(old)
            .map(|o| o["metadata"]["labels"].clone())
            .unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    for (_, cfg) in st.objects_of(VWC_KEY) {
        for wh in cfg["webhooks"].as_array().cloned().unwrap_or_default() {
            let rules = wh["rules"].as_array().cloned().unwrap_or_default();
            let rule_ok = rules.iter().any(|r| {
                let scope = r["scope"].as_str().unwrap_or("*");
                let scope_ok = match scope {
                    "Cluster" => !def.namespaced,
                    "Namespaced" => def.namespaced,
                    _ => true,
                };
                scope_ok
                    && has(&r["operations"], op)
                    && has(&r["apiGroups"], &def.group)
                    && has(&r["apiVersions"], &def.version)
                    && resource_matches(&r["resources"], &def.plural, sub)
            });
            if !rule_ok {
                continue;
            }
            if !ns_labels.is_null()
                && !LabelSelector::matches_object_selector(&wh["namespaceSelector"], &ns_labels)
            {
                continue;
            }
            let sel = &wh["objectSelector"];
            let obj_ok = [obj, old]
                .iter()
                .flatten()
                .any(|o| LabelSelector::matches_object_selector(sel, &o["metadata"]["labels"]));
            if !obj_ok {
                continue;
            }
            let cc = &wh["clientConfig"];
            let url = match cc["url"].as_str() {
                Some(u) => Ok(u.to_string()),
                None => {
                    let svc = &cc["service"];
                    let key = format!(
                        "{}/{}",
                        svc["namespace"].as_str().unwrap_or_default(),
                        svc["name"].as_str().unwrap_or_default()
                    );
                    match st.webhook_services.get(&key) {
                        Some(port) => Ok(format!(
                            "https://127.0.0.1:{port}{}",
                            svc["path"].as_str().unwrap_or_default()
                        )),
                        None => Err(format!(
                            "service {key} has no local port mapping (the emulator calls clientConfig.url, or services mapped with --webhook-service)"
                        )),
                    }
                }
            };
            let ca_bundle = cc["caBundle"]
                .as_str()
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .unwrap_or_default();
            out.push(Hook {
                name: wh["name"].as_str().unwrap_or_default().to_string(),
                url,
                ca_bundle,
                timeout: wh["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30),
                fail_open: wh["failurePolicy"].as_str() == Some("Ignore"),
            });
        }
    }
    out
}

async fn post(hook: &Hook, review: &Value) -> anyhow::Result<Value> {
    let url = hook.url.clone().map_err(anyhow::Error::msg)?;
    let certs = reqwest::Certificate::from_pem_bundle(&hook.ca_bundle)?;
    let client = reqwest::Client::builder()
        .tls_certs_only(certs)
        .timeout(Duration::from_secs(hook.timeout))
        .build()?;
    let resp = client.post(&url).json(review).send().await?;
    let status = resp.status();
    if !status.is_success() {
        anyhow::bail!("the server responded with status {status}");
    }
    Ok(resp.json().await?)
}

/// Call every matching webhook; returns the warnings to pass on or the denial.
pub async fn call_all(hooks: &[Hook], request: &Value) -> Result<Vec<String>, ApiError> {
    let mut warnings = Vec::new();
    for hook in hooks {
        let uid = uuid::Uuid::new_v4().to_string();
        let mut req = request.clone();
        req["uid"] = json!(uid);
        let review =
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req});
        let result = post(hook, &review).await.and_then(|r| {
            let resp = r["response"].clone();
            if resp["uid"].as_str() != Some(uid.as_str()) {
                anyhow::bail!("expected response.uid={uid:?}, got {:?}", resp["uid"]);
            }
            if !resp["allowed"].is_boolean() {
                anyhow::bail!("response.allowed is missing");
            }
            Ok(resp)
        });
        let resp = match result {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(webhook = %hook.name, error = %e, "webhook call failed");
                if hook.fail_open {
                    continue;
                }
                return Err(ApiError::internal(format!(
                    "failed calling webhook \"{}\": failed to call webhook: Post \"{}\": {e:#}",
                    hook.name,
                    hook.url.as_deref().unwrap_or("<unmapped service>")
                )));
            }
        };
        for w in resp["warnings"].as_array().cloned().unwrap_or_default() {
            if let Some(w) = w.as_str() {
                warnings.push(w.to_string());
            }
        }
        if resp["allowed"].as_bool() != Some(true) {
            let st = &resp["status"];
            let code = st["code"].as_u64().filter(|c| *c >= 400).unwrap_or(400) as u16;
            let denied = format!("admission webhook \"{}\" denied the request", hook.name);
            let message = match (st["message"].as_str(), st["reason"].as_str()) {
                (Some(m), _) if !m.is_empty() => format!("{denied}: {m}"),
                (_, Some(r)) if !r.is_empty() => format!("{denied}: {r}"),
                _ => format!("{denied} without explanation"),
            };
            let mut err = ApiError::new(code, st["reason"].as_str().unwrap_or(""), message);
            if st["details"].is_object() {
                err.details = Some(st["details"].clone());
            }
            err.warnings = warnings;
            return Err(err);
        }
    }
    Ok(warnings)
}
