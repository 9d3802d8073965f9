//! The webhook's self-managed certificate (issue 27): keeper, started with `--webhook-cert-secret`
//! against the chart's ValidatingWebhookConfiguration rendered without a caBundle (mode
//! selfManaged, as `helm template` gives it to Argo CD), issues a CA and a serving certificate into
//! a Secret of its namespace, sets the caBundle, and the API server then calls it. The certificate
//! is renewed from the same CA before it expires and served at once. keeper runs under the chart's
//! RBAC (its own configuration and Secret by name), and none of its requests is refused.

use std::process::{Command, Stdio};
use std::time::Duration;

use keeper_e2e_scenarios::{
    AuditLog, Env, Keeper, STACK_RELEASE, secret_data, skip, wait_for, wait_until,
};

fn tenant(name: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: {name}\nspec:\n  provider: default\n  deletionProtection: true\n"
    )
}

/// The first certificate of a PEM text, without line breaks (to compare two).
fn first_certificate(pem: &str) -> Option<String> {
    let start = pem.find("-----BEGIN CERTIFICATE-----")?;
    let end = pem[start..].find("-----END CERTIFICATE-----")? + start;
    Some(pem[start..end].split_whitespace().collect())
}

/// The certificate the webhook at `address` presents.
fn served_certificate(address: &str) -> anyhow::Result<String> {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", address, "-showcerts"])
        .stdin(Stdio::null())
        .output()?;
    first_certificate(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| anyhow::anyhow!("no certificate from {address}"))
}

/// Whether the API server, calling the webhook, refuses to delete protected tenant `name`.
fn deletion_denied(env: &Env, namespace: &str, name: &str) -> anyhow::Result<bool> {
    let out = env.kubectl_output(&[
        "delete",
        "--dry-run=server",
        "-n",
        namespace,
        &format!("s3tenant/{name}"),
    ])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    Ok(!out.status.success()
        && stderr.contains("denied the request")
        && stderr.contains("deletionProtection"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_self_managed_certificate_is_issued_trusted_served_and_renewed_under_the_charts_rbac() {
    let env = Env::from_env().unwrap();
    let Ok(audit) = AuditLog::of(&env) else {
        skip("the webhook on 127.0.0.1 and the audit log need the local control plane");
        return;
    };
    let ns = env.namespace("e2e-selfcert").unwrap();
    let configuration = STACK_RELEASE;
    let secret = format!("{STACK_RELEASE}-webhook-tls");
    let operator_ns = env.operator_namespace.clone();
    let from = audit.mark().unwrap();
    // Valid for 30 s: renewed about 20 s after it is issued.
    let keeper = Keeper::start_with_self_managed_webhook(&env, "30s").unwrap();
    let address = keeper.webhook_address.clone().unwrap();

    // keeper issues the Secret and writes its CA into the configuration's caBundle.
    let mut issued = serde_json::Value::Null;
    wait_until(
        Duration::from_secs(60),
        "keeper to set the caBundle",
        || {
            let Some(config) = env.get_json(
                "",
                &format!("validatingwebhookconfiguration/{configuration}"),
            )?
            else {
                return Ok(false);
            };
            let Some(stored) = env.get_json(&operator_ns, &format!("secret/{secret}"))? else {
                return Ok(false);
            };
            let bundle = &config["webhooks"][0]["clientConfig"]["caBundle"];
            let done = bundle.is_string() && *bundle == stored["data"]["ca.crt"];
            issued = stored;
            Ok(done)
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}; keeper log: {}", keeper.log_text()));
    assert_eq!(issued["type"], "kubernetes.io/tls");
    assert_eq!(
        issued["metadata"]["annotations"]["keeper.dev/webhook-certificate"],
        "self-managed"
    );
    let first = secret_data(&env, &operator_ns, &secret).unwrap();
    for key in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(first.contains_key(key), "{key} missing: {:?}", first.keys());
    }
    assert_eq!(
        served_certificate(&address).unwrap(),
        first_certificate(&first["tls.crt"]).unwrap(),
        "keeper serves the certificate of its Secret"
    );

    // The API server trusts it: deleting a protected tenant is denied by the webhook.
    env.apply(&ns.name, &tenant("p")).unwrap();
    wait_until(Duration::from_secs(30), "the webhook to deny", || {
        deletion_denied(&env, &ns.name, "p")
    })
    .unwrap_or_else(|e| panic!("{e:#}; keeper log: {}", keeper.log_text()));

    // Renewed two thirds of the way through, from the same CA, and served at once.
    wait_until(
        Duration::from_secs(60),
        "the certificate to be renewed",
        || Ok(secret_data(&env, &operator_ns, &secret)?["tls.crt"] != first["tls.crt"]),
    )
    .unwrap_or_else(|e| panic!("{e:#}; keeper log: {}", keeper.log_text()));
    let renewed = secret_data(&env, &operator_ns, &secret).unwrap();
    assert_eq!(renewed["ca.crt"], first["ca.crt"], "the CA stays");
    assert_eq!(renewed["ca.key"], first["ca.key"]);
    assert_ne!(renewed["tls.key"], first["tls.key"], "a new key");
    wait_until(
        Duration::from_secs(10),
        "keeper to serve the renewed certificate",
        || Ok(served_certificate(&address)? == first_certificate(&renewed["tls.crt"]).unwrap()),
    )
    .unwrap();
    assert!(
        deletion_denied(&env, &ns.name, "p").unwrap(),
        "the renewed certificate is trusted"
    );
    let log = keeper.log_text();
    assert!(
        log.contains("webhook: issued a new CA and serving certificate"),
        "{log}"
    );
    assert!(
        log.contains("webhook: issued a new serving certificate"),
        "{log}"
    );

    // Under the chart's RBAC: keeper read and patched its own configuration and Secret by name,
    // created the Secret, and was refused nothing.
    // ServiceAccount keeper (e2e/stack-rbac-values.yaml) of keeper's namespace.
    let user = format!("system:serviceaccount:{operator_ns}:keeper");
    let requests = audit.since_by(from, &user).unwrap();
    let denied: Vec<_> = requests.iter().filter(|r| r.denied).collect();
    assert!(denied.is_empty(), "refused to keeper: {denied:#?}");
    let made = |verb: &str, group: &str, resource: &str, namespace: &str, name: Option<&str>| {
        requests.iter().any(|r| {
            r.verb == verb
                && r.group == group
                && r.resource == resource
                && r.namespace == namespace
                && name.is_none_or(|n| r.name == n)
                && (200..300).contains(&r.code)
        })
    };
    for verb in ["get", "patch"] {
        assert!(
            made(
                verb,
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
                "",
                Some(configuration)
            ),
            "{verb} validatingwebhookconfigurations/{configuration}: {requests:#?}"
        );
        assert!(
            made(verb, "", "secrets", &operator_ns, Some(&secret)),
            "{verb} secrets/{secret}: {requests:#?}"
        );
    }
    assert!(
        made("create", "", "secrets", &operator_ns, None),
        "create secrets: {requests:#?}"
    );
    let others: Vec<_> = requests
        .iter()
        .filter(|r| r.resource == "validatingwebhookconfigurations" && r.name != configuration)
        .collect();
    assert!(
        others.is_empty(),
        "keeper touched another configuration: {others:#?}"
    );

    // Lift the protection so that the namespace can go.
    env.kubectl(&[
        "patch",
        "-n",
        &ns.name,
        "s3tenant/p",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"deletionProtection":false}}"#,
    ])
    .unwrap();
    env.kubectl(&["delete", "-n", &ns.name, "s3tenant/p", "--wait=false"])
        .unwrap();
    wait_for(
        &env,
        &ns.name,
        "s3tenant/p",
        "gone",
        Duration::from_secs(60),
        |o| o.is_null(),
    );
    drop(keeper);
}
