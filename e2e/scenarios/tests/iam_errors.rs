//! IAM errors that only a person settles, on provider `s3` (a moto that enforces IAM, configured
//! with `iam:`: every bucket has its own IAM user), injected by the AWS proxy as AWS answers them
//! (issue 26, audit 2 N3). keeper used to look again every 5 s, forever, with nothing on the
//! object; now such an error backs off like any other and, from the third attempt in a row, shows
//! as `Synced=False` (`BackendError`, the message naming the IAM code) with one Warning event.
//!
//! - `LimitExceeded` on `CreateUser` (the account's user limit): the bucket is not Ready and says
//!   why, keeper's attempts spread out (read from the proxy's call log), and the bucket becomes
//!   Ready once the limit is lifted.
//! - `DeleteConflict` on `DeleteUser` (something attached to the bucket's user by hand): the
//!   deletion shows the failure and keeps its finalizer, the user stays; once settled, the
//!   deletion completes and the user is gone.

use std::time::Duration;

use keeper_e2e_scenarios::{
    AwsProxyRules, Env, Keeper, condition, condition_is, iam_client, iam_users_of, ready_tenant,
    wait_for, wait_until,
};
use serde_json::{Value, json};

/// The bucket finalizer keeper adds (src/api/names.rs).
const FINALIZER: &str = "keeper.dev/bucket-cleanup";

/// S3Bucket `data` of tenant `t`.
fn bucket(env: &Env, ns: &str) {
    env.apply(
        ns,
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Bucket\nmetadata:\n  name: data\nspec:\n  tenantRef: {name: t}\n",
    )
    .unwrap();
}

/// One IAM action answered with an IAM error code by the AWS proxy until [`IamFault::remove`]
/// (or until dropped, so that a failing scenario leaves no fault to the next).
struct IamFault {
    rules: Option<AwsProxyRules>,
    action: &'static str,
}

impl IamFault {
    /// Every call of `action` answers 409 `code` with `message`, as IAM does; the proxy's call
    /// log starts afresh.
    fn inject(env: &Env, action: &'static str, code: &str, message: &str) -> IamFault {
        let rules = AwsProxyRules::set(
            env,
            json!([{"service": "iam", "actions": [action], "share": 1.0,
                "faults": [{"code": code, "status": 409, "message": message}]}]),
        )
        .unwrap();
        IamFault {
            rules: Some(rules),
            action,
        }
    }

    /// The calls of the action so far: when each arrived (ms since the epoch) and its fault.
    fn calls(&self) -> Vec<(u64, Value)> {
        let rules = self.rules.as_ref().expect("the fault is still set");
        rules
            .calls()
            .unwrap()
            .iter()
            .filter(|c| c["service"] == "iam" && c["action"] == self.action)
            .map(|c| (c["atMs"].as_u64().unwrap(), c["fault"].clone()))
            .collect()
    }

    fn remove(&mut self) {
        self.rules = None;
    }
}

fn warnings(env: &Env, ns: &str) -> Vec<Value> {
    env.events_of(ns, "S3Bucket", "data")
        .unwrap()
        .into_iter()
        .filter(|e| e["type"] == "Warning")
        .collect()
}

/// The one Warning event the bucket got: `BackendError` naming `code`, not repeated.
fn assert_one_warning(env: &Env, ns: &str, code: &str) {
    let events = warnings(env, ns);
    assert_eq!(events.len(), 1, "one Warning event: {events:#?}");
    assert_eq!(events[0]["reason"], "BackendError", "{events:#?}");
    assert!(
        events[0]["message"].as_str().unwrap().contains(code),
        "{events:#?}"
    );
    assert_eq!(
        events[0]["count"].as_i64().unwrap_or(1),
        1,
        "not repeated into a series: {events:#?}"
    );
}

/// The object shows the failure: `Synced=False`, reason `BackendError`, the message naming the
/// IAM call's code.
fn shows_failure(obj: &Value, code: &str) -> bool {
    condition(obj, "Synced").is_some_and(|c| {
        c["status"] == "False"
            && c["reason"] == "BackendError"
            && c["message"].as_str().is_some_and(|m| m.contains(code))
    })
}

/// Waits until the bucket shows the failure (within a minute: the third attempt comes after
/// about 3 s); returns it and when it was seen (ms since the epoch).
fn wait_shown(env: &Env, ns: &str, code: &str) -> (Value, u64) {
    let shown = wait_for(
        env,
        ns,
        "s3bucket/data",
        &format!("Synced=False naming {code}"),
        Duration::from_secs(60),
        |b| shows_failure(b, code),
    );
    (shown, now_ms())
}

/// Calls closer together than this belong to one attempt (one reconcile's calls follow each other
/// within milliseconds; keeper's first retry waits a second).
const SAME_ATTEMPT_MS: u64 = 500;

/// When each of keeper's attempts began: the calls of the fault's action, those less than
/// [`SAME_ATTEMPT_MS`] apart taken as one attempt.
fn attempt_starts(calls: &[(u64, Value)]) -> Vec<u64> {
    let mut starts: Vec<u64> = Vec::new();
    let mut last = None;
    for (at, _) in calls {
        if last.is_none_or(|l| at - l >= SAME_ATTEMPT_MS) {
            starts.push(*at);
        }
        last = Some(*at);
    }
    starts
}

/// Milliseconds since the epoch, as the proxy's call log counts them (same machine, same clock).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Waits until the proxy has seen `count` attempts at the fault's action that began after
/// `since` (ms since the epoch); returns when they began.
///
/// Only attempts after the failure showed are measured: before, the object's creation or
/// deletion still sets off other changes (its tenant counts its buckets) that ask for a reconcile
/// at once, as they should; afterwards nothing but the backoff brings keeper back.
fn attempts(fault: &IamFault, since: u64, count: usize, timeout: Duration) -> Vec<u64> {
    let mut seen = Vec::new();
    wait_until(
        timeout,
        &format!("{count} attempts at {}", fault.action),
        || {
            seen = attempt_starts(&fault.calls());
            seen.retain(|at| *at >= since);
            Ok(seen.len() >= count)
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\nattempts began at {seen:?}"));
    seen
}

/// keeper's attempts spread out: each wait at least about doubles (its backoff: 1 s doubling,
/// spread by up to a quarter), to waits longer than 5 s. Retrying every 5 s, as keeper did
/// before, gives even intervals and fails this.
fn assert_spreading_out(what: &str, starts: &[u64]) {
    let intervals: Vec<u64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!("{what}: attempts began at {starts:?}, intervals (ms) {intervals:?}");
    assert!(
        intervals.windows(2).all(|w| w[1] * 10 >= w[0] * 13),
        "{what}: each interval longer than the one before: {intervals:?}"
    );
    assert!(
        *intervals.last().unwrap() > 6_000,
        "{what}: waits longer than 5 s: {intervals:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn iam_limit_exceeded_shows_on_the_bucket_retries_spread_out_and_it_heals_once_lifted() {
    let env = Env::from_env().unwrap();
    let iam = iam_client(&env.past_the_aws_proxy().unwrap()).await;
    let _keeper = Keeper::start(&env).unwrap();
    let ns = env.namespace("e2e-iam-limit").unwrap();
    ready_tenant(&env, &ns.name, "t", "s3");

    let mut fault = IamFault::inject(
        &env,
        "CreateUser",
        "LimitExceeded",
        "Cannot exceed quota for UsersPerAccount: 5000",
    );
    bucket(&env, &ns.name);
    let (shown, shown_at) = wait_shown(&env, &ns.name, "LimitExceeded");
    let ready = condition(&shown, "Ready").expect("a Ready condition");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&Value::from("False"), &Value::from("BackendError")),
        "{shown:#}"
    );
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("Cannot exceed quota for UsersPerAccount"),
        "IAM's own words: {shown:#}"
    );

    // keeper goes on trying, further and further apart.
    let starts = attempts(&fault, shown_at, 3, Duration::from_secs(90));
    assert_spreading_out("CreateUser", &starts);
    // Shown once: the repeats wrote no further event.
    assert_one_warning(&env, &ns.name, "LimitExceeded");
    let bucket_name =
        env.get_json(&ns.name, "s3bucket/data").unwrap().unwrap()["status"]["bucketName"]
            .as_str()
            .expect("the bucket's name is recorded although its IAM setup fails")
            .to_string();
    assert_eq!(
        iam_users_of(&iam, &bucket_name).await,
        Vec::<String>::new(),
        "no user was created"
    );

    // The limit lifted (a user deleted, a quota raised): the next attempt succeeds.
    fault.remove();
    let healed = wait_for(
        &env,
        &ns.name,
        "s3bucket/data",
        "Ready once the limit is lifted",
        Duration::from_secs(120),
        |b| condition_is(b, "Ready", "True"),
    );
    let synced = condition(&healed, "Synced").unwrap();
    assert_eq!(
        (&synced["status"], &synced["reason"]),
        (&Value::from("True"), &Value::from("ReconcileSuccess")),
        "{healed:#}"
    );
    assert_eq!(iam_users_of(&iam, &bucket_name).await.len(), 1);
    assert_one_warning(&env, &ns.name, "LimitExceeded");

    env.kubectl(&["delete", "-n", &ns.name, "s3bucket/data", "--timeout=90s"])
        .unwrap();
    assert_eq!(iam_users_of(&iam, &bucket_name).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn iam_delete_conflict_holds_the_buckets_deletion_visibly_until_settled() {
    let env = Env::from_env().unwrap();
    let iam = iam_client(&env.past_the_aws_proxy().unwrap()).await;
    let _keeper = Keeper::start(&env).unwrap();
    let ns = env.namespace("e2e-iam-conflict").unwrap();
    ready_tenant(&env, &ns.name, "t", "s3");
    bucket(&env, &ns.name);
    let ready = wait_for(
        &env,
        &ns.name,
        "s3bucket/data",
        "Ready",
        Duration::from_secs(90),
        |b| condition_is(b, "Ready", "True"),
    );
    let bucket_name = ready["status"]["bucketName"].as_str().unwrap().to_string();
    let users = iam_users_of(&iam, &bucket_name).await;
    assert_eq!(users.len(), 1, "{users:?}");

    let mut fault = IamFault::inject(
        &env,
        "DeleteUser",
        "DeleteConflict",
        "Cannot delete entity, must detach all policies first.",
    );
    env.kubectl(&["delete", "-n", &ns.name, "s3bucket/data", "--wait=false"])
        .unwrap();
    let (shown, shown_at) = wait_shown(&env, &ns.name, "DeleteConflict");
    assert!(shown["metadata"]["deletionTimestamp"].is_string());
    assert_one_warning(&env, &ns.name, "DeleteConflict");

    // keeper goes on trying, further and further apart, and nothing is let go meanwhile: the
    // object keeps its finalizer, the user its existence, every DeleteUser was refused.
    let starts = attempts(&fault, shown_at, 3, Duration::from_secs(90));
    assert_spreading_out("DeleteUser", &starts);
    let held = env.get_json(&ns.name, "s3bucket/data").unwrap().unwrap();
    assert!(
        held["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER)),
        "{held:#}"
    );
    assert!(shows_failure(&held, "DeleteConflict"), "{held:#}");
    assert_one_warning(&env, &ns.name, "DeleteConflict");
    assert_eq!(iam_users_of(&iam, &bucket_name).await, users);
    assert!(
        fault
            .calls()
            .iter()
            .all(|(_, f)| f == &Value::from("DeleteConflict")),
        "{:?}",
        fault.calls()
    );

    // Settled (what was attached detached): the deletion completes and the user is gone.
    fault.remove();
    wait_for(
        &env,
        &ns.name,
        "s3bucket/data",
        "gone",
        Duration::from_secs(120),
        |b| b.is_null(),
    );
    assert_eq!(iam_users_of(&iam, &bucket_name).await, Vec::<String>::new());
}
