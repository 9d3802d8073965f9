//! What keeper holds in memory and how soon it is ready: N objects in the API (S3Buckets, each
//! applied as `kubectl apply` leaves them: a last-applied annotation and field managers), keeper
//! started against them, time to `/readyz` beside one LIST of the same objects, and its resident
//! memory once it has reconciled them all.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

use crate::lab::{GROUP_VERSION, Lab, Process};
use crate::report::{Goal, Report};

/// An S3Bucket as `kubectl apply` stores it: with the last-applied configuration, a copy of the
/// manifest that keeper never reads.
fn applied_bucket(namespace: &str, name: &str) -> Value {
    let manifest = json!({"apiVersion": GROUP_VERSION, "kind": "S3Bucket",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"tenantRef": {"name": "absent"}, "versioning": false}});
    let mut obj = manifest.clone();
    obj["metadata"]["annotations"] = json!({
        "kubectl.kubernetes.io/last-applied-configuration": manifest.to_string(),
    });
    obj
}

/// keeper has reconciled every bucket of `namespace` (they wait for a tenant that does not
/// exist: a status with a condition, nothing more to do).
fn reconciled(obj: &Value) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .is_some_and(|c| !c.is_empty())
}

pub async fn run(lab: &Lab, report: &mut Report, sizes: &[usize]) -> anyhow::Result<()> {
    let section = "memory and start";
    let env = lab.keeper_env("caches", |_| {})?;
    let namespace = "bench-caches";
    lab.create_namespace(namespace).await?;
    let path = format!("/apis/{GROUP_VERSION}/namespaces/{namespace}/s3buckets");
    let mut created = 0;
    for &n in sizes {
        // Created while no keeper runs: the start below finds them all in the API.
        futures::stream::iter(created..n)
            .map(|i| {
                let path = format!("{path}?fieldManager=kubectl-client-side-apply");
                async move {
                    lab.create(&path, &applied_bucket(namespace, &format!("c{i}")))
                        .await
                        .map(drop)
                }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<()>>()
            .await?;
        created = n;
        let listed = Instant::now();
        let all = lab
            .list(&format!("/apis/{GROUP_VERSION}/s3buckets"))
            .await?;
        let list = listed.elapsed();
        anyhow::ensure!(all.len() >= n, "listed {} of {n} buckets", all.len());
        let started = Instant::now();
        let keeper = Process::start(&env)?;
        let ready = started.elapsed();
        lab.wait_all(
            namespace,
            "s3buckets",
            n,
            Duration::from_secs(60 + n as u64 / 20),
            reconciled,
        )
        .await?;
        // Let allocations of the first reconciles settle before reading the resident size.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (rss, peak) = keeper.rss_mib()?;
        report.add(
            section,
            format!("start to /readyz with {n} objects (floor: one LIST of them)"),
            ready.as_secs_f64(),
            Some(list.as_secs_f64()),
            "s",
            Goal::None,
        );
        let goal = if n >= 10_000 {
            Goal::AtMost(64.0)
        } else {
            Goal::None
        };
        report.add(
            section,
            format!("resident memory with {n} objects cached"),
            rss,
            None,
            "MiB",
            goal,
        );
        report.note(format!(
            "{section}: {n} objects: peak resident memory {peak:.1} MiB"
        ));
        drop(keeper);
    }
    // keeper releases the buckets (they never had a backend bucket) as the namespace goes.
    let keeper = Process::start(&env)?;
    lab.delete_namespace(namespace, Duration::from_secs(1800))
        .await?;
    drop(keeper);
    Ok(())
}
