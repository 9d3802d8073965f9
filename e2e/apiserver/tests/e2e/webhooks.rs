//! Validating admission webhooks: a throwaway CA (rcgen) and a tiny HTTPS server (tokio-rustls).

use crate::common::*;
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

struct Hook {
    url: String,
    ca_pem: String,
    reviews: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// HTTPS webhook: denies objects labelled deny=true (code 403), always warns.
async fn start_hook() -> Hook {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "keeper test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let reviews = Arc::new(Mutex::new(Vec::new()));
    let rv = reviews.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let rv = rv.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let rv = rv.clone();
                        async move {
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let review: Value = serde_json::from_slice(&body).unwrap();
                            rv.lock().unwrap().push(review.clone());
                            let r = &review["request"];
                            let obj = if r["object"].is_null() {
                                &r["oldObject"]
                            } else {
                                &r["object"]
                            };
                            let deny = obj["metadata"]["labels"]["deny"] == "true";
                            let mut resp = json!({"uid": r["uid"], "allowed": !deny, "warnings": ["checked by test webhook"]});
                            if deny {
                                resp["status"] = json!({"code": 403, "message": "objects labelled deny=true are refused"});
                            }
                            let out = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp});
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from(out.to_string()),
                            )))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    Hook {
        url: format!("https://127.0.0.1:{port}/validate"),
        ca_pem: ca_cert.pem(),
        reviews,
        task,
    }
}

fn vwc(name: &str, url: &str, ca_pem: &str, policy: &str, ops: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": {"name": name},
        "webhooks": [{"name": format!("{name}.keeper.dev"), "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": policy, "timeoutSeconds": 5,
            "clientConfig": {"url": url, "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem)},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ops, "resources": ["configmaps"], "scope": "Namespaced"}]}]})
}

fn cm(name: &str, deny: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"deny": deny.to_string()}}, "data": {"a": "b"}})
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_denies_and_warns() {
    let env = Env::new().await;
    let hook = start_hook().await;
    let (code, _, body) = env
        .raw(
            "POST",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            None,
            Some(vwc(
                "deny",
                &hook.url,
                &hook.ca_pem,
                "Fail",
                json!(["CREATE", "UPDATE", "DELETE"]),
            )),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    // Allowed, with the webhook's warning as a Warning header.
    let (code, warnings, _) = env.raw("POST", CMS, None, Some(cm("ok", false))).await;
    assert_eq!(code, 201);
    assert_eq!(
        warnings,
        vec!["299 - \"checked by test webhook\"".to_string()]
    );
    // Denied, with kube-apiserver's message and the webhook's code.
    let (code, _, st) = env.raw("POST", CMS, None, Some(cm("no", true))).await;
    assert_eq!(code, 403, "{st}");
    assert_eq!(
        st["message"],
        "admission webhook \"deny.keeper.dev\" denied the request: objects labelled deny=true are refused"
    );
    assert_eq!(
        env.raw("GET", &format!("{CMS}/no"), None, None).await.0,
        404
    );
    // kube-rs sees the same Status.
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.client().await, "default");
    let denied: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(cm("kube-rs", true)).unwrap();
    match api.create(&Default::default(), &denied).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert_eq!(
                s.message,
                "admission webhook \"deny.keeper.dev\" denied the request: objects labelled deny=true are refused"
            );
        }
        other => panic!("expected a denial, got {other:?}"),
    }
    // UPDATE carries oldObject; turning the label on is refused.
    let (code, _, _) = env
        .raw(
            "PATCH",
            &format!("{CMS}/ok"),
            Some("application/merge-patch+json"),
            Some(json!({"metadata": {"labels": {"deny": "true"}}})),
        )
        .await;
    assert_eq!(code, 403);
    // kubectl prints the warning and the denial.
    let r = env.kubectl(&["label", "configmap", "ok", "x=y"]).await;
    assert!(r.ok, "{}", r.stderr);
    assert!(
        r.stderr.contains("Warning: checked by test webhook"),
        "{}",
        r.stderr
    );
    let r = env
        .kubectl_in(
            &["apply", "-f", "-"],
            Some(&serde_json::to_string(&cm("kno", true)).unwrap()),
        )
        .await;
    assert!(!r.ok);
    assert!(r.stderr.contains("admission webhook \"deny.keeper.dev\" denied the request: objects labelled deny=true are refused"), "{}", r.stderr);
    // DELETE is reviewed with oldObject.
    let (code, _, _) = env.raw("DELETE", &format!("{CMS}/ok"), None, None).await;
    assert_eq!(code, 200);
    let reviews = hook.reviews.lock().unwrap().clone();
    let del = reviews
        .iter()
        .find(|r| r["request"]["operation"] == "DELETE")
        .expect("DELETE review");
    assert_eq!(del["request"]["oldObject"]["metadata"]["name"], "ok");
    assert!(del["request"]["object"].is_null());
    assert_eq!(
        del["request"]["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(del["request"]["namespace"], "default");
    let upd = reviews
        .iter()
        .find(|r| r["request"]["operation"] == "UPDATE")
        .expect("UPDATE review");
    assert_eq!(
        upd["request"]["oldObject"]["metadata"]["labels"]["deny"],
        "false"
    );
    assert_eq!(upd["request"]["kind"]["kind"], "ConfigMap");
    // Secrets are not matched by the rules.
    let before = hook.reviews.lock().unwrap().len();
    let (code, _, _) = env
        .raw(
            "POST",
            "/api/v1/namespaces/default/secrets",
            None,
            Some(json!({"metadata": {"name": "s"}})),
        )
        .await;
    assert_eq!(code, 201);
    assert_eq!(hook.reviews.lock().unwrap().len(), before);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_failure_policy_and_untrusted_ca() {
    let env = Env::new().await;
    let hook = start_hook().await;
    let other = start_hook().await;
    // Trusting another CA: the call fails; Fail refuses the request with 500.
    env.raw(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        None,
        Some(vwc(
            "strict",
            &hook.url,
            &other.ca_pem,
            "Fail",
            json!(["CREATE"]),
        )),
    )
    .await;
    let (code, _, st) = env.raw("POST", CMS, None, Some(cm("a", false))).await;
    assert_eq!(code, 500, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("Internal error occurred: failed calling webhook \"strict.keeper.dev\""),
        "{st}"
    );
    assert!(hook.reviews.lock().unwrap().is_empty());
    env.raw(
        "DELETE",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/strict",
        None,
        None,
    )
    .await;
    // A webhook that never answers: timeoutSeconds bounds the wait, then Fail refuses.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("https://{}/validate", silent.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = silent.accept().await {
            conns.push(c);
        }
    });
    let mut cfg = vwc("slow", &silent_url, &hook.ca_pem, "Fail", json!(["CREATE"]));
    cfg["webhooks"][0]["timeoutSeconds"] = json!(1);
    env.raw(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        None,
        Some(cfg),
    )
    .await;
    let start = std::time::Instant::now();
    let (code, _, st) = env.raw("POST", CMS, None, Some(cm("slow", false))).await;
    assert_eq!(code, 500, "{st}");
    assert!(
        start.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    hold.abort();
    env.raw(
        "DELETE",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/slow",
        None,
        None,
    )
    .await;
    // Ignore lets the request through when the webhook is unreachable.
    env.raw(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        None,
        Some(vwc(
            "lenient",
            "https://127.0.0.1:1/none",
            &hook.ca_pem,
            "Ignore",
            json!(["*"]),
        )),
    )
    .await;
    let (code, _, _) = env.raw("POST", CMS, None, Some(cm("b", true))).await;
    assert_eq!(code, 201);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_service_reference_needs_a_mapping() {
    let hook = start_hook().await;
    let port: u16 = hook
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/validate")
        .parse()
        .unwrap();
    let config = keeper_e2e_apiserver::Config {
        webhook_services: [("keeper-system/keeper-webhook".to_string(), port)].into(),
        ..keeper_e2e_apiserver::Config::default()
    };
    let env = Env::with(config).await;
    let mut cfg = vwc("mapped", "", &hook.ca_pem, "Fail", json!(["CREATE"]));
    cfg["webhooks"][0]["clientConfig"] = json!({"service": {"namespace": "keeper-system", "name": "keeper-webhook", "path": "/validate", "port": 443},
        "caBundle": base64::engine::general_purpose::STANDARD.encode(&hook.ca_pem)});
    let (code, _, body) = env
        .raw(
            "POST",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            None,
            Some(cfg.clone()),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let (code, _, st) = env.raw("POST", CMS, None, Some(cm("no", true))).await;
    assert_eq!(code, 403, "{st}");
    assert_eq!(hook.reviews.lock().unwrap().len(), 1);
    // An unmapped service cannot be called: failurePolicy Fail refuses.
    cfg["metadata"]["name"] = json!("unmapped");
    cfg["webhooks"][0]["name"] = json!("unmapped.keeper.dev");
    cfg["webhooks"][0]["clientConfig"]["service"]["name"] = json!("elsewhere");
    env.raw(
        "POST",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        None,
        Some(cfg),
    )
    .await;
    let (code, _, st) = env.raw("POST", CMS, None, Some(cm("yes", false))).await;
    assert_eq!(code, 500, "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .contains("keeper-system/elsewhere has no local port mapping"),
        "{st}"
    );
    env.stop().await;
}
