//! Who reconciles next: claims wait for a reconcile slot in the order they were triggered, in
//! three lanes — claims of request sources (an admission call is waiting on them), those of them
//! the rules send to a shared pool, and all others — and while a request-source claim is queued
//! or running, AccountClaims hold only a few slots, so that neither a backlog of AccountClaims
//! nor a claim that comes back again and again keeps a webhook's claim waiting.
//!
//! Why shared-pool claims have a lane of their own: a use of a shared binding writes nothing on
//! it, while every other source claim's decision writes its binding and waits for the garden's
//! admission (~2.5 writes a second). Once callers outran that rate, the claims kept for their
//! retries held every source slot, and a shared-pool request, which the leader decides in
//! milliseconds, waited in line behind them until its decision timeout: every one was denied
//! (BENCHMARKS.md, issue 35).
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
//!
//! Why a claim does not wait for its slot inside its reconcile: kube-runtime's controller polls
//! every reconcile in flight each time it wakes (`FutureHashMap`), and it wakes for every
//! trigger and every finished reconcile. With a thousand claims waiting in their reconciles
//! that polling took a fifth of the operator's CPU (`make bench`'s throughput mix: 1.25 ms per
//! claim, with kube-runtime's join handles on top of the profile). A claim without a free slot
//! now takes its place in line and its reconcile ends; when its turn comes a slot is kept for
//! it and its reconcile is started again (`kick`: `controller::turns`, a trigger stream of its
//! own). The claim watch's triggers go through the line before the controller
//! (`past_the_line`): a claim others wait before takes its place without a reconcile, so that
//! after a take-over's list kube-runtime's scheduler does not hold a request for every claim in
//! line too.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::{Stream, StreamExt};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::labels::{SOURCE_ID, SOURCE_KIND};
use crate::metrics::LaneLabels;

/// How long a slot is kept for a claim whose turn came, from the kick to its reconcile. A claim
/// the store no longer holds gives its slot back at once (`forget`); this bounds the rest: a
/// claim gone between that check and its reconcile (the next kick finds it gone), or a kick held
/// up (kube-runtime pauses its triggers briefly after a watch error). The claim then goes back to
/// the front of its lane and, as a slot is free, is kicked again at once.
pub const GRANT_TTL: Duration = Duration::from_secs(5);

/// A line emptied that had held more than this many claims gives its memory back.
const SHRINK_ABOVE: usize = 1024;

/// The lane a claim queues in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Created for a request source's object (Shoot, Runtime, Cluster): an admission call
    /// may be waiting for its decision, bounded by the webhook's decision timeout.
    Source,
    /// A `Source` claim whose decision writes no binding (`LaneFacts::writes_no_binding`), so
    /// it does not wait behind claims whose binding writes wait for the garden.
    Shared,
    /// Every other claim (AccountClaims people and GitOps apply).
    Claims,
}

impl Lane {
    const ALL: [Lane; 3] = [Lane::Source, Lane::Shared, Lane::Claims];

    /// Its `lane` label on `hap_claim_reconciles_queued`.
    fn label(self) -> &'static str {
        match self {
            Lane::Source => "source",
            Lane::Shared => "shared",
            Lane::Claims => "claims",
        }
    }

    /// Whether an admission call may be waiting on its claims.
    fn is_source(self) -> bool {
        self != Lane::Claims
    }
}

/// What decides a claim's lane.
#[derive(Clone, Copy, Debug)]
pub struct LaneFacts<'a> {
    pub namespace: Option<&'a str>,
    pub labels: &'a std::collections::BTreeMap<String, String>,
    /// Bound or denied with its finalizer: its reconcile only checks (the sweep brings every
    /// claim back), nobody waits for it.
    pub settled: bool,
    /// Its decision cannot write a binding: the rules in force send it to shared pools only
    /// (every preference), and it adopts nothing and its tenant has no pin. Asked only of a
    /// claim that would otherwise take the source lane.
    pub writes_no_binding: bool,
}

/// The lane of a claim: a source lane for an unsettled claim the webhook created — in the
/// namespace of request-source claims (`source_namespace`, where tenants create nothing) and
/// labelled with the source's id and kind —, the shared one if its decision writes no binding.
/// Anything else, including an AccountClaim a tenant labels so in its own namespace, queues with
/// the AccountClaims.
pub fn lane_of(claim: LaneFacts<'_>, source_namespace: &str) -> Lane {
    let from_source =
        claim.labels.contains_key(SOURCE_ID) && claim.labels.contains_key(SOURCE_KIND);
    match from_source && !claim.settled && claim.namespace == Some(source_namespace) {
        false => Lane::Claims,
        true if claim.writes_no_binding => Lane::Shared,
        true => Lane::Source,
    }
}

/// The triggers of `refs` that go to the controller now (`Lanes::line_up` says which); the
/// others wait in `lanes` for their turn. `lane` names a key's lane, or none for a claim the
/// store no longer holds: it leaves the line, and its trigger is dropped (the controller would
/// find nothing to reconcile).
pub fn past_the_line<K: Key>(
    lanes: Lanes<K>,
    refs: impl Stream<Item = K> + Send,
    lane: impl Fn(&K) -> Option<Lane> + Send,
) -> impl Stream<Item = K> + Send {
    refs.filter(move |key| {
        let now = match lane(key) {
            Some(l) => !lanes.line_up(key, l),
            None => {
                lanes.forget(key);
                false
            }
        };
        futures::future::ready(now)
    })
}

/// What `enter` gives a reconcile.
#[derive(Debug)]
pub enum Entry<K: Key> {
    /// Its slot: the reconcile runs now.
    Run(Slot<K>),
    /// Every slot is taken, or others queued before it: the claim keeps (or takes) its place in
    /// line and its reconcile ends now; `kick` starts its next one when a slot is kept for it.
    Queued,
    /// The operator stops: the next leader reconciles it.
    Closed,
}

/// What the lanes queue: a claim's ref in the operator, any ref in the tests.
pub trait Key: Clone + Eq + Hash + Send + Sync + std::fmt::Debug + 'static {}
impl<T: Clone + Eq + Hash + Send + Sync + std::fmt::Debug + 'static> Key for T {}

/// The reconcile slots of both lanes.
#[derive(Clone)]
pub struct Lanes<K: Key> {
    inner: Arc<Inner<K>>,
}

impl<K: Key> std::fmt::Debug for Lanes<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes")
            .field("source", &self.inner.source)
            .field("claims", &self.inner.claims)
            .field("claims_floor", &self.inner.claims_floor)
            .finish_non_exhaustive()
    }
}

struct Inner<K: Key> {
    /// Slots of the source lane, and as many of the shared lane.
    source: usize,
    /// Slots of the claims lane while no source claim is queued or running.
    claims: usize,
    /// Slots of the claims lane while one is.
    claims_floor: usize,
    state: Mutex<State<K>>,
    /// `hap_claim_reconciles_queued` of each lane, in `Lane::ALL`'s order.
    queued: [Gauge; 3],
    /// Starts a reconcile of a claim whose turn came.
    kick: Box<dyn Fn(K) + Send + Sync>,
}

struct State<K> {
    running: [usize; 3],
    queued: [VecDeque<K>; 3],
    /// Every key in `queued` and its lane, so that a claim triggered again keeps its one place.
    in_line: HashMap<K, Lane>,
    /// The keys whose reconciles hold slots (kube-runtime runs one reconcile of a key at a time).
    running_keys: HashSet<K>,
    /// Slots kept for claims that were kicked and whose reconcile has not come yet; counted in
    /// `running`.
    kept: HashMap<K, Kept>,
    next_id: u64,
    closed: bool,
}

impl<K> Default for State<K> {
    fn default() -> Self {
        Self {
            running: [0; 3],
            queued: [VecDeque::new(), VecDeque::new(), VecDeque::new()],
            in_line: HashMap::new(),
            running_keys: HashSet::new(),
            kept: HashMap::new(),
            next_id: 0,
            closed: false,
        }
    }
}

/// A slot kept for a kicked claim; the id tells a later grant to the same claim from it.
#[derive(Clone, Copy, Debug)]
struct Kept {
    lane: Lane,
    id: u64,
}

/// A reconcile slot; it goes back to its lane when dropped.
pub struct Slot<K: Key> {
    lanes: Arc<Inner<K>>,
    lane: Lane,
    key: K,
}

impl<K: Key> std::fmt::Debug for Slot<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("lane", &self.lane).finish()
    }
}

impl<K: Key> Drop for Slot<K> {
    fn drop(&mut self) {
        let kicks = {
            let mut s = self.lanes.lock();
            s.running[self.lane as usize] -= 1;
            s.running_keys.remove(&self.key);
            self.lanes.dispatch(&mut s)
        };
        self.lanes.send(kicks);
    }
}

impl<K: Key> Lanes<K> {
    /// `claims` slots for AccountClaims (an eighth of them, at least one, while a source claim
    /// is queued or running), `source` slots for request-source claims and as many for those of
    /// shared pools; each at least one.
    /// `kick` starts the reconcile of a claim whose turn came.
    pub fn new(claims: u16, source: u16, kick: impl Fn(K) + Send + Sync + 'static) -> Self {
        Self::with_gauge(claims, source, Family::default(), kick)
    }

    /// As `new`, reporting the queues' lengths in `queued` (`hap_claim_reconciles_queued`).
    pub fn with_gauge(
        claims: u16,
        source: u16,
        queued: Family<LaneLabels, Gauge>,
        kick: impl Fn(K) + Send + Sync + 'static,
    ) -> Self {
        let claims = usize::from(claims.max(1));
        let gauge = |lane: &str| {
            queued
                .get_or_create(&LaneLabels { lane: lane.into() })
                .clone()
        };
        Self {
            inner: Arc::new(Inner {
                source: usize::from(source.max(1)),
                claims,
                claims_floor: (claims / 8).max(1),
                state: Mutex::new(State::default()),
                queued: Lane::ALL.map(|l| gauge(l.label())),
                kick: Box::new(kick),
            }),
        }
    }

    /// A slot in `lane` for `key`'s reconcile: the one kept for it if its turn came, or a free
    /// one if nobody queued before it. Otherwise it takes its place in line (or keeps the one
    /// it has) and its reconcile ends: it never waits inside kube-runtime's controller, which
    /// polls every reconcile in flight each time it wakes.
    pub fn enter(&self, key: &K, lane: Lane) -> Entry<K> {
        let (entry, kicks) = {
            let mut s = self.inner.lock();
            if s.closed {
                return Entry::Closed;
            }
            if let Some(kept) = s.kept.remove(key) {
                return Entry::Run(self.inner.slot(&mut s, key, kept.lane));
            }
            s.line_up(key, lane);
            let mut kicks = self.inner.dispatch(&mut s);
            let entry = match kicks.iter().position(|(k, _)| k == key) {
                Some(i) => {
                    let (own, _) = kicks.remove(i);
                    let kept = s.kept.remove(&own).map_or(lane, |k| k.lane);
                    Entry::Run(self.inner.slot(&mut s, key, kept))
                }
                None => Entry::Queued,
            };
            (entry, kicks)
        };
        self.inner.send(kicks);
        entry
    }

    /// Puts `key` in line for a slot with no reconcile of its own, and says so: its turn (at
    /// once if a slot is free) kicks its reconcile. kube-runtime's controller then holds only
    /// the claims whose turn came, not a request for every claim in line (~740 bytes each in
    /// its scheduler after a take-over's list; BENCHMARKS.md, Take-over), and a claim is not
    /// reconciled once only to be told to queue. (A slot is not free for the asking: a list
    /// hands on thousands of claims before the first reconcile begins.) False, and the trigger
    /// goes to the controller as before the lanes saw it, when:
    /// - a reconcile of `key` holds a slot (kube-runtime runs it once more when this one ends):
    ///   kept here, a claim whose own write's event came back while it waits on the garden
    ///   would hold a second slot;
    /// - a slot is kept for `key`: its reconcile may have read the claim already, before this
    ///   trigger's change; kube-runtime merges the trigger with the kick, or runs it after.
    pub fn line_up(&self, key: &K, lane: Lane) -> bool {
        let kicks = {
            let mut s = self.inner.lock();
            if s.closed {
                // The next leader reconciles it.
                return true;
            }
            if s.running_keys.contains(key) || s.kept.contains_key(key) {
                return false;
            }
            s.line_up(key, lane);
            self.inner.dispatch(&mut s)
        };
        self.inner.send(kicks);
        true
    }

    /// Slots kept for kicked claims (`hap_internal_entries`); the claims in line are
    /// `hap_claim_reconciles_queued`.
    pub fn kept(&self) -> usize {
        self.inner.lock().kept.len()
    }

    /// `key`'s claim is gone from the store (deleted, or settled, while in line): its kept slot
    /// goes to the next in line, or it leaves the line.
    pub fn forget(&self, key: &K) {
        let kicks = {
            let mut s = self.inner.lock();
            if let Some(kept) = s.kept.remove(key) {
                s.running[kept.lane as usize] -= 1;
            } else if let Some(lane) = s.in_line.remove(key) {
                s.queued[lane as usize].retain(|k| k != key);
            }
            self.inner.dispatch(&mut s)
        };
        self.inner.send(kicks);
    }

    /// Empties the queues and keeps no more slots: a stopping operator starts no reconcile
    /// (kube-runtime's graceful shutdown waits for the ones that run).
    pub fn close(&self) {
        let mut s = self.inner.lock();
        s.closed = true;
        s.queued.iter_mut().for_each(VecDeque::clear);
        s.in_line.clear();
        for (_, kept) in std::mem::take(&mut s.kept) {
            s.running[kept.lane as usize] -= 1;
        }
        self.inner.report(&s);
    }
}

impl<K: Key> State<K> {
    /// `key` takes its place at the back of `lane`, unless it has one. A claim in line with the
    /// AccountClaims that has become a request source's unsettled claim moves to its source lane
    /// (an admission call may wait on it now), and one whose pool changed with the rules moves
    /// between the source lanes.
    fn line_up(&mut self, key: &K, lane: Lane) {
        match self.in_line.get(key) {
            None => {}
            Some(&held) if held != lane && lane.is_source() => {
                self.queued[held as usize].retain(|k| k != key);
            }
            Some(_) => return,
        }
        self.in_line.insert(key.clone(), lane);
        self.queued[lane as usize].push_back(key.clone());
    }
}

impl<K: Key> Inner<K> {
    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // The state is consistent between any two statements that can panic.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `key`'s slot, counted in `running` already.
    fn slot(self: &Arc<Self>, s: &mut State<K>, key: &K, lane: Lane) -> Slot<K> {
        s.running_keys.insert(key.clone());
        Slot {
            lanes: self.clone(),
            lane,
            key: key.clone(),
        }
    }

    fn report(&self, s: &State<K>) {
        for lane in Lane::ALL {
            let queued = i64::try_from(s.queued[lane as usize].len()).unwrap_or(i64::MAX);
            self.queued[lane as usize].set(queued);
        }
    }

    /// How many reconciles of `lane` may run now.
    fn limit(&self, s: &State<K>, lane: Lane) -> usize {
        match lane {
            Lane::Source | Lane::Shared => self.source,
            Lane::Claims => self.claims_limit(s),
        }
    }

    /// How many claims-lane reconciles may run now.
    fn claims_limit(&self, s: &State<K>) -> usize {
        let source_active = Lane::ALL
            .iter()
            .filter(|l| l.is_source())
            .any(|&l| s.running[l as usize] > 0 || !s.queued[l as usize].is_empty());
        if source_active {
            self.claims_floor
        } else {
            self.claims
        }
    }

    /// Keeps free slots for the first queued claims, the source lanes' first; returns them
    /// (to kick once the lock is gone) with the id of each kept slot.
    fn dispatch(&self, s: &mut State<K>) -> Vec<(K, u64)> {
        let mut kicks = Vec::new();
        for lane in Lane::ALL {
            let i = lane as usize;
            loop {
                if s.running[i] >= self.limit(s, lane) {
                    break;
                }
                let Some(key) = s.queued[i].pop_front() else {
                    break;
                };
                if s.queued[i].is_empty() && s.queued[i].capacity() > SHRINK_ABOVE {
                    // A takeover lines up every unsettled claim; the line then gives it back.
                    s.queued[i].shrink_to_fit();
                }
                s.in_line.remove(&key);
                if s.in_line.is_empty() && s.in_line.capacity() > SHRINK_ABOVE {
                    s.in_line.shrink_to_fit();
                }
                s.running[i] += 1;
                s.next_id += 1;
                let id = s.next_id;
                s.kept.insert(key.clone(), Kept { lane, id });
                kicks.push((key, id));
            }
        }
        self.report(s);
        kicks
    }

    /// Kicks the claims whose slots were kept, each with a timer that gives its slot to the
    /// next in line if no reconcile came for it (`GRANT_TTL`).
    fn send(self: &Arc<Self>, kicks: Vec<(K, u64)>) {
        for (key, id) in kicks {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let (inner, key) = (self.clone(), key.clone());
                runtime.spawn(async move {
                    tokio::time::sleep(GRANT_TTL).await;
                    inner.expire(&key, id);
                });
            }
            (self.kick)(key);
        }
    }

    /// The slot kept for `key` under `id` goes back if no reconcile took it, and the claim to
    /// the front of its lane: it keeps its place, and is kicked again when a slot is free.
    fn expire(self: &Arc<Self>, key: &K, id: u64) {
        let kicks = {
            let mut s = self.lock();
            match s.kept.get(key) {
                Some(kept) if kept.id == id => {
                    let lane = kept.lane;
                    s.kept.remove(key);
                    s.running[lane as usize] -= 1;
                    if s.in_line.insert(key.clone(), lane).is_none() {
                        s.queued[lane as usize].push_front(key.clone());
                    }
                    tracing::debug!(?key, "no reconcile came for a kept slot; kicking again");
                    self.dispatch(&mut s)
                }
                _ => return,
            }
        };
        self.send(kicks);
    }
}

#[cfg(test)]
#[path = "lanes_tests.rs"]
mod tests;
