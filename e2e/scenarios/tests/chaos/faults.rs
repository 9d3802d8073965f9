//! The faults part of `make chaos`: errors, throttling and cut watches injected into keeper's
//! requests only, and the request rates keeper kept meanwhile. The API's faults come from an API
//! fault proxy that only keeper's connections go through (the scenario's kubectl talks to
//! kube-apiserver itself); StorageGRID's match its management API, which only keeper calls (the
//! scenario reads `/debug/state` and writes objects through the S3 listener); the AWS proxy's match
//! S3, IAM and RDS, which the scenario reaches at moto itself ([`Env::past_the_aws_proxy`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use keeper_e2e_scenarios::{ApiFaults, ApiProxy, AuditLog, AuditMark, Env, debug_call, http_get};
use serde_json::{Value, json};

/// The same faults for the same request sequence.
const SEED: u64 = 14;
/// The shares of keeper's requests that fail: of its API requests (409/500 on writes, 500
/// otherwise; its watches are cut besides) and of its backend requests (failed or throttled).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shares {
    pub api: f64,
    pub backend: f64,
}

impl Shares {
    /// No request fails.
    pub const NONE: Shares = Shares {
        api: 0.0,
        backend: 0.0,
    };
    /// Issue 14: 10% of keeper's API requests, 20% of its backend requests.
    pub const ISSUE_14: Shares = Shares {
        api: 0.1,
        backend: 0.2,
    };
    /// Issue 26, item 9 (with kills every 1-4 s): 20% of keeper's API requests, 15% of its
    /// backend requests.
    pub const ISSUE_26_ITEM_9: Shares = Shares {
        api: 0.2,
        backend: 0.15,
    };

    /// `defaults`, with the shares the environment sets in percent (`KEEPER_CHAOS_API_FAULTS`,
    /// `KEEPER_CHAOS_BACKEND_FAULTS`).
    pub fn from_env(defaults: Shares) -> Shares {
        let percent = |name: &str, default: f64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .map_or(default, |p| p / 100.0)
        };
        Shares {
            api: percent("KEEPER_CHAOS_API_FAULTS", defaults.api),
            backend: percent("KEEPER_CHAOS_BACKEND_FAULTS", defaults.backend),
        }
    }

    /// Whether any request fails at all.
    pub fn any(&self) -> bool {
        self.api > 0.0 || self.backend > 0.0
    }
}
/// How long a watch of keeper's lasts before the API cuts it.
const WATCH_CUT_AFTER_SECONDS: u64 = 15;
/// The services behind the AWS proxy, one fault rule each (its counters are that service's).
pub const AWS_SERVICES: [&str; 3] = ["s3", "iam", "rds"];
/// How often request counts are sampled: the window of the peak rates.
pub const WINDOW: Duration = Duration::from_secs(5);

/// The user keeper's requests are served as: its ServiceAccount in the local stack.
pub fn keeper_user(env: &Env) -> String {
    format!("system:serviceaccount:{}:keeper", env.operator_namespace)
}

/// The debug endpoints of the two backend emulators.
#[derive(Clone)]
struct Endpoints {
    grid: String,
    proxy: String,
}

impl Endpoints {
    fn of(env: &Env) -> anyhow::Result<Endpoints> {
        let local = "fault injection needs the local control plane";
        Ok(Endpoints {
            grid: env.storagegrid_url.clone().context(local)?,
            proxy: env.aws_proxy_url.clone().context(local)?,
        })
    }
}

/// Faults on for keeper's requests until [`Faults::off`] (or until dropped). The API's faults
/// reach the keeper started through [`Faults::api`].
pub struct Faults {
    at: Endpoints,
    api: Arc<ApiProxy>,
    on: bool,
}

/// What the emulators counted while the faults were on.
#[derive(Debug, Default)]
pub struct Injected {
    /// keeper's API requests, those answered with an error, and its watches cut.
    pub api_requests: u64,
    pub api_refused: u64,
    pub watches_cut: u64,
    /// keeper's StorageGRID requests refused.
    pub grid_refused: u64,
    /// Per AWS service: keeper's requests, and those faulted.
    pub aws: BTreeMap<String, (u64, u64)>,
}

impl Faults {
    pub fn inject(env: &Env, shares: Shares) -> anyhow::Result<Faults> {
        let Shares {
            api: api_share,
            backend: backend_share,
        } = shares;
        let at = Endpoints::of(env)?;
        let api = env.api_proxy()?;
        api.set_faults(
            ApiFaults::from_json(json!({"seed": SEED, "rules": [
                {"verbs": ["watch"], "closeWatchAfterSeconds": WATCH_CUT_AFTER_SECONDS},
                {"verbs": ["update", "patch", "delete"], "share": api_share, "codes": [409, 500]},
                {"share": api_share, "codes": [500]},
            ]}))
            .map_err(anyhow::Error::msg)?,
        );
        // Half and half 503 and 429 (throttling): a request the first rule spares meets the second.
        let half = backend_share / 2.0;
        debug_call(
            "POST",
            format!("{}/debug/faults", at.grid),
            Some(json!({"seed": SEED, "faults": [
                {"path_prefix": "/api", "status": 503, "share": half},
                {"path_prefix": "/api", "status": 429, "share": half / (1.0 - half)},
            ]})),
        )?;
        let rules: Vec<Value> = AWS_SERVICES
            .iter()
            .map(|service| {
                json!({"service": service, "share": backend_share,
                       "faults": ["throttle", "500", "503", "drop", "lost"]})
            })
            .collect();
        debug_call(
            "PUT",
            format!("{}/_awsproxy/faults", at.proxy),
            Some(json!({"seed": SEED, "rules": rules})),
        )?;
        Ok(Faults {
            at,
            api: Arc::new(api),
            on: true,
        })
    }

    /// The API fault proxy: the keeper started through it gets the API's faults (shared with
    /// the threads that restart keeper).
    pub fn api(&self) -> &Arc<ApiProxy> {
        &self.api
    }

    /// What was injected so far.
    pub fn injected(&self) -> anyhow::Result<Injected> {
        let mut injected = Injected::default();
        for counters in self.api.counters() {
            injected.api_requests += counters.matched;
            injected.watches_cut += counters.watches_limited;
            injected.api_refused += counters.answered.values().sum::<u64>();
        }
        let grid = debug_call("GET", format!("{}/debug/faults", self.at.grid), None)?;
        injected.grid_refused = grid["faults"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["hits"].as_u64())
            .sum();
        let proxy = debug_call("GET", format!("{}/_awsproxy/faults", self.at.proxy), None)?;
        for (service, counters) in AWS_SERVICES.iter().zip(
            proxy["counters"]
                .as_array()
                .context("the proxy's counters")?,
        ) {
            let faulted = counters["faulted"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, n)| n.as_u64())
                .sum();
            injected.aws.insert(
                service.to_string(),
                (counters["matched"].as_u64().unwrap_or(0), faulted),
            );
        }
        Ok(injected)
    }

    /// Turns every fault off.
    pub fn off(&mut self) -> anyhow::Result<()> {
        self.on = false;
        self.api.clear_faults();
        debug_call("DELETE", format!("{}/debug/faults", self.at.grid), None)?;
        debug_call(
            "DELETE",
            format!("{}/_awsproxy/faults", self.at.proxy),
            None,
        )?;
        Ok(())
    }
}

impl Drop for Faults {
    fn drop(&mut self) {
        if self.on {
            let _ = self.off();
        }
    }
}

/// keeper's request counts at one moment.
#[derive(Clone, Debug)]
struct Sample {
    at: Instant,
    /// Where kube-apiserver's audit log was (keeper's requests are counted from it afterwards).
    audit_log: AuditMark,
    /// keeper's StorageGRID calls, from its own metrics (the emulator keeps no counter).
    grid: f64,
    /// keeper's requests per AWS service, from the proxy's rule counters.
    aws: BTreeMap<String, u64>,
}

/// Samples keeper's request counts every [`WINDOW`] on a thread of its own.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    env: Env,
}

/// The requests keeper made, per target (`api`, `storagegrid`, `s3`, `iam`, `rds`).
#[derive(Debug, Default)]
pub struct Rates {
    /// Requests per second: (peak over a window, average over the run).
    pub per_second: BTreeMap<String, (f64, f64)>,
    /// Requests in all.
    pub total: BTreeMap<String, f64>,
    /// The most API requests one object (a tenant, bucket, database or Secret) had in a window,
    /// and which.
    pub busiest_object: (u64, String),
}

impl Sampler {
    pub fn start(env: &Env, metrics_url: &str) -> anyhow::Result<Sampler> {
        let at = Endpoints::of(env)?;
        let audit_log = AuditLog::of(env)?;
        let metrics = format!("{metrics_url}/metrics");
        let take = move || -> anyhow::Result<Sample> {
            let proxy = debug_call("GET", format!("{}/_awsproxy/faults", at.proxy), None)?;
            let aws = AWS_SERVICES
                .iter()
                .zip(proxy["counters"].as_array().into_iter().flatten())
                .map(|(s, c)| (s.to_string(), c["matched"].as_u64().unwrap_or(0)))
                .collect();
            let (_, text) = http_get(&metrics).context("keeper's metrics")?;
            Ok(Sample {
                at: Instant::now(),
                audit_log: audit_log.mark()?,
                grid: metric_sum(
                    &text,
                    "keeper_backend_requests_total",
                    &[("backend", "storagegrid")],
                ),
                aws,
            })
        };
        let samples = Arc::new(Mutex::new(vec![take()?]));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (samples, stop) = (samples.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut next = Instant::now() + WINDOW;
                while !stop.load(Ordering::SeqCst) {
                    if Instant::now() >= next {
                        next += WINDOW;
                        match take() {
                            Ok(sample) => samples.lock().unwrap().push(sample),
                            Err(e) => eprintln!("request counts not sampled: {e:#}"),
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Ok(Sampler {
            stop,
            samples,
            thread: Some(thread),
            env: env.clone(),
        })
    }

    /// Stops sampling and works out the rates.
    pub fn rates(mut self) -> anyhow::Result<Rates> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("sampler thread");
        }
        let samples = self.samples.lock().unwrap().clone();
        anyhow::ensure!(samples.len() >= 2, "too few samples: {}", samples.len());
        let user = keeper_user(&self.env);
        let audit_log = AuditLog::of(&self.env)?;
        let mut rates = Rates::default();
        let mut api_windows = Vec::new();
        for pair in samples.windows(2) {
            let (from, to) = (&pair[0], &pair[1]);
            let mut total = 0;
            let mut per_object: BTreeMap<String, u64> = BTreeMap::new();
            for request in audit_log.requests(from.audit_log, Some(to.audit_log))? {
                if request.user != user {
                    continue;
                }
                total += 1;
                if !request.namespace.is_empty()
                    && !request.name.is_empty()
                    && request.resource != "events"
                {
                    *per_object
                        .entry(format!(
                            "{}/{}/{}",
                            request.resource, request.namespace, request.name
                        ))
                        .or_default() += 1;
                }
            }
            let seconds = to.at.duration_since(from.at).as_secs_f64();
            api_windows.push((total as f64, seconds));
            if let Some((object, &count)) = per_object.iter().max_by_key(|(_, count)| **count)
                && count > rates.busiest_object.0
            {
                rates.busiest_object = (count, object.clone());
            }
        }
        rates.insert("api", &api_windows);
        let windows = |count: &dyn Fn(&Sample) -> f64| -> Vec<(f64, f64)> {
            samples
                .windows(2)
                .map(|p| {
                    (
                        count(&p[1]) - count(&p[0]),
                        p[1].at.duration_since(p[0].at).as_secs_f64(),
                    )
                })
                .collect()
        };
        rates.insert("storagegrid", &windows(&|s: &Sample| s.grid));
        for service in AWS_SERVICES {
            rates.insert(
                service,
                &windows(&|s: &Sample| s.aws.get(service).copied().unwrap_or(0) as f64),
            );
        }
        Ok(rates)
    }
}

impl Rates {
    fn insert(&mut self, target: &str, windows: &[(f64, f64)]) {
        let total = windows.iter().map(|(count, _)| count).sum();
        self.total.insert(target.into(), total);
        self.per_second
            .insert(target.into(), peak_and_average(windows));
    }
}

/// The highest rate of any window and the rate over all of them.
fn peak_and_average(windows: &[(f64, f64)]) -> (f64, f64) {
    let peak = windows
        .iter()
        .map(|(count, seconds)| count / seconds)
        .fold(0.0, f64::max);
    let (count, seconds) = windows.iter().fold((0.0, 0.0), |(c, s), (count, seconds)| {
        (c + count, s + seconds)
    });
    (peak, count / seconds)
}

/// The sum of the samples of metric `name` whose labels include all of `labels`, from
/// Prometheus's text format.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let samples = text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
            (metric == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())
            .flatten()
        });
    samples.fold(0.0, |sum, value| sum + value)
}

/// No hot loop on one object: the most API requests keeper may make about one object (a tenant,
/// bucket, database or Secret) in a [`WINDOW`]. A reconcile writes an object at most about three
/// times (its status, a JSON patch of finalizers or annotations, its Secret) and reads from
/// caches; an object is reconciled at most about twice a second (a failed reconcile waits at
/// least 1 s, a drain round continues after 1 s, and each of keeper's own writes brings one more
/// reconcile, which writes nothing). That is 6 a second, 30 in a window; the short run's busiest
/// object took 9. A reconcile looping without a pause runs at the API's pace, hundreds a window.
pub const OBJECT_REQUESTS_PER_WINDOW: u64 = 30;
/// No hot loop at all: what a round may cost per object, on average, to each target. An object's
/// whole life (created, checked, filled, drained, deleted) takes a handful of reconciles of a few
/// requests each; with the faults' retries the short run spent 11 to 18 per object on the API and
/// on each backend. 60 leaves three times that; a reconcile looping for a minute takes thousands.
pub const REQUESTS_PER_OBJECT: f64 = 60.0;

/// keeper's request rates stayed within the bounds above, for `objects` objects in all.
pub fn assert_bounded(rates: &Rates, objects: usize) {
    let (busiest, object) = &rates.busiest_object;
    assert!(
        *busiest <= OBJECT_REQUESTS_PER_WINDOW,
        "{object} took {busiest} API requests in {WINDOW:?} (at most {OBJECT_REQUESTS_PER_WINDOW}): a hot loop"
    );
    for (target, total) in &rates.total {
        let per_object = total / objects as f64;
        assert!(
            per_object <= REQUESTS_PER_OBJECT,
            "{target}: {per_object:.1} requests per object (at most {REQUESTS_PER_OBJECT}): a hot loop"
        );
    }
}

/// The bucket (upper bound, seconds) of the longest delay in histogram `name`, summed over its
/// labels: the smallest bound that holds every observation.
pub fn longest_observed(text: &str, name: &str) -> Option<f64> {
    let total = metric_sum(text, &format!("{name}_count"), &[]);
    let mut bounds: Vec<f64> = text
        .lines()
        .filter(|line| line.starts_with(&format!("{name}_bucket{{")))
        .filter_map(|line| line.split("le=\"").nth(1)?.split('"').next()?.parse().ok())
        .collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    bounds.into_iter().find(|le| {
        metric_sum(
            text,
            &format!("{name}_bucket"),
            &[("le", &format_bound(*le))],
        ) >= total
    })
}

/// A bucket bound as Prometheus writes it (`1`, `2.5`, `+Inf`).
fn format_bound(le: f64) -> String {
    if le.is_infinite() {
        "+Inf".into()
    } else {
        le.to_string()
    }
}
