//! The Helm chart installs (Helm 4, server-side apply) and uninstalls cleanly against the API
//! server, and the operator configuration it renders is one keeper accepts.

use std::process::Command;

use keeper_e2e_scenarios::{Env, repo_root};

fn helm(env: &Env, args: &[&str]) -> String {
    let helm = std::env::var("KEEPER_HELM").expect("KEEPER_HELM is set by e2e/run-e2e.sh");
    let out = Command::new(helm)
        .args(args)
        .env("KUBECONFIG", &env.kubeconfig)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_chart_installs_renders_a_valid_configuration_and_uninstalls() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-chart").unwrap();
    let root = repo_root();
    let chart = root.join("charts/keeper").display().to_string();
    let values = root
        .join("charts/keeper/ci/demo-values.yaml")
        .display()
        .to_string();
    // The webhook would register cluster-wide and point at a Service nothing serves here.
    helm(
        &env,
        &[
            "install",
            "keeper",
            &chart,
            "-n",
            &ns.name,
            "-f",
            &values,
            "--set",
            "webhook.enabled=false",
        ],
    );

    for resource in [
        "deployment/keeper",
        "serviceaccount/keeper",
        "service/keeper",
        "configmap/keeper-config",
    ] {
        assert!(
            env.get_json(&ns.name, resource).unwrap().is_some(),
            "{resource} was not installed"
        );
    }
    let deployment = env
        .get_json(&ns.name, "deployment/keeper")
        .unwrap()
        .unwrap();
    // Two replicas electing a leader, rolled one at a time, spread over nodes, kept by a PDB.
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--leader-election=true"), "{args}");
    assert!(
        deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"].is_object(),
        "{deployment:#}"
    );
    let pdb = env
        .get_json(&ns.name, "poddisruptionbudget/keeper")
        .unwrap()
        .expect("a PodDisruptionBudget with two replicas");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    let role = env
        .get_json(&ns.name, "role/keeper-leader-election")
        .unwrap()
        .expect("a Role for the leader-election Lease");
    assert_eq!(role["rules"][0]["resources"][0], "leases");

    let configmap = env
        .get_json(&ns.name, "configmap/keeper-config")
        .unwrap()
        .unwrap();
    let rendered = configmap["data"]["keeper.yaml"].as_str().unwrap();
    let dir = std::env::temp_dir().join(format!("keeper-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("keeper.yaml");
    std::fs::write(&path, rendered).unwrap();
    // `keeper run` against an unreachable API server fails after parsing the configuration; a
    // configuration error would name a field instead.
    let out = Command::new(&env.keeper_bin)
        .args(["run", "--metrics-bind-address", "127.0.0.1:0", "--config"])
        .arg(&path)
        .env("KUBECONFIG", dir.join("missing-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("invalid configuration"),
        "the chart renders a configuration keeper refuses: {stderr}"
    );

    helm(&env, &["uninstall", "keeper", "-n", &ns.name, "--wait"]);
    assert!(
        env.get_json(&ns.name, "deployment/keeper")
            .unwrap()
            .is_none()
    );
    let role = env
        .kubectl_output(&["get", "clusterrole", "keeper"])
        .unwrap();
    assert!(
        !role.status.success(),
        "the ClusterRole outlived the release"
    );
}
