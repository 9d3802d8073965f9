//! RDS instances that take time. moto creates, modifies and deletes an instance at once; RDS
//! takes minutes, and keeper's polling and verified deletion exist for that. The proxy keeps,
//! per instance identifier, when it saw the instance created, modified and deleted, and presents
//! moto's answers (`CreateDBInstance`, `ModifyDBInstance`, `DeleteDBInstance`,
//! `DescribeDBInstances`) as RDS would show them:
//!
//! - `creating` (without an `Endpoint`, as RDS has none yet) for `creating`, then `backing-up`
//!   for `backing_up`, then moto's own status (`available`);
//! - `modifying` for `modifying` after a modification;
//! - `deleting` for `deleting` after a deletion: the instance is still listed (by identifier and
//!   in the full list) with the last state moto gave, although moto forgot it; then
//!   `DBInstanceNotFound` (moto's).
//!
//! Calls RDS refuses in those states are refused likewise, with `InvalidDBInstanceState` (and
//! `DBInstanceAlreadyExists` for a create while the old instance is still deleting): a
//! modification while the instance is not available, a deletion of an instance being deleted,
//! and a deletion with a final snapshot while it is creating. Filters and paging of
//! `DescribeDBInstances` are not looked at.

use crate::classify::Call;
use crate::faults::{query_error, xml};
use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long each phase lasts (zero: the phase is skipped).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Phases {
    #[serde(default, with = "millis")]
    pub creating: Duration,
    #[serde(default, with = "millis")]
    pub backing_up: Duration,
    #[serde(default, with = "millis")]
    pub modifying: Duration,
    #[serde(default, with = "millis")]
    pub deleting: Duration,
}

/// Phase lengths as milliseconds in JSON (`{"creating": 2000, ...}`).
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[derive(Debug, Default)]
struct Instance {
    created: Option<Instant>,
    modified: Option<Instant>,
    /// When moto deleted it, and its last `<DBInstance>` element.
    deleted: Option<(Instant, String)>,
}

/// What the proxy shows for an instance at a moment.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shown {
    /// moto's status.
    AsIs,
    Status(&'static str),
    /// Deleted and no longer listed.
    Gone,
}

impl Instance {
    fn shown(&self, p: &Phases, now: Instant) -> Shown {
        if let Some((at, _)) = &self.deleted {
            return if now.duration_since(*at) < p.deleting {
                Shown::Status("deleting")
            } else {
                Shown::Gone
            };
        }
        if let Some(at) = self.created {
            let age = now.duration_since(at);
            if age < p.creating {
                return Shown::Status("creating");
            }
            if age < p.creating + p.backing_up {
                return Shown::Status("backing-up");
            }
        }
        match self.modified {
            Some(at) if now.duration_since(at) < p.modifying => Shown::Status("modifying"),
            _ => Shown::AsIs,
        }
    }
}

struct Inner {
    phases: Phases,
    instances: HashMap<String, Instance>,
}

/// The RDS phase bookkeeping of one proxy.
pub struct Rds {
    inner: Mutex<Inner>,
}

impl Rds {
    pub fn new(phases: Phases) -> Rds {
        Rds {
            inner: Mutex::new(Inner {
                phases,
                instances: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn phases(&self) -> Phases {
        self.lock().phases
    }

    pub fn set_phases(&self, phases: Phases) {
        self.lock().phases = phases;
    }

    /// A call RDS would refuse in the instance's present state: the refusal, without asking moto.
    pub fn refuse(&self, call: &Call) -> Option<Response<Full<Bytes>>> {
        let id = call.param("DBInstanceIdentifier")?;
        let mut inner = self.lock();
        let phases = inner.phases;
        let shown = inner
            .instances
            .get(id)
            .map_or(Shown::AsIs, |i| i.shown(&phases, Instant::now()));
        if shown == Shown::Gone {
            inner.instances.remove(id);
            return None;
        }
        let (code, message) = match (call.action.as_str(), shown) {
            ("CreateDBInstance", Shown::Status("deleting")) => (
                "DBInstanceAlreadyExists",
                "DB instance already exists".to_string(),
            ),
            ("ModifyDBInstance", Shown::Status(status)) if status != "modifying" => (
                "InvalidDBInstanceState",
                format!("Database instance is not in available state (it is {status})."),
            ),
            ("DeleteDBInstance", Shown::Status("deleting")) => (
                "InvalidDBInstanceState",
                format!("Instance {id} is already being deleted."),
            ),
            ("DeleteDBInstance", Shown::Status("creating"))
                if call.param("SkipFinalSnapshot") != Some("true") =>
            {
                (
                    "InvalidDBInstanceState",
                    format!(
                        "Instance {id} is currently creating - a final snapshot cannot be taken."
                    ),
                )
            }
            _ => return None,
        };
        Some(xml(400, query_error("rds", true, code, &message)))
    }

    /// moto's answer to a call, as RDS would give it; records creations, modifications and
    /// deletions moto carried out.
    pub fn present(&self, call: &Call, status: u16, body: Bytes) -> (u16, Bytes) {
        let id = call.param("DBInstanceIdentifier").map(str::to_string);
        let now = Instant::now();
        let mut inner = self.lock();
        let phases = inner.phases;
        let ok = status == 200;
        match (call.action.as_str(), &id) {
            ("CreateDBInstance", Some(id)) if ok => {
                inner.instances.insert(
                    id.clone(),
                    Instance {
                        created: Some(now),
                        ..Instance::default()
                    },
                );
            }
            ("ModifyDBInstance", Some(id)) if ok => {
                inner.instances.entry(id.clone()).or_default().modified = Some(now);
            }
            ("DeleteDBInstance", Some(id)) if ok => {
                let text = String::from_utf8_lossy(&body);
                let last = blocks(&text).next().map(str::to_string).unwrap_or_default();
                inner.instances.entry(id.clone()).or_default().deleted = Some((now, last));
            }
            // Two deletions at once both passed `refuse` before either was recorded, and moto,
            // which deletes at once, found nothing for the second. RDS would be deleting the
            // instance still and refuse the second, as `refuse` does later ones.
            ("DeleteDBInstance", Some(id))
                if status == 404
                    && inner.instances.get(id).map(|i| i.shown(&phases, now))
                        == Some(Shown::Status("deleting")) =>
            {
                let refused = query_error(
                    "rds",
                    true,
                    "InvalidDBInstanceState",
                    &format!("Instance {id} is already being deleted."),
                );
                return (400, Bytes::from(refused));
            }
            ("DescribeDBInstances", Some(id)) if status == 404 => {
                let block = inner.instances.get(id).and_then(|i| {
                    match (i.shown(&phases, now), &i.deleted) {
                        (Shown::Status(s), Some((_, block))) => Some(with_status(block, s)),
                        _ => None,
                    }
                });
                return match block {
                    Some(block) => (200, Bytes::from(describe_response(&block))),
                    None => (status, body),
                };
            }
            ("DescribeDBInstances", None) if ok => {
                let mut text = String::from_utf8_lossy(&body).into_owned();
                let listed: Vec<String> = blocks(&text)
                    .filter_map(|b| element(b, "DBInstanceIdentifier"))
                    .map(str::to_string)
                    .collect();
                let deleting: String = inner
                    .instances
                    .iter()
                    .filter(|(id, _)| !listed.contains(id))
                    .filter_map(|(_, i)| match (i.shown(&phases, now), &i.deleted) {
                        (Shown::Status(s), Some((_, block))) => Some(with_status(block, s)),
                        _ => None,
                    })
                    .collect();
                if !deleting.is_empty() {
                    text = if text.contains("<DBInstances/>") {
                        text.replace(
                            "<DBInstances/>",
                            &format!("<DBInstances>{deleting}</DBInstances>"),
                        )
                    } else {
                        text.replace("</DBInstances>", &format!("{deleting}</DBInstances>"))
                    };
                }
                return (status, rewrite(&inner, &phases, now, &text));
            }
            _ => {}
        }
        if !ok
            || !matches!(
                call.action.as_str(),
                "CreateDBInstance"
                    | "ModifyDBInstance"
                    | "DeleteDBInstance"
                    | "DescribeDBInstances"
            )
        {
            return (status, body);
        }
        let text = String::from_utf8_lossy(&body);
        (status, rewrite(&inner, &phases, now, &text))
    }
}

/// Every `<DBInstance>` of an answer with the status the proxy shows for it.
fn rewrite(inner: &Inner, phases: &Phases, now: Instant, text: &str) -> Bytes {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let Some(len) = rest[start..].find(CLOSE) else {
            break;
        };
        let end = start + len + CLOSE.len();
        out.push_str(&rest[..start]);
        let block = &rest[start..end];
        let shown = element(block, "DBInstanceIdentifier")
            .and_then(|id| inner.instances.get(id))
            .map_or(Shown::AsIs, |i| i.shown(phases, now));
        match shown {
            Shown::Status("creating") => {
                out.push_str(&without_endpoint(&with_status(block, "creating")))
            }
            Shown::Status(s) => out.push_str(&with_status(block, s)),
            Shown::AsIs | Shown::Gone => out.push_str(block),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    Bytes::from(out)
}

const OPEN: &str = "<DBInstance>";
const CLOSE: &str = "</DBInstance>";

/// The `<DBInstance>...</DBInstance>` elements of an answer.
fn blocks(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let start = rest.find(OPEN)?;
        let end = start + rest[start..].find(CLOSE)? + CLOSE.len();
        let block = &rest[start..end];
        rest = &rest[end..];
        Some(block)
    })
}

/// The text of the first `<name>` element.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&format!("</{name}>"))?;
    Some(&xml[start..start + len])
}

fn replace_element(xml: &str, name: &str, with: &str) -> String {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    match (xml.find(&open), xml.find(&close)) {
        (Some(s), Some(e)) if s < e => format!("{}{with}{}", &xml[..s], &xml[e + close.len()..]),
        _ => xml.to_string(),
    }
}

fn with_status(block: &str, status: &str) -> String {
    replace_element(
        block,
        "DBInstanceStatus",
        &format!("<DBInstanceStatus>{status}</DBInstanceStatus>"),
    )
}

fn without_endpoint(block: &str) -> String {
    replace_element(block, "Endpoint", "")
}

fn describe_response(block: &str) -> String {
    format!(
        "<DescribeDBInstancesResponse xmlns=\"http://rds.amazonaws.com/doc/2014-10-31/\"><DescribeDBInstancesResult><DBInstances>{block}</DBInstances></DescribeDBInstancesResult><ResponseMetadata><RequestId>{}</RequestId></ResponseMetadata></DescribeDBInstancesResponse>",
        crate::faults::request_id()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const PHASES: Phases = Phases {
        creating: Duration::from_secs(10),
        backing_up: Duration::from_secs(5),
        modifying: Duration::from_secs(3),
        deleting: Duration::from_secs(7),
    };

    #[test]
    fn an_instance_goes_through_its_phases_in_order() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut i = Instance {
            created: Some(t0),
            ..Instance::default()
        };
        assert_eq!(i.shown(&PHASES, at(0)), Shown::Status("creating"));
        assert_eq!(i.shown(&PHASES, at(9)), Shown::Status("creating"));
        assert_eq!(i.shown(&PHASES, at(10)), Shown::Status("backing-up"));
        assert_eq!(i.shown(&PHASES, at(15)), Shown::AsIs);
        i.modified = Some(at(20));
        assert_eq!(i.shown(&PHASES, at(22)), Shown::Status("modifying"));
        assert_eq!(i.shown(&PHASES, at(23)), Shown::AsIs);
        i.deleted = Some((at(30), String::new()));
        assert_eq!(i.shown(&PHASES, at(36)), Shown::Status("deleting"));
        assert_eq!(i.shown(&PHASES, at(37)), Shown::Gone);
        assert_eq!(
            i.shown(&Phases::default(), at(30)),
            Shown::Gone,
            "no phases: moto's view"
        );
    }

    fn call(action: &str, id: &str) -> Call {
        Call {
            service: "rds".into(),
            action: action.into(),
            params: vec![("DBInstanceIdentifier".into(), id.into())],
        }
    }

    #[test]
    fn a_second_deletion_that_moto_found_nothing_for_is_refused_as_rds_refuses_it() {
        let rds = Rds::new(PHASES);
        let deleted = "<DeleteDBInstanceResponse><DeleteDBInstanceResult><DBInstance><DBInstanceIdentifier>a</DBInstanceIdentifier></DBInstance></DeleteDBInstanceResult></DeleteDBInstanceResponse>";
        let (status, _) = rds.present(&call("DeleteDBInstance", "a"), 200, Bytes::from(deleted));
        assert_eq!(status, 200);
        // The second of two deletions sent at once reached moto after the first.
        let (status, body) = rds.present(
            &call("DeleteDBInstance", "a"),
            404,
            Bytes::from(query_error("rds", true, "DBInstanceNotFound", "gone")),
        );
        assert_eq!(status, 400);
        assert!(
            String::from_utf8_lossy(&body).contains("InvalidDBInstanceState"),
            "{body:?}"
        );
        // An instance the proxy never saw deleted is not found, as moto says.
        let (status, _) = rds.present(
            &call("DeleteDBInstance", "b"),
            404,
            Bytes::from(query_error("rds", true, "DBInstanceNotFound", "gone")),
        );
        assert_eq!(status, 404);
    }

    #[test]
    fn elements_are_rewritten_in_place() {
        let block = "<DBInstance><DBInstanceIdentifier>a</DBInstanceIdentifier><DBInstanceStatus>available</DBInstanceStatus><Endpoint><Address>h</Address><Port>5432</Port></Endpoint><DBInstanceArn>x</DBInstanceArn></DBInstance>";
        let text = format!(
            "<R><DBInstances>{block}{}</DBInstances></R>",
            block.replace(">a<", ">b<")
        );
        assert_eq!(blocks(&text).count(), 2);
        assert_eq!(element(block, "DBInstanceIdentifier"), Some("a"));
        let creating = without_endpoint(&with_status(block, "creating"));
        assert_eq!(element(&creating, "DBInstanceStatus"), Some("creating"));
        assert_eq!(element(&creating, "Endpoint"), None);
        assert_eq!(element(&creating, "DBInstanceArn"), Some("x"));
    }
}
