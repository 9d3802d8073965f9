//! Test helpers: a [`Shared`] over the in-memory [`FakeKube`], and one reconcile through the
//! whole shared flow (finalizer, outcome writing, error policy), so every controller's reconcile
//! is unit-tested the same way, without an API server.

use std::sync::Arc;

use kube::runtime::controller::Action;

use super::{Context, Error, Reconciler, Shared};
use crate::backends::rds::RdsBackend;
use crate::cluster::fake::FakeKube;
use crate::config::OperatorConfig;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::providers::Providers;

/// A configuration with one provider of each kind: `default` (StorageGRID, admin Secret
/// `grid-admin`) and `store` (S3-compatible without an identity API, keys in Secret `store-creds`).
pub const TWO_PROVIDERS: &str = "providers:
  default:
    storageGrid:
      adminEndpoint: https://grid.example.com
      adminCredentialsSecret: {name: grid-admin}
      s3Endpoint: https://s3.example.com/
      region: eu-1
  store:
    s3Compatible:
      endpoint: https://store.example.com
      region: us-east-1
      credentialsSecret: {name: store-creds}
      sharedCredentials: true
";

/// A client that is never connected: the fake seam answers every call.
fn unconnected_client() -> kube::Client {
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("valid URL"));
    kube::Client::try_from(config).expect("client builds without connecting")
}

/// Shared pieces over `kube` with `config`.
pub fn shared(kube: Arc<FakeKube>, config: OperatorConfig) -> Shared {
    let metrics = Arc::new(Metrics::new());
    let client = unconnected_client();
    Shared {
        informers: Arc::new(crate::cluster::informer::Informers::new(
            client.clone(),
            crate::cluster::informer::Scope::Cluster,
        )),
        client,
        providers: Arc::new(
            Providers::build(
                &config,
                metrics.clone(),
                RdsBackend::unconnected(metrics.clone()),
            )
            .expect("test providers build"),
        ),
        config: Arc::new(config),
        metrics,
        operator_namespace: "keeper-system".to_string(),
        leadership: Leadership::always(),
        kube,
    }
}

/// Runs one reconcile of `obj` through the shared flow; its requeue, if it asks for one, as
/// kube's controller would have it.
pub async fn reconcile<R: Reconciler>(
    cx: &Arc<Context<R>>,
    obj: R::Resource,
) -> Result<Action, Error<R::Error>> {
    let after = super::reconcile(Arc::new(obj), cx.clone()).await?;
    Ok(after.map_or_else(Action::await_change, Action::requeue))
}

/// The condition of `type_` among `conditions`, which a test expects to be there.
pub fn condition<'a>(
    conditions: &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {conditions:#?}"))
}

/// The condition of `type_` among `conditions`, to change in a test.
pub fn condition_mut<'a>(
    conditions: &'a mut [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> &'a mut k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    conditions
        .iter_mut()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"))
}
