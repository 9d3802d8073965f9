//! The shared flow, tested with a scripted reconciler over the fake seam.

use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;
use kube::runtime::controller::Action;

use super::drive::secret_owner;
use super::testing;
use super::*;
use crate::api::{S3Tenant, S3TenantSpec, S3TenantStatus, TenantPhase};
use crate::cluster::fake::{Call, FakeKube};
use crate::error::BackendError;
use crate::runtime::policy::PERMANENT_RETRY;

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct TestError(BackendError);

impl ReconcileError for TestError {
    fn reason(&self) -> &'static str {
        "backend"
    }
    fn class(&self) -> ErrorClass {
        self.0.class
    }
    fn condition_reason(&self) -> &'static str {
        "BackendError"
    }
}

type Script = Result<Outcome<S3TenantStatus>, ErrorClass>;

/// Answers every apply and cleanup with the scripted result.
struct Scripted(Mutex<Option<Script>>);

impl Reconciler for Scripted {
    type Resource = S3Tenant;
    type Error = TestError;
    const NAME: &'static str = "test";
    const KIND: crate::config::ControllerKind = crate::config::ControllerKind::Tenant;
    const FINALIZER: &'static str = "keeper.dev/test";

    async fn apply(
        &self,
        _obj: Arc<S3Tenant>,
        _cx: &Context<Self>,
    ) -> Result<Outcome<S3TenantStatus>, TestError> {
        self.answer().await
    }

    async fn cleanup(
        &self,
        _obj: Arc<S3Tenant>,
        _cx: &Context<Self>,
    ) -> Result<Outcome<S3TenantStatus>, TestError> {
        self.answer().await
    }
}

impl Scripted {
    /// The scripted answer; without a script none ever comes (a reconcile under way: a drain
    /// round, a slow backend call).
    async fn answer(&self) -> Result<Outcome<S3TenantStatus>, TestError> {
        let script = self.0.lock().unwrap().clone();
        match script {
            Some(script) => script.map_err(|class| {
                TestError(BackendError::new("s3", "op", class, "Code", "it failed"))
            }),
            None => std::future::pending().await,
        }
    }
}

fn tenant(finalized: bool, deleting: bool) -> S3Tenant {
    S3Tenant {
        metadata: ObjectMeta {
            name: Some("t".into()),
            namespace: Some("ns".into()),
            uid: Some("uid".into()),
            generation: Some(3),
            finalizers: finalized.then(|| vec!["keeper.dev/test".to_string()]),
            deletion_timestamp: deleting.then(|| Time(Timestamp::now())),
            annotations: Some([("keeper.dev/drain".to_string(), "true".to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: serde_yaml::from_str::<S3TenantSpec>("{}").unwrap(),
        status: None,
    }
}

fn context(script: Script) -> (Arc<FakeKube>, Arc<Context<Scripted>>) {
    let kube = Arc::new(FakeKube::default());
    let shared = testing::shared(kube.clone(), Default::default());
    let cx = Arc::new(Context::new(shared, Scripted(Mutex::new(Some(script)))));
    (kube, cx)
}

fn ready() -> Outcome<S3TenantStatus> {
    let mut out = Outcome::new(S3TenantStatus::default(), Next::Requeue(RESYNC));
    out.status.phase = Some(TenantPhase::Ready);
    out.ready(true, "Provisioned", "ok", Some(3), false);
    out
}

#[test]
fn the_finalizer_comes_before_anything_else() {
    assert_eq!(next_step(false, false), Step::AddFinalizer);
    assert_eq!(next_step(false, true), Step::Apply);
}

#[test]
fn deletion_cleans_up_only_with_our_finalizer() {
    assert_eq!(next_step(true, true), Step::Cleanup);
    // Never add a finalizer to an object already being deleted.
    assert_eq!(next_step(true, false), Step::Ignore);
}

#[tokio::test]
async fn a_new_object_gets_the_finalizer_and_nothing_else() {
    let (kube, cx) = context(Ok(ready()));
    let action = testing::reconcile(&cx, tenant(false, false)).await.unwrap();
    assert_eq!(action, Action::await_change());
    let calls = kube.calls();
    assert_eq!(calls.len(), 1);
    assert!(
        matches!(&calls[0], Call::PatchJson { patch, .. } if patch.to_string().contains("keeper.dev/test"))
    );
}

#[tokio::test]
async fn an_outcome_is_written_as_one_status_patch_its_events_and_annotation_removals() {
    let mut out = ready();
    out.note(Note::normal("Extra", "x"));
    out.note(Note::normal("Extra", "x"));
    out.remove_annotations.push("keeper.dev/drain");
    let (kube, cx) = context(Ok(out));
    let action = testing::reconcile(&cx, tenant(true, false)).await.unwrap();
    assert_eq!(action, Action::requeue(RESYNC));
    let calls = kube.calls();
    let statuses: Vec<_> = calls
        .iter()
        .filter(|c| matches!(c, Call::PatchStatus { .. }))
        .collect();
    assert_eq!(statuses.len(), 1, "one status patch: {calls:?}");
    assert_eq!(
        kube.notes(),
        vec![
            Note::normal("Provisioned", "ok"),
            Note::normal("Extra", "x")
        ],
        "each distinct event once"
    );
    let removal = calls
        .iter()
        .find_map(|c| match c {
            Call::PatchJson { patch, .. } => Some(patch.clone()),
            _ => None,
        })
        .expect("annotation removal");
    assert_eq!(
        removal[0]["op"], "test",
        "the request value is tested first: {removal}"
    );
    assert_eq!(
        removal[1]["path"],
        "/metadata/annotations/keeper.dev~1drain"
    );
}

/// The JSON patch the outcome wrote (annotations), if any.
fn annotation_patch(kube: &FakeKube) -> Option<serde_json::Value> {
    kube.calls().iter().find_map(|c| match c {
        Call::PatchJson { patch, .. } => Some(patch.clone()),
        _ => None,
    })
}

#[tokio::test]
async fn set_annotations_are_written_test_guarded_and_only_when_they_differ() {
    let mut out = ready();
    out.set_annotations
        .push(("keeper.dev/drain-handled", "42".to_string()));
    out.set_annotations
        .push(("keeper.dev/drain", "true".to_string()));
    let (kube, cx) = context(Ok(out.clone()));
    testing::reconcile(&cx, tenant(true, false)).await.unwrap();
    let patch = annotation_patch(&kube).expect("an annotation patch");
    assert_eq!(
        patch,
        serde_json::json!([
            {"op": "test", "path": "/metadata/annotations/keeper.dev~1drain-handled", "value": null},
            {"op": "add", "path": "/metadata/annotations/keeper.dev~1drain-handled", "value": "42"},
        ]),
        "a value already there is not written again"
    );
    // A value that changed is tested against what was read.
    let (kube, cx) = context(Ok(out.clone()));
    let mut obj = tenant(true, false);
    obj.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("keeper.dev/drain-handled".into(), "7".into());
    testing::reconcile(&cx, obj.clone()).await.unwrap();
    let patch = annotation_patch(&kube).unwrap();
    assert_eq!(patch[0]["value"], "7");
    assert_eq!(patch[1]["value"], "42");
    // Nothing to write when every value is already there.
    obj.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("keeper.dev/drain-handled".into(), "42".into());
    let (kube, cx) = context(Ok(out.clone()));
    testing::reconcile(&cx, obj.clone()).await.unwrap();
    assert_eq!(annotation_patch(&kube), None);
    // An object without annotations gets the map, guarded by its absence.
    obj.metadata.annotations = None;
    let (kube, cx) = context(Ok(out));
    testing::reconcile(&cx, obj).await.unwrap();
    assert_eq!(
        annotation_patch(&kube).unwrap(),
        serde_json::json!([
            {"op": "test", "path": "/metadata/annotations", "value": null},
            {"op": "add", "path": "/metadata/annotations",
             "value": {"keeper.dev/drain-handled": "42", "keeper.dev/drain": "true"}},
        ])
    );
}

#[tokio::test]
async fn an_unchanged_status_writes_nothing() {
    let (kube, cx) = context(Ok(ready()));
    let mut obj = tenant(true, false);
    let mut synced = ready();
    synced.succeeded(Some(3));
    obj.status = Some(synced.status);
    obj.metadata.annotations = None;
    let mut steady = ready();
    steady.notes.clear();
    *cx.reconciler.0.lock().unwrap() = Some(Ok(steady));
    testing::reconcile(&cx, obj).await.unwrap();
    assert!(kube.calls().is_empty(), "{:?}", kube.calls());
}

/// The status patches `kube` saw.
fn status_patches(kube: &FakeKube) -> Vec<serde_json::Value> {
    kube.calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::PatchStatus { patch, .. } => Some(patch),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_retried_error_shows_on_the_object_from_the_third_attempt_once_per_reason() {
    for class in [
        ErrorClass::Transient,
        ErrorClass::Conflict,
        ErrorClass::NotFound,
    ] {
        let (kube, cx) = context(Err(class));
        let obj = tenant(true, false);
        let key = object_key(&obj);
        // The first two attempts back off and write nothing: most failures are a blip.
        for _ in 0..2 {
            assert!(testing::reconcile(&cx, obj.clone()).await.is_err());
            cx.backoff.next_delay(&key);
        }
        assert!(kube.calls().is_empty(), "{class:?}: {:?}", kube.calls());
        // The third shows: Synced and Ready False with the error, Reconciling, one Warning.
        assert!(testing::reconcile(&cx, obj.clone()).await.is_err());
        let patches = status_patches(&kube);
        assert_eq!(patches.len(), 1, "{class:?}");
        let conditions = &patches[0]["status"]["conditions"];
        let of = |t: &str| {
            conditions
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == t)
                .cloned()
                .unwrap_or_else(|| panic!("no {t} in {conditions}"))
        };
        assert_eq!(of("Synced")["status"], "False");
        assert_eq!(of("Synced")["reason"], "BackendError");
        assert!(
            of("Synced")["message"]
                .as_str()
                .unwrap()
                .contains("it failed")
        );
        assert_eq!(of("Ready")["status"], "False");
        assert_eq!(of("Reconciling")["status"], "True");
        assert_eq!(kube.notes().len(), 1);
        assert_eq!(kube.notes()[0].reason, "BackendError");
        assert_eq!(
            kube.notes()[0].type_,
            kube::runtime::events::EventType::Warning
        );
        // Once shown, the same failure writes nothing more.
        cx.backoff.next_delay(&key);
        let mut shown = obj.clone();
        let mut status: S3TenantStatus =
            serde_json::from_value(patches[0]["status"].clone()).unwrap();
        status.phase = None;
        shown.status = Some(status);
        assert!(testing::reconcile(&cx, shown.clone()).await.is_err());
        assert_eq!(status_patches(&kube).len(), 1, "{class:?}: nothing new");
        assert_eq!(kube.notes().len(), 1);
        // A success afterwards says so in the same patch as its outcome.
        *cx.reconciler.0.lock().unwrap() = Some(Ok(ready()));
        testing::reconcile(&cx, shown).await.unwrap();
        let patches = status_patches(&kube);
        assert_eq!(patches.len(), 2);
        let text = patches[1].to_string();
        assert!(text.contains("ReconcileSuccess"), "{text}");
    }
}

/// A status as a successful reconcile left it: `Ready` as given, `Synced=True`.
fn reported(ready: bool, reason: &'static str) -> S3TenantStatus {
    let mut out = Outcome::new(S3TenantStatus::default(), Next::AwaitChange);
    out.ready(ready, reason, "as found", Some(3), false);
    out.succeeded(Some(3));
    out.status
}

/// Issue 26, item 9: a bucket shown waiting for its tenant, whose tenant is Ready by now, failed
/// past the tenant in every keeper process, each killed before its third attempt: the status
/// went on saying it waits for the tenant. A fresh process (no failures counted) shows the
/// failure at its first attempt, once.
#[tokio::test]
async fn a_failure_over_a_reported_wait_shows_at_the_first_attempt_of_a_new_process() {
    let (kube, cx) = context(Err(ErrorClass::Transient));
    let mut obj = tenant(true, false);
    obj.status = Some(reported(false, "TenantNotReady"));
    assert!(testing::reconcile(&cx, obj.clone()).await.is_err());
    let patches = status_patches(&kube);
    assert_eq!(patches.len(), 1, "{:?}", kube.calls());
    let shown: S3TenantStatus = serde_json::from_value(
        serde_json::to_value(obj.status.clone().unwrap())
            .map(|mut v| {
                json_patch::merge(&mut v, &patches[0]["status"]);
                v
            })
            .unwrap(),
    )
    .unwrap();
    let of = |t: &str| {
        shown
            .conditions()
            .iter()
            .find(|c| c.type_ == t)
            .cloned()
            .unwrap()
    };
    assert_eq!(
        (of("Synced").status.as_str(), of("Synced").reason.as_str()),
        ("False", "BackendError")
    );
    assert_eq!(
        (of("Ready").status.as_str(), of("Ready").reason.as_str()),
        ("False", "BackendError")
    );
    assert_eq!(kube.notes().len(), 1);
    // The next attempts write nothing more: the failure shows already.
    cx.backoff.next_delay(&object_key(&obj));
    obj.status = Some(shown);
    assert!(testing::reconcile(&cx, obj).await.is_err());
    assert_eq!(status_patches(&kube).len(), 1);
}

#[tokio::test]
async fn a_permanent_error_sets_failed_with_one_warning() {
    let (kube, cx) = context(Err(ErrorClass::Permanent));
    let action = testing::reconcile(&cx, tenant(true, false)).await.unwrap();
    assert_eq!(action, Action::requeue(PERMANENT_RETRY));
    let notes = kube.notes();
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].reason, "BackendError");
    assert!(notes[0].message.contains("it failed"));
    let patch = kube
        .calls()
        .into_iter()
        .find_map(|c| match c {
            Call::PatchStatus { patch, .. } => Some(patch),
            _ => None,
        })
        .unwrap();
    assert_eq!(patch["status"]["phase"], "Failed");
    assert_eq!(patch["status"]["conditions"][0]["status"], "False");
}

#[tokio::test]
async fn a_permanent_error_during_deletion_shows_deleting_not_failed() {
    let (kube, cx) = context(Err(ErrorClass::Permanent));
    testing::reconcile(&cx, tenant(true, true)).await.unwrap();
    let patch = kube
        .calls()
        .into_iter()
        .find_map(|c| match c {
            Call::PatchStatus { patch, .. } => Some(patch),
            _ => None,
        })
        .unwrap();
    assert_eq!(patch["status"]["phase"], "Deleting");
}

#[tokio::test]
async fn a_success_is_synced_and_a_release_writes_no_status() {
    let (kube, cx) = context(Ok(ready()));
    testing::reconcile(&cx, tenant(true, false)).await.unwrap();
    let patch = &status_patches(&kube)[0];
    let conditions = patch["status"]["conditions"].as_array().unwrap();
    let types: Vec<&str> = conditions
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["Ready", "Synced"],
        "Ready: no Reconciling, no Stalled"
    );
    // The last reconcile of an object being deleted writes only what its outcome says.
    let (kube, cx) = context(Ok(Outcome::new(S3TenantStatus::default(), Next::Release)));
    let mut leaving = tenant(true, true);
    leaving.status = Some(S3TenantStatus::default());
    testing::reconcile(&cx, leaving).await.unwrap();
    assert!(status_patches(&kube).is_empty(), "{:?}", kube.calls());
}

/// A release whose outcome has a status to write, an event and an annotation to remove.
fn releasing() -> Outcome<S3TenantStatus> {
    let mut out = Outcome::new(S3TenantStatus::default(), Next::Release);
    out.status.phase = Some(TenantPhase::Deleting);
    out.note(Note::normal("TenantDeleted", "deleted"));
    out.remove_annotations.push("keeper.dev/drain");
    out
}

#[tokio::test]
async fn releasing_the_last_finalizer_publishes_the_events_and_writes_nothing_else_first() {
    let (kube, cx) = context(Ok(releasing()));
    testing::reconcile(&cx, tenant(true, true)).await.unwrap();
    let calls = kube.calls();
    assert!(status_patches(&kube).is_empty(), "{calls:?}");
    assert_eq!(kube.notes().len(), 1, "{calls:?}");
    let patches: Vec<_> = calls
        .iter()
        .filter_map(|c| match c {
            Call::PatchJson { patch, .. } => Some(patch),
            _ => None,
        })
        .collect();
    assert_eq!(patches.len(), 1, "only the finalizer's removal: {calls:?}");
    assert_eq!(patches[0][1]["path"], "/metadata/finalizers/0");
}

#[tokio::test]
async fn release_removes_only_our_finalizer_after_writing_the_outcome() {
    let (kube, cx) = context(Ok(releasing()));
    let mut obj = tenant(true, true);
    obj.metadata.finalizers = Some(vec!["other.io/keep".into(), "keeper.dev/test".into()]);
    testing::reconcile(&cx, obj).await.unwrap();
    // Another finalizer keeps the object: what its outcome says is written first.
    assert_eq!(status_patches(&kube)[0]["status"]["phase"], "Deleting");
    assert_eq!(kube.notes().len(), 1);
    let patch = kube
        .calls()
        .into_iter()
        .rev()
        .find_map(|c| match c {
            Call::PatchJson { patch, .. } => Some(patch),
            _ => None,
        })
        .unwrap();
    assert_eq!(patch[0]["path"], "/metadata/finalizers/1");
    assert_eq!(patch[0]["value"], "keeper.dev/test");
}

#[tokio::test]
async fn release_is_refused_for_a_live_object() {
    let (kube, cx) = context(Ok(Outcome::new(S3TenantStatus::default(), Next::Release)));
    let mut obj = tenant(true, false);
    obj.metadata.annotations = None;
    testing::reconcile(&cx, obj).await.unwrap();
    assert!(
        !kube
            .calls()
            .iter()
            .any(|c| matches!(c, Call::PatchJson { .. })),
        "a live object keeps its finalizer"
    );
}

/// Holds each apply until the test lets one go; every object on the long lane, one turn.
struct Held {
    applied: Mutex<Vec<String>>,
    release: tokio::sync::Semaphore,
}

impl Reconciler for Held {
    type Resource = S3Tenant;
    type Error = TestError;
    const NAME: &'static str = "held";
    const KIND: crate::config::ControllerKind = crate::config::ControllerKind::Bucket;
    const FINALIZER: &'static str = "keeper.dev/test";

    fn lane(_obj: &S3Tenant) -> Lane {
        Lane::Long
    }

    fn long_turns(_config: &OperatorConfig) -> u16 {
        1
    }

    async fn apply(
        &self,
        obj: Arc<S3Tenant>,
        _cx: &Context<Self>,
    ) -> Result<Outcome<S3TenantStatus>, TestError> {
        self.applied.lock().unwrap().push(obj.name_any());
        let _go = self.release.acquire().await.unwrap();
        Ok(ready())
    }

    async fn cleanup(
        &self,
        _obj: Arc<S3Tenant>,
        _cx: &Context<Self>,
    ) -> Result<Outcome<S3TenantStatus>, TestError> {
        unreachable!("no object here is being deleted")
    }
}

#[tokio::test]
async fn a_long_reconcile_finding_no_turn_free_is_not_run_but_asked_again_shortly() {
    let kube = Arc::new(FakeKube::default());
    let cx = Arc::new(Context::new(
        testing::shared(kube, Default::default()),
        Held {
            applied: Mutex::default(),
            release: tokio::sync::Semaphore::new(0),
        },
    ));
    // The bucket controller's 16 workers, and one more for the long lane.
    assert_eq!(cx.lanes.workers(), 17);
    let named = |name: &str| {
        let mut obj = tenant(true, false);
        obj.metadata.name = Some(name.into());
        Arc::new(obj)
    };
    let first = tokio::spawn(observed(named("a"), cx.clone()));
    while cx.reconciler.applied.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    // `a` holds the one turn: `b` is not run, and asks again after TURN_RETRY.
    let waited = tokio::time::timeout(Duration::from_secs(5), observed(named("b"), cx.clone()))
        .await
        .expect("b was run: it waits for a's apply")
        .unwrap();
    assert_eq!(waited, Action::requeue(lanes::TURN_RETRY));
    assert_eq!(*cx.reconciler.applied.lock().unwrap(), ["a"]);
    cx.reconciler.release.add_permits(2);
    assert_eq!(first.await.unwrap().unwrap(), Action::await_change());
    assert_resync_kept(&cx, "ns/a");
    // `a` asks again at once after its turn: `b` asked first and goes first.
    let after = observed(named("a"), cx.clone()).await.unwrap();
    assert_eq!(after, Action::requeue(lanes::TURN_RETRY));
    assert_eq!(
        observed(named("b"), cx.clone()).await.unwrap(),
        Action::await_change()
    );
    assert_resync_kept(&cx, "ns/b");
    assert_eq!(*cx.reconciler.applied.lock().unwrap(), ["a", "b"]);
}

/// `key` waits for its resync, due about [`RESYNC`] from now (counted from its reconcile's end, to
/// the queue's millisecond).
fn assert_resync_kept<R: Reconciler>(cx: &Context<R>, key: &str) {
    let resync = cx
        .requeues
        .waits(key)
        .unwrap_or_else(|| panic!("{key}'s resync is not kept"));
    assert!(
        resync.abs_diff(RESYNC) < Duration::from_secs(5),
        "{key}: {resync:?}"
    );
}

#[tokio::test]
async fn the_next_reconcile_an_object_asks_for_waits_with_the_controller() {
    let (_kube, cx) = context(Ok(ready()));
    let live = || Arc::new(tenant(true, false));
    let script = |script: Script| *cx.reconciler.0.lock().unwrap() = Some(script);
    let waits = || cx.requeues.waits("ns/t");

    // Ready asks for a resync: kept here, not in kube's queue.
    assert_eq!(
        observed(live(), cx.clone()).await.unwrap(),
        Action::await_change()
    );
    assert_resync_kept(&cx, "ns/t");

    // A failure's retry is the error policy's: the resync asked for before is dropped, as
    // kube drops a requeue when the object is reconciled earlier.
    script(Err(ErrorClass::Transient));
    assert!(observed(live(), cx.clone()).await.is_err());
    assert_eq!(waits(), None);

    // Asked for again, and a later reconcile that asks for nothing takes it back.
    script(Ok(ready()));
    observed(live(), cx.clone()).await.unwrap();
    assert!(waits().is_some());
    script(Ok(Outcome::new(
        S3TenantStatus::default(),
        Next::AwaitChange,
    )));
    observed(live(), cx.clone()).await.unwrap();
    assert_eq!(waits(), None);

    // An object let go of waits for nothing.
    script(Ok(ready()));
    observed(live(), cx.clone()).await.unwrap();
    script(Ok(Outcome::new(S3TenantStatus::default(), Next::Release)));
    observed(Arc::new(tenant(true, true)), cx.clone())
        .await
        .unwrap();
    assert_eq!(waits(), None);
}

/// A Secret written for `owner` (a tenant named "t" with uid "uid"), as keeper writes it.
fn secret_of(owner: &S3Tenant) -> k8s_openapi::api::core::v1::Secret {
    let target = Target::of(owner);
    let mut secret = k8s_openapi::api::core::v1::Secret::default();
    secret.metadata.name = Some("t-s3-credentials".into());
    secret.metadata.namespace = Some("ns".into());
    secret.metadata.owner_references = Some(vec![target.owner_reference()]);
    secret
}

#[test]
fn an_edited_secret_wakes_its_live_owner_only() {
    let (store, mut writer) = kube::runtime::reflector::store::<S3Tenant>();
    let live = tenant(true, false);
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(live.clone()));
    let secret = secret_of(&live);
    assert_eq!(
        secret_owner(&store, &secret),
        Some(kube::runtime::reflector::ObjectRef::from_obj(&live))
    );

    // The owner is being deleted: its cleanup takes care of its Secrets.
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(tenant(true, true)));
    assert_eq!(secret_owner(&store, &secret), None);

    // A new object of the same name (another uid) is not the Secret's owner.
    let mut successor = tenant(true, false);
    successor.metadata.uid = Some("uid-2".into());
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(successor));
    assert_eq!(secret_owner(&store, &secret), None);

    // Not owned as a controller, owned by another kind, or gone from the cache: nobody.
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(live.clone()));
    let mut not_controlled = secret.clone();
    not_controlled.owner_references_mut()[0].controller = None;
    assert_eq!(secret_owner(&store, &not_controlled), None);
    let mut other_kind = secret.clone();
    other_kind.owner_references_mut()[0].kind = "S3Bucket".into();
    assert_eq!(secret_owner(&store, &other_kind), None);
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Delete(live));
    assert_eq!(secret_owner(&store, &secret), None);
}

#[tokio::test]
async fn a_reconcile_under_way_stops_when_this_process_steps_down() {
    let (election, leading) = tokio::sync::watch::channel(true);
    let kube = Arc::new(FakeKube::default());
    let mut shared = testing::shared(kube.clone(), Default::default());
    shared.leadership = crate::leader::Leadership::following(leading);
    let cx = Arc::new(Context::new(shared, Scripted(Mutex::new(None))));
    for deleting in [false, true] {
        let mut reconcile = tokio::spawn(observed(Arc::new(tenant(true, deleting)), cx.clone()));
        // While it leads, the reconcile goes on.
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(200), &mut reconcile).await;
        assert!(waited.is_err(), "the stalled reconcile ended while leading");
        election.send(false).unwrap();
        let action = tokio::time::timeout(std::time::Duration::from_secs(5), reconcile)
            .await
            .expect("the reconcile stops once this process steps down")
            .unwrap()
            .unwrap_or_else(|e| panic!("stopping is not a failure: {e}"));
        assert_eq!(action, Action::await_change());
        election.send(true).unwrap();
    }
    // Stopped, not failed: nothing written for it.
    assert!(
        kube.calls().is_empty(),
        "a stopped reconcile wrote {:?}",
        kube.calls()
    );
}
