//! Writing what was issued: the Secret (created, or patched against the resourceVersion read) and
//! the `caBundle` of keeper's ValidatingWebhookConfiguration.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::issue::issue;
use super::plan::{Material, Plan, plan};
use super::{MANAGED_ANNOTATION, MANAGED_VALUE, Settings};

/// Why a round failed. Each names the object and, for a refusal, the permission keeper lacks.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error(
        "keeper may not {verb} {what} ({message}): its ServiceAccount needs `{verb}` on it (the \
         chart grants it with webhook.tls.mode=selfManaged); the webhook keeps serving the \
         certificate it has"
    )]
    Forbidden {
        verb: &'static str,
        what: String,
        message: String,
    },
    #[error("cannot {verb} {what}: {source}")]
    Api {
        verb: &'static str,
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "ValidatingWebhookConfiguration {0} does not exist: nothing to write the CA into \
         (--webhook-configuration names the chart's, the release's full name)"
    )]
    NoConfiguration(String),
    #[error(
        "Secret {0} exists but keeper did not write it (no annotation {MANAGED_ANNOTATION}); \
         keeper never overwrites it: delete it, or name another with --webhook-cert-secret"
    )]
    NotOurs(String),
    #[error("Secret {0} kept changing under keeper (other replicas writing it); trying again")]
    Contended(String),
    #[error("cannot issue the webhook certificate: {0}")]
    Issue(#[from] rcgen::Error),
    #[error("cannot serve the certificate of Secret {secret}: {error:#}")]
    Serve {
        secret: String,
        error: anyhow::Error,
    },
}

impl CertError {
    fn call(verb: &'static str, what: String, error: kube::Error) -> CertError {
        match error {
            kube::Error::Api(status) if status.code == 403 => CertError::Forbidden {
                verb,
                what,
                message: status.message,
            },
            source => CertError::Api { verb, what, source },
        }
    }
}

fn secret_what(settings: &Settings) -> String {
    format!(
        "secrets {:?} in namespace {}",
        settings.secret, settings.namespace
    )
}

fn configuration_what(name: &str) -> String {
    format!("validatingwebhookconfigurations.admissionregistration.k8s.io {name:?}")
}

fn is_409(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Reads the Secret and makes it hold what [`plan`] wants, creating or replacing it; returns what
/// it holds then.
pub async fn converge_secret(
    secrets: &Api<Secret>,
    settings: &Settings,
    now: i64,
) -> Result<Material, CertError> {
    let what = secret_what(settings);
    for _ in 0..3 {
        let read = secrets
            .get_opt(&settings.secret)
            .await
            .map_err(|e| CertError::call("get", what.clone(), e))?;
        let stored = match &read {
            None => None,
            Some(secret) => {
                let ours = secret
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(MANAGED_ANNOTATION))
                    .is_some_and(|v| v == MANAGED_VALUE);
                if !ours {
                    return Err(CertError::NotOurs(format!(
                        "{}/{}",
                        settings.namespace, settings.secret
                    )));
                }
                Material::from_secret(secret)
            }
        };
        let plan = plan(stored.as_ref(), &settings.hosts, settings.validity, now);
        let reason = match &plan {
            Plan::Keep { .. } => return Ok(stored.expect("kept material exists")),
            Plan::NewCertificate(reason) | Plan::NewCa(reason) => reason.clone(),
        };
        let material = issue(
            &plan,
            stored.as_ref(),
            &settings.hosts,
            settings.validity,
            now,
        )?;
        let written = match &read {
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(settings.secret.clone()),
                        namespace: Some(settings.namespace.clone()),
                        annotations: Some(BTreeMap::from([(
                            MANAGED_ANNOTATION.to_string(),
                            MANAGED_VALUE.to_string(),
                        )])),
                        labels: Some(BTreeMap::from([
                            ("app.kubernetes.io/name".to_string(), "keeper".to_string()),
                            (
                                "app.kubernetes.io/component".to_string(),
                                "webhook-certificate".to_string(),
                            ),
                        ])),
                        ..ObjectMeta::default()
                    },
                    type_: Some("kubernetes.io/tls".into()),
                    data: Some(material.data()),
                    ..Secret::default()
                };
                secrets
                    .create(&PostParams::default(), &secret)
                    .await
                    .map_err(|e| (e, "create"))
            }
            Some(secret) => {
                // The resourceVersion read: refused with 409 if another replica wrote meanwhile.
                let patch = json!({
                    "metadata": {"resourceVersion": secret.metadata.resource_version},
                    "data": material.data(),
                });
                secrets
                    .patch(
                        &settings.secret,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(|e| (e, "patch"))
            }
        };
        match written {
            Ok(_) => {
                let what = if matches!(plan, Plan::NewCa(_)) {
                    "a new CA and serving certificate"
                } else {
                    "a new serving certificate"
                };
                tracing::info!(
                    secret = %settings.secret,
                    reason = %reason,
                    "webhook: issued {what}"
                );
                return Ok(material);
            }
            // Another replica created or renewed it first: read what it wrote.
            Err((e, _)) if is_409(&e) => continue,
            Err((e, verb)) => return Err(CertError::call(verb, what, e)),
        }
    }
    Err(CertError::Contended(format!(
        "{}/{}",
        settings.namespace, settings.secret
    )))
}

/// The JSON patch setting `caBundle` to `bundle` on every webhook of `config` that has another:
/// each guarded by a test of the webhook's name, so that a concurrent edit of the list fails
/// instead of being written over. Empty when nothing differs.
pub fn ca_bundle_patch(config: &ValidatingWebhookConfiguration, bundle: &[u8]) -> Vec<Value> {
    let encoded = serde_json::to_value(ByteString(bundle.to_vec())).expect("bytes serialize");
    let mut ops = Vec::new();
    for (i, webhook) in config.webhooks.iter().flatten().enumerate() {
        if webhook.client_config.ca_bundle.as_ref().map(|b| &b.0[..]) == Some(bundle) {
            continue;
        }
        ops.push(
            json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": webhook.name}),
        );
        ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": encoded}));
    }
    ops
}

/// Makes the configuration trust `bundle`. Returns whether it patched.
pub async fn inject_ca(
    configs: &Api<ValidatingWebhookConfiguration>,
    name: &str,
    bundle: &str,
) -> Result<bool, CertError> {
    let what = configuration_what(name);
    let config = configs
        .get_opt(name)
        .await
        .map_err(|e| CertError::call("get", what.clone(), e))?
        .ok_or_else(|| CertError::NoConfiguration(name.to_string()))?;
    let ops = ca_bundle_patch(&config, bundle.as_bytes());
    if ops.is_empty() {
        return Ok(false);
    }
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).expect("the operations are JSON patch");
    configs
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .map_err(|e| CertError::call("patch", what, e))?;
    tracing::info!(configuration = %name, "webhook: caBundle set to keeper's CA");
    Ok(true)
}
