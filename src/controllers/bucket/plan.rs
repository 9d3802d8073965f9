//! Pure decisions of the bucket controller, no I/O: the drain state machine ([`drain`]) and the
//! lifecycle decisions around it ([`lifecycle`]: tenant gate, convergence, deletion message,
//! credentials Secret content), the keys of a bucket's own IAM user ([`keys`]), and the request annotations ([`requests`]: pending, handled or
//! none). [`super::reconcile`] performs what they decide.

pub mod drain;
pub mod keys;
pub mod lifecycle;
pub mod requests;
