//! Field ownership (`metadata.managedFields`) and server-side apply conflicts, checked against
//! what kube-apiserver records and answers; one module per concern, shared helpers here.

use crate::common::*;
use serde_json::{Value, json};

mod apply;
mod kubectl;
mod records;

const CM: &str = "/api/v1/namespaces/default/configmaps";

fn cm_path(name: &str) -> String {
    format!("{CM}/{name}")
}

/// A ConfigMap as an apply configuration or a create body.
fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

/// `(manager, operation, subresource)` of each managedFields entry, in order.
fn managers(obj: &Value) -> Vec<(String, String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("manager"), s("operation"), s("subresource"))
        })
        .collect()
}

/// The `fieldsV1` of the entry of `manager` with `operation`.
fn fields(obj: &Value, manager: &str, operation: &str) -> Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or_else(|| panic!("no {operation} entry of {manager}: {obj}"))
}

/// One field of each `details.causes` entry of an error.
fn causes<'a>(status: &'a Value, key: &str) -> Vec<&'a str> {
    status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| c[key].as_str().unwrap_or_default())
        .collect()
}

impl Env {
    /// Create ConfigMap `name` with `data` as `manager` (an update, as kubectl create does).
    async fn create_cm(&self, manager: &str, name: &str, data: Value) -> Value {
        self.ok(
            "POST",
            &format!("{CM}?fieldManager={manager}"),
            None,
            cm(name, data),
        )
        .await
    }

    /// Server-side apply `config` to `path` as `manager` (forced or not); (status, body).
    async fn apply_as(
        &self,
        path: &str,
        manager: &str,
        force: bool,
        config: Value,
    ) -> (u16, Value) {
        let (code, _, body) = self
            .raw(
                "PATCH",
                &format!("{path}?fieldManager={manager}&force={force}"),
                Some("application/apply-patch+yaml"),
                Some(config),
            )
            .await;
        (code, body)
    }

    /// A write that must succeed; returns the object.
    async fn ok(&self, method: &str, path: &str, ct: Option<&str>, body: Value) -> Value {
        let (code, _, got) = self.raw(method, path, ct, Some(body)).await;
        assert!((200..300).contains(&code), "{method} {path}: {code} {got}");
        got
    }

    /// A merge patch sent with `user_agent` and no fieldManager; (status, body).
    async fn raw_with_agent(
        &self,
        method: &str,
        path: &str,
        user_agent: &str,
        patch: Value,
    ) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let resp = self
            .http
            .request(m, format!("{}{}", self.url(), path))
            .header("User-Agent", user_agent)
            .header("Content-Type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
            .await
            .expect("request");
        let code = resp.status().as_u16();
        (code, resp.json().await.expect("json"))
    }

    async fn get_obj(&self, path: &str) -> Value {
        let (code, _, got) = self.raw("GET", path, None, None).await;
        assert_eq!(code, 200, "{got}");
        got
    }
}
