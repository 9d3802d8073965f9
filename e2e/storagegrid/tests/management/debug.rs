//! Debug endpoints: the request log, the state dump and fault injection.

use super::*;

#[tokio::test]
async fn debug_request_log_and_state() {
    let s = Stack::start().await;
    let base = s.emu.management_url().to_owned();
    let grid = s.grid_token().await;
    let (id, t) = s.tenant(&grid, "t").await;
    s.create_bucket(&t, "dbg-bucket").await;
    let (_, secret) = s.key(&t, "current-user").await;
    s.get("/grid/accounts/99999999999999999999", &grid)
        .await
        .assert_error(404);

    let r = s
        .raw(Method::GET, &format!("{base}/debug/requests"), None, None)
        .await;
    assert_eq!(r.status, 200);
    let reqs = r.body["requests"].as_array().unwrap();
    let find = |op: &str| {
        reqs.iter()
            .find(|r| r["operation"] == op)
            .unwrap_or_else(|| panic!("{op} missing: {reqs:?}"))
            .clone()
    };
    let c = find("createAccount");
    assert_eq!(c["method"], "POST");
    assert_eq!(c["path"], "/api/v4/grid/accounts");
    assert_eq!(c["code"], 201);
    assert_eq!(c["account"], id.as_str());
    let cc = find("createContainer");
    assert_eq!(cc["account"], id.as_str());
    assert_eq!(cc["code"], 201);
    assert_eq!(find("getAccount")["code"], 404);
    assert!(
        reqs.iter()
            .all(|r| !r["path"].as_str().unwrap().starts_with("/debug"))
    );

    let state = s
        .raw(Method::GET, &format!("{base}/debug/state"), None, None)
        .await;
    assert_eq!(state.status, 200);
    assert_eq!(state.body["accounts"][0]["id"], id.as_str());
    assert_eq!(state.body["buckets"][0]["name"], "dbg-bucket");
    assert_eq!(state.body["buckets"][0]["accountId"], id.as_str());
    let dump = state.body.to_string();
    assert!(!dump.contains(&secret), "secret in state dump");
    assert!(!dump.contains(TENANT_PASSWORD), "password in state dump");
    assert!(!dump.contains(common::ADMIN_PASSWORD));

    let d = s
        .raw(
            Method::DELETE,
            &format!("{base}/debug/requests"),
            None,
            None,
        )
        .await;
    assert_eq!(d.status, 204);
    let r = s
        .raw(Method::GET, &format!("{base}/debug/requests"), None, None)
        .await;
    assert_eq!(r.body["requests"], json!([]));
}

#[tokio::test]
async fn fault_injection() {
    let s = Stack::start().await;
    let base = s.emu.management_url().to_owned();
    let grid = s.grid_token().await;
    let id = s.create_account(&grid, "t").await;
    let other = s.create_account(&grid, "u").await;

    let f = s
        .raw(
            Method::POST,
            &format!("{base}/debug/faults"),
            None,
            Some(json!({"path_prefix":"/api/v4/grid/accounts","method":"DELETE","status":503,"count":2})),
        )
        .await;
    assert_eq!(f.status, 201);
    // GETs are not affected; the next two DELETEs fail with 503, the third works.
    s.get(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_ok(200);
    s.delete(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_error(503);
    s.delete(&format!("/grid/accounts/{other}"), &grid)
        .await
        .assert_error(503);
    s.delete(&format!("/grid/accounts/{id}"), &grid)
        .await
        .assert_ok(204);
    let log = s
        .raw(Method::GET, &format!("{base}/debug/requests"), None, None)
        .await;
    let faults = log.body["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["code"] == 503)
        .count();
    assert_eq!(faults, 2);

    // Delay.
    s.raw(
        Method::POST,
        &format!("{base}/debug/faults"),
        None,
        Some(json!({"path_prefix":"/api/v4/grid/accounts","delay_ms":700})),
    )
    .await;
    let t0 = Instant::now();
    s.get(&format!("/grid/accounts/{other}"), &grid)
        .await
        .assert_ok(200);
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "delay not applied"
    );
    let t0 = Instant::now();
    s.get(&format!("/grid/accounts/{other}"), &grid)
        .await
        .assert_ok(200);
    assert!(
        t0.elapsed() < Duration::from_millis(700),
        "delay applied more than once"
    );

    // Clear.
    s.raw(
        Method::POST,
        &format!("{base}/debug/faults"),
        None,
        Some(json!({"path_prefix":"/api/v4/grid","status":500,"count":100})),
    )
    .await;
    s.get("/grid/accounts", &grid).await.assert_error(500);
    let d = s
        .raw(Method::DELETE, &format!("{base}/debug/faults"), None, None)
        .await;
    assert_eq!(d.status, 204);
    s.get("/grid/accounts", &grid).await.assert_ok(200);
    // Invalid rule.
    let bad = s
        .raw(
            Method::POST,
            &format!("{base}/debug/faults"),
            None,
            Some(json!({"path_prefix":"/x"})),
        )
        .await;
    assert_eq!(bad.status, 422);
}

#[tokio::test]
async fn share_based_faults_hit_at_random_and_repeat_with_the_seed() {
    let s = Stack::start().await;
    let base = s.emu.management_url().to_owned();
    let grid = s.grid_token().await;
    let rule = json!({"seed": 11, "faults": [{"path_prefix": "/api/v4/grid/accounts", "method": "GET",
        "status": 503, "share": 0.4}]});
    let mut runs = Vec::new();
    for _ in 0..2 {
        s.raw(Method::DELETE, &format!("{base}/debug/faults"), None, None)
            .await;
        let f = s
            .raw(
                Method::POST,
                &format!("{base}/debug/faults"),
                None,
                Some(rule.clone()),
            )
            .await;
        assert_eq!(f.status, 201);
        let mut codes = Vec::new();
        for _ in 0..40 {
            codes.push(s.get("/grid/accounts", &grid).await.status.as_u16());
        }
        runs.push(codes);
    }
    assert_eq!(runs[0], runs[1], "the same seed gives the same faults");
    let failed = runs[0].iter().filter(|c| **c == 503).count();
    assert!((6..=28).contains(&failed), "{failed} of 40: {:?}", runs[0]);
    assert!(runs[0].iter().all(|c| *c == 503 || *c == 200));
    // At random, not the next N: a success comes before the last failure.
    let first_ok = runs[0].iter().position(|c| *c == 200).unwrap();
    let last_fault = runs[0].iter().rposition(|c| *c == 503).unwrap();
    assert!(first_ok < last_fault, "{:?}", runs[0]);
    // The rule stays until removed, and says how many requests it hit.
    let listed = s
        .raw(Method::GET, &format!("{base}/debug/faults"), None, None)
        .await;
    assert_eq!(listed.body["faults"][0]["share"], 0.4);
    assert_eq!(listed.body["faults"][0]["hits"], failed);

    // With a count, the rule goes after that many hits.
    s.raw(Method::DELETE, &format!("{base}/debug/faults"), None, None)
        .await;
    s.raw(
        Method::POST,
        &format!("{base}/debug/faults"),
        None,
        Some(json!({"path_prefix": "/api/v4/grid/accounts", "status": 500, "share": 0.5, "count": 3})),
    )
    .await;
    let mut failures = 0;
    for _ in 0..60 {
        if s.get("/grid/accounts", &grid).await.status == 500 {
            failures += 1;
        }
    }
    assert_eq!(failures, 3);
    let listed = s
        .raw(Method::GET, &format!("{base}/debug/faults"), None, None)
        .await;
    assert_eq!(listed.body["faults"], json!([]));
    let bad = s
        .raw(
            Method::POST,
            &format!("{base}/debug/faults"),
            None,
            Some(json!({"path_prefix": "/x", "status": 500, "share": 2})),
        )
        .await;
    assert_eq!(bad.status, 422);
}
