//! S3Bucket controller: creates the bucket in its tenant, publishes bucket credentials, refreshes
//! usage on a timer, drains on request (annotation `keeper.dev/drain=true`) and deletes the bucket
//! only once it is empty and only if keeper created it.
//!
//! The decisions live in pure functions ([`drain`], [`lifecycle`]) and in [`apply_bucket`] /
//! [`cleanup_bucket`], which talk to the storage only through [`BucketBackend`] and return an
//! [`Outcome`]; the reconciler gathers the inputs from Kubernetes and writes the outcome back.

mod backend;
mod drain;
mod lifecycle;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use prometheus::IntCounter;
use tokio_util::sync::CancellationToken;

use crate::api::names::{default_bucket_name, validate_bucket_name};
use crate::api::{BucketPhase, DeletionPolicy, S3Bucket, S3BucketStatus, S3Tenant};
use crate::backends::s3::{DeleteOutcome, S3Settings, S3Store};
use crate::backends::storagegrid;
use crate::config::{Provider, S3CompatibleProvider, StorageGridProvider};
use crate::controllers::tenant::{credentials_secret_name, root_secret_name};
use crate::runtime::gauges::{self, StoreGauge};
use crate::runtime::legacy::{Cleanup, Context, ReconcileError, Reconciler};
use crate::runtime::{self, Shared, conditions};
use crate::server::Readiness;

use backend::{BackendError, BucketBackend, DesiredBucket, KeyPlan, Keys, Observed, Owner};
use drain::{DrainSettings, DrainStep, Note};
use lifecycle::TenantGate;

pub const DRAIN_ANNOTATION: &str = "keeper.dev/drain";
pub const ADOPT_ANNOTATION: &str = "keeper.dev/adopt";
pub const ROTATE_ANNOTATION: &str = "keeper.dev/rotate-credentials";

/// Usage is listed at most this often outside drains (listing can be expensive).
const USAGE_REFRESH: Duration = runtime::RESYNC;
/// A client-side drain continues this soon after a round, until the bucket is empty.
const CLIENT_DRAIN_CONTINUE: Duration = Duration::from_secs(1);
/// Retry delay for conditions that fix themselves shortly (usage lag after a drain).
const SHORT_RETRY: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    #[error("storage backend error: {0}")]
    Backend(#[from] BackendError),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Backend(_) => "backend",
        }
    }
}

/// Whether an annotation is set to `true`.
fn annotated(obj: &S3Bucket, key: &str) -> bool {
    obj.annotations().get(key).is_some_and(|v| v == "true")
}

/// Everything the bucket logic reads besides the backend.
#[derive(Clone)]
pub struct View<'a> {
    pub obj: &'a S3Bucket,
    pub desired: DesiredBucket,
    pub drain: DrainSettings,
    pub now: Timestamp,
    /// The last observation, when it is recent enough to stand in for a new one.
    pub cached: Option<Observed>,
}

/// What a reconcile decided: the caller writes it back.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: S3BucketStatus,
    pub notes: Vec<Note>,
    pub remove_annotations: Vec<&'static str>,
    pub requeue: Duration,
    /// Objects a drain deleted in this reconcile (for `keeper_drain_objects_deleted_total`).
    pub deleted: u64,
    /// A fresh observation to cache, or `Forget` to drop the cached one.
    pub observed: Cache,
    /// Cleanup only: the finalizer may go.
    pub released: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cache {
    Keep,
    Store(Observed),
    Forget,
}

impl Outcome {
    fn new(status: S3BucketStatus, requeue: Duration) -> Self {
        Outcome {
            status,
            notes: Vec::new(),
            remove_annotations: Vec::new(),
            requeue,
            deleted: 0,
            observed: Cache::Keep,
            released: false,
        }
    }

    /// Sets the `Ready` condition; returns whether it changed.
    fn ready(
        &mut self,
        ok: bool,
        reason: &'static str,
        message: String,
        generation: Option<i64>,
    ) -> bool {
        conditions::set(
            &mut self.status.conditions,
            conditions::READY,
            ok,
            reason,
            message,
            generation,
        )
    }

    /// `Failed` with a Warning event when the failure is new.
    fn fail(&mut self, reason: &'static str, message: String, generation: Option<i64>) {
        self.status.phase = Some(BucketPhase::Failed);
        if self.ready(false, reason, message.clone(), generation) {
            self.notes.push(Note::warning(reason, message));
        }
    }

    /// `Pending` on something outside the bucket (a tenant not Ready yet is no failure): a
    /// Normal event when the reason to wait is new.
    fn wait(&mut self, reason: &'static str, message: String, generation: Option<i64>) {
        self.status.phase = Some(BucketPhase::Pending);
        if self.ready(false, reason, message.clone(), generation) {
            self.notes.push(Note::normal(reason, message));
        }
    }
}

/// Observes the bucket unless a cached observation is good enough.
async fn observe<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
    fresh: bool,
    out: &mut Outcome,
) -> Result<Option<Observed>, BackendError> {
    if !fresh && let Some(cached) = view.cached {
        return Ok(Some(cached));
    }
    let observed = backend.observe(&view.desired.name).await?;
    out.observed = observed.map_or(Cache::Forget, Cache::Store);
    Ok(observed)
}

/// Runs the drain state machine on an existing bucket of ours. Returns the object count left
/// when the drain machine is idle or finished (`None` while a drain runs or is blocked).
async fn run_drain<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
    out: &mut Outcome,
) -> Result<Option<i64>, BackendError> {
    let obj = view.obj;
    let generation = obj.metadata.generation;
    let bucket = &view.desired.name;
    let wants = annotated(obj, DRAIN_ANNOTATION);
    let current = out.status.drain_status.clone();
    let ours = drain::is_ours(current.as_ref());
    let due = current
        .as_ref()
        .is_none_or(|status| drain::poll_due(status, view.now));
    // Starting, polling and canceling a drain need the real count; anything else may use the cache.
    let fresh = if wants { !ours || due } else { ours };
    let Some(mut observed) = observe(backend, view, fresh, out).await? else {
        out.status.drain_status = None;
        out.status.phase = Some(BucketPhase::Pending);
        let message =
            format!("bucket {bucket:?} no longer exists on the backend; creating it again");
        // Someone deleted it behind keeper's back: worth a warning.
        if out.ready(false, "BucketMissing", message.clone(), generation) {
            out.notes.push(Note::warning("BucketMissing", message));
        }
        out.requeue = SHORT_RETRY;
        return Ok(None);
    };
    let mode = backend.drain_mode();
    let client_side = mode == crate::api::DrainMode::ClientSide;
    // A client-side drain reports its first deletions at once rather than at the first poll.
    let mut report_now = due;
    // Client-side drains delete between polls: keeper is the one emptying the bucket.
    if wants && ours && client_side {
        let progress = backend.drain_round(bucket).await?;
        out.deleted += progress.deleted;
        if let Some(blocked) = progress.blocked {
            out.fail(
                "DrainBlocked",
                format!("drain stopped: {blocked}"),
                generation,
            );
            out.requeue = drain::next_poll_interval(&view.drain, Duration::ZERO);
            out.observed = Cache::Forget;
            return Ok(None);
        }
        if progress.empty {
            observed = Observed {
                objects: 0,
                bytes: 0,
                backend_draining: false,
            };
            out.observed = Cache::Store(observed);
        } else if !due
            && progress.deleted > 0
            && current.as_ref().is_some_and(drain::awaiting_first_progress)
        {
            let previous = current.as_ref().map_or(0, |s| s.previous_object_count);
            observed.objects = (previous - progress.deleted as i64).max(1);
            report_now = true;
        }
        // Otherwise the cached count stays until the next poll: listing the bucket after every
        // round would cost more than the deletes.
    }
    let step = drain::decide(wants, ours, observed.backend_draining, observed.objects);
    match step {
        DrainStep::Idle => {}
        DrainStep::Initiate => {
            backend.start_drain(bucket).await?;
            let (status, note) = drain::initiate(
                observed.objects,
                observed.bytes,
                mode,
                &view.drain,
                view.now,
            );
            out.notes.push(note);
            out.requeue = if client_side {
                CLIENT_DRAIN_CONTINUE
            } else {
                drain::next_poll_interval(&view.drain, Duration::ZERO)
            };
            out.status.drain_status = Some(status);
        }
        DrainStep::AlreadyEmpty => {
            out.notes.push(drain::already_empty());
            out.remove_annotations.push(DRAIN_ANNOTATION);
        }
        DrainStep::Poll => {
            let status = current.expect("a poll runs on our drain");
            if report_now {
                if !client_side {
                    // The grid deleted these since the last poll (keeper counts its own deletes).
                    out.deleted +=
                        u64::try_from(status.previous_object_count - observed.objects).unwrap_or(0);
                }
                let (next, notes) = drain::poll(&status, observed.objects, &view.drain, view.now);
                out.notes.extend(notes);
                out.status.drain_status = Some(next);
            }
            let polled = out.status.drain_status.as_ref().expect("still draining");
            let interval = polled
                .next_poll_interval
                .as_deref()
                .and_then(|s| crate::api::names::parse_duration(s).ok())
                .unwrap_or(view.drain.initial_poll);
            out.requeue = if client_side {
                CLIENT_DRAIN_CONTINUE
            } else {
                // Wake up when the next poll is due, not a full interval after an unrelated event.
                let since = polled
                    .last_checked_at
                    .as_ref()
                    .and_then(|t| view.now.duration_since(t.0).try_into().ok())
                    .unwrap_or_default();
                interval.saturating_sub(since).max(Duration::from_secs(1))
            };
        }
        DrainStep::Complete => {
            backend.stop_drain(bucket).await?;
            let status = current.expect("completion ends our drain");
            if !client_side {
                out.deleted += u64::try_from(status.previous_object_count).unwrap_or(0);
            }
            out.notes.extend(drain::complete(&status));
            out.status.drain_status = None;
            out.remove_annotations.push(DRAIN_ANNOTATION);
            // The observation still shows the backend draining: drop it, or the next reconcile
            // would take the stopped drain for an orphan.
            out.observed = Cache::Forget;
        }
        DrainStep::Cancel => {
            backend.stop_drain(bucket).await?;
            let status = current.expect("cancellation ends our drain");
            out.notes
                .push(drain::cancel(&status, Some(observed.objects)));
            out.status.drain_status = None;
            out.observed = Cache::Forget;
        }
        DrainStep::CancelOrphan => {
            backend.stop_drain(bucket).await?;
            out.notes.push(drain::cancel_orphan());
            out.observed = Cache::Forget;
        }
    }
    // Between polls the status keeps the counts of the last poll.
    if step != DrainStep::Poll || report_now {
        out.status.object_count = Some(observed.objects);
        out.status.object_bytes = Some(observed.bytes);
    }
    if matches!(step, DrainStep::Initiate | DrainStep::Poll) {
        out.status.phase = Some(BucketPhase::Draining);
        Ok(None)
    } else {
        Ok(Some(observed.objects))
    }
}

/// Reconciles a live bucket: create or converge it, refresh usage, run the drain machine.
pub async fn apply_bucket<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
) -> Result<Outcome, BackendError> {
    let obj = view.obj;
    let generation = obj.metadata.generation;
    let before = obj.status.clone().unwrap_or_default();
    let mut out = Outcome::new(before.clone(), USAGE_REFRESH);
    if lifecycle::needs_ensure(&before, generation, &view.desired.name) {
        match backend.ensure(&view.desired).await? {
            Owner::Us => {}
            Owner::Someone(message) => {
                out.fail(
                    "BucketNotOwned",
                    format!(
                        "{message}; keeper does not adopt it unless annotated {ADOPT_ANNOTATION}=true"
                    ),
                    generation,
                );
                out.status.observed_generation = generation;
                return Ok(out);
            }
            Owner::Missing => {
                return Err(BackendError {
                    transient: true,
                    message: format!(
                        "bucket {:?} disappeared while it was created",
                        view.desired.name
                    ),
                });
            }
        }
        // Recorded only after a successful create or adoption: the ownership record for
        // backends without tags.
        out.status.bucket_name = Some(view.desired.name.clone());
    }
    out.status.observed_generation = generation;
    if let Some(objects) = run_drain(backend, view, &mut out).await? {
        out.status.phase = Some(BucketPhase::Ready);
        out.ready(
            true,
            "BucketReady",
            format!("bucket {:?} holds {objects} objects", view.desired.name),
            generation,
        );
    } else if out.status.phase == Some(BucketPhase::Draining) {
        out.ready(
            true,
            "Draining",
            format!("bucket {:?} is being drained", view.desired.name),
            generation,
        );
    }
    Ok(out)
}

/// Cleans up after a deleted resource: drains if asked, refuses while objects remain, deletes
/// the bucket once empty, and never touches a bucket keeper did not create.
pub async fn cleanup_bucket<B: BucketBackend>(
    backend: &B,
    view: &View<'_>,
) -> Result<Outcome, BackendError> {
    let obj = view.obj;
    let generation = obj.metadata.generation;
    let mut status = obj.status.clone().unwrap_or_default();
    status.phase = Some(BucketPhase::Deleting);
    let mut out = Outcome::new(status, USAGE_REFRESH);
    let bucket = &view.desired.name;
    match backend.owner(&view.desired).await? {
        Owner::Missing => {
            backend.delete_credentials(bucket).await?;
            out.released = true;
            return Ok(out);
        }
        Owner::Someone(message) => {
            out.notes.push(Note::normal(
                "BucketRetained",
                format!("{message}; released without deleting it"),
            ));
            out.released = true;
            return Ok(out);
        }
        Owner::Us => {}
    }
    // A cached "empty" must not lead to a delete: look again (the backend would refuse to
    // delete a non-empty bucket anyway, but the status would claim the wrong thing meanwhile).
    let view = &View {
        cached: view.cached.filter(|o| o.objects > 0),
        ..view.clone()
    };
    let remaining = run_drain(backend, view, &mut out).await?;
    if out.status.phase == Some(BucketPhase::Pending) {
        // The bucket disappeared from the backend: nothing left to delete.
        backend.delete_credentials(bucket).await?;
        out.released = true;
        return Ok(out);
    }
    let Some(objects) = remaining else {
        if out.status.phase == Some(BucketPhase::Failed) {
            // The drain stopped (object lock, legal hold): deletion waits for the user.
            let message = conditions_message(&out.status, conditions::READY);
            conditions::set(
                &mut out.status.conditions,
                conditions::DELETION_BLOCKED,
                true,
                "DrainBlocked",
                message,
                generation,
            );
        } else {
            // Draining as asked: deletion is no longer waiting for the user.
            conditions::remove(&mut out.status.conditions, conditions::DELETION_BLOCKED);
        }
        return Ok(out);
    };
    out.status.phase = Some(BucketPhase::Deleting);
    if objects > 0 {
        let message = lifecycle::not_empty_message(obj, objects);
        let was_blocked = conditions::is_true(&out.status.conditions, conditions::DELETION_BLOCKED);
        conditions::set(
            &mut out.status.conditions,
            conditions::DELETION_BLOCKED,
            true,
            "BucketNotEmpty",
            message.clone(),
            generation,
        );
        // One warning when deletion becomes blocked, not one per changed object count.
        if !was_blocked {
            out.notes.push(Note::warning("BucketNotEmpty", message));
        }
        return Ok(out);
    }
    match backend.delete(bucket).await? {
        DeleteOutcome::Deleted => {
            backend.delete_credentials(bucket).await?;
            out.released = true;
            out.observed = Cache::Forget;
        }
        // The usage figure lags behind the bucket or does not count everything the backend
        // counts (delete markers): say so, and look again soon.
        DeleteOutcome::NotEmpty => {
            let message = format!(
                "the backend refuses to delete bucket {bucket:?} because it is not empty, although its usage showed no objects (usage can lag, and delete markers may not be counted); keeper retries"
            );
            let was_blocked =
                conditions::is_true(&out.status.conditions, conditions::DELETION_BLOCKED);
            conditions::set(
                &mut out.status.conditions,
                conditions::DELETION_BLOCKED,
                true,
                "BucketNotEmpty",
                message.clone(),
                generation,
            );
            if !was_blocked {
                out.notes.push(Note::warning("BucketNotEmpty", message));
            }
            out.observed = Cache::Forget;
            out.requeue = SHORT_RETRY;
        }
    }
    Ok(out)
}

/// The message of condition `type_`, or an empty string.
fn conditions_message(status: &S3BucketStatus, type_: &str) -> String {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// The resolved storage behind a tenant.
enum AnyBackend {
    S3(backend::S3Compatible),
    Grid(backend::StorageGrid),
}

/// The published endpoint and region of a provider.
fn published_endpoint(provider: &Provider) -> String {
    match provider {
        Provider::StorageGrid(p) => p.s3_endpoint.to_string(),
        Provider::S3Compatible(p) => p.endpoint.to_string(),
    }
}

fn provider_region(provider: &Provider) -> &str {
    match provider {
        Provider::StorageGrid(p) => &p.region,
        Provider::S3Compatible(p) => &p.region,
    }
}

/// Why the bucket cannot be worked on yet or at all.
enum Blocked {
    /// Waiting for something outside the bucket (tenant, Secret): `Pending`.
    Pending(&'static str, String),
    /// Bad input that needs a change: `Failed`.
    Failed(&'static str, String),
}

pub struct S3BucketReconciler {
    /// Last observation per bucket uid, so that usage is listed on a timer, not every reconcile.
    usage: Mutex<HashMap<String, (Instant, Observed)>>,
    /// S3 clients per endpoint and access key, so connections are reused across reconciles.
    stores: Mutex<HashMap<(String, String, String), S3Store>>,
    /// StorageGRID clients per provider name.
    grids: Mutex<HashMap<String, storagegrid::Client>>,
    objects_deleted: IntCounter,
}

impl S3BucketReconciler {
    fn new(objects_deleted: IntCounter) -> Self {
        S3BucketReconciler {
            usage: Mutex::default(),
            stores: Mutex::default(),
            grids: Mutex::default(),
            objects_deleted,
        }
    }

    fn cached(&self, uid: &str) -> Option<Observed> {
        let usage = self.usage.lock().expect("usage cache lock");
        usage
            .get(uid)
            .filter(|(at, _)| at.elapsed() < USAGE_REFRESH)
            .map(|(_, observed)| *observed)
    }

    fn remember(&self, uid: &str, cache: Cache) {
        let mut usage = self.usage.lock().expect("usage cache lock");
        match cache {
            Cache::Keep => {}
            Cache::Store(observed) => {
                usage.insert(uid.to_string(), (Instant::now(), observed));
            }
            Cache::Forget => {
                usage.remove(uid);
            }
        }
    }

    /// The S3 client for a provider and a set of keys, built on first use.
    fn store(&self, provider: &S3CompatibleProvider, keys: &Keys) -> Result<S3Store, String> {
        let cache_key = (
            provider.endpoint.to_string(),
            keys.access_key_id.clone(),
            keys.secret_access_key.clone(),
        );
        let mut stores = self.stores.lock().expect("store cache lock");
        if let Some(store) = stores.get(&cache_key) {
            return Ok(store.clone());
        }
        if provider.tls.insecure_skip_verify {
            return Err("tls.insecureSkipVerify is not supported for S3-compatible providers; trust the store's CA with tls.caBundleFile".to_string());
        }
        let ca_bundle = provider
            .tls
            .ca_bundle_file
            .as_ref()
            .map(|path| {
                std::fs::read(path)
                    .map_err(|e| format!("cannot read CA bundle {}: {e}", path.display()))
            })
            .transpose()?;
        let store = S3Store::new(&S3Settings {
            endpoint: provider.endpoint.to_string(),
            region: provider.region.clone(),
            access_key_id: keys.access_key_id.clone(),
            secret_access_key: keys.secret_access_key.clone(),
            force_path_style: provider.force_path_style,
            ca_bundle,
        })?;
        stores.insert(cache_key, store.clone());
        Ok(store)
    }

    /// Resolves tenant, provider and credentials into a backend and a view of the bucket.
    async fn resolve<'a>(
        &self,
        obj: &'a S3Bucket,
        ctx: &Context<Self>,
    ) -> Result<Result<(AnyBackend, View<'a>, Provider), Blocked>, Error> {
        let namespace = obj.namespace().unwrap_or_default();
        let tenants: Api<S3Tenant> = Api::namespaced(ctx.shared.client.clone(), &namespace);
        let tenant = tenants.get_opt(&obj.spec.tenant_ref.name).await?;
        let tenant = match lifecycle::tenant_gate(
            obj,
            tenant.as_ref(),
            obj.metadata.deletion_timestamp.is_some(),
        ) {
            TenantGate::Ready => tenant.expect("gate passed"),
            TenantGate::Wait(reason, message) => return Ok(Err(Blocked::Pending(reason, message))),
        };
        let Some(provider) = ctx
            .shared
            .config
            .providers
            .get(&tenant.spec.provider)
            .cloned()
        else {
            return Ok(Err(Blocked::Failed(
                "ProviderNotConfigured",
                format!(
                    "tenant {:?} uses provider {:?}, which keeper's configuration does not define",
                    tenant.name_any(),
                    tenant.spec.provider
                ),
            )));
        };
        let bucket = obj
            .spec
            .bucket_name
            .clone()
            .unwrap_or_else(|| default_bucket_name(&namespace, &obj.name_any()));
        if let Err(e) = validate_bucket_name(&bucket) {
            return Ok(Err(Blocked::Failed("InvalidBucketName", e.to_string())));
        }
        let drain = match drain::settings(obj.spec.drain.as_ref(), provider.drain()) {
            Ok(drain) => drain,
            Err(e) => return Ok(Err(Blocked::Failed("InvalidDrainSettings", e.to_string()))),
        };
        let region = obj
            .spec
            .region
            .clone()
            .unwrap_or_else(|| provider_region(&provider).to_string());
        let backend = match self.backend(ctx, &tenant, &provider).await? {
            Ok(backend) => backend,
            Err(blocked) => return Ok(Err(blocked)),
        };
        let uid = obj.uid().unwrap_or_default();
        let view = View {
            obj,
            desired: DesiredBucket {
                name: bucket.clone(),
                region,
                versioning: obj.spec.versioning,
                object_lock: obj.spec.object_lock,
                recorded: obj.status.as_ref().and_then(|s| s.bucket_name.as_deref())
                    == Some(bucket.as_str()),
                owner_uid: uid.clone(),
                adopt: annotated(obj, ADOPT_ANNOTATION),
            },
            drain,
            now: Timestamp::now(),
            cached: self.cached(&uid),
        };
        Ok(Ok((backend, view, provider)))
    }

    /// The backend of the tenant's provider, signed in with the tenant's credentials.
    async fn backend(
        &self,
        ctx: &Context<Self>,
        tenant: &S3Tenant,
        provider: &Provider,
    ) -> Result<Result<AnyBackend, Blocked>, Error> {
        let namespace = tenant.namespace().unwrap_or_default();
        let tenant_name = tenant.name_any();
        match provider {
            Provider::S3Compatible(p) => {
                let secret_name = tenant
                    .status
                    .as_ref()
                    .and_then(|s| s.credentials_secret.clone())
                    .unwrap_or_else(|| credentials_secret_name(&tenant_name));
                let secret =
                    runtime::secrets::read(&ctx.shared.client, &namespace, &secret_name).await?;
                let Some(tenant_keys) = secret.as_ref().and_then(lifecycle::keys_from) else {
                    return Ok(Err(Blocked::Pending(
                        "TenantCredentialsMissing",
                        format!(
                            "the tenant's credentials Secret {secret_name:?} does not exist yet or lacks accessKeyId/secretAccessKey"
                        ),
                    )));
                };
                let store = match self.store(p, &tenant_keys) {
                    Ok(store) => store,
                    Err(message) => return Ok(Err(Blocked::Failed("ProviderClient", message))),
                };
                Ok(Ok(AnyBackend::S3(backend::S3Compatible {
                    store,
                    metrics: ctx.shared.metrics.clone(),
                    tenant_keys,
                    max_deletes_per_second: p.drain.max_deletes_per_second,
                })))
            }
            Provider::StorageGrid(p) => {
                let client = match self.grid(&tenant.spec.provider, p, ctx) {
                    Ok(client) => client,
                    Err(message) => {
                        return Ok(Err(Blocked::Failed("ProviderClient", message)));
                    }
                };
                let Some(account_id) = tenant.status.as_ref().and_then(|s| s.account_id.clone())
                else {
                    return Ok(Err(Blocked::Pending(
                        "TenantAccountMissing",
                        format!("S3Tenant {tenant_name:?} has no StorageGRID account id yet"),
                    )));
                };
                let secret_name = root_secret_name(&tenant_name);
                let password = runtime::secrets::read(&ctx.shared.client, &namespace, &secret_name)
                    .await?
                    .and_then(|d| d.get("password").cloned())
                    .filter(|p| !p.is_empty());
                let Some(password) = password else {
                    return Ok(Err(Blocked::Pending(
                        "TenantCredentialsMissing",
                        format!(
                            "the tenant's root credentials Secret {secret_name:?} does not exist yet or lacks a password"
                        ),
                    )));
                };
                Ok(Ok(AnyBackend::Grid(backend::StorageGrid {
                    client,
                    tenant: storagegrid::Login::tenant_root(account_id, password),
                })))
            }
        }
    }

    /// One StorageGRID client per provider, so its token cache serves every reconcile.
    fn grid(
        &self,
        name: &str,
        provider: &StorageGridProvider,
        ctx: &Context<Self>,
    ) -> Result<storagegrid::Client, String> {
        let mut grids = self.grids.lock().expect("grid cache lock");
        if let Some(client) = grids.get(name) {
            return Ok(client.clone());
        }
        let client = storagegrid::Client::new(
            &provider.admin_endpoint.0,
            &provider.tls,
            ctx.shared.metrics.clone(),
        )
        .map_err(|e| format!("cannot build the client of provider {name:?}: {e}"))?;
        grids.insert(name.to_string(), client.clone());
        Ok(client)
    }

    /// Writes an outcome back: status, events, annotations, metrics and the usage cache.
    async fn write(&self, obj: &S3Bucket, ctx: &Context<Self>, out: &Outcome) -> Result<(), Error> {
        self.remember(&obj.uid().unwrap_or_default(), out.observed);
        self.objects_deleted.inc_by(out.deleted);
        ctx.update_status(obj, &out.status).await?;
        for note in &out.notes {
            ctx.publish(
                obj,
                note.type_,
                note.reason,
                note.message.clone(),
                "Reconcile",
            )
            .await;
        }
        remove_annotations(ctx, obj, &out.remove_annotations).await?;
        Ok(())
    }

    /// Publishes `<name>-credentials` and handles `keeper.dev/rotate-credentials`.
    async fn publish_credentials<B: BucketBackend>(
        &self,
        backend: &B,
        obj: &S3Bucket,
        ctx: &Context<Self>,
        bucket: &str,
        provider: &Provider,
        region: &str,
    ) -> Result<(), Error> {
        let namespace = obj.namespace().unwrap_or_default();
        let name = format!("{}-credentials", obj.name_any());
        let current = runtime::secrets::read(&ctx.shared.client, &namespace, &name).await?;
        let published = current.as_ref().and_then(lifecycle::keys_from);
        let rotate = annotated(obj, ROTATE_ANNOTATION);
        let plan = backend.keys(bucket, published.as_ref(), rotate).await?;
        let issued = matches!(plan, KeyPlan::Publish { .. });
        let (keys, retire) = match (plan, published) {
            (KeyPlan::Keep, Some(published)) => (published, None),
            (KeyPlan::Publish { keys, retire }, _) => (keys, retire),
            (KeyPlan::Keep, None) => {
                return Err(Error::Backend(BackendError {
                    transient: true,
                    message: format!("no keys to publish in Secret {name:?}"),
                }));
            }
        };
        let endpoint = published_endpoint(provider);
        let data = lifecycle::secret_data(&keys, &endpoint, region, bucket);
        runtime::secrets::apply(&ctx.shared.client, obj, &name, data).await?;
        if let Some(old) = &retire {
            backend.retire_key(bucket, old).await?;
        }
        if rotate {
            let note = if issued {
                let retired = if retire.is_some() {
                    " and deleted the old key"
                } else {
                    ""
                };
                format!("Published new keys in Secret {name:?}{retired}")
            } else {
                format!(
                    "Secret {name:?} carries the tenant's keys on this provider: rotate the tenant's keys instead"
                )
            };
            ctx.publish(
                obj,
                EventType::Normal,
                "CredentialsRotated",
                note,
                "RotateCredentials",
            )
            .await;
            remove_annotations(ctx, obj, &[ROTATE_ANNOTATION]).await?;
        }
        Ok(())
    }

    /// Shows a problem that is not a backend error in the status.
    async fn show_blocked(
        &self,
        obj: &S3Bucket,
        ctx: &Context<Self>,
        blocked: Blocked,
        deleting: bool,
    ) -> Result<Action, Error> {
        let mut out = Outcome::new(obj.status.clone().unwrap_or_default(), runtime::RESYNC);
        let generation = obj.metadata.generation;
        out.status.observed_generation = generation;
        match blocked {
            Blocked::Pending(reason, message) => out.wait(reason, message, generation),
            Blocked::Failed(reason, message) => out.fail(reason, message, generation),
        }
        if deleting {
            out.status.phase = Some(BucketPhase::Deleting);
            let message = conditions_message(&out.status, conditions::READY);
            conditions::set(
                &mut out.status.conditions,
                conditions::DELETION_BLOCKED,
                true,
                "BackendUnavailable",
                format!("cannot reach the bucket to clean it up: {message}"),
                generation,
            );
        }
        self.write(obj, ctx, &out).await?;
        Ok(Action::requeue(out.requeue))
    }

    /// Turns a permanent backend error into `Failed`; transient ones go back for a retry.
    async fn show_backend_error(
        &self,
        obj: &S3Bucket,
        ctx: &Context<Self>,
        error: BackendError,
    ) -> Result<Action, Error> {
        if error.transient {
            return Err(error.into());
        }
        self.show_blocked(
            obj,
            ctx,
            Blocked::Failed("BackendError", error.message),
            obj.metadata.deletion_timestamp.is_some(),
        )
        .await
    }
}

async fn remove_annotations(
    ctx: &Context<S3BucketReconciler>,
    obj: &S3Bucket,
    keys: &[&str],
) -> Result<(), Error> {
    let present: BTreeMap<&str, Option<()>> = keys
        .iter()
        .filter(|k| obj.annotations().contains_key(**k))
        .map(|k| (*k, None))
        .collect();
    if present.is_empty() {
        return Ok(());
    }
    let patch = serde_json::json!({"metadata": {"annotations": present}});
    ctx.api(obj)
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

impl Reconciler for S3BucketReconciler {
    type Resource = S3Bucket;
    type Error = Error;
    const NAME: &'static str = "s3bucket";
    const FINALIZER: &'static str = "keeper.dev/bucket-cleanup";

    async fn apply(&self, obj: Arc<S3Bucket>, ctx: &Context<Self>) -> Result<Action, Error> {
        let (backend, view, provider) = match self.resolve(&obj, ctx).await? {
            Ok(resolved) => resolved,
            Err(blocked) => return self.show_blocked(&obj, ctx, blocked, false).await,
        };
        match &backend {
            AnyBackend::S3(b) => self.apply_with(b, &obj, ctx, &view, &provider).await,
            AnyBackend::Grid(b) => self.apply_with(b, &obj, ctx, &view, &provider).await,
        }
    }

    async fn cleanup(&self, obj: Arc<S3Bucket>, ctx: &Context<Self>) -> Result<Cleanup, Error> {
        if obj.spec.deletion_policy == DeletionPolicy::Retain {
            if !lifecycle::never_created(&obj) {
                ctx.publish(
                    &obj,
                    EventType::Normal,
                    "BucketRetained",
                    "deletionPolicy is Retain: the bucket and its objects stay on the backend"
                        .to_string(),
                    "Delete",
                )
                .await;
            }
            return Ok(Cleanup::Done);
        }
        let (backend, view, _) = match self.resolve(&obj, ctx).await? {
            Ok(resolved) => resolved,
            // Nothing was ever created without a recorded bucket name and a reachable tenant.
            Err(_) if lifecycle::never_created(&obj) => return Ok(Cleanup::Done),
            Err(blocked) => {
                let action = self.show_blocked(&obj, ctx, blocked, true).await?;
                return Ok(Cleanup::Wait(action));
            }
        };
        match &backend {
            AnyBackend::S3(b) => self.cleanup_with(b, &obj, ctx, &view).await,
            AnyBackend::Grid(b) => self.cleanup_with(b, &obj, ctx, &view).await,
        }
    }
}

impl S3BucketReconciler {
    async fn apply_with<B: BucketBackend>(
        &self,
        backend: &B,
        obj: &S3Bucket,
        ctx: &Context<Self>,
        view: &View<'_>,
        provider: &Provider,
    ) -> Result<Action, Error> {
        let out = match apply_bucket(backend, view).await {
            Ok(out) => out,
            Err(e) => return self.show_backend_error(obj, ctx, e).await,
        };
        self.write(obj, ctx, &out).await?;
        if matches!(
            out.status.phase,
            Some(BucketPhase::Ready | BucketPhase::Draining)
        ) && let Err(e) = self
            .publish_credentials(
                backend,
                obj,
                ctx,
                &view.desired.name,
                provider,
                &view.desired.region,
            )
            .await
        {
            return match e {
                Error::Backend(e) => self.show_backend_error(obj, ctx, e).await,
                e => Err(e),
            };
        }
        Ok(Action::requeue(out.requeue))
    }

    async fn cleanup_with<B: BucketBackend>(
        &self,
        backend: &B,
        obj: &S3Bucket,
        ctx: &Context<Self>,
        view: &View<'_>,
    ) -> Result<Cleanup, Error> {
        let out = match cleanup_bucket(backend, view).await {
            Ok(out) => out,
            Err(e) => {
                return self
                    .show_backend_error(obj, ctx, e)
                    .await
                    .map(Cleanup::Wait);
            }
        };
        if out.released {
            self.remember(&obj.uid().unwrap_or_default(), Cache::Forget);
            self.objects_deleted.inc_by(out.deleted);
            for note in &out.notes {
                ctx.publish(obj, note.type_, note.reason, note.message.clone(), "Delete")
                    .await;
            }
            return Ok(Cleanup::Done);
        }
        self.write(obj, ctx, &out).await?;
        Ok(Cleanup::Wait(Action::requeue(out.requeue)))
    }
}

/// Buckets in the tenant's namespace that name the tenant.
fn buckets_of(
    store: &kube::runtime::reflector::Store<S3Bucket>,
    tenant: &S3Tenant,
) -> Vec<ObjectRef<S3Bucket>> {
    let namespace = tenant.namespace();
    let name = tenant.name_any();
    store
        .state()
        .iter()
        .filter(|b| b.namespace() == namespace && b.spec.tenant_ref.name == name)
        .map(|b| ObjectRef::from_obj(b.as_ref()))
        .collect()
}

pub async fn run(
    shared: Shared,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let api = Api::<S3Bucket>::all(shared.client.clone());
    let tenants = Api::<S3Tenant>::all(shared.client.clone());
    let controller = Controller::new(api, watcher::Config::default());
    let store = controller.store();
    let mapper_store = store.clone();
    let controller = controller.watches(tenants, watcher::Config::default(), move |tenant| {
        buckets_of(&mapper_store, &tenant)
    });
    register_metrics(&shared, &store)?;
    let objects_deleted = IntCounter::new(
        "keeper_drain_objects_deleted_total",
        "Objects deleted by bucket drains (client-side: by keeper; server-side: as seen at polls).",
    )?;
    shared.metrics.register(objects_deleted.clone());
    let ctx = Arc::new(Context::new(
        shared,
        S3BucketReconciler::new(objects_deleted),
    ));
    runtime::legacy::run(controller, ctx, readiness, shutdown).await;
    Ok(())
}

fn register_metrics(
    shared: &Shared,
    store: &kube::runtime::reflector::Store<S3Bucket>,
) -> anyhow::Result<()> {
    shared.metrics.register(StoreGauge::new(
        "keeper_buckets",
        "S3Buckets by phase.",
        store.clone(),
        &[],
        "phase",
        &["Pending", "Ready", "Draining", "Failed", "Deleting"],
        |b: &S3Bucket| {
            let phase = b.status.as_ref().and_then(|s| s.phase).unwrap_or_default();
            Some(format!("{phase:?}"))
        },
    ));
    shared.metrics.register(StoreGauge::new(
        "keeper_drain_active",
        "S3Buckets with a drain in progress.",
        store.clone(),
        &[],
        "",
        &[""],
        |b: &S3Bucket| {
            drain::is_ours(b.status.as_ref().and_then(|s| s.drain_status.as_ref()))
                .then(String::new)
        },
    ));
    shared.metrics.register(gauges::deletion_blocked(
        "S3Bucket",
        store.clone(),
        |b: &S3Bucket| {
            b.metadata.deletion_timestamp.is_some()
                && b.status.as_ref().is_some_and(|s| {
                    conditions::is_true(&s.conditions, conditions::DELETION_BLOCKED)
                })
        },
    ));
    Ok(())
}

#[cfg(test)]
mod tests;
