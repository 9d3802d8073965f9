//! The names keeper writes into the cluster (finalizers, the label and hold of its Secrets, the
//! Secrets' names), and the validation and parsing of the string values users write in specs:
//! bucket names, durations and quantities. The CRD schema carries the same rules as patterns so
//! the API server rejects bad input early; these functions guard the values keeper computes itself
//! (a defaulted bucket name) and turn strings into numbers.

use std::time::Duration;

use sha2::{Digest, Sha256};

/// The finalizer on every S3Tenant: its account is cleaned up before the object goes.
pub const TENANT_FINALIZER: &str = "keeper.dev/tenant-cleanup";
/// The finalizer on every S3Bucket: its bucket and keys are cleaned up before the object goes.
pub const BUCKET_FINALIZER: &str = "keeper.dev/bucket-cleanup";
/// The finalizer on every CloudDatabase: its instance is cleaned up before the object goes.
pub const DATABASE_FINALIZER: &str = "keeper.dev/database-cleanup";

/// The label on every Secret keeper creates; keeper's Secret cache watches only these.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "keeper");

/// The finalizer that keeps a Secret other resources' cleanup signs in with (a tenant's root
/// password and keys, which its buckets' cleanup uses) until its owner lets go of it. Deleting a
/// namespace deletes every object in it in no particular order: without the hold, the Secret can
/// be gone before the bucket cleanup that needs it runs, and the namespace never finishes.
pub const CLEANUP_HOLD: &str = "keeper.dev/needed-for-cleanup";

/// The Secret with an S3Tenant's S3 credentials.
pub fn tenant_credentials_secret_name(tenant: &str) -> String {
    format!("{tenant}-s3-credentials")
}

/// The Secret with an S3Tenant's account root password (StorageGRID only).
pub fn tenant_root_secret_name(tenant: &str) -> String {
    format!("{tenant}-root-credentials")
}

/// The Secret with an S3Bucket's credentials.
pub fn bucket_credentials_secret_name(bucket: &str) -> String {
    format!("{bucket}-credentials")
}

/// S3 bucket names: 3-63 characters (length is checked separately), lowercase letters, digits,
/// hyphens and dots, starting and ending with a letter or digit, no two dots in a row.
pub const BUCKET_NAME_PATTERN: &str = r"^[a-z0-9](\.?[a-z0-9-])*\.?[a-z0-9]$";

/// Go-style durations as Kubernetes users write them: `30s`, `5m`, `1h30m`.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// Durations (of [`DURATION_PATTERN`] shape) shorter than a second: all zero, milliseconds
/// only, or a fraction of a second. A poll interval like that polls the backend in a hot loop.
pub const SUB_SECOND_DURATION_PATTERNS: [&str; 3] = [
    r"^(0+(\.0+)?(ms|s|m|h))+$",
    r"^([0-9]+(\.[0-9]+)?ms)+$",
    r"^0+\.[0-9]+s$",
];

/// The CEL rule a poll interval field carries: at least one second (CEL's `duration()` is not
/// used because not every API server in use evaluates it; `matches` is core CEL).
pub const POLL_INTERVAL_RULE: &str = "!self.matches('^(0+(\\\\.0+)?(ms|s|m|h))+$') && !self.matches('^([0-9]+(\\\\.[0-9]+)?ms)+$') && !self.matches('^0+\\\\.[0-9]+s$')";

/// Kubernetes quantities keeper accepts for sizes: a decimal number with an optional binary
/// (`Ki`..`Ei`) or decimal (`k`..`E`) suffix.
pub const QUANTITY_PATTERN: &str = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$";

/// Why a bucket name is not acceptable to S3.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidBucketName {
    #[error("bucket name {0:?} must be 3 to 63 characters long")]
    Length(String),
    #[error(
        "bucket name {0:?} may contain only lowercase letters, digits, hyphens and dots, must start and end with a letter or digit, and must not contain two dots in a row"
    )]
    Characters(String),
    #[error("bucket name {0:?} must not be formatted as an IP address")]
    IpAddress(String),
}

/// Checks a bucket name against the S3 naming rules.
pub fn validate_bucket_name(name: &str) -> Result<(), InvalidBucketName> {
    if !(3..=63).contains(&name.len()) {
        return Err(InvalidBucketName::Length(name.to_string()));
    }
    let bytes = name.as_bytes();
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.';
    let edge = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !bytes.iter().all(|&b| allowed(b))
        || !edge(bytes[0])
        || !edge(bytes[bytes.len() - 1])
        || name.contains("..")
    {
        return Err(InvalidBucketName::Characters(name.to_string()));
    }
    if name.parse::<std::net::Ipv4Addr>().is_ok() || is_dotted_quad(name) {
        return Err(InvalidBucketName::IpAddress(name.to_string()));
    }
    Ok(())
}

/// Four dot-separated runs of digits, whatever their value (`999.1.1.1` is refused by S3 too).
fn is_dotted_quad(name: &str) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() == 4
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The bucket name keeper uses when the spec names none: `<namespace>-<name>-<hash>` (see
/// [`with_identity_hash`]), at most 63 characters. Namespaces and resource names are already
/// lowercase letters, digits, `-` and `.`, so nothing needs replacing.
pub fn default_bucket_name(namespace: &str, name: &str) -> String {
    with_identity_hash(
        &format!("{namespace}-{name}"),
        namespace,
        name,
        MAX_BUCKET_NAME,
    )
}

/// The longest name S3 and StorageGRID accept for a bucket.
const MAX_BUCKET_NAME: usize = 63;

/// `readable` cut to fit `max` characters and followed by `-` and 8 hex digits of the SHA-256
/// of `<namespace>/<name>`. The hash is not only for shortening: joining a namespace and a name
/// with `-` is ambiguous (`a-b/c` and `a/b-c`), and two resources must never be given the same
/// backend name. A cut that ends in `-` or `.` is trimmed (neither may end a name).
pub fn with_identity_hash(readable: &str, namespace: &str, name: &str, max: usize) -> String {
    const HASH_LEN: usize = 8;
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    let hash: String = digest
        .iter()
        .take(HASH_LEN / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut base = readable.to_string();
    base.truncate(max - HASH_LEN - 1);
    while base.ends_with(['-', '.']) {
        base.pop();
    }
    format!("{base}-{hash}")
}

/// A duration string that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid duration {0:?}: expected a duration such as 30s, 5m or 1h30m")]
pub struct InvalidDuration(pub String);

/// Parses a Go-style duration (`30s`, `5m`, `1h30m`, `1.5h`).
pub fn parse_duration(value: &str) -> Result<Duration, InvalidDuration> {
    let invalid = || InvalidDuration(value.to_string());
    if value.is_empty() {
        return Err(invalid());
    }
    let mut total = 0f64;
    let mut rest = value;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let number: f64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += number * seconds;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}

/// Formats a duration the way Kubernetes prints `metav1.Duration` (`3m0s`, `1h0m0s`, `45s`).
pub fn format_duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

/// A quantity string that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid quantity {0:?}: expected a size such as 500Gi, 2T or 1000000")]
pub struct InvalidQuantity(pub String);

/// Converts a Kubernetes quantity (`500Gi`, `2T`, `1.5Ti`) into bytes, rounding up to a whole byte.
pub fn parse_quantity_bytes(value: &str) -> Result<u64, InvalidQuantity> {
    let invalid = || InvalidQuantity(value.to_string());
    let split = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let (number, suffix) = value.split_at(split);
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(invalid());
    }
    let number: f64 = number.parse().map_err(|_| invalid())?;
    let multiplier: f64 = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return Err(invalid()),
    };
    let bytes = (number * multiplier).ceil();
    if !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(invalid());
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_bucket_names_keep_ambiguous_joins_apart_and_are_valid() {
        // `a-b/c` and `a/b-c` both joined to `a-b-c` before the hash.
        assert_ne!(
            default_bucket_name("a-b", "c"),
            default_bucket_name("a", "b-c")
        );
        // The value is part of the contract: a bucket not yet recorded in status is looked for
        // under it after an upgrade, so it never changes between releases.
        assert_eq!(
            default_bucket_name("team-a", "media"),
            "team-a-media-c9f94268"
        );
        let long = "n".repeat(63);
        for (namespace, name) in [
            ("team-a", "media"),
            (long.as_str(), long.as_str()),
            ("ns", "logs.2026"),
            ("ns", &format!("{}.{}", "x".repeat(50), "y".repeat(20))),
        ] {
            let bucket = default_bucket_name(namespace, name);
            assert_eq!(validate_bucket_name(&bucket), Ok(()), "{bucket}");
            assert!(bucket.len() <= 63, "{bucket}");
        }
        let prefix = "x".repeat(80);
        assert_ne!(
            default_bucket_name("ns", &format!("{prefix}1")),
            default_bucket_name("ns", &format!("{prefix}2"))
        );
    }

    #[test]
    fn valid_bucket_names_pass() {
        for name in [
            "abc",
            "my-bucket",
            "team.logs.2026",
            "a1-b2.c3",
            "0bucket9",
            &"a".repeat(63),
        ] {
            assert_eq!(validate_bucket_name(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn short_and_long_bucket_names_are_refused() {
        for name in ["", "ab", &"a".repeat(64)] {
            assert!(matches!(
                validate_bucket_name(name),
                Err(InvalidBucketName::Length(_))
            ));
        }
    }

    #[test]
    fn uppercase_underscores_and_bad_edges_are_refused() {
        for name in [
            "MyBucket",
            "my_bucket",
            "-bucket",
            "bucket-",
            ".bucket",
            "bucket.",
            "a..b",
            "bück",
            "my bucket",
        ] {
            assert!(
                matches!(
                    validate_bucket_name(name),
                    Err(InvalidBucketName::Characters(_))
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn ip_shaped_bucket_names_are_refused() {
        for name in ["192.168.5.4", "10.0.0.1", "999.999.999.999"] {
            assert!(
                matches!(
                    validate_bucket_name(name),
                    Err(InvalidBucketName::IpAddress(_))
                ),
                "{name}"
            );
        }
        assert_eq!(validate_bucket_name("192.168.5"), Ok(()));
    }

    #[test]
    fn the_pattern_agrees_with_the_validator() {
        let re = regex_lite::Regex::new(BUCKET_NAME_PATTERN).unwrap();
        for name in [
            "abc",
            "a.b-c",
            "a..b",
            "-ab",
            "ab-",
            "AbC",
            "a_b",
            "team.logs.2026",
        ] {
            assert_eq!(
                re.is_match(name),
                validate_bucket_name(name).is_ok(),
                "{name}"
            );
        }
    }

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["", "5", "m", "5x", "1h-5m", "1..5s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let re = regex_lite::Regex::new(DURATION_PATTERN).unwrap();
        assert!(re.is_match("1h30m") && !re.is_match("5") && !re.is_match("5d"));
    }

    #[test]
    fn poll_intervals_below_a_second_are_refused_by_the_crd_rule() {
        let sub_second: Vec<regex_lite::Regex> = SUB_SECOND_DURATION_PATTERNS
            .iter()
            .map(|p| regex_lite::Regex::new(p).unwrap())
            .collect();
        let refused = |v: &str| sub_second.iter().any(|re| re.is_match(v));
        for v in ["0s", "0m0s", "0.0h", "500ms", "1500ms", "0.5s", "00s"] {
            assert!(refused(v), "{v} must be refused");
        }
        for v in ["1s", "30s", "1m", "1h30m", "0.5m", "10s500ms", "1.5s"] {
            assert!(!refused(v), "{v} must be accepted");
            assert!(parse_duration(v).unwrap() >= Duration::from_secs(1), "{v}");
        }
        // The CEL rule is made of exactly these patterns (as CEL string literals).
        for pattern in SUB_SECOND_DURATION_PATTERNS {
            let literal = pattern.replace('\\', "\\\\");
            assert!(
                POLL_INTERVAL_RULE.contains(&format!("!self.matches('{literal}')")),
                "{literal} not in {POLL_INTERVAL_RULE}"
            );
        }
    }

    #[test]
    fn durations_format_like_kubernetes() {
        assert_eq!(format_duration(Duration::from_secs(180)), "3m0s");
        assert_eq!(format_duration(Duration::from_secs(45)), "45s");
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h0m0s");
    }

    #[test]
    fn quantities_convert_to_bytes() {
        assert_eq!(parse_quantity_bytes("500Gi"), Ok(500 * 1024u64.pow(3)));
        assert_eq!(parse_quantity_bytes("2T"), Ok(2_000_000_000_000));
        assert_eq!(parse_quantity_bytes("1.5Ki"), Ok(1536));
        assert_eq!(parse_quantity_bytes("1000"), Ok(1000));
        for bad in ["", "Gi", "5X", "-1Gi", "1.Gi", ".5G", "1e3"] {
            assert!(parse_quantity_bytes(bad).is_err(), "{bad}");
        }
        let re = regex_lite::Regex::new(QUANTITY_PATTERN).unwrap();
        assert!(re.is_match("500Gi") && !re.is_match("500gb"));
    }
}
