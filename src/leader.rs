//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager), so that of several
//! keeper replicas exactly one reconciles. Every replica keeps its caches warm and serves the
//! webhook and `/readyz`; only the leader's controllers act. A replica that becomes leader
//! reconciles every object at once (the previous leader may have died mid-way).

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use kube_lease_manager::LeaseManagerBuilder;
use prometheus::IntGauge;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// How long a lease holds without renewal. A standby takes over at most this long after the
/// leader stopped renewing (plus its own polling), so keep it short.
pub const LEASE_DURATION_SECONDS: u64 = 15;
/// How long before expiry the leader renews.
pub const LEASE_RENEW_BEFORE_SECONDS: u64 = 5;

/// Whether this process leads, as a watch channel the controllers read.
#[derive(Clone)]
pub struct Leadership {
    leading: watch::Receiver<bool>,
}

impl Leadership {
    /// Leader election off: this process always leads.
    pub fn always() -> Self {
        let (sender, leading) = watch::channel(true);
        // The receiver keeps the last value after the sender is gone.
        drop(sender);
        Leadership { leading }
    }

    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// Yields once every time this process becomes leader (and once at start if it already is),
    /// so the controller reconciles every object on taking over.
    pub fn acquired(&self) -> impl Stream<Item = ()> + Send + 'static {
        let mut leading = self.leading.clone();
        leading.mark_changed();
        futures::stream::unfold(leading, |mut leading| async move {
            loop {
                leading.changed().await.ok()?;
                if *leading.borrow_and_update() {
                    return Some(((), leading));
                }
            }
        })
    }
}

/// Where and as whom to take part in the election.
pub struct Election {
    pub namespace: String,
    pub lease_name: String,
    pub identity: String,
}

/// Registers `keeper_leader`, at 0. Exported by every process, with leader election or without
/// (then always 1: the process reconciles), so that "no replica leads" is an alert that means it.
pub fn leader_gauge(metrics: &Metrics) -> anyhow::Result<IntGauge> {
    let gauge = IntGauge::new(
        "keeper_leader",
        "1 while this keeper process is the leader (the one that reconciles), else 0; always 1 without leader election.",
    )?;
    metrics.register(gauge.clone());
    Ok(gauge)
}

/// Joins the election and keeps taking part until `shutdown`, then releases the lease so a
/// standby takes over at once. `keeper_leader` shows the state.
pub async fn elect(
    client: kube::Client,
    election: Election,
    metrics: &Metrics,
    shutdown: CancellationToken,
) -> anyhow::Result<(Leadership, tokio::task::JoinHandle<()>)> {
    let gauge = leader_gauge(metrics)?;
    let manager = LeaseManagerBuilder::new(client, &election.lease_name)
        .with_namespace(&election.namespace)
        .with_identity(&election.identity)
        .with_duration(LEASE_DURATION_SECONDS)
        .with_grace(LEASE_RENEW_BEFORE_SECONDS)
        .build()
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "leader election: cannot use Lease {}/{}: {e}",
                election.namespace,
                election.lease_name
            )
        })?;
    tracing::info!(
        lease = %format!("{}/{}", election.namespace, election.lease_name),
        identity = %election.identity,
        "joined leader election; waiting for the lease"
    );
    let (sender, leading) = watch::channel(false);
    let task = tokio::spawn(async move {
        let manager = Arc::new(manager);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                changed = manager.changed() => match changed {
                    Ok(leader) => {
                        gauge.set(i64::from(leader));
                        if leader {
                            tracing::info!("became the leader: reconciling");
                        } else {
                            tracing::warn!("lost the lease: no longer reconciling");
                        }
                        let _ = sender.send(leader);
                    }
                    Err(e) => {
                        // The lease could not be read or renewed: keep the last state (the lease
                        // manager steps down once the lease is seen lost) and try again.
                        tracing::warn!(error = %e, "leader election: lease not renewed; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                },
            }
        }
        let _ = sender.send(false);
        gauge.set(0);
        if let Err(e) = manager.release().await {
            tracing::warn!(error = %e, "could not release the lease; it expires by itself");
        } else {
            tracing::info!("released the lease");
        }
    });
    Ok((Leadership { leading }, task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn without_election_this_process_always_leads_and_reconciles_all_once() {
        let leadership = Leadership::always();
        assert!(leadership.is_leader());
        let acquired: Vec<()> = leadership.acquired().collect().await;
        assert_eq!(
            acquired.len(),
            1,
            "one full reconcile at start, then the stream ends"
        );
    }

    #[tokio::test]
    async fn each_takeover_triggers_one_full_reconcile() {
        let (sender, leading) = watch::channel(false);
        let leadership = Leadership { leading };
        let mut acquired = Box::pin(leadership.acquired());
        sender.send(true).unwrap();
        acquired.next().await.unwrap();
        assert!(leadership.is_leader());
        sender.send(false).unwrap();
        assert!(!leadership.is_leader());
        sender.send(true).unwrap();
        acquired.next().await.unwrap();
        drop(sender);
        assert!(acquired.next().await.is_none());
    }
}
