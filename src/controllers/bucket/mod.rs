//! S3Bucket controller: creates the bucket in its tenant, publishes bucket credentials, looks at an
//! idle bucket at most once per the provider's `bucketCheckInterval` (and its usage only when the
//! provider's `usageRefresh` asks, see [`plan::usage`]), drains on request (annotation `keeper.dev/drain=<value>`, a request per new
//! value, see [`plan::requests`]) and deletes the bucket
//! only once it is empty and only if keeper created it.
//!
//! Wiring only: the reconciler, its errors and `run`. Decisions live in [`plan`], storage calls
//! behind [`backend`], and [`reconcile`] performs the one with the other.

mod backend;
mod plan;
mod reconcile;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus::IntCounter;
use tokio_util::sync::CancellationToken;

use crate::api::names::BUCKET_FINALIZER;
use crate::api::{S3Bucket, S3BucketStatus, S3Tenant};
use crate::cluster::triggers;
use crate::config::{ControllerKind, OperatorConfig};
use crate::error::ErrorClass;
use crate::metrics::Metrics;
use crate::runtime::gauges::StoreGauge;
use crate::runtime::{
    self, Context, ControllerFailure, Failure, Lane, Outcome, Reconciler, Shared, Uid,
};
use crate::server::Readiness;

use backend::{Connector, Live, Observed};
use reconcile::{Cache, Report};

/// keeper's finalizer on an S3Bucket: while it is there, the bucket still needs its tenant (its
/// cleanup signs in with the tenant's account).
pub const DRAIN_ANNOTATION: &str = "keeper.dev/drain";
pub const ADOPT_ANNOTATION: &str = "keeper.dev/adopt";
pub const ROTATE_ANNOTATION: &str = "keeper.dev/rotate-credentials";
/// keeper's record of the last `keeper.dev/drain` value it handled (see [`plan::requests`]).
pub const DRAIN_HANDLED_ANNOTATION: &str = "keeper.dev/drain-handled";
/// keeper's record of the last `keeper.dev/rotate-credentials` value it handled.
pub const ROTATE_HANDLED_ANNOTATION: &str = "keeper.dev/rotate-credentials-handled";

/// A bucket that is not idle and Ready (failed, refused, being deleted) is reconciled again this
/// soon, and a drain's observation stands in for a new one this long. An idle Ready bucket's
/// schedule is [`plan::usage`]'s.
const RECHECK: Duration = runtime::RESYNC;
/// A client-side drain continues this soon after a round, until the bucket is empty: at once.
/// A round ends when its time budget is spent (its progress is then written) or on an error
/// (which backs off instead), so continuing at once is no hot loop; a pause would only cost
/// throughput (a second in every `roundDuration` of five).
const CLIENT_DRAIN_CONTINUE: Duration = Duration::ZERO;
/// Retry delay for conditions that fix themselves shortly (usage lag after a drain).
const SHORT_RETRY: Duration = Duration::from_secs(10);

/// What an S3Bucket reconcile fails with.
pub type Error = Failure<BucketFailure>;

/// The failures only the S3Bucket controller meets.
#[derive(Debug, thiserror::Error)]
pub enum BucketFailure {
    /// A spec or configuration problem that only a change fixes.
    #[error("{message}")]
    Invalid {
        reason: &'static str,
        message: String,
    },
    /// A state that heals by itself shortly (a bucket created a moment ago not visible yet).
    #[error("{0}")]
    Retry(String),
}

impl ControllerFailure for BucketFailure {
    fn reason(&self) -> &'static str {
        match self {
            BucketFailure::Invalid { .. } => "invalid_spec",
            BucketFailure::Retry(_) => "retry",
        }
    }

    fn class(&self) -> ErrorClass {
        match self {
            BucketFailure::Invalid { .. } => ErrorClass::Permanent,
            BucketFailure::Retry(_) => ErrorClass::Transient,
        }
    }

    fn condition_reason(&self) -> &'static str {
        match self {
            BucketFailure::Invalid { reason, .. } => reason,
            BucketFailure::Retry(_) => "Retrying",
        }
    }
}

/// The S3Bucket reconciler over its connection to tenants' storage ([`Live`] in production, an
/// in-memory backend in tests).
pub struct S3BucketReconciler<C: Connector = Live> {
    connector: C,
    /// What this process last learnt of each bucket (by uid) on the backend, so that usage is
    /// listed and an idle bucket looked at on their timers, not every reconcile. One map under
    /// one lock: the two records change together.
    looked: Mutex<HashMap<Uid, Looked>>,
    /// Buckets (by uid) whose user's access keys this process has listed since it started. A
    /// bucket whose last reconcile ended Ready is taken as settled, its user not listed again,
    /// only once this process has looked: a keeper that starts cannot know whether another
    /// writer (a second keeper without leader election, a leader that lost its lease) was killed
    /// between creating a key and publishing it, leaving a key nobody holds.
    keys_listed: Uids,
    /// Buckets (by uid) whose credentials Secret the API refused to create because their
    /// namespace is being deleted: it stays so until the bucket goes with it, and no key is
    /// issued for them again ([`plan::lifecycle::WITHHELD_NAMESPACE_TERMINATING`]). By bucket, not by
    /// namespace name: a namespace of the same name made later holds other buckets.
    namespace_terminating: Uids,
    objects_deleted: IntCounter,
}

impl<C: Connector> S3BucketReconciler<C> {
    fn new(connector: C, objects_deleted: IntCounter) -> Self {
        S3BucketReconciler {
            connector,
            looked: Mutex::default(),
            keys_listed: Uids::default(),
            namespace_terminating: Uids::default(),
            objects_deleted,
        }
    }

    fn cached(&self, uid: Uid) -> Option<Observed> {
        let looked = self.looked.lock().expect("looked-at buckets lock");
        looked
            .get(&uid)
            .and_then(|l| l.usage)
            .filter(|(at, _)| at.elapsed() < RECHECK)
            .map(|(_, observed)| observed)
    }

    /// How long ago this process last observed the bucket's usage and last saw it.
    fn since(&self, uid: Uid) -> plan::usage::Since {
        let looked = self.looked.lock().expect("looked-at buckets lock");
        let looked = looked.get(&uid);
        plan::usage::Since {
            usage: looked.and_then(|l| l.usage).map(|(at, _)| at.elapsed()),
            seen: looked.and_then(|l| l.seen).map(|at| at.elapsed()),
        }
    }

    /// Keeps what the outcome does not carry: the usage observation, when the bucket was last
    /// seen, and the drain counter; a bucket let go is forgotten.
    fn settle(&self, obj: &S3Bucket, report: &Report) {
        self.objects_deleted.inc_by(report.deleted);
        let uid = Uid::of(obj);
        let mut looked = self.looked.lock().expect("looked-at buckets lock");
        if report.next == runtime::Next::Release {
            self.keys_listed.remove(uid);
            self.namespace_terminating.remove(uid);
            looked.remove(&uid);
            return;
        }
        let entry = looked.entry(uid).or_default();
        if report.seen || matches!(report.observed, Cache::Store(_)) {
            entry.seen = Some(Instant::now());
        }
        match report.observed {
            Cache::Keep => {}
            Cache::Store(observed) => entry.usage = Some((Instant::now(), observed)),
            Cache::Forget => entry.usage = None,
        }
    }
}

/// Buckets, by uid, that this process learnt one thing of, kept until the bucket goes.
#[derive(Default)]
struct Uids(Mutex<HashSet<Uid>>);

impl Uids {
    fn contains(&self, uid: Uid) -> bool {
        self.0.lock().expect("bucket uids lock").contains(&uid)
    }

    fn insert(&self, uid: Uid) {
        self.0.lock().expect("bucket uids lock").insert(uid);
    }

    fn remove(&self, uid: Uid) {
        self.0.lock().expect("bucket uids lock").remove(&uid);
    }
}

/// What one process last learnt of a bucket on the backend.
#[derive(Debug, Default)]
struct Looked {
    /// When it was last seen there (an existence look, a usage observation, its creation).
    seen: Option<Instant>,
    /// Its last usage observation, and when.
    usage: Option<(Instant, Observed)>,
}

impl<C: Connector> Reconciler for S3BucketReconciler<C> {
    type Resource = S3Bucket;
    type Error = Error;
    const NAME: &'static str = "s3bucket";
    const KIND: ControllerKind = ControllerKind::Bucket;
    const FINALIZER: &'static str = BUCKET_FINALIZER;

    fn lane(obj: &S3Bucket) -> Lane {
        reconcile::lane(obj)
    }

    /// Drains run on turns of their own, so they never hold the workers new buckets need.
    fn long_turns(config: &OperatorConfig) -> u16 {
        config.runtime.drain_concurrency()
    }

    async fn apply(
        &self,
        obj: Arc<S3Bucket>,
        cx: &Context<Self>,
    ) -> Result<Outcome<S3BucketStatus>, Error> {
        let mut out = reconcile::apply(cx, &obj).await?;
        reconcile::record_requests_by_value(&obj, &mut out.status);
        Ok(out)
    }

    async fn cleanup(
        &self,
        obj: Arc<S3Bucket>,
        cx: &Context<Self>,
    ) -> Result<Outcome<S3BucketStatus>, Error> {
        let mut out = reconcile::cleanup(cx, &obj).await?;
        reconcile::record_requests_by_value(&obj, &mut out.status);
        Ok(out)
    }
}

/// Buckets in the tenant's namespace that name the tenant.
fn buckets_of(store: &Store<S3Bucket>, tenant: &S3Tenant) -> Vec<ObjectRef<S3Bucket>> {
    let namespace = tenant.namespace();
    let name = tenant.name_any();
    triggers::cached_where(store, |b| {
        b.namespace() == namespace && b.spec.tenant_ref.name == name
    })
}

pub async fn run(
    shared: Shared,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let store = shared.informers.buckets().store();
    let mapper_store = store.clone();
    // A tenant turning Ready (or changing what its buckets read of it) is what a waiting bucket
    // waits for; its bucket count, which each bucket created or deleted in it changes, is not.
    let controller = runtime::controller::<S3Bucket>(&shared.informers).watches_stream(
        triggers::changed(
            shared.informers.tenants().changes(),
            plan::lifecycle::tenant_trigger_key,
        ),
        move |tenant| buckets_of(&mapper_store, &tenant),
    );
    let objects_deleted = register_metrics(&shared.metrics, store)?;
    let cx = Arc::new(Context::new(
        shared,
        S3BucketReconciler::new(Live::default(), objects_deleted),
    ));
    runtime::run(controller, cx, readiness, shutdown).await;
    Ok(())
}

/// The bucket-specific metrics (the runtime registers `keeper_buckets{phase}` and
/// `keeper_deletion_blocked`); returns the drain counter.
fn register_metrics(metrics: &Metrics, store: Store<S3Bucket>) -> anyhow::Result<IntCounter> {
    metrics.register(StoreGauge::new(
        "keeper_drain_active",
        "S3Buckets with a drain in progress.",
        store.clone(),
        &[],
        "",
        &[""],
        |b: &S3Bucket| {
            plan::drain::is_ours(b.status.as_ref().and_then(|s| s.drain_status.as_ref()))
                .then(String::new)
        },
    ));
    metrics.register(StoreGauge::new(
        "keeper_drains_stuck",
        "S3Buckets whose drain deleted no object for its stuck threshold.",
        store,
        &[],
        "",
        &[""],
        |b: &S3Bucket| {
            b.status
                .as_ref()
                .and_then(|s| s.drain_status.as_ref())
                .filter(|d| plan::drain::is_ours(Some(d)) && d.stuck)
                .map(|_| String::new())
        },
    ));
    let objects_deleted = IntCounter::new(
        "keeper_drain_objects_deleted_total",
        "Objects deleted by bucket drains (client-side: by keeper; server-side: as seen at polls).",
    )?;
    metrics.register(objects_deleted.clone());
    Ok(objects_deleted)
}

#[cfg(test)]
mod tests;
