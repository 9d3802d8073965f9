//! Two lanes of workers per controller, so that long reconciles never hold the workers the rest
//! of the kind needs (#28, starvation).
//!
//! A client-side drain round holds its reconcile for up to a `roundDuration` and asks for the
//! next round at once: with every reconcile on one pool, ten drains held ten of the bucket
//! controller's sixteen workers for as long as they ran, and new buckets beside them had six.
//! A controller whose reconciles are of two sorts runs `concurrency` + `long` workers: the
//! **main** lane admits at most `concurrency` reconciles at once (a reconcile beyond waits for a
//! place, as it would for a worker); the **long** lane takes turns: at most `long` at once, and a
//! reconcile that finds no turn free is not run but asked again shortly
//! ([`TURN_RETRY`]), so it waits holding no worker. Turns go round in order: a long reconcile
//! that asks again at once after its turn (the next drain round) gets in line behind those that
//! asked before it, so ten drains on four turns all progress.
//!
//! Under a burst of main-lane work the kube-runtime workers beyond `concurrency` may be taken by
//! main reconciles waiting for their place, so a long reconcile's next turn can wait for the burst
//! to pass: new work comes first, a drain resumes after.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};

/// Which workers reconcile an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Everything short: creates, updates, deletions, looks.
    Main,
    /// Reconciles that hold their worker long (a drain round), on turns of their own.
    Long,
}

/// How soon a long reconcile refused a turn asks again.
pub const TURN_RETRY: Duration = Duration::from_secs(1);

/// A long reconcile that has not asked for this long is no longer waiting (its drain ended, its
/// object is gone), so it stops holding its place in line. Far above [`TURN_RETRY`]: a waiting
/// reconcile's next ask can be late while every worker is busy, and only loses its place then.
const FORGOTTEN_AFTER: Duration = Duration::from_secs(30);

/// A controller's lanes.
#[derive(Debug)]
pub struct Lanes {
    main: Semaphore,
    main_places: u16,
    long: Mutex<Turns>,
}

/// What lets a reconcile run: a main place or a long turn; dropping it frees what it holds.
#[derive(Debug)]
pub struct Admission<'a> {
    _place: Option<SemaphorePermit<'a>>,
    _turn: Option<TurnTaken<'a>>,
}

/// A long-lane turn in use.
#[derive(Debug)]
struct TurnTaken<'a> {
    lanes: &'a Lanes,
    key: String,
}

impl Drop for TurnTaken<'_> {
    fn drop(&mut self) {
        self.lanes.turns().end(&self.key);
    }
}

impl Lanes {
    /// `main` reconciles at once, plus `long` long ones (0: every reconcile is on the main lane).
    pub fn new(main: u16, long: u16) -> Self {
        Lanes {
            main: Semaphore::new(usize::from(main)),
            main_places: main,
            long: Mutex::new(Turns::new(long)),
        }
    }

    /// The kube-runtime workers both lanes need together.
    pub fn workers(&self) -> u16 {
        self.main_places + self.turns().turns
    }

    /// Admits the reconcile of object `key` on `lane`: a main one once a place is free, a long one
    /// now if it is its turn; `None`: not its turn, ask again after [`TURN_RETRY`].
    pub async fn admit(&self, lane: Lane, key: &str) -> Option<Admission<'_>> {
        if lane == Lane::Long {
            // One lock for the lane's size and the turn (a lane without turns runs on the main
            // one); it is let go before any wait below.
            let mut turns = self.turns();
            if turns.turns > 0 {
                let granted = turns.begin(key, Instant::now());
                return granted.then(|| Admission {
                    _place: None,
                    _turn: Some(TurnTaken {
                        lanes: self,
                        key: key.to_string(),
                    }),
                });
            }
        }
        let place = self
            .main
            .acquire()
            .await
            .expect("the semaphore is never closed");
        Some(Admission {
            _place: Some(place),
            _turn: None,
        })
    }

    fn turns(&self) -> std::sync::MutexGuard<'_, Turns> {
        self.long.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The long lane's turns: who has one, and who waits for one, in the order they first asked.
#[derive(Debug)]
struct Turns {
    turns: u16,
    running: HashSet<String>,
    /// Keys refused a turn, in the order they first asked, with when each last asked.
    waiting: VecDeque<(String, Instant)>,
}

impl Turns {
    fn new(turns: u16) -> Self {
        Turns {
            turns,
            running: HashSet::new(),
            waiting: VecDeque::new(),
        }
    }

    /// Whether `key` may start now. It may when a turn is free for it: the free turns go to the
    /// longest waiting first, so a key that did not wait gets one only when more are free than
    /// are waited for. Refused, it keeps (or takes) its place in line.
    fn begin(&mut self, key: &str, now: Instant) -> bool {
        self.waiting.retain(|(k, asked)| {
            k == key || now.saturating_duration_since(*asked) < FORGOTTEN_AFTER
        });
        let free = usize::from(self.turns).saturating_sub(self.running.len());
        let place = self.waiting.iter().position(|(k, _)| k == key);
        if place.unwrap_or(self.waiting.len()) < free {
            if let Some(place) = place {
                self.waiting.remove(place);
            }
            self.running.insert(key.to_string());
            return true;
        }
        match place {
            Some(place) => self.waiting[place].1 = now,
            None => self.waiting.push_back((key.to_string(), now)),
        }
        false
    }

    fn end(&mut self, key: &str) {
        self.running.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asks(turns: &mut Turns, keys: &[&str], now: Instant) -> Vec<bool> {
        keys.iter().map(|k| turns.begin(k, now)).collect()
    }

    #[test]
    fn turns_go_round_in_the_order_they_were_asked_for() {
        let now = Instant::now();
        let mut turns = Turns::new(2);
        assert_eq!(
            asks(&mut turns, &["a", "b", "c", "d"], now),
            [true, true, false, false]
        );
        // `a`'s round ends and it asks again at once: `c` and `d` asked before it.
        turns.end("a");
        assert!(!turns.begin("a", now));
        assert!(!turns.begin("d", now), "d waits behind c");
        assert!(turns.begin("c", now));
        turns.end("b");
        assert!(!turns.begin("b", now), "b waits behind d and a");
        assert!(turns.begin("d", now));
        turns.end("c");
        turns.end("d");
        // Two free turns: the first two in line (a, b) take them, whoever asks first.
        assert!(!turns.begin("c", now));
        assert!(turns.begin("b", now));
        assert!(turns.begin("a", now));
    }

    #[test]
    fn a_key_that_stopped_asking_gives_its_place_up() {
        let start = Instant::now();
        let mut turns = Turns::new(1);
        assert!(turns.begin("a", start));
        assert!(!turns.begin("gone", start));
        turns.end("a");
        // `gone` is first in line, so `a` waits; until `gone` has not asked for long enough.
        assert!(!turns.begin("a", start + TURN_RETRY));
        assert!(!turns.begin("a", start + FORGOTTEN_AFTER - Duration::from_millis(1)));
        assert!(turns.begin("a", start + FORGOTTEN_AFTER));
    }

    #[tokio::test]
    async fn a_long_lane_holds_no_main_place_and_a_lane_of_no_turns_is_the_main_one() {
        let lanes = Lanes::new(1, 1);
        assert_eq!(lanes.workers(), 2);
        let main = lanes.admit(Lane::Main, "m").await.expect("admitted");
        let long = lanes.admit(Lane::Long, "l").await.expect("a free turn");
        assert!(lanes.turns().running.contains("l"));
        assert!(
            lanes.admit(Lane::Long, "l2").await.is_none(),
            "one turn, taken"
        );
        drop(long);
        assert!(lanes.admit(Lane::Long, "l2").await.is_some());
        // A second main reconcile waits for the place the first one holds.
        let waiting =
            tokio::time::timeout(Duration::from_millis(50), lanes.admit(Lane::Main, "m2"));
        assert!(waiting.await.is_err());
        drop(main);
        assert!(lanes.admit(Lane::Main, "m2").await.is_some());

        let single = Lanes::new(1, 0);
        assert_eq!(single.workers(), 1);
        let as_main = single
            .admit(Lane::Long, "l")
            .await
            .expect("on the main lane");
        assert!(single.turns().running.is_empty());
        assert_eq!(single.main.available_permits(), 0);
        drop(as_main);
        assert_eq!(single.main.available_permits(), 1);
    }
}
