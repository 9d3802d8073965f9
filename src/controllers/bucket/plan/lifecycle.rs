//! Pure lifecycle decisions of a bucket: is the tenant usable, does the bucket need converging,
//! what the deletion-blocked message says, and what the credentials Secret holds.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::api::{BucketPhase, S3Bucket, S3BucketStatus, S3Tenant, TenantPhase};
use crate::backends::Keys;
use crate::backends::identity;
use crate::cluster::triggers;
use crate::config::AdoptionScope;
use crate::controllers::bucket::DRAIN_ANNOTATION;
use crate::namespaces::Restriction;
use crate::runtime::conditions;

/// Whether the bucket's tenant can be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantGate {
    Ready,
    /// Not yet: the reason and a message saying what is missing.
    Wait(&'static str, String),
}

/// For `apply` the tenant must be Ready. For cleanup it only has to exist: a tenant being
/// deleted waits for its buckets to go, so its buckets must still be able to clean up.
pub fn tenant_gate(bucket: &S3Bucket, tenant: Option<&S3Tenant>, cleanup: bool) -> TenantGate {
    let name = &bucket.spec.tenant_ref.name;
    let namespace = bucket.namespace().unwrap_or_default();
    let Some(tenant) = tenant else {
        return TenantGate::Wait(
            "TenantNotFound",
            format!("S3Tenant {name:?} does not exist in namespace {namespace:?}"),
        );
    };
    if tenant.namespace() != bucket.namespace() {
        return TenantGate::Wait(
            "TenantInOtherNamespace",
            format!("S3Tenant {name:?} must be in the bucket's namespace {namespace:?}"),
        );
    }
    if cleanup {
        return TenantGate::Ready;
    }
    if tenant.metadata.deletion_timestamp.is_some() {
        // A live bucket of a tenant being deleted changes nothing (a drain request included):
        // the tenant waits for the bucket's deletion, whose cleanup carries out the drain.
        let bucket_name = bucket.name_any();
        return TenantGate::Wait(
            "TenantDeleting",
            format!(
                "S3Tenant {name:?} is being deleted, so this bucket changes nothing until it is deleted too: `kubectl delete s3bucket {bucket_name} -n {namespace}` (objects in it are deleted only on a `{DRAIN_ANNOTATION}` request)"
            ),
        );
    }
    let phase = tenant.status.as_ref().and_then(|s| s.phase);
    if phase != Some(TenantPhase::Ready) {
        return TenantGate::Wait(
            "TenantNotReady",
            format!(
                "S3Tenant {name:?} is not Ready (phase {})",
                phase.map_or("unknown".to_string(), |p| format!("{p:?}"))
            ),
        );
    }
    TenantGate::Ready
}

/// What a bucket reads of its tenant ([`tenant_gate`], the backend's connection: its identity,
/// provider, deletion, phase and account), hashed: a tenant change that leaves this alone (its
/// bucket count, which every bucket created or deleted in it changes, a condition's message) does
/// not re-reconcile every bucket of the tenant. A new read of the tenant belongs here too.
pub fn tenant_trigger_key(tenant: &S3Tenant) -> u64 {
    let status = tenant.status.as_ref();
    triggers::key_of((
        &tenant.metadata.uid,
        tenant.metadata.generation,
        tenant.metadata.deletion_timestamp.is_some(),
        &tenant.spec.provider,
        status.and_then(|s| s.phase),
        status.and_then(|s| s.account_id.as_ref()),
        status.and_then(|s| s.backend_identity.as_ref()),
        status.and_then(|s| s.credentials_secret.as_ref()),
        status.and_then(|s| s.s3_endpoint.as_ref()),
    ))
}

/// Whether an S3Bucket may adopt an existing bucket without keeper's mark (`keeper.dev/adopt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adoption {
    NotAsked,
    Allowed,
    /// Asked, and refused: the message says which setting would allow it.
    Refused(String),
}

/// Audit 2, HIGH 1: on an S3-compatible store keeper signs with the provider's keys, which reach
/// every bucket of the store, so an adoption is bounded by nothing but this: it is allowed only
/// from the namespaces the provider's `adoption.allowedNamespaces` admits (none without). On
/// StorageGRID a tenant reaches its own account's buckets only, which bounds adoption already.
pub fn adoption(
    asked: bool,
    scope: AdoptionScope<'_>,
    provider: &str,
    namespace: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> Adoption {
    if !asked {
        return Adoption::NotAsked;
    }
    let allowed = match scope {
        AdoptionScope::TenantAccount => return Adoption::Allowed,
        AdoptionScope::Namespaces(allowed) => allowed,
    };
    let admits = match allowed.map(Restriction::new) {
        Some(Ok(restriction)) if restriction.admits(namespace, labels) => return Adoption::Allowed,
        Some(Ok(restriction)) => format!("admits only {}", restriction.describe()),
        // Validated at start; never allow on a broken restriction.
        Some(Err(e)) => format!("is invalid ({e})"),
        None => "is not set, so no namespace may adopt".to_string(),
    };
    Adoption::Refused(format!(
        "adoption is not allowed from namespace {namespace:?} on provider {provider:?}, whose keys reach every bucket of the store: its `adoption.allowedNamespaces` in keeper's configuration {admits}; nothing was changed on the bucket. Ask the platform team to allow adoption from this namespace, or pick another bucket name"
    ))
}

/// Whether the backend bucket must be created or converged: not yet Ready, a spec change, or a
/// bucket name not recorded. Otherwise keeper trusts its record and only refreshes usage, so a
/// steady bucket costs no backend call beyond that.
pub fn needs_ensure(status: &S3BucketStatus, generation: Option<i64>, bucket: &str) -> bool {
    !matches!(
        status.phase,
        Some(BucketPhase::Ready | BucketPhase::Draining)
    ) || status.observed_generation != generation
        || status.bucket_name.as_deref() != Some(bucket)
}

/// Whether a bucket keeper recorded as made (`status.bucketName`), now missing, may be created
/// again on the store keeper reaches: only on the store recorded with it, one a person confirmed,
/// or when none was recorded (a bucket an older keeper made, not seen since). Audit 2, N5: a
/// missing bucket on another store (a changed endpoint, a DNS switch, a proxy answering 404) is
/// not "deleted outside keeper", and an empty one in its place would look Ready to applications.
pub fn recreate_bucket(
    bucket: &str,
    recorded: Option<&str>,
    live: &str,
    confirmed: Option<&str>,
    (namespace, name): (&str, &str),
) -> Result<(), String> {
    identity::on_missing(
        identity::OnMissing::Recreate,
        &format!("bucket {bucket:?}"),
        recorded,
        live,
        confirmed,
        ("s3bucket", namespace, name),
    )
}

/// Nothing can exist on the backend for a resource that never recorded a bucket name and whose
/// tenant cannot be reached: deletion need not wait for the tenant.
pub fn never_created(bucket: &S3Bucket) -> bool {
    bucket
        .status
        .as_ref()
        .is_none_or(|s| s.bucket_name.is_none())
}

/// Whether the bucket's last reconcile ended Ready (its status says so): its Secret was
/// published and its keys checked then.
pub fn was_ready(bucket: &S3Bucket) -> bool {
    bucket
        .status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.conditions, conditions::READY))
}

/// The event of a resource released with `deletionPolicy: Retain`.
pub const RETAINED_MESSAGE: &str =
    "deletionPolicy is Retain: the bucket and its objects stay on the backend";

/// The `DeletionBlocked` message: the object count and the exact command that unblocks it (a
/// drain is a request per value: a value handled before asks for nothing, so the command sets a
/// fresh one).
pub fn not_empty_message(bucket: &S3Bucket, objects: i64) -> String {
    format!(
        "the bucket holds {objects} objects and is not deleted while it holds data; to delete every object and then the bucket, run: kubectl annotate --overwrite s3bucket {} {DRAIN_ANNOTATION}=$(date +%s) -n {} (a drain is a request per value: a value keeper handled before does nothing)",
        bucket.name_any(),
        bucket.namespace().unwrap_or_default()
    )
}

/// Why a bucket whose namespace is being deleted has no credentials Secret: nobody is left to
/// deliver keys to (the namespace's workloads go with it) and the API refuses new content there.
/// No key is issued or published for it then, and the Secret is left as it is. (A bucket being
/// deleted never gets this far: its reconcile is its cleanup, which writes no credentials.)
pub const WITHHELD_NAMESPACE_TERMINATING: &str = "its namespace is being deleted: keeper writes no credentials Secret there (the API refuses new content in it)";

/// Keys in a credentials Secret (keeper's own names first, then the AWS ones).
pub fn keys_from(data: &BTreeMap<String, String>) -> Option<Keys> {
    let get = |a: &str, b: &str| data.get(a).or_else(|| data.get(b)).cloned();
    Some(Keys {
        access_key_id: get("accessKeyId", "AWS_ACCESS_KEY_ID")?,
        secret_access_key: get("secretAccessKey", "AWS_SECRET_ACCESS_KEY")?,
    })
}

/// The content of `<name>-credentials`, under keeper's names and the AWS environment names so
/// that applications can take it with `envFrom`.
pub fn secret_data(
    keys: &Keys,
    endpoint: &str,
    region: &str,
    bucket: &str,
) -> BTreeMap<String, String> {
    [
        ("accessKeyId", keys.access_key_id.as_str()),
        ("secretAccessKey", keys.secret_access_key.as_str()),
        ("endpoint", endpoint),
        ("region", region),
        ("bucket", bucket),
        ("AWS_ACCESS_KEY_ID", keys.access_key_id.as_str()),
        ("AWS_SECRET_ACCESS_KEY", keys.secret_access_key.as_str()),
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_REGION", region),
        ("S3_BUCKET", bucket),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::S3TenantStatus;

    pub(crate) fn bucket(name: &str) -> S3Bucket {
        crate::test_support::bucket(name, "t")
    }

    fn tenant(namespace: &str, phase: Option<TenantPhase>) -> S3Tenant {
        let mut t = crate::test_support::tenant("t", serde_json::json!({"provider": "default"}));
        t.metadata.namespace = Some(namespace.into());
        t.status = Some(S3TenantStatus {
            phase,
            ..Default::default()
        });
        t
    }

    #[test]
    fn the_tenant_must_exist_be_ready_and_share_the_namespace() {
        let b = bucket("b");
        assert!(
            matches!(tenant_gate(&b, None, false), TenantGate::Wait("TenantNotFound", m) if m.contains("\"t\"") && m.contains("\"ns\""))
        );
        assert!(matches!(
            tenant_gate(&b, Some(&tenant("other", Some(TenantPhase::Ready))), false),
            TenantGate::Wait("TenantInOtherNamespace", _)
        ));
        assert!(matches!(
            tenant_gate(&b, Some(&tenant("ns", Some(TenantPhase::Pending))), false),
            TenantGate::Wait("TenantNotReady", m) if m.contains("Pending")
        ));
        assert!(matches!(
            tenant_gate(&b, Some(&tenant("ns", None)), false),
            TenantGate::Wait("TenantNotReady", _)
        ));
        let mut deleting = tenant("ns", Some(TenantPhase::Ready));
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        let TenantGate::Wait("TenantDeleting", message) = tenant_gate(&b, Some(&deleting), false)
        else {
            panic!("a live bucket of a deleting tenant waits");
        };
        assert!(
            message.contains("kubectl delete s3bucket") && message.contains("keeper.dev/drain"),
            "{message}"
        );
        assert_eq!(
            tenant_gate(&b, Some(&tenant("ns", Some(TenantPhase::Ready))), false),
            TenantGate::Ready
        );
        // Cleanup needs only the tenant: one being deleted waits for its buckets.
        assert_eq!(tenant_gate(&b, Some(&deleting), true), TenantGate::Ready);
        assert!(matches!(
            tenant_gate(&b, None, true),
            TenantGate::Wait("TenantNotFound", _)
        ));
        assert!(matches!(
            tenant_gate(&b, Some(&tenant("other", Some(TenantPhase::Ready))), true),
            TenantGate::Wait("TenantInOtherNamespace", _)
        ));
    }

    #[test]
    fn a_steady_ready_bucket_needs_no_convergence() {
        let ready = S3BucketStatus {
            phase: Some(BucketPhase::Ready),
            observed_generation: Some(2),
            bucket_name: Some("ns-b".into()),
            ..Default::default()
        };
        assert!(!needs_ensure(&ready, Some(2), "ns-b"));
        assert!(needs_ensure(&ready, Some(3), "ns-b"), "spec changed");
        assert!(needs_ensure(&ready, Some(2), "other"), "name not recorded");
        let failed = S3BucketStatus {
            phase: Some(BucketPhase::Failed),
            ..ready.clone()
        };
        assert!(needs_ensure(&failed, Some(2), "ns-b"));
        assert!(needs_ensure(&S3BucketStatus::default(), Some(1), "ns-b"));
    }

    #[test]
    fn never_created_means_no_recorded_bucket_name() {
        let mut b = bucket("b");
        assert!(never_created(&b));
        b.status = Some(S3BucketStatus {
            bucket_name: Some("ns-b".into()),
            ..Default::default()
        });
        assert!(!never_created(&b));
    }

    #[test]
    fn was_ready_reads_the_ready_condition_of_the_last_status() {
        let mut b = bucket("b");
        assert!(!was_ready(&b), "no status");
        let mut status = S3BucketStatus::default();
        conditions::set(
            &mut status.conditions,
            conditions::READY,
            false,
            "Creating",
            "",
            None,
        );
        b.status = Some(status.clone());
        assert!(!was_ready(&b));
        conditions::set(
            &mut status.conditions,
            conditions::READY,
            true,
            "BucketReady",
            "",
            None,
        );
        b.status = Some(status);
        assert!(was_ready(&b));
    }

    #[test]
    fn the_blocked_message_carries_the_count_and_the_command() {
        let message = not_empty_message(&bucket("b"), 2500);
        assert!(message.contains("2500 objects"));
        assert!(message.contains(
            "kubectl annotate --overwrite s3bucket b keeper.dev/drain=$(date +%s) -n ns"
        ));
    }

    #[test]
    fn secret_data_has_both_name_sets_and_round_trips_keys() {
        let keys = Keys {
            access_key_id: "AK".into(),
            secret_access_key: "SK".into(),
        };
        let data = secret_data(&keys, "https://s3", "us-east-1", "ns-b");
        assert_eq!(data.len(), 10);
        assert_eq!(data["AWS_ENDPOINT_URL"], "https://s3");
        assert_eq!(data["S3_BUCKET"], "ns-b");
        assert_eq!(data["AWS_SECRET_ACCESS_KEY"], "SK");
        assert_eq!(keys_from(&data), Some(keys));
        let aws_only: BTreeMap<String, String> = [
            ("AWS_ACCESS_KEY_ID".to_string(), "A".to_string()),
            ("AWS_SECRET_ACCESS_KEY".to_string(), "S".to_string()),
        ]
        .into();
        assert_eq!(keys_from(&aws_only).unwrap().access_key_id, "A");
        assert_eq!(keys_from(&BTreeMap::new()), None);
    }

    #[test]
    fn adoption_is_bounded_by_the_tenant_account_or_by_the_namespaces_the_provider_names() {
        use crate::namespaces::AllowedNamespaces;
        assert_eq!(
            adoption(false, AdoptionScope::Namespaces(None), "s3", "a", None),
            Adoption::NotAsked
        );
        assert_eq!(
            adoption(true, AdoptionScope::TenantAccount, "grid", "a", None),
            Adoption::Allowed
        );
        let Adoption::Refused(message) =
            adoption(true, AdoptionScope::Namespaces(None), "s3", "a", None)
        else {
            panic!("adoption is off without the setting");
        };
        assert!(message.contains("adoption.allowedNamespaces"), "{message}");
        assert!(
            message.contains("\"a\"") && message.contains("\"s3\""),
            "{message}"
        );
        let allowed = AllowedNamespaces {
            names: vec!["platform".into()],
            selector: Some(
                serde_json::from_value(serde_json::json!({"matchLabels": {"adopt": "yes"}}))
                    .unwrap(),
            ),
        };
        let scope = AdoptionScope::Namespaces(Some(&allowed));
        assert_eq!(
            adoption(true, scope, "s3", "platform", None),
            Adoption::Allowed
        );
        let labelled = BTreeMap::from([("adopt".to_string(), "yes".to_string())]);
        assert_eq!(
            adoption(true, scope, "s3", "team", Some(&labelled)),
            Adoption::Allowed
        );
        let Adoption::Refused(message) =
            adoption(true, scope, "s3", "team", Some(&BTreeMap::new()))
        else {
            panic!("an unlisted, unlabelled namespace may not adopt");
        };
        assert!(
            message.contains("the namespaces platform and namespaces labelled adopt=yes"),
            "{message}"
        );
    }

    #[test]
    fn a_missing_recorded_bucket_is_created_again_only_on_its_store_or_a_confirmed_one() {
        let at = ("ns", "b");
        assert_eq!(recreate_bucket("x", Some("s3:a"), "s3:a", None, at), Ok(()));
        assert_eq!(recreate_bucket("x", None, "s3:b", None, at), Ok(()));
        assert_eq!(
            recreate_bucket("x", Some("s3:a"), "s3:b", Some("s3:b"), at),
            Ok(())
        );
        let refused = recreate_bucket("x", Some("s3:a"), "s3:b", None, at).unwrap_err();
        assert!(
            refused.contains(
                "kubectl annotate s3bucket b -n ns keeper.dev/confirm-backend-identity=s3:b"
            ),
            "{refused}"
        );
    }
}
