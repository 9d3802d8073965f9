//! The backends a tenant lives on, behind small traits so that tests swap them:
//! [`AccountBackend`] (StorageGRID: a real account with a root user and S3 keys), reached by
//! connecting to the provider's grid as its administrator ([`GridAdmin`]), and an S3-compatible
//! store, reached with the provider's own keys ([`StoreLogin`]: connecting is the check that they
//! work). [`Live`] connects through the provider registry, so the tenant shares its grid clients
//! and S3 clients (with `tls.caBundleFile`) with the other controllers.

use std::future::Future;
use std::sync::Arc;

use super::plan::{AccountSettings, ObservedAccount};
use super::{Error, TenantFailure};
use crate::backends::Keys;
use crate::backends::identity::{self, IdentityCache};
use crate::backends::storagegrid::{
    self, Account, AccountPolicy, AccountSpec, KeyOwner, Login, description_has_marker,
};
pub use crate::error::BackendError;
use crate::providers::ProviderClients;
use crate::runtime::{Connect, Shared};

/// A tenant sign-in refused: the stored root password does not match the account.
pub fn is_bad_credentials(error: &BackendError) -> bool {
    error.backend == "storagegrid" && error.code == "BadCredentials"
}

/// A newly issued key: its credential id (to revoke it) and its credentials (shown once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedKey {
    pub id: String,
    pub credentials: Keys,
}

/// Tenant accounts with a root user and S3 keys (StorageGRID).
pub trait AccountBackend: Send + Sync {
    /// The account with this id; `None` only when the backend says 404.
    fn get_account(
        &self,
        id: &str,
        marker: &str,
    ) -> impl Future<Output = Result<Option<ObservedAccount>, BackendError>> + Send;
    /// The accounts carrying keeper's ownership marker (after a create whose answer was lost, or
    /// created by two writers at once).
    fn find_accounts(
        &self,
        marker: &str,
    ) -> impl Future<Output = Result<Vec<ObservedAccount>, BackendError>> + Send;
    /// Creates an account; returns its id.
    fn create_account(
        &self,
        settings: &AccountSettings,
        marker: &str,
        root_password: &str,
    ) -> impl Future<Output = Result<String, BackendError>> + Send;
    fn update_account(
        &self,
        id: &str,
        settings: &AccountSettings,
        marker: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    fn set_root_password(
        &self,
        id: &str,
        password: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Credential ids of the root user's keys.
    fn list_keys(
        &self,
        id: &str,
        root_password: &str,
    ) -> impl Future<Output = Result<Vec<String>, BackendError>> + Send;
    /// The credential id of the key with this access key id; `None` when it does not exist.
    fn key_id(
        &self,
        id: &str,
        root_password: &str,
        access_key_id: &str,
    ) -> impl Future<Output = Result<Option<String>, BackendError>> + Send;
    /// Issues a key for the root user.
    fn issue_key(
        &self,
        id: &str,
        root_password: &str,
    ) -> impl Future<Output = Result<IssuedKey, BackendError>> + Send;
    /// Revokes a key; one already gone counts as revoked.
    fn revoke_key(
        &self,
        id: &str,
        root_password: &str,
        key_id: &str,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// The account's bucket names: from the tenant's own bucket listing when the root
    /// password is known, else from the grid's usage report (which can lag by minutes).
    fn list_buckets(
        &self,
        id: &str,
        root_password: Option<&str>,
    ) -> impl Future<Output = Result<Vec<String>, BackendError>> + Send;
    /// Deletes the account; a 404 comes back as an error the caller reads as "gone".
    fn delete_account(&self, id: &str) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// The grid's identity (`storagegrid:<grid id>`), looked up once per provider and process.
    fn identity(&self) -> impl Future<Output = Result<String, BackendError>> + Send;
}

/// A StorageGRID provider's grid, as the administrator its Secret names: where tenant accounts
/// are.
pub struct GridAdmin {
    pub provider: Arc<ProviderClients>,
    pub login: Login,
}

/// An S3-compatible provider's store, with the provider's own keys.
pub struct StoreLogin {
    pub provider: Arc<ProviderClients>,
    pub keys: Keys,
}

/// How the reconciler reaches a provider ([`Live`] in production, fakes in tests): its grid's
/// accounts, or its store, where connecting is the check that the keys work (nothing else is done
/// there). Named once, so that the reconciler and its steps carry one bound.
pub trait Connector:
    Connect<GridAdmin, Backend: AccountBackend, Error = Error>
    + Connect<StoreLogin, Backend = (), Error = Error>
{
}

impl<C> Connector for C where
    C: Connect<GridAdmin, Backend: AccountBackend, Error = Error>
        + Connect<StoreLogin, Backend = (), Error = Error>
{
}

/// The real backends, through the provider registry.
pub struct Live;

impl Connect<GridAdmin> for Live {
    type Backend = GridAccounts;
    type Error = Error;

    async fn connect(&self, _shared: &Shared, grid: &GridAdmin) -> Result<GridAccounts, Error> {
        let provider = &grid.provider;
        let client = provider
            .grid()
            .ok_or_else(|| TenantFailure::ProviderClient {
                provider: provider.name.clone(),
                message: "not a StorageGRID provider".to_string(),
            })?;
        Ok(GridAccounts {
            client: client.clone(),
            admin: grid.login.clone(),
            identity: provider.identity_cache(),
        })
    }
}

impl Connect<StoreLogin> for Live {
    type Backend = ();
    type Error = Error;

    /// Lists the buckets the keys see: only keys the store accepts get that far.
    async fn connect(&self, shared: &Shared, store: &StoreLogin) -> Result<(), Error> {
        store
            .provider
            .s3(&store.keys)
            .list_buckets(&shared.metrics)
            .await
            .map_err(BackendError::from)?;
        Ok(())
    }
}

/// [`AccountBackend`] over the StorageGRID client, signed in as the grid administrator.
pub struct GridAccounts {
    client: storagegrid::Client,
    admin: Login,
    identity: IdentityCache,
}

impl GridAccounts {
    fn spec(settings: &AccountSettings, marker: &str, policy: AccountPolicy) -> AccountSpec {
        AccountSpec {
            name: settings.name.clone(),
            description: marker.to_string(),
            capabilities: AccountSpec::standard_capabilities(),
            policy: AccountPolicy {
                allow_platform_services: settings.allow_platform_services,
                quota_object_bytes: settings.quota_bytes,
                ..policy
            },
        }
    }
}

/// What keeper manages of a grid account, for comparison with the spec.
fn observe(account: Account, marker: &str) -> ObservedAccount {
    let capabilities_ok = AccountSpec::standard_capabilities()
        .iter()
        .all(|c| account.capabilities.contains(c));
    let marker_ok = description_has_marker(account.description.as_deref(), marker);
    ObservedAccount {
        settings: AccountSettings {
            name: account.name,
            quota_bytes: account.policy.quota_object_bytes,
            allow_platform_services: account.policy.allow_platform_services,
        },
        id: account.id,
        managed_fields_ok: capabilities_ok && marker_ok,
        marked: marker_ok,
    }
}

fn tenant_login(id: &str, root_password: &str) -> Login {
    Login::tenant_root(id, root_password)
}

impl AccountBackend for GridAccounts {
    async fn get_account(
        &self,
        id: &str,
        marker: &str,
    ) -> Result<Option<ObservedAccount>, BackendError> {
        match self.client.get_account(&self.admin, id).await {
            Ok(account) => Ok(Some(observe(account, marker))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn find_accounts(&self, marker: &str) -> Result<Vec<ObservedAccount>, BackendError> {
        Ok(self
            .client
            .find_accounts(&self.admin, marker)
            .await?
            .into_iter()
            .map(|a| observe(a, marker))
            .collect())
    }

    async fn create_account(
        &self,
        settings: &AccountSettings,
        marker: &str,
        root_password: &str,
    ) -> Result<String, BackendError> {
        let spec = Self::spec(settings, marker, AccountPolicy::default());
        Ok(self
            .client
            .create_account(&self.admin, &spec, root_password)
            .await?
            .id)
    }

    async fn update_account(
        &self,
        id: &str,
        settings: &AccountSettings,
        marker: &str,
    ) -> Result<(), BackendError> {
        // GET → modify → PUT keeps policy fields keeper does not manage.
        let current = self.client.get_account(&self.admin, id).await?;
        let mut spec = Self::spec(settings, marker, current.policy);
        let mut capabilities = current.capabilities;
        for c in AccountSpec::standard_capabilities() {
            if !capabilities.contains(&c) {
                capabilities.push(c);
            }
        }
        spec.capabilities = capabilities;
        let description = current.description.unwrap_or_default();
        if !description_has_marker(Some(&description), marker) {
            spec.description = format!("{description} {marker}").trim().to_string();
        } else {
            spec.description = description;
        }
        self.client.update_account(&self.admin, id, &spec).await?;
        Ok(())
    }

    async fn set_root_password(&self, id: &str, password: &str) -> Result<(), BackendError> {
        Ok(self
            .client
            .set_root_password(&self.admin, id, password)
            .await?)
    }

    async fn list_keys(&self, id: &str, root_password: &str) -> Result<Vec<String>, BackendError> {
        let keys = self
            .client
            .list_access_keys(&tenant_login(id, root_password), KeyOwner::CurrentUser)
            .await?;
        Ok(keys.into_iter().map(|k| k.id).collect())
    }

    async fn key_id(
        &self,
        id: &str,
        root_password: &str,
        access_key_id: &str,
    ) -> Result<Option<String>, BackendError> {
        match self
            .client
            .get_access_key(
                &tenant_login(id, root_password),
                KeyOwner::CurrentUser,
                access_key_id,
            )
            .await
        {
            Ok(key) => Ok(Some(key.id)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn issue_key(&self, id: &str, root_password: &str) -> Result<IssuedKey, BackendError> {
        let key = self
            .client
            .create_access_key(&tenant_login(id, root_password), KeyOwner::CurrentUser)
            .await?;
        // create_access_key guarantees both halves are present.
        Ok(IssuedKey {
            credentials: Keys {
                access_key_id: key.access_key.unwrap_or_default(),
                secret_access_key: key.secret_access_key.map(|s| s.0).unwrap_or_default(),
            },
            id: key.id,
        })
    }

    async fn revoke_key(
        &self,
        id: &str,
        root_password: &str,
        key_id: &str,
    ) -> Result<(), BackendError> {
        match self
            .client
            .delete_access_key(
                &tenant_login(id, root_password),
                KeyOwner::CurrentUser,
                key_id,
            )
            .await
        {
            Err(e) if !e.is_not_found() => Err(e.into()),
            _ => Ok(()),
        }
    }

    async fn list_buckets(
        &self,
        id: &str,
        root_password: Option<&str>,
    ) -> Result<Vec<String>, BackendError> {
        let names = match root_password {
            Some(root) => self
                .client
                .list_containers(&tenant_login(id, root))
                .await?
                .into_iter()
                .map(|c| c.name)
                .collect(),
            None => self
                .client
                .account_usage(&self.admin, id)
                .await?
                .buckets
                .into_iter()
                .map(|b| b.name)
                .collect(),
        };
        Ok(names)
    }

    async fn delete_account(&self, id: &str) -> Result<(), BackendError> {
        Ok(self.client.delete_account(&self.admin, id).await?)
    }

    async fn identity(&self) -> Result<String, BackendError> {
        self.identity
            .get(|| async {
                let grid = self.client.grid_id(&self.admin).await?;
                Ok(identity::storagegrid(&grid))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;
    use crate::cluster::fake::FakeKube;
    use crate::config::OperatorConfig;
    use crate::error::ErrorClass;
    use crate::runtime::Failure;
    use crate::runtime::testing;

    /// An S3-compatible provider whose endpoint is a mock server.
    async fn provider() -> (MockServer, Shared) {
        let server = crate::test_support::mock_server().await;
        let config = OperatorConfig::parse(&format!(
            "providers:\n  s3:\n    s3Compatible:\n      endpoint: {}\n      region: us-east-1\n      forcePathStyle: true\n      credentialsSecret: {{name: s3-creds}}\n      tls: {{allowPlainHttp: true}}\n",
            server.uri()
        ))
        .unwrap();
        (
            server,
            testing::shared(Arc::new(FakeKube::default()), config),
        )
    }

    fn keys() -> Keys {
        Keys {
            access_key_id: "AKIAEXAMPLE".into(),
            secret_access_key: "secret".into(),
        }
    }

    /// Connects to the store of `shared`'s provider with [`keys`]: the store's answer.
    async fn store_login(shared: &Shared) -> Result<(), BackendError> {
        let store = StoreLogin {
            provider: shared.providers.get("s3").unwrap(),
            keys: keys(),
        };
        match Live.connect(shared, &store).await {
            Ok(()) => Ok(()),
            Err(Error::Backend(e)) => Err(e),
            Err(e) => panic!("not the store's answer: {e}"),
        }
    }

    #[tokio::test]
    async fn working_credentials_are_verified_with_list_buckets() {
        let (server, shared) = provider().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_string(
                r#"<?xml version="1.0" encoding="UTF-8"?><ListAllMyBucketsResult><Owner><ID>o</ID></Owner><Buckets></Buckets></ListAllMyBucketsResult>"#,
            ))
            .expect(1)
            .mount(&server)
            .await;
        store_login(&shared).await.unwrap();
        assert!(shared.metrics.encode().contains(
            r#"keeper_backend_requests_total{backend="s3",operation="list_buckets",outcome="success"} 1"#
        ));
    }

    #[tokio::test]
    async fn refused_credentials_are_permanent() {
        let (server, shared) = provider().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(403).set_body_string(
                r#"<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>The key does not exist.</Message></Error>"#,
            ))
            .mount(&server)
            .await;
        let err = store_login(&shared).await.unwrap_err();
        assert!(err.is_permanent(), "{err:?}");
        assert!(err.to_string().contains("InvalidAccessKeyId"), "{err}");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[tokio::test]
    async fn server_errors_are_transient() {
        let (server, shared) = provider().await;
        Mock::given(method("GET"))
            .respond_with(
                ResponseTemplate::new(503).set_body_string(
                    r#"<Error><Code>SlowDown</Code><Message>busy</Message></Error>"#,
                ),
            )
            .mount(&server)
            .await;
        let err = store_login(&shared).await.unwrap_err();
        assert!(!err.is_permanent(), "{err:?}");
        assert_eq!(err.class, ErrorClass::Transient);
    }

    #[test]
    fn grid_accounts_are_observed_with_capabilities_and_marker() {
        let account: Account = serde_json::from_value(serde_json::json!({
            "id": "1", "name": "n", "description": "keeper.dev/owner-uid=u",
            "capabilities": ["management", "s3"],
            "policy": {"quotaObjectBytes": 5, "allowPlatformServices": true}
        }))
        .unwrap();
        let observed = observe(account.clone(), "keeper.dev/owner-uid=u");
        assert!(observed.managed_fields_ok);
        assert_eq!(observed.settings.quota_bytes, Some(5));
        assert!(!observe(account.clone(), "keeper.dev/owner-uid=v").managed_fields_ok);
        let mut no_s3 = account;
        no_s3.capabilities = vec!["management".into()];
        assert!(!observe(no_s3, "keeper.dev/owner-uid=u").managed_fields_ok);
    }

    #[tokio::test]
    async fn the_grid_is_reached_as_the_given_administrator_and_only_on_a_grid_provider() {
        let shared = testing::shared(
            Arc::new(FakeKube::default()),
            OperatorConfig::parse(testing::TWO_PROVIDERS).unwrap(),
        );
        let admin = |provider: &str| GridAdmin {
            provider: shared.providers.get(provider).unwrap(),
            login: Login::grid("admin", "pw"),
        };
        let grid = Live.connect(&shared, &admin("default")).await.unwrap();
        assert_eq!(grid.admin, Login::grid("admin", "pw"));
        let refused = Live.connect(&shared, &admin("store")).await.err().unwrap();
        assert!(
            matches!(&refused, Failure::Own(TenantFailure::ProviderClient { provider, .. }) if provider == "store"),
            "{refused:?}"
        );
    }

    #[test]
    fn only_a_refused_grid_sign_in_is_bad_credentials() {
        let refused: BackendError = storagegrid::Error::BadCredentials {
            operation: "list_access_keys",
            username: "root".into(),
            message: "m".into(),
        }
        .into();
        assert!(is_bad_credentials(&refused));
        let rejected: BackendError = storagegrid::Error::Rejected {
            operation: "list_access_keys",
            status: 403,
            message: "m".into(),
        }
        .into();
        assert!(!is_bad_credentials(&rejected));
    }
}
