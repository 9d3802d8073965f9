//! Harness for keeper's end-to-end scenarios. A scenario drives the real `keeper` binary with
//! real `kubectl`, exactly as a user would, against either the local control plane started by
//! `e2e/run-e2e.sh` (environment from `.keeper-dev/env`) or a real cluster
//! (`KEEPER_E2E_KUBECONFIG` plus `KEEPER_E2E_CONFIG`; see docs/development.md, "End-to-end against a real cluster").
//!
//! Every scenario runs in a namespace of its own and stops what it started: the keeper process
//! is killed when its handle drops, the namespace is deleted at the end.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
pub use keeper_e2e_apiproxy::{ApiProxy, Settings as ApiFaults};
use serde_json::Value;

/// What a scenario needs to know about its environment.
#[derive(Clone, Debug)]
pub struct Env {
    /// An administrator's kubeconfig: kubectl, as the user driving keeper.
    pub kubeconfig: PathBuf,
    /// keeper's own identity: in the local stack the token of ServiceAccount keeper-system/keeper
    /// under the chart's RBAC (kube-apiserver enforces it); on another cluster
    /// `KEEPER_E2E_KEEPER_KUBECONFIG`, or the admin's kubeconfig without it.
    pub keeper_kubeconfig: PathBuf,
    pub keeper_bin: PathBuf,
    /// keeper's configuration for this environment.
    pub keeper_config: PathBuf,
    /// Extra environment for the keeper process (AWS credentials for the RDS test server).
    pub keeper_env: Vec<(String, String)>,
    /// The namespace keeper reads provider Secrets from.
    pub operator_namespace: String,
    /// Set when running against the local control plane: kube-apiserver's URL.
    pub apiserver_url: Option<String>,
    /// Local control plane only: the files an API fault proxy needs to stand in for
    /// kube-apiserver (its CA, its serving certificate and key).
    pub apiserver_tls: Option<ApiServerTls>,
    pub storagegrid_url: Option<String>,
    pub s3_endpoint: Option<String>,
    pub rds_endpoint: Option<String>,
    /// The admin keys of the store behind provider `s3` and RDS (moto enforces IAM locally), for
    /// what an operator does beside keeper; `None`: the standard AWS chain.
    pub admin_keys: Option<(String, String)>,
    /// Local control plane only: the AWS proxy in front of moto (fault injection), moto itself,
    /// and kube-apiserver's audit log (every API request with its user, never rotated).
    pub aws_proxy_url: Option<String>,
    pub moto_url: Option<String>,
    pub audit_log: Option<PathBuf>,
}

/// kube-apiserver's CA, serving certificate and key (PEM files of the local stack).
#[derive(Clone, Debug)]
pub struct ApiServerTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn var(name: &str) -> anyhow::Result<String> {
    std::env::var(name)
        .with_context(|| format!("{name} is not set: run the scenarios with `make e2e`"))
}

impl Env {
    pub fn from_env() -> anyhow::Result<Env> {
        if let Ok(kubeconfig) = std::env::var("KEEPER_E2E_KUBECONFIG") {
            return Ok(Env {
                keeper_kubeconfig: std::env::var("KEEPER_E2E_KEEPER_KUBECONFIG")
                    .unwrap_or_else(|_| kubeconfig.clone())
                    .into(),
                kubeconfig: kubeconfig.into(),
                keeper_bin: var("KEEPER_BIN")?.into(),
                keeper_config: var("KEEPER_E2E_CONFIG")?.into(),
                keeper_env: Vec::new(),
                operator_namespace: std::env::var("KEEPER_E2E_OPERATOR_NAMESPACE")
                    .unwrap_or_else(|_| "keeper-system".into()),
                apiserver_url: None,
                apiserver_tls: None,
                storagegrid_url: None,
                s3_endpoint: std::env::var("KEEPER_S3_ENDPOINT").ok(),
                rds_endpoint: std::env::var("KEEPER_RDS_ENDPOINT").ok(),
                admin_keys: None,
                aws_proxy_url: None,
                moto_url: None,
                audit_log: None,
            });
        }
        let dev = var("KEEPER_DEV_DIR")?;
        // The moto behind provider `s3` and RDS enforces IAM: everyone signs as its admin user.
        let admin_keys = (
            var("KEEPER_S3_ACCESS_KEY_ID")?,
            var("KEEPER_S3_SECRET_ACCESS_KEY")?,
        );
        Ok(Env {
            kubeconfig: var("KUBECONFIG")?.into(),
            keeper_kubeconfig: var("KEEPER_KUBECONFIG")?.into(),
            keeper_bin: var("KEEPER_BIN")?.into(),
            keeper_config: Path::new(&dev).join("keeper.yaml"),
            keeper_env: [
                ("AWS_ACCESS_KEY_ID", admin_keys.0.as_str()),
                ("AWS_SECRET_ACCESS_KEY", admin_keys.1.as_str()),
                ("AWS_REGION", "us-east-1"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            operator_namespace: "keeper-system".into(),
            apiserver_url: Some(var("KEEPER_APISERVER_URL")?),
            apiserver_tls: Some(ApiServerTls {
                ca: var("KEEPER_CLUSTER_CA")?.into(),
                cert: var("KEEPER_APISERVER_CERT")?.into(),
                key: var("KEEPER_APISERVER_KEY")?.into(),
            }),
            storagegrid_url: Some(var("KEEPER_STORAGEGRID_ENDPOINT")?),
            s3_endpoint: Some(var("KEEPER_S3_ENDPOINT")?),
            rds_endpoint: Some(var("KEEPER_RDS_ENDPOINT")?),
            admin_keys: Some(admin_keys),
            aws_proxy_url: Some(var("KEEPER_AWS_PROXY_URL")?),
            moto_url: Some(var("KEEPER_MOTO_URL")?),
            audit_log: Some(var("KEEPER_AUDIT_LOG")?.into()),
        })
    }

    /// This environment with S3, IAM and RDS reached at moto itself instead of through the AWS
    /// proxy, so that a scenario's own requests escape the faults it injects there into keeper's
    /// (keeper's configuration still names the proxy).
    pub fn past_the_aws_proxy(&self) -> anyhow::Result<Env> {
        let moto = self
            .moto_url
            .clone()
            .context("no moto behind an AWS proxy: the local control plane only")?;
        Ok(Env {
            s3_endpoint: Some(moto.clone()),
            rds_endpoint: Some(moto),
            ..self.clone()
        })
    }

    /// Runs kubectl and returns its output, whatever its exit code.
    pub fn kubectl_output(&self, args: &[&str]) -> anyhow::Result<Output> {
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .context("cannot run kubectl")
    }

    /// Runs kubectl and fails unless it succeeds; returns stdout.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.kubectl_output(args)?;
        if !out.status.success() {
            bail!(
                "kubectl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs kubectl with `input` on its standard input (`-f -`), and returns its output,
    /// whatever its exit code.
    pub fn kubectl_input(&self, args: &[&str], input: &str) -> anyhow::Result<Output> {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot run kubectl")?;
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(input.as_bytes())?;
        Ok(child.wait_with_output()?)
    }

    /// `kubectl apply -f -` with the given manifest.
    pub fn apply(&self, namespace: &str, manifest: &str) -> anyhow::Result<String> {
        let out = self.kubectl_input(&["apply", "-n", namespace, "-f", "-"], manifest)?;
        if !out.status.success() {
            bail!(
                "kubectl apply failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The events about `kind` `name` in `namespace`, as `kubectl get events` lists them.
    pub fn events_of(&self, namespace: &str, kind: &str, name: &str) -> anyhow::Result<Vec<Value>> {
        let selector = format!("involvedObject.name={name},involvedObject.kind={kind}");
        let out = self.kubectl(&[
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            &selector,
            "-o",
            "json",
        ])?;
        let list: Value = serde_json::from_str(&out)?;
        list["items"]
            .as_array()
            .cloned()
            .context("`kubectl get events -o json` answered without items")
    }

    /// The object as JSON, or `None` when it does not exist.
    pub fn get_json(&self, namespace: &str, resource: &str) -> anyhow::Result<Option<Value>> {
        let out = self.kubectl_output(&["get", "-n", namespace, resource, "-o", "json"])?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            if stderr.contains("NotFound") || stderr.contains("not found") {
                return Ok(None);
            }
            bail!("kubectl get {resource} failed: {stderr}");
        }
        Ok(Some(serde_json::from_slice(&out.stdout)?))
    }

    /// An API fault proxy in front of kube-apiserver (local control plane only), for keeper
    /// processes started with [`Keeper::start_through`]: faults go to their requests only.
    pub fn api_proxy(&self) -> anyhow::Result<ApiProxy> {
        let url = self
            .apiserver_url
            .clone()
            .context("an API fault proxy needs the local control plane")?;
        let tls = self
            .apiserver_tls
            .clone()
            .context("an API fault proxy needs the local control plane")?;
        ApiProxy::start(keeper_e2e_apiproxy::Config {
            upstream: url,
            upstream_ca: tls.ca,
            cert: tls.cert,
            key: tls.key,
        })
    }

    /// Writes the environment's keeper configuration with one provider more, `name`, whose
    /// settings are `settings` (YAML, as under the provider's name, without indentation), to a
    /// file of its own, and returns its path. The environment's configuration lists its providers
    /// as a block under `providers:`.
    pub fn config_with_provider(&self, name: &str, settings: &str) -> anyhow::Result<PathBuf> {
        let config = std::fs::read_to_string(&self.keeper_config)?;
        let lines: Vec<&str> = config.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.trim_end() == "providers:")
            .context("the keeper configuration has no block `providers:`")?;
        let indent = lines[at + 1..]
            .iter()
            .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(|l| l.len() - l.trim_start().len())
            .filter(|n| *n > 0)
            .context("the keeper configuration's `providers:` block is empty")?;
        let pad = " ".repeat(indent);
        let mut block = vec![format!("{pad}{name}:")];
        block.extend(settings.lines().map(|l| format!("{pad}{pad}{l}")));
        let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        out.splice(at + 1..at + 1, block);
        let path =
            std::env::temp_dir().join(format!("keeper-e2e-{}-{name}.yaml", std::process::id()));
        std::fs::write(&path, out.join("\n") + "\n")?;
        Ok(path)
    }

    /// Creates a fresh namespace for one scenario; it is deleted when the guard drops.
    ///
    /// Names are unique per call, not only per process: a namespace deleted by an earlier
    /// scenario of the same test binary may still be terminating (kube's namespace controller
    /// empties it first), and kube refuses to create one of that name meanwhile.
    pub fn namespace(&self, prefix: &str) -> anyhow::Result<Namespace> {
        static CREATED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id() % 100000,
            CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        self.kubectl(&["create", "namespace", &name])?;
        Ok(Namespace {
            env: self.clone(),
            name,
        })
    }
}

/// A namespace owned by one scenario.
pub struct Namespace {
    env: Env,
    pub name: String,
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self
            .env
            .kubectl_output(&["delete", "namespace", &self.name, "--wait=false"]);
    }
}

/// A free TCP port on 127.0.0.1 (bound and released: free for a moment, as tests use it), never
/// one this process handed out before: the kernel may give a just-released port again, and two
/// servers of one keeper (metrics and webhook) were once given the same one.
pub fn free_port() -> anyhow::Result<u16> {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        if HANDED_OUT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(port)
        {
            return Ok(port);
        }
    }
}

fn stack_script() -> PathBuf {
    repo_root().join("e2e/stack.sh")
}

/// The repository under test, read when the scenario runs (cargo and nextest set
/// `CARGO_MANIFEST_DIR` for every test): a test binary cargo reuses from another checkout of the
/// same shared target dir would otherwise point into that checkout. A program cargo does not run
/// (the benchmark) names it in `KEEPER_REPO_ROOT`.
pub fn repo_root() -> PathBuf {
    if let Some(root) = std::env::var_os("KEEPER_REPO_ROOT") {
        return PathBuf::from(root);
    }
    let scenarios = std::env::var("CARGO_MANIFEST_DIR")
        .expect("run by cargo, or with KEEPER_REPO_ROOT set (e2e/run-bench.sh sets it)");
    Path::new(&scenarios).join("../..")
}

/// The admission webhook of a keeper process, registered with the API server while it lives.
struct Webhook {
    env: Env,
    name: String,
    dir: PathBuf,
}

impl Webhook {
    /// Creates a certificate, and registers a webhook configuration for `port`.
    fn register(env: &Env, port: u16) -> anyhow::Result<Webhook> {
        let dir =
            std::env::temp_dir().join(format!("keeper-e2e-webhook-{}-{port}", std::process::id()));
        let status = Command::new(stack_script())
            .arg("webhook-cert")
            .arg(&dir)
            .status()?;
        anyhow::ensure!(status.success(), "cannot create the webhook certificate");
        let name = format!("keeper-e2e-{}", std::process::id());
        let manifest = Command::new(stack_script())
            .args([
                "webhook-configuration",
                &name,
                &format!("https://127.0.0.1:{port}/validate"),
            ])
            .arg(dir.join("ca.crt"))
            .output()?;
        anyhow::ensure!(
            manifest.status.success(),
            "cannot render the webhook configuration"
        );
        env.apply("default", &String::from_utf8(manifest.stdout)?)?;
        Ok(Webhook {
            env: env.clone(),
            name,
            dir,
        })
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.env.kubectl_output(&[
            "delete",
            "validatingwebhookconfiguration",
            &self.name,
            "--ignore-not-found",
        ]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The release name e2e/stack.sh renders keeper's RBAC with (install_keeper_rbac): the chart's
/// self-managed webhook grants name the configuration and Secret after it.
pub const STACK_RELEASE: &str = "keeper-local";

/// A webhook whose certificate keeper issues itself (`--webhook-cert-secret`): the chart's
/// configuration (mode selfManaged, no caBundle) named as the stack's RBAC expects, removed with
/// the Secret keeper made when dropped (after keeper is stopped).
struct SelfManagedWebhook {
    env: Env,
    configuration: String,
    secret: String,
}

impl SelfManagedWebhook {
    fn register(env: &Env, port: u16) -> anyhow::Result<SelfManagedWebhook> {
        let webhook = SelfManagedWebhook {
            env: env.clone(),
            configuration: STACK_RELEASE.to_string(),
            secret: format!("{STACK_RELEASE}-webhook-tls"),
        };
        // What an earlier run may have left: keeper would reuse its CA, which proves less.
        webhook.remove();
        let manifest = Command::new(stack_script())
            .args([
                "webhook-configuration",
                &webhook.configuration,
                &format!("https://127.0.0.1:{port}/validate"),
            ])
            .output()?;
        anyhow::ensure!(
            manifest.status.success(),
            "cannot render the webhook configuration: {}",
            String::from_utf8_lossy(&manifest.stderr)
        );
        env.apply("default", &String::from_utf8(manifest.stdout)?)?;
        Ok(webhook)
    }

    fn remove(&self) {
        let _ = self.env.kubectl_output(&[
            "delete",
            "validatingwebhookconfiguration",
            &self.configuration,
            "--ignore-not-found",
        ]);
        let _ = self.env.kubectl_output(&[
            "delete",
            "secret",
            "-n",
            &self.env.operator_namespace,
            &self.secret,
            "--ignore-not-found",
        ]);
    }
}

impl Drop for SelfManagedWebhook {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A running `keeper run` process, killed when dropped.
pub struct Keeper {
    child: Child,
    pub metrics_url: String,
    pub log: PathBuf,
    /// The webhook's address (`127.0.0.1:PORT`) when keeper serves it.
    pub webhook_address: Option<String>,
    _webhook: Option<Webhook>,
    _self_managed: Option<SelfManagedWebhook>,
    /// The kubeconfig pointing at an API fault proxy, removed when keeper ends.
    proxied_kubeconfig: Option<PathBuf>,
}

/// How a keeper process is started.
#[derive(Default)]
struct Launch<'a> {
    webhook: bool,
    /// A self-managed webhook certificate valid this long (`--webhook-cert-validity`).
    self_managed: Option<&'a str>,
    lease: Option<&'a str>,
    through: Option<&'a ApiProxy>,
    /// A configuration of the scenario's own instead of the environment's.
    config: Option<&'a Path>,
}

impl Keeper {
    /// Starts keeper (leader election off: one process) and waits until /readyz answers 200.
    pub fn start(env: &Env) -> anyhow::Result<Keeper> {
        Self::launch(env, Launch::default())
    }

    /// Starts keeper taking part in leader election on Lease `lease` (as a replica of a
    /// Deployment would) and waits until /readyz answers 200 (a standby is ready too).
    pub fn start_elected(env: &Env, lease: &str) -> anyhow::Result<Keeper> {
        Self::launch(
            env,
            Launch {
                lease: Some(lease),
                ..Launch::default()
            },
        )
    }

    /// Starts keeper (leader election off) with its API requests going through `proxy`, whose
    /// fault rules then apply to this keeper's requests only.
    pub fn start_through(env: &Env, proxy: &ApiProxy) -> anyhow::Result<Keeper> {
        Self::launch(
            env,
            Launch {
                through: Some(proxy),
                ..Launch::default()
            },
        )
    }

    /// Starts keeper taking part in leader election on Lease `lease`, its API requests going
    /// through `proxy` (to cut it off from the API server while it leads).
    pub fn start_elected_through(
        env: &Env,
        lease: &str,
        proxy: &ApiProxy,
    ) -> anyhow::Result<Keeper> {
        Self::launch(
            env,
            Launch {
                lease: Some(lease),
                through: Some(proxy),
                ..Launch::default()
            },
        )
    }

    /// Starts keeper (leader election off) with the configuration at `config` instead of the
    /// environment's (see [`Env::config_with_provider`]).
    pub fn start_with_config(env: &Env, config: &Path) -> anyhow::Result<Keeper> {
        Self::launch(
            env,
            Launch {
                config: Some(config),
                ..Launch::default()
            },
        )
    }

    /// Starts keeper with its admission webhook registered (local control plane only: a real
    /// cluster's API server cannot reach a webhook on this machine's loopback).
    pub fn start_with_webhook(env: &Env) -> anyhow::Result<Keeper> {
        anyhow::ensure!(
            env.apiserver_url.is_some(),
            "the webhook scenario needs the local control plane"
        );
        Self::launch(
            env,
            Launch {
                webhook: true,
                ..Launch::default()
            },
        )
    }

    /// Starts keeper with its webhook in self-managed mode (local control plane only): the
    /// chart's configuration `keeper-local` without a caBundle calls it on 127.0.0.1, and keeper
    /// issues its certificate (valid for `validity`) into Secret `keeper-local-webhook-tls` of its
    /// namespace and sets the caBundle. Both go when the handle drops.
    pub fn start_with_self_managed_webhook(env: &Env, validity: &str) -> anyhow::Result<Keeper> {
        anyhow::ensure!(
            env.apiserver_url.is_some(),
            "the webhook scenario needs the local control plane"
        );
        Self::launch(
            env,
            Launch {
                self_managed: Some(validity),
                ..Launch::default()
            },
        )
    }

    /// Starts a keeper command the scenario put together itself (arguments, environment and
    /// kubeconfig all its own, e.g. those of an installed Deployment), logging to a file of its
    /// own, and waits until `metrics_url`/readyz answers 200. Killed when the handle drops.
    pub fn start_command(mut command: Command, metrics_url: String) -> anyhow::Result<Keeper> {
        let log = std::env::temp_dir().join(format!(
            "keeper-e2e-{}-{}.log",
            std::process::id(),
            free_port()?
        ));
        let file = std::fs::File::create(&log)?;
        command.stdout(file.try_clone()?).stderr(file);
        let keeper = Keeper {
            child: command.spawn().context("cannot start keeper")?,
            metrics_url,
            log,
            webhook_address: None,
            _webhook: None,
            _self_managed: None,
            proxied_kubeconfig: None,
        };
        let ready = format!("{}/readyz", keeper.metrics_url);
        wait_until(Duration::from_secs(60), "keeper to become ready", || {
            Ok(http_get(&ready).is_some_and(|(status, _)| status == 200))
        })
        .with_context(|| format!("keeper log: {}", keeper.log_text()))?;
        Ok(keeper)
    }

    fn launch(env: &Env, how: Launch) -> anyhow::Result<Keeper> {
        let port = free_port()?;
        let log =
            std::env::temp_dir().join(format!("keeper-e2e-{}-{port}.log", std::process::id()));
        let file = std::fs::File::create(&log)?;
        let proxied_kubeconfig = match how.through {
            Some(proxy) => {
                let path = std::env::temp_dir().join(format!(
                    "keeper-e2e-{}-{port}.kubeconfig",
                    std::process::id()
                ));
                proxy.kubeconfig(&env.keeper_kubeconfig, &path)?;
                Some(path)
            }
            None => None,
        };
        let lease = how.lease;
        let mut command = Command::new(&env.keeper_bin);
        command
            .args([
                "run",
                "--namespace",
                &env.operator_namespace,
                "--metrics-bind-address",
            ])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--config")
            .arg(how.config.unwrap_or(&env.keeper_config))
            .arg(format!("--leader-election={}", lease.is_some()))
            .args(lease.map(|l| format!("--leader-election-lease={l}")))
            .env(
                "KUBECONFIG",
                proxied_kubeconfig
                    .as_ref()
                    .unwrap_or(&env.keeper_kubeconfig),
            )
            .envs(env.keeper_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(file.try_clone()?)
            .stderr(file);
        let mut webhook_address = None;
        let webhook = if how.webhook {
            let webhook_port = free_port()?;
            let webhook = Webhook::register(env, webhook_port)?;
            command
                .arg("--webhook-bind-address")
                .arg(format!("127.0.0.1:{webhook_port}"))
                .arg("--webhook-cert-dir")
                .arg(&webhook.dir);
            webhook_address = Some(format!("127.0.0.1:{webhook_port}"));
            Some(webhook)
        } else {
            None
        };
        let self_managed = match how.self_managed {
            Some(validity) => {
                let webhook_port = free_port()?;
                let webhook = SelfManagedWebhook::register(env, webhook_port)?;
                command
                    .arg("--webhook-bind-address")
                    .arg(format!("127.0.0.1:{webhook_port}"))
                    .args(["--webhook-cert-secret", &webhook.secret])
                    .args(["--webhook-configuration", &webhook.configuration])
                    .args(["--webhook-cert-hosts", "127.0.0.1"])
                    .args(["--webhook-cert-validity", validity]);
                webhook_address = Some(format!("127.0.0.1:{webhook_port}"));
                Some(webhook)
            }
            None => None,
        };
        let child = command.spawn().context("cannot start keeper")?;
        let keeper = Keeper {
            child,
            metrics_url: format!("http://127.0.0.1:{port}"),
            log,
            webhook_address,
            _webhook: webhook,
            _self_managed: self_managed,
            proxied_kubeconfig,
        };
        let ready = format!("{}/readyz", keeper.metrics_url);
        wait_until(Duration::from_secs(60), "keeper to become ready", || {
            Ok(http_get(&ready).is_some_and(|(status, _)| status == 200))
        })
        .with_context(|| format!("keeper log: {}", keeper.log_text()))?;
        Ok(keeper)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process id (the benchmark reads its CPU time and memory from /proc).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a crash or an OOM kill would.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a graceful exit; returns the exit code.
    pub fn terminate(mut self) -> anyhow::Result<Option<i32>> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        anyhow::ensure!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status.code());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "keeper did not stop within 30s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(path) = &self.proxied_kubeconfig {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Says that a scenario cannot run here (it needs what only the local control plane has) and
/// fails it, unless `KEEPER_E2E_ALLOW_SKIP` is set: `make e2e` against the local stack never
/// passes a scenario that did not run. `e2e/run-e2e.sh` sets it when it runs against a cluster of
/// your own (`KEEPER_E2E_KUBECONFIG`). The caller returns after it.
pub fn skip(why: &str) {
    if std::env::var_os("KEEPER_E2E_ALLOW_SKIP").is_some() {
        eprintln!("skipped: {why}");
    } else {
        panic!("cannot run here: {why} (set KEEPER_E2E_ALLOW_SKIP=1 to skip it instead)");
    }
}

/// Polls `check` until it returns true, for at most `timeout`.
pub fn wait_until(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_error = Some(e),
        }
        if Instant::now() >= deadline {
            match last_error {
                Some(e) => {
                    bail!("timed out after {timeout:?} waiting for {what}; last error: {e:#}")
                }
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The AWS configuration of the environment: the admin keys of the local moto, or the
/// standard AWS chain.
async fn aws_config(env: &Env) -> aws_config::SdkConfig {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some((key, secret)) = &env.admin_keys {
        loader = loader
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_rds::config::Credentials::new(
                key, secret, None, None, "e2e",
            ));
    }
    loader.load().await
}

/// An RDS client for the environment's RDS endpoint (moto locally; AWS with a real cluster).
pub async fn rds_client(env: &Env) -> aws_sdk_rds::Client {
    let sdk = aws_config(env).await;
    let mut config = aws_sdk_rds::config::Builder::from(&sdk);
    if let Some(endpoint) = &env.rds_endpoint {
        config = config.endpoint_url(endpoint);
    }
    aws_sdk_rds::Client::from_conf(config.build())
}

/// An S3 client (path style) for `endpoint` with the given keys, as an application would use
/// the credentials keeper publishes.
pub fn s3_client(
    endpoint: &str,
    access_key: &str,
    secret_key: &str,
    region: &str,
) -> aws_sdk_s3::Client {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let config = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new(region.to_string()))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            access_key,
            secret_key,
            None,
            None,
            "keeper-e2e",
        ))
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// An IAM client of the store behind provider `s3` (moto serves IAM at its S3 endpoint; AWS IAM
/// with a real cluster).
pub async fn iam_client(env: &Env) -> aws_sdk_iam::Client {
    let sdk = aws_config(env).await;
    let mut config = aws_sdk_iam::config::Builder::from(&sdk);
    if env.admin_keys.is_some()
        && let Some(endpoint) = &env.s3_endpoint
    {
        config = config.endpoint_url(endpoint);
    }
    aws_sdk_iam::Client::from_conf(config.build())
}

/// The objects in `bucket`; `None` when the bucket does not exist.
pub async fn count_objects(s3: &aws_sdk_s3::Client, bucket: &str) -> Option<usize> {
    let mut pages = s3
        .list_objects_v2()
        .bucket(bucket)
        .into_paginator()
        .page_size(1000)
        .send();
    let mut count = 0;
    while let Some(page) = pages.next().await {
        match page {
            Ok(page) => count += page.contents().len(),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_no_such_bucket()) => return None,
            Err(e) => panic!("list {bucket}: {e:?}"),
        }
    }
    Some(count)
}

/// keeper's IAM users (path `/keeper/`) tagged with `bucket`.
pub async fn iam_users_of(iam: &aws_sdk_iam::Client, bucket: &str) -> Vec<String> {
    let users = iam
        .list_users()
        .path_prefix("/keeper/")
        .send()
        .await
        .expect("list users");
    let mut out = Vec::new();
    for user in users.users() {
        let tags = match iam
            .list_user_tags()
            .user_name(user.user_name())
            .send()
            .await
        {
            Ok(tags) => tags,
            // Deleted between the listing and this read (a keeper cleaning up after an earlier
            // scenario): not a user of `bucket` any more.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_no_such_entity_exception()) =>
            {
                continue;
            }
            Err(e) => panic!("list user tags of {}: {e:?}", user.user_name()),
        };
        if tags
            .tags()
            .iter()
            .any(|t| t.key() == "keeper.dev/bucket" && t.value() == bucket)
        {
            out.push(user.user_name().to_string());
        }
    }
    out
}

/// Keys reaching every bucket of a tenant on `provider`, as an operator holds them: the
/// tenant's own Secret on StorageGRID (its root user), the provider's keys on provider `s3`
/// (whose tenants get no tenant-wide keys: each bucket has its own IAM user).
pub fn tenant_wide_credentials(
    env: &Env,
    namespace: &str,
    tenant: &str,
    provider: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    if provider != "s3" {
        return secret_data(env, namespace, &format!("{tenant}-s3-credentials"));
    }
    let mut creds = secret_data(env, &env.operator_namespace, "s3-credentials")?;
    creds.insert(
        "endpoint".into(),
        env.s3_endpoint.clone().context("no S3 endpoint")?,
    );
    creds.insert("region".into(), "us-east-1".into());
    Ok(creds)
}

/// An S3 client signing with the credentials of a Secret keeper published.
pub fn client_for(creds: &std::collections::BTreeMap<String, String>) -> aws_sdk_s3::Client {
    s3_client(
        &creds["endpoint"],
        &creds["accessKeyId"],
        &creds["secretAccessKey"],
        &creds["region"],
    )
}

/// Puts `count` small objects `<prefix>/<n>` into `bucket`, 16 at a time.
pub async fn put_objects(s3: &aws_sdk_s3::Client, bucket: &str, prefix: &str, count: usize) {
    use futures::StreamExt;
    futures::stream::iter(0..count)
        .map(|i| {
            let s3 = s3.clone();
            async move {
                s3.put_object()
                    .bucket(bucket)
                    .key(format!("{prefix}/{i:05}"))
                    .body(aws_sdk_s3::primitives::ByteStream::from(
                        format!("object {i}").into_bytes(),
                    ))
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("put {bucket}/{prefix}/{i}: {e:?}"))
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
}

/// The data of a Secret, decoded.
pub fn secret_data(
    env: &Env,
    namespace: &str,
    name: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    use base64::Engine as _;
    let secret = env
        .get_json(namespace, &format!("secret/{name}"))?
        .with_context(|| format!("Secret {namespace}/{name} does not exist"))?;
    let mut out = std::collections::BTreeMap::new();
    for (key, value) in secret["data"].as_object().into_iter().flatten() {
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(value.as_str().unwrap_or_default())?;
        out.insert(key.clone(), String::from_utf8(bytes)?);
    }
    Ok(out)
}

/// The StorageGRID emulator's state (accounts, buckets, users, groups, keys; no secrets).
pub fn storagegrid_state(env: &Env) -> anyhow::Result<Value> {
    let url = format!(
        "{}/debug/state",
        env.storagegrid_url
            .as_deref()
            .context("no StorageGRID emulator")?
    );
    let (status, body) = http_get(&url).context("StorageGRID emulator unreachable")?;
    anyhow::ensure!(status == 200, "GET {url}: {status}");
    Ok(serde_json::from_str(&body)?)
}

/// Accounts on the grid that carry the ownership marker of the tenant with `uid`.
pub fn accounts_of(env: &Env, uid: &str) -> Vec<Value> {
    let state = storagegrid_state(env).unwrap();
    state["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["description"].as_str().is_some_and(|d| d.contains(uid)))
        .cloned()
        .collect()
}

/// Signs in to the StorageGRID emulator as the root user of `account` with `password`: the
/// token the grid answers, or its refusal.
pub fn grid_root_sign_in(env: &Env, account: &str, password: &str) -> anyhow::Result<Value> {
    let grid = env
        .storagegrid_url
        .as_deref()
        .context("no StorageGRID emulator")?;
    debug_call(
        "POST",
        format!("{grid}/api/v4/authorize"),
        Some(serde_json::json!({"accountId": account, "username": "root", "password": password})),
    )
}

/// Sends a JSON body to the StorageGRID emulator's debug API (fault injection).
pub fn storagegrid_debug(env: &Env, method: &str, path: &str, body: Value) -> anyhow::Result<()> {
    let grid = env
        .storagegrid_url
        .as_deref()
        .context("no StorageGRID emulator")?;
    send_json(method, format!("{grid}{path}"), Some(body)).map(drop)
}

/// Starts (or restarts, emptied) moto's request recorder.
pub fn moto_start_recording(env: &Env) -> anyhow::Result<()> {
    let moto = env.rds_endpoint.as_deref().context("no moto server")?;
    for path in ["reset-recording", "start-recording"] {
        send_json("POST", format!("{moto}/moto-api/recorder/{path}"), None)?;
    }
    Ok(())
}

/// The form parameters of every query-protocol request (RDS) moto recorded, in order.
pub fn moto_recorded_calls(
    env: &Env,
) -> anyhow::Result<Vec<std::collections::BTreeMap<String, String>>> {
    use base64::Engine as _;
    let moto = env.rds_endpoint.as_deref().context("no moto server")?;
    let (status, body) = http_get(&format!("{moto}/moto-api/recorder/download-recording"))
        .context("moto unreachable")?;
    anyhow::ensure!(status == 200, "download-recording: {status}");
    let mut calls = Vec::new();
    for line in body.lines().filter(|l| !l.trim().is_empty()) {
        let entry: Value = serde_json::from_str(line)?;
        let raw = entry["body"].as_str().unwrap_or_default();
        let form = if entry["body_encoded"] == true {
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(raw)?)?
        } else {
            raw.to_string()
        };
        let url = ::reqwest::Url::parse(&format!("http://form/?{form}"))?;
        let params: std::collections::BTreeMap<String, String> =
            url.query_pairs().into_owned().collect();
        if params.contains_key("Action") {
            calls.push(params);
        }
    }
    Ok(calls)
}

/// The master password keeper last gave RDS for instance `id` (in a `CreateDBInstance` or a
/// `ModifyDBInstance`), from moto's recording (see [`moto_start_recording`]).
pub fn master_password_sent(env: &Env, id: &str) -> anyhow::Result<Option<String>> {
    Ok(moto_recorded_calls(env)?
        .into_iter()
        .filter(|c| {
            matches!(
                c["Action"].as_str(),
                "CreateDBInstance" | "ModifyDBInstance"
            ) && c.get("DBInstanceIdentifier").map(String::as_str) == Some(id)
        })
        .filter_map(|c| c.get("MasterUserPassword").cloned())
        .next_back())
}

/// A keeper resource's manifest; `spec` is the body of its spec, indented by two spaces.
pub fn manifest(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

/// Waits up to 90 s for `resource` to be `Ready=True` and returns it.
pub fn wait_ready(env: &Env, namespace: &str, resource: &str) -> Value {
    wait_for(
        env,
        namespace,
        resource,
        "Ready",
        Duration::from_secs(90),
        |o| condition_is(o, "Ready", "True"),
    )
}

/// One API request as kube-apiserver's audit log records it (level Metadata).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiRequest {
    pub verb: String,
    /// API group, `""` for core.
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The user the request was served as (the impersonated one, when impersonated).
    pub user: String,
    pub user_agent: String,
    pub code: u16,
    /// Refused by authorization (RBAC): `authorization.k8s.io/decision` is `forbid`.
    pub denied: bool,
}

impl ApiRequest {
    /// `resource` or `resource/subresource`, as RBAC names it.
    pub fn full_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// kube-apiserver's audit log (`--audit-log-path`, JSON lines) on the local control plane: every
/// API request of every user, never rotated (e2e/stack.sh), so a scenario marks where it starts
/// and reads what came after. Should it be rotated all the same, reading it fails: what a window
/// that spans a rotation holds is not in the file any more, and counting what is left would read
/// as fewer requests than keeper made.
#[derive(Clone, Debug)]
pub struct AuditLog {
    path: PathBuf,
}

/// A place in the audit log: the file (its inode) and the offset in it.
#[derive(Clone, Copy, Debug)]
pub struct AuditMark {
    file: u64,
    offset: u64,
}

impl AuditLog {
    pub fn new(path: impl Into<PathBuf>) -> AuditLog {
        AuditLog { path: path.into() }
    }

    /// The local control plane's audit log; fails elsewhere.
    pub fn of(env: &Env) -> anyhow::Result<AuditLog> {
        env.audit_log
            .clone()
            .map(AuditLog::new)
            .context("kube-apiserver's audit log: the local control plane only")
    }

    /// The end of the log now: requests made from here on come after it.
    pub fn mark(&self) -> anyhow::Result<AuditMark> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&self.path)
            .with_context(|| format!("audit log {}", self.path.display()))?;
        Ok(AuditMark {
            file: meta.ino(),
            offset: meta.len(),
        })
    }

    /// The requests logged between two marks (`to`: `None` for the end of the log), once each:
    /// kube logs a watch when it starts and again when it ends (one audit ID), and this keeps
    /// the last. kube writes an event once the request is answered, so a request answered just
    /// before `to` was taken may be missing.
    pub fn requests(
        &self,
        from: AuditMark,
        to: Option<AuditMark>,
    ) -> anyhow::Result<Vec<ApiRequest>> {
        use std::io::{Read, Seek, SeekFrom};
        use std::os::unix::fs::MetadataExt;
        let mut file = std::fs::File::open(&self.path)
            .with_context(|| format!("audit log {}", self.path.display()))?;
        let now = file.metadata()?.ino();
        if let Some(rotated) = [Some(from), to]
            .into_iter()
            .flatten()
            .find(|m| m.file != now)
        {
            anyhow::bail!(
                "audit log {} was rotated after {rotated:?}: the requests of this window are not all \
                 in it (kube-apiserver rotates at --audit-log-maxsize)",
                self.path.display()
            );
        }
        file.seek(SeekFrom::Start(from.offset))?;
        let mut text = String::new();
        match to {
            Some(to) => file
                .take(to.offset.saturating_sub(from.offset))
                .read_to_string(&mut text)?,
            None => file.read_to_string(&mut text)?,
        };
        let mut order = Vec::new();
        let mut by_id: std::collections::HashMap<String, ApiRequest> = Default::default();
        // A line cut by the end of a window does not parse: it belongs to the next window.
        for event in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            let Some(request) = parse_audit_event(&event) else {
                continue;
            };
            let id = event["auditID"].as_str().unwrap_or_default().to_string();
            if by_id.insert(id.clone(), request).is_none() {
                order.push(id);
            }
        }
        Ok(order
            .into_iter()
            .filter_map(|id| by_id.remove(&id))
            .collect())
    }

    /// Every request logged since `from`.
    pub fn since(&self, from: AuditMark) -> anyhow::Result<Vec<ApiRequest>> {
        self.requests(from, None)
    }

    /// The requests `user` made since `from`.
    pub fn since_by(&self, from: AuditMark, user: &str) -> anyhow::Result<Vec<ApiRequest>> {
        let mut requests = self.since(from)?;
        requests.retain(|r| r.user == user);
        Ok(requests)
    }
}

/// An audit event's request, `None` for requests that name no resource (discovery, /version).
fn parse_audit_event(event: &Value) -> Option<ApiRequest> {
    let object = event.get("objectRef")?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let user = event
        .get("impersonatedUser")
        .filter(|u| !u.is_null())
        .unwrap_or(&event["user"]);
    Some(ApiRequest {
        verb: text(&event["verb"]),
        group: text(&object["apiGroup"]),
        resource: text(&object["resource"]),
        subresource: text(&object["subresource"]),
        namespace: text(&object["namespace"]),
        name: text(&object["name"]),
        user: text(&user["username"]),
        user_agent: text(&event["userAgent"]),
        code: event["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
        denied: event["annotations"]["authorization.k8s.io/decision"] == "forbid",
    })
}

/// Polls `resource` until `check` holds and returns it; on timeout, panics showing the object
/// as last seen, which is what a failing scenario needs to be understood.
pub fn wait_for(
    env: &Env,
    namespace: &str,
    resource: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let mut obj = Value::Null;
    wait_until(timeout, &format!("{resource}: {what}"), || {
        obj = env.get_json(namespace, resource)?.unwrap_or_default();
        Ok(check(&obj))
    })
    .unwrap_or_else(|e| panic!("{e:#}\nlast seen: {obj:#}"));
    obj
}

/// Applies S3Tenant `name` on `provider` and waits until it is Ready; returns it.
pub fn ready_tenant(env: &Env, namespace: &str, name: &str, provider: &str) -> Value {
    env.apply(
        namespace,
        &format!(
            "apiVersion: keeper.dev/v1alpha1\nkind: S3Tenant\nmetadata:\n  name: {name}\nspec:\n  provider: {provider}\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    wait_for(
        env,
        namespace,
        &format!("s3tenant/{name}"),
        "Ready",
        Duration::from_secs(60),
        |t| condition_is(t, "Ready", "True"),
    )
}

/// Whether the object has condition `type_` with `status` (`"True"` or `"False"`).
pub fn condition_is(obj: &Value, type_: &str, status: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c["status"] == status)
}

/// The status of condition `type_` of an object, if present.
pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Runs an async request on a thread and runtime of its own, so that the synchronous harness
/// works both inside and outside the scenarios' async runtimes.
fn on_own_runtime<T: Send + 'static>(
    request: impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
) -> anyhow::Result<T> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(request)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("request thread panicked"))?
}

/// POSTs (or sends `method` with) a JSON body to a debug endpoint and expects success; returns
/// the answer's text.
fn send_json(method: &str, url: String, body: Option<Value>) -> anyhow::Result<String> {
    let method: ::reqwest::Method = method.parse()?;
    on_own_runtime(async move {
        let mut request = ::reqwest::Client::new().request(method, &url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        anyhow::ensure!(status.is_success(), "{url}: {status}: {text}");
        Ok(text)
    })
}

/// Sends `method` (with a JSON body, if any) to an emulator's debug endpoint that answers JSON,
/// expects success and returns the answer (`null` for an empty one).
pub fn debug_call(method: &str, url: String, body: Option<Value>) -> anyhow::Result<Value> {
    let text = send_json(method, url.clone(), body)?;
    Ok(if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).with_context(|| format!("{url} answered {text}"))?
    })
}

/// Rules on the local control plane's AWS proxy (`PUT /_awsproxy/faults`: faults and latency per
/// service and action, see e2e/awsproxy) until dropped, so that a failing scenario leaves none to
/// the next. Setting them starts the proxy's call log afresh.
pub struct AwsProxyRules {
    proxy: String,
}

impl AwsProxyRules {
    pub fn set(env: &Env, rules: Value) -> anyhow::Result<AwsProxyRules> {
        let proxy = env
            .aws_proxy_url
            .clone()
            .context("AWS proxy rules need the local control plane's AWS proxy")?;
        debug_call(
            "PUT",
            format!("{proxy}/_awsproxy/faults"),
            Some(serde_json::json!({ "rules": rules })),
        )?;
        debug_call("DELETE", format!("{proxy}/_awsproxy/calls"), None)?;
        Ok(AwsProxyRules { proxy })
    }

    /// The calls the proxy saw since the rules were set, as they arrived: `{"atMs": ...,
    /// "service": "iam", "action": "CreateUser", "fault": null}`.
    pub fn calls(&self) -> anyhow::Result<Vec<Value>> {
        let log = debug_call("GET", format!("{}/_awsproxy/calls/log", self.proxy), None)?;
        Ok(log["log"].as_array().cloned().unwrap_or_default())
    }
}

impl Drop for AwsProxyRules {
    fn drop(&mut self) {
        let _ = debug_call("DELETE", format!("{}/_awsproxy/faults", self.proxy), None);
    }
}

/// A pseudo-random delay below `max_ms`, from the clock: enough to spread crashes over a sequence.
pub fn jitter(max_ms: u64) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos() as u64;
    Duration::from_millis(nanos % max_ms)
}

/// GET on loopback, returning status and body. Runs on a thread of its own so that synchronous
/// harness code works both inside and outside the scenarios' async runtimes.
pub fn http_get(url: &str) -> Option<(u16, String)> {
    let url = url.to_string();
    on_own_runtime(async move {
        let response = reqwest::get(url).await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    })
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_line(id: &str) -> String {
        serde_json::json!({"auditID": id, "verb": "get", "user": {"username": "u"},
               "objectRef": {"resource": "secrets", "namespace": "n", "name": id},
               "responseStatus": {"code": 200}})
        .to_string()
            + "\n"
    }

    #[test]
    fn an_audit_window_is_read_from_its_mark_and_refused_once_the_log_was_rotated() {
        let dir = std::env::temp_dir().join(format!("keeper-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        std::fs::write(&path, request_line("before")).unwrap();
        let log = AuditLog::new(&path);
        let mark = log.mark().unwrap();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, request_line("after").as_bytes()).unwrap();
        let names: Vec<String> = log
            .since(mark)
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["after"]);

        // kube-apiserver renames the full log and starts a new one; the new one may already be
        // longer than the mark.
        std::fs::rename(&path, dir.join("audit-2026-01-01T00-00-00.000.log")).unwrap();
        std::fs::write(&path, request_line("x").repeat(4)).unwrap();
        let refused = log.since(mark).unwrap_err().to_string();
        assert!(refused.contains("was rotated"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
