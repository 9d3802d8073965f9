//! Two keeper replicas with leader election (issue 13): only the leader reconciles, the standby
//! is ready and keeps its caches warm, and a SIGKILL of the leader hands over within ~20 s.

use std::time::{Duration, Instant};

use keeper_e2e_scenarios::{
    Env, Keeper, client_for, condition_is, count_objects, http_get, jitter, put_objects,
    secret_data, wait_for, wait_until,
};

/// The value of a metric line such as `keeper_leader 1`, summed over label sets that start with
/// `prefix` (`keeper_reconcile_total{controller="s3tenant"`).
fn metric(keeper: &Keeper, prefix: &str) -> f64 {
    let (_, text) = http_get(&format!("{}/metrics", keeper.metrics_url)).unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn tenant(name: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: {name}\nspec:\n  provider: s3\n"
    )
}

fn ready(env: &Env, ns: &str, name: &str) {
    wait_for(
        env,
        ns,
        &format!("s3tenant/{name}"),
        "Ready",
        Duration::from_secs(60),
        |t| condition_is(t, "Ready", "True"),
    );
}

const TENANT_RECONCILES: &str = r#"keeper_reconcile_total{controller="s3tenant""#;

#[test]
fn only_the_leader_reconciles_and_a_standby_takes_over_after_the_leader_is_killed() {
    let env = Env::from_env().unwrap();
    let lease = format!("keeper-e2e-{}", std::process::id());
    let first = Keeper::start_elected(&env, &lease).unwrap();
    wait_until(Duration::from_secs(30), "the first replica to lead", || {
        Ok(metric(&first, "keeper_leader ") == 1.0)
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", first.log_text()));
    let second = Keeper::start_elected(&env, &lease).unwrap();
    // Ready (it answered /readyz) and standing by.
    assert_eq!(
        metric(&second, "keeper_leader "),
        0.0,
        "{}",
        second.log_text()
    );

    let ns = env.namespace("e2e-ha").unwrap();
    env.apply(&ns.name, &tenant("led")).unwrap();
    ready(&env, &ns.name, "led");
    assert!(metric(&first, TENANT_RECONCILES) > 0.0);
    // The standby saw the same events and did nothing with them.
    std::thread::sleep(Duration::from_secs(2) + jitter(500));
    assert_eq!(
        metric(&second, TENANT_RECONCILES),
        0.0,
        "the standby reconciled:\n{}",
        second.log_text()
    );

    let killed = Instant::now();
    first.kill();
    wait_until(
        Duration::from_secs(40),
        "the standby to take over after the leader's SIGKILL",
        || Ok(metric(&second, "keeper_leader ") == 1.0),
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", second.log_text()));
    let takeover = killed.elapsed();
    println!("takeover after SIGKILL of the leader: {takeover:?}");
    assert!(
        takeover <= Duration::from_secs(25),
        "takeover took {takeover:?} (lease 15 s)"
    );

    // The new leader reconciles what arrives now, and what it inherited.
    env.apply(&ns.name, &tenant("after")).unwrap();
    ready(&env, &ns.name, "after");
    assert!(metric(&second, TENANT_RECONCILES) > 0.0);

    env.kubectl(&[
        "delete",
        "-n",
        &ns.name,
        "s3tenants",
        "--all",
        "--wait=true",
        "--timeout=60s",
    ])
    .unwrap();
    assert_eq!(second.terminate().unwrap(), Some(0));
    env.kubectl(&["delete", "lease", "-n", &env.operator_namespace, &lease])
        .unwrap();
}

/// Without leader election the process reconciles, and says so: `keeper_leader 1`, so that the
/// chart's KeeperNoLeader alert does not fire for an install that runs one replica unelected.
#[test]
fn a_keeper_without_leader_election_reports_itself_the_leader() {
    let env = Env::from_env().unwrap();
    let keeper = Keeper::start(&env).unwrap();
    wait_until(Duration::from_secs(30), "keeper_leader 1", || {
        Ok(metric(&keeper, "keeper_leader ") == 1.0)
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", keeper.log_text()));
}

/// A leader cut off from the API server but not from its backends (audit 2, MEDIUM 6) must stop
/// acting once its lease may have expired by its own clock, since a standby may lead by then:
/// here a client-side drain is running when every API request of the leader is refused (its own
/// fault proxy), and the bucket's object count must stop falling, `keeper_leader` go to 0 and the
/// log say why; once the API answers again it leads again and the drain finishes.
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_cut_off_from_the_api_stops_acting_once_its_lease_may_have_expired() {
    let env = Env::from_env().unwrap();
    if env.apiserver_url.is_none() {
        keeper_e2e_scenarios::skip("cutting keeper off needs the local control plane's API proxy");
        return;
    }
    let ns = env.namespace("e2e-cutoff").unwrap();
    let n = ns.name.as_str();
    // A slow drain, so that it is still running long after the cut.
    let config = std::fs::read_to_string(&env.keeper_config).unwrap();
    assert!(
        config.contains("drain: {maxDeletesPerSecond: 200}"),
        "{config}"
    );
    let slow = std::env::temp_dir().join(format!("keeper-e2e-cutoff-{}.yaml", std::process::id()));
    std::fs::write(
        &slow,
        config.replace("maxDeletesPerSecond: 200", "maxDeletesPerSecond: 20"),
    )
    .unwrap();
    let mut configured = env.clone();
    configured.keeper_config = slow;
    let proxy = env.api_proxy().unwrap();
    let lease = format!("keeper-e2e-cutoff-{}", std::process::id());
    let keeper = Keeper::start_elected_through(&configured, &lease, &proxy).unwrap();
    wait_until(Duration::from_secs(30), "keeper to lead", || {
        Ok(metric(&keeper, "keeper_leader ") == 1.0)
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", keeper.log_text()));

    env.apply(n, &tenant("t")).unwrap();
    ready(&env, n, "t");
    env.apply(
        n,
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Bucket\nmetadata:\n  name: big\nspec:\n  tenantRef:\n    name: t\n",
    )
    .unwrap();
    let big = wait_for(
        &env,
        n,
        "s3bucket/big",
        "Ready",
        Duration::from_secs(60),
        |b| condition_is(b, "Ready", "True"),
    );
    let bucket = big["status"]["bucketName"].as_str().unwrap().to_string();
    let keys = secret_data(&env, n, "big-credentials").unwrap();
    let s3 = client_for(&keys);
    put_objects(&s3, &bucket, "o", 2000).await;
    env.kubectl(&[
        "annotate",
        "-n",
        n,
        "s3bucket/big",
        "keeper.dev/drain=cut-off",
    ])
    .unwrap();
    wait_until(Duration::from_secs(60), "the drain to delete", || {
        Ok(count_now(&s3, &bucket) < 2000)
    })
    .unwrap();

    proxy.set_faults(
        keeper_e2e_apiproxy::Settings::from_json(serde_json::json!({
            "seed": 1,
            "rules": [{"share": 1.0, "codes": [503], "closeWatchAfterSeconds": 1}]
        }))
        .unwrap(),
    );
    // The lease is renewed every 10 s and lasts 15: within ~20 s keeper gives it up.
    wait_until(Duration::from_secs(40), "keeper to step down", || {
        Ok(metric(&keeper, "keeper_leader ") == 0.0)
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", keeper.log_text()));
    assert!(
        keeper.log_text().contains("stepping down"),
        "{}",
        keeper.log_text()
    );
    // A drain round under way when it stepped down stops at once; a batch already sent may
    // still complete on the store. After that no object may go.
    std::thread::sleep(Duration::from_secs(6));
    let after = count_objects(&s3, &bucket)
        .await
        .expect("the bucket exists");
    assert!(after > 0, "the drain finished before the cut took effect");
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(
        count_objects(&s3, &bucket).await,
        Some(after),
        "objects were deleted after keeper stepped down"
    );

    // The API answers again: keeper leads again and the drain finishes.
    proxy.clear_faults();
    wait_until(Duration::from_secs(60), "keeper to lead again", || {
        Ok(metric(&keeper, "keeper_leader ") == 1.0)
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", keeper.log_text()));
    wait_for(
        &env,
        n,
        "s3bucket/big",
        "drained",
        Duration::from_secs(240),
        |b| b["status"]["objectCount"] == 0 && b["status"]["drainStatus"].is_null(),
    );
}

/// The objects in `bucket` (which must exist), from the synchronous polling helpers.
fn count_now(s3: &aws_sdk_s3::Client, bucket: &str) -> usize {
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(count_objects(s3, bucket))
    })
    .expect("the bucket exists")
}
