//! When a StorageGRID tenant's account needs looking at on the grid. A tenant is reconciled after
//! each change of its buckets, to count them: with 100 buckets made at once, dozens of times a
//! minute. Each full look reads the account and the published key (three grid calls), and none
//! of those changes could have changed them. So a full look stands, as long as the resync
//! interval, for reconciles that find the tenant as that look left it: its spec, its recorded
//! account, its Ready status and its Secrets. Any change among those, or the interval's end, looks
//! at the grid again; drift on the grid is found on that timer, as for an idle tenant.

use std::time::Duration;

use crate::api::{S3Tenant, TenantPhase};
use crate::runtime::conditions;

/// What a full look at a tenant's account depended on, as it was right after the look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountInputs {
    /// The spec's `metadata.generation`.
    pub generation: Option<i64>,
    /// The account recorded in status (after the look: the one it found).
    pub account_id: Option<String>,
    /// The tenant's Secrets (root credentials, published keys), each as its uid, resourceVersion
    /// and whether it is being deleted; `None` when absent.
    pub secrets: Vec<Option<SecretVersion>>,
}

/// One Secret as a look saw it: any write or deletion changes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretVersion {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub deleting: bool,
}

/// Whether the tenant reads Ready for its current generation: the outcome of its last reconcile
/// was written. Only then can a look stand for it.
pub fn ready_for_its_generation(tenant: &S3Tenant) -> bool {
    tenant.status.as_ref().is_some_and(|s| {
        s.phase == Some(TenantPhase::Ready)
            && s.observed_generation == tenant.metadata.generation
            && conditions::is_true(&s.conditions, conditions::READY)
    })
}

/// How long the last full look (`elapsed` ago, on `then`) still stands for the tenant as it is
/// `now`; `None`: look at the grid now. Asked only of a tenant that reads Ready for its current
/// generation (the look's outcome was written); it stands while nothing it depended on changed,
/// within `interval`.
pub fn look_stands(
    last: Option<(Duration, &AccountInputs)>,
    now: &AccountInputs,
    interval: Duration,
) -> Option<Duration> {
    let (elapsed, then) = last?;
    (then == now && now.account_id.is_some())
        .then(|| interval.checked_sub(elapsed))
        .flatten()
        .filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_secs(300);

    fn inputs() -> AccountInputs {
        AccountInputs {
            generation: Some(1),
            account_id: Some("a-1".into()),
            secrets: vec![
                Some(SecretVersion {
                    uid: Some("s-1".into()),
                    resource_version: Some("10".into()),
                    deleting: false,
                }),
                None,
            ],
        }
    }

    fn stands(elapsed: u64, now: &AccountInputs) -> Option<Duration> {
        let then = inputs();
        look_stands(Some((Duration::from_secs(elapsed), &then)), now, INTERVAL)
    }

    #[test]
    fn a_look_stands_for_the_rest_of_the_interval_while_nothing_changed() {
        assert_eq!(stands(60, &inputs()), Some(Duration::from_secs(240)));
        assert_eq!(stands(300, &inputs()), None, "the interval is over");
        assert_eq!(stands(301, &inputs()), None);
    }

    #[test]
    fn only_a_tenant_whose_ready_status_was_written_for_its_generation_reads_ready() {
        let mut tenant = crate::test_support::tenant("t", serde_json::json!({"provider": "p"}));
        tenant.metadata.generation = Some(2);
        assert!(!ready_for_its_generation(&tenant), "no status");
        let mut status = crate::api::S3TenantStatus {
            phase: Some(TenantPhase::Ready),
            observed_generation: Some(2),
            ..Default::default()
        };
        conditions::set(
            &mut status.conditions,
            conditions::READY,
            true,
            "Provisioned",
            "",
            Some(2),
        );
        tenant.status = Some(status.clone());
        assert!(ready_for_its_generation(&tenant));
        let mut older = tenant.clone();
        older.metadata.generation = Some(3);
        assert!(
            !ready_for_its_generation(&older),
            "a spec change not reconciled yet"
        );
        let mut failed = tenant.clone();
        failed.status.as_mut().unwrap().phase = Some(TenantPhase::Failed);
        assert!(!ready_for_its_generation(&failed));
        let mut not_ready = tenant;
        let conditions = &mut not_ready.status.as_mut().unwrap().conditions;
        conditions::set(
            conditions,
            conditions::READY,
            false,
            "BackendError",
            "",
            Some(2),
        );
        assert!(!ready_for_its_generation(&not_ready));
    }

    #[test]
    fn without_a_look_yet_the_tenant_is_looked_at_now() {
        assert_eq!(look_stands(None, &inputs(), INTERVAL), None);
    }

    #[test]
    fn any_change_the_look_depended_on_looks_again() {
        let changed = [
            AccountInputs {
                generation: Some(2),
                ..inputs()
            },
            AccountInputs {
                account_id: Some("a-2".into()),
                ..inputs()
            },
            AccountInputs {
                account_id: None,
                ..inputs()
            },
        ];
        for now in &changed {
            assert_eq!(stands(1, now), None, "{now:?}");
        }
        let secret = |edit: fn(&mut SecretVersion)| {
            let mut now = inputs();
            edit(now.secrets[0].as_mut().unwrap());
            now
        };
        assert_eq!(
            stands(1, &secret(|s| s.resource_version = Some("11".into()))),
            None
        );
        assert_eq!(stands(1, &secret(|s| s.deleting = true)), None);
        assert_eq!(stands(1, &secret(|s| s.uid = Some("s-2".into()))), None);
        let mut gone = inputs();
        gone.secrets[0] = None;
        assert_eq!(stands(1, &gone), None, "a Secret gone");
        let mut made = inputs();
        made.secrets[1] = inputs().secrets[0].clone();
        assert_eq!(stands(1, &made), None, "a Secret made");
    }
}
