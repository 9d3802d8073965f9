//! F16: the create intent, recorded in status before keeper creates a bucket.

use super::super::backend::{BucketBackend, Connector, Owner};
use super::super::plan::lifecycle::{self};
use super::super::{Error, S3BucketReconciler};
use super::View;
use crate::api::S3BucketStatus;
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

/// Records the intent in status (`createIntent`, written now, before the create, not with the
/// outcome). Status only (audit 2, MEDIUM 4): the intent makes an untagged bucket keeper's, so it
/// must live where those who may edit the S3Bucket cannot write it; an annotation (as keeper
/// wrote with its finalizer before, a write saved) could be set by any of them to take someone's
/// bucket past the adoption rules. One API write more per new bucket.
pub(super) async fn record_create_intent<C: Connector>(
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
