use super::*;
use crate::api::DatabaseSize;
use std::time::Duration;

const SAMPLE: &str = include_str!("../../config/keeper.yaml");

#[test]
fn the_sample_configuration_parses() {
    let config = OperatorConfig::parse(SAMPLE).unwrap();
    assert!(matches!(
        config.providers.get("default"),
        Some(Provider::StorageGrid(_))
    ));
    assert!(matches!(
        config.providers.get("s3"),
        Some(Provider::S3Compatible(_))
    ));
    assert_eq!(
        config.providers["s3"].request_rate(),
        Some(RequestRate {
            per_second: 50.0,
            burst: NonZeroU32::new(50).unwrap()
        })
    );
}

#[test]
fn an_empty_file_gives_the_defaults() {
    let config = OperatorConfig::parse("").unwrap();
    assert!(config.providers.is_empty());
    assert_eq!(
        config.rds.sizes[&DatabaseSize::Small].instance_class,
        "db.t3.micro"
    );
    assert_eq!(config.rds.sizes[&DatabaseSize::Medium].storage_gib, 50);
    assert_eq!(
        config.rds.sizes[&DatabaseSize::Large].instance_class,
        "db.m6i.large"
    );
}

#[test]
fn sizes_override_one_by_one() {
    let config = OperatorConfig::parse(
        "rds:\n  sizes:\n    large:\n      instanceClass: db.r6g.xlarge\n      storageGiB: 500\n",
    )
    .unwrap();
    assert_eq!(
        config.rds.sizes[&DatabaseSize::Large].instance_class,
        "db.r6g.xlarge"
    );
    assert_eq!(
        config.rds.sizes[&DatabaseSize::Small].instance_class,
        "db.t3.micro"
    );
}

#[test]
fn an_unknown_field_is_named() {
    let err = OperatorConfig::parse(
        "providers:\n  default:\n    storageGrid:\n      adminEndpont: https://grid\n",
    )
    .unwrap_err();
    assert!(err.contains("adminEndpont"), "{err}");
    assert!(err.contains("providers.default"), "{err}");
}

#[test]
fn an_unknown_top_level_field_is_named() {
    let err = OperatorConfig::parse("rdss: {}\n").unwrap_err();
    assert!(err.contains("unknown field `rdss`"), "{err}");
}

#[test]
fn an_unknown_provider_kind_is_named() {
    let err = OperatorConfig::parse("providers:\n  x:\n    minio: {}\n").unwrap_err();
    assert!(err.contains("minio"), "{err}");
    let err = OperatorConfig::parse("providers:\n  x: {}\n").unwrap_err();
    assert!(
        err.contains("providers.x") && err.contains("exactly one"),
        "{err}"
    );
}

#[test]
fn a_bad_url_is_named() {
    let err = OperatorConfig::parse(
        "providers:\n  s3:\n    s3Compatible:\n      endpoint: not a url\n      credentialsSecret: {name: x}\n",
    )
    .unwrap_err();
    assert!(err.contains("providers.s3.s3Compatible.endpoint"), "{err}");
    assert!(err.contains("invalid URL"), "{err}");
}

#[test]
fn a_bad_duration_is_named() {
    let err = OperatorConfig::parse(
        "providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {name: x}\n      drain:\n        stuckThreshold: 3 hours\n",
    )
    .unwrap_err();
    assert!(err.contains("drain.stuckThreshold"), "{err}");
    assert!(err.contains("invalid duration"), "{err}");
}

#[test]
fn a_missing_required_field_is_named() {
    let err =
        OperatorConfig::parse("providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n")
            .unwrap_err();
    assert!(err.contains("credentialsSecret"), "{err}");
}

#[test]
fn allowed_namespaces_parse_and_an_empty_or_bad_one_is_named() {
    let config = OperatorConfig::parse(
        "providers:\n  s3:\n    s3Compatible:\n      endpoint: https://s3\n      credentialsSecret: {name: x}\n      allowedNamespaces:\n        names: [team-a]\n        selector: {matchLabels: {keeper.dev/s3: allowed}}\n",
    )
    .unwrap();
    let allowed = config.providers["s3"].allowed_namespaces().unwrap();
    assert_eq!(allowed.names, vec!["team-a".to_string()]);
    assert!(config.uses_namespace_selector());
    assert!(
        !OperatorConfig::parse(SAMPLE)
            .unwrap()
            .uses_namespace_selector()
    );
    let err = OperatorConfig::parse(
        "providers:\n  s3:\n    s3Compatible:\n      endpoint: https://s3\n      credentialsSecret: {name: x}\n      allowedNamespaces: {}\n",
    )
    .unwrap_err();
    assert!(
        err.contains("providers.s3.s3Compatible.allowedNamespaces"),
        "{err}"
    );
    let err = OperatorConfig::parse(
        "providers:\n  g:\n    storageGrid:\n      adminEndpoint: https://grid\n      adminCredentialsSecret: {name: x}\n      s3Endpoint: https://s3\n      allowedNamespaces:\n        selector: {matchExpressions: [{key: a, operator: Near}]}\n",
    )
    .unwrap_err();
    assert!(
        err.contains("providers.g.storageGrid.allowedNamespaces: selector"),
        "{err}"
    );
}

#[test]
fn adoption_is_off_unless_namespaces_are_named_and_only_s3_compatible_stores_have_it() {
    const STORE: &str = "providers:\n  s3:\n    s3Compatible:\n      endpoint: https://s3\n      credentialsSecret: {name: x}\n";
    let config = OperatorConfig::parse(STORE).unwrap();
    assert_eq!(
        config.providers["s3"].adoption(),
        AdoptionScope::Namespaces(None)
    );
    let config = OperatorConfig::parse(&format!(
        "{STORE}      adoption:\n        allowedNamespaces: {{selector: {{matchLabels: {{adopt: yes}}}}}}\n"
    ))
    .unwrap();
    assert!(matches!(
        config.providers["s3"].adoption(),
        AdoptionScope::Namespaces(Some(allowed)) if allowed.selector.is_some()
    ));
    assert!(config.uses_namespace_selector(), "labels are read for it");
    let err = OperatorConfig::parse(&format!(
        "{STORE}      adoption:\n        allowedNamespaces: {{}}\n"
    ))
    .unwrap_err();
    assert!(
        err.contains("providers.s3.s3Compatible.adoption.allowedNamespaces"),
        "{err}"
    );
    let grid = OperatorConfig::parse(SAMPLE).unwrap();
    assert_eq!(
        grid.providers["default"].adoption(),
        AdoptionScope::TenantAccount
    );
    let err = OperatorConfig::parse(
        "providers:\n  g:\n    storageGrid:\n      adminEndpoint: https://grid\n      adminCredentialsSecret: {name: x}\n      s3Endpoint: https://s3\n      adoption: {allowedNamespaces: {names: [a]}}\n",
    )
    .unwrap_err();
    assert!(err.contains("adoption"), "{err}");
}

#[test]
fn runtime_settings_default_parse_and_are_bounded() {
    let config = OperatorConfig::parse("").unwrap();
    assert_eq!(config.runtime.concurrency, None);
    assert_eq!(
        config.runtime.backend_timeouts.request,
        Duration::from_secs(60)
    );
    assert_eq!(
        config.runtime.backend_timeouts.connect,
        Duration::from_secs(10)
    );
    assert_eq!(config.runtime.concurrency_of(ControllerKind::Bucket), 16);
    assert_eq!(config.runtime.concurrency_of(ControllerKind::Tenant), 8);
    assert_eq!(config.runtime.concurrency_of(ControllerKind::Database), 8);
    assert_eq!(config.runtime.drain_concurrency(), 4);
    let config = OperatorConfig::parse("runtime: {drainConcurrency: 2}\n").unwrap();
    assert_eq!(config.runtime.drain_concurrency(), 2);
    // One controller set: the others keep their defaults.
    let config =
        OperatorConfig::parse("runtime: {controllers: {tenant: {concurrency: 2}}}\n").unwrap();
    assert_eq!(config.runtime.concurrency_of(ControllerKind::Tenant), 2);
    assert_eq!(config.runtime.concurrency_of(ControllerKind::Bucket), 16);
    let config = OperatorConfig::parse(
        "runtime:\n  concurrency: 16\n  controllers: {bucket: {concurrency: 32}}\n  backendTimeouts: {connect: 3s, request: 2m}\n",
    )
    .unwrap();
    assert_eq!(config.runtime.concurrency, Some(16));
    assert_eq!(config.runtime.concurrency_of(ControllerKind::Bucket), 32);
    assert_eq!(config.runtime.concurrency_of(ControllerKind::Tenant), 16);
    assert_eq!(config.runtime.concurrency_of(ControllerKind::Database), 16);
    assert_eq!(
        config.runtime.backend_timeouts,
        BackendTimeouts {
            connect: Duration::from_secs(3),
            request: Duration::from_secs(120)
        }
    );
    for (yaml, field) in [
        ("runtime: {concurrency: 0}\n", "runtime.concurrency"),
        ("runtime: {concurrency: 500}\n", "runtime.concurrency"),
        (
            "runtime: {drainConcurrency: 0}\n",
            "runtime.drainConcurrency: must be between 1 and 64, got 0",
        ),
        (
            "runtime: {controllers: {bucket: {concurrency: 0}}}\n",
            "runtime.controllers.bucket.concurrency: must be between 1 and 64, got 0",
        ),
        (
            "runtime: {controllers: {buckets: {concurrency: 8}}}\n",
            "runtime.controllers.buckets: unknown field `buckets`, expected one of `tenant`, `bucket`, `database`",
        ),
        (
            "runtime: {backendTimeouts: {request: 0s}}\n",
            "runtime.backendTimeouts.request",
        ),
        (
            "runtime: {backendTimeouts: {connect: 5m}}\n",
            "runtime.backendTimeouts.connect",
        ),
        (
            "runtime: {backendTimeouts: {request: soon}}\n",
            "runtime.backendTimeouts.request",
        ),
    ] {
        let err = OperatorConfig::parse(yaml).unwrap_err();
        assert!(err.contains(field), "{yaml}: {err}");
    }
}

#[test]
fn too_small_drain_intervals_are_refused_at_start() {
    for field in [
        "initialPollInterval",
        "longRunningPollInterval",
        "stuckThreshold",
        "roundDuration",
        "firstPollInterval",
    ] {
        let err = OperatorConfig::parse(&format!(
            "providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {{name: x}}\n      drain:\n        {field}: 0s\n"
        ))
        .unwrap_err();
        assert!(
            err.contains(&format!("providers.s3.drain.{field}: must be at least 1s")),
            "{err}"
        );
    }
    assert!(
        OperatorConfig::parse(
            "providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {name: x}\n      drain: {initialPollInterval: 1s}\n"
        )
        .is_ok()
    );
}

#[test]
fn client_side_drain_pace_is_configured_within_bounds() {
    let parse = |drain: &str| {
        OperatorConfig::parse(&format!(
            "providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {{name: x}}\n      drain: {drain}\n"
        ))
    };
    let config = parse(
        "{deletesInFlight: 8, roundDuration: 1m, maxDeletesPerSecond: 5000, firstPollInterval: 5s}",
    )
    .unwrap();
    let drain = config.providers["s3"].drain();
    assert_eq!(drain.deletes_in_flight, Some(8));
    assert_eq!(drain.round_duration, Some(Duration::from_secs(60)));
    assert_eq!(drain.max_deletes_per_second, Some(5000));
    assert_eq!(drain.first_poll_interval, Some(Duration::from_secs(5)));
    for (drain, field) in [
        (
            "{deletesInFlight: 0}",
            "drain.deletesInFlight: must be between 1 and 64",
        ),
        (
            "{deletesInFlight: 65}",
            "drain.deletesInFlight: must be between 1 and 64",
        ),
        (
            "{maxDeletesPerSecond: 0}",
            "drain.maxDeletesPerSecond: must be at least 1",
        ),
    ] {
        let err = parse(drain).unwrap_err();
        assert!(err.contains(field), "{drain}: {err}");
    }
}

#[test]
fn request_rates_are_optional_and_their_burst_defaults_to_one_seconds_worth() {
    let grid = "providers:\n  g:\n    storageGrid:\n      adminEndpoint: https://grid\n      adminCredentialsSecret: {name: x}\n      s3Endpoint: https://s3\n";
    let s3 = "providers:\n  s3:\n    s3Compatible:\n      endpoint: https://s3\n      credentialsSecret: {name: x}\n";
    let rate = |per_second: f64, burst: u32| {
        Some(RequestRate {
            per_second,
            burst: NonZeroU32::new(burst).unwrap(),
        })
    };
    // Both providers in one file.
    let both = |grid: &str, s3: &str| format!("{grid}{}", s3.trim_start_matches("providers:\n"));
    let config = OperatorConfig::parse(&both(grid, s3)).unwrap();
    assert_eq!(config.providers["g"].request_rate(), None);
    assert_eq!(config.providers["s3"].request_rate(), None);
    assert_eq!(config.rds.request_rate(), None);
    let config = OperatorConfig::parse(&format!(
        "{}rds: {{requestsPerSecond: 0.5}}\n",
        both(
            &format!("{grid}      requestsPerSecond: 25\n"),
            &format!("{s3}      requestsPerSecond: 2.5\n      requestBurst: 10\n")
        )
    ))
    .unwrap();
    assert_eq!(config.providers["g"].request_rate(), rate(25.0, 25));
    assert_eq!(config.providers["s3"].request_rate(), rate(2.5, 10));
    assert_eq!(config.rds.request_rate(), rate(0.5, 1));
    for (yaml, message) in [
        (
            format!("{s3}      requestsPerSecond: 0\n"),
            "providers.s3.s3Compatible.requestsPerSecond: must be between 0.01 and 100000 requests per second, got 0",
        ),
        (
            format!("{s3}      requestsPerSecond: -5\n"),
            "providers.s3.s3Compatible.requestsPerSecond: must be between 0.01 and 100000 requests per second, got -5",
        ),
        (
            format!("{grid}      requestsPerSecond: .nan\n"),
            "providers.g.storageGrid.requestsPerSecond: must be between",
        ),
        (
            format!("{grid}      requestsPerSecond: 1e6\n"),
            "providers.g.storageGrid.requestsPerSecond: must be between",
        ),
        (
            format!("{s3}      requestsPerSecond: fast\n"),
            "providers.s3.s3Compatible.requestsPerSecond: invalid type",
        ),
        (
            "rds: {requestsPerSecond: 0}\n".to_string(),
            "rds.requestsPerSecond: must be between",
        ),
        (
            format!("{s3}      requestsPerSecond: 5\n      requestBurst: 0\n"),
            "providers.s3.s3Compatible.requestBurst: invalid value: integer `0`",
        ),
        (
            format!("{grid}      requestBurst: 5\n"),
            "providers.g.storageGrid.requestBurst: needs requestsPerSecond",
        ),
        (
            "rds: {requestBurst: 5}\n".to_string(),
            "rds.requestBurst: needs requestsPerSecond",
        ),
        (
            format!("{s3}      requestsPerSecnd: 5\n"),
            "unknown field `requestsPerSecnd`",
        ),
    ] {
        let err = OperatorConfig::parse(&yaml).unwrap_err();
        assert!(err.contains(message), "{yaml}: {err}");
    }
}

#[test]
fn iam_and_shared_credentials_choose_how_buckets_get_keys() {
    let base = "providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {name: x}\n";
    let keys = |extra: &str| {
        let config = OperatorConfig::parse(&format!("{base}{extra}")).unwrap();
        let Some(Provider::S3Compatible(p)) = config.providers.get("s3") else {
            panic!("an S3-compatible provider");
        };
        match p.bucket_keys() {
            BucketKeys::PerBucketUser(iam) => {
                format!(
                    "iam {:?} {}",
                    iam.endpoint.as_ref().map(|e| e.to_string()),
                    iam.region
                )
            }
            other => format!("{other:?}"),
        }
    };
    assert_eq!(keys(""), "Unconfigured");
    assert_eq!(keys("      sharedCredentials: true\n"), "Shared");
    assert_eq!(keys("      iam: {}\n"), "iam None us-east-1");
    assert_eq!(
        keys("      iam: {endpoint: http://iam:9000, region: eu-west-1}\n"),
        "iam Some(\"http://iam:9000\") eu-west-1"
    );
    let err = OperatorConfig::parse(&format!(
        "{base}      iam: {{}}\n      sharedCredentials: true\n"
    ))
    .unwrap_err();
    assert!(err.contains("providers.s3.s3Compatible"), "{err}");
    assert!(err.contains("exclude each other"), "{err}");
}

#[test]
fn semantic_errors_are_named() {
    let err = OperatorConfig::parse(
        "rds:\n  sizes:\n    small:\n      instanceClass: db.t3.micro\n      storageGiB: 5\n",
    )
    .unwrap_err();
    assert!(err.contains("rds.sizes.small.storageGiB"), "{err}");
    let err = OperatorConfig::parse(
        "providers:\n  Bad_Name:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {name: x}\n",
    )
    .unwrap_err();
    assert!(err.contains("providers.Bad_Name"), "{err}");
}

#[test]
fn watch_namespaces_are_optional_and_a_bad_list_is_named() {
    assert_eq!(OperatorConfig::parse("").unwrap().watch_namespaces, None);
    let config = OperatorConfig::parse("watchNamespaces: [team-a, b2]\n").unwrap();
    assert_eq!(
        config.watch_namespaces.unwrap().names(),
        ["team-a".to_string(), "b2".to_string()]
    );
    for (text, expected) in [
        (
            "watchNamespaces: []\n",
            "watchNamespaces: empty: list the namespaces",
        ),
        (
            "watchNamespaces: [a, b, a]\n",
            "watchNamespaces: [2]: \"a\" is listed twice",
        ),
        (
            "watchNamespaces: [a, Team_B]\n",
            "watchNamespaces: [1]: \"Team_B\" is not a namespace name",
        ),
        (
            "watchNamespaces: [\"\"]\n",
            "[0]: \"\" is not a namespace name",
        ),
        (
            "watchNamespaces: [-a]\n",
            "[0]: \"-a\" is not a namespace name",
        ),
        (
            "watchNamespaces: [a-]\n",
            "[0]: \"a-\" is not a namespace name",
        ),
        (
            "watchNamespaces: [a.b]\n",
            "[0]: \"a.b\" is not a namespace name",
        ),
        ("watchNamespaces: team-a\n", "watchNamespaces: invalid type"),
    ] {
        let err = OperatorConfig::parse(text).unwrap_err();
        assert!(err.contains(expected), "{text}: {err}");
    }
    let long = "a".repeat(64);
    let err = OperatorConfig::parse(&format!("watchNamespaces: [{long}]\n")).unwrap_err();
    assert!(err.contains("is not a namespace name"), "{err}");
    assert!(OperatorConfig::parse(&format!("watchNamespaces: [{}]\n", &long[1..])).is_ok());
}

#[test]
fn usage_refresh_is_off_and_buckets_are_checked_hourly_unless_configured() {
    let parse = |extra: &str| {
        OperatorConfig::parse(&format!(
            "providers:\n  s3:\n    s3Compatible:\n      endpoint: http://s3\n      credentialsSecret: {{name: x}}\n{extra}"
        ))
    };
    let config = parse("").unwrap();
    let s3 = &config.providers["s3"];
    assert_eq!(s3.usage_refresh(), None);
    assert_eq!(s3.bucket_check_interval(), Duration::from_secs(3600));
    let config =
        parse("      usageRefresh: {interval: 1h}\n      bucketCheckInterval: 20s\n").unwrap();
    let s3 = &config.providers["s3"];
    assert_eq!(s3.usage_refresh(), Some(Duration::from_secs(3600)));
    assert_eq!(s3.bucket_check_interval(), Duration::from_secs(20));
    let err = parse("      usageRefresh: {interval: 0s}\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("providers.s3.s3Compatible.usageRefresh.interval: must be at least 1s"),
        "{err}"
    );
    let err = parse("      usageRefresh: {}\n").unwrap_err().to_string();
    assert!(err.contains("interval"), "{err}");
}
