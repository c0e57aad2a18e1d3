//! Who reconciles next: claims wait for a reconcile slot in the order they were triggered, in
//! two lanes — claims of request sources (an admission call is waiting on them) and all others
//! — and while a request-source claim is queued or running, AccountClaims hold only a few slots,
//! so that neither a backlog of AccountClaims nor a claim that comes back again and again keeps
//! a webhook's claim waiting.
//!
//! Why not kube-runtime's own limit (`Config::concurrency`): once its slots are full, it parks
//! every due claim in a hash set and takes them back in hash order, not in the order they came.
//! A claim that requeues itself every 100 ms (waiting for its newer copy, or a lost
//! compare-and-swap) is parked and taken again and again, while a claim whose place in the set
//! comes late is not taken at all for minutes: the separate-garden chaos run saw a webhook's claim
//! never reconciled in two minutes after a takeover while the leader decided 236 others.
//!
//! Why AccountClaims step back while a source claim waits: the slots are not the bottleneck,
//! the garden is. gardener-apiserver admits ~2.5 new tenant bindings a second (docs/operating.md),
//! so sixteen AccountClaims claiming bindings put a webhook's binding write sixteen writes deep
//! in its queue, and after a takeover with hundreds of unsettled AccountClaims the webhook's
//! claims got about one reconcile a second between them (the chaos run after the first lanes).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::labels::{SOURCE_ID, SOURCE_KIND};
use crate::metrics::LaneLabels;

/// The lane a claim queues in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Created for a request source's object (Shoot, Runtime, Cluster): an admission call
    /// may be waiting for its decision, bounded by the webhook's decision timeout.
    Source,
    /// Every other claim (AccountClaims people and GitOps apply).
    Claims,
}

/// What decides a claim's lane.
#[derive(Clone, Copy, Debug)]
pub struct LaneFacts<'a> {
    pub namespace: Option<&'a str>,
    pub labels: &'a std::collections::BTreeMap<String, String>,
    /// Bound or denied with its finalizer: its reconcile only checks (the sweep brings every
    /// claim back), nobody waits for it.
    pub settled: bool,
}

/// The lane of a claim: the source lane for an unsettled claim the webhook created — in the
/// namespace of request-source claims (`source_namespace`, where tenants create nothing) and
/// labelled with the source's id and kind. Anything else, including an AccountClaim a tenant
/// labels so in its own namespace, queues with the AccountClaims.
pub fn lane_of(claim: LaneFacts<'_>, source_namespace: &str) -> Lane {
    let from_source =
        claim.labels.contains_key(SOURCE_ID) && claim.labels.contains_key(SOURCE_KIND);
    if from_source && !claim.settled && claim.namespace == Some(source_namespace) {
        Lane::Source
    } else {
        Lane::Claims
    }
}

/// The reconcile slots of both lanes.
#[derive(Clone, Debug)]
pub struct Lanes {
    inner: Arc<Inner>,
}

struct Inner {
    /// Slots of the source lane.
    source: usize,
    /// Slots of the claims lane while no source claim is queued or running, and while one is.
    claims: usize,
    claims_floor: usize,
    state: Mutex<State>,
    /// `hap_claim_reconciles_queued`, set whenever a queue changes.
    queued: Family<LaneLabels, Gauge>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("source", &self.source)
            .field("claims", &self.claims)
            .field("claims_floor", &self.claims_floor)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    running: [usize; 2],
    queued: [VecDeque<oneshot::Sender<Slot>>; 2],
    closed: bool,
}

/// A reconcile slot; it goes back to its lane when dropped.
#[derive(Debug)]
pub struct Slot {
    lanes: Arc<Inner>,
    lane: Lane,
    /// False for a slot that never reached its reconcile (taken back under the lock).
    armed: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut s = self.lanes.lock();
        s.running[self.lane as usize] -= 1;
        self.lanes.dispatch(&mut s);
    }
}

impl Lanes {
    /// `claims` slots for AccountClaims (an eighth of them, at least one, while a source claim
    /// is queued or running), `source` slots for request-source claims; each at least one.
    pub fn new(claims: u16, source: u16) -> Self {
        Self::with_gauge(claims, source, Family::default())
    }

    /// As `new`, reporting the queues' lengths in `queued` (`hap_claim_reconciles_queued`).
    pub fn with_gauge(claims: u16, source: u16, queued: Family<LaneLabels, Gauge>) -> Self {
        let claims = usize::from(claims.max(1));
        Self {
            inner: Arc::new(Inner {
                source: usize::from(source.max(1)),
                claims,
                claims_floor: (claims / 8).max(1),
                state: Mutex::new(State::default()),
                queued,
            }),
        }
    }

    /// Waits for a slot in `lane`, behind every reconcile that queued there earlier. `None`
    /// once the lanes are closed (the operator stops).
    pub async fn enter(&self, lane: Lane) -> Option<Slot> {
        let rx = {
            let mut s = self.inner.lock();
            if s.closed {
                return None;
            }
            let (tx, rx) = oneshot::channel();
            s.queued[lane as usize].push_back(tx);
            self.inner.dispatch(&mut s);
            rx
        };
        // A future dropped while it queues drops the receiver; a slot sent to it meanwhile is
        // dropped with it and goes back.
        rx.await.ok()
    }

    /// Sends every queued reconcile away without a slot: a stopping operator finishes the
    /// reconciles that run and starts no other (kube-runtime's graceful shutdown waits for
    /// every reconcile it started, and those queued here are started ones).
    pub fn close(&self) {
        let mut s = self.inner.lock();
        s.closed = true;
        s.queued.iter_mut().for_each(VecDeque::clear);
        self.inner.report(&s);
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between any two statements that can panic.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn report(&self, s: &State) {
        for (lane, name) in [(Lane::Source, "source"), (Lane::Claims, "claims")] {
            let queued = i64::try_from(s.queued[lane as usize].len()).unwrap_or(i64::MAX);
            self.queued
                .get_or_create(&LaneLabels { lane: name.into() })
                .set(queued);
        }
    }

    /// How many claims-lane reconciles may run now.
    fn claims_limit(&self, s: &State) -> usize {
        let source_active =
            s.running[Lane::Source as usize] > 0 || !s.queued[Lane::Source as usize].is_empty();
        if source_active {
            self.claims_floor
        } else {
            self.claims
        }
    }

    /// Hands free slots to the first queued reconciles, the source lane's first.
    fn dispatch(self: &Arc<Self>, s: &mut State) {
        for lane in [Lane::Source, Lane::Claims] {
            let i = lane as usize;
            loop {
                let limit = match lane {
                    Lane::Source => self.source,
                    Lane::Claims => self.claims_limit(s),
                };
                if s.running[i] >= limit {
                    break;
                }
                let Some(tx) = s.queued[i].pop_front() else {
                    break;
                };
                s.running[i] += 1;
                let slot = Slot {
                    lanes: self.clone(),
                    lane,
                    armed: true,
                };
                // Its reconcile is gone: the slot comes back unused (disarmed, as the lock is
                // held here).
                if let Err(mut unused) = tx.send(slot) {
                    unused.armed = false;
                    s.running[i] -= 1;
                }
            }
        }
        self.report(s);
    }
}

#[cfg(test)]
#[path = "lanes_tests.rs"]
mod tests;
