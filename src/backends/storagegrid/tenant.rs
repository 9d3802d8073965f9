//! The tenant API (tenant user login): containers (buckets) and their drain, users, groups and
//! S3 access keys.

use reqwest::Method;
use serde_json::json;

use super::{
    AccessKey, Call, Client, Container, DrainState, Error, Group, KeyOwner, Login, NewContainer,
    NewGroup, NewUser, Usage, User, segment,
};

impl Client {
    /// The tenant's buckets with their region, object-lock and drain state.
    pub async fn list_containers(&self, tenant: &Login) -> Result<Vec<Container>, Error> {
        self.call(Call::get(
            tenant,
            "list_containers",
            "org/containers?include=region,s3ObjectLock,deleteObjects",
        ))
        .await
    }

    /// Creates a bucket, then enables versioning if asked (the versioning flag on create is not
    /// in every API version). A 409 comes back as [`Error::Conflict`]: the name is taken,
    /// possibly by this tenant; the caller lists to tell which.
    pub async fn create_container(
        &self,
        tenant: &Login,
        bucket: &NewContainer,
    ) -> Result<(), Error> {
        let mut body = json!({
            "name": bucket.name,
            "s3ObjectLock": {"enabled": bucket.object_lock},
        });
        if let Some(region) = &bucket.region {
            body["region"] = json!(region);
        }
        self.call_empty(Call::new(
            tenant,
            "create_container",
            Method::POST,
            "org/containers",
            Some(&body),
        ))
        .await?;
        if bucket.versioning {
            self.set_versioning(tenant, &bucket.name, true).await?;
        }
        Ok(())
    }

    /// Enables (or suspends) versioning of a bucket.
    pub async fn set_versioning(
        &self,
        tenant: &Login,
        bucket: &str,
        enabled: bool,
    ) -> Result<(), Error> {
        let path = format!("org/containers/{}/versioning", segment(bucket));
        let body = json!({"versioningEnabled": enabled, "versioningSuspended": !enabled});
        self.call_empty(Call::new(
            tenant,
            "set_versioning",
            Method::PUT,
            &path,
            Some(&body),
        ))
        .await
    }

    /// Deletes an empty bucket (409 while it holds objects, 404 when missing).
    pub async fn delete_container(&self, tenant: &Login, bucket: &str) -> Result<(), Error> {
        let path = format!("org/containers/{}", segment(bucket));
        self.call_empty(Call::delete(tenant, "delete_container", &path))
            .await
    }

    /// Starts (`true`) or stops (`false`) the server-side deletion of every object in a bucket.
    pub async fn set_drain(
        &self,
        tenant: &Login,
        bucket: &str,
        delete_objects: bool,
    ) -> Result<DrainState, Error> {
        let path = format!("org/containers/{}/delete-objects", segment(bucket));
        let body = json!({"deleteObjects": delete_objects});
        self.call(Call::new(
            tenant,
            "set_drain",
            Method::POST,
            &path,
            Some(&body),
        ))
        .await
    }

    /// The tenant's usage with object count and bytes per bucket (can lag by minutes).
    pub async fn tenant_usage(&self, tenant: &Login) -> Result<Usage, Error> {
        self.call(Call::get(tenant, "tenant_usage", "org/usage"))
            .await
    }

    pub async fn create_user(&self, tenant: &Login, user: &NewUser) -> Result<User, Error> {
        self.call(Call::new(
            tenant,
            "create_user",
            Method::POST,
            "org/users",
            Some(user),
        ))
        .await
    }

    /// A local user by short name (`app-a` for `user/app-a`).
    pub async fn get_user_by_name(&self, tenant: &Login, short_name: &str) -> Result<User, Error> {
        let path = format!("org/users/user/{}", segment(short_name));
        self.call(Call::get(tenant, "get_user", &path)).await
    }

    pub async fn delete_user(&self, tenant: &Login, id: &str) -> Result<(), Error> {
        let path = format!("org/users/{}", segment(id));
        self.call_empty(Call::delete(tenant, "delete_user", &path))
            .await
    }

    pub async fn create_group(&self, tenant: &Login, group: &NewGroup) -> Result<Group, Error> {
        self.call(Call::new(
            tenant,
            "create_group",
            Method::POST,
            "org/groups",
            Some(group),
        ))
        .await
    }

    /// A group by short name (`readers` for `group/readers`).
    pub async fn get_group_by_name(
        &self,
        tenant: &Login,
        short_name: &str,
    ) -> Result<Group, Error> {
        let path = format!("org/groups/group/{}", segment(short_name));
        self.call(Call::get(tenant, "get_group", &path)).await
    }

    /// Replaces a group (its S3 policy included).
    pub async fn update_group(
        &self,
        tenant: &Login,
        id: &str,
        group: &NewGroup,
    ) -> Result<Group, Error> {
        let path = format!("org/groups/{}", segment(id));
        self.call(Call::new(
            tenant,
            "update_group",
            Method::PUT,
            &path,
            Some(group),
        ))
        .await
    }

    pub async fn delete_group(&self, tenant: &Login, id: &str) -> Result<(), Error> {
        let path = format!("org/groups/{}", segment(id));
        self.call_empty(Call::delete(tenant, "delete_group", &path))
            .await
    }

    /// Creates a key that never expires. Not idempotent: every call makes a new key, and the
    /// secret is in this answer only.
    pub async fn create_access_key(
        &self,
        tenant: &Login,
        owner: KeyOwner<'_>,
    ) -> Result<AccessKey, Error> {
        let path = format!("org/users/{}/s3-access-keys", segment(owner.path_segment()));
        let body = json!({"expires": null});
        let key: AccessKey = self
            .call(Call::new(
                tenant,
                "create_access_key",
                Method::POST,
                &path,
                Some(&body),
            ))
            .await?;
        if key.access_key.is_none() || key.secret_access_key.is_none() {
            return Err(Error::InvalidResponse {
                operation: "create_access_key",
                message: format!("key {} was created without its secret", key.id),
            });
        }
        Ok(key)
    }

    pub async fn list_access_keys(
        &self,
        tenant: &Login,
        owner: KeyOwner<'_>,
    ) -> Result<Vec<AccessKey>, Error> {
        let path = format!("org/users/{}/s3-access-keys", segment(owner.path_segment()));
        self.call(Call::get(tenant, "list_access_keys", &path))
            .await
    }

    /// A key by credential id or access key id (without its secret).
    pub async fn get_access_key(
        &self,
        tenant: &Login,
        owner: KeyOwner<'_>,
        key: &str,
    ) -> Result<AccessKey, Error> {
        let path = format!(
            "org/users/{}/s3-access-keys/{}",
            segment(owner.path_segment()),
            segment(key)
        );
        self.call(Call::get(tenant, "get_access_key", &path)).await
    }

    /// Deletes a key by credential id or access key id.
    pub async fn delete_access_key(
        &self,
        tenant: &Login,
        owner: KeyOwner<'_>,
        key: &str,
    ) -> Result<(), Error> {
        let path = format!(
            "org/users/{}/s3-access-keys/{}",
            segment(owner.path_segment()),
            segment(key)
        );
        self.call_empty(Call::delete(tenant, "delete_access_key", &path))
            .await
    }
}
