use super::*;
use crate::controllers::tenant::tests::fake::{Grid, Store};

const MARKER: &str = "keeper.dev/owner-uid=u1";

fn desired() -> AccountSettings {
    AccountSettings {
        name: "team-a".into(),
        quota_bytes: Some(1 << 30),
        allow_platform_services: false,
    }
}

fn store(grid: &Grid) -> Store<'_> {
    Store::new(grid)
}

/// Exactly one account; it has exactly one key, and that key is the published one.
fn assert_converged(grid: &Grid, store: &Store<'_>) {
    let grid_state = grid.state.lock().unwrap();
    let state = store.state.lock().unwrap();
    assert_eq!(grid_state.accounts.len(), 1, "{grid_state:?}");
    let (id, account) = grid_state.accounts.iter().next().unwrap();
    assert_eq!(state.account.as_deref(), Some(id.as_str()));
    assert_eq!(state.password.as_deref(), Some(account.password.as_str()));
    assert_eq!(account.keys.len(), 1, "{account:?}");
    let published = state.published.as_ref().unwrap();
    assert_eq!(
        account.keys.values().next().unwrap(),
        &published.access_key_id
    );
    assert_eq!(account.settings, desired());
}

#[tokio::test]
async fn a_fresh_tenant_gets_one_account_and_one_published_key() {
    let grid = Grid::default();
    let store = store(&grid);
    let id = ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    assert_converged(&grid, &store);
    let password = store.state.lock().unwrap().password.clone().unwrap();
    assert_eq!(password.len(), ROOT_PASSWORD_LENGTH);
    // A second run changes nothing.
    let before = grid.steps_taken();
    assert_eq!(ensure(&grid, &store, MARKER, &desired()).await.unwrap(), id);
    assert_eq!(grid.steps_taken(), before);
}

#[tokio::test]
async fn a_crash_between_any_two_steps_converges_to_one_account_and_one_key() {
    // Count the steps of an uninterrupted run, then crash at each of them in turn.
    let reference = Grid::default();
    ensure(&reference, &store(&reference), MARKER, &desired())
        .await
        .unwrap();
    let steps = reference.steps_taken();
    assert!(
        steps >= 4,
        "password, create, record, issue, publish: {steps}"
    );
    for crash in 1..=steps {
        let grid = Grid::default();
        let store = store(&grid);
        grid.crash_at(Some(crash));
        assert!(
            ensure(&grid, &store, MARKER, &desired()).await.is_err(),
            "step {crash} crashes"
        );
        grid.crash_at(None);
        ensure(&grid, &store, MARKER, &desired()).await.unwrap();
        assert_converged(&grid, &store);
    }
}

#[tokio::test]
async fn two_crashes_in_a_row_still_converge() {
    for first in 1..=6 {
        for second in 1..=6 {
            let grid = Grid::default();
            let store = store(&grid);
            grid.crash_at(Some(first));
            let _ = ensure(&grid, &store, MARKER, &desired()).await;
            grid.crash_at(Some(second));
            let _ = ensure(&grid, &store, MARKER, &desired()).await;
            grid.crash_at(None);
            ensure(&grid, &store, MARKER, &desired()).await.unwrap();
            assert_converged(&grid, &store);
        }
    }
}

#[tokio::test]
async fn a_lost_create_answer_is_found_again_by_the_marker_not_recreated() {
    let grid = Grid::default();
    let store = store(&grid);
    store.state.lock().unwrap().password = Some("p".repeat(32));
    grid.create_account(&desired(), MARKER, &"p".repeat(32))
        .await
        .unwrap();
    // Another tenant's account with the same name is not ours.
    grid.create_account(&desired(), "keeper.dev/owner-uid=other", "x")
        .await
        .unwrap();
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    let state = grid.state.lock().unwrap();
    assert_eq!(state.accounts.len(), 2);
    assert_eq!(
        store.recorded_account().as_deref(),
        Some("00000000000000000001")
    );
}

#[tokio::test]
async fn two_writers_creating_the_account_at_once_leave_one_recorded_account() {
    // Both found no account; B created one and recorded it while A was about to create its
    // own. A's record is refused (the tenant changed since A read it): A deletes its account
    // and goes on with B's.
    let grid = Grid::default();
    let a = store(&grid);
    a.state.lock().unwrap().password = Some("p".repeat(32));
    let b = a.beside();
    let desired = desired();
    let listed = grid.pauses.after("find_accounts");
    let (by_a, by_b) = tokio::join!(ensure(&grid, &a, MARKER, &desired), async {
        listed.reached().await;
        let by_b = ensure(&grid, &b, MARKER, &desired).await;
        listed.release();
        by_b
    });
    assert_eq!(by_a.unwrap(), by_b.unwrap());
    assert_converged(&grid, &a);
}

#[tokio::test]
async fn a_writer_behind_a_stale_read_records_nothing_new() {
    let grid = Grid::default();
    let a = store(&grid);
    let b = a.beside();
    let recorded = ensure(&grid, &a, MARKER, &desired()).await.unwrap();
    // B read the tenant before A recorded its account: it finds A's account by the marker,
    // and its record, refused, names A's.
    b.state.lock().unwrap().password = a.state.lock().unwrap().password.clone();
    assert_eq!(
        ensure(&grid, &b, MARKER, &desired()).await.unwrap(),
        recorded
    );
    assert_eq!(grid.state.lock().unwrap().accounts.len(), 1);
}

#[tokio::test]
async fn of_several_unrecorded_marked_accounts_one_is_recorded_and_the_others_deleted() {
    // Left by crashes between create and record (an older keeper, or two writers).
    let grid = Grid::default();
    let store = store(&grid);
    store.state.lock().unwrap().password = Some("p".repeat(32));
    for _ in 0..2 {
        grid.create_account(&desired(), MARKER, &"p".repeat(32))
            .await
            .unwrap();
    }
    let id = ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    assert_eq!(id, "00000000000000000001", "the lowest id");
    assert_converged(&grid, &store);
}

#[tokio::test]
async fn a_status_naming_another_tenants_account_is_refused_and_left_alone() {
    let grid = Grid::default();
    let store = store(&grid);
    let theirs = grid
        .create_account(&desired(), "keeper.dev/owner-uid=other", "theirs")
        .await
        .unwrap();
    // A status edit points this tenant at the other account (and its password is unknown).
    store.state.lock().unwrap().account = Some(theirs.clone());
    let err = ensure(&grid, &store, MARKER, &desired()).await.unwrap_err();
    assert!(!err.is_transient(), "{err:?}");
    assert!(err.to_string().contains(&theirs), "{err}");
    let err = locate_account(&grid, &store, MARKER).await.unwrap_err();
    assert!(err.to_string().contains("ownership marker"), "{err}");
    // Nothing was created, updated or reset: the other account is as it was.
    let state = grid.state.lock().unwrap();
    assert_eq!(state.accounts.len(), 1);
    assert_eq!(state.accounts[&theirs].marker, "keeper.dev/owner-uid=other");
    assert_eq!(state.accounts[&theirs].settings, desired());
}

#[tokio::test]
async fn a_failed_lookup_never_leads_to_a_second_account() {
    let grid = Grid::default();
    let store = store(&grid);
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    grid.state.lock().unwrap().fail_lookups_with = Some(500);
    let err = ensure(&grid, &store, MARKER, &desired()).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(grid.state.lock().unwrap().accounts.len(), 1);
}

#[tokio::test]
async fn spec_changes_are_applied_to_the_account() {
    let grid = Grid::default();
    let store = store(&grid);
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    let mut changed = desired();
    changed.quota_bytes = None;
    changed.allow_platform_services = true;
    ensure(&grid, &store, MARKER, &changed).await.unwrap();
    let state = grid.state.lock().unwrap();
    assert_eq!(state.accounts.values().next().unwrap().settings, changed);
}

#[tokio::test]
async fn a_lost_root_password_is_replaced_and_the_key_kept() {
    let grid = Grid::default();
    let store = store(&grid);
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    let published = store.state.lock().unwrap().published.clone();
    store.state.lock().unwrap().password = None;
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    assert_converged(&grid, &store);
    assert_eq!(store.state.lock().unwrap().published, published);
}

#[tokio::test]
async fn a_refused_root_password_is_set_again_through_the_grid() {
    let grid = Grid::default();
    let store = store(&grid);
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    for account in grid.state.lock().unwrap().accounts.values_mut() {
        account.password = "changed-by-someone".into();
    }
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    assert_converged(&grid, &store);
}

#[tokio::test]
async fn a_key_revoked_on_the_grid_is_replaced() {
    let grid = Grid::default();
    let store = store(&grid);
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    for account in grid.state.lock().unwrap().accounts.values_mut() {
        account.keys.clear();
    }
    let before = store.state.lock().unwrap().published.clone();
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    assert_converged(&grid, &store);
    assert_ne!(store.state.lock().unwrap().published, before);
}

#[tokio::test]
async fn an_account_deleted_outside_keeper_is_created_again() {
    let grid = Grid::default();
    let store = store(&grid);
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    grid.state.lock().unwrap().accounts.clear();
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    assert_converged(&grid, &store);
}

/// N5: the grid's identity is recorded with the account, and a 404 from another grid (a
/// changed endpoint, a DNS switch) creates nothing there until a person confirms that grid.
#[tokio::test]
async fn a_missing_account_is_created_again_only_on_its_own_grid_or_a_confirmed_one() {
    let grid = Grid::default();
    let store = store(&grid);
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    let identity = || store.state.lock().unwrap().identity.clone();
    assert_eq!(identity().as_deref(), Some("storagegrid:grid-a"));
    let before = grid.state.lock().unwrap().identity_lookups;
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    assert!(grid.state.lock().unwrap().identity_lookups <= before + 1);

    // keeper now reaches another, empty grid.
    {
        let mut state = grid.state.lock().unwrap();
        state.accounts.clear();
        state.identity = Some("storagegrid:grid-b".into());
    }
    let refused = ensure(&grid, &store, MARKER, &desired()).await.unwrap_err();
    assert!(identity::is_changed(&refused), "{refused:?}");
    assert!(refused.message.contains("storagegrid:grid-b"), "{refused}");
    assert!(
        grid.state.lock().unwrap().accounts.is_empty(),
        "nothing created"
    );
    assert_eq!(
        grid.state.lock().unwrap().searches,
        0,
        "nothing even listed"
    );
    assert_eq!(identity().as_deref(), Some("storagegrid:grid-a"));

    // A confirmation of a third grid does not count for this one.
    store.state.lock().unwrap().confirmed = Some("storagegrid:grid-c".into());
    assert!(ensure(&grid, &store, MARKER, &desired()).await.is_err());
    // Confirmed: created there, and that grid is recorded from then on.
    store.state.lock().unwrap().confirmed = Some("storagegrid:grid-b".into());
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    assert_converged(&grid, &store);
    assert_eq!(identity().as_deref(), Some("storagegrid:grid-b"));
}

/// N5, deletion: another grid's 404 for the recorded account is not "already deleted" (the
/// tenant's cleanup would release the finalizer and leave the original account untracked).
#[tokio::test]
async fn a_recorded_account_missing_on_another_grid_is_not_counted_as_gone() {
    let grid = Grid::default();
    let store = store(&grid);
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    {
        let mut state = grid.state.lock().unwrap();
        state.accounts.clear();
        state.identity = Some("storagegrid:grid-b".into());
    }
    let refused = locate_account(&grid, &store, MARKER).await.unwrap_err();
    assert!(identity::is_changed(&refused), "{refused:?}");
    assert!(refused.message.contains("keeps the finalizer"), "{refused}");
    // Confirmed by a person (the original grid is gone for good): it counts as gone.
    store.state.lock().unwrap().confirmed = Some("storagegrid:grid-b".into());
    assert_eq!(locate_account(&grid, &store, MARKER).await.unwrap(), None);
    // On the recorded grid a 404 is a deletion outside keeper, as before.
    store.state.lock().unwrap().confirmed = None;
    grid.state.lock().unwrap().identity = Some("storagegrid:grid-a".into());
    assert_eq!(locate_account(&grid, &store, MARKER).await.unwrap(), None);
}

/// An account an older keeper made has no recorded grid: the grid it is found on is recorded.
#[tokio::test]
async fn the_grid_of_an_account_found_without_one_is_recorded_on_first_sight() {
    let grid = Grid::default();
    let store = store(&grid);
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    store.state.lock().unwrap().identity = None;
    ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    assert_eq!(
        store.state.lock().unwrap().identity.as_deref(),
        Some("storagegrid:grid-a")
    );
}

#[tokio::test]
async fn keys_are_revoked_only_with_a_password() {
    let grid = Grid::default();
    let store = store(&grid);
    let id = ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    revoke_keys(&grid, &id, None).await.unwrap();
    assert_eq!(grid.state.lock().unwrap().accounts[&id].keys.len(), 1);
    let password = store.state.lock().unwrap().password.clone();
    revoke_keys(&grid, &id, password.as_deref()).await.unwrap();
    assert!(grid.state.lock().unwrap().accounts[&id].keys.is_empty());
}

#[tokio::test]
async fn buckets_are_listed_as_the_root_user_or_from_the_grid() {
    let grid = Grid::default();
    let store = store(&grid);
    let id = ensure(&grid, &store, MARKER, &desired()).await.unwrap();
    grid.state
        .lock()
        .unwrap()
        .accounts
        .get_mut(&id)
        .unwrap()
        .buckets = vec!["b".into()];
    assert_eq!(account_buckets(&grid, &id, None).await.unwrap(), ["b"]);
    // A refused root password is set again, then the listing works.
    let buckets = account_buckets(&grid, &id, Some("wrong-but-stored"))
        .await
        .unwrap();
    assert_eq!(buckets, ["b"]);
    grid.state.lock().unwrap().fail_lookups_with = Some(503);
    assert!(account_buckets(&grid, &id, None).await.is_err());
}

#[test]
fn passwords_are_long_random_and_different() {
    let a = generate_password();
    let b = generate_password();
    assert_eq!(a.len(), 32);
    assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
    assert_ne!(a, b);
}
