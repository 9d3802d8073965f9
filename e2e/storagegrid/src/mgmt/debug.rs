//! Debug endpoints (not part of StorageGRID; for tests): the request log, the state dump and
//! fault injection. A fault rule hits the next `count` matching requests, or, with a `share`,
//! each matching request with that probability (drawn from a generator that
//! `{"seed": N, "faults": [...]}` reseeds), so faults can land at random through a long run.

use super::*;

// ---------------------------------------------------------------------------------------------
// Debug endpoints (not part of StorageGRID; for tests)
// ---------------------------------------------------------------------------------------------

pub(super) async fn debug(ctx: Arc<Ctx>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let body = match Limited::new(req.into_body(), 1024 * 1024).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return plain(
                StatusCode::BAD_REQUEST,
                json!({"error": "cannot read body"}),
            );
        }
    };
    match (method, path.as_str()) {
        (Method::GET, "/debug/requests") => {
            let st = ctx.lock();
            plain(StatusCode::OK, json!({"requests": st.requests}))
        }
        (Method::DELETE, "/debug/requests") => {
            ctx.lock().requests.clear();
            no_body()
        }
        (Method::GET, "/debug/state") => {
            let mut state = ctx.lock().dump();
            state["gridId"] = json!(ctx.cfg.grid_id);
            plain(StatusCode::OK, state)
        }
        (Method::GET, "/debug/faults") => {
            plain(StatusCode::OK, json!({"faults": ctx.lock().faults}))
        }
        (Method::POST, "/debug/faults") => {
            let mut seed = None;
            let parsed: Result<Vec<Fault>, _> = match serde_json::from_slice::<Value>(&body) {
                Ok(v @ Value::Array(_)) => serde_json::from_value(v),
                Ok(Value::Object(mut o)) if o.contains_key("faults") => {
                    seed = o.get("seed").and_then(Value::as_u64);
                    serde_json::from_value(o.remove("faults").unwrap_or_default())
                }
                Ok(v) => serde_json::from_value::<Fault>(v).map(|f| vec![f]),
                Err(e) => Err(e),
            };
            match parsed {
                Ok(faults) => {
                    if let Some(bad) = faults.iter().find(|f| {
                        f.status.is_some_and(|s| StatusCode::from_u16(s).is_err())
                            || (f.status.is_none() && f.delay_ms.is_none())
                            || f.share.is_some_and(|p| !(0.0..=1.0).contains(&p))
                    }) {
                        return plain(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            json!({"error": format!("a fault needs a valid status and/or delay_ms, and a share between 0 and 1: {bad:?}")}),
                        );
                    }
                    let mut st = ctx.lock();
                    if let Some(seed) = seed {
                        st.seed_faults(seed);
                    }
                    st.faults.extend(faults);
                    plain(StatusCode::CREATED, json!({"faults": st.faults}))
                }
                Err(e) => plain(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    json!({"error": e.to_string()}),
                ),
            }
        }
        (Method::DELETE, "/debug/faults") => {
            ctx.lock().faults.clear();
            no_body()
        }
        _ => plain(
            StatusCode::NOT_FOUND,
            json!({"error": "no such debug endpoint"}),
        ),
    }
}

fn plain(status: StatusCode, v: Value) -> Response<Body> {
    json_response(status, &v)
}

fn no_body() -> Response<Body> {
    let mut r = Response::new(crate::util::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    r
}
