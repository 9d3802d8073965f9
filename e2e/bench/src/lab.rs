//! The local control plane as the benchmark sees it: kube-apiserver (lists, creates, and its
//! audit log for keeper's requests), the AWS proxy and the StorageGRID emulator (their call
//! counters), and keeper as a process (CPU time, resident memory, reconcile counter).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use keeper_e2e_scenarios::{AuditLog, AuditMark, Env, Keeper};
use serde_json::Value;

/// keeper's identity in the local stack: the audit log attributes its requests to it.
pub const KEEPER_USER: &str = "system:serviceaccount:keeper-system:keeper";
pub const GROUP_VERSION: &str = "keeper.dev/v1alpha1";

pub struct Lab {
    pub env: Env,
    pub dev: PathBuf,
    pub api: String,
    pub proxy: String,
    pub grid: String,
    pub grid_s3: String,
    pub grid_admin: (String, String),
    token: String,
    pub http: reqwest::Client,
    audit: AuditLog,
    /// Where the current measurement began in the audit log.
    since: std::sync::Mutex<AuditMark>,
    /// This run's hold on the stack, for as long as the run lasts ([`hold_stack`]).
    _stack: std::fs::File,
}

/// Takes the stack in `dev` for this run, or says that another benchmark has it: two runs on
/// one stack share its servers, its audit log and its CPU, and each counts the other's requests
/// and objects as its own. The lock goes with the process, however it ends.
fn hold_stack(dev: &Path) -> anyhow::Result<std::fs::File> {
    let path = dev.join("bench.lock");
    let file =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "another keeper-bench is running on the stack in {} (it holds {}): wait for it, or \
             give this run a stack of its own (KEEPER_DEV_DIR)",
            dev.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

fn var(name: &str) -> anyhow::Result<String> {
    std::env::var(name)
        .with_context(|| format!("{name} is not set: run the benchmark with `make bench`"))
}

impl Lab {
    pub fn from_env() -> anyhow::Result<Lab> {
        let env = Env::from_env()?;
        let dev = PathBuf::from(var("KEEPER_DEV_DIR")?);
        let stack = hold_stack(&dev)?;
        let kubeconfig: Value = serde_yaml::from_str(&std::fs::read_to_string(&env.kubeconfig)?)?;
        let token = kubeconfig["users"][0]["user"]["token"]
            .as_str()
            .context("the admin kubeconfig has no token")?
            .to_string();
        let audit = AuditLog::of(&env)?;
        let since = std::sync::Mutex::new(audit.mark()?);
        let ca = reqwest::Certificate::from_pem(&std::fs::read(
            &env.apiserver_tls
                .as_ref()
                .context("the local control plane's CA")?
                .ca,
        )?)?;
        Ok(Lab {
            env,
            dev,
            api: var("KEEPER_APISERVER_URL")?,
            proxy: var("KEEPER_AWS_PROXY_URL")?,
            grid: var("KEEPER_STORAGEGRID_ENDPOINT")?,
            grid_s3: var("KEEPER_STORAGEGRID_S3_ENDPOINT")?,
            grid_admin: (
                var("KEEPER_STORAGEGRID_ADMIN_USER")?,
                var("KEEPER_STORAGEGRID_ADMIN_PASSWORD")?,
            ),
            token,
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .add_root_certificate(ca)
                .build()?,
            audit,
            since,
            _stack: stack,
        })
    }

    async fn json(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let response = request.send().await?;
        let status = response.status();
        let body = response.text().await?;
        if !status.is_success() {
            bail!("{status}: {body}");
        }
        Ok(if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&body)?
        })
    }

    fn api_request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.api))
            .bearer_auth(&self.token)
    }

    /// The items of a list, as the administrator (its requests are not keeper's).
    pub async fn list(&self, path: &str) -> anyhow::Result<Vec<Value>> {
        let list = self
            .json(self.api_request(reqwest::Method::GET, path))
            .await?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }

    /// An object, as the administrator.
    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.json(self.api_request(reqwest::Method::GET, path))
            .await
    }

    /// Creates an object, as the administrator; the object as created.
    pub async fn create(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.json(self.api_request(reqwest::Method::POST, path).json(body))
            .await
    }

    /// Merge-patches an object, as the administrator.
    pub async fn merge_patch(&self, path: &str, patch: &Value) -> anyhow::Result<()> {
        self.json(
            self.api_request(reqwest::Method::PATCH, path)
                .header("Content-Type", "application/merge-patch+json")
                .body(patch.to_string()),
        )
        .await
        .map(drop)
    }

    /// `DELETE` of an object or a whole collection, as the administrator.
    pub async fn delete(&self, path: &str) -> anyhow::Result<()> {
        self.json(self.api_request(reqwest::Method::DELETE, path))
            .await
            .map(drop)
    }

    pub async fn create_namespace(&self, name: &str) -> anyhow::Result<()> {
        self.create(
            "/api/v1/namespaces",
            &serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )
        .await
        .map(drop)
    }

    /// Deletes a namespace and waits until it is gone (keeper must be running when it holds
    /// keeper's objects).
    pub async fn delete_namespace(&self, name: &str, timeout: Duration) -> anyhow::Result<()> {
        let path = format!("/api/v1/namespaces/{name}");
        let _ = self
            .json(self.api_request(reqwest::Method::DELETE, &path))
            .await;
        let deadline = Instant::now() + timeout;
        loop {
            let response = self.api_request(reqwest::Method::GET, &path).send().await?;
            if response.status() == reqwest::StatusCode::NOT_FOUND {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("namespace {name} still exists after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Watches the objects of `plural` in `namespace` until there are `n` and all satisfy
    /// `done` (`n = 0`: until none is left); returns when it saw that. A watch, not polling: a
    /// LIST of a thousand objects ten times a second would take the CPU keeper is measured on.
    pub async fn wait_all(
        &self,
        namespace: &str,
        plural: &str,
        n: usize,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Instant> {
        let path = format!("/apis/{GROUP_VERSION}/namespaces/{namespace}/{plural}");
        let deadline = Instant::now() + timeout;
        let mut seen: BTreeMap<String, bool> = BTreeMap::new();
        let finished = |seen: &BTreeMap<String, bool>| seen.len() == n && seen.values().all(|d| *d);
        loop {
            let list = self.get(&path).await?;
            seen.clear();
            for item in list["items"].as_array().into_iter().flatten() {
                seen.insert(item["metadata"]["name"].to_string(), done(item));
            }
            if finished(&seen) {
                return Ok(Instant::now());
            }
            let version = list["metadata"]["resourceVersion"].as_str().unwrap_or("0");
            let mut watch = self
                .api_request(
                    reqwest::Method::GET,
                    &format!("{path}?watch=1&resourceVersion={version}&timeoutSeconds=30"),
                )
                .send()
                .await?;
            let mut buffer = Vec::new();
            'watch: loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let chunk = match tokio::time::timeout(left, watch.chunk()).await {
                    Err(_) => {
                        let pending = seen
                            .iter()
                            .filter(|(_, d)| !**d)
                            .map(|(k, _)| k.clone())
                            .take(3)
                            .collect::<Vec<_>>();
                        bail!(
                            "{namespace}/{plural}: {} of {n} done after {timeout:?}; for example {pending:?}",
                            seen.values().filter(|d| **d).count()
                        );
                    }
                    // The watch ended (its timeout, or the server's): list and watch again.
                    Ok(Ok(None)) => break 'watch,
                    Ok(Ok(Some(chunk))) => chunk,
                    Ok(Err(e)) => return Err(e.into()),
                };
                buffer.extend_from_slice(&chunk);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    let event: Value = serde_json::from_slice(&line)?;
                    let name = event["object"]["metadata"]["name"].to_string();
                    match event["type"].as_str() {
                        Some("ADDED" | "MODIFIED") => {
                            seen.insert(name, done(&event["object"]));
                        }
                        Some("DELETED") => {
                            seen.remove(&name);
                        }
                        // BOOKMARK; an ERROR (410 Gone) ends this watch: list again.
                        Some("ERROR") => break 'watch,
                        _ => {}
                    }
                }
                if finished(&seen) {
                    return Ok(Instant::now());
                }
            }
        }
    }

    /// keeper's API requests since the counters were last cleared. kube writes a request to
    /// the audit log once it has answered it: wait a moment after the last one.
    pub async fn keeper_requests(&self) -> anyhow::Result<Requests> {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let since = *self.since.lock().unwrap();
        let mut counts = BTreeMap::new();
        for request in self.audit.since(since)? {
            if request.user != KEEPER_USER {
                continue;
            }
            *counts
                .entry((request.verb.clone(), request.full_resource()))
                .or_default() += 1;
        }
        Ok(Requests(counts))
    }

    /// Starts counting keeper's API requests afresh.
    pub async fn clear_requests(&self) -> anyhow::Result<()> {
        *self.since.lock().unwrap() = self.audit.mark()?;
        Ok(())
    }

    /// AWS calls (S3, IAM, RDS) through the proxy since they were last cleared, as
    /// `service:Action`.
    pub async fn aws_calls(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let calls = self
            .json(self.http.get(format!("{}/_awsproxy/calls", self.proxy)))
            .await?;
        let mut out = BTreeMap::new();
        for (service, actions) in calls["calls"].as_object().into_iter().flatten() {
            for (action, n) in actions.as_object().into_iter().flatten() {
                out.insert(format!("{service}:{action}"), n.as_u64().unwrap_or(0));
            }
        }
        Ok(out)
    }

    /// When each AWS call in the proxy's log arrived (milliseconds since the epoch, oldest
    /// first): the calls since the counters were last cleared, or the last 10,000 of them.
    pub async fn aws_call_arrivals(&self) -> anyhow::Result<Vec<u64>> {
        let log = self
            .json(self.http.get(format!("{}/_awsproxy/calls/log", self.proxy)))
            .await?;
        let mut arrivals = log["log"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|call| call["atMs"].as_u64().context("a logged call without atMs"))
            .collect::<anyhow::Result<Vec<u64>>>()?;
        // Stamped before the proxy's lock is taken: two calls may be logged out of order.
        arrivals.sort_unstable();
        Ok(arrivals)
    }

    /// StorageGRID management calls since they were last cleared, by operation.
    pub async fn grid_calls(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let log = self
            .json(self.http.get(format!("{}/debug/requests", self.grid)))
            .await?;
        let mut out = BTreeMap::new();
        for entry in log["requests"].as_array().into_iter().flatten() {
            let op = entry["operation"].as_str().unwrap_or_default();
            *out.entry(format!("grid:{op}")).or_default() += 1;
        }
        Ok(out)
    }

    /// Clears the API request log and both backend counters: what follows is one measurement.
    pub async fn clear_counters(&self) -> anyhow::Result<()> {
        self.clear_requests().await?;
        self.json(self.http.delete(format!("{}/_awsproxy/calls", self.proxy)))
            .await?;
        self.json(self.http.delete(format!("{}/debug/requests", self.grid)))
            .await?;
        Ok(())
    }

    /// Adds `latency` to every call of `services` (`s3`, `iam`, `rds`) through the AWS proxy,
    /// in place of any fault rule.
    pub async fn slow_aws(&self, services: &[&str], latency: Duration) -> anyhow::Result<()> {
        let rules: Vec<Value> = services
            .iter()
            .map(|s| serde_json::json!({"service": s, "latencyMs": latency.as_millis() as u64}))
            .collect();
        self.json(
            self.http
                .put(format!("{}/_awsproxy/faults", self.proxy))
                .json(&serde_json::json!({"rules": rules})),
        )
        .await
        .map(drop)
    }

    /// Adds `latency` to every call of the StorageGRID management API (`/api/...`), in
    /// addition to any fault rule there (the first that matches decides).
    pub async fn slow_grid(&self, latency: Duration) -> anyhow::Result<()> {
        self.json(
            self.http
                .post(format!("{}/debug/faults", self.grid))
                .json(&serde_json::json!({"faults": [{"path_prefix": "/api/",
                    "delay_ms": latency.as_millis() as u64, "share": 1.0}]})),
        )
        .await
        .map(drop)
    }

    /// Removes the fault and latency rules of the AWS proxy and the StorageGRID emulator.
    pub async fn clear_faults(&self) -> anyhow::Result<()> {
        self.json(self.http.delete(format!("{}/_awsproxy/faults", self.proxy)))
            .await?;
        self.json(self.http.delete(format!("{}/debug/faults", self.grid)))
            .await?;
        Ok(())
    }

    /// AWS and StorageGRID calls together.
    pub async fn backend_calls(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let mut calls = self.aws_calls().await?;
        calls.extend(self.grid_calls().await?);
        Ok(calls)
    }

    /// CPU seconds used so far by keeper, each server of the stack and the benchmark itself.
    pub fn cpu_use(&self, keeper: &Process) -> CpuUse {
        let mut out = vec![("keeper".to_string(), keeper.cpu_seconds().unwrap_or(0.0))];
        for (name, var) in [
            ("kube-apiserver", "KEEPER_APISERVER_PID"),
            ("etcd", "KEEPER_ETCD_PID"),
            ("kube-controller-manager", "KEEPER_CONTROLLER_MANAGER_PID"),
            ("moto", "KEEPER_MOTO_PID"),
            ("AWS proxy", "KEEPER_AWS_PROXY_PID"),
            ("StorageGRID emulator", "KEEPER_STORAGEGRID_PID"),
            ("StorageGRID's moto", "KEEPER_GRID_MOTO_PID"),
        ] {
            let used = std::env::var(var)
                .ok()
                .and_then(|pid| pid.parse().ok())
                .and_then(|pid| cpu_seconds(pid).ok())
                .unwrap_or(0.0);
            out.push((name.to_string(), used));
        }
        out.push((
            "benchmark".to_string(),
            cpu_seconds(std::process::id()).unwrap_or(0.0),
        ));
        CpuUse(out)
    }

    /// keeper's configuration for the benchmark: the stack's, with `edit` applied, written beside
    /// it; the returned environment starts keeper with it.
    pub fn keeper_env(&self, name: &str, edit: impl FnOnce(&mut Value)) -> anyhow::Result<Env> {
        let base: Value =
            serde_yaml::from_str(&std::fs::read_to_string(self.dev.join("keeper.yaml"))?)?;
        let mut config = base;
        edit(&mut config);
        let path = self.dev.join(format!("bench-{name}.yaml"));
        std::fs::write(&path, serde_yaml::to_string(&config)?)?;
        let mut env = self.env.clone();
        env.keeper_config = path;
        Ok(env)
    }
}

/// API requests by (verb, resource).
#[derive(Debug, Default, Clone)]
pub struct Requests(pub BTreeMap<(String, String), u64>);

impl Requests {
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// Requests that change something, events aside.
    pub fn writes(&self) -> u64 {
        self.0
            .iter()
            .filter(|((verb, resource), _)| {
                matches!(verb.as_str(), "create" | "update" | "patch" | "delete")
                    && resource != "events"
            })
            .map(|(_, n)| n)
            .sum()
    }

    pub fn verb(&self, wanted: &str) -> u64 {
        self.0
            .iter()
            .filter(|((verb, _), _)| verb == wanted)
            .map(|(_, n)| n)
            .sum()
    }

    /// `verb resource: n` for each, the biggest first.
    pub fn breakdown(&self, per: f64) -> String {
        let mut rows: Vec<_> = self.0.iter().collect();
        rows.sort_by(|a, b| b.1.cmp(a.1));
        rows.iter()
            .map(|((verb, resource), n)| format!("{verb} {resource} {:.2}", **n as f64 / per))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// keeper running for the benchmark, with what /proc says of it.
pub struct Process {
    pub keeper: Keeper,
}

impl Process {
    pub fn start(env: &Env) -> anyhow::Result<Process> {
        Ok(Process {
            keeper: Keeper::start(env)?,
        })
    }

    /// keeper with its admission webhook registered: the API server sends it every S3Tenant and
    /// S3Bucket review, and the reads the webhook makes (as keeper) count with keeper's.
    pub fn start_with_webhook(env: &Env) -> anyhow::Result<Process> {
        Ok(Process {
            keeper: Keeper::start_with_webhook(env)?,
        })
    }

    /// CPU time (user + system) used so far.
    pub fn cpu_seconds(&self) -> anyhow::Result<f64> {
        cpu_seconds(self.keeper.pid())
    }

    /// Resident memory now and at its peak, in MiB.
    pub fn rss_mib(&self) -> anyhow::Result<(f64, f64)> {
        let status = proc_file(self.keeper.pid(), "status")?;
        Ok((
            status_mib(&status, "VmRSS:")?,
            status_mib(&status, "VmHWM:")?,
        ))
    }

    /// Resident memory now and two of its parts, in MiB, from one reading: anonymous (the heap,
    /// the allocator's arenas, stacks) and file-backed (mostly the binary's code).
    pub fn rss_parts_mib(&self) -> anyhow::Result<(f64, f64, f64)> {
        let status = proc_file(self.keeper.pid(), "status")?;
        Ok((
            status_mib(&status, "VmRSS:")?,
            status_mib(&status, "RssAnon:")?,
            status_mib(&status, "RssFile:")?,
        ))
    }

    /// keeper's metrics as `(series with labels, value)`.
    async fn metrics(&self, http: &reqwest::Client) -> anyhow::Result<BTreeMap<String, f64>> {
        let text = http
            .get(format!("{}/metrics", self.keeper.metrics_url))
            .send()
            .await?
            .text()
            .await?;
        Ok(text
            .lines()
            .filter(|l| l.starts_with("keeper_"))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                Some((series.to_string(), value.parse().ok()?))
            })
            .collect())
    }

    /// A snapshot of CPU time and metrics, to compare with a later one.
    pub async fn mark(&self, http: &reqwest::Client) -> anyhow::Result<Mark> {
        Ok(Mark {
            cpu: self.cpu_seconds()?,
            metrics: self.metrics(http).await?,
        })
    }
}

/// The default is a process's start: no CPU time, no metric yet.
#[derive(Debug, Clone, Default)]
pub struct Mark {
    cpu: f64,
    metrics: BTreeMap<String, f64>,
}

impl Mark {
    /// How much each series of metric `name` (a counter, or a histogram's `_sum`/`_count`)
    /// grew since `self`, by its labels.
    fn growth(&self, later: &Mark, name: &str) -> BTreeMap<String, f64> {
        later
            .metrics
            .iter()
            .filter_map(|(series, value)| {
                let labels = series.strip_prefix(name)?.strip_prefix('{')?;
                let before = self.metrics.get(series).copied().unwrap_or(0.0);
                Some((labels.trim_end_matches('}').to_string(), value - before))
            })
            .filter(|(_, grew)| *grew > 0.0)
            .collect()
    }

    /// Reconciles between `self` and `later` by controller (`s3bucket`, `s3tenant`, ...),
    /// successful or not.
    pub fn reconciles_by_controller(&self, later: &Mark) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (labels, n) in self.growth(later, "keeper_reconcile_total") {
            *out.entry(label(&labels, "controller").to_string())
                .or_default() += n;
        }
        out
    }

    /// Backend calls between `self` and `later` as keeper counts them
    /// (`keeper_backend_requests_total`, every outcome), as `backend:operation`. Unlike the
    /// emulators' logs it has no limit (the StorageGRID emulator keeps its last 10,000 requests);
    /// a client's resends inside one call are not in it.
    pub fn backend_calls(&self, later: &Mark) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (labels, n) in self.growth(later, "keeper_backend_requests_total") {
            let call = format!(
                "{}:{}",
                label(&labels, "backend"),
                label(&labels, "operation")
            );
            *out.entry(call).or_default() += n.round() as u64;
        }
        out
    }

    /// Objects no worker has started on yet, every controller together
    /// (`keeper_work_queue_depth`).
    pub fn queued(&self) -> f64 {
        self.metrics
            .iter()
            .filter(|(series, _)| series.starts_with("keeper_work_queue_depth{"))
            .map(|(_, n)| n)
            .sum()
    }

    /// CPU milliseconds per reconcile between `self` and `later`, and the reconciles.
    pub fn per_reconcile(&self, later: &Mark) -> (f64, f64) {
        let reconciles: f64 = self.growth(later, "keeper_reconcile_total").values().sum();
        let ms = (later.cpu - self.cpu) * 1000.0;
        (
            if reconciles > 0.0 {
                ms / reconciles
            } else {
                0.0
            },
            reconciles,
        )
    }

    /// The mean of histogram `name` between `self` and `later` by its labels, in milliseconds,
    /// with the count: `labels mean ms (n)`.
    pub fn means(&self, later: &Mark, name: &str) -> String {
        let sums = self.growth(later, &format!("{name}_sum"));
        let counts = self.growth(later, &format!("{name}_count"));
        counts
            .iter()
            .map(|(labels, n)| {
                let sum = sums.get(labels).copied().unwrap_or(0.0);
                format!("{labels} {:.1} ms ({n:.0})", sum / n * 1000.0)
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The value of label `key` in a series' labels (`a="x",b="y"`).
fn label<'a>(labels: &'a str, key: &str) -> &'a str {
    labels
        .split(',')
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_default()
        .trim_matches('"')
}

fn proc_file(pid: u32, name: &str) -> anyhow::Result<String> {
    let path = Path::new("/proc").join(pid.to_string()).join(name);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// A `kB` line of `/proc/PID/status`, in MiB.
fn status_mib(status: &str, key: &str) -> anyhow::Result<f64> {
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .with_context(|| format!("no {key} in /proc/PID/status"))?;
    let kib: f64 = line
        .split_whitespace()
        .nth(1)
        .context("malformed line")?
        .parse()?;
    Ok(kib / 1024.0)
}

/// CPU time (user + system) process `pid` used so far.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = proc_file(pid, "stat")?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').context("malformed /proc/PID/stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    Ok(ticks / clock_ticks_per_second())
}

/// CPU seconds of the processes of a measurement, to see where the time went.
#[derive(Debug, Clone, Default)]
pub struct CpuUse(pub Vec<(String, f64)>);

impl CpuUse {
    /// What each process used between `self` and `later`, as text.
    pub fn since(&self, later: &CpuUse) -> String {
        later
            .0
            .iter()
            .zip(&self.0)
            .map(|((name, after), (_, before))| format!("{name} {:.1} s", after - before))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The CPU seconds process `name` used between `self` and `later` (0 for a process the
    /// stack does not know, such as the API server of a cluster of your own).
    pub fn used(&self, later: &CpuUse, name: &str) -> f64 {
        let at = |u: &CpuUse| {
            u.0.iter()
                .find(|(n, _)| n == name)
                .map_or(0.0, |(_, seconds)| *seconds)
        };
        at(later) - at(self)
    }
}

fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_run_is_refused_the_stack_until_the_first_lets_go() {
        let dev = std::env::temp_dir().join(format!("keeper-bench-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dev).unwrap();
        let first = hold_stack(&dev).unwrap();
        let refused = hold_stack(&dev).unwrap_err().to_string();
        assert!(
            refused.contains("another keeper-bench is running"),
            "{refused}"
        );
        drop(first);
        let second = hold_stack(&dev).unwrap();
        drop(second);
        std::fs::remove_dir_all(&dev).unwrap();
    }

    #[test]
    fn writes_count_changes_but_not_events_or_reads() {
        let counts = [
            ("patch", "s3buckets/status", 3),
            ("create", "secrets", 1),
            ("create", "events", 5),
            ("patch", "events", 2),
            ("get", "secrets", 4),
            ("list", "s3buckets", 1),
            ("delete", "secrets", 1),
        ];
        let requests = Requests(
            counts
                .iter()
                .map(|(v, r, n)| ((v.to_string(), r.to_string()), *n))
                .collect(),
        );
        assert_eq!(requests.writes(), 5);
        assert_eq!(requests.verb("get"), 4);
        assert_eq!(requests.total(), 17);
        assert!(requests.breakdown(1.0).starts_with("create events 5.00"));
    }

    #[test]
    fn cpu_used_is_read_by_process() {
        let use_at = |keeper, apiserver| {
            CpuUse(vec![
                ("keeper".to_string(), keeper),
                ("kube-apiserver".to_string(), apiserver),
            ])
        };
        let (before, after) = (use_at(1.0, 10.0), use_at(4.5, 24.0));
        assert_eq!(before.used(&after, "keeper"), 3.5);
        assert_eq!(before.used(&after, "kube-apiserver"), 14.0);
        assert_eq!(before.used(&after, "etcd"), 0.0);
    }

    #[test]
    fn labels_are_read_by_name() {
        let labels = r#"backend="storagegrid",operation="list_containers",outcome="success""#;
        assert_eq!(label(labels, "operation"), "list_containers");
        assert_eq!(label(labels, "backend"), "storagegrid");
        assert_eq!(label(labels, "back"), "");
    }
}
