//! The provider registry: one set of clients per configured provider (and the RDS client),
//! built once at start from keeper's configuration and shared by every controller. Every S3 call (tenant checks, bucket
//! work, grid tenants' S3 endpoint) goes through a client built here, so `tls.caBundleFile`
//! applies everywhere; provider credentials come from Secrets watched by name, so a rotated
//! admin password or key is used without a restart.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::backends::Keys;
use crate::backends::iam::{IamSettings, IamStore};
use crate::backends::identity::IdentityCache;
use crate::backends::rate::RateLimit;
use crate::backends::rds::RdsBackend;
use crate::backends::s3::{S3Settings, S3Store};
use crate::backends::storagegrid;
use crate::cluster::{Kube, secret_data};
use crate::config::{
    BackendTimeouts, BucketKeys, Endpoint, OperatorConfig, Provider, SecretRef, TlsConfig,
};
use crate::metrics::Metrics;

/// Why a provider cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("provider {0:?} is not in keeper's configuration")]
    Unknown(String),
    /// The provider's credentials Secret is missing or incomplete (the platform team's to fix).
    #[error("{0}")]
    Secret(String),
    /// Reading the credentials Secret failed (transient).
    #[error("cannot read provider Secret {secret}: {message}")]
    Unavailable { secret: String, message: String },
}

/// A provider's configuration could not become a client: keeper refuses to start.
#[derive(Debug, thiserror::Error)]
#[error("provider {provider:?}: {message}")]
pub struct BuildError {
    pub provider: String,
    pub message: String,
}

/// One configured provider and its clients.
pub struct ProviderClients {
    pub name: String,
    pub config: Provider,
    /// The grid's management client (StorageGRID only), sharing its token cache.
    grid: Option<storagegrid::Client>,
    /// The CA bundle trusted for the provider's S3 endpoint, read once at start.
    ca_bundle: Option<Vec<u8>>,
    /// S3 clients per set of keys, so connections are reused across reconciles.
    stores: Mutex<HashMap<Keys, S3Store>>,
    /// `runtime.backendTimeouts` of the configuration, for every S3 client.
    timeouts: BackendTimeouts,
    /// IAM clients per set of admin keys (a rotated admin key gets a new client).
    iam: Mutex<HashMap<Keys, IamStore>>,
    /// The provider's `requestsPerSecond`: one bucket for all its clients (grid, S3 stores of
    /// every set of keys, IAM), since they all load the same backend.
    rate_limit: RateLimit,
    /// Which backend the provider's endpoints reach, looked up once (see
    /// [`crate::backends::identity`]).
    identity: IdentityCache,
}

impl ProviderClients {
    /// The S3 endpoint as applications configure it (no trailing slash).
    pub fn s3_endpoint(&self) -> String {
        let url = match &self.config {
            Provider::StorageGrid(p) => &p.s3_endpoint,
            Provider::S3Compatible(p) => &p.endpoint,
        };
        url.0.as_str().trim_end_matches('/').to_string()
    }

    pub fn region(&self) -> &str {
        match &self.config {
            Provider::StorageGrid(p) => &p.region,
            Provider::S3Compatible(p) => &p.region,
        }
    }

    /// The management client of a StorageGRID provider.
    pub fn grid(&self) -> Option<&storagegrid::Client> {
        self.grid.as_ref()
    }

    /// An S3 client of the provider's endpoint signing with `keys`, trusting the provider's CA
    /// bundle. Cached per set of keys: for the provider's and tenants' keys, which are few.
    pub fn s3(&self, keys: &Keys) -> S3Store {
        let mut stores = self.stores.lock().expect("store cache lock");
        stores
            .entry(keys.clone())
            .or_insert_with(|| {
                S3Store::with_timeouts(&self.s3_settings(keys), &self.timeouts)
                    .expect("the CA bundle was checked when the registry was built")
            })
            .clone()
    }

    /// How to reach the provider's S3 endpoint signing with `keys`.
    fn s3_settings(&self, keys: &Keys) -> S3Settings {
        S3Settings {
            endpoint: self.s3_endpoint(),
            region: self.region().to_string(),
            access_key_id: keys.access_key_id.clone(),
            secret_access_key: keys.secret_access_key.clone(),
            force_path_style: match &self.config {
                Provider::StorageGrid(_) => true,
                Provider::S3Compatible(p) => p.force_path_style,
            },
            ca_bundle: self.ca_bundle.clone(),
            rate_limit: self.rate_limit.clone(),
        }
    }

    /// The provider's IAM API signing with the provider's `admin` keys, when it has one.
    pub fn iam(&self, admin: &Keys) -> Option<IamStore> {
        let Provider::S3Compatible(p) = &self.config else {
            return None;
        };
        let BucketKeys::PerBucketUser(iam) = p.bucket_keys() else {
            return None;
        };
        let mut clients = self.iam.lock().expect("iam cache lock");
        Some(
            clients
                .entry(admin.clone())
                .or_insert_with(|| {
                    IamStore::new(&IamSettings {
                        endpoint: iam.endpoint.as_ref().map(ToString::to_string),
                        region: iam.region.clone(),
                        keys: admin.clone(),
                        timeouts: self.timeouts,
                        ca_bundle: self.ca_bundle.clone(),
                        rate_limit: self.rate_limit.clone(),
                    })
                })
                .clone(),
        )
    }

    /// Where the provider's identity is kept once looked up (see [`crate::backends::identity`]):
    /// shared by every client of the provider, so it is looked up once per process.
    pub fn identity_cache(&self) -> IdentityCache {
        self.identity.clone()
    }

    /// The provider's credentials Secret: `username`/`password` of a grid administrator, or
    /// `accessKeyId`/`secretAccessKey` of an S3-compatible store.
    fn secret_ref(&self) -> &SecretRef {
        match &self.config {
            Provider::StorageGrid(p) => &p.admin_credentials_secret,
            Provider::S3Compatible(p) => &p.credentials_secret,
        }
    }

    /// Reads `keys` from the provider's credentials Secret (from keeper's cache of it).
    pub async fn credentials<const N: usize>(
        &self,
        kube: &dyn Kube,
        operator_namespace: &str,
        keys: [&str; N],
    ) -> Result<[String; N], ProviderError> {
        let secret = self.secret_ref();
        let namespace = secret.namespace.as_deref().unwrap_or(operator_namespace);
        let path = format!("{namespace}/{}", secret.name);
        let data = kube
            .secret(namespace, &secret.name)
            .await
            .map_err(|e| ProviderError::Unavailable {
                secret: path.clone(),
                message: e.to_string(),
            })?
            .map(|s| secret_data(&s))
            .ok_or_else(|| {
                ProviderError::Secret(format!("provider Secret {path} does not exist"))
            })?;
        let mut out: [String; N] = std::array::from_fn(|_| String::new());
        for (slot, key) in out.iter_mut().zip(keys) {
            *slot = data
                .get(key)
                .filter(|v| !v.is_empty())
                .cloned()
                .ok_or_else(|| {
                    ProviderError::Secret(format!("provider Secret {path} has no key {key:?}"))
                })?;
        }
        Ok(out)
    }

    /// The S3-compatible provider's own keys.
    pub async fn s3_keys(
        &self,
        kube: &dyn Kube,
        operator_namespace: &str,
    ) -> Result<Keys, ProviderError> {
        let [access_key_id, secret_access_key] = self
            .credentials(kube, operator_namespace, ["accessKeyId", "secretAccessKey"])
            .await?;
        Ok(Keys {
            access_key_id,
            secret_access_key,
        })
    }
}

/// Every configured provider's clients, and the RDS client.
pub struct Providers {
    entries: BTreeMap<String, Arc<ProviderClients>>,
    rds: RdsBackend,
}

fn read_ca_bundle(tls: &TlsConfig) -> Result<Option<Vec<u8>>, String> {
    let Some(path) = &tls.ca_bundle_file else {
        return Ok(None);
    };
    let pem = std::fs::read(path)
        .map_err(|e| format!("cannot read tls.caBundleFile {}: {e}", path.display()))?;
    if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
        return Err(format!(
            "tls.caBundleFile {} holds no PEM certificate",
            path.display()
        ));
    }
    Ok(Some(pem))
}

/// Refuses `http://` endpoints unless `tls.allowPlainHttp` opts in (audit F20): credentials and
/// keys would cross the network in clear text.
fn refuse_plain_http(endpoints: &[(&str, &Endpoint)], tls: &TlsConfig) -> Result<(), String> {
    let plain: Vec<String> = endpoints
        .iter()
        .filter(|(_, url)| url.0.scheme() == "http")
        .map(|(field, url)| format!("{field} {url}"))
        .collect();
    if plain.is_empty() {
        return Ok(());
    }
    if tls.allow_plain_http {
        tracing::warn!(
            endpoints = %plain.join(", "),
            "plain-http endpoints allowed by tls.allowPlainHttp: credentials travel unencrypted"
        );
        return Ok(());
    }
    Err(format!(
        "{} use plain http, which would send credentials and keys unencrypted: use https, or set \
         tls.allowPlainHttp: true (test and local setups only)",
        plain.join(" and ")
    ))
}

impl Providers {
    /// Builds every provider's clients around `rds` (built from `rds:` in the configuration by
    /// [`RdsBackend::from_config`]); a provider that cannot be used stops keeper at start with
    /// the provider and the reason.
    pub fn build(
        config: &OperatorConfig,
        metrics: Arc<Metrics>,
        rds: RdsBackend,
    ) -> Result<Self, BuildError> {
        let mut entries = BTreeMap::new();
        for (name, provider) in &config.providers {
            let fail = |message: String| BuildError {
                provider: name.clone(),
                message,
            };
            let rate_limit = RateLimit::new(provider.request_rate());
            let (grid, ca_bundle) = match provider {
                Provider::StorageGrid(p) => {
                    refuse_plain_http(
                        &[
                            ("storageGrid.adminEndpoint", &p.admin_endpoint),
                            ("storageGrid.s3Endpoint", &p.s3_endpoint),
                        ],
                        &p.tls,
                    )
                    .map_err(fail)?;
                    let client = storagegrid::Client::with_timeouts(
                        &p.admin_endpoint.0,
                        &p.tls,
                        &config.runtime.backend_timeouts,
                        rate_limit.clone(),
                        metrics.clone(),
                    )
                    .map_err(|e| fail(e.to_string()))?;
                    (Some(client), read_ca_bundle(&p.tls).map_err(fail)?)
                }
                Provider::S3Compatible(p) => {
                    refuse_plain_http(&[("s3Compatible.endpoint", &p.endpoint)], &p.tls)
                        .map_err(fail)?;
                    if p.tls.insecure_skip_verify {
                        return Err(fail(
                            "tls.insecureSkipVerify is not supported for S3-compatible providers; trust the store's CA with tls.caBundleFile".to_string(),
                        ));
                    }
                    (None, read_ca_bundle(&p.tls).map_err(fail)?)
                }
            };
            entries.insert(
                name.clone(),
                Arc::new(ProviderClients {
                    name: name.clone(),
                    config: provider.clone(),
                    grid,
                    ca_bundle,
                    stores: Mutex::default(),
                    timeouts: config.runtime.backend_timeouts,
                    iam: Mutex::default(),
                    identity: IdentityCache::default(),
                    rate_limit,
                }),
            );
        }
        Ok(Providers { entries, rds })
    }

    /// The RDS client (region, endpoint and credentials from the configuration and the AWS
    /// chain).
    pub fn rds(&self) -> &RdsBackend {
        &self.rds
    }

    pub fn get(&self, name: &str) -> Result<Arc<ProviderClients>, ProviderError> {
        self.entries
            .get(name)
            .cloned()
            .ok_or_else(|| ProviderError::Unknown(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fake::FakeKube;

    fn config(yaml: &str) -> OperatorConfig {
        OperatorConfig::parse(yaml).unwrap()
    }

    fn build(config: &OperatorConfig) -> Result<Providers, BuildError> {
        let metrics = Arc::new(Metrics::new());
        Providers::build(config, metrics.clone(), RdsBackend::unconnected(metrics))
    }

    const S3: &str = "providers:\n  s3:\n    s3Compatible:\n      endpoint: https://s3.example.com/\n      credentialsSecret: {name: s3-creds}\n";

    #[test]
    fn insecure_skip_verify_on_an_s3_compatible_provider_stops_keeper_at_start() {
        let yaml = format!("{S3}      tls: {{insecureSkipVerify: true}}\n");
        let err = build(&config(&yaml)).err().expect("refused");
        assert_eq!(err.provider, "s3");
        assert!(err.message.contains("insecureSkipVerify"), "{err}");
    }

    #[test]
    fn plain_http_endpoints_stop_keeper_at_start_unless_allowed() {
        let grid = "providers:\n  grid:\n    storageGrid:\n      adminEndpoint: http://grid.example.com\n      adminCredentialsSecret: {name: admin}\n      s3Endpoint: https://s3.example.com\n";
        let err = build(&config(grid)).err().expect("refused");
        assert_eq!(err.provider, "grid");
        assert!(
            err.message
                .contains("storageGrid.adminEndpoint http://grid.example.com use plain http"),
            "{err}"
        );
        assert!(err.message.contains("tls.allowPlainHttp"), "{err}");
        let s3 = S3.replace("https://", "http://");
        let err = build(&config(&s3)).err().expect("refused");
        assert!(err.message.contains("s3Compatible.endpoint"), "{err}");
        assert!(
            build(&config(&format!(
                "{s3}      tls: {{allowPlainHttp: true}}\n"
            )))
            .is_ok()
        );
        assert!(
            build(&config(&format!(
                "{grid}      tls: {{allowPlainHttp: true}}\n"
            )))
            .is_ok()
        );
        assert!(build(&config(S3)).is_ok(), "https needs no opt-in");
    }

    #[test]
    fn an_unreadable_ca_bundle_stops_keeper_at_start() {
        let yaml = format!("{S3}      tls: {{caBundleFile: /nonexistent/ca.pem}}\n");
        let err = build(&config(&yaml)).err().expect("refused");
        assert!(err.message.contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn unknown_providers_are_named() {
        let providers = build(&config(S3)).unwrap();
        assert_eq!(
            providers.get("nope").err(),
            Some(ProviderError::Unknown("nope".into()))
        );
        let s3 = providers.get("s3").unwrap();
        assert_eq!(s3.s3_endpoint(), "https://s3.example.com");
    }

    /// A local server answering S3 `ListBuckets` and `ListObjectsV2` (GET), IAM `ListAccessKeys`
    /// (POST) and, under `/api/v4`, a grid sign-in and `get_account`.
    async fn backend() -> wiremock::MockServer {
        use wiremock::matchers::{method, path, query_param};
        use wiremock::{Mock, ResponseTemplate};
        let server = crate::test_support::mock_server().await;
        let json = |data: serde_json::Value| {
            ResponseTemplate::new(200).set_body_json(serde_json::json!({"data": data}))
        };
        Mock::given(method("POST"))
            .and(path("/api/v4/authorize"))
            .respond_with(json("token".into()).insert_header("Cache-Control", "max-age=57599"))
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path("/api/v4/grid/accounts/1"))
            .respond_with(json(serde_json::json!({"id": "1", "name": "team-a"})))
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path("/"))
            .respond_with(ResponseTemplate::new(200).set_body_raw(
                "<ListAllMyBucketsResult><Buckets></Buckets></ListAllMyBucketsResult>",
                "application/xml",
            ))
            .mount(&server)
            .await;
        // A bucket's key check lists a bucket.
        Mock::given(method("GET"))
            .and(query_param("list-type", "2"))
            .respond_with(ResponseTemplate::new(200).set_body_raw(
                "<ListBucketResult><Name>b</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>",
                "application/xml",
            ))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path("/"))
            .respond_with(ResponseTemplate::new(200).set_body_raw(
                "<ListAccessKeysResponse><ListAccessKeysResult><AccessKeyMetadata/><IsTruncated>false</IsTruncated></ListAccessKeysResult></ListAccessKeysResponse>",
                "text/xml",
            ))
            .mount(&server)
            .await;
        server
    }

    fn keys(id: &str) -> Keys {
        Keys {
            access_key_id: id.into(),
            secret_access_key: "SK".into(),
        }
    }

    /// Provider `name` (its `entry`, with `URL` for the server's) of `server`, limited to 20
    /// requests per second, one at a time.
    fn paced(server: &wiremock::MockServer, name: &str, entry: &str) -> Arc<ProviderClients> {
        let yaml = format!(
            "providers:\n  {name}:\n{}      tls: {{allowPlainHttp: true}}\n      requestsPerSecond: 20\n      requestBurst: 1\n",
            entry.replace("URL", &server.uri())
        );
        build(&config(&yaml)).unwrap().get(name).unwrap()
    }

    /// Runs `calls` at once; each must succeed.
    async fn all<E: std::fmt::Debug>(calls: Vec<futures::future::BoxFuture<'_, Result<(), E>>>) {
        for result in futures::future::join_all(calls).await {
            result.unwrap();
        }
    }

    /// Checks that `requests` requests at 20/s, one at a time, took as long as they must: the
    /// last goes 50 ms x (requests - 1) after the first.
    fn assert_paced(requests: u32, took: std::time::Duration) {
        let least = std::time::Duration::from_millis(50) * (requests - 1);
        assert!(took >= least, "{requests} requests in {took:?}");
        assert!(took < least + std::time::Duration::from_secs(5), "{took:?}");
    }

    #[tokio::test]
    async fn an_s3_compatible_providers_s3_and_iam_clients_share_its_request_rate() {
        use futures::FutureExt;
        let server = backend().await;
        let s3 = paced(
            &server,
            "s3",
            "    s3Compatible:\n      endpoint: URL\n      credentialsSecret: {name: x}\n      iam: {endpoint: URL}\n",
        );
        let metrics = Metrics::new();
        let (store, iam) = (s3.s3(&keys("AK")), s3.iam(&keys("AK")).unwrap());
        // A check of a bucket's keys (signed with them, not the provider's) is paced all the same.
        let bucket_keys = keys("bucket-key");
        let check = || {
            store
                .access(&metrics, &bucket_keys, "b")
                .map(|r| r.map(drop))
        };
        let list = || store.list_buckets(&metrics).map(|r| r.map(drop));
        let s3_calls = [
            list().boxed(),
            check().boxed(),
            list().boxed(),
            check().boxed(),
        ];
        let iam_calls = (0..3).map(|_| iam.access_keys(&metrics, "u").map(|r| r.map(drop)).boxed());
        let started = std::time::Instant::now();
        futures::join!(all(s3_calls.into()), all(iam_calls.collect()));
        assert_paced(7, started.elapsed());
        assert_eq!(server.received_requests().await.unwrap().len(), 7);
        assert!(
            metrics
                .encode()
                .contains(r#"keeper_backend_rate_limited_seconds_count{backend="iam"} 3"#)
        );
    }

    #[tokio::test]
    async fn a_grids_management_and_s3_clients_share_its_request_rate() {
        use futures::FutureExt;
        let server = backend().await;
        let grid = paced(
            &server,
            "grid",
            "    storageGrid:\n      adminEndpoint: URL\n      adminCredentialsSecret: {name: x}\n      s3Endpoint: URL\n",
        );
        let metrics = Metrics::new();
        let store = grid.s3(&keys("AK"));
        let admin = storagegrid::Login::grid("root", "pass");
        let client = grid.grid().unwrap();
        let started = std::time::Instant::now();
        // The first grid call signs in first (a request the rate does not count: one per token).
        client.get_account(&admin, "1").await.unwrap();
        let grid_calls =
            (0..4).map(|_| client.get_account(&admin, "1").map(|r| r.map(drop)).boxed());
        let s3_calls = (0..4).map(|_| store.list_buckets(&metrics).map(|r| r.map(drop)).boxed());
        futures::join!(all(grid_calls.collect()), all(s3_calls.collect()));
        assert_paced(9, started.elapsed());
    }

    #[tokio::test]
    async fn credentials_come_from_the_provider_secret_and_missing_keys_are_named() {
        let providers = build(&config(S3)).unwrap();
        let s3 = providers.get("s3").unwrap();
        let kube = FakeKube::default();
        let missing = s3.s3_keys(&kube, "keeper-system").await.unwrap_err();
        assert_eq!(
            missing,
            ProviderError::Secret("provider Secret keeper-system/s3-creds does not exist".into())
        );
        kube.put_secret(
            "keeper-system",
            "s3-creds",
            BTreeMap::from([("accessKeyId".to_string(), "AK".to_string())]),
        );
        let incomplete = s3.s3_keys(&kube, "keeper-system").await.unwrap_err();
        assert!(incomplete.to_string().contains("secretAccessKey"));
        kube.put_secret(
            "keeper-system",
            "s3-creds",
            BTreeMap::from([
                ("accessKeyId".to_string(), "AK".to_string()),
                ("secretAccessKey".to_string(), "SK".to_string()),
            ]),
        );
        assert_eq!(
            s3.s3_keys(&kube, "keeper-system")
                .await
                .unwrap()
                .access_key_id,
            "AK"
        );
    }
}
