//! The namespaced install scope (audit F13): keeper started with `watchNamespaces: [a]` under the
//! RBAC the chart renders for that scope (a ServiceAccount of its own with a Role in namespace a
//! and in keeper's namespace, and no cluster-wide grant of a namespaced kind) serves the tenant
//! and the bucket of namespace a, never sees those of namespace b (no status, no finalizer), and
//! is refused nothing by the API server. Without the scope, the same keeper under the same RBAC
//! could not list its kinds cluster-wide and would never become ready.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use keeper_e2e_scenarios::{AuditLog, Env, Keeper, ready_tenant, repo_root, wait_ready};

/// The chart's ServiceAccount and RBAC for `watchNamespaces: [namespace]`, applied for one
/// scenario; deleted when dropped.
struct ScopedRbac {
    env: Env,
    manifest: String,
}

impl ScopedRbac {
    fn apply(env: &Env, release: &str, namespace: &str) -> ScopedRbac {
        let helm = std::env::var("KEEPER_HELM").expect("KEEPER_HELM is set by e2e/run-e2e.sh");
        let root = repo_root();
        // The stack's RBAC values (its providers), under the scope and a name of their own.
        let out = Command::new(helm)
            .args(["template", release])
            .arg(root.join("charts/keeper"))
            .args(["-n", &env.operator_namespace, "-f"])
            .arg(root.join("e2e/stack-rbac-values.yaml"))
            .args(["--set", &format!("serviceAccount.name={release}")])
            .args([
                "--set-json",
                &format!("config.watchNamespaces=[\"{namespace}\"]"),
            ])
            .args(["--show-only", "templates/serviceaccount.yaml"])
            .args(["--show-only", "templates/rbac.yaml"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "helm template: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let manifest = String::from_utf8(out.stdout).unwrap();
        // The scope's point: no ClusterRole grants a namespaced kind.
        for object in manifest.split("\n---\n") {
            if object.contains("\nkind: ClusterRole\n") {
                assert!(
                    !object.contains("secrets") && !object.contains("keeper.dev"),
                    "{object}"
                );
            }
        }
        let applied = env.kubectl_input(&["apply", "-f", "-"], &manifest).unwrap();
        assert!(
            applied.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&applied.stderr)
        );
        ScopedRbac {
            env: env.clone(),
            manifest,
        }
    }

    /// A kubeconfig of the stack's keeper with a token of ServiceAccount `account` instead.
    fn kubeconfig(&self, account: &str) -> PathBuf {
        let token = self
            .env
            .kubectl(&[
                "create",
                "token",
                account,
                "-n",
                &self.env.operator_namespace,
                "--duration=1h",
            ])
            .unwrap();
        let path = std::env::temp_dir().join(format!(
            "keeper-e2e-scope-{}.kubeconfig",
            std::process::id()
        ));
        std::fs::copy(&self.env.keeper_kubeconfig, &path).unwrap();
        let user = self
            .env
            .kubectl(&[
                "--kubeconfig",
                path.to_str().unwrap(),
                "config",
                "view",
                "-o",
                "jsonpath={.users[0].name}",
            ])
            .unwrap();
        self.env
            .kubectl(&[
                "--kubeconfig",
                path.to_str().unwrap(),
                "config",
                "set-credentials",
                user.trim(),
                &format!("--token={}", token.trim()),
            ])
            .unwrap();
        path
    }
}

impl Drop for ScopedRbac {
    fn drop(&mut self) {
        let _ = self.env.kubectl_input(
            &["delete", "--ignore-not-found", "--wait=false", "-f", "-"],
            &self.manifest,
        );
    }
}

fn tenant(name: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: {name}\nspec:\n  provider: default\n"
    )
}

fn bucket(name: &str, tenant: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: S3Bucket\nmetadata:\n  name: {name}\nspec:\n  tenantRef:\n    name: {tenant}\n"
    )
}

#[test]
fn a_keeper_scoped_to_one_namespace_serves_it_sees_no_other_and_needs_no_cluster_wide_grant() {
    let env = Env::from_env().unwrap();
    let Ok(audit) = AuditLog::of(&env) else {
        keeper_e2e_scenarios::skip("the API server's audit log: the local control plane only");
        return;
    };
    let watched = env.namespace("e2e-scope-in").unwrap();
    let other = env.namespace("e2e-scope-out").unwrap();
    let account = format!("keeper-scope-{}", std::process::id() % 100000);
    let rbac = ScopedRbac::apply(&env, &account, &watched.name);
    let mut scoped = env.clone();
    scoped.keeper_kubeconfig = rbac.kubeconfig(&account);
    let config = std::env::temp_dir().join(format!("keeper-e2e-scope-{}.yaml", std::process::id()));
    let stack_config = std::fs::read_to_string(&env.keeper_config).unwrap();
    std::fs::write(
        &config,
        format!("{stack_config}\nwatchNamespaces: [{}]\n", watched.name),
    )
    .unwrap();
    let mark = audit.mark().unwrap();
    let keeper = Keeper::start_with_config(&scoped, &config).unwrap();

    env.apply(&other.name, &tenant("unseen")).unwrap();
    env.apply(&other.name, &bucket("unseen-bucket", "unseen"))
        .unwrap();
    ready_tenant(&env, &watched.name, "seen", "default");
    // A bucket too: its tenant, credentials and Secret all come from the watched namespace.
    env.apply(&watched.name, &bucket("seen-bucket", "seen"))
        .unwrap();
    wait_ready(&env, &watched.name, "s3bucket/seen-bucket");
    // keeper had as long to act on the other namespace's objects as on those it served, and more.
    std::thread::sleep(Duration::from_secs(5));
    for resource in ["s3tenant/unseen", "s3bucket/unseen-bucket"] {
        let unseen = env.get_json(&other.name, resource).unwrap().unwrap();
        assert!(unseen["status"].is_null(), "{unseen:#}");
        assert!(unseen["metadata"]["finalizers"].is_null(), "{unseen:#}");
    }

    let user = format!("system:serviceaccount:{}:{account}", env.operator_namespace);
    let requests = audit.since_by(mark, &user).unwrap();
    assert!(
        !requests.is_empty(),
        "no request of {user} in the audit log"
    );
    let denied: Vec<_> = requests.iter().filter(|r| r.denied).collect();
    assert!(denied.is_empty(), "refused: {denied:#?}");
    let elsewhere: Vec<_> = requests
        .iter()
        .filter(|r| r.namespace != watched.name && r.namespace != env.operator_namespace)
        .collect();
    assert!(
        elsewhere.is_empty(),
        "requests outside the watched namespace and keeper's own: {elsewhere:#?}"
    );
    let log = keeper.log_text();
    assert!(!log.to_lowercase().contains("forbidden"), "{log}");
    drop(keeper);
    let _ = std::fs::remove_file(&config);
    let _ = std::fs::remove_file(&scoped.keeper_kubeconfig);
}
