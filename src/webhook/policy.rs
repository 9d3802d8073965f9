//! What the webhook decides: pure verdicts for a tenant's deletion and a bucket's creation, and
//! the lookups they need (fail open: any lookup error admits).

use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};

use crate::api::{S3Bucket, S3Tenant};
use crate::cluster::Kube;
use crate::controllers::tenant::{
    BUCKET_REMOVAL_GUIDANCE, DeletionGate, bucket_resources, deletion_gate,
    deletion_protection_message,
};

/// What the webhook answers, decided from the objects alone.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Admit, and show the user this warning.
    Warn(String),
    Deny(String),
}

/// DELETE of a tenant, given how many S3Bucket resources reference it.
pub fn tenant_delete(tenant: &S3Tenant, buckets: usize) -> Verdict {
    let name = tenant.name_any();
    match deletion_gate(&tenant.spec) {
        DeletionGate::Protected => Verdict::Deny(deletion_protection_message(
            &name,
            &tenant.namespace().unwrap_or_default(),
        )),
        DeletionGate::Retain | DeletionGate::Proceed if buckets == 0 => Verdict::Allow,
        DeletionGate::Retain | DeletionGate::Proceed => Verdict::Warn(format!(
            "S3Tenant {name} still holds {buckets} bucket(s); `kubectl describe s3tenant {name} -n {}` \
             names them (condition DeletionBlocked). {} The tenant is deleted as soon as no \
             bucket remains.",
            tenant.namespace().unwrap_or_default(),
            BUCKET_REMOVAL_GUIDANCE
        )),
    }
}

/// Who kube-controller-manager's namespace controller deletes as: its own service account, or the
/// controller manager's user when it runs without per-controller credentials.
pub(super) const NAMESPACE_CONTROLLER_USERS: [&str; 2] = [
    "system:serviceaccount:kube-system:namespace-controller",
    "system:kube-controller-manager",
];

/// Whether a DELETE comes from the namespace controller emptying a namespace being deleted.
pub fn from_namespace_deletion(username: Option<&str>) -> bool {
    username.is_some_and(|u| NAMESPACE_CONTROLLER_USERS.contains(&u))
}

/// DELETE of a protected tenant by the namespace controller: admitted (the finalizer holds it).
pub fn protected_tenant_in_namespace_deletion(tenant: &S3Tenant) -> Verdict {
    Verdict::Warn(format!(
        "the namespace is being deleted: the S3Tenant's finalizer keeps its account until \
         deletionProtection is lifted. {}",
        deletion_protection_message(&tenant.name_any(), &tenant.namespace().unwrap_or_default())
    ))
}

/// CREATE of a bucket, given its tenant if it exists.
pub fn bucket_create(bucket: &S3Bucket, tenant: Option<&S3Tenant>) -> Verdict {
    match tenant {
        Some(t) if t.metadata.deletion_timestamp.is_some() => Verdict::Deny(format!(
            "S3Tenant {} is being deleted: no bucket can be created in it. S3Bucket {} must \
             reference another tenant, or be created once the tenant is recreated.",
            t.name_any(),
            bucket.name_any()
        )),
        _ => Verdict::Allow,
    }
}

fn typed<K: serde::de::DeserializeOwned>(object: Option<&DynamicObject>) -> Option<K> {
    serde_json::to_value(object?)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
}

/// The verdict for one request; lookups that fail admit (fail open), with a log line.
///
/// The lookups go through keeper's seam ([`Kube::tenant`], [`Kube::buckets`]), which reads the
/// process's informer stores (the same the controllers use) once they have synced, so a review
/// costs the API server nothing, whoever sends it: the webhook does not authenticate its caller.
/// Until the first listing is in (seconds after a start) a store is empty, not authoritative,
/// and the seam reads from the API instead: answering from an empty store would admit a bucket
/// into a tenant being deleted and delete a tenant with buckets without the warning, and
/// admitting without a lookup (failing open) would do the same; the live read keeps the webhook
/// as right at a start as after it, for the short while before the stores sync.
pub(super) async fn judge(kube: &dyn Kube, request: &AdmissionRequest<DynamicObject>) -> Verdict {
    // Both kinds are namespaced: a request without a namespace, or about an object of another
    // namespace, did not come from the API server, and an empty namespace would make the lookups
    // below cluster-wide.
    let namespace = match request.namespace.as_deref() {
        Some(namespace) if !namespace.is_empty() => namespace.to_string(),
        _ => return Verdict::Allow,
    };
    let in_namespace = |object: Option<&DynamicObject>| {
        object.and_then(|o| o.metadata.namespace.as_deref()) == Some(namespace.as_str())
    };
    match (request.kind.kind.as_str(), &request.operation) {
        ("S3Tenant", Operation::Delete) => {
            if !in_namespace(request.old_object.as_ref()) {
                return Verdict::Allow;
            }
            let Some(tenant) = typed::<S3Tenant>(request.old_object.as_ref()) else {
                return Verdict::Allow;
            };
            // A protected tenant is denied whatever its buckets: no lookup needed.
            if deletion_gate(&tenant.spec) == DeletionGate::Protected {
                if from_namespace_deletion(request.user_info.username.as_deref()) {
                    return protected_tenant_in_namespace_deletion(&tenant);
                }
                return tenant_delete(&tenant, 0);
            }
            match bucket_resources(kube, &namespace, &tenant.name_any()).await {
                Ok(buckets) => tenant_delete(&tenant, buckets.len()),
                Err(e) => {
                    tracing::warn!(error = %e, tenant = %tenant.name_any(), "webhook cannot list buckets; admitting");
                    Verdict::Allow
                }
            }
        }
        ("S3Bucket", Operation::Create) => {
            if !in_namespace(request.object.as_ref()) {
                return Verdict::Allow;
            }
            let Some(bucket) = typed::<S3Bucket>(request.object.as_ref()) else {
                return Verdict::Allow;
            };
            match kube.tenant(&namespace, &bucket.spec.tenant_ref.name).await {
                Ok(tenant) => bucket_create(&bucket, tenant.as_deref()),
                Err(e) => {
                    tracing::warn!(error = %e, bucket = %bucket.name_any(), "webhook cannot read the tenant; admitting");
                    Verdict::Allow
                }
            }
        }
        _ => Verdict::Allow,
    }
}
