//! Debug endpoints (not part of StorageGRID; for tests): the request log, the state dump and
//! fault injection.

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
        (Method::GET, "/debug/state") => plain(StatusCode::OK, ctx.lock().dump()),
        (Method::GET, "/debug/faults") => {
            plain(StatusCode::OK, json!({"faults": ctx.lock().faults}))
        }
        (Method::POST, "/debug/faults") => {
            let parsed: Result<Vec<Fault>, _> = match serde_json::from_slice::<Value>(&body) {
                Ok(v @ Value::Array(_)) => serde_json::from_value(v),
                Ok(Value::Object(mut o)) if o.contains_key("faults") => {
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
                    }) {
                        return plain(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            json!({"error": format!("a fault needs a valid status and/or delay_ms: {bad:?}")}),
                        );
                    }
                    let mut st = ctx.lock();
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
