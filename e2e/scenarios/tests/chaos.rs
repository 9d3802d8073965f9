//! `make chaos` (issue 14): rounds of objects of every kind created, written to, drained and
//! deleted while something goes wrong; after each round nothing is left behind on a backend,
//! nothing was created twice, no object that was not asked to drain lost an object, no finalizer
//! is stuck, another controller's finalizer is untouched, and at the end no secret keeper issued
//! appears in a log, an event, a status or the metrics. Three scenarios, each printing a summary:
//!
//! - crash: keeper is SIGKILLed at random moments;
//! - two managers: two keepers with leader election off reconcile the same objects, each killed
//!   at random: nothing may be created twice;
//! - faults: errors, throttling and cut watches in keeper's requests to the API and every backend
//!   (see [`faults`]): every object converges, the backoff shows in the metrics, the request
//!   rates stay bounded;
//! - kills and faults (issue 26, item 9): keeper SIGKILLed every 1-4 s while 20% of its API
//!   requests and 15% of its backend requests fail: every object must still be Ready within the
//!   round's bound (buckets were left `TenantNotReady` behind Ready tenants).
//!
//! Sizes come from the environment so that each scenario serves both forms: the short form (the
//! defaults, part of `make e2e`) and the long form (`make chaos`).
//!   KEEPER_CHAOS_OBJECTS       objects of all kinds per round (default 24; two managers: 16)
//!   KEEPER_CHAOS_KILL_MS       `MIN-MAX` milliseconds between kills (default 1500-5000; two
//!                              managers: 3000-8000)
//!   KEEPER_CHAOS_MIN_KILLS     kills a run must reach before it may end (default 8; two
//!                              managers: 4)
//!   KEEPER_CHAOS_MANAGERS      keepers side by side in the crash scenario (default 1)
//!   KEEPER_CHAOS_FAULT_ROUNDS  rounds of the faults scenario (default 1)
//!   KEEPER_CHAOS_API_FAULTS    percent of keeper's API requests refused in the crash scenarios
//!                              (default 0; kills and faults: 20)
//!   KEEPER_CHAOS_BACKEND_FAULTS  percent of keeper's backend requests failed in the crash
//!                              scenarios (default 0; kills and faults: 15)

#[path = "chaos/faults.rs"]
mod faults;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keeper_e2e_scenarios::{
    Env, Keeper, accounts_of, client_for, condition_is, count_objects, iam_users_of, jitter,
    put_objects, rds_client, secret_data, wait_until,
};

use faults::{Faults, Sampler, Shares, assert_bounded, longest_observed, metric_sum};
use keeper_e2e_scenarios::ApiProxy;
use serde_json::Value;

const FOREIGN_FINALIZER: &str = "example.com/audit-hold";
const OBJECTS_PER_FILLED_BUCKET: usize = 25;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One object of the run and what the run did to it.
#[derive(Clone, Debug)]
struct Planned {
    kind: &'static str,
    name: String,
    manifest: String,
    /// Buckets: objects put into it; the bucket is drained before deletion unless `retain`.
    filled: bool,
    /// Bucket released without deleting the bucket (its objects must all still be there).
    retain: bool,
    /// Carries another controller's finalizer, which must survive keeper's cleanup.
    foreign: bool,
}

fn plan(objects: usize) -> Vec<Planned> {
    // A quarter tenants, half buckets, a quarter databases.
    let tenants = (objects / 4).max(2);
    let databases = (objects / 4).max(1);
    let buckets = objects.saturating_sub(tenants + databases).max(2);
    let mut out = Vec::new();
    for t in 0..tenants {
        let provider = if t % 2 == 0 { "default" } else { "s3" };
        out.push(Planned {
            kind: "S3Tenant",
            name: format!("t{t}"),
            manifest: format!("  provider: {provider}\n"),
            filled: false,
            retain: false,
            foreign: t == 0,
        });
    }
    for b in 0..buckets {
        // Retain only on provider `s3`: a StorageGRID account cannot be deleted around a
        // retained bucket, so such a tenant waits by design.
        let retain = b % 5 == 3 && (b % tenants) % 2 == 1;
        out.push(Planned {
            kind: "S3Bucket",
            name: format!("b{b}"),
            manifest: format!(
                "  tenantRef:\n    name: t{}\n  deletionPolicy: {}\n  drain:\n    pollInterval: 1s\n",
                b % tenants,
                if retain { "Retain" } else { "Delete" }
            ),
            filled: b % 2 == 1 || retain,
            retain,
            foreign: b == 0,
        });
    }
    for d in 0..databases {
        out.push(Planned {
            kind: "CloudDatabase",
            name: format!("db{d}"),
            manifest:
                "  engine: postgres\n  size: small\n  databaseName: app\n  deletionPolicy: Delete\n"
                    .into(),
            filled: false,
            retain: false,
            foreign: d == 0,
        });
    }
    out
}

fn manifest(p: &Planned) -> String {
    let finalizers = if p.foreign {
        format!("  finalizers: [{FOREIGN_FINALIZER}]\n")
    } else {
        String::new()
    };
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: {}\nmetadata:\n  name: {}\n{finalizers}spec:\n{}",
        p.kind, p.name, p.manifest
    )
}

fn resource(p: &Planned) -> String {
    format!("{}/{}", p.kind.to_lowercase(), p.name)
}

/// Restarts keeper at random moments: starts it, lets it run for a random span, SIGKILLs it.
struct Monkey {
    stop: Arc<AtomicBool>,
    kills: Arc<AtomicUsize>,
    logs: Arc<Mutex<Vec<std::path::PathBuf>>>,
    handles: Vec<std::thread::JoinHandle<Option<Keeper>>>,
}

impl Monkey {
    /// `managers` keeper processes side by side (leader election off: each one reconciles
    /// everything), each killed and restarted on its own random schedule; started `through` an
    /// API fault proxy when there is one.
    fn start(
        env: &Env,
        managers: usize,
        min_ms: u64,
        max_ms: u64,
        through: Option<Arc<ApiProxy>>,
    ) -> Monkey {
        let stop = Arc::new(AtomicBool::new(false));
        let kills = Arc::new(AtomicUsize::new(0));
        let logs = Arc::new(Mutex::new(Vec::new()));
        let handles = (0..managers)
            .map(|_| {
                let (env, s, k, l) = (env.clone(), stop.clone(), kills.clone(), logs.clone());
                let through = through.clone();
                std::thread::spawn(move || {
                    loop {
                        let keeper = match &through {
                            Some(proxy) => Keeper::start_through(&env, proxy),
                            None => Keeper::start(&env),
                        }
                        .expect("keeper starts after a kill");
                        l.lock().unwrap().push(keeper.log.clone());
                        let span = Duration::from_millis(min_ms) + jitter(max_ms - min_ms + 1);
                        let until = Instant::now() + span;
                        while Instant::now() < until && !s.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        if s.load(Ordering::SeqCst) {
                            // The last keeper runs on, to finish what the run waits for.
                            return Some(keeper);
                        }
                        keeper.kill();
                        k.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        Monkey {
            stop,
            kills,
            logs,
            handles,
        }
    }

    /// Stops killing; returns the keepers left running.
    fn calm(&mut self) -> Vec<Keeper> {
        self.stop()
            .into_iter()
            .map(|h| h.expect("monkey thread").expect("a keeper left running"))
            .collect()
    }

    /// Stops the threads; each hands back the keeper it was running (or why it could not).
    fn stop(&mut self) -> Vec<std::thread::Result<Option<Keeper>>> {
        self.stop.store(true, Ordering::SeqCst);
        self.handles.drain(..).map(|h| h.join()).collect()
    }
}

/// A run that fails stops its keepers too: each thread hands back the keeper it runs, which is
/// killed when dropped (a keeper left running would outlive the run's stack).
impl Drop for Monkey {
    fn drop(&mut self) {
        self.stop();
    }
}

fn all_of<'a>(planned: &'a [Planned], kind: &str) -> impl Iterator<Item = &'a Planned> {
    planned.iter().filter(move |p| p.kind == kind)
}

/// keeper's IAM users of `bucket` (provider `s3`), each with how many access keys it has.
async fn iam_users_and_keys(iam: &aws_sdk_iam::Client, bucket: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for user in iam_users_of(iam, bucket).await {
        let keys = iam
            .list_access_keys()
            .user_name(&user)
            .send()
            .await
            .expect("list access keys");
        out.push((user, keys.access_key_metadata().len()));
    }
    out
}

async fn rds_instances_of(env: &Env, uid: &str) -> Vec<String> {
    let rds = rds_client(env).await;
    let out = rds.describe_db_instances().send().await.expect("describe");
    out.db_instances()
        .iter()
        .filter(|i| {
            i.tag_list()
                .iter()
                .any(|t| t.key() == Some("keeper.dev/owner-uid") && t.value() == Some(uid))
        })
        .filter_map(|i| i.db_instance_identifier().map(str::to_string))
        .collect()
}

/// The local control plane, which every chaos scenario inspects; `None` elsewhere (see
/// [`keeper_e2e_scenarios::skip`]).
fn local_env() -> Option<Env> {
    let env = Env::from_env().unwrap();
    if env.storagegrid_url.is_none() {
        keeper_e2e_scenarios::skip(
            "chaos needs the local control plane (it inspects the backends)",
        );
        return None;
    }
    Some(env)
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_chaos_converges_with_nothing_orphaned_duplicated_or_leaked() {
    let Some(env) = local_env() else { return };
    chaos(
        &env,
        Settings::from_env(Settings {
            kind: "crash",
            objects: 24,
            managers: env_or("KEEPER_CHAOS_MANAGERS", 1),
            min_ms: 1500,
            max_ms: 5000,
            min_kills: 8,
            faults: Shares::NONE,
        }),
    )
    .await;
}

/// Issue 26, item 9: with keeper SIGKILLed every few seconds while a share of its API and
/// backend requests failed, buckets stayed `Pending` with `Ready=False/TenantNotReady` behind
/// Ready tenants for minutes. Kills every 1-4 s, 20% of keeper's API requests and 15% of its
/// backend requests failing (watches cut every 15 s): every object of every round must be Ready
/// within the round's bound, and everything else the crash scenario checks holds.
#[tokio::test(flavor = "multi_thread")]
async fn kills_and_faults_chaos_every_object_ready_within_minutes() {
    let Some(env) = local_env() else { return };
    chaos(
        &env,
        Settings::from_env(Settings {
            kind: "killfault",
            objects: 24,
            managers: 1,
            min_ms: 1000,
            max_ms: 4000,
            min_kills: 8,
            faults: Shares::ISSUE_26_ITEM_9,
        }),
    )
    .await;
}

/// Two keepers with leader election switched off reconcile the same objects at once (a
/// misconfigured install, or a standby that wrongly thinks it leads): idempotency alone must keep
/// every backend resource single. Both are killed at random too.
#[tokio::test(flavor = "multi_thread")]
async fn two_managers_without_leader_election_create_nothing_twice() {
    let Some(env) = local_env() else { return };
    chaos(
        &env,
        Settings::from_env(Settings {
            kind: "managers",
            objects: 16,
            managers: 2,
            min_ms: 3000,
            max_ms: 8000,
            min_kills: 4,
            faults: Shares::NONE,
        }),
    )
    .await;
}

/// Issue 14's faults: 10% of keeper's API requests refused (409/500 on writes, 500 otherwise)
/// and its watches cut every 15 s, 20% of its StorageGRID, S3, IAM and RDS requests failed or
/// throttled (see [`faults`]), while rounds of objects are created, filled, drained and deleted
/// by one keeper. Every object must converge with nothing orphaned or duplicated (the rounds'
/// checks, which see the backends past the faults), the backoff must show in keeper's metrics,
/// and keeper's request rates must stay bounded: no hot loop.
#[tokio::test(flavor = "multi_thread")]
async fn fault_chaos_converges_with_backoff_and_no_hot_loop() {
    let Some(env) = local_env() else { return };
    let objects = env_or("KEEPER_CHAOS_OBJECTS", 24);
    let rounds_wanted = env_or("KEEPER_CHAOS_FAULT_ROUNDS", 1);
    let started = Instant::now();
    // On before keeper starts, so that its watches are cut too (a watch is cut only if it
    // started while the rule was there).
    let mut faults = Faults::inject(&env, Shares::from_env(Shares::ISSUE_14)).unwrap();
    let keeper = Keeper::start_through(&env, faults.api()).expect("keeper starts");
    // The scenario's own S3, IAM and RDS requests go to moto itself: the faults are keeper's.
    let checks = env.past_the_aws_proxy().unwrap();
    let sampler = Sampler::start(&env, &keeper.metrics_url).unwrap();
    let mut rounds = Vec::new();
    for r in 0..rounds_wanted {
        rounds.push(round(&checks, "faults", r, objects, 1).await);
    }
    let injected = faults.injected().unwrap();
    faults.off().unwrap();
    let rates = sampler.rates().unwrap();
    let (_, metrics) = keeper_e2e_scenarios::http_get(&format!("{}/metrics", keeper.metrics_url))
        .expect("keeper's metrics");
    let log = keeper.log.clone();
    drop(keeper);

    // What keeper's metrics show: calls that failed for good after the clients' own resends,
    // reconciles that failed, and how long their retries waited (the backoff).
    let sum = |name: &str, labels: &[(&str, &str)]| metric_sum(&metrics, name, labels);
    let failed_calls: Vec<String> = ["storagegrid", "s3", "iam", "rds"]
        .into_iter()
        .map(|b| {
            let n = sum(
                "keeper_backend_requests_total",
                &[("backend", b), ("outcome", "transient")],
            );
            format!("{b} {n}")
        })
        .collect();
    let errors = sum("keeper_reconcile_errors_total", &[]);
    let retries = sum("keeper_reconcile_retry_delay_seconds_count", &[]);
    let waited = sum("keeper_reconcile_retry_delay_seconds_sum", &[]);
    let longest = longest_observed(&metrics, "keeper_reconcile_retry_delay_seconds");
    let mut rows = vec![
        (
            "keeper's API requests refused (409/500) / watches cut",
            format!(
                "{} of {} / {}",
                injected.api_refused, injected.api_requests, injected.watches_cut
            ),
        ),
        (
            "keeper's StorageGRID requests refused (503/429)",
            injected.grid_refused.to_string(),
        ),
        (
            "keeper's AWS requests faulted",
            injected
                .aws
                .iter()
                .map(|(service, (matched, faulted))| format!("{service} {faulted} of {matched}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            "calls failed after the clients' resends (keeper_backend_requests_total)",
            failed_calls.join(", "),
        ),
        (
            "failed reconciles, retried after (keeper_reconcile_retry_delay_seconds): mean / longest",
            format!(
                "{errors}: {:.1} s / {} s",
                if retries > 0.0 { waited / retries } else { 0.0 },
                longest.unwrap_or_default()
            ),
        ),
        (
            "busiest object (keeper's API requests in 5 s)",
            format!("{} ({})", rates.busiest_object.0, rates.busiest_object.1),
        ),
    ];
    let handled = (objects * rounds_wanted) as f64;
    for (target, (peak, average)) in &rates.per_second {
        rows.push((
            "keeper's requests: per second at the peak (5 s) / on average / per object",
            format!(
                "{target}: {peak:.1} / {average:.1} / {:.1}",
                rates.total[target] / handled
            ),
        ));
    }
    conclude("faults", &rounds, &[log], metrics.clone(), rows, started);

    assert!(
        injected.api_refused > 0,
        "no API request of keeper's refused"
    );
    assert!(injected.watches_cut > 0, "no watch of keeper's was cut");
    assert!(injected.grid_refused > 0, "no StorageGRID request refused");
    for (service, (_, faulted)) in &injected.aws {
        assert!(*faulted > 0, "no {service} request of keeper's faulted");
    }
    // Every reconcile that failed was retried through the object's backoff, which the histogram
    // shows (keeper_reconcile_errors_total counts exactly the failures that back off).
    assert!(
        errors > 0.0,
        "no reconcile failed: the faults did not reach keeper"
    );
    assert_eq!(
        retries, errors,
        "every failed reconcile waits out its backoff"
    );
    assert_bounded(&rates, objects * rounds_wanted);
}

/// A crash run: `objects` per round, `managers` keepers, each killed every `min_ms`..`max_ms`,
/// rounds until `min_kills` kills; `faults` of keeper's requests failing meanwhile.
struct Settings {
    /// Names the rounds' namespaces (`e2e-<kind><round>-...`).
    kind: &'static str,
    objects: usize,
    managers: usize,
    min_ms: u64,
    max_ms: u64,
    min_kills: usize,
    faults: Shares,
}

impl Settings {
    /// `defaults`, with the sizes the environment sets (the long form: see the module
    /// documentation).
    fn from_env(defaults: Settings) -> Settings {
        let (min_ms, max_ms) = std::env::var("KEEPER_CHAOS_KILL_MS")
            .ok()
            .and_then(|v| {
                let (a, b) = v.split_once('-')?;
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .unwrap_or((defaults.min_ms, defaults.max_ms));
        Settings {
            objects: env_or("KEEPER_CHAOS_OBJECTS", defaults.objects),
            min_kills: env_or("KEEPER_CHAOS_MIN_KILLS", defaults.min_kills),
            faults: Shares::from_env(defaults.faults),
            min_ms,
            max_ms,
            ..defaults
        }
    }
}

async fn chaos(env: &Env, settings: Settings) {
    let Settings {
        kind,
        objects,
        managers,
        min_ms,
        max_ms,
        min_kills,
        faults: shares,
    } = settings;
    let started = Instant::now();
    // On before the first keeper starts, so that its watches are cut too; the scenario's own S3,
    // IAM and RDS requests then go to moto itself.
    let mut faults = shares
        .any()
        .then(|| Faults::inject(env, shares).expect("faults on"));
    let checks = match &faults {
        Some(_) => env.past_the_aws_proxy().unwrap(),
        None => env.clone(),
    };
    let mut monkey = Monkey::start(
        env,
        managers,
        min_ms,
        max_ms,
        faults.as_ref().map(|f| f.api().clone()),
    );
    // Rounds until the kills reach their minimum: each round is the whole life of every object.
    let mut rounds = Vec::new();
    while rounds.is_empty() || monkey.kills.load(Ordering::SeqCst) < min_kills {
        rounds.push(round(&checks, kind, rounds.len(), objects, managers).await);
    }
    let keepers = monkey.calm();
    let kills = monkey.kills.load(Ordering::SeqCst);
    let mut rows = vec![
        (
            "keepers side by side (leader election off)",
            managers.to_string(),
        ),
        ("SIGKILLs", kills.to_string()),
    ];
    if let Some(faults) = faults.as_mut() {
        let injected = faults.injected().unwrap();
        faults.off().unwrap();
        rows.push((
            "keeper's API requests refused / watches cut",
            format!(
                "{} of {} ({:.0}%) / {}",
                injected.api_refused,
                injected.api_requests,
                100.0 * shares.api,
                injected.watches_cut
            ),
        ));
        rows.push((
            "keeper's backend requests faulted",
            format!(
                "storagegrid {}, {} ({:.0}%)",
                injected.grid_refused,
                injected
                    .aws
                    .iter()
                    .map(|(service, (matched, faulted))| format!(
                        "{service} {faulted} of {matched}"
                    ))
                    .collect::<Vec<_>>()
                    .join(", "),
                100.0 * shares.backend
            ),
        ));
    }
    // The metrics of the last keepers, then the logs of all of them.
    let metrics: String = keepers
        .iter()
        .filter_map(|k| keeper_e2e_scenarios::http_get(&format!("{}/metrics", k.metrics_url)))
        .map(|(_, body)| body)
        .collect();
    drop(keepers);
    let logs = monkey.logs.lock().unwrap().clone();
    conclude(kind, &rounds, &logs, metrics, rows, started);
}

/// The end of every chaos run: every password and secret key issued, searched for in the
/// keepers' logs, the metrics and the rounds' statuses and events; the summary table (the
/// rounds' figures, then the scenario's own `rows`); and no orphan, no leak.
fn conclude(
    kind: &str,
    rounds: &[Round],
    logs: &[std::path::PathBuf],
    metrics: String,
    rows: Vec<(&str, String)>,
    started: Instant,
) {
    let mut haystacks = vec![("metrics".to_string(), metrics)];
    for log in logs {
        haystacks.push((
            log.display().to_string(),
            std::fs::read_to_string(log).unwrap_or_default(),
        ));
    }
    for (i, r) in rounds.iter().enumerate() {
        haystacks.push((format!("round {i} statuses"), r.statuses.clone()));
        haystacks.push((format!("round {i} events"), r.events.clone()));
    }
    let secrets: BTreeSet<&String> = rounds.iter().flat_map(|r| &r.secrets).collect();
    let leaks: Vec<String> = haystacks
        .iter()
        .flat_map(|(place, text)| {
            secrets
                .iter()
                .filter(|s| text.contains(s.as_str()))
                .map(move |_| place.clone())
        })
        .collect();
    let orphans: Vec<&String> = rounds.iter().flat_map(|r| &r.orphans).collect();
    let max = |f: fn(&Round) -> Duration| rounds.iter().map(f).max().unwrap_or_default();

    println!("\nchaos summary ({kind})");
    println!("| figure | value |\n|---|---|");
    let figures = [
        (
            "rounds x objects",
            format!("{} x {}", rounds.len(), rounds[0].objects),
        ),
        (
            "all Ready after (slowest round)",
            format!("{:?}", max(|r| r.ready_at)),
        ),
        (
            "buckets released after (slowest round)",
            format!("{:?}", max(|r| r.buckets_gone_at)),
        ),
        (
            "the rest released after (slowest round)",
            format!("{:?}", max(|r| r.all_gone_at)),
        ),
        ("orphaned backend resources", orphans.len().to_string()),
        ("secrets searched for", secrets.len().to_string()),
        ("secret leaks", leaks.len().to_string()),
    ];
    for (k, v) in figures
        .into_iter()
        .chain(rows)
        .chain([("run", format!("{:?}", started.elapsed()))])
    {
        println!("| {k} | {v} |");
    }
    assert!(orphans.is_empty(), "orphans: {orphans:#?}");
    assert!(leaks.is_empty(), "secrets found in: {leaks:?}");
}

/// What one round saw.
struct Round {
    objects: usize,
    ready_at: Duration,
    buckets_gone_at: Duration,
    all_gone_at: Duration,
    orphans: Vec<String>,
    secrets: BTreeSet<String>,
    statuses: String,
    events: String,
}

/// How long a bucket's user may carry a second key once every object is Ready, with more than
/// one keeper: a writer whose publication lost deletes its key right after, and a writer killed
/// in between leaves it to the first look of the next keeper process (which lists each bucket
/// user's keys once); the killed keeper starts again at once. With one keeper there is no such
/// window: an interrupted issuance keeps the bucket from Ready until its key is gone.
const SECOND_KEY_GOES_WITHIN: Duration = Duration::from_secs(30);

/// One round in a namespace of its own (`e2e-<kind><round>-...`): `objects` objects applied,
/// Ready, filled, drained and deleted by `managers` keepers, then the backends checked (through
/// `env`'s endpoints).
async fn round(env: &Env, kind: &str, round: usize, objects: usize, managers: usize) -> Round {
    let env = env.clone();
    let ns = env.namespace(&format!("e2e-{kind}{round}")).unwrap();
    let planned = plan(objects);
    let generous = Duration::from_secs(120 + 3 * objects as u64);

    // 1. Everything applied at once, as a GitOps sync would.
    let all: Vec<String> = planned.iter().map(manifest).collect();
    env.apply(&ns.name, &all.join("---\n")).unwrap();
    let ready_at = wait_all(&env, &ns.name, &planned, generous, "Ready", |o| {
        condition_is(o, "Ready", "True")
    });

    // 2. Identity: exactly one backend resource per object; every secret keeper issued.
    let mut uids = BTreeMap::new();
    let mut bucket_names = BTreeMap::new();
    let iam = keeper_e2e_scenarios::iam_client(&env).await;
    for p in &planned {
        let obj = env.get_json(&ns.name, &resource(p)).unwrap().unwrap();
        let uid = obj["metadata"]["uid"].as_str().unwrap().to_string();
        match p.kind {
            "S3Tenant" if p.manifest.contains("default") => {
                assert_eq!(
                    accounts_of(&env, &uid).len(),
                    1,
                    "one grid account for {}",
                    p.name
                );
            }
            "S3Bucket" => {
                let bucket = obj["status"]["bucketName"].as_str().unwrap().to_string();
                bucket_names.insert(p.name.clone(), bucket);
            }
            "CloudDatabase" => {
                let instances = rds_instances_of(&env, &uid).await;
                assert_eq!(instances.len(), 1, "one RDS instance for {}", p.name);
            }
            _ => {}
        }
        uids.insert(p.name.clone(), uid);
    }
    let secrets = issued_secrets(&env, &ns.name);
    let statuses = env
        .kubectl(&[
            "get",
            "s3tenants,s3buckets,clouddatabases",
            "-n",
            &ns.name,
            "-o",
            "json",
        ])
        .unwrap();
    for p in all_of(&planned, "S3Bucket") {
        if tenant_provider(&planned, p) == "s3" {
            let bucket = &bucket_names[&p.name];
            let mut users = iam_users_and_keys(&iam, bucket).await;
            if managers > 1 {
                let deadline = Instant::now() + SECOND_KEY_GOES_WITHIN;
                while users.iter().any(|(_, keys)| *keys > 1) && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    users = iam_users_and_keys(&iam, bucket).await;
                }
            }
            assert_eq!(
                users.len(),
                1,
                "one IAM user for bucket {}: {users:?}",
                p.name
            );
            assert_eq!(
                users[0].1, 1,
                "one access key for bucket {}: {users:?}",
                p.name
            );
        }
    }

    // 3. Written to, then drained and deleted, while the kills go on.
    let mut filled_counts = BTreeMap::new();
    for p in all_of(&planned, "S3Bucket").filter(|p| p.filled) {
        let mut creds = secret_data(&env, &ns.name, &format!("{}-credentials", p.name)).unwrap();
        // The bucket's keys, where this run reaches provider `s3` (moto itself when keeper's
        // requests to the proxy are faulted).
        if let Some(endpoint) = env
            .s3_endpoint
            .clone()
            .filter(|_| tenant_provider(&planned, p) == "s3")
        {
            creds.insert("endpoint".into(), endpoint);
        }
        let s3 = client_for(&creds);
        put_objects(
            &s3,
            &bucket_names[&p.name],
            "chaos",
            OBJECTS_PER_FILLED_BUCKET,
        )
        .await;
        filled_counts.insert(p.name.clone(), OBJECTS_PER_FILLED_BUCKET);
    }
    for p in all_of(&planned, "S3Bucket").filter(|p| p.filled && !p.retain) {
        env.kubectl(&[
            "annotate",
            "--overwrite",
            "-n",
            &ns.name,
            &resource(p),
            "keeper.dev/drain=chaos-1",
        ])
        .unwrap();
    }
    let buckets: Vec<String> = all_of(&planned, "S3Bucket").map(resource).collect();
    let mut args = vec!["delete", "--wait=false", "-n", &ns.name];
    args.extend(buckets.iter().map(String::as_str));
    env.kubectl(&args).unwrap();
    let buckets_gone_at = wait_released(&env, &ns.name, &planned, "S3Bucket", generous);
    let rest: Vec<String> = planned
        .iter()
        .filter(|p| p.kind != "S3Bucket")
        .map(resource)
        .collect();
    let mut args = vec!["delete", "--wait=false", "-n", &ns.name];
    args.extend(rest.iter().map(String::as_str));
    env.kubectl(&args).unwrap();
    let all_gone_at = wait_released(&env, &ns.name, &planned, "", generous);

    // 4. Nothing left behind, nothing lost, nothing leaked.
    let mut orphans = Vec::new();
    let admin = keeper_e2e_scenarios::tenant_wide_credentials(&env, &ns.name, "", "s3").unwrap();
    let admin_s3 = client_for(&admin);
    for p in &planned {
        let uid = &uids[&p.name];
        match p.kind {
            "S3Tenant" => {
                let accounts = accounts_of(&env, uid);
                if !accounts.is_empty() {
                    orphans.push(format!("grid account of tenant {}", p.name));
                }
            }
            "CloudDatabase" => {
                for id in rds_instances_of(&env, uid).await {
                    orphans.push(format!("RDS instance {id} of {}", p.name));
                }
            }
            _ => {
                let bucket = &bucket_names[&p.name];
                let s3_provider = tenant_provider(&planned, p) == "s3";
                let users = if s3_provider {
                    iam_users_and_keys(&iam, bucket).await
                } else {
                    Vec::new()
                };
                if p.retain {
                    // Released as it was: the bucket, every object in it and its key.
                    if s3_provider {
                        let count = count_objects(&admin_s3, bucket).await;
                        assert_eq!(
                            count,
                            Some(filled_counts[&p.name]),
                            "a retained bucket that was never asked to drain keeps every object"
                        );
                        assert_eq!(users.len(), 1, "retained bucket keeps its user");
                        remove_retained(&admin_s3, &iam, bucket, &users[0].0).await;
                    }
                } else {
                    if s3_provider && count_objects(&admin_s3, bucket).await.is_some() {
                        orphans.push(format!("bucket {bucket} of {}", p.name));
                    }
                    for (user, _) in users {
                        orphans.push(format!("IAM user {user} of {}", p.name));
                    }
                }
            }
        }
    }
    let grid = keeper_e2e_scenarios::storagegrid_state(&env).unwrap();
    let grid_buckets: Vec<String> = grid["buckets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["name"].as_str().map(str::to_string))
        .collect();
    for (name, bucket) in &bucket_names {
        if grid_buckets.contains(bucket) && !planned.iter().any(|p| &p.name == name && p.retain) {
            orphans.push(format!("grid bucket {bucket} of {name}"));
        }
    }

    // Another controller's finalizer stays; keeper's is gone.
    for p in planned.iter().filter(|p| p.foreign) {
        let obj = env
            .get_json(&ns.name, &resource(p))
            .unwrap()
            .unwrap_or_else(|| panic!("{} kept by the foreign finalizer", p.name));
        assert_eq!(
            obj["metadata"]["finalizers"],
            serde_json::json!([FOREIGN_FINALIZER]),
            "{}: only the other controller's finalizer is left",
            p.name
        );
        env.kubectl(&[
            "patch",
            "-n",
            &ns.name,
            &resource(p),
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ])
        .unwrap();
    }

    let events = env
        .kubectl(&["get", "events", "-n", &ns.name, "-o", "json"])
        .unwrap();
    assert!(
        secrets.len() >= planned.len() / 2,
        "secrets collected: {}",
        secrets.len()
    );
    Round {
        objects: planned.len(),
        ready_at,
        buckets_gone_at,
        all_gone_at,
        orphans,
        secrets,
        statuses,
        events,
    }
}

/// The passwords and secret keys in the namespace's Secrets (all of them keeper's: ids and
/// endpoints are not secret).
fn issued_secrets(env: &Env, ns: &str) -> BTreeSet<String> {
    let list = env
        .kubectl(&["get", "secrets", "-n", ns, "-o", "name"])
        .unwrap();
    let mut out = BTreeSet::new();
    for name in list.lines().filter_map(|l| l.strip_prefix("secret/")) {
        for (key, value) in secret_data(env, ns, name).unwrap() {
            let key = key.to_lowercase();
            if (key.contains("password") || key.contains("secret")) && value.len() >= 8 {
                out.insert(value);
            }
        }
    }
    out
}

fn tenant_provider<'a>(planned: &'a [Planned], bucket: &Planned) -> &'a str {
    let tenant = bucket
        .manifest
        .split("name: ")
        .nth(1)
        .and_then(|s| s.lines().next())
        .unwrap();
    let t = planned.iter().find(|p| p.name == tenant).unwrap();
    if t.manifest.contains("s3") {
        "s3"
    } else {
        "default"
    }
}

/// Waits until every planned object satisfies `check`; returns how long it took. Fails naming
/// every object that does not, with its phase and conditions.
fn wait_all(
    env: &Env,
    ns: &str,
    planned: &[Planned],
    timeout: Duration,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Duration {
    let start = Instant::now();
    let lagging = || -> anyhow::Result<Vec<String>> {
        let mut out = Vec::new();
        for kind in ["s3tenants", "s3buckets", "clouddatabases"] {
            let list = env.kubectl(&["get", kind, "-n", ns, "-o", "json"])?;
            let list: Value = serde_json::from_str(&list)?;
            let items = list["items"].as_array().cloned().unwrap_or_default();
            for p in planned
                .iter()
                .filter(|p| format!("{}s", p.kind.to_lowercase()) == kind)
            {
                match items
                    .iter()
                    .find(|o| o["metadata"]["name"] == p.name.as_str())
                {
                    None => out.push(format!("{}: missing", resource(p))),
                    Some(o) if !check(o) => out.push(describe(&resource(p), o)),
                    Some(_) => {}
                }
            }
        }
        Ok(out)
    };
    wait_until(timeout, &format!("every object {what}"), || {
        Ok(lagging()?.is_empty())
    })
    .unwrap_or_else(|e| {
        let lagging = lagging().unwrap_or_else(|e| vec![format!("cannot list: {e:#}")]);
        panic!(
            "{e:#}: {} of {} objects are not:\n{}",
            lagging.len(),
            planned.len(),
            lagging.join("\n")
        )
    });
    start.elapsed()
}

/// One object's phase and conditions on a line: `s3bucket/b3: Pending, Ready=False/TenantNotReady
/// (S3Tenant "t3" is not Ready ...) since 2026-...`.
fn describe(name: &str, obj: &Value) -> String {
    let status = &obj["status"];
    let conditions: Vec<String> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}={}/{} ({}) since {}",
                c["type"].as_str().unwrap_or("?"),
                c["status"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("?"),
                c["message"].as_str().unwrap_or(""),
                c["lastTransitionTime"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    format!(
        "{name}: {}, {}",
        status["phase"].as_str().unwrap_or("no phase"),
        if conditions.is_empty() {
            "no conditions".to_string()
        } else {
            conditions.join(", ")
        }
    )
}

/// Waits until keeper has released every planned object of `kind` (all kinds when empty): gone,
/// or left only with the foreign finalizer.
fn wait_released(
    env: &Env,
    ns: &str,
    planned: &[Planned],
    kind: &str,
    timeout: Duration,
) -> Duration {
    let start = Instant::now();
    let watched: Vec<&Planned> = planned
        .iter()
        .filter(|p| kind.is_empty() || p.kind == kind)
        .collect();
    wait_until(timeout, &format!("keeper to release every {kind}"), || {
        for p in &watched {
            if let Some(obj) = env.get_json(ns, &resource(p))? {
                let finalizers = obj["metadata"]["finalizers"].as_array().cloned();
                if finalizers
                    .unwrap_or_default()
                    .iter()
                    .any(|f| f != FOREIGN_FINALIZER)
                {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    })
    .unwrap_or_else(|e| {
        let state = env
            .kubectl(&["describe", "s3tenants,s3buckets,clouddatabases", "-n", ns])
            .unwrap_or_default();
        panic!("{e:#}\n{state}")
    });
    start.elapsed()
}

/// Removes what a Retain bucket left on provider `s3` (the run's own cleanup, after checking it).
async fn remove_retained(
    s3: &aws_sdk_s3::Client,
    iam: &aws_sdk_iam::Client,
    bucket: &str,
    user: &str,
) {
    let list = s3.list_objects_v2().bucket(bucket).send().await.unwrap();
    for o in list.contents() {
        s3.delete_object()
            .bucket(bucket)
            .key(o.key().unwrap())
            .send()
            .await
            .unwrap();
    }
    s3.delete_bucket().bucket(bucket).send().await.unwrap();
    let keys = iam.list_access_keys().user_name(user).send().await.unwrap();
    for k in keys.access_key_metadata() {
        iam.delete_access_key()
            .user_name(user)
            .access_key_id(k.access_key_id().unwrap())
            .send()
            .await
            .unwrap();
    }
    for p in iam
        .list_user_policies()
        .user_name(user)
        .send()
        .await
        .unwrap()
        .policy_names()
    {
        iam.delete_user_policy()
            .user_name(user)
            .policy_name(p)
            .send()
            .await
            .unwrap();
    }
    iam.delete_user().user_name(user).send().await.unwrap();
}
