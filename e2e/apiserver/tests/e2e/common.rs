//! Test harness: an in-process server per test, kubectl with a temp kubeconfig, a kube-rs client
//! and raw HTTP.

use keeper_e2e_apiserver::{Config, Server};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

pub const CRD_YAML: &str = include_str!("../fixtures/s3bucket-crd.yaml");

pub struct Env {
    pub server: Server,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub http: reqwest::Client,
}

pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Env {
    pub async fn new() -> Env {
        Self::with(Config::default()).await
    }

    pub async fn with(config: Config) -> Env {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let server = Server::start_with(config).await.expect("start server");
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, server.kubeconfig()).expect("write kubeconfig");
        Env {
            server,
            dir,
            kubeconfig,
            http: Self::http_client(Some(keeper_e2e_apiserver::auth::ADMIN_TOKEN)),
        }
    }

    /// A raw HTTP client sending `token` (the admin's for `Env::http`), or none.
    pub fn http_client(token: Option<&str>) -> reqwest::Client {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(t) = token {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {t}").parse().expect("header"),
            );
        }
        reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .expect("client")
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Run kubectl against this server.
    pub async fn kubectl_in(&self, args: &[&str], stdin: Option<&str>) -> Run {
        use tokio::io::AsyncWriteExt;
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env("HOME", self.dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn kubectl");
        let mut input = child.stdin.take().expect("stdin");
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).await.expect("write stdin");
        }
        drop(input);
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("kubectl timed out")
            .expect("kubectl output");
        Run {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub async fn kubectl(&self, args: &[&str]) -> Run {
        self.kubectl_in(args, None).await
    }

    /// kubectl that must succeed; returns stdout.
    pub async fn kubectl_ok(&self, args: &[&str]) -> String {
        let r = self.kubectl(args).await;
        assert!(
            r.ok,
            "kubectl {args:?} failed:\nstdout: {}\nstderr: {}",
            r.stdout, r.stderr
        );
        r.stdout
    }

    pub async fn apply(&self, yaml: &str) -> String {
        let r = self.kubectl_in(&["apply", "-f", "-"], Some(yaml)).await;
        assert!(
            r.ok,
            "kubectl apply failed:\nstdout: {}\nstderr: {}",
            r.stdout, r.stderr
        );
        r.stdout
    }

    pub async fn client(&self) -> kube::Client {
        let kc =
            kube::config::Kubeconfig::from_yaml(&self.server.kubeconfig()).expect("kubeconfig");
        let cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("kube config");
        kube::Client::try_from(cfg).expect("client")
    }

    /// Raw HTTP request; returns (status, warning headers, JSON body).
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        ct: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Vec<String>, Value) {
        self.raw_accept(method, path, ct, body, "application/json")
            .await
    }

    pub async fn raw_accept(
        &self,
        method: &str,
        path: &str,
        ct: Option<&str>,
        body: Option<Value>,
        accept: &str,
    ) -> (u16, Vec<String>, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self
            .http
            .request(m, format!("{}{}", self.url(), path))
            .header("Accept", accept);
        if let Some(b) = body {
            let text = if ct == Some("application/apply-patch+yaml") {
                serde_yaml::to_string(&b).expect("yaml")
            } else {
                b.to_string()
            };
            req = req
                .header("Content-Type", ct.unwrap_or("application/json"))
                .body(text);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let warnings = resp
            .headers()
            .get_all("Warning")
            .iter()
            .map(|v| v.to_str().unwrap_or_default().to_string())
            .collect();
        let text = resp.text().await.expect("body");
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, warnings, v)
    }

    /// Create the S3Bucket CRD through the API.
    pub async fn install_crd(&self) {
        let crd: Value = serde_yaml::from_str(CRD_YAML).expect("crd yaml");
        let (code, _, body) = self
            .raw(
                "POST",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                None,
                Some(crd),
            )
            .await;
        assert_eq!(code, 201, "{body}");
    }

    pub async fn stop(self) {
        self.server.stop().await;
    }
}

pub fn bucket_path(ns: &str, name: &str) -> String {
    format!("/apis/keeper.dev/v1alpha1/namespaces/{ns}/s3buckets/{name}")
}

pub fn s3_api_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("keeper.dev", "v1alpha1", "S3Bucket"),
        "s3buckets",
    )
}

impl Env {
    /// Wait until the request log shows a request with this verb on this resource (e.g. a kubectl
    /// started in the background has opened its watch).
    pub async fn wait_for_request(&self, verb: &str, resource: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (_, _, log) = self.raw("GET", "/debug/requests", None, None).await;
            let seen = log["requests"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|r| r["verb"] == verb && r["resource"] == resource)
            });
            if seen {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {verb} on {resource} in time: {log}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
