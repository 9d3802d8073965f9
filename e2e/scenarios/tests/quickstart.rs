//! README's cluster quickstart ("Install on a cluster") gets a newcomer a Ready bucket (issue 27).
//!
//! Each scenario reads one of README's blocks and runs its commands with bash, as a newcomer
//! would paste them, after the few substitutions a newcomer also makes for their environment
//! (listed, each with its reason, in the scenario): the chart is installed with `helm install`,
//! the provider's Secret created, the first tenant and bucket applied. No kubelet runs pods on the
//! local control plane, so keeper is then started as a process the way the installed Deployment
//! would start it: its container's args and env, its ConfigMap's configuration and a token of its
//! ServiceAccount (the chart's RBAC, which kube-apiserver enforces). The scenario waits until the
//! quickstart's objects are Ready, deletes them (keeper must let them go), stops keeper,
//! uninstalls the release and deletes its namespace.
//!
//! A README change these substitutions no longer fit (an endpoint, a key name, a command) fails
//! the scenario: each substitution must find what it replaces.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use keeper_e2e_scenarios::{
    AuditLog, Env, Keeper, condition_is, free_port, repo_root, secret_data, wait_until,
};
use serde_json::Value;

/// The namespace README's tenants and buckets live in (`metadata.namespace` of config/samples
/// and of the AWS block's objects).
const OBJECTS_NAMESPACE: &str = "default";

/// The commands of README's block under `### <section>` of "## Install on a cluster": one per
/// line, a heredoc with the line that opens it.
fn readme_block(section: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let mut lines = readme
        .lines()
        .skip_while(|l| *l != "## Install on a cluster")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .skip_while(|l| *l != format!("### {section}"))
        .skip_while(|l| *l != "```sh")
        .skip(1)
        .take_while(|l| *l != "```");
    let mut commands = Vec::new();
    while let Some(line) = lines.next() {
        let mut command = line.to_string();
        if let Some((_, tag)) = line.split_once("<<'") {
            let end = tag.split('\'').next().unwrap();
            for body in lines.by_ref() {
                command.push('\n');
                command.push_str(body);
                if body == end {
                    break;
                }
            }
        }
        commands.push(command);
    }
    assert!(
        !commands.is_empty(),
        "README has no ```sh block under \"### {section}\" of \"## Install on a cluster\""
    );
    assert!(
        commands.len() <= 5,
        "README's {section} quickstart has {} commands, at most five: {commands:#?}",
        commands.len()
    );
    commands
}

/// `text` with `from` replaced by `to`; fails when README no longer says `from`.
fn substitute(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "README's quickstart no longer contains {from:?}, which the scenario replaces with {to:?}:\n{text}"
    );
    text.replace(from, to)
}

/// `text` with `line` (indented as the line containing `anchor`) inserted after that line.
fn insert_after(text: &str, anchor: &str, line: &str) -> String {
    let at = text
        .lines()
        .find(|l| l.contains(anchor))
        .unwrap_or_else(|| panic!("README's quickstart no longer contains {anchor:?}:\n{text}"));
    let indent = &at[..at.len() - at.trim_start().len()];
    substitute(text, at, &format!("{at}\n{indent}{line}"))
}

fn unique(prefix: &str) -> String {
    static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id() % 100000,
        COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

fn helm_bin() -> PathBuf {
    std::env::var("KEEPER_HELM")
        .expect("KEEPER_HELM is set by e2e/run-e2e.sh")
        .into()
}

fn stack_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set by the local stack's env"))
}

/// One quickstart run: the release, its namespace, keeper and the objects it applied; all of it
/// removed when dropped (whatever the scenario got to).
struct Quickstart {
    env: Env,
    /// The release's namespace, README's `keeper-system`.
    namespace: String,
    release: String,
    /// A directory standing for the newcomer's checkout: `charts` and `config` link to the
    /// repository's, `keeper-values.yaml` is written there; keeper's configuration and kubeconfig
    /// go there too.
    dir: PathBuf,
    installed: bool,
    /// The keeper objects README applied (`s3bucket/assets`), in OBJECTS_NAMESPACE.
    objects: Vec<String>,
    keeper: Option<Keeper>,
    audit: AuditLog,
}

impl Quickstart {
    fn new(env: &Env) -> Quickstart {
        let dir = std::env::temp_dir().join(unique("keeper-quickstart"));
        std::fs::create_dir_all(&dir).unwrap();
        for linked in ["charts", "config"] {
            std::os::unix::fs::symlink(repo_root().join(linked), dir.join(linked)).unwrap();
        }
        Quickstart {
            env: env.clone(),
            namespace: unique("keeper-qs"),
            // README's release name. The chart's cluster-scoped objects (ClusterRole,
            // ClusterRoleBinding, ValidatingWebhookConfiguration `keeper`) collide with nothing:
            // the stack's RBAC is release keeper-local, the webhook scenarios register
            // keeper-local and keeper-e2e-<pid>, chart.rs's release `keeper` is uninstalled before
            // the next scenario starts (they run one at a time), and this one is uninstalled
            // when the scenario ends.
            release: "keeper".into(),
            dir,
            installed: false,
            objects: Vec::new(),
            keeper: None,
            audit: AuditLog::of(env).unwrap(),
        }
    }

    /// Runs README's commands after the image line with bash in the checkout, as the
    /// administrator, with the stack's kubectl and helm first on PATH; records the keeper objects
    /// `kubectl apply` reports.
    fn run_readme(&mut self, commands: &str) {
        let script = format!("set -euo pipefail\n{commands}\n");
        let helm = helm_bin();
        let path = format!(
            "{}:{}",
            helm.parent().unwrap().display(),
            std::env::var("PATH").unwrap()
        );
        self.installed = true;
        let started = Instant::now();
        let out = Command::new("bash")
            .args(["-c", &script])
            .current_dir(&self.dir)
            .env("KUBECONFIG", &self.env.kubeconfig)
            .env("PATH", path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "README's commands failed:\n{script}\nstdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("README's commands ran in {:?}", started.elapsed());
        // `kubectl apply` says `s3bucket.keeper.dev/assets created` for each object.
        for line in stdout.lines() {
            if let Some((kind, rest)) = line.split_once(".keeper.dev/") {
                let name = rest.split_whitespace().next().unwrap();
                self.objects.push(format!("{kind}/{name}"));
            }
        }
        for kind in ["s3tenant", "s3bucket"] {
            assert!(
                self.objects.iter().any(|o| o.starts_with(kind)),
                "README's quickstart applied no {kind}: {stdout}"
            );
        }
    }

    /// Starts keeper as the release's Deployment would run it, changing only what a process
    /// outside a pod needs changed (each commented below); waits until it is ready.
    fn start_keeper(&mut self) {
        let env = &self.env;
        let list = env
            .kubectl(&["get", "deployment", "-n", &self.namespace, "-o", "json"])
            .unwrap();
        let list: Value = serde_json::from_str(&list).unwrap();
        let [deployment] = list["items"].as_array().unwrap().as_slice() else {
            panic!("the release installed one Deployment, not: {list:#}");
        };
        let pod = &deployment["spec"]["template"]["spec"];
        let containers = pod["containers"].as_array().unwrap();
        let container = containers
            .iter()
            .find(|c| c["name"] == "keeper")
            .unwrap_or_else(|| panic!("no container `keeper`: {deployment:#}"));

        let metrics = format!("127.0.0.1:{}", free_port().unwrap());
        let mut args = Vec::new();
        for arg in container["args"].as_array().unwrap() {
            let arg = arg.as_str().unwrap();
            let (flag, value) = arg.split_once('=').unwrap_or((arg, ""));
            args.push(match flag {
                // The configuration is the ConfigMap the pod mounts there: written to a file
                // of this run.
                "--config" => format!("--config={}", self.mounted_config(pod, value).display()),
                // Tests listen on 127.0.0.1 only, on ports free on this machine.
                "--metrics-bind-address" => format!("{flag}={metrics}"),
                "--webhook-bind-address" => format!("{flag}=127.0.0.1:{}", free_port().unwrap()),
                _ => {
                    assert!(
                        !value.starts_with('/'),
                        "{arg} names a file in the pod, which this scenario does not provide"
                    );
                    arg.to_string()
                }
            });
        }
        assert!(
            container["envFrom"].is_null(),
            "envFrom is not supported here: {container:#}"
        );
        let pod_name = format!(
            "{}-quickstart",
            deployment["metadata"]["name"].as_str().unwrap()
        );
        let mut vars = Vec::new();
        for var in container["env"].as_array().into_iter().flatten() {
            let name = var["name"].as_str().unwrap().to_string();
            let from = &var["valueFrom"];
            let value = if let Some(value) = var["value"].as_str() {
                value.to_string()
            } else if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
                // The downward API's pod fields, set literally: a pod of this Deployment in
                // the release's namespace.
                match field {
                    "metadata.namespace" => self.namespace.clone(),
                    "metadata.name" => pod_name.clone(),
                    _ => panic!("env {name}: fieldRef {field} is not supported here"),
                }
            } else if from["secretKeyRef"].is_object() {
                // What the kubelet would read from the Secret, read here.
                let secret = from["secretKeyRef"]["name"].as_str().unwrap();
                let key = from["secretKeyRef"]["key"].as_str().unwrap();
                secret_data(env, &self.namespace, secret)
                    .unwrap()
                    .remove(key)
                    .unwrap_or_else(|| panic!("env {name}: Secret {secret} has no key {key}"))
            } else {
                panic!("env {name}: {var} is not supported here");
            };
            vars.push((name, value));
        }

        // The pod's identity: a token of the Deployment's ServiceAccount in a kubeconfig of its
        // own, for the stack's API server (a pod finds both in its service-account volume).
        let account = pod["serviceAccountName"].as_str().unwrap();
        let token = env
            .kubectl(&["create", "token", account, "-n", &self.namespace])
            .unwrap();
        let kubeconfig = self.dir.join("keeper-kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n  - name: stack\n    cluster:\n      \
                 server: {}\n      certificate-authority: {}\nusers:\n  - name: {account}\n    \
                 user: {{token: {}}}\ncontexts:\n  - name: keeper\n    context: {{cluster: \
                 stack, user: {account}}}\ncurrent-context: keeper\n",
                env.apiserver_url.as_deref().unwrap(),
                env.apiserver_tls.as_ref().unwrap().ca.display(),
                token.trim(),
            ),
        )
        .unwrap();

        let mut command = Command::new(&env.keeper_bin);
        command
            .args(&args)
            // A container's environment is what its spec says; nothing of this test's leaks in
            // (RUST_LOG, AWS_*): PATH and HOME only, and KUBECONFIG for the ServiceAccount.
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", &self.dir)
            .env("KUBECONFIG", &kubeconfig)
            .envs(vars);
        self.keeper = Some(
            Keeper::start_command(command, format!("http://{metrics}"))
                .unwrap_or_else(|e| panic!("keeper did not start with {args:?}: {e:#}")),
        );
    }

    /// Writes the ConfigMap key the pod mounts at `path` to a file of this run.
    fn mounted_config(&self, pod: &Value, path: &str) -> PathBuf {
        let containers = pod["containers"].as_array().unwrap();
        let mount = containers
            .iter()
            .flat_map(|c| c["volumeMounts"].as_array().into_iter().flatten())
            .find(|m| m["mountPath"] == path)
            .unwrap_or_else(|| panic!("nothing is mounted at {path}: {pod:#}"));
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        let configmap = volume["configMap"]["name"].as_str().unwrap();
        let key = mount["subPath"].as_str().unwrap();
        let configmap = self
            .env
            .get_json(&self.namespace, &format!("configmap/{configmap}"))
            .unwrap()
            .unwrap();
        let file = self.dir.join("keeper.yaml");
        std::fs::write(&file, configmap["data"][key].as_str().unwrap()).unwrap();
        file
    }

    fn keeper_log(&self) -> String {
        self.keeper
            .as_ref()
            .map(|k| k.log_text())
            .unwrap_or_default()
    }

    /// The quickstart's objects as they are now, for a failure message.
    fn objects_now(&self) -> String {
        let mut args = vec!["get", "-n", OBJECTS_NAMESPACE, "-o", "yaml"];
        args.extend(self.objects.iter().map(String::as_str));
        let out = self.env.kubectl_output(&args).unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    fn wait_ready(&self, timeout: Duration) {
        let result = wait_until(timeout, "the quickstart's objects to be Ready", || {
            for object in &self.objects {
                let obj = self.env.get_json(OBJECTS_NAMESPACE, object)?;
                if !obj.is_some_and(|o| condition_is(&o, "Ready", "True")) {
                    return Ok(false);
                }
            }
            Ok(true)
        });
        if let Err(e) = result {
            panic!(
                "{e:#}\nobjects:\n{}\nkeeper's log:\n{}",
                self.objects_now(),
                self.keeper_log()
            );
        }
    }

    /// Deletes the quickstart's objects and waits until they are gone (keeper removes its
    /// finalizers once it has cleaned up), and the Secrets keeper made for them too (the garbage
    /// collector deletes them after their owner): a later quickstart's bucket of the same name
    /// would otherwise find its Secret's name taken by the old bucket's.
    fn delete_objects(&self, timeout: Duration) -> anyhow::Result<()> {
        let mut uids = Vec::new();
        for object in &self.objects {
            if let Some(obj) = self.env.get_json(OBJECTS_NAMESPACE, object)? {
                uids.push(obj["metadata"]["uid"].clone());
            }
        }
        let mut args = vec!["delete", "-n", OBJECTS_NAMESPACE, "--wait=false"];
        args.extend(self.objects.iter().map(String::as_str));
        self.env.kubectl(&args)?;
        wait_until(
            timeout,
            "the quickstart's objects and Secrets to be deleted",
            || {
                for object in &self.objects {
                    if self.env.get_json(OBJECTS_NAMESPACE, object)?.is_some() {
                        return Ok(false);
                    }
                }
                let secrets = self
                    .env
                    .get_json(OBJECTS_NAMESPACE, "secrets")?
                    .unwrap_or_default();
                Ok(!secrets["items"].as_array().into_iter().flatten().any(|s| {
                    s["metadata"]["ownerReferences"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|r| uids.contains(&r["uid"]))
                }))
            },
        )
    }

    fn helm_uninstall(&mut self) -> std::process::Output {
        self.installed = false;
        Command::new(helm_bin())
            .args(["uninstall", &self.release, "-n", &self.namespace, "--wait"])
            .env("KUBECONFIG", &self.env.kubeconfig)
            .output()
            .unwrap()
    }

    /// The whole quickstart: README's block for `section`, substituted, run; keeper started as
    /// the Deployment; its objects Ready, then deleted; keeper stopped, the release uninstalled.
    fn run(mut self, commands: &str) {
        let mark = self.audit.mark().unwrap();
        self.run_readme(commands);
        self.start_keeper();
        let started = Instant::now();
        self.wait_ready(Duration::from_secs(120));
        eprintln!(
            "{:?} Ready {:?} after keeper started",
            self.objects,
            started.elapsed()
        );

        // Self-managed webhook (the chart's default, kept): keeper issued its certificate and
        // set the caBundle of the release's configuration, with the release's RBAC. No pod backs
        // the Service kube-apiserver calls (S3Bucket CREATE, S3Tenant DELETE): the chart's
        // failurePolicy Ignore lets each call fail open, costing at most its timeoutSeconds (5s;
        // here the call fails at once), and the finalizers hold what the webhook would refuse.
        let webhook = self
            .env
            .get_json(
                OBJECTS_NAMESPACE,
                &format!("validatingwebhookconfiguration/{}", self.release),
            )
            .unwrap()
            .expect("the release's ValidatingWebhookConfiguration");
        assert!(
            webhook["webhooks"][0]["clientConfig"]["caBundle"]
                .as_str()
                .is_some_and(|ca| !ca.is_empty()),
            "keeper did not set the webhook's caBundle: {webhook:#}\nkeeper's log:\n{}",
            self.keeper_log()
        );

        if let Err(e) = self.delete_objects(Duration::from_secs(120)) {
            panic!(
                "{e:#}\nobjects:\n{}\nkeeper's log:\n{}",
                self.objects_now(),
                self.keeper_log()
            );
        }
        self.objects.clear();
        let keeper = self.keeper.take().unwrap();
        let log = keeper.log.clone();
        let code = keeper.terminate().unwrap();
        assert_eq!(code, Some(0), "keeper's exit on SIGTERM");
        let _ = std::fs::remove_file(log);

        // The release's ServiceAccount under the release's RBAC: nothing keeper asked for was
        // denied (the suite's RBAC check, e2e/rbac-usage.py, reads the stack's ServiceAccount
        // keeper-system/keeper only).
        let user = format!("system:serviceaccount:{}:{}", self.namespace, self.release);
        let requests = self.audit.since_by(mark, &user).unwrap();
        assert!(
            requests.iter().any(|r| r.resource == "s3buckets"),
            "keeper made no request as {user}"
        );
        let denied: Vec<_> = requests.iter().filter(|r| r.denied).collect();
        assert!(denied.is_empty(), "denied to {user}: {denied:#?}");

        let out = self.helm_uninstall();
        assert!(
            out.status.success(),
            "helm uninstall: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Quickstart {
    fn drop(&mut self) {
        if !self.objects.is_empty() {
            // While keeper still runs, it cleans up; whatever it could not release loses its
            // finalizers, so that no later scenario finds it.
            let _ = self.delete_objects(Duration::from_secs(60));
            self.keeper = None;
            for object in &self.objects {
                let _ = self.env.kubectl_output(&[
                    "patch",
                    "-n",
                    OBJECTS_NAMESPACE,
                    object,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ]);
            }
        }
        if let Some(keeper) = self.keeper.take() {
            let log = keeper.log.clone();
            drop(keeper);
            let _ = std::fs::remove_file(log);
        }
        if self.installed {
            let _ = self.helm_uninstall();
        }
        let _ = self.env.kubectl_output(&[
            "delete",
            "namespace",
            &self.namespace,
            "--ignore-not-found",
            "--wait=false",
        ]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The local stack, or `None` (skipped) elsewhere: the quickstart points keeper at the stack's
/// emulators and API server.
fn local_env() -> Option<Env> {
    let env = Env::from_env().unwrap();
    if env.apiserver_url.is_none() || env.storagegrid_url.is_none() {
        keeper_e2e_scenarios::skip("the quickstart runs against the local stack's emulators");
        return None;
    }
    Some(env)
}

/// README's block without its first command, the image's: it builds the image and pushes it to
/// a registry, and here no registry serves a cluster and no kubelet would pull it; keeper runs
/// instead from `KEEPER_BIN`, built from the same checkout.
fn without_image(section: &str) -> Vec<String> {
    let mut commands = readme_block(section);
    let image = commands.remove(0);
    assert!(
        image.starts_with("make image"),
        "README's {section} quickstart no longer starts with the image: {image}"
    );
    commands
}

/// Substitutions every block takes: its namespace, and plain http for the emulators.
fn common(text: &str, namespace: &str, anchor: &str) -> String {
    // A namespace of the run's own: the stack's keeper-system already holds its own
    // `storagegrid-admin` and `s3-credentials`.
    let text = substitute(text, "keeper-system", namespace);
    // The emulators speak plain http; keeper refuses it unless told it is meant.
    insert_after(&text, anchor, "tls: {allowPlainHttp: true}")
}

#[test]
fn the_storagegrid_quickstart_gets_a_ready_bucket() {
    let Some(env) = local_env() else { return };
    let quickstart = Quickstart::new(&env);
    let script = without_image("StorageGRID").join("\n");
    let script = common(&script, &quickstart.namespace, "s3Endpoint:");
    // The grid's endpoints: the StorageGRID emulator's management API and S3 endpoint.
    let script = substitute(
        &script,
        "https://grid-admin.example.com",
        env.storagegrid_url.as_deref().unwrap(),
    );
    let script = substitute(
        &script,
        "https://s3.grid.example.com",
        &stack_var("KEEPER_STORAGEGRID_S3_ENDPOINT"),
    );
    // The grid administrator's sign-in: the emulator's.
    let script = substitute(
        &script,
        "username=ADMIN",
        &format!("username={}", stack_var("KEEPER_STORAGEGRID_ADMIN_USER")),
    );
    let script = substitute(
        &script,
        "password=PASSWORD",
        &format!(
            "password={}",
            stack_var("KEEPER_STORAGEGRID_ADMIN_PASSWORD")
        ),
    );
    quickstart.run(&script);
}

/// AWS's block against the stack's moto, which enforces IAM: S3 and IAM at its endpoint, its
/// admin user's keys.
#[test]
fn the_aws_quickstart_gets_a_ready_bucket() {
    let Some(env) = local_env() else { return };
    let quickstart = Quickstart::new(&env);
    let moto = env.s3_endpoint.clone().unwrap();
    let (key, secret) = env.admin_keys.clone().unwrap();
    let script = without_image("AWS (S3 and RDS)").join("\n");
    let script = common(&script, &quickstart.namespace, "credentialsSecret:");
    // AWS's S3 endpoint: moto's (through the stack's AWS proxy).
    let script = substitute(&script, "https://s3.eu-west-1.amazonaws.com", &moto);
    // AWS IAM is not at the S3 endpoint (keeper's default is iam.amazonaws.com); moto's is.
    let script = substitute(&script, "iam: {}", &format!("iam: {{endpoint: {moto}}}"));
    // RDS's endpoint, moto's too (no CloudDatabase here: keeper would only reach it for one).
    let script = substitute(
        &script,
        "rds: {region: eu-west-1}",
        &format!("rds: {{region: eu-west-1, endpoint: {moto}}}"),
    );
    // The keys: moto's admin user.
    let script = substitute(
        &script,
        "accessKeyId=AKIA...",
        &format!("accessKeyId={key}"),
    );
    let script = substitute(
        &script,
        "secretAccessKey=...",
        &format!("secretAccessKey={secret}"),
    );
    // S3 bucket names are global, in moto too: one of this run's own.
    let script = substitute(&script, "team-a-assets-20270101", &unique("qs-assets"));
    quickstart.run(&script);
}

/// The block for stores without an identity API (`sharedCredentials`), against the same moto.
#[test]
fn the_s3_compatible_quickstart_gets_a_ready_bucket() {
    let Some(env) = local_env() else { return };
    let quickstart = Quickstart::new(&env);
    let moto = env.s3_endpoint.clone().unwrap();
    let (key, secret) = env.admin_keys.clone().unwrap();
    let script = without_image("Other S3-compatible stores (MinIO, Ceph RGW)").join("\n");
    let script = common(&script, &quickstart.namespace, "credentialsSecret:");
    // The store's endpoint and keys: moto's.
    let script = substitute(&script, "https://minio.example.com", &moto);
    let script = substitute(
        &script,
        "accessKeyId=ACCESS_KEY",
        &format!("accessKeyId={key}"),
    );
    let script = substitute(
        &script,
        "secretAccessKey=SECRET_KEY",
        &format!("secretAccessKey={secret}"),
    );
    quickstart.run(&script);
}
