//! Performs the tenant's plan: observe (the provider, the tenant's Secrets, its buckets from the
//! cache, the account on the grid), decide ([`super::plan`]), act, and report as an [`Outcome`].

pub mod provision;
mod store;

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;

use self::provision::TenantStore;
use self::store::KubeStore;
use super::backend::{AccountBackend, Connector, GridAdmin, StoreLogin};
use super::plan::account_check::{AccountInputs, SecretVersion};
use super::plan::{self, DeletionGate, DeletionStep, RemainingBuckets};
use super::{
    BLOCKED_RECHECK, DELETE_CONFIRM, Error, LET_GO_RECHECK, S3TenantReconciler, TenantFailure,
};
use crate::api::names::{tenant_credentials_secret_name, tenant_root_secret_name};
use crate::api::{S3Tenant, S3TenantStatus, TenantPhase};
use crate::backends::Keys;
use crate::backends::storagegrid::Login;
use crate::cluster::retained::{Retained, retain_secret};
use crate::cluster::{Hold, LetGo, Target, let_go_of_deleted};
use crate::config::{BucketKeys, Provider, unconfigured_keys_message};
use crate::namespaces::{self, Access};
use crate::providers::ProviderClients;
use crate::runtime::{self, Connect, Context, Next, Note, Outcome, Uid, conditions};

type Cx<C> = Context<S3TenantReconciler<C>>;

/// Brings the backend to the spec and publishes the credentials; Ready when done.
pub async fn apply<C: Connector>(
    cx: &Cx<C>,
    tenant: &S3Tenant,
) -> Result<Outcome<S3TenantStatus>, Error> {
    let name = tenant.name_any();
    let generation = tenant.metadata.generation;
    let mut status = tenant.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    // A live object is never blocked from deletion.
    conditions::remove(&mut status.conditions, conditions::DELETION_BLOCKED);
    let provider = cx.shared.providers.get(&tenant.spec.provider)?;
    // Before any backend call: a namespace the provider does not serve gets nothing, and an
    // existing tenant whose namespace stopped being allowed is no longer changed (its deletion
    // still cleans up what keeper created: `cleanup` does not ask).
    namespace_allowed(cx, tenant, &provider).await?;
    let mut recheck = runtime::RESYNC;
    let mut account_looked = None;
    match &provider.config {
        Provider::StorageGrid(_) => {
            let desired =
                plan::desired_settings(&name, &tenant.spec).map_err(TenantFailure::InvalidSpec)?;
            let uid = Uid::of(tenant);
            let ready = plan::account_check::ready_for_its_generation(tenant);
            let stands = if ready && cx.reconciler.account_looked_at(uid) {
                let inputs = account_inputs(cx, tenant, status.account_id.clone()).await?;
                cx.reconciler.account_look_stands(uid, &inputs)
            } else {
                None
            };
            match stands {
                // Nothing the last look depended on changed (a bucket's change set this
                // reconcile off): the account is as it left it.
                Some(left) => recheck = left,
                None => {
                    let grid = grid(cx, &provider).await?;
                    let store = KubeStore::new(cx, tenant, &status, &provider);
                    let marker = plan::ownership_marker(&tenant.uid().unwrap_or_default());
                    let id = provision::ensure(&grid, &store, &marker, &desired).await?;
                    status = store.into_status();
                    status.account_id = Some(id);
                    let after = account_inputs(cx, tenant, status.account_id.clone()).await?;
                    account_looked = Some((uid, after));
                }
            }
        }
        Provider::S3Compatible(p) => {
            let keys = provider
                .s3_keys(cx.kube(), &cx.shared.operator_namespace)
                .await?;
            let store = StoreLogin {
                provider: provider.clone(),
                keys: keys.clone(),
            };
            cx.reconciler.connector.connect(&cx.shared, &store).await?;
            match p.bucket_keys() {
                BucketKeys::Shared => publish_credentials(cx, tenant, &keys, &provider).await?,
                // Each bucket gets keys of its own; the provider's keys stay in keeper's
                // namespace. A Secret an older keeper published with them is deleted.
                BucketKeys::PerBucketUser(_) => {
                    cx.kube()
                        .delete_secret(&Target::of(tenant), &tenant_credentials_secret_name(&name))
                        .await?;
                }
                BucketKeys::Unconfigured => {
                    return Err(TenantFailure::ProviderClient {
                        provider: provider.name.clone(),
                        message: unconfigured_keys_message(&provider.name),
                    }
                    .into());
                }
            }
            status.account_id = None;
        }
    }
    let tenant_wide_keys = plan::tenant_wide_keys(&provider.config);
    status.s3_endpoint = Some(provider.s3_endpoint());
    status.credentials_secret = tenant_wide_keys.then(|| tenant_credentials_secret_name(&name));
    status.bucket_count = Some(bucket_resources(cx, tenant).await?.len() as i64);
    status.phase = Some(TenantPhase::Ready);
    let mut outcome = Outcome::new(status, Next::Requeue(recheck));
    // Last (see `let_go_of_deleted`).
    let secrets = [
        tenant_root_secret_name(&name),
        tenant_credentials_secret_name(&name),
    ];
    let let_go = let_go_of_deleted(cx.kube(), &Target::of(tenant), &secrets).await?;
    if !let_go.is_empty() {
        let grid = matches!(provider.config, Provider::StorageGrid(_));
        outcome.note(Note::normal(
            "SecretDeleted",
            plan::secrets_let_go_message(&let_go, grid),
        ));
        outcome.next = Next::Requeue(LET_GO_RECHECK);
    }
    let message = if tenant_wide_keys {
        format!(
            "credentials are in Secret {}",
            tenant_credentials_secret_name(&name)
        )
    } else {
        plan::no_tenant_keys_message(&provider.name)
    };
    // The condition says what was done, the event that the tenant is ready.
    if outcome.condition(
        conditions::READY,
        true,
        "Provisioned",
        message.clone(),
        generation,
    ) {
        outcome.note(Note::normal("Ready", message));
    }
    // Kept only for a look whose reconcile succeeded: its Ready status is what lets it stand.
    if let Some((uid, inputs)) = account_looked {
        cx.reconciler.account_looked(uid, inputs);
    }
    Ok(outcome)
}

/// What a look at the tenant's account depends on: its generation, `account_id` and its Secrets
/// as the seam reads them (its cache).
async fn account_inputs<C: Connector>(
    cx: &Cx<C>,
    tenant: &S3Tenant,
    account_id: Option<String>,
) -> Result<AccountInputs, Error> {
    let name = tenant.name_any();
    let namespace = tenant.namespace().unwrap_or_default();
    let mut secrets = Vec::new();
    for secret in [
        tenant_root_secret_name(&name),
        tenant_credentials_secret_name(&name),
    ] {
        let read = cx.kube().secret(&namespace, &secret).await?;
        secrets.push(read.map(|s| SecretVersion {
            uid: s.metadata.uid.clone(),
            resource_version: s.metadata.resource_version.clone(),
            deleting: s.metadata.deletion_timestamp.is_some(),
        }));
    }
    Ok(AccountInputs {
        generation: tenant.metadata.generation,
        account_id,
        secrets,
    })
}

/// Whether the provider's `allowedNamespaces` admits the tenant's namespace (its labels are read
/// only when a selector needs them).
async fn namespace_allowed<C: Connector>(
    cx: &Cx<C>,
    tenant: &S3Tenant,
    provider: &ProviderClients,
) -> Result<(), Error> {
    let Some(allowed) = provider.config.allowed_namespaces() else {
        return Ok(());
    };
    let namespace = tenant.namespace().unwrap_or_default();
    let labels = match allowed.selector {
        Some(_) => cx.kube().namespace_labels(&namespace).await?,
        None => None,
    };
    match namespaces::access(&provider.name, Some(allowed), &namespace, labels.as_ref()) {
        Access::Allowed => Ok(()),
        Access::Denied(message) => Err(TenantFailure::NamespaceNotAllowed(message).into()),
    }
}

/// The deletion held while buckets remain (with either policy): the count, the names and the
/// commands to run; looked at again on every bucket change (each bucket's departure triggers the
/// tenant after the cache it counts from has it) and every minute (for buckets that live only on
/// the backend, which no watch reports).
fn buckets_remain(
    status: S3TenantStatus,
    tenant: &str,
    buckets: &RemainingBuckets,
    generation: Option<i64>,
) -> Outcome<S3TenantStatus> {
    let mut outcome = Outcome::new(status, Next::Requeue(BLOCKED_RECHECK));
    outcome.status.bucket_count = Some(buckets.count() as i64);
    outcome.deletion_blocked(
        "BucketsRemain",
        plan::buckets_remain_message(tenant, buckets),
        generation,
    );
    outcome
}

/// Deletes the account once no bucket remains; holds the tenant, saying why, until then.
pub async fn cleanup<C: Connector>(
    cx: &Cx<C>,
    tenant: &S3Tenant,
) -> Result<Outcome<S3TenantStatus>, Error> {
    cx.reconciler.forget_account_look(Uid::of(tenant));
    let name = tenant.name_any();
    let generation = tenant.metadata.generation;
    let status = tenant.status.clone().unwrap_or_default();
    let resources = bucket_resources(cx, tenant).await?;
    match plan::deletion_gate(&tenant.spec) {
        DeletionGate::Protected => {
            let message =
                plan::deletion_protection_message(&name, &tenant.namespace().unwrap_or_default());
            // Turning protection off changes the spec, which triggers the next look.
            let mut outcome = Outcome::new(status, Next::AwaitChange);
            outcome.status.bucket_count = Some(resources.len() as i64);
            outcome.deletion_blocked("DeletionProtection", message, generation);
            return Ok(outcome);
        }
        // A retained account keeps working, but buckets still pointing at a tenant resource that
        // is gone would lose their credentials source: Retain waits for them like Delete does.
        DeletionGate::Retain if !resources.is_empty() => {
            let buckets = RemainingBuckets::new(resources, Vec::<String>::new());
            return Ok(buckets_remain(status, &name, &buckets, generation));
        }
        DeletionGate::Retain => {
            // The account stays, and so do its working credentials: the Secrets are released
            // from the resource so the garbage collector keeps them, after a copy of each went
            // to keeper's namespace, which no deletion of this namespace takes (F4/F11).
            let owner = Target::of(tenant);
            let mut kept = Vec::new();
            for (role, secret) in [
                ("s3-credentials", tenant_credentials_secret_name(&name)),
                ("root-credentials", tenant_root_secret_name(&name)),
            ] {
                let retained = retain_secret(
                    cx.kube(),
                    &owner,
                    (&secret, role),
                    &cx.shared.operator_namespace,
                    status.account_id.as_deref(),
                )
                .await?;
                if let Retained::Copied { copy } = retained {
                    kept.push((secret, copy));
                }
            }
            let mut outcome = Outcome::new(status, Next::Release);
            let account = outcome
                .status
                .account_id
                .as_deref()
                .map_or(String::new(), |id| format!(" (account {id})"));
            outcome.note(Note::normal(
                "Retained",
                plan::retained_message(&account, &kept, &cx.shared.operator_namespace),
            ));
            return Ok(outcome);
        }
        DeletionGate::Proceed => {}
    }
    let provider = match cx.shared.providers.get(&tenant.spec.provider) {
        Ok(provider) => provider,
        // Nothing was ever created on a provider keeper does not know.
        Err(_) if status.account_id.is_none() => {
            unhold_secrets(cx, tenant).await?;
            return Ok(Outcome::new(status, Next::Release));
        }
        Err(e) => return Err(e.into()),
    };
    let marker = plan::ownership_marker(&tenant.uid().unwrap_or_default());
    let (grid, account, backend_buckets) = match &provider.config {
        Provider::StorageGrid(_) => {
            let grid = grid(cx, &provider).await?;
            let store = KubeStore::new(cx, tenant, &status, &provider);
            let password = store.root_password().await?;
            let account = provision::locate_account(&grid, &store, &marker).await?;
            let buckets = match &account {
                Some(a) => provision::account_buckets(&grid, &a.id, password.as_deref()).await?,
                None => Vec::new(),
            };
            (Some(grid), account.map(|a| (a.id, password)), buckets)
        }
        // A credential scope holds nothing of its own to delete.
        Provider::S3Compatible(_) => (None, None, Vec::new()),
    };
    let remaining = RemainingBuckets::new(resources, backend_buckets);
    let account_id = account.as_ref().map(|(id, _)| id.as_str());
    let next = match plan::deletion_step(account_id, remaining) {
        DeletionStep::Release => Next::Release,
        DeletionStep::Blocked(buckets) => {
            return Ok(buckets_remain(status, &name, &buckets, generation));
        }
        DeletionStep::DeleteAccount { id } => {
            let grid = grid.expect("only grid tenants have accounts");
            let password = account.and_then(|(_, password)| password);
            delete_account(&grid, &id, password.as_deref(), &marker).await?
        }
    };
    if next == Next::Release {
        // Last, so that a retry after a failure here still has the password.
        unhold_secrets(cx, tenant).await?;
    }
    Ok(Outcome::new(status, next))
}

/// Revokes the account's keys and deletes it; releases only once the grid says it is gone.
async fn delete_account<A: AccountBackend>(
    grid: &A,
    id: &str,
    password: Option<&str>,
    marker: &str,
) -> Result<Next, Error> {
    provision::revoke_keys(grid, id, password).await?;
    match grid.delete_account(id).await {
        // Only a 404 confirms; a grid that deletes asynchronously is asked again soon.
        Ok(()) => match grid.get_account(id, marker).await? {
            None => {
                tracing::info!(account = %id, "deleted StorageGRID account");
                Ok(Next::Release)
            }
            Some(_) => Ok(Next::Requeue(DELETE_CONFIRM)),
        },
        Err(e) if e.is_gone() => Ok(Next::Release),
        // A bucket appeared since the check: look again, which names it.
        Err(e) if e.is_conflict() => {
            tracing::info!(account = %id, error = %e, "account not deletable yet");
            Ok(Next::Requeue(DELETE_CONFIRM))
        }
        Err(e) => Err(e.into()),
    }
}

/// The provider's grid, signed in as the administrator named by the provider's Secret.
async fn grid<C: Connector>(
    cx: &Cx<C>,
    provider: &Arc<ProviderClients>,
) -> Result<<C as Connect<GridAdmin>>::Backend, Error> {
    let [username, password] = provider
        .credentials(
            cx.kube(),
            &cx.shared.operator_namespace,
            ["username", "password"],
        )
        .await?;
    let admin = GridAdmin {
        provider: provider.clone(),
        login: Login::grid(username, password),
    };
    cx.reconciler.connector.connect(&cx.shared, &admin).await
}

/// The tenant's S3Bucket resources, from the cache.
async fn bucket_resources<C: Connector>(
    cx: &Cx<C>,
    tenant: &S3Tenant,
) -> Result<Vec<(String, String)>, Error> {
    let namespace = tenant.namespace().unwrap_or_default();
    Ok(super::bucket_resources(cx.kube(), &namespace, &tenant.name_any()).await?)
}

/// Writes the credentials Secret (only when something changed).
async fn publish_credentials<C: Connector>(
    cx: &Cx<C>,
    tenant: &S3Tenant,
    keys: &Keys,
    provider: &ProviderClients,
) -> Result<(), Error> {
    let data = BTreeMap::from([
        ("accessKeyId".to_string(), keys.access_key_id.clone()),
        (
            "secretAccessKey".to_string(),
            keys.secret_access_key.clone(),
        ),
        ("endpoint".to_string(), provider.s3_endpoint()),
        ("region".to_string(), provider.region().to_string()),
    ]);
    // Held: the cleanup of the tenant's buckets on an S3-compatible store signs in with them.
    cx.kube()
        .apply_secret(
            &Target::of(tenant),
            &tenant_credentials_secret_name(&tenant.name_any()),
            data,
            Hold::UntilReleased,
        )
        .await?;
    Ok(())
}

/// Lets the tenant's Secrets go once nothing needs them: the tenant is released, and no bucket
/// cleanup is left to sign in with them (the deletion waited for every bucket).
async fn unhold_secrets<C: Connector>(cx: &Cx<C>, tenant: &S3Tenant) -> Result<(), Error> {
    let name = tenant.name_any();
    for secret in [
        tenant_credentials_secret_name(&name),
        tenant_root_secret_name(&name),
    ] {
        cx.kube()
            .let_go_secret(&Target::of(tenant), &secret, LetGo::Hold)
            .await?;
    }
    Ok(())
}
