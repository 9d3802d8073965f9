//! Pure decisions of the bucket controller, no I/O: the drain state machine ([`drain`]) and the
//! lifecycle decisions around it ([`lifecycle`]: tenant gate, convergence, deletion message,
//! credentials Secret content), and the request annotations ([`requests`]: pending, handled or
//! none). [`super::reconcile`] performs what they decide.

pub mod drain;
pub mod lifecycle;
pub mod requests;
