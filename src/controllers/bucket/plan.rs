//! Pure decisions of the bucket controller, no I/O: the drain state machine ([`drain`]) and the
//! lifecycle decisions around it ([`lifecycle`]: tenant gate, convergence, deletion message,
//! credentials Secret content). [`super::reconcile`] performs what they decide.

pub mod drain;
pub mod lifecycle;
