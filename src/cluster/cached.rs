//! What the caches keep of an object: only what keeper reads ([`trim`]), and keeper's Secrets
//! packed ([`PackedSecret`]): the Secret serialized, beside the four fields the cache and
//! read-your-writes key on (name, namespace, uid, resourceVersion).
//!
//! A fleet caches one credentials Secret per bucket, and a decoded Secret costs far more than
//! its content: ten data entries are twenty small strings in a map node sized for eleven, and
//! its labels, owner reference and finalizer as many again. Packed, a bucket's Secret takes
//! about half the memory. A Secret is read at a reconcile of its owner and when it changes,
//! each time decoded from the packed form (some microseconds): reads are few, the cached
//! Secrets many.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::ObjectMeta;
use serde::{Deserialize, Deserializer};

/// kubectl's client-side apply record: a copy of the whole object keeper never reads.
pub(super) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what keeper never reads from an object before it is cached: `metadata.managedFields`
/// and kubectl's last-applied annotation, often larger than the object itself.
pub fn trim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// A Secret as the cache keeps it (see the module documentation).
#[derive(Clone)]
pub struct PackedSecret {
    /// Name, namespace, uid and resourceVersion only.
    metadata: ObjectMeta,
    /// The whole Secret, trimmed as the cache trims every object, as JSON.
    packed: Box<[u8]>,
}

impl PackedSecret {
    pub fn pack(mut secret: Secret) -> Self {
        trim(&mut secret);
        let meta = &secret.metadata;
        let metadata = ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            ..ObjectMeta::default()
        };
        let packed = serde_json::to_vec(&secret)
            .expect("a Secret always serializes (string keys, no maps keyed by non-strings)")
            .into_boxed_slice();
        PackedSecret { metadata, packed }
    }

    /// The Secret, as it was packed.
    pub fn unpack(&self) -> Secret {
        serde_json::from_slice(&self.packed)
            .expect("a Secret packed by `pack` decodes: it is serde_json's own output")
    }
}

/// Without the data: a packed Secret may be logged.
impl std::fmt::Debug for PackedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedSecret")
            .field("namespace", &self.metadata.namespace)
            .field("name", &self.metadata.name)
            .field("resource_version", &self.metadata.resource_version)
            .field("bytes", &self.packed.len())
            .finish()
    }
}

/// Decoded from the API's JSON as a Secret, then packed: the watch keeps no decoded copy.
impl<'de> Deserialize<'de> for PackedSecret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Secret::deserialize(deserializer).map(PackedSecret::pack)
    }
}

impl Resource for PackedSecret {
    type DynamicType = ();
    type Scope = <Secret as Resource>::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Secret::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Secret::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Secret::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Secret::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference};
    use kube::ResourceExt;
    use kube::runtime::reflector::ObjectRef;

    use super::*;

    fn secret() -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("b-credentials".into()),
                namespace: Some("ns".into()),
                uid: Some("0c7d6b1e-6c1a-4f7e-9d2b-2f1f8e0b9a11".into()),
                resource_version: Some("42".into()),
                labels: Some([("app.kubernetes.io/managed-by".into(), "keeper".into())].into()),
                annotations: Some(
                    [
                        ("keeper.dev/claim".into(), "x".into()),
                        (
                            "kubectl.kubernetes.io/last-applied-configuration".into(),
                            "{}".into(),
                        ),
                    ]
                    .into(),
                ),
                finalizers: Some(vec!["keeper.dev/needed-for-cleanup".into()]),
                owner_references: Some(vec![OwnerReference {
                    api_version: "keeper.dev/v1alpha1".into(),
                    kind: "S3Bucket".into(),
                    name: "b".into(),
                    uid: "u".into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..ObjectMeta::default()
            },
            data: Some(
                [
                    ("accessKeyId".into(), ByteString(b"AKIA".to_vec())),
                    ("secretAccessKey".into(), ByteString(vec![0, 159, 255])),
                ]
                .into(),
            ),
            type_: Some("Opaque".into()),
            ..Secret::default()
        }
    }

    #[test]
    fn a_packed_secret_unpacks_to_the_secret_the_cache_would_hold() {
        let mut trimmed = secret();
        trim(&mut trimmed);
        assert_eq!(PackedSecret::pack(secret()).unpack(), trimmed);
        assert_eq!(trimmed.metadata.managed_fields, None);
        assert!(trimmed.annotations().contains_key("keeper.dev/claim"));
    }

    #[test]
    fn a_packed_secret_is_keyed_as_the_secret_and_decodes_from_the_apis_json() {
        let json = serde_json::to_value(secret()).unwrap();
        let packed: PackedSecret = serde_json::from_value(json).unwrap();
        let trimmed = {
            let mut s = secret();
            trim(&mut s);
            s
        };
        assert_eq!(packed.unpack(), trimmed);
        assert_eq!(
            ObjectRef::from_obj(&packed).erase(),
            ObjectRef::from_obj(&secret()).erase()
        );
        assert_eq!(packed.meta().resource_version.as_deref(), Some("42"));
        assert_eq!(packed.meta().labels, None, "the rest is in the packed form");
        let debug = format!("{packed:?}");
        assert!(!debug.contains("AKIA"), "{debug}");
    }
}
