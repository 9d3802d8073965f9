//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager), so that of several
//! keeper replicas exactly one reconciles. Every replica keeps its caches warm and serves the
//! webhook and `/readyz`; only the leader's controllers act. A replica that becomes leader
//! reconciles every object at once (the previous leader may have died mid-way).

use std::time::{Duration, Instant};

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

    /// Follows `leading` as the election loop publishes it (tests).
    #[cfg(test)]
    pub fn following(leading: watch::Receiver<bool>) -> Self {
        Leadership { leading }
    }

    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// Completes when this process does not lead (at once if it does not now); never without
    /// leader election.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut leading = self.leading.clone();
        async move {
            if leading.wait_for(|leads| !*leads).await.is_err() {
                // No election (`Leadership::always`): the sender is gone and this process leads
                // for good. A stopping election says "not leader" before it goes.
                std::future::pending::<()>().await;
            }
        }
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

/// How long one request about the lease may take before it counts as failed.
const LEASE_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The client the election talks to the API with: each request fails within
/// [`LEASE_REQUEST_TIMEOUT`] and is not retried by the client (kube's default retries a 503 or
/// 429 up to 15 times with growing waits, minutes in all), so that a renewal that cannot be made
/// is known in time to step down before the lease expires.
pub fn lease_client(mut config: kube::Config) -> anyhow::Result<kube::Client> {
    config.default_retry = false;
    config.connect_timeout = Some(LEASE_REQUEST_TIMEOUT);
    config.read_timeout = Some(LEASE_REQUEST_TIMEOUT);
    config.write_timeout = Some(LEASE_REQUEST_TIMEOUT);
    kube::Client::try_from(config).map_err(|e| anyhow::anyhow!("leader election client: {e}"))
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

/// Joins the election and keeps taking part until `resign` (once the controllers stopped),
/// then releases the lease so a standby takes over at once. `keeper_leader` shows the state.
pub async fn elect(
    client: kube::Client,
    election: Election,
    metrics: &Metrics,
    resign: CancellationToken,
) -> anyhow::Result<(Leadership, tokio::task::JoinHandle<()>)> {
    let gauge = leader_gauge(metrics)?;
    let lease = format!("{}/{}", election.namespace, election.lease_name);
    let join = move || {
        LeaseManagerBuilder::new(client.clone(), &election.lease_name)
            .with_namespace(&election.namespace)
            .with_identity(&election.identity)
            .with_duration(LEASE_DURATION_SECONDS)
            .with_grace(LEASE_RENEW_BEFORE_SECONDS)
            .build()
    };
    let mut manager = join()
        .await
        .map_err(|e| anyhow::anyhow!("leader election: cannot use Lease {lease}: {e}"))?;
    tracing::info!(%lease, "joined leader election; waiting for the lease");
    let (sender, leading) = watch::channel(false);
    let publish = move |leader: bool| {
        gauge.set(i64::from(leader));
        let _ = sender.send(leader);
    };
    let task = tokio::spawn(async move {
        let mut renewal = Renewal::default();
        let mut leader = false;
        'elect: loop {
            let answer = tokio::select! {
                () = resign.cancelled() => break,
                changed = manager.changed() => changed,
            };
            match renewal.answered(answer.as_ref().ok().copied(), leader, Instant::now()) {
                Verdict::Lead(now_leader) => {
                    if now_leader {
                        tracing::info!("became the leader: reconciling");
                    } else {
                        tracing::warn!("lost the lease: no longer reconciling");
                    }
                    leader = now_leader;
                    publish(leader);
                }
                Verdict::Retry => {
                    if let Err(e) = &answer {
                        tracing::warn!(error = %e, "leader election: lease not renewed; retrying");
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Verdict::StepDown => {
                    tracing::warn!(
                        "leader election: the lease could not be renewed and may expire any moment, after which another replica may lead: stepping down (reconciles under way stop, no new ones start) until this process holds it again"
                    );
                    leader = false;
                    publish(false);
                    // A new manager starts from "not leader": its first look reports the lease
                    // held again (this identity still holds it) or waits to acquire it. The old
                    // one would report nothing, as it never saw the lease lost.
                    manager = loop {
                        match join().await {
                            Ok(manager) => break manager,
                            Err(e) => {
                                tracing::warn!(error = %e, "leader election: cannot use the Lease; retrying");
                                tokio::select! {
                                    () = resign.cancelled() => break 'elect,
                                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                                }
                            }
                        }
                    };
                }
            }
        }
        publish(false);
        if let Err(e) = manager.release().await {
            tracing::warn!(error = %e, "could not release the lease; it expires by itself");
        } else {
            tracing::info!("released the lease");
        }
    });
    Ok((Leadership { leading }, task))
}

/// What the election loop does with one answer about the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// The lease holder changed: this process leads, or no longer does.
    Lead(bool),
    /// The lease could not be read or renewed: look again.
    Retry,
    /// The lease has not been renewed for so long that it may have expired, and a standby may
    /// lead already: stop reconciling (audit 2, MEDIUM 6: a leader cut off from the API server
    /// but not from its backends must not go on draining and deleting beside the new leader).
    StepDown,
}

/// Since when the lease has not been renewed.
#[derive(Debug, Default)]
struct Renewal {
    failing_since: Option<Instant>,
}

impl Renewal {
    /// `answer`: the lease manager's report (`Some(leads)`) or its failure (`None`). The manager
    /// renews the lease [`LEASE_RENEW_BEFORE_SECONDS`] before it expires and a failed request
    /// is known within [`LEASE_REQUEST_TIMEOUT`], so failures for the difference mean the lease
    /// may expire any moment (by this process's clock).
    fn answered(&mut self, answer: Option<bool>, leading: bool, now: Instant) -> Verdict {
        let Some(leads) = answer else {
            let since = *self.failing_since.get_or_insert(now);
            let renew_window = Duration::from_secs(LEASE_RENEW_BEFORE_SECONDS)
                .saturating_sub(LEASE_REQUEST_TIMEOUT);
            if leading && now.duration_since(since) >= renew_window {
                self.failing_since = None;
                return Verdict::StepDown;
            }
            return Verdict::Retry;
        };
        self.failing_since = None;
        Verdict::Lead(leads)
    }
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

    #[test]
    fn a_leader_steps_down_once_the_lease_may_have_expired_and_a_standby_never_does() {
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let mut renewal = Renewal::default();
        assert_eq!(
            renewal.answered(Some(true), false, at(0)),
            Verdict::Lead(true)
        );
        // Failures for less than the renewal window less a request's timeout: still leading.
        assert_eq!(renewal.answered(None, true, at(1)), Verdict::Retry);
        assert_eq!(renewal.answered(None, true, at(3)), Verdict::Retry);
        // A renewal in between starts the count again.
        assert_eq!(
            renewal.answered(Some(true), true, at(4)),
            Verdict::Lead(true)
        );
        assert_eq!(renewal.answered(None, true, at(5)), Verdict::Retry);
        assert_eq!(renewal.answered(None, true, at(7)), Verdict::Retry);
        assert_eq!(renewal.answered(None, true, at(8)), Verdict::StepDown);
        // Stepped down, it waits for the lease like a standby; a standby has nothing to give up.
        let mut standby = Renewal::default();
        assert_eq!(standby.answered(None, false, at(0)), Verdict::Retry);
        assert_eq!(standby.answered(None, false, at(60)), Verdict::Retry);
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
