//! Watches: from a resourceVersion, bookmarks, 410 Gone, streaming lists, timeouts.

use super::*;

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
