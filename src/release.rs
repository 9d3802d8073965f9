//! `keeper release-finalizers`: the way out for the day keeper is uninstalled for good or a backend
//! is gone for good. keeper's finalizers hold every object until its backend resource is cleaned
//! up; without a running keeper (or without the backend) they hold forever. This command lists what
//! removing them would leave behind on the backends and, with `--confirm`, removes only keeper's
//! own finalizers (`keeper.dev/...`), on objects of one kind and on the Secrets keeper protects for
//! them. With `--confirm` it refuses while a keeper leader holds the election Lease (a running
//! keeper would race it), and, unless `--force`, when it finds no Lease at all: then it cannot tell
//! a stopped keeper from one running without leader election or under another Lease.

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::api::names::MANAGED_BY;
use crate::api::{CloudDatabase, DeletionPolicy, S3Bucket, S3Tenant};

/// The kinds whose finalizers can be released.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    S3tenant,
    S3bucket,
    Clouddatabase,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::S3tenant => "S3Tenant",
            Kind::S3bucket => "S3Bucket",
            Kind::Clouddatabase => "CloudDatabase",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The kind whose objects to release.
    #[arg(long, value_enum)]
    pub kind: Kind,
    /// Only objects in this namespace.
    #[arg(
        long,
        short = 'n',
        conflicts_with = "all_namespaces",
        required_unless_present = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// Objects in every namespace.
    #[arg(long, short = 'A')]
    pub all_namespaces: bool,
    /// Remove the finalizers. Without it the command only lists what removing them would orphan.
    #[arg(long)]
    pub confirm: bool,
    /// Namespace of keeper's election Lease (keeper's namespace). Unset: the Lease is looked for
    /// in every namespace (keeper installed outside keeper-system), or in keeper-system when your
    /// credentials cannot list Leases cluster-wide.
    #[arg(long, env = "KEEPER_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Name of keeper's election Lease (`keeper run --leader-election-lease`).
    #[arg(long, default_value = "keeper")]
    pub lease_name: String,
    /// Go on although no election Lease was found: only when you know no keeper runs (for
    /// example one started with `--leader-election=false`, which holds no Lease).
    #[arg(long)]
    pub force: bool,
}

/// Where keeper's Lease is looked for when `--lease-namespace` is not given and Leases cannot be
/// listed cluster-wide: the chart's documented namespace.
const DEFAULT_LEASE_NAMESPACE: &str = "keeper-system";

/// Why the command will not release anything.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A keeper leads: it would race the release.
    #[error(
        "keeper is running: {holder} holds Lease {lease}; stop keeper first (e.g. `kubectl -n {} scale deployment keeper --replicas=0`) so that it does not race this command",
        lease.split('/').next().unwrap_or_default()
    )]
    Led { holder: String, lease: String },
    /// No Lease found where it was looked for: a running keeper cannot be ruled out.
    #[error(
        "found no keeper election Lease ({looked_in}), so cannot tell whether keeper runs: a keeper started with --leader-election=false holds none, and one under another Lease name or namespace needs --lease-name / --lease-namespace. Make sure no keeper runs (`kubectl get deployments -A -l app.kubernetes.io/name=keeper`), then run again with --force"
    )]
    NoLease { looked_in: String },
}

/// Whether releasing may go on, given the Leases named like keeper's that were found (with their
/// `namespace/name`): never while one is held; without any, only with `force`.
pub fn may_release(
    leases: &[(String, Lease)],
    looked_in: &str,
    now: Timestamp,
    force: bool,
) -> Result<(), Refusal> {
    if let Some((lease, holder)) = leases
        .iter()
        .find_map(|(name, lease)| live_holder(lease, now).map(|h| (name.clone(), h)))
    {
        return Err(Refusal::Led { holder, lease });
    }
    if leases.is_empty() && !force {
        return Err(Refusal::NoLease {
            looked_in: looked_in.to_string(),
        });
    }
    Ok(())
}

/// Whether `finalizer` is one of keeper's.
pub fn is_keepers(finalizer: &str) -> bool {
    finalizer.starts_with("keeper.dev/")
}

/// The holder of a Lease that has not expired at `now`; `None` when nobody holds it.
pub fn live_holder(lease: &Lease, now: Timestamp) -> Option<String> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?.0;
    let lasts = SignedDuration::from_secs(spec.lease_duration_seconds.unwrap_or(15).into());
    (renewed + lasts > now).then_some(holder)
}

/// One object whose finalizers keeper would release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub what: String,
    pub finalizers: Vec<String>,
    pub keep: Vec<String>,
    /// What stays on the backend once keeper no longer holds the object.
    pub orphans: String,
}

/// The release of `obj`, or `None` when it carries none of keeper's finalizers.
pub fn release_of<K: Resource<DynamicType = ()>>(obj: &K, orphans: String) -> Option<Release> {
    let (ours, keep): (Vec<String>, Vec<String>) = obj
        .finalizers()
        .iter()
        .cloned()
        .partition(|f| is_keepers(f));
    (!ours.is_empty()).then(|| Release {
        what: format!(
            "{}/{} {}",
            K::kind(&()).to_lowercase(),
            obj.name_any(),
            obj.namespace()
                .map(|ns| format!("in {ns}"))
                .unwrap_or_default()
        ),
        finalizers: ours,
        keep,
        orphans,
    })
}

fn retained(policy: &DeletionPolicy) -> bool {
    *policy == DeletionPolicy::Retain
}

/// What a tenant leaves behind on its provider without keeper's cleanup.
pub fn tenant_orphans(t: &S3Tenant) -> String {
    let provider = &t.spec.provider;
    let kept = if retained(&t.spec.deletion_policy) {
        " (deletionPolicy Retain: kept anyway)"
    } else {
        ""
    };
    match t.status.as_ref().and_then(|s| s.account_id.as_deref()) {
        Some(id) => format!("StorageGRID account {id} on provider {provider}{kept}"),
        None => {
            format!("the tenant's credentials on provider {provider}, if any were issued{kept}")
        }
    }
}

/// What a bucket leaves behind without keeper's cleanup.
pub fn bucket_orphans(b: &S3Bucket) -> String {
    let name = b
        .status
        .as_ref()
        .and_then(|s| s.bucket_name.clone())
        .or_else(|| b.spec.bucket_name.clone())
        .unwrap_or_else(|| b.name_any());
    let objects = b
        .status
        .as_ref()
        .and_then(|s| s.object_count)
        .map(|n| format!(" with {n} objects"))
        .unwrap_or_default();
    let kept = if retained(&b.spec.deletion_policy) {
        " (deletionPolicy Retain: kept anyway)"
    } else {
        ""
    };
    format!(
        "bucket {name:?}{objects} and its credentials, of tenant {}{kept}",
        b.spec.tenant_ref.name
    )
}

/// What a database leaves behind without keeper's cleanup.
pub fn database_orphans(d: &CloudDatabase) -> String {
    match d.status.as_ref().and_then(|s| s.instance_id.as_deref()) {
        Some(id) => format!(
            "RDS instance {id} (deletionPolicy {:?})",
            d.spec.deletion_policy
        ),
        None => "nothing recorded: no RDS instance id in status".to_string(),
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("cannot reach the Kubernetes API (KUBECONFIG or in-cluster configuration)")?;
    run_with(client, args).await
}

/// [`run`] with a client of the caller's (`kubectl keeper --context`).
pub async fn run_with(client: Client, args: Args) -> anyhow::Result<()> {
    // Only releasing can race a running keeper; the listing touches nothing.
    if args.confirm {
        refuse_while_led(&client, &args).await?;
    }
    let ns = (!args.all_namespaces)
        .then(|| args.namespace.clone())
        .flatten();
    let released = match args.kind {
        Kind::S3tenant => {
            release_kind::<S3Tenant>(&client, &args, ns.as_deref(), tenant_orphans).await?
        }
        Kind::S3bucket => {
            release_kind::<S3Bucket>(&client, &args, ns.as_deref(), bucket_orphans).await?
        }
        Kind::Clouddatabase => {
            release_kind::<CloudDatabase>(&client, &args, ns.as_deref(), database_orphans).await?
        }
    };
    if released == 0 {
        println!("no {} carries keeper's finalizers", args.kind.name());
    } else if args.confirm {
        println!("released {released} object(s): keeper no longer cleans up what is listed above");
    } else {
        println!(
            "{released} object(s) would be released; run again with --confirm to remove keeper's finalizers"
        );
    }
    Ok(())
}

async fn refuse_while_led(client: &Client, args: &Args) -> anyhow::Result<()> {
    let (leases, looked_in) = find_leases(client, args).await?;
    may_release(&leases, &looked_in, Timestamp::now(), args.force)?;
    if leases.is_empty() {
        eprintln!(
            "warning: no keeper election Lease found ({looked_in}); going on because of --force"
        );
    }
    Ok(())
}

/// The Leases named `--lease-name`: in `--lease-namespace` when given, else in every namespace
/// (falling back to keeper-system when Leases cannot be listed cluster-wide); with where they
/// were looked for.
async fn find_leases(
    client: &Client,
    args: &Args,
) -> anyhow::Result<(Vec<(String, Lease)>, String)> {
    let named = |lease: Lease| {
        (
            format!(
                "{}/{}",
                lease.namespace().unwrap_or_default(),
                lease.name_any()
            ),
            lease,
        )
    };
    let in_namespace =
        |namespace: &str| -> Api<Lease> { Api::namespaced(client.clone(), namespace) };
    let one = |namespace: String| async move {
        let lease = in_namespace(&namespace)
            .get_opt(&args.lease_name)
            .await
            .with_context(|| format!("cannot read Lease {namespace}/{}", args.lease_name))?;
        anyhow::Ok((
            lease.into_iter().map(named).collect(),
            format!("Lease {namespace}/{}", args.lease_name),
        ))
    };
    if let Some(namespace) = &args.lease_namespace {
        return one(namespace.clone()).await;
    }
    let everywhere: Api<Lease> = Api::all(client.clone());
    let by_name = ListParams::default().fields(&format!("metadata.name={}", args.lease_name));
    match everywhere.list(&by_name).await {
        Ok(list) => Ok((
            list.items.into_iter().map(named).collect(),
            format!("Leases named {} in every namespace", args.lease_name),
        )),
        Err(kube::Error::Api(e)) if e.code == 403 => one(DEFAULT_LEASE_NAMESPACE.to_string()).await,
        Err(e) => Err(e).context("cannot list Leases"),
    }
}

/// Lists (and with `--confirm` releases) the objects of one kind and the Secrets keeper protects
/// for them; returns how many objects carry keeper's finalizers.
async fn release_kind<K>(
    client: &Client,
    args: &Args,
    namespace: Option<&str>,
    orphans: fn(&K) -> String,
) -> anyhow::Result<usize>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut count = 0;
    for obj in api.list(&ListParams::default()).await?.items {
        let Some(release) = release_of(&obj, orphans(&obj)) else {
            continue;
        };
        count += 1;
        println!(
            "{}: finalizers {:?}; leaves behind: {}",
            release.what, release.finalizers, release.orphans
        );
        if args.confirm {
            let ns = obj.namespace().unwrap_or_default();
            let api: Api<K> = Api::namespaced(client.clone(), &ns);
            remove_finalizers(&api, &obj.name_any(), obj.finalizers(), &release.keep).await?;
        }
    }
    release_secrets(client, args, namespace).await?;
    Ok(count)
}

/// Secrets keeper protects for objects of the kind (a keeper finalizer, an owner reference to such
/// an object): listed and released with them.
async fn release_secrets(
    client: &Client,
    args: &Args,
    namespace: Option<&str>,
) -> anyhow::Result<()> {
    let api: Api<Secret> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
    for secret in api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
    {
        let owned_by_kind = secret
            .owner_references()
            .iter()
            .any(|o| o.kind == args.kind.name());
        if !owned_by_kind {
            continue;
        }
        let Some(release) = release_of(&secret, "nothing (a Secret)".to_string()) else {
            continue;
        };
        println!("{}: finalizers {:?}", release.what, release.finalizers);
        if args.confirm {
            let api: Api<Secret> =
                Api::namespaced(client.clone(), &secret.namespace().unwrap_or_default());
            remove_finalizers(&api, &secret.name_any(), secret.finalizers(), &release.keep).await?;
        }
    }
    Ok(())
}

/// Replaces the finalizers with `keep`, only if they are still `seen` (a JSON patch `test`), so
/// that a finalizer added meanwhile by someone else is never dropped.
async fn remove_finalizers<K>(
    api: &Api<K>,
    name: &str,
    seen: &[String],
    keep: &[String],
) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": seen},
        {"op": "replace", "path": "/metadata/finalizers", "value": keep},
    ]))?;
    api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .with_context(|| format!("cannot remove the finalizers of {name}"))?;
    Ok(())
}

#[cfg(test)]
mod tests;
