//! The proxy in front of a real moto: pass-through, AWS-shaped faults, connection faults and RDS
//! phases, seen through the AWS SDK clients keeper uses.

use aws_sdk_rds::error::ProvideErrorMetadata;
use keeper_e2e_awsproxy::{Config, Proxy};
use keeper_e2e_storagegrid::moto::MotoServer;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

struct Stack {
    moto: MotoServer,
    proxy: Proxy,
    http: reqwest::Client,
}

impl Stack {
    async fn start() -> Stack {
        let moto = MotoServer::start().await.expect("moto");
        let proxy = keeper_e2e_awsproxy::start(Config::new(moto.endpoint()))
            .await
            .expect("proxy");
        Stack {
            moto,
            proxy,
            http: reqwest::Client::new(),
        }
    }

    async fn put(&self, what: &str, body: Value) -> Value {
        let r = self
            .http
            .put(format!("{}/_awsproxy/{what}", self.proxy.url()))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = r.status();
        let v: Value = r.json().await.unwrap();
        assert!(status.is_success(), "{status}: {v}");
        v
    }

    async fn get(&self, what: &str) -> Value {
        let url = format!("{}/_awsproxy/{what}", self.proxy.url());
        let r = self.http.get(url).send().await.unwrap();
        r.json().await.unwrap()
    }

    async fn delete(&self, what: &str) {
        let url = format!("{}/_awsproxy/{what}", self.proxy.url());
        let r = self.http.delete(url).send().await.unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }

    async fn sdk(endpoint: &str) -> aws_config::SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "AKIDTEST", "secret", None, None, "test",
            ))
            // Every fault is seen as it comes, not hidden by the SDK's retries.
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .load()
            .await
    }

    async fn s3_at(endpoint: &str) -> aws_sdk_s3::Client {
        let conf = aws_sdk_s3::config::Builder::from(&Self::sdk(endpoint).await)
            .force_path_style(true)
            .build();
        aws_sdk_s3::Client::from_conf(conf)
    }

    async fn s3(&self) -> aws_sdk_s3::Client {
        Self::s3_at(self.proxy.url()).await
    }

    async fn iam(&self) -> aws_sdk_iam::Client {
        aws_sdk_iam::Client::new(&Self::sdk(self.proxy.url()).await)
    }

    async fn rds(&self) -> aws_sdk_rds::Client {
        aws_sdk_rds::Client::new(&Self::sdk(self.proxy.url()).await)
    }

    /// Whether moto itself (not through the proxy) has the bucket.
    async fn moto_has_bucket(&self, name: &str) -> bool {
        Self::s3_at(self.moto.endpoint())
            .await
            .head_bucket()
            .bucket(name)
            .send()
            .await
            .is_ok()
    }
}

#[tokio::test]
async fn s3_iam_and_rds_calls_pass_through_unchanged() {
    let s = Stack::start().await;
    let s3 = s.s3().await;
    s3.create_bucket().bucket("through").send().await.unwrap();
    s3.put_object()
        .bucket("through")
        .key("a/b.txt")
        .body(b"hello".to_vec().into())
        .send()
        .await
        .unwrap();
    let got = s3
        .get_object()
        .bucket("through")
        .key("a/b.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        b"hello"
    );
    assert!(s.moto_has_bucket("through").await);
    s.iam()
        .await
        .create_user()
        .user_name("u1")
        .send()
        .await
        .unwrap();
    let created = create_instance(&s, "plain").await.unwrap();
    assert_eq!(
        created.db_instance_status(),
        Some("available"),
        "no phases by default"
    );
}

async fn create_instance(
    s: &Stack,
    id: &str,
) -> Result<
    aws_sdk_rds::types::DbInstance,
    aws_sdk_rds::error::SdkError<aws_sdk_rds::operation::create_db_instance::CreateDBInstanceError>,
> {
    s.rds()
        .await
        .create_db_instance()
        .db_instance_identifier(id)
        .engine("postgres")
        .db_instance_class("db.t3.micro")
        .allocated_storage(20)
        .master_username("admin1")
        .master_user_password("password-1234")
        .send()
        .await
        .map(|o| o.db_instance.expect("instance"))
}

#[tokio::test]
async fn s3_slow_down_and_query_api_throttling_read_as_aws_errors() {
    let s = Stack::start().await;
    let s3 = s.s3().await;
    s3.create_bucket().bucket("faulty").send().await.unwrap();
    s.put(
        "faults",
        json!({"rules": [
            {"service": "s3", "actions": ["PutObject"], "share": 1.0, "faults": ["throttle"]},
            {"service": "s3", "actions": ["ListBuckets"], "share": 1.0, "faults": ["503"]},
            {"service": "iam", "actions": ["CreateUser"], "share": 1.0, "faults": ["throttle"]},
            {"service": "rds", "actions": ["DescribeDBInstances"], "share": 1.0, "faults": ["500"]},
        ]}),
    )
    .await;
    let e = s3
        .put_object()
        .bucket("faulty")
        .key("k")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("SlowDown"), "{e:?}");
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 503);
    let e = s3.list_buckets().send().await.unwrap_err();
    assert_eq!(e.code(), Some("ServiceUnavailable"), "{e:?}");
    // Other actions pass.
    s3.head_bucket().bucket("faulty").send().await.unwrap();

    let e = s
        .iam()
        .await
        .create_user()
        .user_name("u")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("Throttling"), "{e:?}");
    assert_eq!(e.message(), Some("Rate exceeded"));
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 400);

    let e = s
        .rds()
        .await
        .describe_db_instances()
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("InternalFailure"), "{e:?}");
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 500);

    let faults = reqwest::get(format!("{}/_awsproxy/faults", s.proxy.url()))
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(faults["counters"][0]["faulted"]["throttle"], 1, "{faults}");
    // Cleared: everything passes again.
    s.http
        .delete(format!("{}/_awsproxy/faults", s.proxy.url()))
        .send()
        .await
        .unwrap();
    s.iam()
        .await
        .create_user()
        .user_name("u")
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_dropped_call_never_reaches_moto_and_a_lost_answer_did() {
    let s = Stack::start().await;
    let s3 = s.s3().await;
    s.put(
        "faults",
        json!({"rules": [{"service": "s3", "actions": ["CreateBucket"], "share": 1.0, "faults": ["drop"]}]}),
    )
    .await;
    let e = s3
        .create_bucket()
        .bucket("dropped")
        .send()
        .await
        .unwrap_err();
    assert!(e.raw_response().is_none(), "no answer at all: {e:?}");
    assert!(!s.moto_has_bucket("dropped").await, "moto never saw it");

    s.put(
        "faults",
        json!({"rules": [{"service": "s3", "actions": ["CreateBucket"], "share": 1.0, "faults": ["lost"]}]}),
    )
    .await;
    let e = s3.create_bucket().bucket("lost").send().await.unwrap_err();
    assert!(e.raw_response().is_none(), "no answer at all: {e:?}");
    assert!(
        s.moto_has_bucket("lost").await,
        "moto created it all the same"
    );

    // An RDS create whose answer is lost still starts its phases.
    s.put("rds", json!({"creating": 60000})).await;
    s.put(
        "faults",
        json!({"rules": [{"service": "rds", "actions": ["CreateDBInstance"], "share": 1.0, "faults": ["lost"]}]}),
    )
    .await;
    assert!(create_instance(&s, "lost-db").await.is_err());
    assert_eq!(status_of(&s, "lost-db").await.as_deref(), Some("creating"));
}

/// The status the proxy shows for an instance; `None` for `DBInstanceNotFound`.
async fn status_of(s: &Stack, id: &str) -> Option<String> {
    Some(instance(s, id).await?.db_instance_status()?.to_string())
}

async fn instance(s: &Stack, id: &str) -> Option<aws_sdk_rds::types::DbInstance> {
    match s
        .rds()
        .await
        .describe_db_instances()
        .db_instance_identifier(id)
        .send()
        .await
    {
        Ok(o) => o.db_instances().first().cloned(),
        Err(e) if e.code() == Some("DBInstanceNotFound") => None,
        Err(e) => panic!("{e:?}"),
    }
}

async fn wait_status(s: &Stack, id: &str, want: Option<&str>) -> Duration {
    let t0 = Instant::now();
    loop {
        let now = status_of(s, id).await;
        if now.as_deref() == want {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{id}: still {now:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn grow(
    rds: &aws_sdk_rds::Client,
    id: &str,
) -> Result<
    aws_sdk_rds::operation::modify_db_instance::ModifyDbInstanceOutput,
    aws_sdk_rds::error::SdkError<aws_sdk_rds::operation::modify_db_instance::ModifyDBInstanceError>,
> {
    rds.modify_db_instance()
        .db_instance_identifier(id)
        .allocated_storage(30)
        .apply_immediately(true)
        .send()
        .await
}

async fn delete_with_snapshot(
    rds: &aws_sdk_rds::Client,
    id: &str,
) -> Result<
    aws_sdk_rds::operation::delete_db_instance::DeleteDbInstanceOutput,
    aws_sdk_rds::error::SdkError<aws_sdk_rds::operation::delete_db_instance::DeleteDBInstanceError>,
> {
    rds.delete_db_instance()
        .db_instance_identifier(id)
        .final_db_snapshot_identifier(format!("{id}-final"))
        .send()
        .await
}

#[tokio::test]
async fn rds_instances_take_time_to_create_modify_and_delete() {
    let s = Stack::start().await;
    let phases = json!({"creating": 1500, "backingUp": 1000, "modifying": 1000, "deleting": 1500});
    assert_eq!(s.put("rds", phases.clone()).await, phases);
    let rds = s.rds().await;

    let created = create_instance(&s, "slow").await.unwrap();
    assert_eq!(created.db_instance_status(), Some("creating"));
    let i = instance(&s, "slow").await.unwrap();
    assert_eq!(i.db_instance_status(), Some("creating"));
    assert!(i.endpoint().is_none(), "no endpoint while creating");
    let e = grow(&rds, "slow").await.unwrap_err();
    assert_eq!(e.code(), Some("InvalidDBInstanceState"), "{e:?}");
    let e = delete_with_snapshot(&rds, "slow").await.unwrap_err();
    assert_eq!(e.code(), Some("InvalidDBInstanceState"), "{e:?}");
    assert!(e.message().unwrap().contains("currently creating"), "{e:?}");

    wait_status(&s, "slow", Some("backing-up")).await;
    assert!(instance(&s, "slow").await.unwrap().endpoint().is_some());
    let waited = wait_status(&s, "slow", Some("available")).await;
    assert!(
        waited >= Duration::from_millis(500),
        "backing-up lasted {waited:?}"
    );

    let modified = grow(&rds, "slow").await.unwrap();
    assert_eq!(
        modified.db_instance.unwrap().db_instance_status(),
        Some("modifying")
    );
    assert_eq!(status_of(&s, "slow").await.as_deref(), Some("modifying"));
    wait_status(&s, "slow", Some("available")).await;

    let deleted = delete_with_snapshot(&rds, "slow").await.unwrap();
    assert_eq!(
        deleted.db_instance.unwrap().db_instance_status(),
        Some("deleting")
    );
    // moto forgot it; RDS still lists it while deleting.
    assert_eq!(status_of(&s, "slow").await.as_deref(), Some("deleting"));
    let all = rds.describe_db_instances().send().await.unwrap();
    let listed: Vec<(Option<&str>, Option<&str>)> = all
        .db_instances()
        .iter()
        .map(|i| (i.db_instance_identifier(), i.db_instance_status()))
        .collect();
    assert_eq!(listed, vec![(Some("slow"), Some("deleting"))]);
    let e = rds
        .delete_db_instance()
        .db_instance_identifier("slow")
        .skip_final_snapshot(true)
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("InvalidDBInstanceState"), "{e:?}");
    let e = create_instance(&s, "slow").await.unwrap_err();
    assert_eq!(e.code(), Some("DBInstanceAlreadyExists"), "{e:?}");

    wait_status(&s, "slow", None).await;
    assert!(
        rds.describe_db_instances()
            .send()
            .await
            .unwrap()
            .db_instances()
            .is_empty()
    );
    let snapshots = rds.describe_db_snapshots().send().await.unwrap();
    assert_eq!(
        snapshots.db_snapshots()[0].db_snapshot_identifier(),
        Some("slow-final")
    );
}

#[tokio::test]
async fn calls_are_counted_by_service_and_action_until_reset() {
    let s = Stack::start().await;
    let calls = |s: &Stack| {
        let http = s.http.clone();
        let url = format!("{}/_awsproxy/calls", s.proxy.url());
        async move {
            http.get(url)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let s3 = s.s3().await;
    s3.create_bucket().bucket("counted").send().await.unwrap();
    for key in ["a", "b"] {
        s3.put_object()
            .bucket("counted")
            .key(key)
            .body(b"x".to_vec().into())
            .send()
            .await
            .unwrap();
    }
    s.iam()
        .await
        .create_user()
        .user_name("counted")
        .send()
        .await
        .unwrap();
    // A faulted call counts too: the client asked for it.
    s.put(
        "faults",
        json!({"rules": [{"service": "s3", "actions": ["HeadBucket"], "share": 1.0, "faults": ["500"]}]}),
    )
    .await;
    assert!(s3.head_bucket().bucket("counted").send().await.is_err());
    let got = calls(&s).await;
    assert_eq!(got["calls"]["s3"]["CreateBucket"], 1, "{got}");
    assert_eq!(got["calls"]["s3"]["PutObject"], 2, "{got}");
    assert_eq!(got["calls"]["iam"]["CreateUser"], 1, "{got}");
    assert!(
        got["calls"]["s3"]["HeadBucket"].as_u64().unwrap() >= 1,
        "{got}"
    );
    assert!(got["calls"].get("moto").is_none(), "{got}");
    s.http
        .delete(format!("{}/_awsproxy/calls", s.proxy.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(calls(&s).await["total"], 0);
}

#[tokio::test]
async fn named_iam_errors_reach_the_sdk_as_aws_sends_them_and_moto_never_acts() {
    let s = Stack::start().await;
    let iam = s.iam().await;
    iam.create_user().user_name("kept").send().await.unwrap();
    s.put(
        "faults",
        json!({"rules": [
            {"service": "iam", "actions": ["CreateUser"], "share": 1.0, "faults": [
                {"code": "LimitExceeded", "status": 409, "message": "Cannot exceed quota for UsersPerAccount: 5000"}]},
            {"service": "iam", "actions": ["DeleteUser"], "share": 1.0, "faults": [
                {"code": "DeleteConflict", "status": 409, "message": "Cannot delete entity, must detach all policies first."}]},
            {"service": "s3", "actions": ["CreateBucket"], "share": 1.0, "faults": [
                {"code": "TooManyBuckets", "status": 400}]},
        ]}),
    )
    .await;

    let e = iam
        .create_user()
        .user_name("one-too-many")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 409);
    let service = e.into_service_error();
    assert!(service.is_limit_exceeded_exception(), "{service:?}");
    assert_eq!(
        service.message(),
        Some("Cannot exceed quota for UsersPerAccount: 5000")
    );
    let e = iam
        .delete_user()
        .user_name("kept")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.raw_response().unwrap().status().as_u16(), 409);
    assert!(
        e.into_service_error().is_delete_conflict_exception(),
        "DeleteConflict"
    );
    let e = s
        .s3()
        .await
        .create_bucket()
        .bucket("refused")
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("TooManyBuckets"), "{e:?}");
    assert_eq!(e.message(), Some("TooManyBuckets"), "the code stands in");

    // Refused before moto: nothing was created, nothing deleted.
    s.delete("faults").await;
    let users: Vec<String> = iam
        .list_users()
        .send()
        .await
        .unwrap()
        .users()
        .iter()
        .map(|u| u.user_name().to_string())
        .collect();
    assert_eq!(users, ["kept"]);
    assert!(!s.moto_has_bucket("refused").await);
}

#[tokio::test]
async fn the_call_log_shows_when_each_call_came_and_what_it_got() {
    let s = Stack::start().await;
    s.put(
        "faults",
        json!({"rules": [{"service": "iam", "actions": ["CreateUser"], "share": 1.0,
                          "faults": [{"code": "LimitExceeded", "status": 409}]}]}),
    )
    .await;
    let iam = s.iam().await;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(iam.create_user().user_name("a").send().await.is_err());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(iam.create_user().user_name("a").send().await.is_err());
    iam.list_users().send().await.unwrap();
    let got = s.get("calls/log").await["log"].as_array().unwrap().clone();
    let entries: Vec<(&str, &str, &Value)> = got
        .iter()
        .map(|c| {
            (
                c["service"].as_str().unwrap(),
                c["action"].as_str().unwrap(),
                &c["fault"],
            )
        })
        .collect();
    let limit = Value::from("LimitExceeded");
    assert_eq!(
        entries,
        [
            ("iam", "CreateUser", &limit),
            ("iam", "CreateUser", &limit),
            ("iam", "ListUsers", &Value::Null)
        ]
    );
    let at: Vec<u64> = got.iter().map(|c| c["atMs"].as_u64().unwrap()).collect();
    assert!(at[0] >= before, "{got:?}");
    assert!(
        at[1] - at[0] >= 300,
        "the wait shows between the attempts: {at:?}"
    );
    assert!(at[2] >= at[1]);
    // Reset with the counts.
    s.delete("calls").await;
    assert_eq!(s.get("calls/log").await["log"], json!([]));
}
