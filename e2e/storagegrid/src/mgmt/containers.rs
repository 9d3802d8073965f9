//! Tenant containers (buckets): create, list, settings, delete, object lock, and the emulated
//! server-side drain.

use super::*;

// ----- containers ------------------------------------------------------------------------------

pub(super) fn owned_bucket(ctx: &Ctx, caller: &Caller, name: &str) -> Result<Bucket, ApiError> {
    ctx.lock()
        .buckets
        .get(name)
        .filter(|b| b.account_id == caller.account_id)
        .cloned()
        .ok_or_else(|| {
            err(
                StatusCode::NOT_FOUND,
                "containers.not_found",
                format!("bucket {name} not found"),
            )
        })
}

pub(super) fn list_containers(ctx: &Ctx, rq: &Rq, caller: &Caller) -> ApiResult {
    let include: Vec<String> = rq
        .query
        .iter()
        .filter(|(k, _)| k == "include")
        .flat_map(|(_, v)| {
            v.split(',')
                .map(|s| s.trim().to_owned())
                .collect::<Vec<_>>()
        })
        .filter(|s| !s.is_empty())
        .collect();
    for i in &include {
        if !matches!(
            i.as_str(),
            "compliance"
                | "region"
                | "s3ObjectLock"
                | "deleteObjects"
                | "crossGridReplication"
                | "quotaObjectBytes"
        ) {
            return Err(unprocessable(format!("unknown include value {i}")));
        }
    }
    let has = |k: &str| include.iter().any(|i| i == k);
    let st = ctx.lock();
    let mut out = Vec::new();
    for b in st.account_buckets(&caller.account_id) {
        let mut v = json!({"name": b.name, "creationTime": rfc3339(b.creation_time)});
        if has("region") {
            v["region"] = json!(b.region);
        }
        if has("compliance") {
            v["compliance"] =
                json!({"autoDelete": false, "legalHold": false, "retentionPeriodMinutes": 0});
        }
        if has("s3ObjectLock") {
            v["s3ObjectLock"] = b.s3_object_lock.clone();
        }
        if has("deleteObjects") {
            v["deleteObjectStatus"] = b.delete_object_status();
        }
        if has("crossGridReplication") {
            v["crossGridReplication"] = json!({"rules": []});
        }
        if has("quotaObjectBytes") {
            v["quotaObjectBytes"] = json!(b.quota_object_bytes);
        }
        out.push(v);
    }
    ok(Value::Array(out))
}

/// DNS-compliant S3 bucket name: 3-63 characters of `a-z0-9.-`, starting and ending with a letter
/// or digit, no `..`, not an IPv4 address.
pub(crate) fn valid_bucket_name(name: &str) -> bool {
    let b = name.as_bytes();
    (3..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && !name.contains("..")
        && !name.contains(".-")
        && !name.contains("-.")
        && name.parse::<std::net::Ipv4Addr>().is_err()
}

/// Validates an `s3ObjectLock` object; `days`/`years` are kept as strings (as the server returns them).
fn parse_object_lock(v: Option<&Value>) -> Result<Value, ApiError> {
    Ok(match v {
        None | Some(Value::Null) => json!({"enabled": false}),
        Some(Value::Object(o)) => {
            let enabled = bool_field(o, "enabled", false)?;
            let mut v = json!({"enabled": enabled});
            if let Some(d) = o.get("defaultRetentionSetting").filter(|d| !d.is_null()) {
                if !enabled {
                    return Err(unprocessable(
                        "defaultRetentionSetting requires s3ObjectLock.enabled",
                    ));
                }
                let mode = d.get("mode").and_then(Value::as_str).unwrap_or("");
                if !matches!(mode, "compliance" | "governance") {
                    return Err(unprocessable(
                        "defaultRetentionSetting.mode must be compliance or governance",
                    ));
                }
                let days = d.get("days").and_then(lenient_u64);
                let years = d.get("years").and_then(lenient_u64);
                let mut r = json!({"mode": mode});
                match (days, years) {
                    (Some(n), None) if n >= 1 => r["days"] = json!(n.to_string()),
                    (None, Some(n)) if n >= 1 => r["years"] = json!(n.to_string()),
                    _ => {
                        return Err(unprocessable(
                            "defaultRetentionSetting needs exactly one of days or years",
                        ));
                    }
                }
                v["defaultRetentionSetting"] = r;
            }
            v
        }
        Some(_) => return Err(unprocessable("s3ObjectLock must be an object")),
    })
}

pub(super) async fn create_container(ctx: &Arc<Ctx>, rq: &mut Rq, caller: &Caller) -> ApiResult {
    let body = rq.json_object()?;
    let name = str_field(&body, "name")?
        .ok_or_else(|| unprocessable("name is required"))?
        .to_owned();
    if !valid_bucket_name(&name) {
        return Err(unprocessable(format!("invalid bucket name {name:?}")));
    }
    let region = str_field(&body, "region")?
        .unwrap_or("us-east-1")
        .to_owned();
    if !ctx.cfg.regions.contains(&region) {
        return Err(unprocessable(format!("unknown region {region}")));
    }
    let lock = parse_object_lock(body.get("s3ObjectLock"))?;
    if body.get("compliance").is_some_and(|c| !c.is_null()) && lock["enabled"] == json!(true) {
        return Err(unprocessable(
            "legacy compliance cannot be combined with s3ObjectLock",
        ));
    }
    let versioning = bool_field(&body, "enableVersioning", false)?;
    let object_lock = lock["enabled"] == json!(true);
    {
        let mut st = ctx.lock();
        let account = st
            .accounts
            .get(&caller.account_id)
            .ok_or_else(unauthorized)?;
        if !account.has_capability("s3") {
            return Err(forbidden(
                "the tenant account does not have the s3 capability",
            ));
        }
        if st.buckets.contains_key(&name) {
            return Err(err(
                StatusCode::CONFLICT,
                "containers.bucket_already_exists",
                format!("the bucket name {name} is already in use"),
            ));
        }
        // Reserve the name before talking to moto so a concurrent create conflicts.
        st.buckets.insert(
            name.clone(),
            Bucket {
                name: name.clone(),
                account_id: caller.account_id.clone(),
                region: region.clone(),
                creation_time: SystemTime::now(),
                s3_object_lock: lock.clone(),
                quota_object_bytes: None,
                drain: Drain::default(),
            },
        );
    }
    let mut result = ctx.backend.create_bucket(&name, &region, object_lock).await;
    if result.is_ok()
        && let Some(r) = lock.get("defaultRetentionSetting")
    {
        result = ctx.backend.put_default_retention(&name, r).await;
        if result.is_err() {
            let _ = ctx.backend.delete_bucket(&name).await;
        }
    }
    if result.is_ok() && versioning && !object_lock {
        result = ctx.backend.put_versioning(&name, true).await;
    }
    if let Err(e) = result {
        ctx.lock().buckets.remove(&name);
        return Err(match e.code.as_deref() {
            Some("BucketAlreadyExists" | "BucketAlreadyOwnedByYou") => err(
                StatusCode::CONFLICT,
                "containers.bucket_already_exists",
                format!("the bucket name {name} is already in use"),
            ),
            _ => internal(format!("cannot create bucket: {e}")),
        });
    }
    let mut data = json!({"name": name, "region": region, "s3ObjectLock": lock});
    if versioning {
        data["enableVersioning"] = json!(true);
    }
    created(data)
}

pub(super) async fn container(
    ctx: &Arc<Ctx>,
    rq: &mut Rq,
    p: &Perms,
    bucket: Bucket,
    sub: &[&str],
) -> ApiResult {
    let m = rq.method.clone();
    let view = p.view_all_containers || p.manage_all_containers;
    let name = bucket.name.clone();
    match sub {
        [] => match m {
            Method::DELETE => {
                rq.op = "deleteContainer";
                need(p.manage_all_containers, "delete buckets")?;
                let empty = ctx
                    .backend
                    .is_empty(&name)
                    .await
                    .map_err(|e| internal(format!("cannot check bucket: {e}")))?;
                if !empty {
                    return Err(bucket_not_empty(&name));
                }
                match ctx.backend.delete_bucket(&name).await {
                    Ok(()) => {}
                    Err(e) if e.code.as_deref() == Some("NoSuchBucket") => {}
                    Err(e) if e.code.as_deref() == Some("BucketNotEmpty") => {
                        return Err(bucket_not_empty(&name));
                    }
                    Err(e) => return Err(internal(format!("cannot delete bucket: {e}"))),
                }
                ctx.lock().buckets.remove(&name);
                no_content()
            }
            _ => Err(method_not_allowed()),
        },
        ["versioning"] => match m {
            Method::GET => {
                rq.op = "getContainerVersioning";
                need(view, "view buckets")?;
                let (enabled, suspended) = ctx
                    .backend
                    .get_versioning(&name)
                    .await
                    .map_err(|e| internal(format!("cannot read versioning: {e}")))?;
                ok(json!({"versioningEnabled": enabled, "versioningSuspended": suspended}))
            }
            Method::PUT => {
                rq.op = "updateContainerVersioning";
                need(p.manage_all_containers, "change buckets")?;
                let body = rq.json_object()?;
                let enabled = bool_field(&body, "versioningEnabled", false)?;
                let suspended = bool_field(&body, "versioningSuspended", false)?;
                if enabled && suspended {
                    return Err(unprocessable(
                        "versioningEnabled and versioningSuspended are mutually exclusive",
                    ));
                }
                let (cur_enabled, cur_suspended) = ctx
                    .backend
                    .get_versioning(&name)
                    .await
                    .map_err(|e| internal(format!("cannot read versioning: {e}")))?;
                if enabled || suspended {
                    if suspended && bucket.s3_object_lock["enabled"] == json!(true) {
                        return Err(unprocessable(
                            "versioning cannot be suspended on an S3 Object Lock bucket",
                        ));
                    }
                    ctx.backend
                        .put_versioning(&name, enabled)
                        .await
                        .map_err(|e| internal(format!("cannot change versioning: {e}")))?;
                } else if cur_enabled || cur_suspended {
                    return Err(unprocessable(
                        "versioning cannot be turned off once enabled; suspend it instead",
                    ));
                }
                ok(json!({"versioningEnabled": enabled, "versioningSuspended": suspended}))
            }
            _ => Err(method_not_allowed()),
        },
        ["object-lock"] => match m {
            Method::GET => {
                rq.op = "getContainerObjectLock";
                need(view, "view buckets")?;
                ok(bucket.s3_object_lock.clone())
            }
            Method::PUT => {
                rq.op = "updateContainerObjectLock";
                need(p.manage_all_containers, "change buckets")?;
                let lock = parse_object_lock(Some(&rq.json()?))?;
                if bucket.s3_object_lock["enabled"] != json!(true) || lock["enabled"] != json!(true)
                {
                    return Err(unprocessable(
                        "S3 Object Lock can only be enabled when the bucket is created",
                    ));
                }
                if let Some(r) = lock.get("defaultRetentionSetting") {
                    ctx.backend
                        .put_default_retention(&name, r)
                        .await
                        .map_err(|e| internal(format!("cannot set default retention: {e}")))?;
                }
                if let Some(b) = ctx.lock().buckets.get_mut(&name) {
                    b.s3_object_lock = lock.clone();
                }
                ok(lock)
            }
            _ => Err(method_not_allowed()),
        },
        ["quota-object-bytes"] => match m {
            Method::GET => {
                rq.op = "getContainerQuota";
                need(view, "view buckets")?;
                ok(json!({"quotaObjectBytes": bucket.quota_object_bytes}))
            }
            Method::PUT => {
                rq.op = "updateContainerQuota";
                need(p.manage_all_containers, "change buckets")?;
                let body = rq.json_object()?;
                let quota = match body.get("quotaObjectBytes") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(lenient_u64(v).filter(|q| *q >= 1).ok_or_else(|| {
                        unprocessable("quotaObjectBytes must be an integer >= 1 or null")
                    })?),
                };
                if let Some(b) = ctx.lock().buckets.get_mut(&name) {
                    b.quota_object_bytes = quota;
                }
                ok(json!({"quotaObjectBytes": quota}))
            }
            _ => Err(method_not_allowed()),
        },
        ["region"] => {
            rq.op = "getContainerRegion";
            need(view, "view buckets")?;
            if m != Method::GET {
                return Err(method_not_allowed());
            }
            ok(json!(bucket.region))
        }
        ["usage"] => {
            rq.op = "getContainerUsage";
            need(view, "view buckets")?;
            if m != Method::GET {
                return Err(method_not_allowed());
            }
            let u = ctx.backend.usage(&name).await.map_err(|e| {
                err(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "usage.unavailable",
                    format!("usage unavailable: {e}"),
                )
            })?;
            ok(json!({"objectCount": u.object_count, "dataBytes": u.data_bytes}))
        }
        ["delete-objects"] => match m {
            Method::GET => {
                rq.op = "getContainerDeleteObjects";
                need(view, "view buckets")?;
                ok(bucket.delete_object_status())
            }
            Method::POST => {
                rq.op = "setContainerDeleteObjects";
                need(p.manage_all_containers, "delete bucket objects")?;
                let body = rq.json_object()?;
                let flag = body
                    .get("deleteObjects")
                    .and_then(lenient_bool)
                    .ok_or_else(|| unprocessable("deleteObjects must be true or false"))?;
                set_drain(ctx, &name, flag).await
            }
            _ => Err(method_not_allowed()),
        },
        _ => Err(not_found("no such bucket endpoint")),
    }
}

fn bucket_not_empty(name: &str) -> ApiError {
    err(
        StatusCode::CONFLICT,
        "containers.bucket_not_empty",
        format!("the bucket {name} is not empty"),
    )
}

/// Starts (`true`) or stops (`false`) the server-side "delete objects in bucket" drain.
async fn set_drain(ctx: &Arc<Ctx>, name: &str, start: bool) -> ApiResult {
    if !start {
        let mut st = ctx.lock();
        let b = st
            .buckets
            .get_mut(name)
            .ok_or_else(|| not_found(format!("bucket {name} not found")))?;
        b.drain.active = false;
        return ok(json!({"isDeletingObjects": false}));
    }
    if ctx.lock().buckets.get(name).is_some_and(|b| b.drain.active) {
        return ok(json!({"isDeletingObjects": true}));
    }
    let usage = ctx
        .backend
        .usage(name)
        .await
        .map_err(|e| internal(format!("cannot count objects: {e}")))?;
    let epoch = {
        let mut st = ctx.lock();
        let b = st
            .buckets
            .get_mut(name)
            .ok_or_else(|| not_found(format!("bucket {name} not found")))?;
        if b.drain.active {
            return ok(json!({"isDeletingObjects": true}));
        }
        b.drain.active = true;
        b.drain.initial_count = usage.object_count;
        b.drain.initial_bytes = usage.data_bytes;
        b.drain.epoch += 1;
        b.drain.epoch
    };
    tokio::spawn(drain_loop(ctx.clone(), name.to_owned(), epoch));
    ok(json!({"isDeletingObjects": true}))
}

/// Deletes the bucket's object versions and delete markers at `drain_rate` objects per second
/// until stopped, restarted, or the bucket is deleted. An empty, still-draining bucket stays
/// draining (read-only), as on StorageGRID.
async fn drain_loop(ctx: Arc<Ctx>, name: String, epoch: u64) {
    let rate = ctx.cfg.drain_rate.max(1) as usize;
    let batch = rate.div_ceil(10).clamp(1, 1000);
    loop {
        if ctx.is_shut_down() {
            return;
        }
        let still = ctx
            .lock()
            .buckets
            .get(&name)
            .is_some_and(|b| b.drain.active && b.drain.epoch == epoch);
        if !still {
            return;
        }
        let started = Instant::now();
        match ctx.backend.delete_batch(&name, batch).await {
            Ok(0) => tokio::time::sleep(Duration::from_millis(500)).await,
            Ok(n) => {
                let budget = Duration::from_secs_f64(n as f64 / rate as f64);
                if let Some(left) = budget.checked_sub(started.elapsed()) {
                    tokio::time::sleep(left).await;
                }
            }
            Err(e) => {
                if e.code.as_deref() == Some("NoSuchBucket") {
                    return;
                }
                tracing::warn!(bucket = %name, error = %e, "drain batch failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
