//! F16: the create intent, recorded before keeper creates a bucket.

use super::super::backend::{BucketBackend, Connect, Owner};
use super::super::plan::lifecycle::{self};
use super::super::{CREATE_INTENT_ANNOTATION, Error, S3BucketReconciler};
use super::{Resolved, View, resolve};
use crate::api::{S3Bucket, S3BucketStatus};
use crate::runtime::Context;

/// F16: before keeper creates a bucket it records so, so that when the create succeeds and the
/// tagging right after it fails, the next reconcile finds an untagged bucket it knows to be its
/// own and tags it, instead of refusing it as someone else's forever. Only a bucket that does not
/// exist yet gets an intent. Whether `view`'s bucket needs one now:
async fn needs_intent<B: BucketBackend>(backend: &B, view: &View<'_>) -> Result<bool, Error> {
    let status = view.obj.status.clone().unwrap_or_default();
    let desired = &view.desired;
    Ok(!desired.recorded
        && !desired.intent
        && lifecycle::needs_ensure(&status, view.obj.metadata.generation, &desired.name)
        && backend.owner(desired).await? == Owner::Missing)
}

/// The intent as an annotation written with the finalizer, in its patch (a write saved); none
/// when the bucket cannot be looked at yet (its tenant not ready, its backend failing), in which
/// case [`record_create_intent`] records it in status before the create.
pub async fn intent_with_finalizer<C: Connect>(
    cx: &Context<S3BucketReconciler<C>>,
    obj: &S3Bucket,
) -> Vec<(&'static str, String)> {
    let Ok(Ok(Resolved { backend, view, .. })) = resolve(cx, obj).await else {
        return Vec::new();
    };
    match needs_intent(&backend, &view).await {
        Ok(true) => vec![(CREATE_INTENT_ANNOTATION, view.desired.name.clone())],
        Ok(false) => Vec::new(),
        Err(e) => {
            tracing::debug!(error = %e, "no create intent with the finalizer");
            Vec::new()
        }
    }
}

/// The intent in status (`createIntent`, written now, not with the outcome) when the finalizer
/// did not bring one.
pub(super) async fn record_create_intent<C: Connect>(
    cx: &Context<S3BucketReconciler<C>>,
    backend: &C::Backend,
    view: &mut View<'_>,
) -> Result<(), Error> {
    if !needs_intent(backend, view).await? {
        return Ok(());
    }
    let desired = &view.desired;
    let status = view.obj.status.clone().unwrap_or_default();
    let status = S3BucketStatus {
        create_intent: Some(desired.name.clone()),
        ..status
    };
    cx.checkpoint(view.obj, &status).await?;
    view.desired.intent = true;
    Ok(())
}
