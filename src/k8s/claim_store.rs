//! The claim store: the claims a reconcile reads (`lean::StoredClaim`), kept by kube-runtime's
//! reflector store.
//! It holds a claim only while a reconcile may need it: every claim that is not settled
//! (`claim_state::settled`), and a settled one the index says needs a visit (`selection::needs_visit`,
//! fetched with one GET when it is not here), the latter only while the index can judge (every
//! cache a decision needs has listed). The index keeps every claim's view, and what the
//! request-source pass reads of a source's claim; at 100k Bound claims the store's copies were
//! 2 KB each, the larger half of the claims' memory.
//!
//! Its writer is shared (kube's `reflector()` would own it): the claim watch applies each event
//! to the ledger and then, translated (`to_store`), to the store, both under the ledger's lock;
//! the fetch of a settled claim inserts under the same two locks, in the same order (ledger,
//! then writer), so that neither overtakes the other with an older copy. Both locks are std
//! mutexes, never held across an await.

use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::watcher::Event;
use kube::{Api, Resource, ResourceExt};

use super::lean::{LeanClaim, StoredClaim};
use super::{Cluster, K8sError};
use crate::ledger::Ledger;
use crate::pools::is_newer;
use crate::selection::needs_visit;

/// What the claim store does with one claim watch event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToStore {
    /// Applies it as it is.
    AsIs,
    /// A claim the store no longer needs: its key goes (the store may hold an older copy).
    Remove,
    /// A listed claim the store does not need: left out of the new list.
    LeaveOut,
}

/// Where one claim watch event goes in the claim store, given whether the store holds the
/// event's claim (`holds`, see [`held`]): a settled `Apply` becomes a removal of its key, a
/// settled `InitApply` is left out of the re-list; everything else (a claim that is not settled,
/// a `Delete`, the list's bounds) as it is. Pure.
pub fn to_store<K>(ev: &Event<K>, holds: impl Fn(&K) -> bool) -> ToStore {
    match ev {
        Event::Apply(c) if !holds(c) => ToStore::Remove,
        Event::InitApply(c) if !holds(c) => ToStore::LeaveOut,
        _ => ToStore::AsIs,
    }
}

/// Whether the store holds `claim`, after the ledger has taken in its event: it is not settled,
/// or the index says it needs a visit (a settled claim fetched for one keeps it through events
/// that say nothing new, until its reconcile has recorded the new verdict). Only while the index
/// can judge (`judging`, `controller::can_judge`: a config is in force and the caches have
/// listed its bindings; asked only for a settled claim): before that every recorded binding
/// looks lost, and the store would hold every claim. The claims that need a visit then are
/// brought back once it can.
pub fn held(
    judging: impl FnOnce() -> bool,
    ledger: &Ledger,
    claim: &StoredClaim,
    now: Instant,
) -> bool {
    if !claim.is_settled() {
        return true;
    }
    if !judging() {
        return false;
    }
    let uid = claim.meta().uid.as_deref().unwrap_or_default();
    let (inv, inflight) = (&ledger.inventory, &ledger.inflight);
    inv.claim(uid)
        .is_some_and(|view| needs_visit(view, inv, inflight, now))
}

/// The claim store's writer, shared by the claim watch and the fetch of settled claims.
#[derive(Clone)]
pub struct ClaimWriter {
    writer: Arc<Mutex<Relisting>>,
    store: Store<StoredClaim>,
    /// Whether the index can judge settled claims now (`held`); `false` until `judge_by` gives
    /// the question.
    judging: Arc<RwLock<Judge>>,
}

/// kube's writer, and whether a re-list is open (from `Init` to `InitDone`): the writer then
/// fills a buffer that `InitDone` swaps in for the live map, and a claim fetched meanwhile must
/// go into both, or the swap drops it.
struct Relisting {
    writer: Writer<StoredClaim>,
    open: bool,
}

impl Relisting {
    fn apply_watcher_event(&mut self, ev: &Event<StoredClaim>) {
        match ev {
            Event::Init => self.open = true,
            Event::InitDone => self.open = false,
            _ => {}
        }
        self.writer.apply_watcher_event(ev);
    }

    /// A claim fetched for a visit: into the live map, and into the open re-list's buffer.
    fn insert(&mut self, claim: StoredClaim) {
        if self.open {
            self.writer
                .apply_watcher_event(&Event::InitApply(claim.clone()));
        }
        self.writer.apply_watcher_event(&Event::Apply(claim));
    }
}

/// Whether the index can judge settled claims now (`controller::can_judge`). Asked under the
/// ledger's lock: it must not take it, nor wait for a lock whose holder may wait for it.
pub type Judge = Arc<dyn Fn() -> bool + Send + Sync>;

impl ClaimWriter {
    /// An empty store that has not listed yet, and its writer.
    pub fn new() -> (Store<StoredClaim>, Self) {
        let writer = Writer::<StoredClaim>::default();
        let store = writer.as_reader();
        let shared = Self {
            writer: Arc::new(Mutex::new(Relisting {
                writer,
                open: false,
            })),
            store: store.clone(),
            judging: Arc::new(RwLock::new(Arc::new(|| false))),
        };
        (store, shared)
    }

    /// How to tell whether the index can judge settled claims now (`controller::can_judge`,
    /// the one definition also the fetch stage, the sweep and the revisits ask), asked afresh
    /// for every event.
    pub fn judge_by(&self, judge: Judge) {
        *self.judging.write().unwrap_or_else(|p| p.into_inner()) = judge;
    }

    /// A fixed answer to whether the index can judge (tests).
    #[cfg(test)]
    pub fn judge(&self, on: bool) {
        self.judge_by(Arc::new(move || on));
    }

    fn judging(&self) -> bool {
        let judge = self
            .judging
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        judge()
    }

    /// A store that has listed `claims` (all of them, as given), its index able to judge (tests).
    #[cfg(test)]
    pub fn listed(claims: Vec<StoredClaim>) -> (Store<StoredClaim>, Self) {
        let (store, writer) = Self::new();
        writer.judge(true);
        {
            let mut w = writer.lock();
            w.apply_watcher_event(&Event::Init);
            for c in claims {
                w.apply_watcher_event(&Event::InitApply(c));
            }
            w.apply_watcher_event(&Event::InitDone);
        }
        (store, writer)
    }

    /// Takes `claim` out of the store, as the claim watch leaves a settled claim out (tests).
    #[cfg(test)]
    pub fn forget(&self, claim: &StoredClaim) {
        self.lock()
            .apply_watcher_event(&Event::Delete(claim.clone()));
    }

    fn lock(&self) -> MutexGuard<'_, Relisting> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One claim watch event, as `to_store` says; `ledger` has just taken it in (and is held
    /// locked by the caller).
    pub fn apply(&self, ev: &Event<StoredClaim>, ledger: &Ledger, now: Instant) {
        let mut writer = self.lock();
        match (
            to_store(ev, |c| held(|| self.judging(), ledger, c, now)),
            ev,
        ) {
            // A lagging event must not overwrite a newer copy fetched for a visit.
            (ToStore::AsIs, Event::Apply(c)) if self.holds_newer(c) => {}
            (ToStore::AsIs, _) => writer.apply_watcher_event(ev),
            (ToStore::Remove, Event::Apply(c)) => {
                writer.apply_watcher_event(&Event::Delete(c.clone()));
            }
            _ => {}
        }
    }

    /// Whether the store holds a copy of `claim` with a higher resourceVersion (both numbers).
    fn holds_newer(&self, claim: &StoredClaim) -> bool {
        let key = kube::runtime::reflector::ObjectRef::from_obj(claim);
        let number = |rv: Option<String>| rv.and_then(|rv| rv.parse::<u64>().ok());
        self.store.get(&key).is_some_and(|stored| {
            matches!(
                (number(stored.resource_version()), number(claim.resource_version())),
                (Some(stored), Some(new)) if stored > new
            )
        })
    }

    /// A claim fetched for the visit of the claim with uid `uid`, into the store (and into an
    /// open re-list's buffer) unless it is another claim of that name (re-created, another
    /// uid), the store or the index already has a newer version of it, the index no longer
    /// has it (deleted meanwhile: no event would take it out again), or the store would not
    /// hold it now (`held`: the visit is no longer needed). A version the index does
    /// not know does not count as newer. `ledger` is held locked by the caller. Returns whether
    /// it went in.
    pub fn insert_fetched(
        &self,
        claim: StoredClaim,
        uid: &str,
        ledger: &Ledger,
        now: Instant,
    ) -> bool {
        if claim.meta().uid.as_deref() != Some(uid) {
            return false;
        }
        let rv = claim.resource_version();
        let Some(view) = ledger.inventory.claim(uid) else {
            return false;
        };
        // Asked again now that the GET has answered: the visit may no longer be needed (the
        // binding came back, another pass visited), and nothing would take the copy out before
        // the next sweep.
        if !held(|| self.judging(), ledger, &claim, now) {
            return false;
        }
        let newer = |known: Option<&str>| known.is_some() && is_newer(known, rv.as_deref());
        if newer(view.resource_version.as_deref()) {
            return false;
        }
        let mut writer = self.lock();
        let key = kube::runtime::reflector::ObjectRef::from_obj(&claim);
        if let Some(stored) = self.store.get(&key)
            && newer(stored.resource_version().as_deref())
        {
            return false;
        }
        writer.insert(claim);
        true
    }

    /// Takes out the settled claims the store no longer needs (`held`): one fetched for a visit
    /// whose reconcile wrote nothing (the inventory moved back meanwhile) would stay until its
    /// next event. The sweep calls it, holding `ledger` locked; the store holds only the
    /// claims that are not settled, so this walks few. Returns how many went.
    pub fn prune(&self, ledger: &Ledger, now: Instant) -> usize {
        let mut writer = self.lock();
        // Asked once for the walk, and only if a settled claim needs the answer.
        let judging = std::cell::OnceCell::new();
        let gone: Vec<_> = self
            .store
            .state()
            .into_iter()
            .filter(|c| !held(|| *judging.get_or_init(|| self.judging()), ledger, c, now))
            .collect();
        for c in &gone {
            writer.apply_watcher_event(&Event::Delete((**c).clone()));
        }
        gone.len()
    }
}

/// One GET of a claim, decoded as the watch decodes it; `None` when it does not exist.
pub async fn fetch(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
) -> Result<Option<StoredClaim>, K8sError> {
    let api: Api<LeanClaim> = Api::namespaced(cluster.kube().clone(), namespace);
    api.get_opt(name)
        .await
        .map(|c| c.map(StoredClaim::from))
        .map_err(|e| K8sError::classify("read", format!("AccountClaim {namespace}/{name}"), e))
}

#[cfg(test)]
mod tests;
