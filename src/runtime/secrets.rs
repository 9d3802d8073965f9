//! Secrets keeper reads (backend credentials) and writes (credentials it publishes). Every
//! controller goes through these so that ownership, idempotence and "no write when nothing
//! changed" are handled once.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Resource, ResourceExt};

/// Reads a Secret; `Ok(None)` when it does not exist.
pub async fn read(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    Ok(api.get_opt(name).await?.map(|secret| decode(&secret)))
}

/// The Secret's data as strings (non-UTF-8 values are skipped: keeper stores only text).
fn decode(secret: &Secret) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (key, value) in secret.data.iter().flatten() {
        if let Ok(text) = String::from_utf8(value.0.clone()) {
            out.insert(key.clone(), text);
        }
    }
    for (key, value) in secret.string_data.iter().flatten() {
        out.insert(key.clone(), value.clone());
    }
    out
}

/// Creates or updates Secret `name` in `owner`'s namespace, owned by `owner` (so it is garbage
/// collected with it), holding exactly `data`. Writes nothing when the Secret already holds that
/// data and owner. Returns whether it wrote.
pub async fn apply<K>(
    client: &Client,
    owner: &K,
    name: &str,
    data: BTreeMap<String, String>,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()>,
{
    let namespace = owner.namespace().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let owner_ref = owner
        .controller_owner_ref(&())
        .expect("owner has a name and uid");
    let encoded: BTreeMap<String, ByteString> = data
        .into_iter()
        .map(|(k, v)| (k, ByteString(v.into_bytes())))
        .collect();
    match api.get_opt(name).await? {
        None => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(namespace),
                    owner_references: Some(vec![owner_ref]),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_string(),
                        "keeper".to_string(),
                    )])),
                    ..ObjectMeta::default()
                },
                type_: Some("Opaque".to_string()),
                data: Some(encoded),
                ..Secret::default()
            };
            api.create(&PostParams::default(), &secret).await?;
            Ok(true)
        }
        Some(mut existing) => {
            let owned = existing
                .owner_references()
                .iter()
                .any(|r| r.uid == owner_ref.uid);
            if owned && existing.data.as_ref() == Some(&encoded) && existing.string_data.is_none() {
                return Ok(false);
            }
            if !owned {
                existing.owner_references_mut().push(owner_ref);
            }
            existing.data = Some(encoded);
            existing.string_data = None;
            // The resourceVersion from the read makes a concurrent change fail with 409 and retry.
            api.replace(name, &PostParams::default(), &existing).await?;
            Ok(true)
        }
    }
}
