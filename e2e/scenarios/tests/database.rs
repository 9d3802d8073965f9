//! CloudDatabase end to end (issue 6): Ready with a complete connection Secret and our tags;
//! deletion with each policy, the CR disappearing only once RDS reports the instance gone.

use std::time::Duration;

use keeper_e2e_scenarios::{Env, Keeper, condition_is, jitter, rds_client, wait_for, wait_until};

fn database(name: &str, policy: &str) -> String {
    format!(
        "apiVersion: keeper.dev/v1alpha1\nkind: CloudDatabase\nmetadata:\n  name: {name}\nspec:\n  engine: postgres\n  size: small\n  databaseName: app\n  deletionPolicy: {policy}\n"
    )
}

async fn describe(env: &Env, id: &str) -> Option<aws_sdk_rds::types::DbInstance> {
    let rds = rds_client(env).await;
    match rds
        .describe_db_instances()
        .db_instance_identifier(id)
        .send()
        .await
    {
        Ok(out) => out.db_instances().first().cloned(),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_db_instance_not_found_fault()) =>
        {
            None
        }
        Err(e) => panic!("describe {id}: {e:?}"),
    }
}

fn wait_ready(env: &Env, ns: &str, name: &str) -> serde_json::Value {
    let resource = format!("clouddatabase/{name}");
    wait_for(env, ns, &resource, "Ready", Duration::from_secs(90), |o| {
        condition_is(o, "Ready", "True")
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_becomes_ready_with_secret_and_tags_and_each_policy_deletes_as_promised() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-db").unwrap();
    let keeper = Keeper::start(&env).unwrap();

    for (name, policy) in [("snap", "Snapshot"), ("gone", "Delete"), ("kept", "Retain")] {
        env.apply(&ns.name, &database(name, policy)).unwrap();
    }
    for name in ["snap", "gone", "kept"] {
        let obj = wait_ready(&env, &ns.name, name);
        assert_eq!(obj["status"]["phase"], "Ready");
        let id = obj["status"]["instanceId"]
            .as_str()
            .expect("instanceId in status")
            .to_string();

        let secret = env
            .get_json(&ns.name, &format!("secret/{name}-connection"))
            .unwrap()
            .expect("connection Secret");
        for key in [
            "host", "port", "username", "password", "database", "engine", "uri",
        ] {
            assert!(
                secret["data"][key].is_string(),
                "connection Secret lacks {key}: {secret:#}"
            );
        }
        let instance = describe(&env, &id).await.expect("the instance exists");
        let tags: Vec<(String, String)> = instance
            .tag_list()
            .iter()
            .map(|t| {
                (
                    t.key().unwrap_or_default().to_string(),
                    t.value().unwrap_or_default().to_string(),
                )
            })
            .collect();
        let uid = obj["metadata"]["uid"].as_str().unwrap().to_string();
        assert!(
            tags.contains(&("keeper.dev/owner-uid".into(), uid)),
            "{tags:?}"
        );
        assert!(
            tags.contains(&("keeper.dev/namespace".into(), ns.name.clone())),
            "{tags:?}"
        );
        assert!(
            tags.contains(&("keeper.dev/name".into(), name.into())),
            "{tags:?}"
        );
    }

    let ids: Vec<(String, String)> = ["snap", "gone", "kept"]
        .iter()
        .map(|n| {
            let obj = env
                .get_json(&ns.name, &format!("clouddatabase/{n}"))
                .unwrap()
                .unwrap();
            (
                n.to_string(),
                obj["status"]["instanceId"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (name, _) in &ids {
        env.kubectl(&[
            "delete",
            "-n",
            &ns.name,
            &format!("clouddatabase/{name}"),
            "--wait=false",
        ])
        .unwrap();
    }
    for (name, id) in &ids {
        wait_until(Duration::from_secs(60), "the CR to disappear", || {
            Ok(env
                .get_json(&ns.name, &format!("clouddatabase/{name}"))?
                .is_none())
        })
        .unwrap();
        let instance = describe(&env, id).await;
        match name.as_str() {
            "kept" => {
                let instance = instance.expect("Retain leaves the instance");
                assert!(
                    !instance
                        .tag_list()
                        .iter()
                        .any(|t| t.key().is_some_and(|k| k.starts_with("keeper.dev/"))),
                    "Retain removes keeper's tags: {:?}",
                    instance.tag_list()
                );
                // The instance keeps running, so its connection details stay usable.
                let secret = keeper_e2e_scenarios::secret_data(&env, &ns.name, "kept-connection")
                    .expect("Retain keeps the connection Secret");
                assert!(!secret["password"].is_empty());
            }
            _ => assert!(
                instance.is_none(),
                "{name}: the CR went before the instance"
            ),
        }
    }

    let rds = rds_client(&env).await;
    let snapshots = rds.describe_db_snapshots().send().await.unwrap();
    // The final snapshot is named `<instanceId>-final-<UTC timestamp>` (the id keeper records in
    // status.finalSnapshotId before it calls DeleteDBInstance).
    let snap_id = &ids.iter().find(|(n, _)| n == "snap").unwrap().1;
    let finals: Vec<&str> = snapshots
        .db_snapshots()
        .iter()
        .filter(|s| s.db_instance_identifier() == Some(snap_id.as_str()))
        .filter_map(|s| s.db_snapshot_identifier())
        .collect();
    assert_eq!(
        finals.len(),
        1,
        "one final snapshot of {snap_id}: {finals:?}"
    );
    assert!(
        finals[0].starts_with(&format!("{snap_id}-final-")),
        "{finals:?}"
    );
    let gone_id = &ids.iter().find(|(n, _)| n == "gone").unwrap().1;
    assert!(
        !snapshots
            .db_snapshots()
            .iter()
            .any(|s| s.db_instance_identifier() == Some(gone_id.as_str())),
        "Delete took a snapshot"
    );
    // Leave nothing behind: the retained instance is ours to clean up in this test.
    let kept_id = &ids.iter().find(|(n, _)| n == "kept").unwrap().1;
    let _ = rds
        .delete_db_instance()
        .db_instance_identifier(kept_id)
        .skip_final_snapshot(true)
        .send()
        .await;
    drop(keeper);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retained_databases_deleted_connection_secret_comes_back_with_a_new_password() {
    let env = Env::from_env().unwrap();
    let ns = env.namespace("e2e-db-secret").unwrap();
    let keeper = Keeper::start(&env).unwrap();
    env.apply(&ns.name, &database("held", "Retain")).unwrap();
    let obj = wait_ready(&env, &ns.name, "held");
    let id = obj["status"]["instanceId"].as_str().unwrap().to_string();
    let before = keeper_e2e_scenarios::secret_data(&env, &ns.name, "held-connection").unwrap();

    // kubectl waits until it is gone: a Secret keeper kept Terminating would time it out.
    env.kubectl(&[
        "delete",
        "secret",
        "-n",
        &ns.name,
        "held-connection",
        "--timeout=60s",
    ])
    .unwrap();
    let mut after = None;
    wait_until(Duration::from_secs(30), "the Secret written again", || {
        after = keeper_e2e_scenarios::secret_data(&env, &ns.name, "held-connection").ok();
        Ok(after.is_some())
    })
    .unwrap();
    let after = after.unwrap();
    assert_ne!(after["password"], before["password"]);
    assert_eq!(after["host"], before["host"]);
    let reasons: Vec<String> = env
        .events_of(&ns.name, "CloudDatabase", "held")
        .unwrap()
        .iter()
        .filter_map(|e| e["reason"].as_str().map(String::from))
        .collect();
    for reason in ["SecretDeleted", "PasswordReset"] {
        assert!(reasons.iter().any(|r| r == reason), "{reason}: {reasons:?}");
    }
    wait_ready(&env, &ns.name, "held");

    env.kubectl(&[
        "delete",
        "-n",
        &ns.name,
        "clouddatabase/held",
        "--timeout=60s",
    ])
    .unwrap();
    // Retained: the instance is ours to remove in this test.
    let _ = rds_client(&env)
        .await
        .delete_db_instance()
        .db_instance_identifier(&id)
        .skip_final_snapshot(true)
        .send()
        .await;
    drop(keeper);
}

/// Instances carrying keeper's owner tag for `uid`.
async fn instances_owned_by(env: &Env, uid: &str) -> Vec<String> {
    let rds = rds_client(env).await;
    let out = rds.describe_db_instances().send().await.unwrap();
    out.db_instances()
        .iter()
        .filter(|i| {
            i.tag_list()
                .iter()
                .any(|t| t.key() == Some("keeper.dev/owner-uid") && t.value() == Some(uid))
        })
        .filter_map(|i| i.db_instance_identifier().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_sigkills_during_creation_and_deletion_leave_one_instance_with_the_secrets_password_then_nothing()
 {
    let env = Env::from_env().unwrap();
    if env.apiserver_url.is_none() {
        keeper_e2e_scenarios::skip(
            "reading back the password needs the local RDS server's request recorder",
        );
        return;
    }
    keeper_e2e_scenarios::moto_start_recording(&env).unwrap();
    let ns = env.namespace("e2e-dbkill").unwrap();
    let names = ["one", "two"];
    for name in names {
        env.apply(&ns.name, &database(name, "Delete")).unwrap();
    }
    for _ in 0..5 {
        let keeper = Keeper::start(&env).unwrap();
        std::thread::sleep(jitter(600));
        keeper.kill();
    }
    let keeper = Keeper::start(&env).unwrap();
    let mut uids = Vec::new();
    for name in names {
        let obj = wait_ready(&env, &ns.name, name);
        let uid = obj["metadata"]["uid"].as_str().unwrap().to_string();
        let id = obj["status"]["instanceId"].as_str().unwrap().to_string();
        assert_eq!(
            instances_owned_by(&env, &uid).await,
            vec![id.clone()],
            "exactly one instance for {name}"
        );

        // The last password keeper gave RDS for this instance is the one in the Secret.
        let calls = keeper_e2e_scenarios::moto_recorded_calls(&env).unwrap();
        let creates = calls
            .iter()
            .filter(|c| {
                c["Action"] == "CreateDBInstance" && c.get("DBInstanceIdentifier") == Some(&id)
            })
            .count();
        assert!(creates >= 1, "no CreateDBInstance recorded for {id}");
        let sent = keeper_e2e_scenarios::master_password_sent(&env, &id)
            .unwrap()
            .expect("a password was sent to RDS");
        let secret =
            keeper_e2e_scenarios::secret_data(&env, &ns.name, &format!("{name}-connection"))
                .unwrap();
        assert_eq!(
            secret["password"], sent,
            "the Secret's password is not the instance's"
        );
        uids.push(uid);
    }
    drop(keeper);

    for name in names {
        env.kubectl(&[
            "delete",
            "-n",
            &ns.name,
            &format!("clouddatabase/{name}"),
            "--wait=false",
        ])
        .unwrap();
    }
    for _ in 0..5 {
        let keeper = Keeper::start(&env).unwrap();
        std::thread::sleep(jitter(600));
        keeper.kill();
    }
    let _keeper = Keeper::start(&env).unwrap();
    for name in names {
        wait_until(Duration::from_secs(60), "the CR to go", || {
            Ok(env
                .get_json(&ns.name, &format!("clouddatabase/{name}"))?
                .is_none())
        })
        .unwrap();
    }
    for uid in &uids {
        assert!(
            instances_owned_by(&env, uid).await.is_empty(),
            "an instance was left behind"
        );
    }
}
