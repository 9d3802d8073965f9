//! The tenant API: access keys, containers and their drain, users and groups.

use super::*;

#[tokio::test]
async fn access_keys_for_the_root_user_are_created_listed_and_deleted() {
    let server = server().await;
    tenant_login(&server, "tt").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/org/users/current-user/s3-access-keys"))
        .and(body_json(json!({"expires": null})))
        .respond_with(created(json!({
            "id": "BxH2c1_q-0123456789abcDEF==", "accountId": ACCOUNT_ID, "displayName": "****XY7Z",
            "userURN": "urn:sgws:identity::40327589106748163542:root", "expires": null,
            "accessKey": "SGKEXAMPLE7XY7Z", "secretAccessKey": "aB3dEf+ExampleSecret"
        })))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v4/org/users/current-user/s3-access-keys"))
        .respond_with(ok(
            json!([{"id": "BxH2c1_q-0123456789abcDEF==", "accountId": ACCOUNT_ID,
                                  "displayName": "****XY7Z", "expires": null}]),
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(
            "/api/v4/org/users/current-user/s3-access-keys/SGKEXAMPLE7XY7Z",
        ))
        .respond_with(ok(
            json!({"id": "BxH2c1_q-0123456789abcDEF==", "displayName": "****XY7Z"}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path(
            "/api/v4/org/users/current-user/s3-access-keys/BxH2c1_q-0123456789abcDEF%3D%3D",
        ))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let key = client
        .create_access_key(&tenant(), KeyOwner::CurrentUser)
        .await
        .unwrap();
    assert_eq!(key.access_key.as_deref(), Some("SGKEXAMPLE7XY7Z"));
    assert_eq!(
        key.secret_access_key.as_ref().unwrap().0,
        "aB3dEf+ExampleSecret"
    );
    assert!(!format!("{key:?}").contains("ExampleSecret"));
    let found = client
        .get_access_key(&tenant(), KeyOwner::CurrentUser, "SGKEXAMPLE7XY7Z")
        .await
        .unwrap();
    assert_eq!(found.id, "BxH2c1_q-0123456789abcDEF==");
    let keys = client
        .list_access_keys(&tenant(), KeyOwner::CurrentUser)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1);
    assert!(keys[0].secret_access_key.is_none());
    client
        .delete_access_key(&tenant(), KeyOwner::CurrentUser, &keys[0].id)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_created_key_without_its_secret_is_an_invalid_response() {
    let server = server().await;
    tenant_login(&server, "tt").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/org/users/user-1/s3-access-keys"))
        .respond_with(created(json!({"id": "k1"})))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let err = client
        .create_access_key(&tenant(), KeyOwner::User("user-1"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidResponse { .. }), "{err:?}");
}

#[tokio::test]
async fn containers_are_created_with_object_lock_and_versioning_listed_and_deleted() {
    let server = server().await;
    tenant_login(&server, "tt").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/org/containers"))
        .and(body_json(json!({"name": "team-a-logs", "region": "us-east-1", "s3ObjectLock": {"enabled": true}})))
        .respond_with(created(json!({"name": "team-a-logs", "region": "us-east-1", "s3ObjectLock": {"enabled": true}})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v4/org/containers/team-a-logs/versioning"))
        .and(body_json(
            json!({"versioningEnabled": true, "versioningSuspended": false}),
        ))
        .respond_with(ok(
            json!({"versioningEnabled": true, "versioningSuspended": false}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v4/org/containers"))
        .and(query_param("include", "region,s3ObjectLock,deleteObjects"))
        .respond_with(ok(json!([{
            "name": "team-a-logs", "creationTime": "2025-01-10T08:00:00.000Z", "region": "us-east-1",
            "s3ObjectLock": {"enabled": true},
            "deleteObjectStatus": {"isDeletingObjects": true, "initialObjectCount": "1500", "initialObjectBytes": "73000000"}
        }])))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api/v4/org/containers/team-a-logs"))
        .respond_with(error(409, "The bucket is not empty."))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    client
        .create_container(
            &tenant(),
            &NewContainer {
                name: "team-a-logs".into(),
                region: Some("us-east-1".into()),
                versioning: true,
                object_lock: true,
            },
        )
        .await
        .unwrap();
    let containers = client.list_containers(&tenant()).await.unwrap();
    let drain = containers[0].delete_object_status.as_ref().unwrap();
    assert!(drain.is_deleting_objects);
    assert_eq!(drain.initial_object_count, Some(1500));
    assert_eq!(drain.initial_object_bytes, Some(73000000));
    let err = client
        .delete_container(&tenant(), "team-a-logs")
        .await
        .unwrap_err();
    assert!(err.is_conflict());
}

#[tokio::test]
async fn an_existing_bucket_name_is_a_conflict() {
    let server = server().await;
    tenant_login(&server, "tt").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/org/containers"))
        .respond_with(error(409, "name taken"))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let err = client
        .create_container(
            &tenant(),
            &NewContainer {
                name: "taken".into(),
                region: None,
                versioning: true,
                object_lock: false,
            },
        )
        .await
        .unwrap_err();
    assert!(err.is_conflict());
    // Versioning is not touched on a bucket that is not ours.
    let requests = server.received_requests().await.unwrap();
    assert!(
        !requests
            .iter()
            .any(|r| r.url.path().ends_with("/versioning"))
    );
}

#[tokio::test]
async fn drains_start_stop_and_report_their_state() {
    let server = server().await;
    tenant_login(&server, "tt").await;
    Mock::given(method("POST"))
        .and(path("/api/v4/org/containers/b1/delete-objects"))
        .and(body_json(json!({"deleteObjects": true})))
        .respond_with(ok(
            json!({"isDeletingObjects": true, "initialObjectCount": 7, "initialObjectBytes": "70"}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/v4/org/containers/b1/delete-objects"))
        .and(body_json(json!({"deleteObjects": false})))
        .respond_with(ok(json!({"isDeletingObjects": false})))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v4/org/usage"))
        .respond_with(ok(json!({"objectCount": "4", "dataBytes": "40",
                                "buckets": [{"name": "b1", "objectCount": 4, "dataBytes": 40}]})))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let state = client.set_drain(&tenant(), "b1", true).await.unwrap();
    assert!(state.is_deleting_objects);
    assert_eq!(state.initial_object_count, Some(7));
    assert_eq!(state.initial_object_bytes, Some(70));
    let usage = client.tenant_usage(&tenant()).await.unwrap();
    assert_eq!(usage.buckets[0].object_count, 4);
    assert!(
        !client
            .set_drain(&tenant(), "b1", false)
            .await
            .unwrap()
            .is_deleting_objects
    );
}

#[tokio::test]
async fn users_and_groups_with_an_s3_policy() {
    let server = server().await;
    tenant_login(&server, "tt").await;
    let policy = json!({"Statement": [{"Effect": "Allow", "Action": ["s3:*"],
        "Resource": ["arn:aws:s3:::team-a-logs", "arn:aws:s3:::team-a-logs/*"]}]});
    let group_json = json!({"id": "g-1", "uniqueName": "group/bucket-team-a-logs", "displayName": "bucket-team-a-logs",
        "policies": {"management": {"manageAllContainers": false}, "s3": policy.clone()}});
    Mock::given(method("POST"))
        .and(path("/api/v4/org/groups"))
        .and(body_partial_json(
            json!({"uniqueName": "group/bucket-team-a-logs", "policies": {"s3": policy.clone()}}),
        ))
        .respond_with(created(group_json.clone()))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v4/org/groups/group/bucket-team-a-logs"))
        .respond_with(ok(group_json.clone()))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/api/v4/org/groups/g-1"))
        .respond_with(ok(group_json.clone()))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api/v4/org/groups/g-1"))
        .respond_with(ResponseTemplate::new(204))
        .mount(&server)
        .await;
    let user_json = json!({"id": "u-1", "accountId": ACCOUNT_ID, "uniqueName": "user/app-a", "fullName": "App A",
        "memberOf": ["g-1"], "disable": false, "federated": false,
        "userURN": "urn:sgws:identity::40327589106748163542:user/app-a"});
    Mock::given(method("POST"))
        .and(path("/api/v4/org/users"))
        .and(body_json(json!({"uniqueName": "user/app-a", "fullName": "App A", "memberOf": ["g-1"], "disable": false})))
        .respond_with(created(user_json.clone()))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v4/org/users/user/missing"))
        .respond_with(error(404, "no such user"))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path("/api/v4/org/users/u-1"))
        .respond_with(ResponseTemplate::new(204))
        .mount(&server)
        .await;
    let (client, _) = client(&server);
    let new_group = NewGroup {
        unique_name: "group/bucket-team-a-logs".into(),
        display_name: "bucket-team-a-logs".into(),
        management_read_only: false,
        policies: GroupPolicies {
            management: ManagementPolicy::default(),
            s3: Some(policy.clone()),
        },
    };
    let group = client.create_group(&tenant(), &new_group).await.unwrap();
    assert_eq!(group.policies.unwrap().s3, Some(policy));
    let found = client
        .get_group_by_name(&tenant(), "bucket-team-a-logs")
        .await
        .unwrap();
    client
        .update_group(&tenant(), &found.id, &new_group)
        .await
        .unwrap();
    let user = client
        .create_user(
            &tenant(),
            &NewUser {
                unique_name: "user/app-a".into(),
                full_name: "App A".into(),
                member_of: vec!["g-1".into()],
                disable: false,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        user.user_urn.as_deref(),
        Some("urn:sgws:identity::40327589106748163542:user/app-a")
    );
    assert!(
        client
            .get_user_by_name(&tenant(), "missing")
            .await
            .unwrap_err()
            .is_not_found()
    );
    client.delete_user(&tenant(), &user.id).await.unwrap();
    client.delete_group(&tenant(), &group.id).await.unwrap();
}
