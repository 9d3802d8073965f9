//! Shared harness: a private moto server plus an in-process emulator on free 127.0.0.1 ports.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use keeper_e2e_storagegrid::moto::MotoServer;
use keeper_e2e_storagegrid::{Config, Emulator};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

pub const ADMIN_PASSWORD: &str = "grid-admin-pass";
pub const TENANT_PASSWORD: &str = "tenant-root-pass";

pub struct Stack {
    // Field order = drop order: the emulator goes before moto.
    pub emu: Emulator,
    pub moto: MotoServer,
    pub http: reqwest::Client,
}

pub struct Resp {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Resp {
    pub fn data(&self) -> &Value {
        &self.body["data"]
    }

    /// Asserts the contract's error envelope and returns self.
    pub fn assert_error(self, status: u16) -> Self {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.body);
        assert_eq!(self.body["status"], "error", "{}", self.body);
        assert_eq!(self.body["code"], json!(status), "{}", self.body);
        assert!(
            self.body["message"].is_object(),
            "message must be an object: {}",
            self.body
        );
        assert!(self.body["message"]["text"].is_string(), "{}", self.body);
        assert!(self.body["apiVersion"].is_string(), "{}", self.body);
        assert!(self.body["responseTime"].is_string(), "{}", self.body);
        self
    }

    pub fn assert_ok(self, status: u16) -> Self {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.body);
        if status != 204 {
            assert_eq!(self.body["status"], "success", "{}", self.body);
            assert_eq!(self.body["apiVersion"], "4.0", "{}", self.body);
            assert!(
                self.body["responseTime"]
                    .as_str()
                    .is_some_and(|t| t.ends_with('Z')),
                "{}",
                self.body
            );
            assert!(self.body.get("data").is_some(), "{}", self.body);
        } else {
            assert!(self.body.is_null(), "204 must have no body: {}", self.body);
        }
        self
    }
}

impl Stack {
    pub async fn start() -> Stack {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(f: impl FnOnce(&mut Config)) -> Stack {
        let moto = MotoServer::start()
            .await
            .expect("start moto (set KEEPER_MOTO_SERVER)");
        let mut cfg = Config::new(moto.endpoint(), "root", ADMIN_PASSWORD);
        f(&mut cfg);
        let emu = keeper_e2e_storagegrid::start(cfg)
            .await
            .expect("start emulator");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        Stack { emu, moto, http }
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}/api/v4{}", self.emu.management_url(), path)
    }

    pub async fn raw(
        &self,
        method: Method,
        url: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        let mut req = self.http.request(method, url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&bytes)}))
        };
        Resp {
            status,
            headers,
            body,
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        self.raw(method, &self.api(path), token, body).await
    }

    pub async fn get(&self, path: &str, token: &str) -> Resp {
        self.call(Method::GET, path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Resp {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    pub async fn put(&self, path: &str, token: &str, body: Value) -> Resp {
        self.call(Method::PUT, path, Some(token), Some(body)).await
    }

    pub async fn delete(&self, path: &str, token: &str) -> Resp {
        self.call(Method::DELETE, path, Some(token), None).await
    }

    pub async fn grid_token(&self) -> String {
        let r = self
            .call(Method::POST, "/authorize", None, Some(json!({"username":"root","password":ADMIN_PASSWORD,"cookie":false,"csrfToken":false})))
            .await
            .assert_ok(200);
        r.data().as_str().unwrap().to_owned()
    }

    /// Creates a tenant with management + s3 and the given root password; returns its id.
    pub async fn create_account(&self, grid: &str, name: &str) -> String {
        let r = self
            .post(
                "/grid/accounts",
                grid,
                json!({"name": name, "capabilities": ["management", "s3"],
                       "policy": {"useAccountIdentitySource": false, "allowPlatformServices": false, "quotaObjectBytes": null},
                       "password": TENANT_PASSWORD}),
            )
            .await
            .assert_ok(201);
        r.data()["id"].as_str().unwrap().to_owned()
    }

    pub async fn tenant_token(&self, account: &str, user: &str, password: &str) -> String {
        let r = self
            .call(
                Method::POST,
                "/authorize",
                None,
                Some(json!({"username":user,"password":password,"accountId":account})),
            )
            .await
            .assert_ok(200);
        r.data().as_str().unwrap().to_owned()
    }

    /// A fresh tenant and its root token.
    pub async fn tenant(&self, grid: &str, name: &str) -> (String, String) {
        let id = self.create_account(grid, name).await;
        let token = self.tenant_token(&id, "root", TENANT_PASSWORD).await;
        (id, token)
    }

    pub async fn create_bucket(&self, tenant: &str, name: &str) {
        self.post(
            "/org/containers",
            tenant,
            json!({"name": name, "region": "us-east-1"}),
        )
        .await
        .assert_ok(201);
    }

    /// Creates an S3 key for `user` (`current-user` or a user id): (access key, secret).
    pub async fn key(&self, tenant: &str, user: &str) -> (String, String) {
        let r = self
            .post(
                &format!("/org/users/{user}/s3-access-keys"),
                tenant,
                json!({"expires": null}),
            )
            .await
            .assert_ok(201);
        (
            r.data()["accessKey"].as_str().unwrap().to_owned(),
            r.data()["secretAccessKey"].as_str().unwrap().to_owned(),
        )
    }

    pub fn s3(&self, key: &(String, String)) -> aws_sdk_s3::Client {
        s3_client(self.emu.s3_url(), &key.0, &key.1)
    }

    /// `(objectCount, dataBytes)` of one bucket from `GET /org/usage`.
    pub async fn bucket_usage(&self, tenant: &str, bucket: &str) -> (u64, u64) {
        let r = self.get("/org/usage", tenant).await.assert_ok(200);
        let b = r.data()["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == bucket)
            .unwrap_or_else(|| panic!("bucket {bucket} missing in usage: {}", r.body))
            .clone();
        (
            b["objectCount"].as_u64().unwrap(),
            b["dataBytes"].as_u64().unwrap(),
        )
    }

    pub async fn put_objects(&self, s3: &aws_sdk_s3::Client, bucket: &str, n: usize, size: usize) {
        for i in 0..n {
            s3.put_object()
                .bucket(bucket)
                .key(format!("obj-{i:04}"))
                .body(vec![b'x'; size].into())
                .send()
                .await
                .unwrap_or_else(|e| panic!("put obj-{i}: {e:?}"));
        }
    }
}

pub fn s3_client(endpoint: &str, akid: &str, secret: &str) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(akid, secret, None, None, "test"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// The S3 error code of a failed SDK call.
pub fn s3_code<E: aws_sdk_s3::error::ProvideErrorMetadata, R>(
    r: Result<impl Sized, aws_sdk_s3::error::SdkError<E, R>>,
) -> String {
    match r {
        Ok(_) => "OK".into(),
        Err(e) => aws_sdk_s3::error::ProvideErrorMetadata::code(&e)
            .unwrap_or("<no code>")
            .to_owned(),
    }
}

/// Polls `f` until it returns Some or the timeout passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
