//! Latency: what keeper's concurrency buys when every backend call takes a while (200 ms by
//! default: a far region, a loaded StorageGRID admin node), where on the local stack a call
//! takes a few milliseconds and the CPU decides. The AWS proxy delays each S3 and IAM call (for
//! buckets) or RDS call (for databases), the StorageGRID emulator each management call (for
//! tenants); keeper makes N objects Ready and deletes them, beside two figures from the same
//! run:
//!
//! - the **sequential safe floor**: the calls keeper must make, its safety looks included
//!   ([`Calls::Safe`]), one after another with the same latency; measured on a sample and
//!   scaled linearly to N (each object's calls are the same, so the time grows as N);
//! - the **concurrency limit**: the floor's calls at the latency, spread over keeper's configured
//!   concurrency for the controller (or paced by the provider's configured request rate, when
//!   that is slower): no keeper with that setting can be faster.

use std::time::Duration;

use keeper::config::{ControllerKind, OperatorConfig};
use serde_json::json;

use crate::floor::{self, Calls, Timing};
use crate::kinds::{namespace_with_tenant, object, timeout};
use crate::lab::{Lab, Process};
use crate::objects::{self, calls_text};
use crate::report::{Goal, Report};

/// What the section measures.
pub struct Settings {
    /// Added to every call of the backend under test.
    pub latency: Duration,
    /// Objects for keeper; 0 leaves a kind out.
    pub buckets: usize,
    pub tenants: usize,
    pub databases: usize,
    /// Objects the sequential floor is measured on (at most N), scaled to N.
    pub sample: usize,
    /// `runtime.concurrency` for keeper, one run each; `None`: keeper's defaults.
    pub concurrency: Vec<Option<u16>>,
    /// Holds keeper to the goals (buckets with keeper's defaults only).
    pub judged: bool,
}

/// One kind under latency.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Buckets,
    Tenants,
    Databases,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Buckets => "buckets",
            Kind::Tenants => "tenants",
            Kind::Databases => "databases",
        }
    }

    fn section(self, latency: Duration) -> String {
        let what = match self {
            Kind::Buckets => "buckets (provider s3)",
            Kind::Tenants => "tenants (StorageGRID)",
            Kind::Databases => "databases (RDS)",
        };
        format!("latency {} ms: {what}", latency.as_millis())
    }

    fn controller(self) -> ControllerKind {
        match self {
            Kind::Buckets => ControllerKind::Bucket,
            Kind::Tenants => ControllerKind::Tenant,
            Kind::Databases => ControllerKind::Database,
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Kind::Buckets => "s3buckets",
            Kind::Tenants => "s3tenants",
            Kind::Databases => "clouddatabases",
        }
    }

    fn size(self, settings: &Settings) -> usize {
        match self {
            Kind::Buckets => settings.buckets,
            Kind::Tenants => settings.tenants,
            Kind::Databases => settings.databases,
        }
    }

    /// The request rate keeper is configured to keep to for this kind's backend, if any.
    fn rate(self, config: &OperatorConfig) -> Option<f64> {
        let rate = match self {
            Kind::Buckets => config.providers.get("s3")?.request_rate(),
            Kind::Tenants => config.providers.get("default")?.request_rate(),
            Kind::Databases => config.rds.request_rate(),
        };
        rate.map(|r| r.per_second)
    }

    /// Delays every call of this kind's backend by `latency`.
    async fn slow(self, lab: &Lab, latency: Duration) -> anyhow::Result<()> {
        match self {
            Kind::Buckets => lab.slow_aws(&["s3", "iam"], latency).await,
            Kind::Tenants => lab.slow_grid(latency).await,
            Kind::Databases => lab.slow_aws(&["rds"], latency).await,
        }
    }

    /// The sequential safe floor of `n` objects.
    async fn floor(self, lab: &Lab, n: usize) -> anyhow::Result<Timing> {
        match self {
            Kind::Buckets => floor::s3_buckets(lab, n, Calls::Safe).await,
            Kind::Tenants => floor::grid_tenants(lab, n, Calls::Safe).await,
            Kind::Databases => floor::databases(lab, n, Calls::Safe).await,
        }
    }
}

/// The sequential floor of `n` objects from its time on `sample` of them: each object takes
/// the same calls one after another, so the time grows linearly.
pub fn scaled(sample_time: Duration, sample: usize, n: usize) -> Duration {
    if sample == 0 {
        return Duration::ZERO;
    }
    sample_time.mul_f64(n as f64 / sample as f64)
}

/// The concurrency limit: the least time `calls` backend calls for `n` objects can take when
/// each takes `latency`, at most `concurrency` are in flight (and at most one per object: an
/// object's calls follow one another, so fewer objects than workers keep fewer in flight), and,
/// with a request rate, no more than `rate` start per second.
pub fn concurrency_limit(
    calls: f64,
    n: usize,
    latency: Duration,
    concurrency: u16,
    rate: Option<f64>,
) -> Duration {
    let in_flight = (concurrency as usize).min(n).max(1) as f64;
    let by_concurrency = calls * latency.as_secs_f64() / in_flight;
    let by_rate = rate.filter(|r| *r > 0.0).map_or(0.0, |r| calls / r);
    Duration::from_secs_f64(by_concurrency.max(by_rate))
}

/// How the limit was reached, for the table: `calls × latency ÷ workers` or `calls ÷ rate`.
fn limit_text(
    calls: f64,
    n: usize,
    latency: Duration,
    concurrency: u16,
    rate: Option<f64>,
) -> String {
    let in_flight = (concurrency as usize).min(n).max(1);
    let by_concurrency = format!(
        "{calls:.0} calls × {} ms ÷ {in_flight}",
        latency.as_millis()
    );
    match rate {
        Some(r) if calls / r > calls * latency.as_secs_f64() / in_flight as f64 => {
            format!("{calls:.0} calls ÷ {r}/s")
        }
        _ => by_concurrency,
    }
}

/// Runs `kinds` with the latency on their backend, removing it again whatever happens.
pub async fn run(
    lab: &Lab,
    report: &mut Report,
    settings: &Settings,
    kinds: &[Kind],
) -> anyhow::Result<()> {
    for &kind in kinds {
        if kind.size(settings) == 0 {
            continue;
        }
        kind.slow(lab, settings.latency).await?;
        let done = measure(lab, report, settings, kind).await;
        let cleared = lab.clear_faults().await;
        done?;
        cleared?;
    }
    Ok(())
}

async fn measure(
    lab: &Lab,
    report: &mut Report,
    settings: &Settings,
    kind: Kind,
) -> anyhow::Result<()> {
    let n = kind.size(settings);
    let sample = settings.sample.clamp(1, n);
    let latency = settings.latency;
    let section = kind.section(latency);
    let floor = kind.floor(lab, sample).await?;
    let floor_create = scaled(floor.create, sample, n);
    let floor_delete = scaled(floor.delete, sample, n);
    let per_object = |calls: u64| calls as f64 / sample as f64;
    let (create_calls, delete_calls) = (
        per_object(floor.create_calls) * n as f64,
        per_object(floor.delete_calls) * n as f64,
    );
    let scaling = if sample == n {
        format!("{n} measured")
    } else {
        format!("{sample} measured, ×{}", number(n as f64 / sample as f64))
    };
    report.note(format!(
        "{section}: sequential safe floor on {sample}: {:.2} s to create ({:.1} calls each), \
         {:.2} s to delete ({:.1} calls each); scaled linearly to {n}",
        floor.create.as_secs_f64(),
        per_object(floor.create_calls),
        floor.delete.as_secs_f64(),
        per_object(floor.delete_calls),
    ));
    for setting in &settings.concurrency {
        let label = match setting {
            Some(c) => format!("latency-{}-{c}", kind.name()),
            None => format!("latency-{}-default", kind.name()),
        };
        let env = lab.keeper_env(&label, |config| {
            if let Some(c) = setting {
                config["runtime"] = json!({"concurrency": c});
            }
        })?;
        let config = OperatorConfig::parse(&std::fs::read_to_string(&env.keeper_config)?)
            .map_err(|e| anyhow::anyhow!("the benchmark's keeper configuration: {e}"))?;
        let concurrency = config.runtime.concurrency_of(kind.controller());
        let rate = kind.rate(&config);
        let keeper = Process::start(&env)?;
        let namespace = format!("bench-{label}");
        match kind {
            Kind::Buckets => namespace_with_tenant(lab, &namespace, "s3").await?,
            _ => lab.create_namespace(&namespace).await?,
        }
        let objects = (0..n)
            .map(|i| match kind {
                Kind::Buckets => object(
                    "S3Bucket",
                    &namespace,
                    &format!("b{i}"),
                    json!({"tenantRef": {"name": "t"}}),
                ),
                Kind::Tenants => object(
                    "S3Tenant",
                    &namespace,
                    &format!("t{i}"),
                    json!({"provider": "default"}),
                ),
                Kind::Databases => object(
                    "CloudDatabase",
                    &namespace,
                    &format!("d{i}"),
                    json!({"engine": "postgres", "size": "small", "deletionPolicy": "Delete"}),
                ),
            })
            .collect();
        let run = objects::run(
            lab,
            &keeper,
            &namespace,
            kind.plural(),
            objects,
            None,
            timeout(n),
        )
        .await?;
        let (_, peak) = keeper.rss_mib()?;
        let setting_text = match setting {
            Some(_) => format!("concurrency {concurrency}"),
            None => format!("default concurrency {concurrency}"),
        };
        let judged = settings.judged && setting.is_none() && kind == Kind::Buckets;
        let goal = |g| if judged { g } else { Goal::None };
        for (what, keeper_time, floor_time, calls, floor_goal, limit_goal) in [
            (
                "to Ready",
                run.to_ready,
                floor_create,
                create_calls,
                goal(Goal::RatioAtMost(0.1)),
                goal(Goal::RatioAtMost(1.3)),
            ),
            (
                "deleted",
                run.deleted,
                floor_delete,
                delete_calls,
                Goal::None,
                Goal::None,
            ),
        ] {
            report.add(
                &section,
                format!("{n} {what}, {setting_text}: vs sequential safe floor ({scaling})"),
                keeper_time.as_secs_f64(),
                Some(floor_time.as_secs_f64()),
                "s",
                floor_goal,
            );
            let limit = concurrency_limit(calls, n, latency, concurrency, rate);
            report.add(
                &section,
                format!(
                    "{n} {what}, {setting_text}: vs concurrency limit ({})",
                    limit_text(calls, n, latency, concurrency, rate)
                ),
                keeper_time.as_secs_f64(),
                Some(limit.as_secs_f64()),
                "s",
                limit_goal,
            );
        }
        let (_, ready_text) = calls_text(&run.ready_calls, n as f64);
        let (_, delete_text) = calls_text(&run.delete_calls, n as f64);
        report.note(format!(
            "{section} {n}, {setting_text}: keeper's backend calls per object to Ready: {ready_text}; to deletion: {delete_text}"
        ));
        report.note(format!(
            "{section} {n}, {setting_text}: {:.0} reconciles, mean reconcile time: {}",
            run.reconciles, run.reconcile_times
        ));
        report.note(format!(
            "{section} {n}, {setting_text}: keeper's peak resident memory {peak:.1} MiB; CPU to Ready: {}; to deletion: {}",
            run.cpu_to_ready, run.cpu_to_delete
        ));
        lab.delete_namespace(&namespace, Duration::from_secs(300))
            .await?;
        drop(keeper);
    }
    Ok(())
}

fn number(v: f64) -> String {
    if v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS200: Duration = Duration::from_millis(200);

    #[test]
    fn the_floor_scales_linearly_from_its_sample() {
        assert_eq!(
            scaled(Duration::from_secs(26), 10, 100),
            Duration::from_secs(260)
        );
        assert_eq!(
            scaled(Duration::from_secs(3), 10, 10),
            Duration::from_secs(3)
        );
        assert_eq!(
            scaled(Duration::from_millis(500), 2, 5),
            Duration::from_millis(1250)
        );
        assert_eq!(scaled(Duration::from_secs(3), 0, 10), Duration::ZERO);
    }

    #[test]
    fn the_limit_spreads_the_calls_over_the_workers() {
        // 100 buckets, 8 calls each, 200 ms a call, 16 workers: 800 × 0.2 / 16 = 10 s.
        assert_eq!(
            concurrency_limit(800.0, 100, MS200, 16, None),
            Duration::from_secs(10)
        );
        // 4 workers: four times as long.
        assert_eq!(
            concurrency_limit(800.0, 100, MS200, 4, None),
            Duration::from_secs(40)
        );
    }

    #[test]
    fn fewer_objects_than_workers_keep_fewer_calls_in_flight() {
        // 10 buckets, 8 calls each: one chain of 8 calls per object, 10 at once: 1.6 s, not
        // 80 × 0.2 / 16 = 1 s.
        let limit = concurrency_limit(80.0, 10, MS200, 16, None);
        assert!((limit.as_secs_f64() - 1.6).abs() < 1e-9, "{limit:?}");
        // No object: nothing to spread, no division by zero.
        assert_eq!(concurrency_limit(0.0, 0, MS200, 16, None), Duration::ZERO);
    }

    #[test]
    fn a_slower_request_rate_sets_the_limit() {
        // 800 calls at 20 a second: 40 s, slower than 16 workers (10 s).
        assert_eq!(
            concurrency_limit(800.0, 100, MS200, 16, Some(20.0)),
            Duration::from_secs(40)
        );
        assert_eq!(
            limit_text(800.0, 100, MS200, 16, Some(20.0)),
            "800 calls ÷ 20/s"
        );
        // A rate faster than the workers can go changes nothing.
        assert_eq!(
            concurrency_limit(800.0, 100, MS200, 16, Some(1000.0)),
            Duration::from_secs(10)
        );
        assert_eq!(
            limit_text(800.0, 100, MS200, 16, Some(1000.0)),
            "800 calls × 200 ms ÷ 16"
        );
        assert_eq!(
            limit_text(80.0, 10, MS200, 16, None),
            "80 calls × 200 ms ÷ 10"
        );
    }
}
