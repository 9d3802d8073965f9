//! `kubectl keeper` (the `kubectl-keeper` binary, a kubectl plugin): what keeper's objects wait
//! for and the command that moves them on (`status`, `why`), keeper's bucket requests written
//! and followed to their end (`drain`, `rotate`), and `release-finalizers` as `keeper` has it.
//! It acts as the user running it, with their kubeconfig; keeper's own RBAC plays no part.
//!
//! What to print is decided in [`plan`] and [`follow`] from the objects alone; this module reads
//! and writes them.

mod follow;
mod plan;
#[cfg(test)]
mod tests;

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::KubeConfigOptions;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::api::names::{format_duration, parse_duration};
use crate::api::{CloudDatabase, S3Bucket, S3Tenant};
use crate::release;
use follow::{Progress, Request};
use plan::{Kind, Object, Row};

/// kubectl keeper: what keeper's S3Tenants, S3Buckets and CloudDatabases wait for, and the next
/// command to run.
#[derive(Parser, Debug)]
#[command(name = "kubectl-keeper", bin_name = "kubectl keeper", version)]
pub struct Cli {
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    context: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Every keeper object of a namespace, one line each: phase, Ready, what it waits for and
    /// the next command.
    Status(StatusArgs),
    /// One object in full: conditions, what blocks its deletion, the backend state keeper
    /// records, recent events and the next command. KIND/NAME as kubectl takes it
    /// (s3tenant/team-a, s3b/assets, cdb/orders).
    Why(WhyArgs),
    /// Delete every object in a bucket (a new `keeper.dev/drain` request) and follow the drain
    /// until the bucket is empty.
    Drain(RequestArgs),
    /// Replace a bucket's keys (a new `keeper.dev/rotate-credentials` request) and follow it
    /// until the new keys are published and the bucket is Ready.
    Rotate(RequestArgs),
    /// List what removing keeper's finalizers would leave behind on the backends, and remove them
    /// with --confirm (as `keeper release-finalizers`). Refuses while a keeper leader holds the
    /// election Lease.
    ReleaseFinalizers(release::Args),
}

#[derive(Args, Debug)]
struct StatusArgs {
    /// The namespace (default: the context's).
    #[arg(long, short = 'n', conflicts_with = "all_namespaces")]
    namespace: Option<String>,
    /// Every namespace.
    #[arg(long, short = 'A')]
    all_namespaces: bool,
}

#[derive(Args, Debug)]
struct WhyArgs {
    /// KIND/NAME, such as s3tenant/team-a.
    target: String,
    /// The namespace (default: the context's).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
}

#[derive(Args, Debug)]
struct RequestArgs {
    /// The S3Bucket's name.
    bucket: String,
    /// The namespace (default: the context's).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Write the request and return without following it.
    #[arg(long)]
    no_wait: bool,
    /// Give up following after this long (the request goes on), such as 90s, 30m or 2h.
    #[arg(long, default_value = "30m", value_parser = parse_timeout)]
    timeout: Duration,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// How often a followed request is read again.
const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

/// The field manager of the annotations the plugin writes (`kubectl get -o yaml --show-managed-fields`).
const FIELD_MANAGER: &str = "kubectl-keeper";

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let (client, default_namespace) = connect(cli.context.as_deref()).await?;
    let or_default = |ns: Option<String>| ns.unwrap_or_else(|| default_namespace.clone());
    match cli.command {
        Command::Status(args) => {
            let ns = (!args.all_namespaces).then(|| or_default(args.namespace));
            status(&client, ns.as_deref()).await
        }
        Command::Why(args) => {
            let (kind, name) = plan::parse_target(&args.target)?;
            why(&client, kind, &name, &or_default(args.namespace)).await
        }
        Command::Drain(args) => {
            let ns = or_default(args.namespace.clone());
            request(&client, Request::Drain, &args, &ns).await
        }
        Command::Rotate(args) => {
            let ns = or_default(args.namespace.clone());
            request(&client, Request::Rotate, &args, &ns).await
        }
        Command::ReleaseFinalizers(args) => release::run_with(client, args).await,
    }
}

/// A client for `context` (the current one by default; in a Pod, its ServiceAccount) and that
/// context's namespace.
async fn connect(context: Option<&str>) -> anyhow::Result<(Client, String)> {
    let config = match context {
        Some(context) => kube::Config::from_kubeconfig(&KubeConfigOptions {
            context: Some(context.to_string()),
            ..KubeConfigOptions::default()
        })
        .await
        .with_context(|| format!("cannot load kubeconfig context {context:?}"))?,
        None => kube::Config::infer().await.context(
            "cannot find a kubeconfig (KUBECONFIG, ~/.kube/config) or in-cluster configuration",
        )?,
    };
    let namespace = config.default_namespace.clone();
    Ok((Client::try_from(config)?, namespace))
}

/// An object that does not decode as its kind (a field of the wrong type, kept by an older CRD).
struct Undecodable {
    namespace: String,
    name: String,
    error: String,
}

/// Every object of kind `K` (in `namespace`, or everywhere), each decoded on its own: one that
/// does not decode (keeper holds such objects apart) is returned as such rather than failing the
/// whole list.
async fn list<K>(
    client: &Client,
    namespace: Option<&str>,
) -> anyhow::Result<Vec<Result<K, Undecodable>>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let resource = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let listed = api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("cannot list {}", resource.plural))?;
    Ok(listed
        .items
        .into_iter()
        .map(|obj| {
            let (namespace, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
            obj.try_parse::<K>().map_err(|e| Undecodable {
                namespace,
                name,
                error: e.to_string(),
            })
        })
        .collect())
}

async fn status(client: &Client, namespace: Option<&str>) -> anyhow::Result<()> {
    let tenants = list::<S3Tenant>(client, namespace).await?;
    let buckets = list::<S3Bucket>(client, namespace).await?;
    let databases = list::<CloudDatabase>(client, namespace).await?;
    let decoded_buckets: Vec<S3Bucket> = buckets.iter().flatten().cloned().collect();
    let mut rows: Vec<Row> = Vec::new();
    let undecodable =
        |kind, u: &Undecodable| plan::undecodable_row(kind, &u.namespace, &u.name, &u.error);
    for t in &tenants {
        rows.push(match t {
            Ok(t) => plan::row(
                &Object::Tenant(t.clone()),
                &plan::buckets_of(t, &decoded_buckets),
            ),
            Err(e) => undecodable(Kind::Tenant, e),
        });
    }
    for b in &buckets {
        rows.push(match b {
            Ok(b) => plan::row(&Object::Bucket(b.clone()), &[]),
            Err(e) => undecodable(Kind::Bucket, e),
        });
    }
    for d in &databases {
        rows.push(match d {
            Ok(d) => plan::row(&Object::Database(d.clone()), &[]),
            Err(e) => undecodable(Kind::Database, e),
        });
    }
    if rows.is_empty() {
        match namespace {
            Some(ns) => println!("no S3Tenant, S3Bucket or CloudDatabase in namespace {ns}"),
            None => println!("no S3Tenant, S3Bucket or CloudDatabase in any namespace"),
        }
        return Ok(());
    }
    rows.sort_by(|a, b| a.namespace.cmp(&b.namespace));
    for line in plan::render(&rows, namespace.is_none()) {
        println!("{line}");
    }
    Ok(())
}

async fn why(client: &Client, kind: Kind, name: &str, ns: &str) -> anyhow::Result<()> {
    let missing = || format!("{}/{name} not found in namespace {ns}", kind.resource());
    let obj = match kind {
        Kind::Tenant => Object::Tenant(get(client, ns, name).await?.with_context(missing)?),
        Kind::Bucket => Object::Bucket(get(client, ns, name).await?.with_context(missing)?),
        Kind::Database => Object::Database(get(client, ns, name).await?.with_context(missing)?),
    };
    let buckets = match &obj {
        Object::Tenant(t) => {
            let listed: Vec<S3Bucket> = list::<S3Bucket>(client, Some(ns))
                .await?
                .into_iter()
                .flatten()
                .collect();
            plan::buckets_of(t, &listed)
        }
        _ => Vec::new(),
    };
    let uid = match &obj {
        Object::Tenant(o) => o.uid(),
        Object::Bucket(o) => o.uid(),
        Object::Database(o) => o.uid(),
    }
    .unwrap_or_default();
    // core/v1 lists the events written through events.k8s.io too (keeper writes those).
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let events = events
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await
        .context("cannot list the object's events")?
        .items;
    for line in plan::explain(&obj, &buckets, &events, Timestamp::now()) {
        println!("{line}");
    }
    Ok(())
}

async fn get<K>(client: &Client, ns: &str, name: &str) -> anyhow::Result<Option<K>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    api.get_opt(name).await.with_context(|| {
        format!(
            "cannot read {}/{name} in namespace {ns}",
            K::kind(&()).to_lowercase()
        )
    })
}

/// Writes a new request on the bucket, then (unless `--no-wait`) follows it until keeper
/// reports it done or failed, or `--timeout` passes.
async fn request(
    client: &Client,
    request: Request,
    args: &RequestArgs,
    ns: &str,
) -> anyhow::Result<()> {
    let name = &args.bucket;
    let api: Api<S3Bucket> = Api::namespaced(client.clone(), ns);
    let bucket = get::<S3Bucket>(client, ns, name)
        .await?
        .with_context(|| format!("s3bucket/{name} not found in namespace {ns}"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("the clock is before 1970")?
        .as_secs();
    let value = follow::fresh_value(request, &bucket, now);
    let baseline = follow::failure(request, &bucket);
    let patch = json!({"metadata": {"annotations": {request.annotation(): value}}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::Merge(&patch))
        .await
        .with_context(|| format!("cannot annotate s3bucket/{name} in namespace {ns}"))?;
    println!(
        "s3bucket/{name}: requested a {} ({}={value})",
        request.noun(),
        request.annotation()
    );
    if args.no_wait {
        println!("follow it with: kubectl keeper why s3bucket/{name} -n {ns}");
        return Ok(());
    }
    let mut display = Display::new(std::io::stderr().is_terminal(), format!("s3bucket/{name}"));
    let written = Instant::now();
    let mut last_seen = Some(bucket);
    loop {
        let current = get::<S3Bucket>(client, ns, name).await?;
        let progress = follow::progress(
            request,
            &value,
            current.as_ref(),
            last_seen.as_ref(),
            baseline.as_deref(),
            written.elapsed(),
        );
        display.show(&progress);
        match progress {
            Progress::Done(_) => return Ok(()),
            Progress::Failed(why) => {
                anyhow::bail!(
                    "s3bucket/{name}: the {} failed: {why}\nsee: kubectl keeper why s3bucket/{name} -n {ns}",
                    request.noun()
                )
            }
            Progress::Waiting(_) | Progress::Draining { .. } => {}
        }
        if written.elapsed() >= args.timeout {
            display.abandon();
            anyhow::bail!(
                "s3bucket/{name}: gave up following the {} after {} (--timeout); keeper goes on: kubectl keeper why s3bucket/{name} -n {ns}",
                request.noun(),
                format_duration(args.timeout)
            );
        }
        if current.is_some() {
            last_seen = current;
        }
        tokio::time::sleep(FOLLOW_INTERVAL).await;
    }
}

/// Progress as a bar on a terminal, as a line per change otherwise (logs, CI, pipes).
enum Display {
    Bar(ProgressBar),
    Lines { what: String, last: String },
}

impl Display {
    fn new(terminal: bool, what: String) -> Display {
        if !terminal {
            return Display::Lines {
                what,
                last: String::new(),
            };
        }
        let bar = ProgressBar::new_spinner().with_prefix(what);
        bar.set_style(
            ProgressStyle::with_template("{spinner} {prefix}: {wide_msg}")
                .expect("a valid template"),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        Display::Bar(bar)
    }

    fn show(&mut self, progress: &Progress) {
        match self {
            // A failure ends the command with the error, which says it once.
            Display::Lines { .. } if matches!(progress, Progress::Failed(_)) => {}
            Display::Lines { what, last } => {
                let line = progress.line();
                if line != *last {
                    println!("{what}: {line}");
                    *last = line;
                }
            }
            Display::Bar(bar) => match progress {
                Progress::Draining {
                    deleted,
                    total,
                    message,
                } => {
                    if bar.length() != Some(*total as u64) {
                        bar.set_style(
                            ProgressStyle::with_template(
                                "{spinner} {prefix}: [{bar:30}] {pos}/{len} objects deleted, {elapsed} {wide_msg}",
                            )
                            .expect("a valid template")
                            .progress_chars("=> "),
                        );
                        bar.set_length(*total as u64);
                    }
                    bar.set_position(*deleted as u64);
                    bar.set_message(message.clone());
                }
                Progress::Waiting(why) => bar.set_message(why.clone()),
                Progress::Done(summary) => bar.finish_with_message(summary.clone()),
                Progress::Failed(why) => bar.abandon_with_message(format!("failed: {why}")),
            },
        }
    }

    fn abandon(&self) {
        if let Display::Bar(bar) = self {
            bar.abandon();
        }
    }
}
