//! The proxy between a client and a stand-in for kube-apiserver (TLS, a CA of the test's own):
//! what passes through unchanged, what the fault rules change, and that a watch is streamed.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use keeper_e2e_apiproxy::{ApiProxy, Config, Settings};
use serde_json::json;

/// A CA and a certificate for 127.0.0.1 it signed, written as PEM files into a fresh directory.
struct Pki {
    dir: std::path::PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = std::env::temp_dir().join(format!(
            "keeper-apiproxy-test-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
        std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
        Pki { dir }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The stand-in for kube-apiserver: echoes what it received; a watch sends one event at once
/// and the next only after a minute; counts the requests that reached it.
struct Upstream {
    url: String,
    requests: Arc<AtomicUsize>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn upstream_answer(
    request: Request<Incoming>,
    requests: Arc<AtomicUsize>,
) -> Result<Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>, Infallible> {
    requests.fetch_add(1, Ordering::SeqCst);
    let watch = request
        .uri()
        .query()
        .is_some_and(|q| q.contains("watch=true"));
    if watch {
        let events = paced(vec![
            (Duration::ZERO, "{\"type\":\"ADDED\",\"object\":{}}\n"),
            (
                Duration::from_secs(60),
                "{\"type\":\"MODIFIED\",\"object\":{}}\n",
            ),
        ]);
        return Ok(Response::new(StreamBody::new(events).boxed()));
    }
    let method = request.method().to_string();
    let path = request.uri().to_string();
    let authorization = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let echo = json!({"method": method, "path": path, "authorization": authorization,
        "body": String::from_utf8_lossy(&body)});
    Ok(Response::new(
        http_body_util::Full::new(Bytes::from(echo.to_string())).boxed(),
    ))
}

/// A stream of body frames, each sent after its delay.
fn paced(
    items: Vec<(Duration, &'static str)>,
) -> impl futures::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send {
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        for (delay, text) in items {
            tokio::time::sleep(delay).await;
            if tx.send(Ok(Frame::data(Bytes::from(text)))).await.is_err() {
                return;
            }
        }
    });
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

impl Upstream {
    async fn start(pki: &Pki) -> Upstream {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(pki.path("tls.crt"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        use rustls::pki_types::pem::PemObject;
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(pki.path("tls.key")).unwrap();
        let tls = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let counter = requests.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    accepted = listener.accept() => accepted.unwrap(),
                    _ = &mut stopped => return,
                };
                let (acceptor, counter) = (acceptor.clone(), counter.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service =
                        hyper::service::service_fn(move |r| upstream_answer(r, counter.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Upstream {
            url,
            requests,
            _stop: stop,
        }
    }
}

fn client(pki: &Pki) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.path("ca.crt")).unwrap()).unwrap();
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .build()
        .unwrap()
}

fn proxy(pki: &Pki, upstream: &Upstream) -> ApiProxy {
    ApiProxy::start(Config {
        upstream: upstream.url.clone(),
        upstream_ca: pki.path("ca.crt"),
        cert: pki.path("tls.crt"),
        key: pki.path("tls.key"),
    })
    .unwrap()
}

fn faults(value: serde_json::Value) -> Settings {
    Settings::from_json(value).unwrap()
}

#[tokio::test]
async fn requests_pass_through_unchanged_with_the_clients_token() {
    let pki = Pki::new();
    let upstream = Upstream::start(&pki).await;
    let proxy = proxy(&pki, &upstream);
    assert!(proxy.url().starts_with("https://127.0.0.1:"));
    let answer: serde_json::Value = client(&pki)
        .post(format!(
            "{}/api/v1/namespaces/a/secrets?fieldManager=keeper",
            proxy.url()
        ))
        .bearer_auth("the-token")
        .body("{\"kind\":\"Secret\"}")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        answer,
        json!({"method": "POST", "path": "/api/v1/namespaces/a/secrets?fieldManager=keeper",
            "authorization": "Bearer the-token", "body": "{\"kind\":\"Secret\"}"})
    );
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn refused_requests_never_reach_kube_apiserver_and_answer_its_status() {
    let pki = Pki::new();
    let upstream = Upstream::start(&pki).await;
    let proxy = proxy(&pki, &upstream);
    proxy.set_faults(faults(json!({"seed": 1, "rules": [
        {"resource": "secrets", "verbs": ["get"], "share": 1, "codes": [429], "retryAfterSeconds": 3},
    ]})));
    let client = client(&pki);
    let refused = client
        .get(format!("{}/api/v1/namespaces/a/secrets/s", proxy.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "3");
    let status: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(
        (status["kind"].as_str(), status["reason"].as_str()),
        (Some("Status"), Some("TooManyRequests"))
    );
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 0);
    // Another verb is passed on.
    let listed = client
        .get(format!("{}/api/v1/namespaces/a/secrets", proxy.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 1);
    assert_eq!(proxy.counters()[0].answered[&429], 1);
    proxy.clear_faults();
    let served = client
        .get(format!("{}/api/v1/namespaces/a/secrets/s", proxy.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
}

#[tokio::test]
async fn a_lost_answer_is_served_upstream_and_the_client_sees_its_connection_close() {
    let pki = Pki::new();
    let upstream = Upstream::start(&pki).await;
    let proxy = proxy(&pki, &upstream);
    proxy.set_faults(faults(
        json!({"rules": [{"verbs": ["create"], "lostShare": 1}]}),
    ));
    let lost = client(&pki)
        .post(format!("{}/api/v1/namespaces/a/secrets", proxy.url()))
        .body("{}")
        .send()
        .await;
    assert!(lost.is_err(), "the client got an answer: {lost:?}");
    assert_eq!(
        upstream.requests.load(Ordering::SeqCst),
        1,
        "the create reached kube-apiserver"
    );
    assert_eq!(proxy.counters()[0].lost, 1);
}

#[tokio::test]
async fn a_watch_is_streamed_as_it_comes_and_cut_cleanly_when_a_rule_says() {
    let pki = Pki::new();
    let upstream = Upstream::start(&pki).await;
    let proxy = proxy(&pki, &upstream);
    let client = client(&pki);
    let url = format!("{}/api/v1/secrets?watch=true", proxy.url());

    // No rule: the first event arrives at once although the upstream's response goes on.
    let mut watch = client.get(&url).send().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), watch.chunk())
        .await
        .expect("the first event was held back")
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("ADDED"));
    drop(watch);

    proxy.set_faults(faults(
        json!({"rules": [{"verbs": ["watch"], "closeWatchAfterSeconds": 1}]}),
    ));
    let started = Instant::now();
    let mut watch = client.get(&url).send().await.unwrap();
    let mut events = 0;
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), watch.chunk())
        .await
        .expect("the watch was not cut")
        .expect("the watch ends cleanly, not with an error")
    {
        events += String::from_utf8_lossy(&chunk).lines().count();
    }
    assert_eq!(events, 1);
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(proxy.counters()[0].watches_limited, 1);
}

#[test]
fn a_kubeconfig_is_pointed_at_the_proxy_and_keeps_its_credentials() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pki = Pki::new();
    let upstream = rt.block_on(Upstream::start(&pki));
    let proxy = proxy(&pki, &upstream);
    let original = pki.path("kubeconfig");
    std::fs::write(
        &original,
        "apiVersion: v1\nclusters:\n  - name: c\n    cluster:\n      server: https://127.0.0.1:6443\n      certificate-authority-data: Q0E=\nusers:\n  - name: u\n    user:\n      token: t\n",
    )
    .unwrap();
    let pointed = pki.path("kubeconfig.proxy");
    proxy.kubeconfig(&original, &pointed).unwrap();
    let text = std::fs::read_to_string(&pointed).unwrap();
    assert!(
        text.contains(&format!("      server: {}\n", proxy.url())),
        "{text}"
    );
    assert!(text.contains("certificate-authority-data: Q0E=") && text.contains("token: t"));
    assert!(!text.contains("6443"));
    std::fs::write(&original, "apiVersion: v1\n").unwrap();
    assert!(proxy.kubeconfig(&original, &pointed).is_err());
    assert!(Path::new(&pointed).exists());
}
