//! The three kinds at scale: N S3Buckets in one tenant on provider `s3`, N S3Tenants on
//! StorageGRID, N CloudDatabases; each against its floor: the backend calls keeper must make,
//! its safety looks included ([`Calls::Safe`], as issue 28 defines the floor: the looks stay),
//! plus the API writes a plain client makes for the same result, one after another, measured
//! before keeper starts (it would act on the floor's objects).

use std::time::Duration;

use serde_json::{Value, json};

use keeper_e2e_scenarios::Env;

use crate::floor::{self, Calls, Timing};
use crate::lab::{GROUP_VERSION, Lab, Process};
use crate::objects::{self, Run, calls_text, is_ready};
use crate::report::{Goal, Report};
use crate::writes::{self, Writes};

/// A kind's floor for `n` objects, in its two halves.
struct Floor {
    backend: Timing,
    api: Timing,
}

impl Floor {
    /// Measures both halves; keeper must not be running yet.
    async fn measure(
        lab: &Lab,
        backend: Timing,
        writes: &Writes,
        n: usize,
    ) -> anyhow::Result<Floor> {
        Ok(Floor {
            backend,
            api: writes::floor(lab, writes, n).await?,
        })
    }

    fn total(&self) -> Timing {
        self.backend.plus(self.api)
    }
}

/// Reports a kind's run beside its floor: time to Ready and to deletion, API requests per
/// object, backend calls per object, CPU per reconcile, and the idle period.
fn report_run(report: &mut Report, section: &str, run: &Run, floor: &Floor, judged: bool) {
    let n = run.n as f64;
    report.note(format!(
        "{section} {}: floor to Ready {:.3} s = backend {:.3} s ({:.1} calls per object) + API \
         writes {:.3} s ({:.0} per object); to deletion {:.3} s = backend {:.3} s + API writes \
         {:.3} s ({:.0} per object)",
        run.n,
        floor.total().create.as_secs_f64(),
        floor.backend.create.as_secs_f64(),
        floor.backend.create_calls as f64 / n,
        floor.api.create.as_secs_f64(),
        floor.api.create_calls as f64 / n,
        floor.total().delete.as_secs_f64(),
        floor.backend.delete.as_secs_f64(),
        floor.api.delete.as_secs_f64(),
        floor.api.delete_calls as f64 / n,
    ));
    let floor = floor.total();
    let ratio_goal = if judged {
        Goal::RatioAtMost(1.2)
    } else {
        Goal::None
    };
    report.add(
        section,
        format!("{} to Ready", run.n),
        run.to_ready.as_secs_f64(),
        Some(floor.create.as_secs_f64()),
        "s",
        ratio_goal,
    );
    report.add(
        section,
        format!("{} deleted", run.n),
        run.deleted.as_secs_f64(),
        Some(floor.delete.as_secs_f64()),
        "s",
        ratio_goal,
    );
    report.add(
        section,
        "API writes per object to Ready (events aside)",
        run.ready_requests.writes() as f64 / n,
        None,
        "",
        Goal::None,
    );
    report.add(
        section,
        "API writes per object to deletion (events aside)",
        run.delete_requests.writes() as f64 / n,
        None,
        "",
        Goal::None,
    );
    // Reads of keeper's and of its admission webhook (buckets and tenants run with it
    // registered; it reads as keeper), lists too: a webhook's LIST is a read like a GET.
    let reads = |r: &crate::lab::Requests| r.verb("get") + r.verb("list");
    let gets = (reads(&run.ready_requests) + reads(&run.delete_requests)) as f64 / n;
    report.add(
        section,
        "API reads (GET, LIST) per object, webhook's included",
        gets,
        None,
        "",
        Goal::AtMost(0.1),
    );
    let (ready_calls, ready_text) = calls_text(&run.ready_calls, n);
    let (delete_calls, delete_text) = calls_text(&run.delete_calls, n);
    report.add(
        section,
        "backend calls per object to Ready",
        ready_calls,
        None,
        "",
        Goal::None,
    );
    report.add(
        section,
        "backend calls per object to deletion",
        delete_calls,
        None,
        "",
        Goal::None,
    );
    report.add(
        section,
        "CPU per reconcile (release)",
        run.cpu_ms_per_reconcile,
        None,
        "ms",
        Goal::AtMost(2.0),
    );
    report.note(format!(
        "{section} {}: API requests per object to Ready: {}",
        run.n,
        run.ready_requests.breakdown(n)
    ));
    report.note(format!(
        "{section} {}: API requests per object to deletion: {}",
        run.n,
        run.delete_requests.breakdown(n)
    ));
    report.note(format!(
        "{section} {}: backend calls per object to Ready: {ready_text}",
        run.n
    ));
    report.note(format!(
        "{section} {}: backend calls per object to deletion: {delete_text}",
        run.n
    ));
    report.note(format!(
        "{section} {}: {:.0} reconciles ({:.1} per object)",
        run.n,
        run.reconciles,
        run.reconciles / n
    ));
    report.note(format!(
        "{section} {}: mean reconcile time: {}",
        run.n, run.reconcile_times
    ));
    report.note(format!(
        "{section} {}: keeper's mean backend call time: {}",
        run.n, run.backend_times
    ));
    report.note(format!(
        "{section} {}: CPU to Ready: {}",
        run.n, run.cpu_to_ready
    ));
    report.note(format!(
        "{section} {}: CPU to deletion: {}",
        run.n, run.cpu_to_delete
    ));
    if let Some((idle, requests, calls)) = &run.idle {
        let backend: u64 = calls.values().sum();
        report.add(
            section,
            format!("API requests in {}s idle", idle.as_secs()),
            requests.total() as f64,
            None,
            "",
            Goal::Exactly(0.0),
        );
        report.add(
            section,
            format!("backend calls in {}s idle", idle.as_secs()),
            backend as f64,
            None,
            "",
            Goal::Exactly(0.0),
        );
        if requests.total() > 0 || backend > 0 {
            report.note(format!(
                "{section} idle: {} / {calls:?}",
                requests.breakdown(1.0)
            ));
        }
    }
}

pub fn object(kind: &str, namespace: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": GROUP_VERSION, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec})
}

/// S3Buckets `<prefix>0` .. `<prefix><n-1>` of tenant `t` in `namespace`.
pub fn buckets_of_t(namespace: &str, prefix: &str, n: usize) -> impl Iterator<Item = Value> {
    (0..n).map(move |i| {
        object(
            "S3Bucket",
            namespace,
            &format!("{prefix}{i}"),
            json!({"tenantRef": {"name": "t"}}),
        )
    })
}

/// Creates a namespace with a Ready tenant on `provider` in it.
pub async fn namespace_with_tenant(
    lab: &Lab,
    namespace: &str,
    provider: &str,
) -> anyhow::Result<()> {
    lab.create_namespace(namespace).await?;
    lab.create(
        &format!("/apis/{GROUP_VERSION}/namespaces/{namespace}/s3tenants"),
        &object("S3Tenant", namespace, "t", json!({"provider": provider})),
    )
    .await?;
    lab.wait_all(
        namespace,
        "s3tenants",
        1,
        Duration::from_secs(120),
        is_ready,
    )
    .await?;
    Ok(())
}

/// S3Buckets in one tenant on provider `s3`, for each size; the linear growth between the
/// smallest and the largest.
pub async fn buckets(
    lab: &Lab,
    env: &Env,
    report: &mut Report,
    sizes: &[usize],
    idle: Duration,
) -> anyhow::Result<()> {
    let section = "buckets (provider s3)";
    let writes = Writes {
        kind: "S3Bucket",
        plural: "s3buckets",
        spec: json!({"tenantRef": {"name": "t"}}),
        secrets: 1,
        held: 0,
    };
    let mut floors = Vec::new();
    for &n in sizes {
        let backend = floor::s3_buckets(lab, n, Calls::Safe).await?;
        floors.push(Floor::measure(lab, backend, &writes, n).await?);
    }
    let keeper = &Process::start_with_webhook(env)?;
    let mut times = Vec::new();
    for (i, (&n, floor)) in sizes.iter().zip(&floors).enumerate() {
        let namespace = format!("bench-buckets-{n}");
        namespace_with_tenant(lab, &namespace, "s3").await?;
        let buckets = buckets_of_t(&namespace, "b", n).collect();
        let largest = i + 1 == sizes.len();
        let run = objects::run(
            lab,
            keeper,
            &namespace,
            "s3buckets",
            buckets,
            largest.then_some(idle),
            timeout(n),
        )
        .await?;
        report_run(report, section, &run, floor, n >= 1000);
        times.push((n, run.to_ready, run.deleted, floor.total()));
        lab.delete_namespace(&namespace, Duration::from_secs(120))
            .await?;
    }
    if let (Some(small), Some(large)) = (times.first(), times.last())
        && large.0 > small.0
    {
        let growth = large.0 as f64 / small.0 as f64;
        let goal = Goal::AtMost(growth * 1.1);
        // The floor's own growth beside keeper's: when the backend itself slows as buckets
        // accumulate, the floor grows faster than linearly too, and the two tell keeper's part
        // from the backend's.
        let (floor_small, floor_large) = (small.3, large.3);
        report.add(
            section,
            format!("{} vs {} to Ready (time ratio)", large.0, small.0),
            large.1.as_secs_f64() / small.1.as_secs_f64(),
            Some(floor_large.create.as_secs_f64() / floor_small.create.as_secs_f64()),
            "",
            goal,
        );
        report.add(
            section,
            format!("{} vs {} deleted (time ratio)", large.0, small.0),
            large.2.as_secs_f64() / small.2.as_secs_f64(),
            Some(floor_large.delete.as_secs_f64() / floor_small.delete.as_secs_f64()),
            "",
            goal,
        );
    }
    Ok(())
}

/// S3Tenants on StorageGRID.
pub async fn tenants(
    lab: &Lab,
    env: &Env,
    report: &mut Report,
    sizes: &[usize],
) -> anyhow::Result<()> {
    let writes = Writes {
        kind: "S3Tenant",
        plural: "s3tenants",
        spec: json!({"provider": "default"}),
        secrets: 2,
        held: 2,
    };
    let mut floors = Vec::new();
    for &n in sizes {
        let backend = floor::grid_tenants(lab, n, Calls::Safe).await?;
        floors.push(Floor::measure(lab, backend, &writes, n).await?);
    }
    let keeper = &Process::start_with_webhook(env)?;
    for (&n, floor) in sizes.iter().zip(&floors) {
        let namespace = format!("bench-tenants-{n}");
        lab.create_namespace(&namespace).await?;
        let tenants = (0..n)
            .map(|t| {
                object(
                    "S3Tenant",
                    &namespace,
                    &format!("t{t}"),
                    json!({"provider": "default"}),
                )
            })
            .collect();
        let run = objects::run(
            lab,
            keeper,
            &namespace,
            "s3tenants",
            tenants,
            None,
            timeout(n),
        )
        .await?;
        report_run(report, "tenants (StorageGRID)", &run, floor, n >= 1000);
        lab.delete_namespace(&namespace, Duration::from_secs(120))
            .await?;
    }
    Ok(())
}

/// CloudDatabases (postgres, small, deletionPolicy Delete).
pub async fn databases(lab: &Lab, env: &Env, report: &mut Report, n: usize) -> anyhow::Result<()> {
    let writes = Writes {
        kind: "CloudDatabase",
        plural: "clouddatabases",
        spec: json!({"engine": "postgres", "size": "small", "deletionPolicy": "Delete"}),
        secrets: 1,
        held: 0,
    };
    let backend = floor::databases(lab, n, Calls::Safe).await?;
    let floor = &Floor::measure(lab, backend, &writes, n).await?;
    let keeper = &Process::start(env)?;
    let namespace = format!("bench-databases-{n}");
    lab.create_namespace(&namespace).await?;
    let databases = (0..n)
        .map(|d| {
            object(
                "CloudDatabase",
                &namespace,
                &format!("d{d}"),
                json!({"engine": "postgres", "size": "small", "deletionPolicy": "Delete"}),
            )
        })
        .collect();
    let run = objects::run(
        lab,
        keeper,
        &namespace,
        "clouddatabases",
        databases,
        None,
        timeout(n),
    )
    .await?;
    report_run(report, "databases (RDS)", &run, floor, true);
    lab.delete_namespace(&namespace, Duration::from_secs(120))
        .await?;
    Ok(())
}

/// Generous: a hung run fails rather than blocking the benchmark.
pub fn timeout(n: usize) -> Duration {
    Duration::from_secs(120 + n as u64)
}
