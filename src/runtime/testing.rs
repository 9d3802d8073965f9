//! Test helpers: a [`Shared`] over the in-memory [`FakeKube`], and one reconcile through the
//! whole shared flow (finalizer, outcome writing, error policy), so every controller's reconcile
//! is unit-tested the same way, without an API server.

use std::sync::{Arc, Mutex};

use kube::runtime::controller::Action;
use tokio::sync::Notify;

use super::cluster::fake::FakeKube;
use super::{Context, Error, Reconciler, Shared};
use crate::backends::rds::RdsBackend;
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
        informers: Arc::new(crate::runtime::informer::Informers::new(client.clone())),
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

/// Runs one reconcile of `obj` through the shared flow.
pub async fn reconcile<R: Reconciler>(
    cx: &Arc<Context<R>>,
    obj: R::Resource,
) -> Result<Action, Error<R::Error>> {
    super::reconcile(Arc::new(obj), cx.clone()).await
}

/// A call of a fake backend stopped after it acted, so that a test can run another reconcile in
/// between, as a second keeper would.
#[derive(Clone, Default)]
pub struct Pause {
    reached: Arc<Notify>,
    release: Arc<Notify>,
}

impl Pause {
    /// Waits until the call has acted and stopped.
    pub async fn reached(&self) {
        self.reached.notified().await;
    }

    /// Lets the call return.
    pub fn release(&self) {
        self.release.notify_one();
    }
}

/// The pauses a fake backend's calls take, each once.
#[derive(Default)]
pub struct Pauses(Mutex<Vec<(&'static str, Pause)>>);

impl Pauses {
    /// The next `call` stops once it has acted, until the returned pause is released.
    pub fn after(&self, call: &'static str) -> Pause {
        let pause = Pause::default();
        self.0.lock().expect("lock").push((call, pause.clone()));
        pause
    }

    /// Called by the fake once `call` has acted.
    pub async fn stop_if_asked(&self, call: &str) {
        let pause = {
            let mut pauses = self.0.lock().expect("lock");
            let at = pauses.iter().position(|(c, _)| *c == call);
            at.map(|at| pauses.remove(at).1)
        };
        if let Some(pause) = pause {
            pause.reached.notify_one();
            pause.release.notified().await;
        }
    }
}
