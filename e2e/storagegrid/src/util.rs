//! Small helpers: ids, timestamps, JSON envelopes, HTTP bodies.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use rand::Rng;
use serde_json::{Value, json};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Body type of every response both listeners produce.
pub(crate) type Body = BoxBody<Bytes, BoxError>;

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

pub(crate) fn empty() -> Body {
    full(Bytes::new())
}

/// RFC 3339 with milliseconds and `Z`, e.g. `2025-01-15T10:00:00.123Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

pub(crate) fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// Parses an RFC 3339 timestamp (with or without fractional seconds).
pub(crate) fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339(s)
        .ok()
        .or_else(|| humantime::parse_rfc3339_weak(s.trim_end_matches(['Z', 'z'])).ok())
}

/// A 20-digit decimal account id (first digit non-zero), larger than u64.
pub(crate) fn account_id() -> String {
    let mut rng = rand::rng();
    let mut s = String::with_capacity(20);
    s.push(char::from(b'1' + rng.random_range(0..9u8)));
    for _ in 0..19 {
        s.push(char::from(b'0' + rng.random_range(0..10u8)));
    }
    s
}

/// A random version-4 UUID in canonical lowercase form.
pub(crate) fn uuid() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub(crate) fn random_string(len: usize, alphabet: &[u8]) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(alphabet[rng.random_range(0..alphabet.len())]))
        .collect()
}

pub(crate) const UPPER_ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
pub(crate) const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
pub(crate) const B64URL: &[u8] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";

/// Parses durations such as `1h`, `30m`, `16h`, `500ms`, `90s`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// Success envelope (contract §0.1).
pub(crate) fn envelope(api_version: &str, data: Value) -> Value {
    json!({
        "responseTime": now_rfc3339(),
        "status": "success",
        "apiVersion": api_version,
        "data": data,
    })
}

/// Error envelope (contract §0.2): `message` is an object, `code` repeats the HTTP status.
pub(crate) fn error_envelope(
    api_version: &str,
    status: StatusCode,
    text: &str,
    key: &str,
) -> Value {
    json!({
        "responseTime": now_rfc3339(),
        "status": "error",
        "apiVersion": api_version,
        "code": status.as_u16(),
        "message": {"text": text, "key": key},
    })
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut resp = Response::new(full(serde_json::to_vec(body).unwrap_or_default()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Escapes text for XML element content.
pub(crate) fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// Reads an integer that may arrive as a JSON number or a numeric string.
pub(crate) fn lenient_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Reads a bool that may arrive as a JSON bool or the string "true"/"false".
pub(crate) fn lenient_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_ids_are_20_digits() {
        for _ in 0..100 {
            let id = account_id();
            assert_eq!(id.len(), 20);
            assert!(id.bytes().all(|b| b.is_ascii_digit()));
            assert_ne!(id.as_bytes()[0], b'0');
        }
    }

    #[test]
    fn uuids_are_v4() {
        let u = uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }

    #[test]
    fn rfc3339_has_millis() {
        let s = rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(1_500));
        assert_eq!(s, "1970-01-01T00:00:01.500Z");
        assert_eq!(
            parse_rfc3339(&s),
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_500))
        );
        assert!(parse_rfc3339("2030-01-01T00:00:00Z").is_some());
        assert!(parse_rfc3339("nope").is_none());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("x").is_err());
    }

    #[test]
    fn lenient_values() {
        assert_eq!(lenient_u64(&json!("12")), Some(12));
        assert_eq!(lenient_u64(&json!(12)), Some(12));
        assert_eq!(lenient_bool(&json!("true")), Some(true));
        assert_eq!(lenient_bool(&json!(false)), Some(false));
        assert_eq!(lenient_bool(&json!(1)), None);
    }
}
