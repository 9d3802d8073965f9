use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use k8s_openapi::ByteString;
use kube::api::ObjectMeta;

use super::issue::pem_blocks;
use super::plan::signed_by;
use super::*;

const NOW: i64 = 1_800_000_000;
const DAY: i64 = 24 * 3600;
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

fn hosts() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into()]
}

fn issued(now: i64) -> Material {
    issue(&Plan::NewCa("test".into()), None, &hosts(), YEAR, now).unwrap()
}

fn first(pem: &str) -> Facts {
    facts(&ders(pem).unwrap()[0]).unwrap()
}

#[test]
fn a_service_certificate_covers_the_name_the_api_server_verifies() {
    let hosts = service_hosts("keeper", "keeper-system");
    assert_eq!(hosts[0], "keeper.keeper-system.svc");
    for name in [
        "keeper.keeper-system.svc.cluster.local",
        "keeper.keeper-system",
        "keeper",
    ] {
        assert!(hosts.contains(&name.to_string()), "{hosts:?}");
    }
}

#[test]
fn a_new_certificate_covers_its_hosts_and_is_signed_by_a_new_ca() {
    let material = issued(NOW);
    let ca = first(&material.ca_bundle);
    let leaf = first(&material.cert);
    assert!(ca.is_ca && !leaf.is_ca);
    assert_eq!(leaf.names, vec!["localhost", "127.0.0.1"]);
    assert_eq!(leaf.not_after, NOW + YEAR.as_secs() as i64);
    assert!(leaf.not_before <= NOW && leaf.not_before >= NOW - 60);
    assert_eq!(ca.not_after, NOW + CA_VALIDITY.as_secs() as i64);
    assert_eq!(pem_blocks(&material.ca_bundle).len(), 1);
    let (leaf_der, ca_der) = (
        ders(&material.cert).unwrap()[0].clone(),
        ders(&material.ca_bundle).unwrap()[0].clone(),
    );
    assert!(signed_by(&leaf_der, &ca_der));
    // Another CA did not sign it.
    let other = issued(NOW);
    assert!(!signed_by(&leaf_der, &ders(&other.ca_bundle).unwrap()[0]));
}

#[test]
fn a_certificate_is_kept_until_two_thirds_of_its_validity_then_renewed_from_the_same_ca() {
    let material = issued(NOW);
    let leaf = first(&material.cert);
    let due = renew_at(leaf.not_before, leaf.not_after);
    assert!(due > NOW + 240 * DAY && due < NOW + 245 * DAY, "{due}");
    assert_eq!(
        plan(Some(&material), &hosts(), YEAR, NOW),
        Plan::Keep { renew_at: due }
    );
    assert_eq!(
        plan(Some(&material), &hosts(), YEAR, due - 1),
        Plan::Keep { renew_at: due }
    );
    let renewal = plan(Some(&material), &hosts(), YEAR, due);
    assert!(
        matches!(&renewal, Plan::NewCertificate(why) if why.contains("due for renewal")),
        "{renewal:?}"
    );
    let renewed = issue(&renewal, Some(&material), &hosts(), YEAR, due).unwrap();
    assert_eq!(renewed.ca_bundle, material.ca_bundle, "the CA stays");
    assert_eq!(renewed.ca_key, material.ca_key);
    assert_ne!(renewed.cert, material.cert);
    assert_ne!(renewed.key, material.key);
    assert!(matches!(
        plan(Some(&renewed), &hosts(), YEAR, due),
        Plan::Keep { .. }
    ));
}

#[test]
fn a_certificate_missing_a_host_or_not_matching_is_replaced() {
    let material = issued(NOW);
    let mut more = hosts();
    more.push("keeper.keeper-system.svc".into());
    assert_eq!(
        plan(Some(&material), &more, YEAR, NOW),
        Plan::NewCertificate("the certificate does not cover keeper.keeper-system.svc".into())
    );
    let other = issued(NOW);
    let foreign = Material {
        cert: other.cert.clone(),
        key: other.key.clone(),
        ..material.clone()
    };
    assert_eq!(
        plan(Some(&foreign), &hosts(), YEAR, NOW),
        Plan::NewCertificate("the certificate is not signed by the current CA".into())
    );
    let mismatched = Material {
        key: other.key.clone(),
        ..material.clone()
    };
    assert_eq!(
        plan(Some(&mismatched), &hosts(), YEAR, NOW),
        Plan::NewCertificate("the stored key does not match the certificate".into())
    );
    let garbage = Material {
        cert: "garbage".into(),
        ..material.clone()
    };
    assert!(matches!(
        plan(Some(&garbage), &hosts(), YEAR, NOW),
        Plan::NewCertificate(_)
    ));
    for broken in [
        Material {
            ca_bundle: "garbage".into(),
            ..material.clone()
        },
        Material {
            ca_key: "garbage".into(),
            ..material.clone()
        },
        Material {
            ca_bundle: material.cert.clone(),
            ..material.clone()
        },
    ] {
        assert!(
            matches!(plan(Some(&broken), &hosts(), YEAR, NOW), Plan::NewCa(_)),
            "{broken:?}"
        );
    }
    assert_eq!(
        plan(None, &hosts(), YEAR, NOW),
        Plan::NewCa("no certificate yet".into())
    );
}

#[test]
fn a_ca_is_renewed_while_the_old_one_stays_trusted_until_it_expires() {
    let material = issued(NOW);
    let ca = first(&material.ca_bundle);
    // Two thirds of the way through its ten years, as a serving certificate.
    let due = renew_at(ca.not_before, ca.not_after);
    assert!(matches!(
        plan(Some(&material), &hosts(), YEAR, due - 1),
        Plan::NewCertificate(_)
    ));
    let plan_due = plan(Some(&material), &hosts(), YEAR, due);
    assert!(
        matches!(&plan_due, Plan::NewCa(why) if why.contains("CA is due")),
        "{plan_due:?}"
    );
    // Earlier when it would not outlive a whole serving certificate.
    let five_years = Duration::from_secs(5 * YEAR.as_secs());
    let long = issue(&Plan::NewCa("test".into()), None, &hosts(), five_years, NOW).unwrap();
    let long_ca = first(&long.ca_bundle);
    let outlive = long_ca.not_after - five_years.as_secs() as i64;
    assert!(outlive < renew_at(long_ca.not_before, long_ca.not_after));
    let fresh = issue(
        &Plan::NewCertificate("test".into()),
        Some(&long),
        &hosts(),
        five_years,
        outlive - 10,
    )
    .unwrap();
    assert_eq!(
        plan(Some(&fresh), &hosts(), five_years, outlive - 1),
        Plan::Keep { renew_at: outlive }
    );
    assert!(matches!(
        plan(Some(&fresh), &hosts(), five_years, outlive),
        Plan::NewCa(_)
    ));
    let rotated = issue(&plan_due, Some(&material), &hosts(), YEAR, due).unwrap();
    let bundle = pem_blocks(&rotated.ca_bundle);
    assert_eq!(bundle.len(), 2, "the new CA, then the old one");
    assert_eq!(bundle[1], pem_blocks(&material.ca_bundle)[0]);
    let new_ca = ders(&bundle[0]).unwrap()[0].clone();
    let old_ca = ders(&bundle[1]).unwrap()[0].clone();
    assert!(signed_by(&ders(&rotated.cert).unwrap()[0], &new_ca));
    // A replica still serving the old certificate is trusted through the old CA.
    assert!(signed_by(&ders(&material.cert).unwrap()[0], &old_ca));
    assert!(matches!(
        plan(Some(&rotated), &hosts(), YEAR, due),
        Plan::Keep { .. }
    ));

    // Once the old CA has expired, the next CA leaves it out.
    let later = first(&bundle[0]).not_after - YEAR.as_secs() as i64;
    assert!(later > ca.not_after);
    let next = issue(
        &Plan::NewCa("test".into()),
        Some(&rotated),
        &hosts(),
        YEAR,
        later,
    )
    .unwrap();
    let next_bundle = pem_blocks(&next.ca_bundle);
    assert_eq!(next_bundle.len(), 2, "the newest CA and the one before");
    assert_eq!(next_bundle[1], bundle[0]);
}

#[test]
fn the_ca_bundle_patch_touches_only_webhooks_that_differ_and_tests_their_names() {
    let bundle = b"-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n";
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "keeper"},
        "webhooks": [
            {"name": "a.keeper.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
             "clientConfig": {"url": "https://127.0.0.1/validate", "caBundle": "Zm9v"}},
            {"name": "b.keeper.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
             "clientConfig": {"url": "https://127.0.0.1/validate",
                              "caBundle": serde_json::to_value(ByteString(bundle.to_vec())).unwrap()}},
            {"name": "c.keeper.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
             "clientConfig": {"url": "https://127.0.0.1/validate"}}
        ]
    }))
    .unwrap();
    let encoded = serde_json::to_value(ByteString(bundle.to_vec())).unwrap();
    assert_eq!(
        ca_bundle_patch(&config, bundle),
        vec![
            json!({"op": "test", "path": "/webhooks/0/name", "value": "a.keeper.dev"}),
            json!({"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": encoded}),
            json!({"op": "test", "path": "/webhooks/2/name", "value": "c.keeper.dev"}),
            json!({"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": encoded}),
        ]
    );
    let mut done = config.clone();
    for webhook in done.webhooks.iter_mut().flatten() {
        webhook.client_config.ca_bundle = Some(ByteString(bundle.to_vec()));
    }
    assert!(ca_bundle_patch(&done, bundle).is_empty());
}

// --- Against a mock API server ---

const SECRET_PATH: &str = "/api/v1/namespaces/keeper-system/secrets/keeper-webhook-tls";
const SECRETS_PATH: &str = "/api/v1/namespaces/keeper-system/secrets";
const CONFIG_PATH: &str =
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/keeper";

fn settings() -> Settings {
    Settings {
        namespace: "keeper-system".into(),
        secret: "keeper-webhook-tls".into(),
        webhook_configuration: "keeper".into(),
        hosts: hosts(),
        validity: YEAR,
    }
}

fn status(code: u16, reason: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(code).set_body_json(json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": message, "reason": reason, "code": code
    }))
}

fn configuration(ca_bundle: Option<&str>) -> Value {
    let mut client_config = json!({"url": "https://127.0.0.1:9443/validate"});
    if let Some(bundle) = ca_bundle {
        client_config["caBundle"] = serde_json::to_value(ByteString(bundle.into())).unwrap();
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "keeper", "resourceVersion": "7"},
        "webhooks": [{"name": "validate.keeper.dev", "admissionReviewVersions": ["v1"],
                      "sideEffects": "None", "clientConfig": client_config}]
    })
}

fn stored_secret(material: &Material, annotated: bool) -> Value {
    let mut secret = serde_json::to_value(Secret {
        metadata: ObjectMeta {
            name: Some("keeper-webhook-tls".into()),
            namespace: Some("keeper-system".into()),
            resource_version: Some("42".into()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(material.data()),
        ..Secret::default()
    })
    .unwrap();
    if annotated {
        secret["metadata"]["annotations"] = json!({MANAGED_ANNOTATION: MANAGED_VALUE});
    }
    secret
}

fn client(server: &MockServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.uri().parse().unwrap())).unwrap()
}

/// Makes `server` answer `verb` requests to `at` with `response`.
async fn answer(server: &MockServer, verb: &str, at: &str, response: impl Respond + 'static) {
    Mock::given(method(verb))
        .and(path(at))
        .respond_with(response)
        .mount(server)
        .await;
}

/// Makes `server` an API server where GET of the Secret answers `secret` and GET of the
/// configuration answers `configuration`.
async fn api_with(server: &MockServer, secret: ResponseTemplate, configuration: ResponseTemplate) {
    answer(server, "GET", SECRET_PATH, secret).await;
    answer(server, "GET", CONFIG_PATH, configuration).await;
}

async fn requests(server: &MockServer, verb: &str, at: &str) -> Vec<Request> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.method.as_str() == verb && r.url.path() == at)
        .collect()
}

#[tokio::test]
async fn a_first_round_creates_the_secret_sets_the_ca_bundle_and_serves_the_certificate() {
    let server = crate::test_support::mock_server().await;
    answer(
        &server,
        "GET",
        SECRET_PATH,
        status(404, "NotFound", "secrets \"keeper-webhook-tls\" not found"),
    )
    .await;
    answer(&server, "POST", SECRETS_PATH, |req: &Request| {
        ResponseTemplate::new(201).set_body_bytes(req.body.clone())
    })
    .await;
    answer(
        &server,
        "GET",
        CONFIG_PATH,
        ResponseTemplate::new(200).set_body_json(configuration(None)),
    )
    .await;
    answer(
        &server,
        "PATCH",
        CONFIG_PATH,
        ResponseTemplate::new(200).set_body_json(configuration(None)),
    )
    .await;

    let served = Arc::new(MemoryCert::default());
    let mut installed = None;
    let due = round(
        &client(&server),
        &settings(),
        &served,
        &mut installed,
        unix_now(),
    )
    .await
    .unwrap();
    assert!(
        due > unix_now() + 200 * DAY,
        "renewed in about eight months: {due}"
    );
    let material = installed.clone().expect("a certificate is served");
    assert!(served.is_set());

    let created = requests(&server, "POST", SECRETS_PATH).await;
    assert_eq!(created.len(), 1);
    let created: Secret = serde_json::from_slice(&created[0].body).unwrap();
    assert_eq!(Material::from_secret(&created), Some(material.clone()));
    assert_eq!(created.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(
        created.metadata.annotations.unwrap()[MANAGED_ANNOTATION],
        MANAGED_VALUE
    );
    let patches = requests(&server, "PATCH", CONFIG_PATH).await;
    assert_eq!(patches.len(), 1);
    assert_eq!(
        patches[0]
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json-patch+json")
    );
    let ops: Value = serde_json::from_slice(&patches[0].body).unwrap();
    assert_eq!(
        ops[1]["value"],
        serde_json::to_value(ByteString(material.ca_bundle.clone().into_bytes())).unwrap()
    );

    // The webhook serves it, and a client trusting the CA of the Secret accepts it.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(crate::webhook::serve(
        listener,
        crate::webhook::tls_config_from_memory(served.clone()).unwrap(),
        Arc::new(crate::cluster::fake::FakeKube::default()),
        shutdown.clone(),
    ));
    let https = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(material.ca_bundle.as_bytes()).unwrap()])
        .build()
        .unwrap();
    for host in ["localhost", "127.0.0.1"] {
        let response = https
            .post(format!("https://{host}:{port}/other"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404);
    }
    shutdown.cancel();
    task.await.unwrap().unwrap();

    // The next round finds everything in place and writes nothing.
    server.reset().await;
    api_with(
        &server,
        ResponseTemplate::new(200).set_body_json(stored_secret(&material, true)),
        ResponseTemplate::new(200).set_body_json(configuration(Some(&material.ca_bundle))),
    )
    .await;
    round(
        &client(&server),
        &settings(),
        &served,
        &mut installed,
        unix_now(),
    )
    .await
    .unwrap();
    let writes: Vec<_> = server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.method.as_str() != "GET")
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
}

#[tokio::test]
async fn a_replica_that_loses_the_create_race_uses_the_winners_secret() {
    let server = crate::test_support::mock_server().await;
    let winner = issued(unix_now());
    // The first read finds nothing, the second what the winner wrote.
    Mock::given(method("GET"))
        .and(path(SECRET_PATH))
        .respond_with(status(404, "NotFound", "not found"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    answer(
        &server,
        "GET",
        SECRET_PATH,
        ResponseTemplate::new(200).set_body_json(stored_secret(&winner, true)),
    )
    .await;
    answer(
        &server,
        "POST",
        SECRETS_PATH,
        status(
            409,
            "AlreadyExists",
            "secrets \"keeper-webhook-tls\" already exists",
        ),
    )
    .await;
    let secrets: Api<Secret> = Api::namespaced(client(&server), "keeper-system");
    let material = converge_secret(&secrets, &settings(), unix_now())
        .await
        .unwrap();
    assert_eq!(material, winner);
    assert_eq!(requests(&server, "POST", SECRETS_PATH).await.len(), 1);
    assert!(requests(&server, "PATCH", SECRET_PATH).await.is_empty());
}

#[tokio::test]
async fn a_due_certificate_is_replaced_with_the_resource_version_read() {
    let server = crate::test_support::mock_server().await;
    let old = issued(NOW);
    answer(
        &server,
        "GET",
        SECRET_PATH,
        ResponseTemplate::new(200).set_body_json(stored_secret(&old, true)),
    )
    .await;
    answer(
        &server,
        "PATCH",
        SECRET_PATH,
        ResponseTemplate::new(200).set_body_json(stored_secret(&old, true)),
    )
    .await;
    let secrets: Api<Secret> = Api::namespaced(client(&server), "keeper-system");
    let later = NOW + 300 * DAY;
    let renewed = converge_secret(&secrets, &settings(), later).await.unwrap();
    assert_eq!(renewed.ca_bundle, old.ca_bundle);
    assert_ne!(renewed.cert, old.cert);
    let patches = requests(&server, "PATCH", SECRET_PATH).await;
    assert_eq!(patches.len(), 1);
    let body: Value = serde_json::from_slice(&patches[0].body).unwrap();
    assert_eq!(body["metadata"]["resourceVersion"], "42");
    let written: Secret = serde_json::from_value(json!({"data": body["data"]})).unwrap();
    assert_eq!(Material::from_secret(&written), Some(renewed));
}

#[tokio::test]
async fn a_missing_permission_is_named_and_the_old_certificate_stays_served() {
    let server = crate::test_support::mock_server().await;
    // Another replica rotated the CA; this one may not patch the configuration.
    let old = issued(unix_now());
    let rotated = issue(
        &Plan::NewCa("test".into()),
        Some(&old),
        &hosts(),
        YEAR,
        unix_now(),
    )
    .unwrap();
    api_with(
        &server,
        ResponseTemplate::new(200).set_body_json(stored_secret(&rotated, true)),
        ResponseTemplate::new(200).set_body_json(configuration(Some(&old.ca_bundle))),
    )
    .await;
    answer(
        &server,
        "PATCH",
        CONFIG_PATH,
        status(
            403,
            "Forbidden",
            "validatingwebhookconfigurations.admissionregistration.k8s.io \"keeper\" is forbidden: \
             User \"system:serviceaccount:keeper-system:keeper\" cannot patch resource",
        ),
    )
    .await;
    let served = Arc::new(MemoryCert::default());
    served.install(&old.cert, &old.key).unwrap();
    let mut installed = Some(old.clone());
    let err = round(
        &client(&server),
        &settings(),
        &served,
        &mut installed,
        unix_now(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, CertError::Forbidden { verb: "patch", .. }),
        "{err:?}"
    );
    let message = err.to_string();
    for needle in [
        "keeper may not patch validatingwebhookconfigurations.admissionregistration.k8s.io \"keeper\"",
        "needs `patch`",
        "keeps serving the certificate it has",
    ] {
        assert!(message.contains(needle), "{message}");
    }
    assert_eq!(
        installed,
        Some(old),
        "the old certificate is still the one served"
    );

    // A Secret that cannot be read is named the same way.
    server.reset().await;
    answer(
        &server,
        "GET",
        SECRET_PATH,
        status(403, "Forbidden", "forbidden"),
    )
    .await;
    let err = round(
        &client(&server),
        &settings(),
        &served,
        &mut installed,
        unix_now(),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains(
            "keeper may not get secrets \"keeper-webhook-tls\" in namespace keeper-system"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_secret_keeper_did_not_write_and_a_missing_configuration_are_refused() {
    let server = crate::test_support::mock_server().await;
    let material = issued(unix_now());
    answer(
        &server,
        "GET",
        SECRET_PATH,
        ResponseTemplate::new(200).set_body_json(stored_secret(&material, false)),
    )
    .await;
    let served = Arc::new(MemoryCert::default());
    let mut installed = None;
    let err = round(
        &client(&server),
        &settings(),
        &served,
        &mut installed,
        unix_now(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, CertError::NotOurs(_)), "{err:?}");
    assert!(err.to_string().contains("keeper-system/keeper-webhook-tls"));
    let writes = server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.method.as_str() != "GET")
        .count();
    assert_eq!(writes, 0, "never overwritten");

    server.reset().await;
    api_with(
        &server,
        ResponseTemplate::new(200).set_body_json(stored_secret(&material, true)),
        status(404, "NotFound", "not found"),
    )
    .await;
    let err = round(
        &client(&server),
        &settings(),
        &served,
        &mut installed,
        unix_now(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, CertError::NoConfiguration(name) if name == "keeper"),
        "{err:?}"
    );
    assert!(
        !served.is_set(),
        "nothing is served before the API server trusts it"
    );
}
