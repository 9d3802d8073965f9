//! The backend half of each figure's floor: the backend calls the same work needs, made one after
//! another by a plain client, against the same servers in the same run (the API writes the same
//! result needs are the other half, in [`crate::writes`]). keeper is held to a ratio of it (the
//! machine's speed cancels out).

use std::time::{Duration, Instant};

use anyhow::Context;
use aws_sdk_s3::types::{Delete, ObjectIdentifier, Tag, Tagging};
use serde_json::{Value, json};

use crate::lab::Lab;

/// How long the creation and the deletion of `n` resources took, one after another, and the
/// backend calls each made (as the AWS proxy and the StorageGRID emulator counted them).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub create: Duration,
    pub delete: Duration,
    pub create_calls: u64,
    pub delete_calls: u64,
}

impl Timing {
    /// Both halves of a floor made one after the other: the backend's and the API server's.
    pub fn plus(self, other: Timing) -> Timing {
        Timing {
            create: self.create + other.create,
            delete: self.delete + other.delete,
            create_calls: self.create_calls + other.create_calls,
            delete_calls: self.delete_calls + other.delete_calls,
        }
    }
}

/// The backend calls counted since the counters were last cleared; clears them.
async fn calls_since(lab: &Lab) -> anyhow::Result<u64> {
    let calls = lab.backend_calls().await?.values().sum();
    lab.clear_counters().await?;
    Ok(calls)
}

/// Which calls a floor makes: only those that do the work, or also keeper's safety calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Calls {
    /// The calls that create and delete, nothing else.
    Work,
    /// Also the looks keeper takes before it acts (see the [Safety model](docs/safety.md)): the
    /// ownership looks before a create and a delete, the check of new keys before they are
    /// published, the verification of a deletion. The sequential safe floor.
    Safe,
}

/// A bucket on provider `s3` as keeper makes it: CreateBucket, PutBucketTagging (ownership),
/// an IAM user with an inline policy on that bucket and an access key; deletion the reverse:
/// DeleteAccessKey, DeleteUserPolicy, DeleteUser, DeleteBucket. With [`Calls::Safe`], keeper's
/// looks too: GetBucketTagging twice before the create (the ownership look before the create
/// intent is recorded and again right before the create), ListObjectsV2 with the new keys
/// (checked before they are published), GetBucketTagging before the deletion, and again once
/// the bucket is gone, before its user goes (a bucket of that name made since by another
/// S3Bucket keeps the user named after it).
pub async fn s3_buckets(lab: &Lab, n: usize, calls: Calls) -> anyhow::Result<Timing> {
    let (key, secret) = lab.env.admin_keys.clone().context("admin keys")?;
    let endpoint = lab.env.s3_endpoint.clone().context("s3 endpoint")?;
    let s3 = keeper_e2e_scenarios::s3_client(&endpoint, &key, &secret, "us-east-1");
    let iam = keeper_e2e_scenarios::iam_client(&lab.env).await;
    let names: Vec<String> = (0..n).map(|i| format!("floor-{n}-{i}")).collect();
    lab.clear_counters().await?;
    let started = Instant::now();
    let mut keys = Vec::with_capacity(n);
    let safe = calls == Calls::Safe;
    for name in &names {
        if safe {
            for _ in 0..2 {
                let look = s3.get_bucket_tagging().bucket(name).send().await;
                anyhow::ensure!(look.is_err(), "bucket {name} exists before its creation");
            }
        }
        s3.create_bucket().bucket(name).send().await?;
        s3.put_bucket_tagging()
            .bucket(name)
            .tagging(
                Tagging::builder()
                    .tag_set(Tag::builder().key("keeper.dev/owner").value(name).build()?)
                    .build()?,
            )
            .send()
            .await?;
        iam.create_user().user_name(name).send().await?;
        iam.put_user_policy()
            .user_name(name)
            .policy_name("bucket")
            .policy_document(policy(name))
            .send()
            .await?;
        let created = iam.create_access_key().user_name(name).send().await?;
        let key = created.access_key().context("no access key")?;
        if safe {
            keeper_e2e_scenarios::s3_client(
                &endpoint,
                key.access_key_id(),
                key.secret_access_key(),
                "us-east-1",
            )
            .list_objects_v2()
            .bucket(name)
            .max_keys(1)
            .send()
            .await?;
        }
        keys.push(key.access_key_id().to_string());
    }
    let create = started.elapsed();
    let create_calls = calls_since(lab).await?;
    let started = Instant::now();
    for (name, key) in names.iter().zip(&keys) {
        if safe {
            s3.get_bucket_tagging().bucket(name).send().await?;
        }
        iam.delete_access_key()
            .user_name(name)
            .access_key_id(key)
            .send()
            .await?;
        iam.delete_user_policy()
            .user_name(name)
            .policy_name("bucket")
            .send()
            .await?;
        iam.delete_user().user_name(name).send().await?;
        s3.delete_bucket().bucket(name).send().await?;
        if safe {
            let look = s3.get_bucket_tagging().bucket(name).send().await;
            anyhow::ensure!(look.is_err(), "bucket {name} exists after its deletion");
        }
    }
    let delete = started.elapsed();
    Ok(Timing {
        create,
        delete,
        create_calls,
        delete_calls: calls_since(lab).await?,
    })
}

/// An inline policy of the size keeper writes (object access to one bucket).
fn policy(bucket: &str) -> String {
    json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:ListBucketVersions", "s3:ListBucketMultipartUploads"],
         "Resource": format!("arn:aws:s3:::{bucket}")},
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:GetObjectVersion", "s3:PutObject", "s3:DeleteObject",
         "s3:DeleteObjectVersion", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
         "Resource": format!("arn:aws:s3:::{bucket}/*")}]})
    .to_string()
}

/// The StorageGRID management API, signed in once as the grid administrator.
pub struct Grid<'a> {
    lab: &'a Lab,
    token: String,
}

impl<'a> Grid<'a> {
    pub async fn sign_in(lab: &'a Lab) -> anyhow::Result<Grid<'a>> {
        let (user, password) = &lab.grid_admin;
        let token = authorize(
            lab,
            json!({"username": user, "password": password, "cookie": false, "csrfToken": false}),
        )
        .await?;
        Ok(Grid { lab, token })
    }

    async fn call(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut request = self
            .lab
            .http
            .request(method, format!("{}/api/v4/{path}", self.lab.grid))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        Ok((
            status,
            if text.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text)?
            },
        ))
    }

    async fn ok(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let (status, answer) = self.call(token, method.clone(), path, body).await?;
        anyhow::ensure!(
            (200..300).contains(&status),
            "{method} {path}: {status} {answer}"
        );
        Ok(answer)
    }

    /// A tenant as keeper makes it: the account (with its root password), a sign-in as its
    /// root user and an S3 access key for it; with [`Calls::Safe`], keeper's looks too: the
    /// account read back after its creation and the root user's keys listed before one is
    /// created.
    pub async fn create_tenant(&self, name: &str, calls: Calls) -> anyhow::Result<FloorTenant> {
        let password = "floor-password-0123456789abcdef";
        let account = self
            .ok(&self.token, reqwest::Method::POST, "grid/accounts", Some(json!({
                "name": name, "description": format!("floor {name}"),
                "capabilities": ["management", "s3"],
                "policy": {"useAccountIdentitySource": false, "allowPlatformServices": false, "quotaObjectBytes": null},
                "password": password})))
            .await?;
        let id = account["data"]["id"]
            .as_str()
            .context("account id")?
            .to_string();
        if calls == Calls::Safe {
            self.ok(
                &self.token,
                reqwest::Method::GET,
                &format!("grid/accounts/{id}"),
                None,
            )
            .await?;
        }
        let root = authorize(self.lab, json!({"accountId": id, "username": "root", "password": password, "cookie": false, "csrfToken": false})).await?;
        if calls == Calls::Safe {
            self.ok(
                &root,
                reqwest::Method::GET,
                "org/users/current-user/s3-access-keys",
                None,
            )
            .await?;
        }
        let key = self
            .ok(
                &root,
                reqwest::Method::POST,
                "org/users/current-user/s3-access-keys",
                Some(json!({})),
            )
            .await?;
        Ok(FloorTenant {
            id,
            access_key: key["data"]["accessKey"]
                .as_str()
                .context("access key")?
                .to_string(),
            secret_key: key["data"]["secretAccessKey"]
                .as_str()
                .context("secret key")?
                .to_string(),
            root,
        })
    }

    /// Deletes an account and checks that it is gone, as keeper verifies its deletions.
    pub async fn delete_tenant(&self, id: &str) -> anyhow::Result<()> {
        let path = format!("grid/accounts/{id}");
        self.ok(&self.token, reqwest::Method::DELETE, &path, None)
            .await?;
        let (status, _) = self
            .call(&self.token, reqwest::Method::GET, &path, None)
            .await?;
        anyhow::ensure!(status == 404, "account {id} still there after its deletion");
        Ok(())
    }

    /// Deletes a tenant as keeper does: the account read (ownership), its buckets listed (a
    /// tenant with buckets is not deleted), its keys listed and revoked, the account deleted
    /// and checked gone.
    pub async fn delete_tenant_safely(&self, tenant: &FloorTenant) -> anyhow::Result<()> {
        let (id, root) = (&tenant.id, &tenant.root);
        self.ok(
            &self.token,
            reqwest::Method::GET,
            &format!("grid/accounts/{id}"),
            None,
        )
        .await?;
        let buckets = self
            .ok(root, reqwest::Method::GET, "org/containers", None)
            .await?;
        anyhow::ensure!(
            buckets["data"].as_array().is_none_or(|b| b.is_empty()),
            "tenant {id} has buckets"
        );
        let keys = self
            .ok(
                root,
                reqwest::Method::GET,
                "org/users/current-user/s3-access-keys",
                None,
            )
            .await?;
        for key in keys["data"].as_array().into_iter().flatten() {
            let key = key["accessKey"].as_str().unwrap_or(&tenant.access_key);
            self.ok(
                root,
                reqwest::Method::DELETE,
                &format!("org/users/current-user/s3-access-keys/{key}"),
                None,
            )
            .await?;
        }
        self.delete_tenant(id).await
    }

    /// Starts a bucket's drain as the tenant's root user would, and polls its usage every
    /// `poll` until it holds no object.
    pub async fn drain(
        &self,
        tenant: &FloorTenant,
        bucket: &str,
        poll: Duration,
    ) -> anyhow::Result<()> {
        let root = &tenant.root;
        let path = format!("org/containers/{bucket}/delete-objects");
        self.ok(
            root,
            reqwest::Method::POST,
            &path,
            Some(json!({"deleteObjects": true})),
        )
        .await?;
        loop {
            let usage = self
                .ok(
                    root,
                    reqwest::Method::GET,
                    &format!("org/containers/{bucket}/usage"),
                    None,
                )
                .await?;
            if usage["data"]["objectCount"].as_i64() == Some(0) {
                break;
            }
            tokio::time::sleep(poll).await;
        }
        // As keeper does at the end: the grid would go on looking for objects to delete (and
        // keep the bucket read-only) until told to stop.
        self.ok(
            root,
            reqwest::Method::POST,
            &path,
            Some(json!({"deleteObjects": false})),
        )
        .await?;
        Ok(())
    }
}

/// A tenant the floor made: its account, its root user's token and S3 key.
pub struct FloorTenant {
    pub id: String,
    pub root: String,
    pub access_key: String,
    pub secret_key: String,
}

/// `POST /authorize`: a token.
async fn authorize(lab: &Lab, body: Value) -> anyhow::Result<String> {
    let answer: Value = lab
        .http
        .post(format!("{}/api/v4/authorize", lab.grid))
        .json(&body)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(answer["data"].as_str().context("no token")?.to_string())
}

/// Tenants on StorageGRID, one after another: create, then delete and verify (with
/// [`Calls::Safe`], as keeper does both: see [`Grid::create_tenant`] and
/// [`Grid::delete_tenant_safely`]).
pub async fn grid_tenants(lab: &Lab, n: usize, calls: Calls) -> anyhow::Result<Timing> {
    let grid = Grid::sign_in(lab).await?;
    lab.clear_counters().await?;
    let started = Instant::now();
    let mut tenants = Vec::with_capacity(n);
    for i in 0..n {
        tenants.push(grid.create_tenant(&format!("floor-{n}-{i}"), calls).await?);
    }
    let create = started.elapsed();
    let create_calls = calls_since(lab).await?;
    let started = Instant::now();
    for tenant in &tenants {
        match calls {
            Calls::Work => grid.delete_tenant(&tenant.id).await?,
            Calls::Safe => grid.delete_tenant_safely(tenant).await?,
        }
    }
    let delete = started.elapsed();
    Ok(Timing {
        create,
        delete,
        create_calls,
        delete_calls: calls_since(lab).await?,
    })
}

/// RDS instances, one after another: CreateDBInstance and DescribeDBInstances until available;
/// then DeleteDBInstance (no final snapshot) and DescribeDBInstances until it is not found. With
/// [`Calls::Safe`], keeper's looks too: DescribeDBInstances before the create (the name is
/// free) and before the deletion (whose instance it is).
pub async fn databases(lab: &Lab, n: usize, calls: Calls) -> anyhow::Result<Timing> {
    let rds = keeper_e2e_scenarios::rds_client(&lab.env).await;
    let ids: Vec<String> = (0..n).map(|i| format!("floor-{n}-{i}")).collect();
    let safe = calls == Calls::Safe;
    lab.clear_counters().await?;
    let started = Instant::now();
    for id in &ids {
        if safe {
            let look = rds
                .describe_db_instances()
                .db_instance_identifier(id)
                .send()
                .await;
            anyhow::ensure!(look.is_err(), "instance {id} exists before its creation");
        }
        rds.create_db_instance()
            .db_instance_identifier(id)
            .engine("postgres")
            .db_instance_class("db.t3.micro")
            .allocated_storage(20)
            .master_username("keeper")
            .master_user_password("floor-password-0123456789")
            .db_name("app")
            .send()
            .await?;
        loop {
            let described = rds
                .describe_db_instances()
                .db_instance_identifier(id)
                .send()
                .await?;
            let status = described
                .db_instances()
                .first()
                .and_then(|i| i.db_instance_status());
            if status == Some("available") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let create = started.elapsed();
    let create_calls = calls_since(lab).await?;
    let started = Instant::now();
    for id in &ids {
        if safe {
            rds.describe_db_instances()
                .db_instance_identifier(id)
                .send()
                .await?;
        }
        rds.delete_db_instance()
            .db_instance_identifier(id)
            .skip_final_snapshot(true)
            .send()
            .await?;
        while rds
            .describe_db_instances()
            .db_instance_identifier(id)
            .send()
            .await
            .is_ok()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let delete = started.elapsed();
    Ok(Timing {
        create,
        delete,
        create_calls,
        delete_calls: calls_since(lab).await?,
    })
}

/// Empties a never-versioned bucket as fast as one client can one batch after another:
/// ListObjectsV2 (1,000 keys), DeleteObjects of them, again until the listing is empty. Returns
/// the time and the DeleteObjects calls.
pub async fn drain_s3(s3: &aws_sdk_s3::Client, bucket: &str) -> anyhow::Result<(Duration, u64)> {
    let started = Instant::now();
    let mut calls = 0;
    loop {
        let page = s3
            .list_objects_v2()
            .bucket(bucket)
            .max_keys(1000)
            .send()
            .await?;
        let keys: Vec<ObjectIdentifier> = page
            .contents()
            .iter()
            .filter_map(|o| ObjectIdentifier::builder().key(o.key()?).build().ok())
            .collect();
        if keys.is_empty() {
            return Ok((started.elapsed(), calls));
        }
        s3.delete_objects()
            .bucket(bucket)
            .delete(
                Delete::builder()
                    .set_objects(Some(keys))
                    .quiet(true)
                    .build()?,
            )
            .send()
            .await?;
        calls += 1;
    }
}
