//! Fault injection (`/debug/faults`): latency, error answers by share, watches cut short.

use crate::common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

async fn set_faults(env: &Env, settings: Value) {
    let (code, _, body) = env.raw("PUT", "/debug/faults", None, Some(settings)).await;
    assert_eq!(code, 200, "{body}");
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_request_gets_kubes_429_with_retry_after_and_is_not_served() {
    let env = Env::new().await;
    set_faults(
        &env,
        json!({"rules": [{"resource": "configmaps", "verbs": ["create"], "share": 1.0,
            "codes": [429], "retryAfterSeconds": 3}]}),
    )
    .await;
    let resp = env
        .http
        .post(format!(
            "{}/api/v1/namespaces/default/configmaps",
            env.url()
        ))
        .header("Content-Type", "application/json")
        .body(configmap("throttled").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(resp.headers()["Retry-After"], "3");
    let status: Value = resp.json().await.unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(status["details"]["retryAfterSeconds"], 3);
    assert_eq!(status["code"], 429);
    // Not served: nothing was created; other verbs pass.
    let (code, _, _) = env
        .raw(
            "GET",
            "/api/v1/namespaces/default/configmaps/throttled",
            None,
            None,
        )
        .await;
    assert_eq!(code, 404);
    let (_, _, log) = env.raw("GET", "/debug/requests", None, None).await;
    let refused: Vec<&Value> = log["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["fault"] == true)
        .collect();
    assert_eq!(refused.len(), 1, "{log}");
    assert_eq!(refused[0]["verb"], "create");
    assert_eq!(refused[0]["resource"], "configmaps");
    assert_eq!(refused[0]["code"], 429);
    let (_, _, faults) = env.raw("GET", "/debug/faults", None, None).await;
    assert_eq!(faults["counters"][0]["answered"]["429"], 1, "{faults}");

    // Cleared: the create goes through.
    let (code, _, _) = env.raw("DELETE", "/debug/faults", None, None).await;
    assert_eq!(code, 200);
    let (code, _, body) = env
        .raw(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            None,
            Some(configmap("throttled")),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_of_errors_hits_at_random_and_the_same_seed_repeats_it() {
    let env = Env::new().await;
    let settings = json!({"seed": 42, "rules": [{"resource": "configmaps", "verbs": ["list"],
        "share": 0.3, "codes": [500, 503]}]});
    let mut runs = Vec::new();
    for _ in 0..2 {
        set_faults(&env, settings.clone()).await;
        let mut codes = Vec::new();
        for _ in 0..60 {
            let (code, _, body) = env
                .raw("GET", "/api/v1/namespaces/default/configmaps", None, None)
                .await;
            match code {
                200 => {}
                500 => assert_eq!(body["reason"], "InternalError", "{body}"),
                503 => assert_eq!(body["reason"], "ServiceUnavailable", "{body}"),
                other => panic!("unexpected {other}: {body}"),
            }
            codes.push(code);
        }
        // Gets are not matched by the rule.
        let (code, _, _) = env
            .raw("GET", "/api/v1/namespaces/default", None, None)
            .await;
        assert_eq!(code, 200);
        runs.push(codes);
    }
    assert_eq!(runs[0], runs[1], "the same seed gives the same faults");
    let failed = runs[0].iter().filter(|c| **c != 200).count();
    assert!(
        (8..=30).contains(&failed),
        "{failed} of 60 failed: {:?}",
        runs[0]
    );
    assert!(runs[0].contains(&500) && runs[0].contains(&503));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_are_only_injected_into_writes_and_read_like_kubes() {
    let env = Env::new().await;
    let (code, _, body) = env
        .raw(
            "PUT",
            "/debug/faults",
            None,
            Some(json!({"rules": [{"resource": "configmaps", "share": 0.5, "codes": [409]}]})),
        )
        .await;
    assert_eq!(code, 400);
    assert!(body["error"].as_str().unwrap().contains("409"), "{body}");

    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(configmap("c")).unwrap(),
    )
    .await
    .unwrap();
    set_faults(
        &env,
        json!({"rules": [{"resource": "configmaps", "verbs": ["patch"], "share": 1.0, "codes": [409],
            "latencyMs": 300}]}),
    )
    .await;
    let t0 = Instant::now();
    let err = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .unwrap_err();
    assert!(t0.elapsed() >= Duration::from_millis(300), "no latency");
    let kube::Error::Api(status) = err else {
        panic!("{err:?}")
    };
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert!(
        status
            .message
            .contains("Operation cannot be fulfilled on configmaps \"c\""),
        "{status:?}"
    );
    let cm = api.get("c").await.unwrap();
    assert_eq!(
        cm.data.unwrap()["k"],
        "v",
        "the refused patch changed nothing"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_are_cut_after_n_events_or_seconds() {
    let env = Env::new().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client().await, "default");
    for name in ["a", "b", "c"] {
        api.create(
            &PostParams::default(),
            &serde_json::from_value(configmap(name)).unwrap(),
        )
        .await
        .unwrap();
    }
    set_faults(
        &env,
        json!({"rules": [{"resource": "configmaps", "verbs": ["watch"], "closeWatchAfterEvents": 2}]}),
    )
    .await;
    let events: Vec<_> = tokio::time::timeout(
        Duration::from_secs(10),
        api.watch(&WatchParams::default().timeout(60), "0")
            .await
            .unwrap()
            .try_collect::<Vec<_>>(),
    )
    .await
    .expect("the watch ends after two events, long before its timeout")
    .unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events.iter().all(|e| matches!(e, WatchEvent::Added(_))));

    set_faults(
        &env,
        json!({"rules": [{"resource": "configmaps", "verbs": ["watch"], "closeWatchAfterSeconds": 1}]}),
    )
    .await;
    let t0 = Instant::now();
    let mut stream = api
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .unwrap()
        .boxed();
    let mut seen = 0;
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the watch ends after a second")
    {
        ev.unwrap();
        seen += 1;
    }
    assert_eq!(seen, 3);
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let (_, _, faults) = env.raw("GET", "/debug/faults", None, None).await;
    assert_eq!(faults["counters"][0]["watchesLimited"], 1, "{faults}");
    env.stop().await;
}
