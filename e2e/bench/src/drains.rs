//! Drains: N objects deleted by keeper (annotation to `drain-handled`) beside the floor, on
//! provider `s3` (keeper deletes: ListObjectsV2 + DeleteObjects, batches of 1,000) and on
//! StorageGRID (the grid deletes; keeper starts the drain and polls). Objects per second, and
//! the DeleteObjects calls keeper made.

use std::time::{Duration, Instant};

use anyhow::Context;
use keeper_e2e_scenarios::{client_for, put_objects, tenant_wide_credentials};
use serde_json::json;

use crate::floor::{self, Calls, Grid};
use crate::lab::{GROUP_VERSION, Lab, Process};
use crate::objects::is_ready;
use crate::report::{Goal, Report};

/// A deliberately unreachable cap: the throughput figure measures keeper and the backend.
const UNCAPPED: u32 = 10_000_000;

/// Requests a drain of S3Bucket `name` (in `namespace`) with a new value; returns the value.
pub async fn request_drain(lab: &Lab, namespace: &str, name: &str) -> anyhow::Result<String> {
    let path = format!("/apis/{GROUP_VERSION}/namespaces/{namespace}/s3buckets/{name}");
    // A new value per drain: the same value again is a request already handled.
    let request = format!(
        "bench-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    );
    lab.merge_patch(
        &path,
        &json!({"metadata": {"annotations": {"keeper.dev/drain": request}}}),
    )
    .await?;
    Ok(request)
}

/// Requests a drain of S3Bucket `name` and waits until keeper records it handled.
async fn drain_with_keeper(
    lab: &Lab,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let path = format!("/apis/{GROUP_VERSION}/namespaces/{namespace}/s3buckets/{name}");
    let started = Instant::now();
    let request = request_drain(lab, namespace, name).await?;
    let deadline = Instant::now() + timeout;
    loop {
        let bucket = lab.get(&path).await?;
        if bucket["metadata"]["annotations"]["keeper.dev/drain-handled"] == request.as_str()
            && bucket["status"]["objectCount"] == 0
        {
            return Ok(started.elapsed());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "drain of {name} not done after {timeout:?}: {}",
            bucket["status"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A namespace with a Ready tenant on `provider` and a Ready S3Bucket `d` in it; returns the
/// bucket's name on the backend.
async fn bucket_of_keeper(lab: &Lab, namespace: &str, provider: &str) -> anyhow::Result<String> {
    lab.create_namespace(namespace).await?;
    let base = format!("/apis/{GROUP_VERSION}/namespaces/{namespace}");
    lab.create(
        &format!("{base}/s3tenants"),
        &json!({"apiVersion": GROUP_VERSION, "kind": "S3Tenant",
        "metadata": {"name": "t", "namespace": namespace}, "spec": {"provider": provider}}),
    )
    .await?;
    lab.create(
        &format!("{base}/s3buckets"),
        &json!({"apiVersion": GROUP_VERSION, "kind": "S3Bucket",
        "metadata": {"name": "d", "namespace": namespace}, "spec": {"tenantRef": {"name": "t"}}}),
    )
    .await?;
    lab.wait_all(
        namespace,
        "s3buckets",
        1,
        Duration::from_secs(120),
        is_ready,
    )
    .await?;
    let bucket = lab.get(&format!("{base}/s3buckets/d")).await?;
    Ok(bucket["status"]["bucketName"]
        .as_str()
        .context("no bucketName")?
        .to_string())
}

fn deletes(calls: &std::collections::BTreeMap<String, u64>) -> u64 {
    calls.get("s3:DeleteObjects").copied().unwrap_or(0)
}

/// Provider `s3`: keeper's drain (uncapped, and with the default cap for the smallest size)
/// beside ListObjectsV2 + DeleteObjects one batch after another.
pub async fn s3(lab: &Lab, report: &mut Report, sizes: &[usize]) -> anyhow::Result<()> {
    let section = "drains (provider s3)";
    let (key, secret) = lab.env.admin_keys.clone().context("admin keys")?;
    let endpoint = lab.env.s3_endpoint.clone().context("s3 endpoint")?;
    let s3 = keeper_e2e_scenarios::s3_client(&endpoint, &key, &secret, "us-east-1");
    let uncapped = lab.keeper_env("drain-uncapped", |c| {
        c["providers"]["s3"]["s3Compatible"]["drain"]["maxDeletesPerSecond"] = json!(UNCAPPED);
    })?;
    let capped = lab.keeper_env("drain-default-cap", |c| {
        if let Some(drain) = c["providers"]["s3"]["s3Compatible"]["drain"].as_object_mut() {
            drain.remove("maxDeletesPerSecond");
        }
    })?;
    for (i, &n) in sizes.iter().enumerate() {
        let floor_bucket = format!("floor-drain-{n}");
        s3.create_bucket().bucket(&floor_bucket).send().await?;
        put_objects(&s3, &floor_bucket, "o", n).await;
        let (floor_time, floor_calls) = floor::drain_s3(&s3, &floor_bucket).await?;
        s3.delete_bucket().bucket(&floor_bucket).send().await?;
        let namespace = format!("bench-drain-s3-{n}");
        let keeper = Process::start(&uncapped)?;
        let bucket = bucket_of_keeper(lab, &namespace, "s3").await?;
        put_objects(&s3, &bucket, "o", n).await;
        lab.clear_counters().await?;
        let before = keeper.mark(&lab.http).await?;
        let took = drain_with_keeper(
            lab,
            &namespace,
            "d",
            Duration::from_secs(60 + n as u64 / 100),
        )
        .await?;
        let after = keeper.mark(&lab.http).await?;
        let calls = lab.aws_calls().await?;
        let rate = |t: Duration| n as f64 / t.as_secs_f64();
        report.add(
            section,
            format!("{n} objects, objects/s (uncapped)"),
            rate(took),
            Some(rate(floor_time)),
            "",
            Goal::RatioAtLeast(1.0),
        );
        report.add(
            section,
            format!("{n} objects, DeleteObjects calls"),
            deletes(&calls) as f64,
            Some(floor_calls as f64),
            "",
            Goal::Exactly(n.div_ceil(1000) as f64),
        );
        let made: Vec<String> = calls.iter().map(|(k, v)| format!("{k} {v}")).collect();
        report.note(format!(
            "{section} {n}: keeper's backend calls: {}",
            made.join(", ")
        ));
        report.note(format!(
            "{section} {n}: keeper's reconciles: {}; backend call time: {}",
            before.means(&after, "keeper_reconcile_duration_seconds"),
            before.means(&after, "keeper_backend_request_duration_seconds")
        ));
        drop(keeper);
        if i == 0 {
            // The same drain under the default cap (maxDeletesPerSecond 1000).
            let keeper = Process::start(&capped)?;
            put_objects(&s3, &bucket, "o", n).await;
            let took = drain_with_keeper(
                lab,
                &namespace,
                "d",
                Duration::from_secs(60 + n as u64 / 100),
            )
            .await?;
            report.add(
                section,
                format!("{n} objects, objects/s (default cap 1000/s)"),
                rate(took),
                None,
                "",
                Goal::AtMost(1000.0 * 1.05),
            );
            drop(keeper);
        }
        let keeper = Process::start(&uncapped)?;
        lab.delete_namespace(&namespace, Duration::from_secs(120))
            .await?;
        drop(keeper);
    }
    Ok(())
}

/// StorageGRID: keeper's drain (it starts the grid's drain and polls) beside a client that
/// starts the same drain and polls every 100 ms.
pub async fn grid(lab: &Lab, report: &mut Report, sizes: &[usize]) -> anyhow::Result<()> {
    let section = "drains (StorageGRID)";
    let env = lab.keeper_env("drain-grid", |_| {})?;
    let admin = Grid::sign_in(lab).await?;
    for &n in sizes {
        let tenant = admin
            .create_tenant(&format!("floor-drain-{n}"), Calls::Work)
            .await?;
        let s3 = keeper_e2e_scenarios::s3_client(
            &lab.grid_s3,
            &tenant.access_key,
            &tenant.secret_key,
            "us-east-1",
        );
        let floor_bucket = format!("floor-drain-{n}");
        s3.create_bucket().bucket(&floor_bucket).send().await?;
        put_objects(&s3, &floor_bucket, "o", n).await;
        let started = Instant::now();
        admin
            .drain(&tenant, &floor_bucket, Duration::from_millis(100))
            .await?;
        let floor_time = started.elapsed();
        let namespace = format!("bench-drain-grid-{n}");
        let keeper = Process::start(&env)?;
        let bucket = bucket_of_keeper(lab, &namespace, "default").await?;
        let creds = tenant_wide_credentials(&lab.env, &namespace, "t", "default")?;
        put_objects(&client_for(&creds), &bucket, "o", n).await;
        let took = drain_with_keeper(
            lab,
            &namespace,
            "d",
            Duration::from_secs(120 + n as u64 / 100),
        )
        .await?;
        let rate = |t: Duration| n as f64 / t.as_secs_f64();
        report.add(
            section,
            format!("{n} objects, objects/s"),
            rate(took),
            Some(rate(floor_time)),
            "",
            Goal::None,
        );
        lab.delete_namespace(&namespace, Duration::from_secs(120))
            .await?;
        drop(keeper);
    }
    Ok(())
}
