//! How the emulator's cost per request changes with the number of stored objects.
//!
//! Two servers run side by side in this process, one holding a few S3Buckets and the other
//! many, each bucket with an owned Secret as keeper creates them. The same batch of the
//! requests an operator makes (create, get, status merge patch, JSON patch, update, apply,
//! selective lists, a watch from a recent resourceVersion, deletes with background and
//! foreground propagation whose dependent the collector removes) runs against each in turn,
//! rounds interleaved so that a change in the machine's load hits both alike. Each request's
//! process CPU time (client and server, measured around the request) is summed per verb and the
//! medians over rounds are compared as a ratio: no absolute time is judged, so a slow or busy
//! machine does not fail the test.
//!
//! `per_request_cost_does_not_grow_with_stored_objects` (100 against 2,000 objects) runs with
//! the other tests. `per_request_cost_report` is for a developer, by hand, with sizes and rounds
//! from the environment (`SCALING_SMALL`, `SCALING_LARGE`, `SCALING_ROUNDS`):
//! `cargo test --release -p keeper-e2e-apiserver --test scaling -- --ignored --nocapture`.

use futures::StreamExt;
use keeper_e2e_apiserver::{Server, auth::ADMIN_TOKEN};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const CRD_YAML: &str = include_str!("fixtures/s3bucket-crd.yaml");
const NS: &str = "default";
/// Owner and dependent pairs created, used and deleted per server and round.
const PROBES: usize = 10;

/// Both tests measure the whole process: never at the same time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_request_cost_does_not_grow_with_stored_objects() {
    let _serial = SERIAL.lock().await;
    let report = measure(100, 2_000, 5).await;
    println!("{report}");
    // Before the collector looked only at what a write touches, a write at 2,000 objects cost
    // ten times one at 100 and more; bounds well above noise and far below that.
    assert!(
        report.total_ratio() < 1.5,
        "a request costs {:.2}x as much at 2,000 objects as at 100\n{report}",
        report.total_ratio()
    );
    for (verb, ratio) in report.ratios() {
        assert!(
            ratio < 2.5,
            "{verb} costs {ratio:.2}x as much at 2,000 objects as at 100\n{report}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark to run by hand (see the module documentation)"]
async fn per_request_cost_report() {
    let _serial = SERIAL.lock().await;
    let var = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let report = measure(
        var("SCALING_SMALL", 100),
        var("SCALING_LARGE", 2_000),
        var("SCALING_ROUNDS", 7),
    )
    .await;
    println!("{report}");
}

/// CPU time of the whole process (all threads), in nanoseconds.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Target {
    server: Server,
    http: reqwest::Client,
}

impl Target {
    async fn start() -> Target {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let server = Server::start().await.expect("start server");
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {ADMIN_TOKEN}").parse().expect("header"),
        );
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .expect("client");
        Target { server, http }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    async fn send(&self, method: reqwest::Method, path: &str, ct: &str, body: String) -> Value {
        let resp = self
            .http
            .request(method.clone(), self.url(path))
            .header("Content-Type", ct)
            .body(body)
            .send()
            .await
            .expect("request");
        let code = resp.status();
        let text = resp.text().await.expect("body");
        assert!(code.is_success(), "{method} {path}: {code} {text}");
        serde_json::from_str(&text).expect("JSON")
    }

    async fn status(&self, path: &str) -> u16 {
        let resp = self.http.get(self.url(path)).send().await.expect("request");
        resp.status().as_u16()
    }

    /// An owner and its dependent as keeper makes them; returns both as created.
    async fn create_pair(&self, name: &str, times: &mut Times) -> (Value, Value) {
        let bucket = json!({
            "apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket",
            "metadata": {"name": name, "labels": {"app": "scaling", "probe": name}},
            "spec": {"tenantRef": {"name": "t"}},
        });
        let bucket = times
            .time("create", self.post(&bucket_path(""), bucket))
            .await;
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {
                "name": format!("{name}-creds"),
                "labels": {"app.kubernetes.io/managed-by": "keeper", "probe": name},
                "ownerReferences": [{
                    "apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket", "name": name,
                    "uid": bucket["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "data": {"accessKeyId": "QUtJQQ==", "secretAccessKey": "c2VjcmV0"},
        });
        let secret = times
            .time("create", self.post(&secret_path(""), secret))
            .await;
        (bucket, secret)
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.send(
            reqwest::Method::POST,
            path,
            "application/json",
            body.to_string(),
        )
        .await
    }

    async fn patch(&self, path: &str, ct: &str, body: Value) -> Value {
        let body = if ct == "application/apply-patch+yaml" {
            serde_yaml::to_string(&body).expect("yaml")
        } else {
            body.to_string()
        };
        self.send(reqwest::Method::PATCH, path, ct, body).await
    }

    /// Start a watch from `rv` and read its first event.
    async fn watch_first(&self, rv: &str) -> Value {
        let path = format!(
            "{}?watch=1&resourceVersion={rv}&timeoutSeconds=5",
            bucket_path("")
        );
        let mut resp = self.http.get(self.url(&path)).send().await.expect("watch");
        let mut line = Vec::new();
        while !line.contains(&b'\n') {
            let chunk = resp.chunk().await.expect("event").expect("an event");
            line.extend_from_slice(&chunk);
        }
        let end = line.iter().position(|b| *b == b'\n').expect("a line");
        serde_json::from_slice(&line[..end]).expect("JSON event")
    }

    /// The requests of one probe's life, timed per verb.
    async fn probe(&self, name: &str, foreground: bool, times: &mut Times) {
        let (bucket, mut secret) = self.create_pair(name, times).await;
        let rv = bucket["metadata"]["resourceVersion"]
            .as_str()
            .expect("rv")
            .to_string();
        let got = times
            .time("get", async {
                let resp = self.http.get(self.url(&bucket_path(name))).send().await;
                resp.expect("get").json::<Value>().await.expect("JSON")
            })
            .await;
        assert_eq!(got["metadata"]["uid"], bucket["metadata"]["uid"]);
        let status_path = format!("{}/status", bucket_path(name));
        let status = json!({"status": {"phase": "Ready", "observedGeneration": 1}});
        times
            .time(
                "patch status",
                self.patch(&status_path, "application/merge-patch+json", status),
            )
            .await;
        let annotate = json!([{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}]);
        times
            .time(
                "json patch",
                self.patch(&bucket_path(name), "application/json-patch+json", annotate),
            )
            .await;
        secret["data"]["rotated"] = json!("eWVz");
        times
            .time(
                "update",
                self.send(
                    reqwest::Method::PUT,
                    &secret_path(&format!("{name}-creds")),
                    "application/json",
                    secret.to_string(),
                ),
            )
            .await;
        let apply = json!({
            "apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket",
            "metadata": {"name": name}, "spec": {"tenantRef": {"name": "t"}, "versioning": true},
        });
        let apply_path = format!("{}?fieldManager=scaling&force=true", bucket_path(name));
        times
            .time(
                "apply",
                self.patch(&apply_path, "application/apply-patch+yaml", apply),
            )
            .await;
        let by_label = format!("{}?labelSelector=probe%3D{name}", secret_path(""));
        let listed = times.time("list", self.get_json(&by_label)).await;
        assert_eq!(listed["items"].as_array().map(Vec::len), Some(1));
        let by_name = format!(
            "{}?fieldSelector=metadata.name%3D{name}-creds",
            secret_path("")
        );
        let listed = times.time("list", self.get_json(&by_name)).await;
        assert_eq!(listed["items"].as_array().map(Vec::len), Some(1));
        let event = times.time("watch", self.watch_first(&rv)).await;
        assert_eq!(event["object"]["metadata"]["name"], name);
        let policy = if foreground {
            "Foreground"
        } else {
            "Background"
        };
        times
            .time(
                "delete",
                self.send(
                    reqwest::Method::DELETE,
                    &format!("{}?propagationPolicy={policy}", bucket_path(name)),
                    "application/json",
                    String::new(),
                ),
            )
            .await;
        // The collector removed the dependent within the delete, and the owner is gone too.
        let gone = times
            .time("get", self.status(&secret_path(&format!("{name}-creds"))))
            .await;
        assert_eq!(gone, 404, "{name}'s Secret is collected with it");
        assert_eq!(self.status(&bucket_path(name)).await, 404);
    }

    async fn get_json(&self, path: &str) -> Value {
        let resp = self.http.get(self.url(path)).send().await.expect("get");
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp.json().await.expect("JSON")
    }

    /// Fill the store with `n` owner and dependent pairs.
    async fn populate(&self, n: usize) {
        let crd: Value = serde_yaml::from_str(CRD_YAML).expect("CRD");
        self.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd,
        )
        .await;
        futures::stream::iter(0..n)
            .map(|i| async move {
                self.create_pair(&format!("b{i}"), &mut Times::default())
                    .await
            })
            .buffer_unordered(8)
            .collect::<Vec<_>>()
            .await;
    }
}

fn bucket_path(name: &str) -> String {
    format!("/apis/keeper.dev/v1alpha1/namespaces/{NS}/s3buckets/{name}")
        .trim_end_matches('/')
        .to_string()
}

fn secret_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/secrets/{name}")
        .trim_end_matches('/')
        .to_string()
}

/// CPU nanoseconds and request counts by verb.
#[derive(Default)]
struct Times(BTreeMap<&'static str, (u64, u64)>);

impl Times {
    async fn time<T>(&mut self, verb: &'static str, request: impl Future<Output = T>) -> T {
        let start = cpu_ns();
        let out = request.await;
        let spent = cpu_ns() - start;
        let e = self.0.entry(verb).or_default();
        e.0 += spent;
        e.1 += 1;
        out
    }

    /// Mean CPU microseconds per request, by verb and for all requests.
    fn means(&self) -> BTreeMap<&'static str, f64> {
        let mut out: BTreeMap<&'static str, f64> = self
            .0
            .iter()
            .map(|(verb, (ns, n))| (*verb, *ns as f64 / *n as f64 / 1_000.0))
            .collect();
        let (ns, n) = self
            .0
            .values()
            .fold((0, 0), |(a, b), (ns, n)| (a + ns, b + n));
        out.insert("all requests", ns as f64 / n as f64 / 1_000.0);
        out
    }
}

struct Report {
    sizes: (usize, usize),
    /// Median over rounds of the mean CPU microseconds per request: (small, large).
    medians: BTreeMap<&'static str, (f64, f64)>,
}

impl Report {
    fn ratios(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        self.medians.iter().map(|(verb, (s, l))| (*verb, l / s))
    }

    fn total_ratio(&self) -> f64 {
        let (s, l) = self.medians["all requests"];
        l / s
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (small, large) = self.sizes;
        writeln!(
            f,
            "CPU µs per request (median of rounds) | {small} objects | {large} objects | ratio"
        )?;
        for (verb, (s, l)) in &self.medians {
            writeln!(f, "{verb:>14} | {s:>10.0} | {l:>10.0} | {:>6.2}", l / s)?;
        }
        Ok(())
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Interleaved rounds of probes against a server with `small` and one with `large` pairs.
async fn measure(small: usize, large: usize, rounds: usize) -> Report {
    let targets = [Target::start().await, Target::start().await];
    let started = std::time::Instant::now();
    targets[0].populate(small).await;
    targets[1].populate(large).await;
    println!(
        "filled the servers with {small} and {large} pairs in {:.1?}",
        started.elapsed()
    );
    // One round unmeasured, so that both servers and connections are warm.
    let mut per_round: [Vec<BTreeMap<&'static str, f64>>; 2] = [vec![], vec![]];
    for round in 0..=rounds {
        for (i, t) in targets.iter().enumerate() {
            let mut times = Times::default();
            for p in 0..PROBES {
                t.probe(&format!("p{round}-{p}"), p % 2 == 1, &mut times)
                    .await;
            }
            if round > 0 {
                per_round[i].push(times.means());
            }
        }
        // Let the watches the probes left end before the next round.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let verbs: Vec<&'static str> = per_round[0][0].keys().copied().collect();
    let medians = verbs
        .into_iter()
        .map(|verb| {
            let of = |i: usize| median(per_round[i].iter().map(|m| m[verb]).collect());
            (verb, (of(0), of(1)))
        })
        .collect();
    let [a, b] = targets;
    a.server.stop().await;
    b.server.stop().await;
    Report {
        sizes: (small, large),
        medians,
    }
}
