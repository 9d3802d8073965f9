//! How a controller reaches the backend it acts through: one trait, [`Connect`], for every
//! controller. A reconciler is generic over its connector; in production that is the controller's
//! `Live`, built from the provider registry ([`crate::providers`]) in [`Shared`], and in tests a
//! fake that implements the same trait and hands out an in-memory backend. The reconcile asks for
//! a backend where it needs one (`connector.connect(&cx.shared, &target)`), so what it reads
//! through the Kube seam before and after is the same code in both.

use std::future::Future;

use super::Shared;

/// Signs in to a backend for `To`: what the controller's object leads to (a bucket's tenant on
/// its provider, a tenant's provider, a database), so that the connector needs nothing else
/// than the shared clients. `Error` is the controller's own (the shared policy classifies it) or,
/// where connecting can also mean "not yet" (a bucket whose tenant is being set up), one that
/// says so.
pub trait Connect<To: ?Sized>: Send + Sync + 'static {
    /// What the controller acts through once connected.
    type Backend: Send + Sync;
    type Error;

    fn connect(
        &self,
        shared: &Shared,
        to: &To,
    ) -> impl Future<Output = Result<Self::Backend, Self::Error>> + Send;
}
