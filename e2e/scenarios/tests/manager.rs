//! The manager as a user runs it (issue 2): one process, all controllers, /metrics, /healthz,
//! /readyz, a `keeper/<version>` user agent, a broken configuration refused at start, and a
//! graceful exit on SIGTERM.

use std::process::Command;
use std::time::Duration;

use keeper_e2e_scenarios::{AuditLog, Env, Keeper, http_get, wait_until};

#[tokio::test(flavor = "multi_thread")]
async fn keeper_serves_metrics_and_health_and_stops_cleanly_on_sigterm() {
    let env = Env::from_env().unwrap();
    let from = AuditLog::of(&env).ok().map(|audit| audit.mark().unwrap());
    let keeper = Keeper::start(&env).unwrap();

    let health = reqwest::get(format!("{}/healthz", keeper.metrics_url))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let ns = env.namespace("e2e-mgr").unwrap();
    env.apply(
        &ns.name,
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: probe\nspec:\n  provider: nowhere\n",
    )
    .unwrap();
    let metrics_url = format!("{}/metrics", keeper.metrics_url);
    // /metrics once it says `series`.
    let metrics_with = |what: &str, series: &str| {
        let mut text = String::new();
        wait_until(Duration::from_secs(30), what, || {
            text = http_get(&metrics_url)
                .map(|(_, body)| body)
                .unwrap_or_default();
            Ok(text.contains(series))
        })
        .unwrap_or_else(|e| panic!("{e:#}\n{text}"));
        text
    };
    let text = metrics_with(
        "a reconcile of the probe tenant to be counted",
        r#"keeper_reconcile_total{controller="s3tenant""#,
    );
    for name in [
        "keeper_reconcile_duration_seconds",
        "keeper_reconcile_total",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
    }
    // Every controller reports its queue, drained once the probe was reconciled.
    for controller in ["s3tenant", "s3bucket", "clouddatabase"] {
        let series = format!(r#"keeper_work_queue_depth{{controller="{controller}"}}"#);
        assert!(
            text.contains(&series),
            "{series} missing from /metrics:\n{text}"
        );
    }
    metrics_with(
        "the tenant controller's queue to drain",
        r#"keeper_work_queue_depth{controller="s3tenant"} 0"#,
    );

    if let Ok(audit) = AuditLog::of(&env) {
        let agents: Vec<String> = audit
            .since(from.expect("marked with the audit log"))
            .unwrap()
            .into_iter()
            .filter(|r| r.resource == "s3tenants")
            .map(|r| r.user_agent)
            .collect();
        let expected = format!("keeper/{}", env!("CARGO_PKG_VERSION"));
        assert!(
            agents.contains(&expected),
            "no request with user agent {expected}: {agents:?}"
        );
    }

    env.kubectl(&["delete", "-n", &ns.name, "s3tenant/probe", "--wait=false"])
        .unwrap();
    // keeper's stdout is a file here, as under a log collector: plain text, no colour codes.
    let log = keeper.log_text();
    assert!(log.contains("starting controller"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escape codes in a log written to a file:\n{log}"
    );
    assert_eq!(
        keeper.terminate().unwrap(),
        Some(0),
        "keeper exits 0 on SIGTERM"
    );
}

#[test]
fn a_configuration_with_an_unknown_field_is_refused_at_start_naming_the_field() {
    let env = Env::from_env().unwrap();
    let dir = std::env::temp_dir().join(format!("keeper-e2e-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("keeper.yaml");
    std::fs::write(
        &config,
        "providers:\n  default:\n    storageGrid:\n      adminEndpont: https://grid\n",
    )
    .unwrap();
    let out = Command::new(&env.keeper_bin)
        .args(["run", "--metrics-bind-address", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env("KUBECONFIG", &env.keeper_kubeconfig)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        !out.status.success(),
        "keeper accepted a broken configuration"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("providers.default.storageGrid.adminEndpont")
            && stderr.contains("unknown field"),
        "{stderr}"
    );
}
