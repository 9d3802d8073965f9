//! Two keeper replicas with leader election (issue 13): only the leader reconciles, the standby
//! is ready and keeps its caches warm, and a SIGKILL of the leader hands over within ~20 s.

use std::time::{Duration, Instant};

use keeper_e2e_scenarios::{Env, Keeper, condition_is, http_get, jitter, wait_for, wait_until};

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
