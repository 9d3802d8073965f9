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

/// Registers `hook` as webhook `deny.keeper.dev` (failurePolicy Fail) for `ops` on configmaps.
async fn register_deny(env: &Env, hook: &Hook, ops: Value) {
    let (code, _, body) = env
        .raw(
            "POST",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            None,
            Some(vwc("deny", &hook.url, &hook.ca_pem, "Fail", ops)),
        )
        .await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_denies_and_warns() {
    let env = Env::new().await;
    let hook = start_hook().await;
    register_deny(&env, &hook, json!(["CREATE", "UPDATE", "DELETE"])).await;
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

/// Polls `check` every 100 ms for at most 10 s.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..100 {
        if check().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_deletion_goes_through_admission_and_a_denial_keeps_it_terminating() {
    let env = Env::new().await;
    let hook = start_hook().await;
    register_deny(&env, &hook, json!(["DELETE"])).await;
    env.kubectl_ok(&["create", "namespace", "team"]).await;
    let cms = "/api/v1/namespaces/team/configmaps";
    for (name, deny) in [("plain", false), ("blocked", true)] {
        let (code, _, body) = env.raw("POST", cms, None, Some(cm(name, deny))).await;
        assert_eq!(code, 201, "{body}");
    }
    let (code, _, body) = env
        .raw("DELETE", "/api/v1/namespaces/team", None, None)
        .await;
    assert_eq!(code, 200, "{body}");

    // The namespace controller deletes what admission lets it, as its own user; the denied
    // object stays, and the namespace says why.
    let condition = |ns: &Value, type_: &str| {
        ns["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == type_).cloned())
            .unwrap_or(Value::Null)
    };
    let mut ns = Value::Null;
    eventually("the content failure condition", async || {
        ns = env
            .raw("GET", "/api/v1/namespaces/team", None, None)
            .await
            .2;
        condition(&ns, "NamespaceDeletionContentFailure")["status"] == "True"
    })
    .await;
    let failure = condition(&ns, "NamespaceDeletionContentFailure");
    assert_eq!(failure["reason"], "ContentDeletionFailed");
    assert_eq!(
        failure["message"],
        "Failed to delete all resource types, 1 remaining: admission webhook \"deny.keeper.dev\" denied the request: objects labelled deny=true are refused"
    );
    let remaining = condition(&ns, "NamespaceContentRemaining");
    assert_eq!(
        (
            &remaining["status"],
            &remaining["reason"],
            &remaining["message"]
        ),
        (
            &json!("True"),
            &json!("SomeResourcesRemain"),
            &json!("Some resources are remaining: configmaps has 1 resource instances")
        )
    );
    assert_eq!(
        condition(&ns, "NamespaceFinalizersRemaining")["status"],
        "False"
    );
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert_eq!(
        env.raw("GET", &format!("{cms}/plain"), None, None).await.0,
        404
    );
    let blocked = env
        .raw("GET", &format!("{cms}/blocked"), None, None)
        .await
        .2;
    assert!(
        blocked["metadata"]["deletionTimestamp"].is_null(),
        "{blocked}"
    );
    let reviews = hook.reviews.lock().unwrap().clone();
    let deletes: Vec<&Value> = reviews
        .iter()
        .filter(|r| r["request"]["operation"] == "DELETE")
        .collect();
    assert!(deletes.len() >= 2, "{reviews:#?}");
    for review in &deletes {
        assert_eq!(
            review["request"]["userInfo"]["username"],
            "system:serviceaccount:kube-system:namespace-controller"
        );
        assert_eq!(review["request"]["namespace"], "team");
        assert_eq!(review["request"]["options"]["kind"], "DeleteOptions");
    }

    // It keeps retrying: once the webhook admits, the namespace finishes.
    let seen = deletes.len();
    eventually("a retry", async || {
        hook.reviews
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r["request"]["operation"] == "DELETE")
            .count()
            > seen
    })
    .await;
    let (code, _, body) = env
        .raw(
            "PATCH",
            &format!("{cms}/blocked"),
            Some("application/merge-patch+json"),
            Some(json!({"metadata": {"labels": {"deny": "false"}}})),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    eventually("the namespace to go", async || {
        env.raw("GET", "/api/v1/namespaces/team", None, None)
            .await
            .0
            == 404
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminating_namespace_reports_the_finalizers_its_content_waits_on() {
    let env = Env::new().await;
    env.kubectl_ok(&["create", "namespace", "held"]).await;
    let mut held = cm("a", false);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let (code, _, body) = env
        .raw(
            "POST",
            "/api/v1/namespaces/held/configmaps",
            None,
            Some(held),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    env.raw("DELETE", "/api/v1/namespaces/held", None, None)
        .await;
    let mut ns = Value::Null;
    eventually("the finalizers condition", async || {
        ns = env
            .raw("GET", "/api/v1/namespaces/held", None, None)
            .await
            .2;
        ns["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "NamespaceFinalizersRemaining" && c["status"] == "True")
        })
    })
    .await;
    let conditions: Vec<Value> = ns["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| json!([c["type"], c["status"], c["reason"], c["message"]]))
        .collect();
    assert_eq!(
        conditions,
        [
            json!([
                "NamespaceDeletionDiscoveryFailure",
                "False",
                "ResourcesDiscovered",
                "All resources successfully discovered"
            ]),
            json!([
                "NamespaceDeletionGroupVersionParsingFailure",
                "False",
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed"
            ]),
            json!([
                "NamespaceDeletionContentFailure",
                "False",
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization"
            ]),
            json!([
                "NamespaceContentRemaining",
                "True",
                "SomeResourcesRemain",
                "Some resources are remaining: configmaps has 1 resource instances"
            ]),
            json!([
                "NamespaceFinalizersRemaining",
                "True",
                "SomeFinalizersRemain",
                "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
            ]),
        ]
    );
    // Removing the finalizer lets it go at once.
    let (code, _, _) = env
        .raw(
            "PATCH",
            "/api/v1/namespaces/held/configmaps/a",
            Some("application/merge-patch+json"),
            Some(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(
        env.raw("GET", "/api/v1/namespaces/held", None, None)
            .await
            .0,
        404
    );
    env.stop().await;
}
