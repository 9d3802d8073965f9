//! Deletion: finalizers, ownerReference garbage collection, namespace and CRD deletion.

use super::*;

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
    // The namespace controller deletes the content asynchronously, as kube's does.
    for _ in 0..100 {
        let held = cms.get("held").await.unwrap();
        if cms.get_opt("plain").await.unwrap().is_none()
            && held.metadata.deletion_timestamp.is_some()
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
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
async fn collection_follows_owners_through_chains_and_reference_changes() {
    let env = Env::new().await;
    let client = env.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let refs = |owners: &[&ConfigMap]| -> Vec<Value> {
        owners
            .iter()
            .map(|o| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o.metadata.name, "uid": o.metadata.uid}))
            .collect()
    };
    let owner = async |name: &str, owners: &[&ConfigMap]| {
        let c: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": name, "ownerReferences": refs(owners)}}),
        )
        .unwrap();
        cms.create(&PostParams::default(), &c).await.unwrap()
    };
    let dependent = async |name: &str, owners: &[&ConfigMap], finalizers: Value| {
        let s: Secret = serde_json::from_value(json!({"metadata": {"name": name,
            "ownerReferences": refs(owners), "finalizers": finalizers}}))
        .unwrap();
        secrets.create(&PostParams::default(), &s).await.unwrap()
    };
    let release = async |name: &str| {
        secrets
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
    };
    let exists = async |name: &str| secrets.get_opt(name).await.unwrap().is_some();
    let cm_exists = async |name: &str| cms.get_opt(name).await.unwrap().is_some();

    // A dependent of two owners goes with the second.
    let (o1, o2) = (owner("o1", &[]).await, owner("o2", &[]).await);
    dependent("shared", &[&o1, &o2], json!([])).await;
    cms.delete("o1", &DeleteParams::default()).await.unwrap();
    assert!(exists("shared").await, "one owner is left");
    cms.delete("o2", &DeleteParams::default()).await.unwrap();
    assert!(!exists("shared").await, "no owner is left");

    // A dependent whose owner never existed is collected at once.
    let ghost: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "ghost", "uid": "no-such-uid"}}))
            .unwrap();
    dependent("dangling", &[&ghost], json!([])).await;
    assert!(!exists("dangling").await);

    // Orphaning drops only the deleted owner's reference.
    let (o3, o4) = (owner("o3", &[]).await, owner("o4", &[]).await);
    dependent("two", &[&o3, &o4], json!([])).await;
    cms.delete("o3", &DeleteParams::orphan()).await.unwrap();
    assert!(!cm_exists("o3").await);
    let refs = secrets.get("two").await.unwrap().metadata.owner_references;
    let left: Vec<String> = refs.unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(left, ["o4"]);

    // Foreground through a chain: each owner waits for the dependents below it.
    let top = owner("top", &[]).await;
    let mid = owner("mid", &[&top]).await;
    dependent("leaf", &[&mid], json!(["keeper.dev/hold"])).await;
    cms.delete("top", &DeleteParams::foreground())
        .await
        .unwrap();
    for name in ["top", "mid"] {
        let o = cms.get(name).await.unwrap();
        assert!(o.metadata.deletion_timestamp.is_some(), "{name} is marked");
        assert_eq!(
            o.metadata.finalizers.unwrap_or_default(),
            ["foregroundDeletion"],
            "{name} waits"
        );
    }
    let leaf = secrets.get("leaf").await.unwrap();
    assert!(leaf.metadata.deletion_timestamp.is_some(), "leaf is marked");
    // A dependent that comes while its owner waits is deleted like the others.
    dependent("late", &[&top], json!([])).await;
    assert!(!exists("late").await);
    release("leaf").await;
    assert!(!exists("leaf").await);
    assert!(!cm_exists("mid").await, "mid goes once leaf is gone");
    assert!(!cm_exists("top").await, "top goes once mid is gone");

    // A dependent that drops its reference releases the owner waiting for it.
    let waiter = owner("waiter", &[]).await;
    dependent("clinger", &[&waiter], json!(["keeper.dev/hold"])).await;
    cms.delete("waiter", &DeleteParams::foreground())
        .await
        .unwrap();
    assert!(cm_exists("waiter").await);
    secrets
        .patch(
            "clinger",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": null}})),
        )
        .await
        .unwrap();
    assert!(
        !cm_exists("waiter").await,
        "nothing holds the owner any more"
    );
    assert!(exists("clinger").await, "its own finalizer holds it");
    release("clinger").await;
    assert!(!exists("clinger").await);
    env.stop().await;
}
