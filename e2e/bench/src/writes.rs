//! The Kubernetes half of a kind's floor: the API writes a plain client must make for the same
//! result as keeper, one after another, against the same API server in the same run. Without
//! it a floor holds only backend calls, and a ratio charges keeper for the API server's work
//! (a tenant's floor was 0.65 s of grid calls for 1,000 tenants, each of which takes five API
//! writes whoever makes them).
//!
//! Measured before keeper starts: keeper would act on the floor's objects.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use crate::floor::Timing;
use crate::lab::{GROUP_VERSION, Lab};

/// The floor's hold on the Secrets an object's cleanup reads.
const FLOOR_HOLD: &str = "keeper.dev/floor-hold";

/// What one object of a kind needs written, besides its backend work.
#[derive(Debug, Clone)]
pub struct Writes {
    pub kind: &'static str,
    pub plural: &'static str,
    /// A spec the API server accepts (nothing acts on it).
    pub spec: Value,
    /// The credential Secrets the result carries (a tenant: root and S3 credentials; a bucket and
    /// a database: one).
    pub secrets: usize,
    /// How many of them the object's cleanup reads, so that deleting the namespace must not take
    /// them first (a tenant: both; a bucket, whose cleanup finds its keys by the bucket's name,
    /// and a database deleted with its instance: none). A plain client as safe as keeper holds
    /// them with a finalizer from their create and lets go of each after the cleanup, one write
    /// per Secret (keeper's hold is `CLEANUP_HOLD`).
    pub held: usize,
}

impl Writes {
    /// To Ready: the user's create, the finalizer, the Secrets (owned by the object, so that the
    /// garbage collector deletes them; a held one carries its hold from the create), the status.
    /// To deletion: each held Secret let go, the finalizer's removal (the user's DELETE of the
    /// whole collection is one request for all objects, as in keeper's run).
    pub fn per_object(&self) -> (u64, u64) {
        (3 + self.secrets as u64, 1 + self.held as u64)
    }
}

/// Makes the writes for `n` objects one after another in a namespace of their own (deleted
/// after), with no controller running; `Timing`'s call counts are the API writes made.
pub async fn floor(lab: &Lab, writes: &Writes, n: usize) -> anyhow::Result<Timing> {
    let namespace = format!("bench-floor-{}-{n}", writes.plural);
    lab.create_namespace(&namespace).await?;
    let collection = format!(
        "/apis/{GROUP_VERSION}/namespaces/{namespace}/{}",
        writes.plural
    );
    let secrets = format!("/api/v1/namespaces/{namespace}/secrets");
    let names: Vec<String> = (0..n).map(|i| format!("f{i}")).collect();
    let started = Instant::now();
    for name in &names {
        let created = lab
            .create(
                &collection,
                &json!({"apiVersion": GROUP_VERSION, "kind": writes.kind,
                        "metadata": {"name": name, "namespace": namespace},
                        "spec": writes.spec}),
            )
            .await?;
        let uid = created["metadata"]["uid"].as_str().context("no uid")?;
        let object = format!("{collection}/{name}");
        lab.merge_patch(
            &object,
            &json!({"metadata": {"finalizers": ["keeper.dev/floor"]}}),
        )
        .await?;
        for s in 0..writes.secrets {
            let hold: &[&str] = if s < writes.held { &[FLOOR_HOLD] } else { &[] };
            lab.create(
                &secrets,
                &json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": format!("{name}-{s}"), "finalizers": hold,
                            "ownerReferences": [{
                            "apiVersion": GROUP_VERSION, "kind": writes.kind, "name": name,
                            "uid": uid, "controller": true}]},
                        "stringData": {"access_key_id": "AKIAFLOOR", "secret_access_key": "floor"}}),
            )
            .await?;
        }
        lab.merge_patch(
            &format!("{object}/status"),
            &json!({"status": {"conditions": [{
                "type": "Ready", "status": "True", "reason": "Floor", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
        )
        .await?;
    }
    let create = started.elapsed();
    let started = Instant::now();
    lab.delete(&collection).await?;
    for name in &names {
        for s in 0..writes.held {
            lab.merge_patch(
                &format!("{secrets}/{name}-{s}"),
                &json!({"metadata": {"finalizers": null}}),
            )
            .await?;
        }
        lab.merge_patch(
            &format!("{collection}/{name}"),
            &json!({"metadata": {"finalizers": null}}),
        )
        .await?;
    }
    let delete = started.elapsed();
    lab.delete_namespace(&namespace, Duration::from_secs(120))
        .await?;
    let (to_ready, to_delete) = writes.per_object();
    Ok(Timing {
        create,
        delete,
        create_calls: to_ready * n as u64,
        delete_calls: to_delete * n as u64,
    })
}
