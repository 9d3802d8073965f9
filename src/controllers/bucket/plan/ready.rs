//! Whether a live bucket is Ready, decided once per reconcile from what its two halves found: the
//! storage ([`Usable`]: the bucket exists, is ours, drains or not) and its credentials
//! ([`KeysVerdict`]: the published keys work, are the provider's own, or are not accepted yet).
//! The phase, the `Ready` condition, its event and the requeue of refused keys come from here
//! and nowhere else.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::keys::{self, KEYS_DENIED, KEYS_NOT_YET_VALID};
use crate::api::{BucketPhase, S3BucketStatus};
use crate::runtime::{Next, Note, Outcome, conditions};

/// What the storage half of a reconcile found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usable {
    /// Not usable: waiting, failed or gone, and already reported as such.
    No,
    /// The bucket exists and is ours, holding this many objects (`None`: its usage is not
    /// refreshed, see [`super::usage`]).
    Ready { objects: Option<i64> },
    /// A drain of ours runs; the bucket stays usable meanwhile.
    Draining,
}

impl Usable {
    pub fn is_usable(self) -> bool {
        self != Usable::No
    }
}

/// What the credentials half of a reconcile found about the published keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeysVerdict {
    /// The keys work (tried when new, or refused at the last look; else known to).
    Work,
    /// The keys are provider `.0`'s own (`sharedCredentials: true`): they reach every bucket of
    /// that provider, which the condition says.
    Shared(String),
    /// The store refused the keys (`answer`); `issued`: they were issued by this reconcile.
    NotYetValid { answer: String, issued: bool },
    /// No keys are delivered, for this reason ([`super::lifecycle::WITHHELD_NAMESPACE_TERMINATING`]).
    Withheld(&'static str),
}

/// `Ready=False` reason of a usable bucket whose credentials are withheld.
pub const CREDENTIALS_WITHHELD: &str = "CredentialsWithheld";

/// What the decision needs to know of the bucket.
pub struct Subject<'a> {
    /// The status the reconcile started from.
    pub before: &'a S3BucketStatus,
    pub bucket: &'a str,
    pub secret: &'a str,
    pub generation: Option<i64>,
    pub now: Timestamp,
}

/// Sets the phase, `Ready` and its event on `out` from what the two halves found.
pub fn decide(
    out: &mut Outcome<S3BucketStatus>,
    subject: &Subject<'_>,
    usable: Usable,
    keys: Option<&KeysVerdict>,
) {
    let generation = subject.generation;
    let (reason, message) = match usable {
        Usable::No => return,
        Usable::Ready {
            objects: Some(objects),
        } => (
            "BucketReady",
            format!("bucket {:?} holds {objects} objects", subject.bucket),
        ),
        Usable::Ready { objects: None } => (
            "BucketReady",
            format!(
                "bucket {:?} exists (its usage is not refreshed: its provider's usageRefresh is off)",
                subject.bucket
            ),
        ),
        Usable::Draining => (
            "Draining",
            format!("bucket {:?} is being drained", subject.bucket),
        ),
    };
    out.status.phase = Some(match usable {
        Usable::Draining => BucketPhase::Draining,
        _ => BucketPhase::Ready,
    });
    let message = match keys {
        Some(KeysVerdict::NotYetValid { answer, issued }) => {
            keys_not_yet_valid(out, subject, answer, *issued);
            return;
        }
        Some(KeysVerdict::Withheld(why)) => {
            // Not Ready: an application would find no Secret. No event: the namespace's events
            // are refused too, and the bucket's deletion follows.
            let message = format!("{message}; {why}");
            if out.status.phase == Some(BucketPhase::Ready) {
                out.status.phase = Some(BucketPhase::Pending);
            }
            out.condition(
                conditions::READY,
                false,
                CREDENTIALS_WITHHELD,
                message,
                generation,
            );
            return;
        }
        Some(KeysVerdict::Shared(provider)) => format!(
            "{message}; Secret {:?} carries provider {provider:?}'s own keys (sharedCredentials: true), which reach every bucket of that provider",
            subject.secret
        ),
        Some(KeysVerdict::Work) | None => message,
    };
    out.condition(conditions::READY, true, reason, message.clone(), generation);
    // Becoming usable is news; a changing object count is not.
    let was_usable = matches!(
        subject.before.phase,
        Some(BucketPhase::Ready | BucketPhase::Draining)
    );
    if !was_usable {
        out.note(Note::normal(reason, message));
    }
}

/// The bucket's keys are published but the store does not accept them yet (IAM is eventually
/// consistent; AWS takes seconds). Not a failure: `Ready=False` says so, and keeper looks again,
/// waiting longer the longer it lasts (until the keys count as lost: [`keys::KEYS_LOST_AFTER`]).
/// The condition's transition time is when the refusals began: the keys' wait.
fn keys_not_yet_valid(
    out: &mut Outcome<S3BucketStatus>,
    subject: &Subject<'_>,
    answer: &str,
    issued: bool,
) {
    // Keys issued by this reconcile start their own wait; keys refused at the last look go on
    // with theirs.
    let since = keys::keys_unverified_since(Some(subject.before)).filter(|_| !issued);
    let waited = since
        .and_then(|since| subject.now.duration_since(since).try_into().ok())
        .unwrap_or(Duration::ZERO);
    if out.status.phase == Some(BucketPhase::Ready) {
        out.status.phase = Some(BucketPhase::Pending);
    }
    let (reason, message) = if keys::keys_unknown(answer) {
        (
            KEYS_NOT_YET_VALID,
            format!(
                "the keys in Secret {:?} are not accepted by the store yet (it answered {answer}; new IAM keys take a few seconds to be in force); keeper tries them again, waiting longer each time (at most a minute), and issues new keys if they are still refused after {}s",
                subject.secret,
                keys::KEYS_LOST_AFTER.as_secs()
            ),
        )
    } else {
        (
            KEYS_DENIED,
            format!(
                "the store knows the keys in Secret {:?} but denies keeper's check with them (it answered {answer}): the user's policy is not in force yet, or a bucket policy, SCP or VPC-endpoint condition refuses keeper's requests; keeper tries again, waiting longer each time (at most a minute), and never replaces keys the store knows",
                subject.secret
            ),
        )
    };
    out.condition(
        conditions::READY,
        false,
        reason,
        message.clone(),
        subject.generation,
    );
    match since {
        // Still refused, as at the last look: no news.
        Some(_) => {}
        None => {
            if let Some(ready) = out
                .status
                .conditions
                .iter_mut()
                .find(|c| c.type_ == conditions::READY)
            {
                ready.last_transition_time = Time(subject.now);
            }
            out.note(Note::normal(reason, message));
        }
    }
    out.next = Next::Requeue(keys::keys_check_backoff(waited));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::testing::condition;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn decided(
        before: &S3BucketStatus,
        usable: Usable,
        keys: Option<KeysVerdict>,
        now: Timestamp,
    ) -> Outcome<S3BucketStatus> {
        let mut out = Outcome::new(before.clone(), Next::Requeue(Duration::from_secs(300)));
        let subject = Subject {
            before,
            bucket: "b",
            secret: "b-credentials",
            generation: Some(1),
            now,
        };
        decide(&mut out, &subject, usable, keys.as_ref());
        out
    }

    fn refused(issued: bool) -> Option<KeysVerdict> {
        Some(KeysVerdict::NotYetValid {
            answer: "InvalidAccessKeyId".into(),
            issued,
        })
    }

    #[test]
    fn a_bucket_that_becomes_usable_is_ready_once_with_one_event() {
        let out = decided(
            &S3BucketStatus::default(),
            Usable::Ready { objects: Some(3) },
            Some(KeysVerdict::Work),
            at(0),
        );
        assert_eq!(out.status.phase, Some(BucketPhase::Ready));
        let ready = condition(&out.status.conditions, conditions::READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "BucketReady")
        );
        assert_eq!(
            out.notes,
            [Note::normal("BucketReady", "bucket \"b\" holds 3 objects")]
        );
        // Staying ready while the count moves is no news.
        let again = decided(
            &out.status,
            Usable::Ready { objects: Some(4) },
            Some(KeysVerdict::Work),
            at(1),
        );
        assert!(again.notes.is_empty());
        assert_eq!(
            again.status.conditions[0].last_transition_time,
            ready.last_transition_time
        );
    }

    #[test]
    fn a_bucket_whose_usage_is_not_refreshed_is_ready_without_a_count() {
        let out = decided(
            &S3BucketStatus::default(),
            Usable::Ready { objects: None },
            Some(KeysVerdict::Work),
            at(0),
        );
        let ready = condition(&out.status.conditions, conditions::READY);
        assert_eq!(ready.reason, "BucketReady");
        assert!(
            ready.message.contains("usage is not refreshed") && !ready.message.contains("holds"),
            "{}",
            ready.message
        );
    }

    #[test]
    fn a_draining_bucket_is_ready_and_draining() {
        let out = decided(&S3BucketStatus::default(), Usable::Draining, None, at(0));
        assert_eq!(out.status.phase, Some(BucketPhase::Draining));
        assert_eq!(
            condition(&out.status.conditions, conditions::READY).reason,
            "Draining"
        );
    }

    #[test]
    fn shared_keys_are_named_in_the_ready_message_and_its_event() {
        let out = decided(
            &S3BucketStatus::default(),
            Usable::Ready { objects: Some(0) },
            Some(KeysVerdict::Shared("s3".into())),
            at(0),
        );
        let message = &condition(&out.status.conditions, conditions::READY).message;
        assert!(message.contains("provider \"s3\"'s own keys"), "{message}");
        assert_eq!(&out.notes[0].message, message);
    }

    #[test]
    fn refused_keys_keep_the_bucket_pending_with_no_ready_event() {
        let out = decided(
            &S3BucketStatus::default(),
            Usable::Ready { objects: Some(0) },
            refused(true),
            at(0),
        );
        assert_eq!(out.status.phase, Some(BucketPhase::Pending));
        let ready = condition(&out.status.conditions, conditions::READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", KEYS_NOT_YET_VALID)
        );
        assert_eq!(ready.last_transition_time, Time(at(0)));
        assert_eq!(out.notes.len(), 1);
        assert_eq!(out.notes[0].reason, KEYS_NOT_YET_VALID);
        assert_eq!(out.next, Next::Requeue(Duration::from_secs(2)));
    }

    #[test]
    fn keys_the_store_knows_but_denies_are_told_apart_and_never_said_to_be_replaced() {
        let denied = Some(KeysVerdict::NotYetValid {
            answer: "AccessDenied".into(),
            issued: false,
        });
        let out = decided(
            &S3BucketStatus::default(),
            Usable::Ready { objects: Some(0) },
            denied,
            at(0),
        );
        let ready = condition(&out.status.conditions, conditions::READY);
        assert_eq!(ready.reason, KEYS_DENIED);
        assert!(
            ready.message.contains("never replaces"),
            "{}",
            ready.message
        );
        assert_eq!(out.notes[0].reason, KEYS_DENIED);
        // Tried again like refused keys, but they never count as lost.
        assert!(keys::keys_unverified_since(Some(&out.status)).is_some());
        assert!(keys::keys_unknown_since(Some(&out.status)).is_none());
    }

    #[test]
    fn keys_still_refused_keep_their_wait_and_say_nothing_new() {
        let first = decided(
            &S3BucketStatus::default(),
            Usable::Ready { objects: Some(0) },
            refused(true),
            at(0),
        );
        let later = decided(
            &first.status,
            Usable::Ready { objects: Some(0) },
            refused(false),
            at(10),
        );
        assert!(later.notes.is_empty(), "{:?}", later.notes);
        assert_eq!(
            condition(&later.status.conditions, conditions::READY).last_transition_time,
            Time(at(0)),
            "the wait counts from the first refusal"
        );
        assert_eq!(
            later.next,
            Next::Requeue(Duration::from_secs(10)),
            "waits as long as it waited"
        );
        // New keys (a rotation, or keys taken as lost) start a wait of their own.
        let renewed = decided(
            &later.status,
            Usable::Ready { objects: Some(0) },
            refused(true),
            at(20),
        );
        assert_eq!(
            condition(&renewed.status.conditions, conditions::READY).last_transition_time,
            Time(at(20))
        );
        assert_eq!(renewed.notes.len(), 1);
    }

    #[test]
    fn a_ready_bucket_whose_keys_are_refused_goes_back_to_pending() {
        let ready = decided(
            &S3BucketStatus::default(),
            Usable::Ready { objects: Some(0) },
            Some(KeysVerdict::Work),
            at(0),
        );
        let out = decided(
            &ready.status,
            Usable::Ready { objects: Some(0) },
            refused(false),
            at(5),
        );
        assert_eq!(out.status.phase, Some(BucketPhase::Pending));
        assert_eq!(
            condition(&out.status.conditions, conditions::READY).last_transition_time,
            Time(at(5))
        );
        assert_eq!(out.notes.len(), 1);
    }

    #[test]
    fn an_unusable_bucket_is_left_as_reported() {
        let before = S3BucketStatus {
            phase: Some(BucketPhase::Failed),
            ..S3BucketStatus::default()
        };
        let out = decided(&before, Usable::No, refused(true), at(0));
        assert_eq!(out.status, before);
        assert!(out.notes.is_empty());
    }
}
