//! Leadership through a Lease, decided from what a replica observes and its own monotonic clock,
//! and the fence every write passes.
//!
//! Expiry follows client-go: a candidate never compares its clock with the holder's `renewTime`
//! (two machines' clocks differ); it notes when it first saw the current lease record and takes
//! the lease once that record has not changed for `leaseDurationSeconds` by its own clock. The
//! holder counts from the moment it *sent* its last successful renewal, which precedes any
//! candidate's sight of it, so by the holder's fence its leadership ends before anyone else may
//! take over — as long as clocks run at the same rate, and a `margin` absorbs the difference.
//!
//! The fence is checked when every write is sent (`k8s::gate`, a layer of the client stack below
//! the request budget's queue): a leader paused past its lease (SIGSTOP, a stalled VM, a long GC)
//! or one whose writes waited in that queue finds its fence expired and sends nothing, although
//! its own lease task has not run yet. What remains is a request that passed the gate while
//! leading and still waits for a connection, or left the process and has not committed yet;
//! compare-and-swap writes cover the bindings there, and conditioned deletes the claims. A
//! leader that stops on its own gives the lease up only after its writes in flight were answered
//! (`controller::leader`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The part of a Lease that decides leadership.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    pub holder: Option<String>,
    pub duration: Duration,
    /// `spec.renewTime` as written: only compared for change, never as a clock.
    pub renew_time: Option<String>,
    pub transitions: i32,
}

/// What a replica does next with the lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write the lease as held by us (acquire, or renew our own).
    Take,
    /// Someone else holds a live lease: look again after this long.
    Wait(Duration),
}

/// A replica's memory of the lease record it last saw, and since when (its own clock).
#[derive(Clone, Debug, Default)]
pub struct Observer {
    seen: Option<(LeaseRecord, Instant)>,
}

impl Observer {
    /// Notes `record` as seen at `now`; the time only restarts when the record changed.
    pub fn observe(&mut self, record: &LeaseRecord, now: Instant) {
        if self.seen.as_ref().is_none_or(|(r, _)| r != record) {
            self.seen = Some((record.clone(), now));
        }
    }

    /// Whether `me` may write the lease now.
    pub fn step(&self, me: &str, now: Instant) -> Step {
        let Some((record, since)) = &self.seen else {
            return Step::Take;
        };
        match record.holder.as_deref() {
            None | Some("") => Step::Take,
            Some(h) if h == me => Step::Take,
            Some(_) => {
                let left = record
                    .duration
                    .saturating_sub(now.saturating_duration_since(*since));
                if left.is_zero() {
                    Step::Take
                } else {
                    Step::Wait(left)
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    /// No leader election: the only replica always writes.
    Open,
    /// Writes allowed until then (`None`: not leading).
    Until(Option<Instant>),
}

/// Why a write was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not the leader: the lease is not held, or has run out by this replica's clock")]
pub struct Fenced;

/// The leadership fence, shared by the lease task (which extends it) and every writer.
#[derive(Clone, Debug)]
pub struct Fence(Arc<Mutex<Gate>>);

impl Fence {
    /// A fence that always lets writes through (no leader election).
    pub fn open() -> Self {
        Fence(Arc::new(Mutex::new(Gate::Open)))
    }

    /// A closed fence: nothing is written until the lease is taken.
    pub fn closed() -> Self {
        Fence(Arc::new(Mutex::new(Gate::Until(None))))
    }

    fn gate(&self) -> Gate {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, g: Gate) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = g;
    }

    /// A lease write sent at `sent` succeeded: writes are allowed until `sent + duration -
    /// margin`. Never shortens an open fence.
    pub fn renewed(&self, sent: Instant, duration: Duration, margin: Duration) {
        if self.gate() != Gate::Open {
            self.set(Gate::Until(Some(sent + duration.saturating_sub(margin))));
        }
    }

    /// Leadership is gone: no more writes.
    pub fn revoke(&self) {
        if self.gate() != Gate::Open {
            self.set(Gate::Until(None));
        }
    }

    /// Whether a write may be sent at `now`.
    pub fn check(&self, now: Instant) -> Result<(), Fenced> {
        match self.gate() {
            Gate::Open => Ok(()),
            Gate::Until(Some(t)) if now < t => Ok(()),
            Gate::Until(_) => Err(Fenced),
        }
    }

    /// Until when writes are allowed (`None`: closed; open fences never end).
    pub fn until(&self) -> Option<Instant> {
        match self.gate() {
            Gate::Open => None,
            Gate::Until(t) => t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: &str, renew: &str) -> LeaseRecord {
        LeaseRecord {
            holder: Some(holder.into()),
            duration: Duration::from_secs(15),
            renew_time: Some(renew.into()),
            transitions: 0,
        }
    }

    #[test]
    fn a_candidate_takes_the_lease_only_after_it_stood_still_for_its_duration() {
        let t0 = Instant::now();
        let mut o = Observer::default();
        assert_eq!(
            o.step("b", t0),
            Step::Take,
            "nothing seen: try to create it"
        );
        o.observe(&record("a", "r1"), t0);
        assert_eq!(o.step("b", t0), Step::Wait(Duration::from_secs(15)));
        // A renewal restarts the count, whatever the holder's clock wrote.
        o.observe(&record("a", "r2"), t0 + Duration::from_secs(10));
        let at = t0 + Duration::from_secs(20);
        o.observe(&record("a", "r2"), at);
        assert_eq!(o.step("b", at), Step::Wait(Duration::from_secs(5)));
        assert_eq!(o.step("b", t0 + Duration::from_secs(25)), Step::Take);
        assert_eq!(o.step("a", at), Step::Take, "the holder renews");
        let mut free = Observer::default();
        free.observe(&LeaseRecord::default(), at);
        assert_eq!(free.step("b", at), Step::Take, "released: take it at once");
    }

    #[test]
    fn the_fence_ends_with_the_lease_by_the_holders_own_clock() {
        let t0 = Instant::now();
        let f = Fence::closed();
        assert_eq!(f.check(t0), Err(Fenced));
        f.renewed(t0, Duration::from_secs(15), Duration::from_secs(1));
        assert!(f.check(t0 + Duration::from_secs(13)).is_ok());
        // Paused past the lease: on resuming, the very next write is refused.
        assert_eq!(f.check(t0 + Duration::from_secs(14)), Err(Fenced));
        f.renewed(
            t0 + Duration::from_secs(5),
            Duration::from_secs(15),
            Duration::ZERO,
        );
        assert!(f.check(t0 + Duration::from_secs(19)).is_ok());
        f.revoke();
        assert_eq!(f.check(t0), Err(Fenced));
        let open = Fence::open();
        open.revoke();
        assert!(open.check(t0 + Duration::from_secs(3600)).is_ok());
        assert_eq!(open.until(), None);
    }
}
