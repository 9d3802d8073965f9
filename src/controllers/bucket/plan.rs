//! Pure decisions of the bucket controller, no I/O: the drain state machine ([`drain`]) and the
//! lifecycle decisions around it ([`lifecycle`]: tenant gate, convergence, deletion message,
//! credentials Secret content), the keys of a bucket's own IAM user ([`keys`]), the request
//! annotations ([`requests`]: pending, handled or none), what an idle bucket looks at and when
//! ([`usage`]), and whether the bucket is Ready
//! ([`ready`], decided once from what storage and credentials found). [`super::reconcile`]
//! performs what they decide.

pub mod drain;
pub mod keys;
pub mod lifecycle;
pub mod ready;
pub mod requests;
pub mod usage;
