//! The tenant's records on Kubernetes (its root-credentials Secret, its status, its published
//! credentials) as the [`TenantStore`] that provisioning reads and writes.

use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use super::provision::{Recorded, TenantStore};
use super::{Cx, publish_credentials};
use crate::api::names::{tenant_credentials_secret_name, tenant_root_secret_name};
use crate::api::{S3Tenant, S3TenantStatus};
use crate::backends::Keys;
use crate::backends::identity;
use crate::cluster::{Hold, Swap, Target, owned_secret, owned_secret_object, secret_data};
use crate::controllers::tenant::Error;
use crate::controllers::tenant::backend::Connector;
use crate::providers::ProviderClients;

/// The tenant's Secrets and status on Kubernetes, as a [`TenantStore`].
pub(super) struct KubeStore<'a, C: Connector> {
    cx: &'a Cx<C>,
    tenant: &'a S3Tenant,
    provider: &'a ProviderClients,
    status: Mutex<S3TenantStatus>,
    /// The root-credentials Secret as last read or written: a password is stored only if the
    /// Secret is still so, so that two writers never hold different passwords.
    root_secret: Mutex<Option<Secret>>,
}

impl<'a, C: Connector> KubeStore<'a, C> {
    pub(super) fn new(
        cx: &'a Cx<C>,
        tenant: &'a S3Tenant,
        status: &S3TenantStatus,
        provider: &'a ProviderClients,
    ) -> Self {
        KubeStore {
            cx,
            tenant,
            provider,
            status: Mutex::new(status.clone()),
            root_secret: Mutex::default(),
        }
    }

    /// The tenant's status as provisioning left it.
    pub(super) fn into_status(self) -> S3TenantStatus {
        self.status.into_inner().expect("status lock")
    }

    /// Writes the root-credentials Secret as `data`, held for cleanup (the tenant's own cleanup
    /// and its buckets' sign in with it), only if it is still as `read` (see
    /// [`crate::cluster::Kube::swap_secret`]); nothing when it already is so.
    async fn swap_root_secret(
        &self,
        read: Option<&Secret>,
        data: BTreeMap<String, String>,
    ) -> Result<Secret, Error> {
        Ok(self
            .cx
            .kube()
            .swap_secret(
                &Target::of(self.tenant),
                Swap {
                    name: &tenant_root_secret_name(&self.tenant.name_any()),
                    read,
                    data,
                    hold: Hold::UntilReleased,
                    annotation: None,
                },
            )
            .await?)
    }

    /// A Secret keeper created for the tenant, decoded (a foreign Secret of that name is a
    /// conflict: its data is never used).
    async fn read(&self, name: &str) -> Result<Option<BTreeMap<String, String>>, Error> {
        Ok(owned_secret(self.cx.kube(), &Target::of(self.tenant), name).await?)
    }
}

impl<C: Connector> TenantStore for KubeStore<'_, C> {
    type Error = Error;

    async fn root_password(&self) -> Result<Option<String>, Error> {
        let secret = owned_secret_object(
            self.cx.kube(),
            &Target::of(self.tenant),
            &tenant_root_secret_name(&self.tenant.name_any()),
        )
        .await?;
        let password = secret
            .as_ref()
            .and_then(|s| secret_data(s).remove("password"))
            .filter(|p| !p.is_empty());
        // A Secret written before keeper held it for cleanup (an older release, or after
        // `keeper release-finalizers`) gets its hold while the tenant lives: without it a
        // namespace deletion takes the password before the buckets' and the tenant's cleanup,
        // which sign in with it. Written only when the hold is missing, and only if the Secret
        // is still as read. Never while the tenant is deleted: cleanup lets go of holds.
        let secret = match secret {
            Some(read)
                if password.is_some() && self.tenant.metadata.deletion_timestamp.is_none() =>
            {
                Some(
                    self.swap_root_secret(Some(&read), secret_data(&read))
                        .await?,
                )
            }
            other => other,
        };
        *self.root_secret.lock().expect("root secret lock") = secret;
        Ok(password)
    }

    async fn store_root_password(&self, password: &str) -> Result<(), Error> {
        let data = BTreeMap::from([("password".to_string(), password.to_string())]);
        let read = self.root_secret.lock().expect("root secret lock").clone();
        // Another writer's password stored since the read makes this write fail (409): the next
        // reconcile uses that one.
        let written = self.swap_root_secret(read.as_ref(), data).await?;
        *self.root_secret.lock().expect("root secret lock") = Some(written);
        Ok(())
    }

    fn recorded_account(&self) -> Option<String> {
        self.status.lock().expect("status lock").account_id.clone()
    }

    async fn record_account(&self, id: &str) -> Result<Recorded, Error> {
        let status = {
            let mut status = self.status.lock().expect("status lock");
            status.account_id = Some(id.to_string());
            status.clone()
        };
        if self
            .cx
            .checkpoint_if_unchanged(self.tenant, &status)
            .await?
        {
            return Ok(Recorded::Yes);
        }
        let now = self
            .cx
            .kube()
            .tenant_from_api(
                &self.tenant.namespace().unwrap_or_default(),
                &self.tenant.name_any(),
            )
            .await?;
        let recorded = now.and_then(|t| t.status).and_then(|s| s.account_id);
        self.status.lock().expect("status lock").account_id = recorded.clone();
        Ok(Recorded::Lost(recorded))
    }

    fn recorded_identity(&self) -> Option<String> {
        self.status
            .lock()
            .expect("status lock")
            .backend_identity
            .clone()
    }

    fn keep_identity(&self, identity: &str) {
        self.status.lock().expect("status lock").backend_identity = Some(identity.to_string());
    }

    fn confirmed_identity(&self) -> Option<String> {
        self.tenant
            .annotations()
            .get(identity::CONFIRM_ANNOTATION)
            .cloned()
    }

    fn resource(&self) -> (String, String) {
        (
            self.tenant.namespace().unwrap_or_default(),
            self.tenant.name_any(),
        )
    }

    async fn published(&self) -> Result<Option<Keys>, Error> {
        let data = self
            .read(&tenant_credentials_secret_name(&self.tenant.name_any()))
            .await?;
        Ok(data.and_then(|d| {
            let access = d.get("accessKeyId").filter(|v| !v.is_empty())?;
            let secret = d.get("secretAccessKey").filter(|v| !v.is_empty())?;
            Some(Keys {
                access_key_id: access.clone(),
                secret_access_key: secret.clone(),
            })
        }))
    }

    async fn publish(&self, credentials: &Keys) -> Result<(), Error> {
        publish_credentials(self.cx, self.tenant, credentials, self.provider).await
    }
}
