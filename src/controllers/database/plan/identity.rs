//! Naming, passwords and connection details (pure): the instance identifier derived from the
//! resource, the final snapshot identifier, master passwords and the connection Secret's keys.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use rand::Rng;

use crate::api::names::with_identity_hash;
use crate::api::{CloudDatabase, CloudDatabaseSpec, DatabaseEndpoint, Engine};
use crate::backends::rds::Password;

pub const DEFAULT_USERNAME: &str = "keeper";
const PASSWORD_LENGTH: usize = 32;
/// Characters RDS accepts in a master password for both engines (no `/`, `"`, `@` or space).
const PASSWORD_CHARSET: &[u8] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#%*+-.=^_~";

/// The RDS `DBInstanceIdentifier` of a CloudDatabase: `<namespace>-<name>` cleaned up to what
/// RDS accepts (lowercase letters, digits and single hyphens, starting with a letter), cut to
/// fit, and always followed by a hash of the exact namespace and name. The hash is not only for
/// shortening: joining with `-` is ambiguous (`a-b/c` and `a/b-c`), and two resources must
/// never map to the same instance.
pub fn instance_identifier(namespace: &str, name: &str) -> String {
    let mut base = String::new();
    for c in format!("{namespace}-{name}").chars() {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '-'
        };
        if c == '-' && (base.is_empty() || base.ends_with('-')) {
            continue;
        }
        base.push(c);
    }
    if !base.starts_with(|c: char| c.is_ascii_lowercase()) {
        base.insert_str(0, "db-");
    }
    with_identity_hash(&base, namespace, name, 63)
}

/// A unique final snapshot identifier: `<instanceId>-final-<UTC timestamp>`.
pub fn final_snapshot_identifier(instance_id: &str, now: Timestamp) -> String {
    format!("{instance_id}-final-{}", now.strftime("%Y%m%d%H%M%S"))
}

/// A fresh master password from the thread-local CSPRNG (ChaCha, seeded from the OS).
pub fn generate_password() -> Password {
    let mut rng = rand::rng();
    Password::new(
        (0..PASSWORD_LENGTH)
            .map(|_| PASSWORD_CHARSET[rng.random_range(0..PASSWORD_CHARSET.len())] as char)
            .collect(),
    )
}

/// Percent-encodes everything but RFC 3986 unreserved characters, so any password is safe in
/// the userinfo of a URI.
fn percent_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Postgres => "postgres",
        Engine::Mysql => "mysql",
    }
}

/// The database a client connects to when `databaseName` is not set.
fn default_database(engine: Engine) -> &'static str {
    match engine {
        Engine::Postgres => "postgres",
        Engine::Mysql => "mysql",
    }
}

pub fn connection_secret_name(db: &CloudDatabase) -> String {
    db.spec
        .connection_secret_name
        .clone()
        .unwrap_or_else(|| format!("{}-connection", db.name_any()))
}

/// What the connection Secret holds before the instance exists: enough to create the instance
/// with, and to reuse after a crash.
pub fn credentials(
    spec: &CloudDatabaseSpec,
    username: &str,
    password: &Password,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("username".to_string(), username.to_string()),
        ("password".to_string(), password.expose().to_string()),
        ("engine".to_string(), engine_name(spec.engine).to_string()),
        (
            "database".to_string(),
            spec.database_name
                .clone()
                .unwrap_or_else(|| default_database(spec.engine).to_string()),
        ),
    ])
}

/// The complete connection Secret of an available instance. `stored` is what the Secret holds
/// now: the user name and database were fixed when the instance was created.
pub fn connection_details(
    stored: &BTreeMap<String, String>,
    engine: Engine,
    endpoint: &DatabaseEndpoint,
) -> BTreeMap<String, String> {
    let username = stored
        .get("username")
        .cloned()
        .unwrap_or_else(|| DEFAULT_USERNAME.to_string());
    let password = stored.get("password").cloned().unwrap_or_default();
    let database = stored
        .get("database")
        .cloned()
        .unwrap_or_else(|| default_database(engine).to_string());
    let scheme = match engine {
        Engine::Postgres => "postgresql",
        Engine::Mysql => "mysql",
    };
    let uri = format!(
        "{scheme}://{}:{}@{}:{}/{}",
        percent_encode(&username),
        percent_encode(&password),
        endpoint.address,
        endpoint.port,
        percent_encode(&database)
    );
    BTreeMap::from([
        ("host".to_string(), endpoint.address.clone()),
        ("port".to_string(), endpoint.port.to_string()),
        ("username".to_string(), username),
        ("password".to_string(), password),
        ("database".to_string(), database),
        ("engine".to_string(), engine_name(engine).to_string()),
        ("uri".to_string(), uri),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_valid_rds_identifier(id: &str) {
        assert!(
            !id.is_empty() && id.len() <= 63,
            "{id}: length {}",
            id.len()
        );
        assert!(id.starts_with(|c: char| c.is_ascii_lowercase()), "{id}");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{id}"
        );
        assert!(!id.contains("--") && !id.ends_with('-'), "{id}");
    }

    #[test]
    fn instance_identifiers_are_valid_for_rds_and_deterministic() {
        let long = "n".repeat(63);
        for (namespace, name) in [
            ("shop", "orders"),
            ("1st-team", "db.primary"),
            ("a", "0"),
            (long.as_str(), long.as_str()),
            ("team-", "-x.y--z"),
        ] {
            let id = instance_identifier(namespace, name);
            assert_valid_rds_identifier(&id);
            assert_eq!(id, instance_identifier(namespace, name));
        }
        // Existing instances are found by this name: it never changes between releases.
        assert_eq!(
            instance_identifier("shop", "orders"),
            "shop-orders-644f7b8c"
        );
        assert!(instance_identifier("1st", "db").starts_with("db-1st-db-"));
    }

    #[test]
    fn instance_identifiers_keep_ambiguous_joins_and_long_names_apart() {
        assert_ne!(
            instance_identifier("a-b", "c"),
            instance_identifier("a", "b-c")
        );
        let prefix = "x".repeat(80);
        assert_ne!(
            instance_identifier("ns", &format!("{prefix}1")),
            instance_identifier("ns", &format!("{prefix}2"))
        );
    }

    #[test]
    fn the_longest_kubernetes_names_give_identifiers_rds_accepts() {
        // Namespaces have at most 63 characters, resource names 253 (audit F21).
        let namespace = "n".repeat(63);
        let name = format!("{}.{}", "a".repeat(200), "b".repeat(52));
        assert_eq!(name.len(), 253);
        let id = instance_identifier(&namespace, &name);
        assert_valid_rds_identifier(&id);
        assert_ne!(
            id,
            instance_identifier(&namespace, &name.replace('b', "c")),
            "names that differ past the cut stay apart"
        );
        // The final snapshot of the longest identifier fits RDS's 255 characters.
        let snapshot = final_snapshot_identifier(&id, "2026-03-04T05:06:07Z".parse().unwrap());
        assert!(snapshot.len() <= 255, "{snapshot}");
        assert!(
            snapshot.starts_with(|c: char| c.is_ascii_lowercase())
                && !snapshot.contains("--")
                && !snapshot.ends_with('-'),
            "{snapshot}"
        );
    }

    #[test]
    fn final_snapshot_identifiers_carry_the_instance_and_a_utc_timestamp() {
        let at: Timestamp = "2026-03-04T05:06:07Z".parse().unwrap();
        let snapshot = final_snapshot_identifier("shop-orders-1a2b3c4d", at);
        assert_eq!(snapshot, "shop-orders-1a2b3c4d-final-20260304050607");
        assert_valid_rds_identifier(&snapshot);
    }

    #[test]
    fn passwords_are_long_random_and_acceptable_to_rds() {
        let a = generate_password();
        let b = generate_password();
        assert_ne!(a, b);
        for p in [&a, &b] {
            assert_eq!(p.expose().len(), PASSWORD_LENGTH);
            assert!(!p.expose().contains(['/', '"', '@', ' ']));
        }
        assert!(!format!("{a:?}").contains(a.expose()));
    }

    #[test]
    fn the_connection_secret_has_every_key_and_an_encoded_uri() {
        let stored = BTreeMap::from([
            ("username".to_string(), "app".to_string()),
            ("password".to_string(), "p#ss%w/rd@1".to_string()),
            ("database".to_string(), "orders".to_string()),
        ]);
        let endpoint = DatabaseEndpoint {
            address: "db.example".into(),
            port: 5432,
        };
        let details = connection_details(&stored, Engine::Postgres, &endpoint);
        let keys: Vec<&str> = details.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "database", "engine", "host", "password", "port", "uri", "username"
            ]
        );
        assert_eq!(details["password"], "p#ss%w/rd@1");
        assert_eq!(
            details["uri"],
            "postgresql://app:p%23ss%25w%2Frd%401@db.example:5432/orders"
        );
        let mysql = connection_details(&BTreeMap::new(), Engine::Mysql, &endpoint);
        assert_eq!(mysql["engine"], "mysql");
        assert!(mysql["uri"].starts_with("mysql://keeper:@db.example:5432/mysql"));
    }
}
