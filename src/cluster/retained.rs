//! Copies of a retained resource's credentials in keeper's own namespace (issue 26, F4/F11).
//!
//! With `deletionPolicy: Retain` the account or instance stays and the Secret holding its
//! credentials is released from the resource, so the garbage collector keeps it. A namespace
//! deletion is not the garbage collector: it deletes every Secret in the namespace, released or
//! not, whenever it comes (with the resource, or months later), and a retained StorageGRID account
//! without its root password, or an RDS instance without its master password, can no longer be
//! reached by anyone. So before it releases such a Secret keeper copies it into its own namespace,
//! which no tenant namespace's deletion reaches, under a name made of the resource's uid (a
//! resource of the same name created and retained again gets a copy of its own, never
//! overwriting the first) and with labels naming the resource.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::ObjectMeta;

use super::{Kube, LetGo, Note, SecretError, Target, owned_by};

/// Labels of a retained copy: the kind, namespace, name and uid of the resource it was kept for
/// (the name only when it fits in a label value; the annotation always has it).
pub const RETAINED_KIND: &str = "keeper.dev/retained-kind";
pub const RETAINED_NAMESPACE: &str = "keeper.dev/retained-namespace";
pub const RETAINED_NAME: &str = "keeper.dev/retained-name";
pub const RETAINED_UID: &str = "keeper.dev/retained-uid";
/// Annotation of a retained copy: the resource and the Secret it was copied from, in words.
pub const RETAINED_FROM: &str = "keeper.dev/retained-from";
/// Annotation of a retained copy: the id of what was retained on the backend (the StorageGRID
/// account id, the RDS instance identifier), which the resource's status no longer shows once the
/// resource is gone.
pub const RETAINED_BACKEND_ID: &str = "keeper.dev/retained-backend-id";

/// The event on the copy, in keeper's namespace: the resource's own namespace may be on its
/// way out, and the API refuses new events there.
pub const COPIED: &str = "RetainedCredentialsCopied";

/// The name of the copy of `owner`'s Secret `role` (the part of its name after the resource's
/// name, e.g. `root-credentials`).
pub fn retained_secret_name(owner: &Target, role: &str) -> String {
    format!("retained-{}-{role}", owner.uid)
}

/// Whether `value` is a valid label value (at most 63 characters, alphanumerics, `-`, `_`, `.`,
/// starting and ending alphanumeric).
fn label_value(value: &str) -> bool {
    let edges = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    value.len() <= 63
        && edges(value.chars().next())
        && edges(value.chars().last())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The copy of `source` (Secret `role` of `owner`) to keep in `namespace`: the same data and
/// type, no owner, labels and annotations naming where it comes from and, when known, what the
/// backend calls the retained account or instance (`backend_id`).
pub fn retained_copy(
    owner: &Target,
    source: &Secret,
    role: &str,
    namespace: &str,
    backend_id: Option<&str>,
) -> Secret {
    let mut labels = BTreeMap::from([
        (RETAINED_KIND.to_string(), owner.resource.kind.clone()),
        (RETAINED_NAMESPACE.to_string(), owner.namespace.clone()),
        (RETAINED_UID.to_string(), owner.uid.clone()),
    ]);
    if label_value(&owner.name) {
        labels.insert(RETAINED_NAME.to_string(), owner.name.clone());
    }
    let mut data = source.data.clone().unwrap_or_default();
    for (key, value) in source.string_data.iter().flatten() {
        data.insert(
            key.clone(),
            k8s_openapi::ByteString(value.clone().into_bytes()),
        );
    }
    let mut annotations = BTreeMap::from([(
        RETAINED_FROM.to_string(),
        format!(
            "{} {}/{} (uid {}), deletionPolicy Retain; copied from Secret {}/{}",
            owner.resource.kind,
            owner.namespace,
            owner.name,
            owner.uid,
            owner.namespace,
            source.name_any()
        ),
    )]);
    if let Some(id) = backend_id {
        annotations.insert(RETAINED_BACKEND_ID.to_string(), id.to_string());
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(retained_secret_name(owner, role)),
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        type_: source.type_.clone(),
        data: Some(data),
        ..Secret::default()
    }
}

/// The write that takes `existing` (the Secret of the copy's name, if any) to `copy`: `copy`
/// itself when there is none, the existing copy with `copy`'s data when that differs (a retry
/// after the source changed), `None` when it already holds it; a conflict when the name is taken
/// by anything but the copy for the same resource.
pub(super) fn copy_write(
    existing: Option<Secret>,
    copy: &Secret,
) -> Result<Option<Secret>, SecretError> {
    let Some(mut existing) = existing else {
        return Ok(Some(copy.clone()));
    };
    if existing.labels().get(RETAINED_UID) != copy.labels().get(RETAINED_UID) {
        return Err(SecretError::Conflict {
            namespace: copy.namespace().unwrap_or_default(),
            name: copy.name_any(),
            holder: "is not keeper's copy of this resource's credentials".to_string(),
        });
    }
    if existing.data == copy.data && existing.string_data.is_none() {
        return Ok(None);
    }
    existing.data = copy.data.clone();
    existing.string_data = None;
    Ok(Some(existing))
}

/// What [`retain_secret`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retained {
    /// The Secret was copied to `copy` (in keeper's namespace) and released.
    Copied { copy: String },
    /// No Secret of that name belongs to the resource: nothing to keep.
    Missing,
}

/// Keeps `owner`'s Secret `name` (`role`: its name's part after the resource's name; for
/// `backend_id` see [`retained_copy`]) for a resource retained on deletion: copies it into
/// `operator_namespace` first, then releases it from `owner`; the copy must exist before the
/// release, so a failed copy fails the whole step (it is retried) and the Secret stays held. The
/// copy's event goes to keeper's namespace, and keeper's log says it too.
pub async fn retain_secret(
    kube: &dyn Kube,
    owner: &Target,
    (name, role): (&str, &str),
    operator_namespace: &str,
    backend_id: Option<&str>,
) -> Result<Retained, SecretError> {
    // A Secret of that name keeper did not create for `owner` is not its to copy (nor to
    // release): it is left alone, as before.
    let Some(source) = kube
        .secret(&owner.namespace, name)
        .await?
        .filter(|secret| owned_by(secret, owner))
    else {
        return Ok(Retained::Missing);
    };
    let copy = retained_copy(owner, &source, role, operator_namespace, backend_id);
    let kept = kube.keep_copy(copy).await?;
    let copy = kept.name_any();
    let message = format!(
        "deletionPolicy Retain: the credentials of {} {}/{} (Secret {name}) are kept in Secret {operator_namespace}/{copy}, which deleting namespace {} does not take",
        owner.resource.kind, owner.namespace, owner.name, owner.namespace
    );
    tracing::info!(
        kind = %owner.resource.kind,
        namespace = %owner.namespace,
        name = %owner.name,
        secret = %name,
        copy = %format!("{operator_namespace}/{copy}"),
        "{message}"
    );
    kube.publish(&Target::of(&kept), &Note::normal(COPIED, message))
        .await;
    kube.let_go_secret(owner, name, LetGo::Ownership).await?;
    Ok(Retained::Copied { copy })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::S3Tenant;
    use k8s_openapi::ByteString;

    fn owner(name: &str) -> Target {
        let mut tenant = crate::test_support::tenant(name, serde_json::json!({"provider": "p"}));
        tenant.metadata.uid = Some("0f6d2c9a-1b2c-4d5e-8f90-123456789abc".into());
        Target::of::<S3Tenant>(&tenant)
    }

    fn source() -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("t-root-credentials".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([(
                "password".to_string(),
                ByteString(b"pw".to_vec()),
            )])),
            string_data: Some(BTreeMap::from([("username".into(), "root".into())])),
            ..Secret::default()
        }
    }

    #[test]
    fn a_copy_is_named_by_the_uid_and_labelled_with_what_it_belongs_to() {
        let owner = owner("t");
        let copy = retained_copy(
            &owner,
            &source(),
            "root-credentials",
            "keeper-system",
            Some("42"),
        );
        assert_eq!(
            copy.name_any(),
            "retained-0f6d2c9a-1b2c-4d5e-8f90-123456789abc-root-credentials"
        );
        assert_eq!(copy.namespace().as_deref(), Some("keeper-system"));
        assert!(
            copy.owner_references().is_empty(),
            "nothing takes it with it"
        );
        let labels = copy.labels();
        assert_eq!(labels[RETAINED_KIND], "S3Tenant");
        assert_eq!(labels[RETAINED_NAMESPACE], "ns");
        assert_eq!(labels[RETAINED_NAME], "t");
        assert_eq!(labels[RETAINED_UID], owner.uid);
        let from = &copy.annotations()[RETAINED_FROM];
        assert!(
            from.contains("S3Tenant ns/t") && from.contains("Secret ns/t-root-credentials"),
            "{from}"
        );
        assert_eq!(copy.annotations()[RETAINED_BACKEND_ID], "42");
        let data = copy.data.unwrap();
        assert_eq!(data["password"].0, b"pw");
        assert_eq!(data["username"].0, b"root", "stringData is kept too");
        assert_eq!(copy.type_.as_deref(), Some("Opaque"));
    }

    #[test]
    fn a_name_that_is_no_label_value_is_left_to_the_annotation() {
        let long = "t".repeat(64);
        let copy = retained_copy(&owner(&long), &source(), "root-credentials", "k", None);
        assert!(!copy.annotations().contains_key(RETAINED_BACKEND_ID));
        assert!(!copy.labels().contains_key(RETAINED_NAME));
        assert!(copy.annotations()[RETAINED_FROM].contains(&long));
        assert!(label_value("a.b_c-1"));
        assert!(!label_value("-a") && !label_value("a/b") && !label_value(""));
    }

    #[test]
    fn the_copy_is_written_once_brought_up_to_date_and_never_over_another_secret() {
        let copy = retained_copy(&owner("t"), &source(), "root-credentials", "k", None);
        assert_eq!(copy_write(None, &copy).unwrap(), Some(copy.clone()));
        assert_eq!(copy_write(Some(copy.clone()), &copy).unwrap(), None);
        let mut older = copy.clone();
        older.data = Some(BTreeMap::new());
        older.metadata.resource_version = Some("7".into());
        let updated = copy_write(Some(older), &copy).unwrap().unwrap();
        assert_eq!(updated.data, copy.data);
        assert_eq!(updated.metadata.resource_version.as_deref(), Some("7"));
        let mut other = copy.clone();
        other.metadata.labels = None;
        assert!(matches!(
            copy_write(Some(other), &copy),
            Err(SecretError::Conflict { .. })
        ));
        let another_resource = retained_copy(&owner("u"), &source(), "root-credentials", "k", None);
        let mut taken = another_resource;
        taken
            .labels_mut()
            .insert(RETAINED_UID.into(), "another-uid".into());
        assert!(copy_write(Some(taken), &copy).is_err());
    }
}
