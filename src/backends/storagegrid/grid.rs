//! The grid API (grid administrator login): accounts, their root password and their usage.

use reqwest::Method;
use serde_json::json;

use super::{
    ACCOUNT_PAGE, Account, AccountSpec, Call, Client, Error, Login, Usage, description_has_marker,
    model, segment,
};

impl Client {
    /// Creates an account. Not idempotent (names are not unique): callers persist the returned
    /// id, and after a lost answer look for the account with [`Client::find_accounts`].
    pub async fn create_account(
        &self,
        admin: &Login,
        spec: &AccountSpec,
        root_password: &str,
    ) -> Result<Account, Error> {
        let body = model::NewAccount {
            spec,
            password: root_password,
        };
        self.call(Call::new(
            admin,
            "create_account",
            Method::POST,
            "grid/accounts",
            Some(&body),
        ))
        .await
    }

    pub async fn get_account(&self, admin: &Login, id: &str) -> Result<Account, Error> {
        let path = format!("grid/accounts/{}", segment(id));
        self.call(Call::get(admin, "get_account", &path)).await
    }

    /// Replaces the account's name, description, capabilities and policy (GET → modify → PUT;
    /// PATCH is deprecated).
    pub async fn update_account(
        &self,
        admin: &Login,
        id: &str,
        spec: &AccountSpec,
    ) -> Result<Account, Error> {
        let path = format!("grid/accounts/{}", segment(id));
        self.call(Call::new(
            admin,
            "update_account",
            Method::PUT,
            &path,
            Some(spec),
        ))
        .await
    }

    /// Deletes an account. 404 is returned as [`Error::NotFound`] (the caller decides it means
    /// "already gone"); an account that still holds buckets is refused (409 on the emulator).
    pub async fn delete_account(&self, admin: &Login, id: &str) -> Result<(), Error> {
        let path = format!("grid/accounts/{}", segment(id));
        self.call_empty(Call::delete(admin, "delete_account", &path))
            .await
    }

    /// Sets the password of the account's root user (used when keeper lost or cannot use the
    /// password it stored).
    pub async fn set_root_password(
        &self,
        admin: &Login,
        id: &str,
        password: &str,
    ) -> Result<(), Error> {
        let path = format!("grid/accounts/{}/change-password", segment(id));
        let body = json!({"password": password});
        self.call_empty(Call::new(
            admin,
            "set_root_password",
            Method::POST,
            &path,
            Some(&body),
        ))
        .await
    }

    /// Every account on the grid, page by page (the API has no server-side filter).
    pub async fn list_accounts(&self, admin: &Login) -> Result<Vec<Account>, Error> {
        let mut all: Vec<Account> = Vec::new();
        loop {
            let mut path = format!("grid/accounts?limit={ACCOUNT_PAGE}");
            if let Some(last) = all.last() {
                path.push_str(&format!("&marker={}", segment(&last.id)));
            }
            let page: Vec<Account> = self.call(Call::get(admin, "list_accounts", &path)).await?;
            let done = page.len() < ACCOUNT_PAGE;
            // A server that ignores the marker would answer the same page forever: a page must
            // move past the previous one.
            if let (Some(previous), Some(next)) = (all.last(), page.last())
                && next.id <= previous.id
            {
                return Err(Error::InvalidResponse {
                    operation: "list_accounts",
                    message: format!(
                        "the page after account {} ends at account {}: the grid does not honour the paging marker",
                        previous.id, next.id
                    ),
                });
            }
            all.extend(page);
            if done {
                return Ok(all);
            }
        }
    }

    /// The accounts whose description carries `marker` (keeper's ownership marker), found by
    /// listing: how an account whose create answer was lost is found again. Never by name.
    pub async fn find_accounts(&self, admin: &Login, marker: &str) -> Result<Vec<Account>, Error> {
        Ok(self
            .list_accounts(admin)
            .await?
            .into_iter()
            .filter(|a| description_has_marker(a.description.as_deref(), marker))
            .collect())
    }

    /// The grid's id: the root of the grid's topology (`GET /grid/health/topology?depth=grid`,
    /// whose top node is the grid itself). It tells one grid from another, so that a 404 from
    /// another grid is never read as "deleted" (see [`crate::backends::identity`]).
    pub async fn grid_id(&self, admin: &Login) -> Result<String, Error> {
        let grid: model::TopologyNode = self
            .call(Call::get(
                admin,
                "grid_topology",
                "grid/health/topology?depth=grid",
            ))
            .await?;
        if grid.id.is_empty() {
            return Err(Error::InvalidResponse {
                operation: "grid_topology",
                message: "the grid's topology names no grid id".to_string(),
            });
        }
        Ok(grid.id)
    }

    /// Usage of one account, with one entry per bucket (also empty ones).
    pub async fn account_usage(&self, admin: &Login, id: &str) -> Result<Usage, Error> {
        let path = format!("grid/accounts/{}/usage", segment(id));
        self.call(Call::get(admin, "account_usage", &path)).await
    }
}
