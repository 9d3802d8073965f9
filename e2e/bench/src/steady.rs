//! Steady state: N Ready S3Buckets on each provider (one tenant each), keeper left alone, and the
//! backend calls and API requests it makes over a window. keeper looks at an idle Ready bucket
//! once per `bucketCheckInterval` (1h by default) and refreshes no usage unless `usageRefresh`
//! asks (off by default): the run shortens the interval to `--steady-interval` so that a window
//! of a few intervals stands for as many hours. The figure is the calls in the window ÷ N ÷ the
//! intervals the window spans: calls per bucket per interval, which at the default interval of
//! an hour are the calls per bucket per hour.

use std::time::Duration;

use serde_json::json;

use crate::kinds::{buckets_of_t, namespace_with_tenant, timeout};
use crate::lab::{GROUP_VERSION, Lab, Process};
use crate::objects::is_ready;
use crate::report::{Goal, Report};

/// How one steady-state run is sized.
pub struct Settings {
    /// Ready buckets per provider.
    pub buckets: usize,
    /// `bucketCheckInterval` keeper runs with (standing in for the default hour).
    pub interval: Duration,
    /// Intervals the window spans.
    pub intervals: u32,
    /// Whether the figure is judged against the goal (≤ 1 call per bucket per hour).
    pub judged: bool,
}

/// Runs the section on provider `s3` (S3-compatible, through the AWS proxy) and `default`
/// (StorageGRID).
pub async fn run(lab: &Lab, report: &mut Report, settings: &Settings) -> anyhow::Result<()> {
    let interval = format!("{}s", settings.interval.as_secs());
    // keeper's defaults but the shortened interval: the stack's configuration turns usage
    // refresh on (for the demo and the scenarios), which this section measures without.
    let env = lab.keeper_env("steady", |c| {
        for (provider, kind) in [("s3", "s3Compatible"), ("default", "storageGrid")] {
            let settings = &mut c["providers"][provider][kind];
            if let Some(settings) = settings.as_object_mut() {
                settings.remove("usageRefresh");
            }
            settings["bucketCheckInterval"] = json!(interval);
        }
    })?;
    let keeper = Process::start(&env)?;
    for (provider, section) in [
        ("s3", "steady state (provider s3)"),
        ("default", "steady state (StorageGRID)"),
    ] {
        let n = settings.buckets;
        let namespace = format!("bench-steady-{provider}-{n}");
        namespace_with_tenant(lab, &namespace, provider).await?;
        let path = format!("/apis/{GROUP_VERSION}/namespaces/{namespace}/s3buckets");
        for bucket in buckets_of_t(&namespace, "b", n) {
            lab.create(&path, &bucket).await?;
        }
        lab.wait_all(&namespace, "s3buckets", n, timeout(n), is_ready)
            .await?;
        // The creates' own calls are over; the window sees only the idle looks.
        tokio::time::sleep(Duration::from_secs(2)).await;
        lab.clear_counters().await?;
        let before = keeper.mark(&lab.http).await?;
        let window = settings.interval * settings.intervals;
        tokio::time::sleep(window).await;
        let (cpu_per_reconcile, reconciles) = before.per_reconcile(&keeper.mark(&lab.http).await?);
        let calls = lab.backend_calls().await?;
        let requests = lab.keeper_requests().await?;
        let total: u64 = calls.values().sum();
        let per_bucket_hour = total as f64 / n as f64 / f64::from(settings.intervals);
        report.add(
            section,
            format!(
                "{n} Ready buckets: backend calls per bucket per hour at the defaults (calls in {}s ÷ {n} ÷ {} intervals of bucketCheckInterval {}s standing for 1h)",
                window.as_secs(),
                settings.intervals,
                settings.interval.as_secs()
            ),
            per_bucket_hour,
            None,
            "",
            if settings.judged {
                Goal::AtMost(1.0)
            } else {
                Goal::None
            },
        );
        report.add(
            section,
            format!("{n} Ready buckets: API requests in {}s", window.as_secs()),
            requests.total() as f64,
            None,
            "",
            Goal::Exactly(0.0),
        );
        report.note(format!(
            "{section} {n}: in {}s, backend calls {calls:?}; API requests: {}; {reconciles:.0} reconciles, keeper CPU {cpu_per_reconcile:.2} ms per reconcile",
            window.as_secs(),
            requests.breakdown(1.0)
        ));
        lab.delete_namespace(&namespace, Duration::from_secs(120 + n as u64))
            .await?;
    }
    Ok(())
}
