//! Scenarios driven by a kube-rs 5 client (and raw HTTP where kube-rs hides the details).

use crate::common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace, Secret};
use keeper_e2e_apiserver::Config;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::{Value, json};
use std::time::Duration;

fn api_err(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .expect("cm")
}

fn bucket(name: &str, spec: Value) -> DynamicObject {
    DynamicObject::new(name, &s3_api_resource()).data(json!({ "spec": spec }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_update_gets_409_conflict() {
    let env = Env::new().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    let created = api
        .create(&PostParams::default(), &cm("c1", json!({})))
        .await
        .unwrap();
    let rv1 = created.metadata.resource_version.clone().unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    let mut first = created.clone();
    first.data = Some([("k".to_string(), "v2".to_string())].into());
    let updated = api
        .replace("c1", &PostParams::default(), &first)
        .await
        .unwrap();
    let rv2 = updated.metadata.resource_version.clone().unwrap();
    assert!(rv2.parse::<u64>().unwrap() > rv1.parse::<u64>().unwrap());
    let mut stale = created.clone();
    stale.data = Some([("k".to_string(), "v3".to_string())].into());
    let err = api_err(
        api.replace("c1", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert_eq!(err.reason, "Conflict");
    assert!(
        err.message.contains("the object has been modified"),
        "{}",
        err.message
    );
    // A body with another object's uid is a failed precondition.
    let mut other = api.get("c1").await.unwrap();
    other.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    let err = api_err(
        api.replace("c1", &PostParams::default(), &other)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert!(
        err.message
            .contains("Precondition failed: UID in precondition"),
        "{}",
        err.message
    );
    // A duplicate create is AlreadyExists, a missing object NotFound.
    let err = api_err(
        api.create(&PostParams::default(), &cm("c1", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
    let err = api_err(api.get("nope").await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    assert_eq!(err.message, "configmaps \"nope\" not found");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_resource_version_sees_changes_in_order() {
    let env = Env::new().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    api.create(&PostParams::default(), &cm("before", json!({})))
        .await
        .unwrap();
    let list = api.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.clone().unwrap();
    assert_eq!(list.items.len(), 1);
    let mut stream = api
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &cm("w1", json!({})))
        .await
        .unwrap();
    api.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "y"}})),
    )
    .await
    .unwrap();
    api.delete("w1", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let ev = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
            .await
            .expect("event")
            .unwrap()
            .unwrap();
        match ev {
            WatchEvent::Added(o) => seen.push(format!("ADDED {}", o.metadata.name.unwrap())),
            WatchEvent::Modified(o) => seen.push(format!("MODIFIED {}", o.metadata.name.unwrap())),
            WatchEvent::Deleted(o) => seen.push(format!("DELETED {}", o.metadata.name.unwrap())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, vec!["ADDED w1", "MODIFIED w1", "DELETED w1"]);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_bookmarks_and_kube_runtime_watcher() {
    let env = Env::with(Config {
        bookmark_interval: Duration::from_millis(200),
        ..Config::default()
    })
    .await;
    let client = env.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(
            &WatchParams {
                bookmarks: true,
                ..WatchParams::default()
            }
            .timeout(5),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    let ev = tokio::time::timeout(Duration::from_secs(3), stream.try_next())
        .await
        .expect("bookmark")
        .unwrap()
        .unwrap();
    assert!(matches!(ev, WatchEvent::Bookmark(_)), "{ev:?}");
    // kube-runtime's watcher (list then watch) sees objects created after it started.
    let w = kube::runtime::watcher(
        api.clone(),
        kube::runtime::watcher::Config::default().labels("app=x"),
    );
    let mut objs = Box::pin(kube::runtime::WatchStreamExt::applied_objects(w));
    api.create(&PostParams::default(), &cm("ignored", json!({"app": "y"})))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("seen", json!({"app": "x"})))
        .await
        .unwrap();
    let o = tokio::time::timeout(Duration::from_secs(5), objs.try_next())
        .await
        .expect("applied")
        .unwrap()
        .unwrap();
    assert_eq!(o.metadata.name.as_deref(), Some("seen"));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_compacted_resource_version_is_410_gone() {
    let env = Env::with(Config {
        watch_history: 5,
        ..Config::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    for i in 0..10 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), json!({})))
            .await
            .unwrap();
    }
    let mut stream = api
        .watch(&WatchParams::default().timeout(5), "2")
        .await
        .unwrap()
        .boxed();
    let ev = stream.try_next().await.unwrap().unwrap();
    match ev {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
            assert!(
                e.message.starts_with("too old resource version: 2"),
                "{}",
                e.message
            );
        }
        other => panic!("expected 410 error event, got {other:?}"),
    }
    // A recent resourceVersion still works.
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    api.delete("c0", &DeleteParams::default()).await.unwrap();
    let ev = stream.try_next().await.unwrap().unwrap();
    assert!(matches!(ev, WatchEvent::Deleted(_)), "{ev:?}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_patch_test_failure_and_bad_patches() {
    let env = Env::new().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    api.create(&PostParams::default(), &cm("p", json!({"a": "1"})))
        .await
        .unwrap();
    let ok: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "replace", "path": "/data/k", "value": "w"}
    ]))
    .unwrap();
    let got = api
        .patch("p", &PatchParams::default(), &Patch::Json::<()>(ok))
        .await
        .unwrap();
    assert_eq!(got.data.unwrap()["k"], "w");
    let failing: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "nope"},
        {"op": "replace", "path": "/data/k", "value": "z"}
    ]))
    .unwrap();
    let err = api_err(
        api.patch("p", &PatchParams::default(), &Patch::Json::<()>(failing))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422, "{err:?}");
    assert_eq!(
        api.get("p").await.unwrap().data.unwrap()["k"],
        "w",
        "failed patch must not apply"
    );
    // Strategic merge patch on a built-in, JSON merge patch on anything.
    let (code, _, body) = env
        .raw(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/p",
            Some("application/strategic-merge-patch+json"),
            Some(json!({"metadata": {"labels": {"x": "1"}}, "data": {"k": null}})),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"], json!({}));
    assert_eq!(body["metadata"]["labels"], json!({"a": "1", "x": "1"}));
    let (code, _, body) = env
        .raw(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/p",
            Some("text/plain"),
            Some(json!({})),
        )
        .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_subresource_split_and_generation() {
    let env = Env::new().await;
    env.install_crd().await;
    let ar = s3_api_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(env.client().await, "default", &ar);
    let mut b = bucket("b1", json!({"tenantRef": {"name": "t"}}));
    b.data["status"] = json!({"phase": "Bogus"});
    let created = api.create(&PostParams::default(), &b).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create: {:?}",
        created.data
    );
    // Status through /status only changes status.
    let st = api
        .patch_status(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"versioning": true}, "status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert_eq!(st.data["status"]["phase"], "Ready");
    assert_eq!(st.data["spec"]["versioning"], false);
    assert_eq!(st.metadata.generation, Some(1));
    // The main endpoint ignores status; metadata changes don't bump generation.
    let m = api
        .patch(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}, "status": {"phase": "Nope"}})),
        )
        .await
        .unwrap();
    assert_eq!(m.data["status"]["phase"], "Ready");
    assert_eq!(m.metadata.generation, Some(1));
    let s = api
        .patch(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"versioning": true}})),
        )
        .await
        .unwrap();
    assert_eq!(s.metadata.generation, Some(2));
    assert_eq!(s.data["spec"]["versioning"], true);
    // A no-op patch does not change the resourceVersion.
    let again = api
        .patch(
            "b1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"versioning": true}})),
        )
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version, s.metadata.resource_version);
    // Server-side apply of status (kube-rs controllers do this): two managers, conditions merged by type.
    let apply = |c: Value| json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "status": {"conditions": [c]}});
    api.patch_status(
        "b1",
        &PatchParams::apply("keeper").force(),
        &Patch::Apply(apply(json!({"type": "Ready", "status": "True"}))),
    )
    .await
    .unwrap();
    let got = api
        .patch_status(
            "b1",
            &PatchParams::apply("keeper-sync").force(),
            &Patch::Apply(apply(json!({"type": "Synced", "status": "False"}))),
        )
        .await
        .unwrap();
    let types: Vec<&str> = got.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, vec!["Ready", "Synced"]);
    assert_eq!(got.metadata.generation, Some(2));
    // PUT on a custom resource needs a resourceVersion.
    let mut no_rv = got.clone();
    no_rv.metadata.resource_version = None;
    let err = api_err(
        api.replace("b1", &PostParams::default(), &no_rv)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_flow() {
    let env = Env::new().await;
    env.install_crd().await;
    let ar = s3_api_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(env.client().await, "default", &ar);
    let mut b = bucket("f", json!({"tenantRef": {"name": "t"}}));
    b.metadata.finalizers = Some(vec!["keeper.dev/cleanup".into()]);
    api.create(&PostParams::default(), &b).await.unwrap();
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = api
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let res = api.delete("f", &DeleteParams::default()).await.unwrap();
    let held = res.left().expect("object held by finalizer is returned");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(held.metadata.deletion_grace_period_seconds, Some(0));
    assert!(matches!(
        events.try_next().await.unwrap().unwrap(),
        WatchEvent::Modified(_)
    ));
    // Deleting again is harmless; adding a finalizer is refused.
    assert!(
        api.delete("f", &DeleteParams::default())
            .await
            .unwrap()
            .is_left()
    );
    let err = api_err(
        api.patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["keeper.dev/cleanup", "other/x"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert!(
        err.message
            .contains("no new finalizers can be added if the object is being deleted"),
        "{}",
        err.message
    );
    // Removing the last finalizer removes the object.
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("f").await.unwrap().is_none());
    let ev = events.try_next().await.unwrap().unwrap();
    assert!(matches!(ev, WatchEvent::Deleted(_)), "{ev:?}");
    // Without finalizers delete answers a Success Status.
    api.create(
        &PostParams::default(),
        &bucket("g", json!({"tenantRef": {"name": "t"}})),
    )
    .await
    .unwrap();
    let st = api
        .delete("g", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("status");
    assert!(st.is_success());
    // Preconditions.
    let h = api
        .create(
            &PostParams::default(),
            &bucket("h", json!({"tenantRef": {"name": "t"}})),
        )
        .await
        .unwrap();
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("wrong".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let err = api_err(api.delete("h", &dp).await.unwrap_err());
    assert_eq!(err.code, 409);
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: h.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    assert!(api.delete("h", &dp).await.unwrap().is_right());
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_references_garbage_collection() {
    let env = Env::new().await;
    let client = env.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let owner = cms
        .create(&PostParams::default(), &cm("owner", json!({})))
        .await
        .unwrap();
    let oref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid.clone().unwrap(), "blockOwnerDeletion": true}]);
    for (name, fin) in [("dep", json!([])), ("held", json!(["keeper.dev/hold"]))] {
        let s: Secret = serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": oref, "finalizers": fin}, "stringData": {"a": "b"}})).unwrap();
        let s = secrets.create(&PostParams::default(), &s).await.unwrap();
        assert_eq!(
            s.data.unwrap()["a"].0,
            b"b".to_vec(),
            "stringData is folded into data"
        );
    }
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    assert!(
        secrets.get_opt("dep").await.unwrap().is_none(),
        "dependent collected"
    );
    let held = secrets.get("held").await.unwrap();
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "dependent with finalizer is marked"
    );
    // Foreground: the owner waits for its dependents.
    let owner = cms
        .create(&PostParams::default(), &cm("fg", json!({})))
        .await
        .unwrap();
    let oref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "fg", "uid": owner.metadata.uid.clone().unwrap()}]);
    let s: Secret = serde_json::from_value(
        json!({"metadata": {"name": "fgdep", "ownerReferences": oref, "finalizers": ["x/y"]}}),
    )
    .unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
    cms.delete("fg", &DeleteParams::foreground()).await.unwrap();
    let o = cms.get("fg").await.unwrap();
    assert!(
        o.metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    secrets
        .patch(
            "fgdep",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert!(
        cms.get_opt("fg").await.unwrap().is_none(),
        "owner goes once dependents are gone"
    );
    // Orphan: dependents stay, without the owner reference.
    let owner = cms
        .create(&PostParams::default(), &cm("orph", json!({})))
        .await
        .unwrap();
    let oref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "orph", "uid": owner.metadata.uid.clone().unwrap()}]);
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": "orphan", "ownerReferences": oref}}))
            .unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
    cms.delete("orph", &DeleteParams::orphan()).await.unwrap();
    assert!(cms.get_opt("orph").await.unwrap().is_none());
    assert!(
        secrets
            .get("orphan")
            .await
            .unwrap()
            .metadata
            .owner_references
            .is_none()
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_deletion_terminates_then_disappears() {
    let env = Env::new().await;
    let client = env.client().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    cms.create(&PostParams::default(), &cm("plain", json!({})))
        .await
        .unwrap();
    let mut held = cm("held", json!({}));
    held.metadata.finalizers = Some(vec!["keeper.dev/hold".into()]);
    cms.create(&PostParams::default(), &held).await.unwrap();
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    let ns = nss.get("team").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    assert!(cms.get_opt("plain").await.unwrap().is_none());
    assert!(
        cms.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let err = api_err(
        cms.create(&PostParams::default(), &cm("new", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert!(
        err.message.contains("because it is being terminated"),
        "{}",
        err.message
    );
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(
        nss.get_opt("team").await.unwrap().is_none(),
        "namespace gone once empty"
    );
    let err = api_err(
        cms.create(&PostParams::default(), &cm("new", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 404);
    assert_eq!(err.message, "namespaces \"team\" not found");
    let err = api_err(
        nss.delete("kube-system", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 403);
    assert_eq!(
        err.message,
        "namespaces \"kube-system\" is forbidden: this namespace may not be deleted"
    );
    // Starting namespaces.
    let names: Vec<String> = nss
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"default".to_string()) && names.contains(&"kube-system".to_string()));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_recorder_and_two_views() {
    let env = Env::new().await;
    env.install_crd().await;
    let client = env.client().await;
    let ar = s3_api_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let b = api
        .create(
            &PostParams::default(),
            &bucket("ev", json!({"tenantRef": {"name": "t"}})),
        )
        .await
        .unwrap();
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("keeper.dev/v1alpha1".into()),
        kind: Some("S3Bucket".into()),
        name: b.metadata.name.clone(),
        namespace: Some("default".into()),
        uid: b.metadata.uid.clone(),
        ..Default::default()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "keeper".into(),
            instance: Some("keeper-0".into()),
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Created".into(),
        note: Some("bucket created".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields(&format!(
        "involvedObject.name=ev,involvedObject.kind=S3Bucket,involvedObject.uid={}",
        b.metadata.uid.clone().unwrap()
    ));
    let list = core.list(&lp).await.unwrap();
    assert_eq!(list.items.len(), 1, "{:?}", list.items);
    let e = &list.items[0];
    assert_eq!(e.message.as_deref(), Some("bucket created"));
    assert_eq!(e.reason.as_deref(), Some("Created"));
    assert_eq!(e.count, Some(2));
    assert_eq!(
        e.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("keeper")
    );
    assert_eq!(e.reporting_component.as_deref(), Some("keeper"));
    assert!(e.last_timestamp.is_some());
    assert_eq!(
        core.list(&ListParams::default().fields("involvedObject.name=other"))
            .await
            .unwrap()
            .items
            .len(),
        0
    );
    assert_eq!(
        core.list(&ListParams::default().fields("reason=Created,type=Normal"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let err = api_err(
        core.list(&ListParams::default().fields("bogus=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 400);
    // A core/v1 event reads back through events.k8s.io/v1.
    let e: CoreEvent = serde_json::from_value(json!({"metadata": {"name": "core.1"}, "involvedObject": {"kind": "S3Bucket", "name": "ev", "namespace": "default"},
        "reason": "Old", "message": "from core", "type": "Warning", "count": 3, "source": {"component": "legacy"},
        "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:05:00Z"}))
    .unwrap();
    core.create(&PostParams::default(), &e).await.unwrap();
    let (code, _, v1) = env
        .raw(
            "GET",
            "/apis/events.k8s.io/v1/namespaces/default/events/core.1",
            None,
            None,
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(v1["apiVersion"], "events.k8s.io/v1");
    assert_eq!(v1["note"], "from core");
    assert_eq!(v1["regarding"]["name"], "ev");
    assert_eq!(v1["deprecatedCount"], 3);
    assert_eq!(v1["reportingController"], "legacy");
    assert_eq!(v1["deprecatedLastTimestamp"], "2024-01-01T00:05:00Z");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_validation_defaulting_and_pruning() {
    let env = Env::new().await;
    env.install_crd().await;
    let body = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "bad"},
        "spec": {"tenantRef": {}, "bucketName": "X", "deletionPolicy": "Keep", "quotaGiB": 0, "versioning": "yes"}});
    let (code, _, st) = env
        .raw(
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets",
            None,
            Some(body),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["reason"], "Invalid");
    assert_eq!(st["details"]["kind"], "S3Bucket");
    assert_eq!(st["details"]["group"], "keeper.dev");
    let causes = st["details"]["causes"].as_array().unwrap();
    let find = |f: &str| {
        causes
            .iter()
            .find(|c| c["field"] == f)
            .unwrap_or_else(|| panic!("no cause for {f}: {st}"))
            .clone()
    };
    assert_eq!(find("spec.tenantRef.name")["reason"], "FieldValueRequired");
    assert_eq!(
        find("spec.deletionPolicy")["reason"],
        "FieldValueNotSupported"
    );
    assert_eq!(
        find("spec.deletionPolicy")["message"],
        "Unsupported value: \"Keep\": supported values: \"Delete\", \"Retain\""
    );
    assert_eq!(find("spec.bucketName")["reason"], "FieldValueInvalid");
    assert_eq!(
        find("spec.quotaGiB")["message"],
        "Invalid value: 0: spec.quotaGiB in body should be greater than or equal to 1"
    );
    assert_eq!(find("spec.versioning")["reason"], "FieldValueTypeInvalid");
    let msg = st["message"].as_str().unwrap();
    assert!(
        msg.starts_with("S3Bucket.keeper.dev \"bad\" is invalid: ["),
        "{msg}"
    );
    assert!(msg.contains("spec.bucketName: Invalid value: \"X\": spec.bucketName in body should match '^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$'"), "{msg}");
    // Single error: no brackets.
    let body = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "b"}, "spec": {"tenantRef": {"name": "t"}, "bucketName": "X"}});
    let (code, _, st) = env
        .raw(
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets",
            None,
            Some(body),
        )
        .await;
    assert_eq!(code, 422);
    assert_eq!(
        st["message"],
        "S3Bucket.keeper.dev \"b\" is invalid: spec.bucketName: Invalid value: \"X\": spec.bucketName in body should match '^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$'"
    );
    // Defaults applied, unknown fields pruned (with a warning), preserved subtrees kept, int-or-string.
    let body = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "ok"},
        "spec": {"tenantRef": {"name": "t", "junk": 1}, "unknown": true, "extra": {"free": {"form": 1}}, "size": "10Gi"}});
    let (code, warnings, obj) = env
        .raw(
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets",
            None,
            Some(body.clone()),
        )
        .await;
    assert_eq!(code, 201, "{obj}");
    assert_eq!(
        obj["spec"],
        json!({"tenantRef": {"name": "t"}, "extra": {"free": {"form": 1}}, "size": "10Gi", "versioning": false, "deletionPolicy": "Delete"})
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("unknown field \\\"spec.unknown\\\"")),
        "{warnings:?}"
    );
    // fieldValidation=Strict rejects unknown fields instead.
    let mut strict = body.clone();
    strict["metadata"]["name"] = json!("strict");
    let (code, _, st) = env
        .raw(
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets?fieldValidation=Strict",
            None,
            Some(strict),
        )
        .await;
    assert_eq!(code, 400);
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"spec.tenantRef.junk\""),
        "{st}"
    );
    // Name validation.
    let body = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "Bad_Name"}, "spec": {"tenantRef": {"name": "t"}}});
    let (code, _, st) = env
        .raw(
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets",
            None,
            Some(body),
        )
        .await;
    assert_eq!(code, 422);
    assert_eq!(st["details"]["causes"][0]["field"], "metadata.name");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_pagination_and_generate_name() {
    let env = Env::new().await;
    let client = env.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for (name, labels) in [
        ("a", json!({"app": "web", "tier": "front"})),
        ("b", json!({"app": "web", "tier": "back"})),
        ("c", json!({"app": "db"})),
        ("d", json!({})),
    ] {
        api.create(&PostParams::default(), &cm(name, labels))
            .await
            .unwrap();
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    for (sel, want) in [
        ("app=web", vec!["a", "b"]),
        ("app==web,tier!=back", vec!["a"]),
        ("app in (web,db)", vec!["a", "b", "c"]),
        ("app notin (web)", vec!["c", "d"]),
        ("tier", vec!["a", "b"]),
        ("!app", vec!["d"]),
    ] {
        assert_eq!(
            names(api.list(&ListParams::default().labels(sel)).await.unwrap()),
            want,
            "selector {sel}"
        );
    }
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name=c"))
                .await
                .unwrap()
        ),
        vec!["c"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name!=c,metadata.namespace=default"))
                .await
                .unwrap()
        ),
        vec!["a", "b", "d"]
    );
    // Pagination.
    let p1 = api.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(p1.metadata.remaining_item_count, Some(1));
    let token = p1.metadata.continue_.clone().unwrap();
    let p2 = api
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(p1), vec!["a", "b", "c"]);
    assert!(p2.metadata.continue_.as_deref().unwrap_or("").is_empty());
    assert_eq!(names(p2), vec!["d"]);
    // Cluster-wide list and generateName.
    let mut g = cm("", json!({}));
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let created = api.create(&PostParams::default(), &g).await.unwrap();
    assert!(created.metadata.name.unwrap().starts_with("gen-"));
    let all: Api<ConfigMap> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        5
    );
    // deletecollection with a selector.
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app=web"),
    )
    .await
    .unwrap();
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app"))
                .await
                .unwrap()
        ),
        vec!["c"]
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_creates_and_merges() {
    let env = Env::new().await;
    env.install_crd().await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client().await, "default", &s3_api_resource());
    let pp = PatchParams::apply("keeper-test");
    let doc = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "ssa", "labels": {"a": "1"}}, "spec": {"tenantRef": {"name": "t"}}});
    let created = api.patch("ssa", &pp, &Patch::Apply(doc)).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.data["spec"]["deletionPolicy"], "Delete");
    let doc = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "ssa", "labels": {"a": "1", "b": "2"}}, "spec": {"tenantRef": {"name": "t"}, "deletionPolicy": "Retain"}});
    let merged = api.patch("ssa", &pp, &Patch::Apply(doc)).await.unwrap();
    assert_eq!(merged.data["spec"]["tenantRef"]["name"], "t");
    assert_eq!(merged.data["spec"]["deletionPolicy"], "Retain");
    assert_eq!(merged.metadata.labels.unwrap().len(), 2);
    assert_eq!(merged.metadata.generation, Some(2));
    // Fields this manager applied before but no longer applies are removed; others' fields stay.
    api.patch(
        "ssa",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"other": "x"}}})),
    )
    .await
    .unwrap();
    let doc = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "ssa", "labels": {"a": "1"}},
        "spec": {"tenantRef": {"name": "t"}, "bucketName": "ssa-bucket"}});
    api.patch("ssa", &pp, &Patch::Apply(doc)).await.unwrap();
    let doc = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "metadata": {"name": "ssa"}, "spec": {"tenantRef": {"name": "t"}}});
    let pruned = api.patch("ssa", &pp, &Patch::Apply(doc)).await.unwrap();
    let labels = pruned.metadata.labels.clone().unwrap_or_default();
    assert!(
        !labels.contains_key("a") && labels.contains_key("other"),
        "{labels:?}"
    );
    assert!(
        pruned.data["spec"].get("bucketName").is_none(),
        "{}",
        pruned.data
    );
    // Status conditions applied by a controller: a dropped condition goes away.
    let cond = |types: &[&str]| {
        let c: Vec<Value> = types
            .iter()
            .map(|t| json!({"type": t, "status": "True"}))
            .collect();
        json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "status": {"conditions": c}})
    };
    let spp = PatchParams::apply("keeper").force();
    api.patch_status("ssa", &spp, &Patch::Apply(cond(&["Ready", "Synced"])))
        .await
        .unwrap();
    let got = api
        .patch_status("ssa", &spp, &Patch::Apply(cond(&["Ready"])))
        .await
        .unwrap();
    assert_eq!(
        got.data["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}])
    );
    // Missing fieldManager is refused.
    let (code, _, _) = env
        .raw(
            "PATCH",
            &bucket_path("default", "ssa"),
            Some("application/apply-patch+yaml"),
            Some(json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket"})),
        )
        .await;
    assert_eq!(code, 422);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_deletion_removes_objects_and_discovery() {
    let env = Env::new().await;
    env.install_crd().await;
    let client = env.client().await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &s3_api_resource());
    api.create(
        &PostParams::default(),
        &bucket("x", json!({"tenantRef": {"name": "t"}})),
    )
    .await
    .unwrap();
    let (code, _, crd) = env
        .raw(
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/s3buckets.keeper.dev",
            None,
            None,
        )
        .await;
    assert_eq!(code, 200);
    let conds = crd["status"]["conditions"].as_array().unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );
    assert!(
        conds
            .iter()
            .any(|c| c["type"] == "NamesAccepted" && c["status"] == "True")
    );
    let (_, _, rl) = env
        .raw("GET", "/apis/keeper.dev/v1alpha1", None, None)
        .await;
    let r = rl["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "s3buckets")
        .unwrap()
        .clone();
    assert_eq!(r["namespaced"], true);
    assert_eq!(r["kind"], "S3Bucket");
    assert_eq!(r["shortNames"], json!(["s3b"]));
    assert_eq!(r["categories"], json!(["keeper"]));
    assert_eq!(r["singularName"], "s3bucket");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default().timeout(30), &rv)
        .await
        .unwrap()
        .boxed();
    env.raw(
        "DELETE",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/s3buckets.keeper.dev",
        None,
        None,
    )
    .await;
    let (code, _, _) = env
        .raw("GET", "/apis/keeper.dev/v1alpha1", None, None)
        .await;
    assert_eq!(code, 404);
    // The open watch saw the object go and then ended with its CRD.
    let ev = stream.try_next().await.unwrap().unwrap();
    assert!(matches!(ev, WatchEvent::Deleted(_)), "{ev:?}");
    let end = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("watch ends");
    assert!(matches!(end, Ok(None)), "{end:?}");
    let (code, _, _) = env
        .raw(
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/s3buckets.keeper.dev",
            None,
            None,
        )
        .await;
    assert_eq!(code, 404);
    // A CRD whose objects are held by finalizers stays Terminating and refuses new objects.
    env.install_crd().await;
    let mut held = bucket("held", json!({"tenantRef": {"name": "t"}}));
    held.metadata.finalizers = Some(vec!["keeper.dev/cleanup".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();
    env.raw(
        "DELETE",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/s3buckets.keeper.dev",
        None,
        None,
    )
    .await;
    assert!(
        api.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let err = api_err(
        api.create(
            &PostParams::default(),
            &bucket("late", json!({"tenantRef": {"name": "t"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 405, "{err:?}");
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let (code, _, _) = env
        .raw(
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/s3buckets.keeper.dev",
            None,
            None,
        )
        .await;
    assert_eq!(code, 404, "the CRD goes once its last object is gone");
    // Recreating serves an empty collection: the objects went with the CRD.
    env.install_crd().await;
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_log_tables_and_openapi() {
    let env = Env::new().await;
    env.install_crd().await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client().await, "default", &s3_api_resource());
    env.raw("DELETE", "/debug/requests", None, None).await;
    api.create(
        &PostParams::default(),
        &bucket("t1", json!({"tenantRef": {"name": "t"}})),
    )
    .await
    .unwrap();
    api.get("t1").await.unwrap();
    let _ = api.get("missing").await;
    let (_, _, log) = env.raw("GET", "/debug/requests", None, None).await;
    let reqs = log["requests"].as_array().unwrap();
    let summary: Vec<(String, String, u64)> = reqs
        .iter()
        .map(|r| {
            (
                r["verb"].as_str().unwrap().to_string(),
                r["name"].as_str().unwrap().to_string(),
                r["code"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("create".into(), "".into(), 201),
            ("get".into(), "t1".into(), 200),
            ("get".into(), "missing".into(), 404)
        ]
    );
    assert_eq!(reqs[0]["resource"], "s3buckets");
    assert_eq!(reqs[0]["namespace"], "default");
    assert!(reqs[0]["userAgent"].is_string(), "{}", reqs[0]);
    // Status patch for a printer column, then a Table.
    api.patch_status("t1", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Ready", "bucketName": "bkt", "conditions": [{"type": "Ready", "status": "True"}]}})))
        .await
        .unwrap();
    let (code, _, t) = env
        .raw_accept(
            "GET",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets",
            None,
            None,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(t["kind"], "Table");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, vec!["Name", "Phase", "Bucket", "Ready", "Age"]);
    assert_eq!(t["rows"][0]["cells"][0], "t1");
    assert_eq!(t["rows"][0]["cells"][1], "Ready");
    assert_eq!(t["rows"][0]["cells"][2], "bkt");
    assert_eq!(t["rows"][0]["cells"][3], "True");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let (_, _, t) = env
        .raw_accept(
            "GET",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets?includeObject=Object",
            None,
            None,
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        .await;
    assert_eq!(t["rows"][0]["object"]["spec"]["tenantRef"]["name"], "t");
    let (_, _, t) = env
        .raw_accept(
            "GET",
            "/api/v1/namespaces",
            None,
            None,
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        .await;
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, vec!["Name", "Status", "Age"]);
    // OpenAPI v3 index and a CRD document.
    let (_, _, idx) = env.raw("GET", "/openapi/v3", None, None).await;
    let url = idx["paths"]["apis/keeper.dev/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(idx["paths"]["api/v1"]["serverRelativeURL"].is_string());
    let (code, _, doc) = env.raw("GET", &url, None, None).await;
    assert_eq!(code, 200);
    let s = &doc["components"]["schemas"]["dev.keeper.v1alpha1.S3Bucket"];
    assert_eq!(s["x-kubernetes-group-version-kind"][0]["kind"], "S3Bucket");
    assert_eq!(
        s["properties"]["spec"]["properties"]["bucketName"]["type"],
        "string"
    );
    assert_eq!(code, 200);
    let (code, _, v2) = env.raw("GET", "/openapi/v2", None, None).await;
    assert_eq!(code, 200);
    assert_eq!(
        v2["definitions"],
        json!({}),
        "OpenAPI v2 carries no schemas"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_writes_nothing() {
    let env = Env::new().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let got = api.create(&dry, &cm("dry", json!({}))).await.unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("dry"));
    assert!(api.get_opt("dry").await.unwrap().is_none());
    api.create(&PostParams::default(), &cm("real", json!({})))
        .await
        .unwrap();
    let pp = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let got = api
        .patch(
            "real",
            &pp,
            &Patch::Merge(json!({"data": {"k": "changed"}})),
        )
        .await
        .unwrap();
    assert_eq!(got.data.unwrap()["k"], "changed");
    assert_eq!(api.get("real").await.unwrap().data.unwrap()["k"], "v");
    let dp = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    api.delete("real", &dp).await.unwrap();
    assert!(api.get_opt("real").await.unwrap().is_some());
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_watcher_gets_initial_events_then_changes() {
    let env = Env::new().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    api.create(&PostParams::default(), &cm("pre", json!({})))
        .await
        .unwrap();
    let cfg = kube::runtime::watcher::Config::default().streaming_lists();
    let mut events = Box::pin(kube::runtime::watcher(api.clone(), cfg));
    let mut names = Vec::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .expect("event")
            .unwrap()
            .unwrap();
        match ev {
            kube::runtime::watcher::Event::InitApply(o) => names.push(o.metadata.name.unwrap()),
            kube::runtime::watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(names, vec!["pre"]);
    api.create(&PostParams::default(), &cm("post", json!({})))
        .await
        .unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), events.try_next())
        .await
        .expect("event")
        .unwrap()
        .unwrap();
    match ev {
        kube::runtime::watcher::Event::Apply(o) => {
            assert_eq!(o.metadata.name.as_deref(), Some("post"))
        }
        other => panic!("unexpected {other:?}"),
    }
    let (_, _, log) = env.raw("GET", "/debug/requests", None, None).await;
    assert!(
        !log["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["verb"] == "list"),
        "a streaming list uses a watch only: {log}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors() {
    let env = Env::new().await;
    env.install_crd().await;
    let cms = "/api/v1/namespaces/default/configmaps";
    // Not JSON.
    let resp = env
        .http
        .post(format!("{}{cms}", env.url()))
        .header("Content-Type", "application/json")
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let st: Value = resp.json().await.unwrap();
    assert_eq!(
        (st["kind"].as_str(), st["reason"].as_str()),
        (Some("Status"), Some("BadRequest"))
    );
    // Wrong kind for the endpoint.
    let (code, _, st) = env
        .raw(
            "POST",
            cms,
            None,
            Some(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})),
        )
        .await;
    assert_eq!(code, 400, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("does not match the expected kind (ConfigMap)"),
        "{st}"
    );
    // Namespace in the body differs from the URL.
    let (code, _, st) = env
        .raw(
            "POST",
            cms,
            None,
            Some(json!({"metadata": {"name": "x", "namespace": "other"}})),
        )
        .await;
    assert_eq!(code, 400, "{st}");
    // Missing name.
    let (code, _, st) = env
        .raw("POST", cms, None, Some(json!({"metadata": {}})))
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "metadata.name");
    // Invalid label values and finalizer names are refused like kube does.
    let (code, _, st) = env
        .raw("POST", cms, None, Some(json!({"metadata": {"name": "lbl", "labels": {"ok": "has space"}, "finalizers": ["Not Valid"]}})))
        .await;
    assert_eq!(code, 422, "{st}");
    let fields: Vec<&str> = st["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        vec!["metadata.labels", "metadata.finalizers[0]"],
        "{st}"
    );
    // Config keys and immutable Secrets.
    let (code, _, st) = env
        .raw(
            "POST",
            cms,
            None,
            Some(json!({"metadata": {"name": "keys"}, "data": {"bad key": "x"}})),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert_eq!(st["details"]["causes"][0]["field"], "data[bad key]");
    let secrets = "/api/v1/namespaces/default/secrets";
    let (code, _, _) = env.raw("POST", secrets, None, Some(json!({"metadata": {"name": "frozen"}, "immutable": true, "stringData": {"a": "b"}}))).await;
    assert_eq!(code, 201);
    let (code, _, st) = env
        .raw(
            "PATCH",
            &format!("{secrets}/frozen"),
            Some("application/merge-patch+json"),
            Some(json!({"stringData": {"a": "c"}})),
        )
        .await;
    assert_eq!(code, 422, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("field is immutable when `immutable` is set"),
        "{st}"
    );
    let (code, _, _) = env
        .raw(
            "PATCH",
            &format!("{secrets}/frozen"),
            Some("application/merge-patch+json"),
            Some(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await;
    assert_eq!(code, 200, "metadata of an immutable secret can change");
    // Missing namespace.
    let (code, _, st) = env
        .raw(
            "POST",
            "/api/v1/namespaces/nowhere/configmaps",
            None,
            Some(json!({"metadata": {"name": "x"}})),
        )
        .await;
    assert_eq!(
        (code, st["message"].as_str()),
        (404, Some("namespaces \"nowhere\" not found"))
    );
    // Unknown resources and verbs.
    let (code, _, st) = env.raw("GET", "/api/v1/pods", None, None).await;
    assert_eq!((code, st["reason"].as_str()), (404, Some("NotFound")));
    let (code, _, st) = env
        .raw("POST", &format!("{cms}/x"), None, Some(json!({})))
        .await;
    assert_eq!(
        (code, st["reason"].as_str()),
        (405, Some("MethodNotAllowed"))
    );
    let (code, _, _) = env
        .raw(
            "GET",
            "/api/v1/namespaces/default/configmaps/x/status",
            None,
            None,
        )
        .await;
    assert_eq!(code, 404, "configmaps have no status subresource");
    // Bad selectors, bad patch bodies, bad watch versions.
    let (code, _, st) = env
        .raw(
            "GET",
            &format!("{cms}?labelSelector=a%20in%20b"),
            None,
            None,
        )
        .await;
    assert_eq!(code, 400, "{st}");
    env.raw("POST", cms, None, Some(json!({"metadata": {"name": "p"}})))
        .await;
    let (code, _, _) = env
        .raw(
            "PATCH",
            &format!("{cms}/p"),
            Some("application/json-patch+json"),
            Some(json!({"not": "a list"})),
        )
        .await;
    assert!(code == 400 || code == 422, "{code}");
    let (code, _, _) = env
        .raw(
            "GET",
            &format!("{cms}?watch=1&resourceVersion=abc"),
            None,
            None,
        )
        .await;
    assert_eq!(code, 400);
    // CRD objects without their required apiVersion group.
    let (code, _, st) = env
        .raw("POST", "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets", None,
            Some(json!({"apiVersion": "other.dev/v1", "kind": "S3Bucket", "metadata": {"name": "b"}, "spec": {"tenantRef": {"name": "t"}}})))
        .await;
    assert_eq!(code, 400, "{st}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_timeout_seconds_ends_the_stream() {
    let env = Env::new().await;
    let start = std::time::Instant::now();
    let resp = env
        .http
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1",
            env.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body = resp.text().await.unwrap();
    let elapsed = start.elapsed();
    assert!(body.is_empty(), "{body}");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    // Table watches: one row per event, column definitions once.
    let env2 = &env;
    let watcher = tokio::spawn({
        let url = format!(
            "{}/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=2",
            env2.url()
        );
        let http = env2.http.clone();
        async move {
            http.get(url)
                .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    });
    env.wait_for_request("watch", "configmaps").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    api.create(&PostParams::default(), &cm("t1", json!({})))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("t2", json!({})))
        .await
        .unwrap();
    let text = watcher.await.unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2, "{text}");
    assert_eq!(events[0]["object"]["kind"], "Table");
    assert!(events[0]["object"]["columnDefinitions"].is_array());
    assert!(events[1]["object"].get("columnDefinitions").is_none());
    assert_eq!(events[1]["object"]["rows"][0]["cells"][0], "t2");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_clients() {
    let env = Env::new().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    api.create(&PostParams::default(), &cm("m1", json!({"a": "b"})))
        .await
        .unwrap();
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.labels.as_ref().unwrap()["a"], "b");
    let one = api.get_metadata("m1").await.unwrap();
    assert_eq!(one.metadata.name.as_deref(), Some("m1"));
    let meta_api: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::namespaced(env.client().await, "default");
    let w = kube::runtime::watcher(meta_api, kube::runtime::watcher::Config::default());
    let mut objs = Box::pin(kube::runtime::WatchStreamExt::applied_objects(w));
    let first = tokio::time::timeout(Duration::from_secs(5), objs.try_next())
        .await
        .expect("applied")
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("m1"));
    api.create(&PostParams::default(), &cm("m2", json!({})))
        .await
        .unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), objs.try_next())
        .await
        .expect("applied")
        .unwrap()
        .unwrap();
    assert_eq!(second.metadata.name.as_deref(), Some("m2"));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_client_errors_not_crashes() {
    let env = Env::new().await;
    env.install_crd().await;
    let cms = "/api/v1/namespaces/default/configmaps";
    env.raw(
        "POST",
        cms,
        None,
        Some(json!({"metadata": {"name": "base"}})),
    )
    .await;
    let cases: Vec<(&str, String, Option<&str>, Value)> = vec![
        (
            "POST",
            "/api/v1/namespaces".into(),
            None,
            json!({"metadata": {"name": "n1"}, "spec": "x"}),
        ),
        (
            "POST",
            "/api/v1/namespaces/default/secrets".into(),
            None,
            json!({"metadata": {"name": "s"}, "data": "x"}),
        ),
        (
            "POST",
            "/api/v1/namespaces/default/secrets".into(),
            None,
            json!({"metadata": {"name": "s"}, "data": {"k": "not base64!"}}),
        ),
        (
            "POST",
            cms.into(),
            None,
            json!({"metadata": {"name": "c", "labels": "x"}}),
        ),
        (
            "POST",
            cms.into(),
            None,
            json!({"metadata": {"name": "c", "finalizers": [1]}}),
        ),
        ("POST", cms.into(), None, json!(["not", "an", "object"])),
        (
            "POST",
            "/apis/keeper.dev/v1alpha1/namespaces/default/s3buckets".into(),
            None,
            json!({"metadata": {"name": "b"}, "spec": "x"}),
        ),
        (
            "PATCH",
            format!("{cms}/base"),
            Some("application/merge-patch+json"),
            json!({"data": "x"}),
        ),
        (
            "PATCH",
            format!("{cms}/base"),
            Some("application/merge-patch+json"),
            json!({"metadata": {"labels": ["x"]}}),
        ),
        (
            "PATCH",
            format!("{cms}/base"),
            Some("application/json-patch+json"),
            json!([{"op": "replace", "path": "", "value": "x"}]),
        ),
        (
            "PATCH",
            format!("{cms}/base"),
            Some("application/strategic-merge-patch+json"),
            json!({"data": ["x"]}),
        ),
        (
            "PATCH",
            format!("{cms}/base"),
            Some("application/apply-patch+yaml"),
            json!({"kind": "ConfigMap"}),
        ),
        (
            "PUT",
            format!("{cms}/base"),
            None,
            json!({"metadata": {"name": "other"}}),
        ),
        (
            "DELETE",
            format!("{cms}/base"),
            None,
            json!({"preconditions": {"resourceVersion": "1"}}),
        ),
    ];
    for (method, path, ct, body) in cases {
        let path = if ct == Some("application/apply-patch+yaml") {
            format!("{path}?fieldManager=t")
        } else {
            path
        };
        let (code, _, st) = env.raw(method, &path, ct, Some(body.clone())).await;
        assert!(
            (400..500).contains(&code),
            "{method} {path} {body} -> {code} {st}"
        );
        assert_eq!(st["kind"], "Status", "{st}");
    }
    let (code, _, _) = env.raw("GET", "/version", None, None).await;
    assert_eq!(code, 200);
    env.stop().await;
}
