//! A kube-runtime Controller with the finalizer helper, status patches and the event Recorder,
//! the way keeper uses them, running against the emulator.

use crate::common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

struct Ctx {
    client: kube::Client,
    recorder: Recorder,
    cleanups: AtomicUsize,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Error(String);

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ar = s3_api_resource();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &obj.namespace().unwrap(), &ar);
    finalizer(&api, "keeper.dev/cleanup", obj, |ev| async {
        match ev {
            Finalizer::Apply(o) => {
                let status = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "status": {
                    "phase": "Ready", "bucketName": o.data["spec"]["bucketName"], "observedGeneration": o.metadata.generation,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}]}});
                api.patch_status(&o.name_any(), &PatchParams::apply("keeper").force(), &Patch::Apply(status))
                    .await
                    .map_err(|e| Error(e.to_string()))?;
                let oref = o.object_ref(&ar);
                ctx.recorder
                    .publish(&Event { type_: EventType::Normal, reason: "Reconciled".into(), note: Some("bucket ready".into()), action: "Reconcile".into(), secondary: None }, &oref)
                    .await
                    .map_err(|e| Error(e.to_string()))?;
                Ok::<_, Error>(Action::requeue(Duration::from_secs(300)))
            }
            Finalizer::Cleanup(_) => {
                ctx.cleanups.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| Error(e.to_string()))
}

fn error_policy(_: Arc<DynamicObject>, _: &Error, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

async fn wait_for<F: Fn(&Option<DynamicObject>) -> bool>(
    env: &Env,
    api: &Api<DynamicObject>,
    name: &str,
    f: F,
) -> Option<DynamicObject> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let o = api.get_opt(name).await.unwrap();
        if f(&o) {
            return o;
        }
        if tokio::time::Instant::now() > deadline {
            let (_, _, log) = env.raw("GET", "/debug/requests", None, None).await;
            panic!("timed out waiting for {name}: {o:?}\nrequests: {log:#}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_runtime_controller_with_finalizer_status_and_events() {
    let env = Env::new().await;
    env.install_crd().await;
    let client = env.client().await;
    let ar = s3_api_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "keeper".into(),
                instance: None,
            },
        ),
        cleanups: AtomicUsize::new(0),
    });
    let controller = tokio::spawn(
        Controller::new_with(all, watcher::Config::default(), ar.clone())
            .run(reconcile, error_policy, ctx.clone())
            .for_each(|_| async {}),
    );
    let b = DynamicObject::new("ctl", &ar)
        .data(json!({"spec": {"tenantRef": {"name": "t"}, "bucketName": "ctl-bucket"}}));
    api.create(&PostParams::default(), &b).await.unwrap();
    let o = wait_for(&env, &api, "ctl", |o| {
        o.as_ref()
            .is_some_and(|o| o.data["status"]["phase"] == "Ready")
    })
    .await
    .unwrap();
    assert_eq!(o.finalizers(), &["keeper.dev/cleanup".to_string()]);
    assert_eq!(o.data["status"]["bucketName"], "ctl-bucket");
    assert_eq!(
        o.metadata.generation,
        Some(1),
        "status and finalizer changes don't bump generation"
    );
    let events: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let evs = events
        .list(&ListParams::default().fields("involvedObject.name=ctl"))
        .await
        .unwrap();
    assert!(
        evs.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Reconciled")),
        "{:?}",
        evs.items
    );
    // Spec change: reconciled again, observedGeneration follows.
    api.patch(
        "ctl",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"versioning": true}})),
    )
    .await
    .unwrap();
    wait_for(&env, &api, "ctl", |o| {
        o.as_ref()
            .is_some_and(|o| o.data["status"]["observedGeneration"] == 2)
    })
    .await;
    // Deletion runs the cleanup and releases the finalizer.
    api.delete("ctl", &DeleteParams::default()).await.unwrap();
    wait_for(&env, &api, "ctl", |o| o.is_none()).await;
    assert_eq!(ctx.cleanups.load(Ordering::SeqCst), 1);
    controller.abort();
    env.stop().await;
}
