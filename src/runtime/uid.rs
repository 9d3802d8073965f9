//! An object's uid as the key of a map kept per object (what the workers started on, what the
//! bucket controller last saw of each bucket): 16 bytes in the map's slot, where the uid's text
//! takes a 24-byte `String` and a 48-byte allocation beside it. With 10,000 buckets each such map
//! holds about 0.6 MB less.

use std::hash::{DefaultHasher, Hash, Hasher};

use kube::Resource;

/// An object's uid, by value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Uid(u128);

impl Uid {
    /// The uid of `obj`, which every object the API server stored has.
    pub fn stored<K: Resource>(obj: &K) -> Option<Uid> {
        obj.meta().uid.as_deref().map(Uid::from)
    }

    /// The uid of `obj`; objects without one (built in tests) share the key of the empty uid.
    pub fn of<K: Resource>(obj: &K) -> Uid {
        Uid::stored(obj).unwrap_or_else(|| Uid::from(""))
    }
}

impl From<&str> for Uid {
    /// The API server's uids are UUIDs, taken as their 128 bits: two uids are one key only if
    /// they are the same. Other text (none in a cluster; tests name uids freely) is hashed into
    /// 128 bits.
    fn from(uid: &str) -> Self {
        match uuid::Uuid::try_parse(uid) {
            Ok(parsed) => Uid(parsed.as_u128()),
            Err(_) => {
                let half = |part: u8| {
                    let mut hasher = DefaultHasher::new();
                    (part, uid).hash(&mut hasher);
                    u128::from(hasher.finish())
                };
                Uid(half(0) << 64 | half(1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_is_its_uuid_and_other_text_keys_apart() {
        let uid = "9b2e5d1c-7f3a-4e6b-8c0d-2a1f3e4b5c6d";
        assert_eq!(Uid::from(uid), Uid(0x9b2e5d1c_7f3a_4e6b_8c0d_2a1f3e4b5c6d));
        assert_eq!(Uid::from(uid), Uid::from(uid.to_string().as_str()));
        assert_ne!(Uid::from("uid"), Uid::from("uid-2"));
        assert_eq!(Uid::from("uid"), Uid::from("uid"));
    }
}
