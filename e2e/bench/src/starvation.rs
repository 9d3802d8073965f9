//! Starvation (issue 28): big client-side drains on provider `s3` running while new S3Buckets are
//! made Ready, beside the same buckets made Ready with no drain running. A client-side drain
//! deletes in rounds inside the bucket controller's reconciles; the question is whether the
//! running drains keep the new buckets from the controller's workers.
//!
//! Filling a bucket with 100,000 objects takes minutes on moto, so the drains hold fewer objects
//! under a lower cap (`maxDeletesPerSecond`): 10,000 at 100/s run about as long as 100,000 at the
//! default 1,000/s, and what matters is that every drain runs for the whole measurement (checked:
//! a drain that ended before the last new bucket turned Ready makes the run fail). Both
//! measurements run with latency added to every S3 and IAM call, so that the time is the workers'
//! waits, not moto's CPU; the buckets are filled before that.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use keeper::config::{ControllerKind, OperatorConfig};
use keeper_e2e_scenarios::put_objects;
use serde_json::json;

use crate::drains::request_drain;
use crate::kinds::{buckets_of_t, namespace_with_tenant, timeout};
use crate::lab::{GROUP_VERSION, Lab, Process};
use crate::objects::{CREATES_IN_FLIGHT, create_all, is_ready};
use crate::report::{Goal, Report};

/// What the section measures.
pub struct Settings {
    /// Buckets drained at once.
    pub drains: usize,
    /// Objects in each drained bucket.
    pub objects: usize,
    /// The drains' `maxDeletesPerSecond` (provider `s3`).
    pub deletes_per_second: u32,
    /// New buckets made Ready beside the drains, and alone.
    pub buckets: usize,
    /// Added to every S3 and IAM call while measuring.
    pub latency: Duration,
    /// Holds the run to the goal.
    pub judged: bool,
}

/// Drained buckets: the same in each namespace.
const DRAINED: &str = "bench-starvation-drains";
/// The new buckets with no drain running.
const ALONE: &str = "bench-starvation-alone";
/// The new buckets beside the drains.
const BESIDE: &str = "bench-starvation-beside";

/// Runs the section, then clears the latency and removes what it made (keeper uncapped, so that
/// the full buckets drain and go in seconds), whatever happened.
pub async fn run(lab: &Lab, report: &mut Report, settings: &Settings) -> anyhow::Result<()> {
    let capped = lab.keeper_env("starvation", |c| {
        let s3 = &mut c["providers"]["s3"]["s3Compatible"];
        // keeper's defaults (the stack's configuration refreshes usage, for the demo) but the cap.
        if let Some(s3) = s3.as_object_mut() {
            s3.remove("usageRefresh");
        }
        s3["drain"]["maxDeletesPerSecond"] = json!(settings.deletes_per_second);
    })?;
    let uncapped = lab.keeper_env("starvation-cleanup", |c| {
        c["providers"]["s3"]["s3Compatible"]["drain"]["maxDeletesPerSecond"] = json!(10_000_000);
    })?;
    let config = OperatorConfig::parse(&std::fs::read_to_string(&capped.keeper_config)?)
        .map_err(|e| anyhow::anyhow!("the benchmark's keeper configuration: {e}"))?;
    let workers = format!(
        "{} bucket workers, {} drain turns beside them",
        config.runtime.concurrency_of(ControllerKind::Bucket),
        config.runtime.drain_concurrency()
    );
    let keeper = Process::start(&capped)?;
    let done = measure(lab, report, settings, &keeper, &workers).await;
    let cleared = lab.clear_faults().await;
    drop(keeper);
    let cleaned = clean_up(lab, &uncapped, settings).await;
    done?;
    cleared?;
    cleaned
}

async fn measure(
    lab: &Lab,
    report: &mut Report,
    settings: &Settings,
    keeper: &Process,
    workers: &str,
) -> anyhow::Result<()> {
    let Settings {
        drains: d,
        objects: o,
        deletes_per_second: cap,
        buckets: m,
        latency,
        ..
    } = *settings;
    let latency_ms = latency.as_millis();
    let section = format!("starvation, {latency_ms} ms per S3/IAM call (provider s3)");
    for namespace in [DRAINED, ALONE, BESIDE] {
        namespace_with_tenant(lab, namespace, "s3").await?;
    }
    let drained = format!("/apis/{GROUP_VERSION}/namespaces/{DRAINED}/s3buckets");
    create_all(
        lab,
        "s3buckets",
        buckets_of_t(DRAINED, "d", d),
        CREATES_IN_FLIGHT,
    )
    .await?;
    lab.wait_all(DRAINED, "s3buckets", d, timeout(d), is_ready)
        .await?;
    let (key, secret) = lab.env.admin_keys.clone().context("admin keys")?;
    let endpoint = lab.env.s3_endpoint.clone().context("s3 endpoint")?;
    let s3 = keeper_e2e_scenarios::s3_client(&endpoint, &key, &secret, "us-east-1");
    let filling = Instant::now();
    for i in 0..d {
        let bucket = lab.get(&format!("{drained}/d{i}")).await?;
        let name = bucket["status"]["bucketName"]
            .as_str()
            .context("no bucketName")?;
        put_objects(&s3, name, "o", o).await;
    }
    report.note(format!(
        "{section}: filled {d} buckets with {o} objects each in {:.0} s, before the latency",
        filling.elapsed().as_secs_f64()
    ));
    lab.slow_aws(&["s3", "iam"], latency).await?;

    let alone = to_ready(lab, keeper, ALONE, m).await?;
    report.note(format!(
        "{section}: {m} buckets alone: {:.0} reconciles: {}; backend calls: {}",
        alone.reconciles,
        alone.reconcile_times,
        calls_list(&alone.calls)
    ));
    // Their idle looks would compete with the measurement beside the drains.
    lab.delete_namespace(ALONE, timeout(m)).await?;

    let requested = Instant::now();
    for i in 0..d {
        request_drain(lab, DRAINED, &format!("d{i}")).await?;
    }
    let deadline = requested + Duration::from_secs(120);
    let started = loop {
        let states = drain_states(lab, d).await?;
        if states.iter().all(|s| s.running) {
            break states;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} of {d} drains running 120 s after they were requested",
            states.iter().filter(|s| s.running).count()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    report.note(format!(
        "{section}: all {d} drains running {:.1} s after they were requested",
        requested.elapsed().as_secs_f64()
    ));

    let beside = to_ready(lab, keeper, BESIDE, m).await?;
    let ended = drain_states(lab, d).await?;
    let running = ended.iter().filter(|s| s.running).count();
    anyhow::ensure!(
        running == d,
        "only {running} of {d} drains still ran when the last of the {m} buckets beside them \
         turned Ready ({:.1} s; alone {:.1} s): the measurement is not one beside {d} drains; \
         give the drains more objects (--starvation-objects) or a lower cap \
         (--starvation-deletes-per-second)",
        beside.to_ready.as_secs_f64(),
        alone.to_ready.as_secs_f64()
    );
    report.add(
        &section,
        format!(
            "{m} new buckets to Ready beside {d} running drains of {o} objects each \
             (maxDeletesPerSecond {cap}; {workers}), vs the same {m} with no drain"
        ),
        beside.to_ready.as_secs_f64(),
        Some(alone.to_ready.as_secs_f64()),
        "s",
        if settings.judged {
            Goal::RatioAtMost(1.2)
        } else {
            Goal::None
        },
    );
    // Status counts a drain down once per round: the DeleteObjects calls say what went
    // meanwhile, each a full batch but the last of a pass.
    let batch = cap.min(1000);
    let deleted = beside.calls.get("s3:DeleteObjects").copied().unwrap_or(0) * u64::from(batch);
    report.add(
        &section,
        format!(
            "the {d} drains' deletes per second meanwhile (DeleteObjects calls × {batch} keys), \
             vs their cap ({d} × {cap}/s)"
        ),
        deleted as f64 / beside.to_ready.as_secs_f64(),
        Some(f64::from(cap) * d as f64),
        "",
        Goal::None,
    );
    report.note(format!(
        "{section}: {m} buckets beside the drains: {:.0} reconciles: {}; backend calls: {}; \
         the drains' status showed {} objects deleted meanwhile ({} left)",
        beside.reconciles,
        beside.reconcile_times,
        calls_list(&beside.calls),
        started
            .iter()
            .zip(&ended)
            .map(|(before, after)| before.objects - after.objects)
            .sum::<i64>(),
        ended.iter().map(|s| s.objects).sum::<i64>()
    ));
    Ok(())
}

/// What making buckets Ready took.
struct Readiness {
    to_ready: Duration,
    reconciles: f64,
    /// keeper's mean reconcile time by controller meanwhile (the drains' rounds included).
    reconcile_times: String,
    /// Backend calls meanwhile (the drains' included).
    calls: BTreeMap<String, u64>,
}

/// Creates `n` buckets in `namespace` and waits until all are Ready.
async fn to_ready(
    lab: &Lab,
    keeper: &Process,
    namespace: &str,
    n: usize,
) -> anyhow::Result<Readiness> {
    lab.clear_counters().await?;
    let before = keeper.mark(&lab.http).await?;
    let started = Instant::now();
    create_all(
        lab,
        "s3buckets",
        buckets_of_t(namespace, "b", n),
        CREATES_IN_FLIGHT,
    )
    .await?;
    let ready_at = lab
        .wait_all(namespace, "s3buckets", n, timeout(n), is_ready)
        .await?;
    let after = keeper.mark(&lab.http).await?;
    Ok(Readiness {
        to_ready: ready_at - started,
        reconciles: before.per_reconcile(&after).1,
        reconcile_times: before.means(&after, "keeper_reconcile_duration_seconds"),
        calls: lab.aws_calls().await?,
    })
}

/// `service:Action n, …`.
fn calls_list(calls: &BTreeMap<String, u64>) -> String {
    let calls: Vec<String> = calls.iter().map(|(k, v)| format!("{k} {v}")).collect();
    calls.join(", ")
}

/// A drained bucket as its status shows it.
struct DrainState {
    /// Draining, with drain status, and objects left.
    running: bool,
    objects: i64,
}

/// The drained buckets' states, `d0` first.
async fn drain_states(lab: &Lab, d: usize) -> anyhow::Result<Vec<DrainState>> {
    let mut states = Vec::with_capacity(d);
    for i in 0..d {
        let bucket = lab
            .get(&format!(
                "/apis/{GROUP_VERSION}/namespaces/{DRAINED}/s3buckets/d{i}"
            ))
            .await?;
        let status = &bucket["status"];
        let objects = status["objectCount"].as_i64().unwrap_or(0);
        states.push(DrainState {
            running: status["phase"] == "Draining"
                && status["drainStatus"].is_object()
                && objects > 0,
            objects,
        });
    }
    Ok(states)
}

/// Removes the section's namespaces with keeper uncapped: a fresh drain request on every drained
/// bucket (served by the running drain, or a new one if it was never requested or ended) lets
/// their deletion go through however far the run got.
async fn clean_up(
    lab: &Lab,
    uncapped: &keeper_e2e_scenarios::Env,
    settings: &Settings,
) -> anyhow::Result<()> {
    let keeper = Process::start(uncapped)?;
    let drained = lab
        .list(&format!(
            "/apis/{GROUP_VERSION}/namespaces/{DRAINED}/s3buckets"
        ))
        .await
        .unwrap_or_default();
    for bucket in &drained {
        let name = bucket["metadata"]["name"].as_str().unwrap_or_default();
        request_drain(lab, DRAINED, name).await?;
    }
    let drain_time = Duration::from_secs((settings.drains * settings.objects / 1000) as u64);
    for namespace in [DRAINED, ALONE, BESIDE] {
        lab.delete_namespace(namespace, timeout(settings.buckets) + drain_time)
            .await?;
    }
    drop(keeper);
    Ok(())
}
