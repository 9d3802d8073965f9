//! `watchNamespaces`: the namespaces keeper watches and acts in (audit F13). Left out, keeper
//! watches every namespace; given, it sees nothing outside them (and its own namespace, for its
//! Lease, provider credentials and retained-credential copies), so its RBAC can be Roles in those
//! namespaces instead of cluster-wide grants.

use serde::{Deserialize, Deserializer};

/// The namespaces of `watchNamespaces`: at least one, each a namespace name, none twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchNamespaces(Vec<String>);

impl WatchNamespaces {
    pub fn names(&self) -> &[String] {
        &self.0
    }

    /// Checks the list as written in the configuration.
    pub fn new(names: Vec<String>) -> Result<Self, String> {
        if names.is_empty() {
            return Err(
                "empty: list the namespaces keeper watches, or leave watchNamespaces out to watch \
                 every namespace"
                    .to_string(),
            );
        }
        for (i, name) in names.iter().enumerate() {
            if !is_namespace_name(name) {
                return Err(format!(
                    "[{i}]: {name:?} is not a namespace name (at most 63 lowercase letters, \
                     digits and '-', starting and ending with a letter or digit)"
                ));
            }
            if names[..i].contains(name) {
                return Err(format!("[{i}]: {name:?} is listed twice"));
            }
        }
        Ok(WatchNamespaces(names))
    }
}

impl<'de> Deserialize<'de> for WatchNamespaces {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        WatchNamespaces::new(Vec::<String>::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Whether `name` can name a namespace: an RFC 1123 DNS label.
fn is_namespace_name(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&name.len())
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name.chars().all(|c| alnum(c) || c == '-')
}
