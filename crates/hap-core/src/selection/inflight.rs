//! Writes the operator has made (or is making) that the inventory index does not show yet — the
//! "expectations" of Gardener and client-go. Selection and release read the index *through* this
//! structure, so that a claim written a moment ago counts as if the index already showed it.
//!
//! Three kinds of record:
//! - a **claim** of binding X for tenant T in pool P: X is offered to nobody else; once Written it
//!   is T's binding in P; while Writing or Unknown, T's other claims in P wait instead of claiming
//!   a second binding, and the claim that made it retries the same compare-and-swap;
//! - a **release** of binding X (dirty label): X is neither reused nor claimed;
//! - an **assignment** of a claim's cluster to binding X (the claim's status is about to say
//!   Bound): the cluster counts toward X's limit and keeps X from being released.
//!
//! A record ends only when the index shows the write's outcome (`observe_*`: the object at a
//! later version than the write was conditioned on, or deleted), when the write definitely failed
//! (the server refused it), when it is explicitly forgotten, or when it expires. A view that lacks
//! the object ends nothing, and the index never goes backwards, so a lagging view cannot end a
//! record early. A write whose outcome is unknown (timeout, connection lost) may have committed:
//! it stays `Unknown` until the index shows the object's new state. The time to live exceeds
//! kube-apiserver's request timeout (60 s), after which a write that did not commit never will.
//! Clocks are never read here: callers pass `now`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::Choice;
use crate::labels::PoolKey;
use crate::pools::{BindingClass, BindingEntry, ClaimView, is_newer};

/// How long a record outlives its write at most.
pub const DEFAULT_TTL: Duration = Duration::from_secs(120);

/// Where a write stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteState {
    /// Sent; the API server has not answered.
    Writing,
    /// Accepted by the API server; the index has not shown it yet.
    Written,
    /// No answer (timeout, connection lost): it may or may not have committed.
    Unknown,
}

/// A claim of a binding for a tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingClaim {
    pub tenant: String,
    pub pool: PoolKey,
    /// The resourceVersion the write was conditioned on; the index at a later one shows it.
    pub base_resource_version: Option<String>,
    /// The AccountClaim whose selection made this claim.
    pub claim_uid: String,
    pub state: WriteState,
    /// An earlier attempt ended with an unknown outcome: a refused retry proves nothing.
    pub doubt: bool,
    pub since: Instant,
}

/// A release (dirty label) of a binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRelease {
    pub base_resource_version: Option<String>,
    pub state: WriteState,
    pub doubt: bool,
    pub since: Instant,
}

/// A cluster placed on a binding by a status write the index has not shown yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingAssignment {
    pub binding: String,
    pub cluster: String,
    /// The claim's resourceVersion the status write was conditioned on.
    pub base_resource_version: Option<String>,
    pub state: WriteState,
    pub doubt: bool,
    pub since: Instant,
}

/// The records of one operator process. Not thread-safe by itself: the controller keeps it with
/// the index behind one mutex (`crate::ledger`), and never holds that mutex across a write.
#[derive(Clone, Debug)]
pub struct InFlight {
    ttl: Duration,
    claims: BTreeMap<String, PendingClaim>,
    releases: BTreeMap<String, PendingRelease>,
    assignments: BTreeMap<String, PendingAssignment>,
    /// Claims whose claim write committed, with the binding it won, until their status records
    /// it or their finalizer goes: a claim deleted in between still releases that binding.
    won: BTreeMap<String, (String, Instant)>,
    /// Claims whose finalizer this process removed: gone, though a store may still hold them
    /// until their deletion event arrives. Nothing is decided for them again.
    finished: BTreeMap<String, Instant>,
    /// Claims whose status this process wrote, with the version the write produced, until the
    /// index shows that version: a copy older than it is not decided on again.
    statuses: BTreeMap<String, (String, Instant)>,
}

impl Default for InFlight {
    fn default() -> Self {
        Self::new(DEFAULT_TTL)
    }
}

/// The state after a refusal: a write that may have committed before stays in doubt, and one
/// another attempt already wrote stays written. Returns whether the record stays.
fn refused(state: &mut WriteState, doubt: bool) -> bool {
    if *state == WriteState::Written {
        return true;
    }
    if doubt {
        *state = WriteState::Unknown;
    }
    doubt
}

impl InFlight {
    /// An empty structure whose records live at most `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            claims: BTreeMap::new(),
            releases: BTreeMap::new(),
            assignments: BTreeMap::new(),
            won: BTreeMap::new(),
            finished: BTreeMap::new(),
            statuses: BTreeMap::new(),
        }
    }

    /// How many records of each kind are held (`hap_internal_entries`): each ends when its
    /// write shows in the index or its time-to-live passes, so they do not grow with the landscape.
    pub fn entry_counts(&self) -> [(&'static str, usize); 6] {
        [
            ("inflight_claims", self.claims.len()),
            ("inflight_releases", self.releases.len()),
            ("inflight_assignments", self.assignments.len()),
            ("inflight_won", self.won.len()),
            ("inflight_finished", self.finished.len()),
            ("inflight_statuses", self.statuses.len()),
        ]
    }

    fn live(&self, since: Instant, now: Instant) -> bool {
        now.saturating_duration_since(since) < self.ttl
    }

    /// Records what `choice` is about to write for `claim`: call right after `select`, under the
    /// same lock, before sending anything. Choosing again what an earlier attempt chose (a retry)
    /// keeps that attempt's doubt.
    pub fn record(&mut self, claim: &ClaimView, pool: &PoolKey, choice: &Choice, now: Instant) {
        let binding = match choice {
            Choice::Claim {
                binding,
                expected_resource_version,
            } => {
                // An earlier attempt not known to have failed (unanswered, or dropped mid-way)
                // may have committed.
                let prior = self
                    .claims
                    .get(binding)
                    .filter(|p| p.claim_uid == claim.uid);
                let doubt = prior.is_some_and(|p| p.doubt || p.state != WriteState::Written);
                let pending = PendingClaim {
                    tenant: claim.global_account.clone(),
                    pool: pool.clone(),
                    base_resource_version: expected_resource_version.clone(),
                    claim_uid: claim.uid.clone(),
                    state: WriteState::Writing,
                    doubt,
                    since: now,
                };
                self.claims.insert(binding.clone(), pending);
                binding
            }
            Choice::Use { binding, .. } => binding,
            _ => return,
        };
        let prior = self
            .assignments
            .get(&claim.uid)
            .filter(|a| a.binding == *binding);
        let doubt = prior.is_some_and(|a| a.doubt || a.state == WriteState::Unknown);
        let assignment = PendingAssignment {
            binding: binding.clone(),
            cluster: claim.cluster_name(),
            base_resource_version: claim.resource_version.clone(),
            state: WriteState::Writing,
            doubt,
            since: now,
        };
        self.assignments.insert(claim.uid.clone(), assignment);
    }

    /// The claim write of `binding` succeeded.
    pub fn claim_written(&mut self, binding: &str, now: Instant) {
        if let Some(p) = self.claims.get_mut(binding) {
            p.state = WriteState::Written;
            p.since = now;
            self.won
                .insert(p.claim_uid.clone(), (binding.to_string(), now));
        }
    }

    /// The server refused the claim write of `binding` (conflict, not found, invalid): the
    /// binding is offered again and the claim's cluster leaves it — unless an earlier attempt
    /// may have committed, in which case the record waits for the index.
    pub fn claim_failed(&mut self, binding: &str) {
        let Some(p) = self.claims.get_mut(binding) else {
            return;
        };
        if refused(&mut p.state, p.doubt) {
            return;
        }
        if let Some(p) = self.claims.remove(binding)
            && self
                .assignments
                .get(&p.claim_uid)
                .is_some_and(|a| a.binding == binding)
        {
            self.assignments.remove(&p.claim_uid);
        }
    }

    /// The claim write of `binding` got no answer.
    pub fn claim_unknown(&mut self, binding: &str, now: Instant) {
        if let Some(p) = self.claims.get_mut(binding) {
            p.state = WriteState::Unknown;
            p.since = now;
        }
    }

    /// The claim's Bound status was written.
    pub fn assignment_written(&mut self, claim_uid: &str, now: Instant) {
        if let Some(a) = self.assignments.get_mut(claim_uid) {
            a.state = WriteState::Written;
            a.since = now;
        }
    }

    /// The server refused the claim's Bound status: its cluster leaves the binding, unless an
    /// earlier attempt may have committed.
    pub fn assignment_failed(&mut self, claim_uid: &str) {
        if let Some(a) = self.assignments.get_mut(claim_uid)
            && !refused(&mut a.state, a.doubt)
        {
            self.assignments.remove(claim_uid);
        }
    }

    /// The claim's Bound status write got no answer.
    pub fn assignment_unknown(&mut self, claim_uid: &str, now: Instant) {
        if let Some(a) = self.assignments.get_mut(claim_uid) {
            a.state = WriteState::Unknown;
            a.since = now;
        }
    }

    /// The claim's finalizer was removed: its cluster no longer lands anywhere. A claim record it
    /// made stays until the index shows the binding, as that write may own the binding.
    pub fn forget_claim(&mut self, claim_uid: &str, now: Instant) {
        self.assignments.remove(claim_uid);
        self.won.remove(claim_uid);
        self.finished.insert(claim_uid.to_string(), now);
    }

    /// The claim's status was written, producing `resource_version`.
    pub fn status_written(&mut self, claim_uid: &str, resource_version: String, now: Instant) {
        self.statuses
            .insert(claim_uid.to_string(), (resource_version, now));
    }

    /// Whether this process wrote the claim's status at a later version than `resource_version`
    /// (a copy that does not show that write yet).
    pub fn wrote_after(
        &self,
        claim_uid: &str,
        resource_version: Option<&str>,
        now: Instant,
    ) -> bool {
        self.statuses.get(claim_uid).is_some_and(|(rv, since)| {
            self.live(*since, now) && is_newer(Some(rv), resource_version)
        })
    }

    /// Whether this process removed the claim's finalizer (within the time to live).
    pub fn is_finished(&self, claim_uid: &str, now: Instant) -> bool {
        self.finished
            .get(claim_uid)
            .is_some_and(|since| self.live(*since, now))
    }

    /// Drops a claim's assignment: nothing is to be bound for it (a deleting claim).
    pub fn drop_assignment(&mut self, claim_uid: &str) {
        self.assignments.remove(claim_uid);
    }

    /// The binding a claim's own claim write won, while its status does not record it yet.
    pub fn won_by(&self, claim_uid: &str, now: Instant) -> Option<&str> {
        self.won
            .get(claim_uid)
            .filter(|(_, since)| self.live(*since, now))
            .map(|(b, _)| b.as_str())
    }

    /// The claim write of `binding` that claim `claim_uid` made was given back (another binding
    /// of the account was found held): the binding is no longer the claim's, neither to release
    /// nor to use. The give-back itself is a release write (`release_started` before it is sent,
    /// its outcome after), so that nothing takes the binding until the index shows it without
    /// the tenant, and a version the watch brought before the answer ends it.
    pub fn gave_back(&mut self, claim_uid: &str, binding: &str) {
        if self.won.get(claim_uid).is_some_and(|(b, _)| b == binding) {
            self.won.remove(claim_uid);
        }
        if self
            .claims
            .get(binding)
            .is_some_and(|p| p.claim_uid == claim_uid)
        {
            self.claims.remove(binding);
        }
        if self
            .assignments
            .get(claim_uid)
            .is_some_and(|a| a.binding == binding)
        {
            self.assignments.remove(claim_uid);
        }
    }

    /// A release write of `binding`, conditioned on `base_resource_version`, is about to be sent.
    pub fn release_started(
        &mut self,
        binding: &str,
        base_resource_version: Option<String>,
        now: Instant,
    ) {
        let doubt = self
            .releases
            .get(binding)
            .is_some_and(|p| p.doubt || p.state == WriteState::Unknown);
        let pending = PendingRelease {
            base_resource_version,
            state: WriteState::Writing,
            doubt,
            since: now,
        };
        self.releases.insert(binding.to_string(), pending);
    }

    /// The release write of `binding` succeeded.
    pub fn release_written(&mut self, binding: &str, now: Instant) {
        if let Some(p) = self.releases.get_mut(binding) {
            p.state = WriteState::Written;
            p.since = now;
        }
    }

    /// The server refused the release write of `binding`.
    pub fn release_failed(&mut self, binding: &str) {
        if let Some(p) = self.releases.get_mut(binding)
            && !refused(&mut p.state, p.doubt)
        {
            self.releases.remove(binding);
        }
    }

    /// The release write of `binding` got no answer.
    pub fn release_unknown(&mut self, binding: &str, now: Instant) {
        if let Some(p) = self.releases.get_mut(binding) {
            p.state = WriteState::Unknown;
            p.since = now;
        }
    }

    /// The index now holds `entry` for binding `name` (`None`: deleted). Ends the claim and
    /// release records whose outcome it shows.
    pub fn observe_binding(&mut self, name: &str, entry: Option<&BindingEntry>) {
        let shown = |state: WriteState, base: &Option<String>| {
            entry.is_none_or(|e| {
                state != WriteState::Writing
                    && is_newer(e.view.resource_version.as_deref(), base.as_deref())
            })
        };
        if let Some(p) = self
            .claims
            .get(name)
            .filter(|p| shown(p.state, &p.base_resource_version))
        {
            // A write in doubt that the index shows won: the binding is the claim's.
            let won = entry.and_then(|e| e.pool.as_ref()).is_some_and(
                |(_, class)| matches!(class, BindingClass::Owned { tenant } if *tenant == p.tenant),
            );
            if won && p.state == WriteState::Unknown {
                self.won
                    .insert(p.claim_uid.clone(), (name.to_string(), p.since));
            }
            self.claims.remove(name);
        }
        if self
            .releases
            .get(name)
            .is_some_and(|p| shown(p.state, &p.base_resource_version))
        {
            self.releases.remove(name);
        }
    }

    /// The index now holds `view` for claim `uid` (`None`: deleted). Ends its assignment when
    /// the claim shows the binding, or shows a later version than the write was conditioned on.
    pub fn observe_claim(&mut self, uid: &str, view: Option<&ClaimView>) {
        if view.is_none_or(|c| c.bound_binding.is_some()) {
            self.won.remove(uid);
        }
        let shown =
            |rv: &String| view.is_none_or(|c| !is_newer(Some(rv), c.resource_version.as_deref()));
        if self.statuses.get(uid).is_some_and(|(rv, _)| shown(rv)) {
            self.statuses.remove(uid);
        }
        let Some(a) = self.assignments.get(uid) else {
            return;
        };
        let done = view.is_none_or(|c| {
            c.bound_binding.as_deref() == Some(a.binding.as_str())
                || (a.state != WriteState::Writing
                    && is_newer(
                        c.resource_version.as_deref(),
                        a.base_resource_version.as_deref(),
                    ))
        });
        if done {
            self.assignments.remove(uid);
        }
    }

    /// Drops the records that outlived the time to live.
    pub fn expire(&mut self, now: Instant) {
        let ttl = self.ttl;
        let live = |since: Instant| now.saturating_duration_since(since) < ttl;
        self.claims.retain(|_, p| live(p.since));
        self.releases.retain(|_, p| live(p.since));
        self.assignments.retain(|_, a| live(a.since));
        self.won.retain(|_, (_, since)| live(*since));
        self.finished.retain(|_, since| live(*since));
        self.statuses.retain(|_, (_, since)| live(*since));
    }

    /// The live pending claim of a binding, if any.
    pub fn claim_of(&self, binding: &str, now: Instant) -> Option<&PendingClaim> {
        self.claims.get(binding).filter(|p| self.live(p.since, now))
    }

    /// The live pending claims of a tenant in a pool, by binding name.
    pub fn claims_for<'a>(
        &'a self,
        pool: &'a PoolKey,
        tenant: &'a str,
        now: Instant,
    ) -> impl Iterator<Item = (&'a str, &'a PendingClaim)> + 'a {
        self.claims
            .iter()
            .filter(move |(_, p)| self.live(p.since, now) && p.tenant == tenant && p.pool == *pool)
            .map(|(b, p)| (b.as_str(), p))
    }

    /// The live pending claim made for one AccountClaim, with its binding.
    pub fn claim_made_by(&self, claim_uid: &str, now: Instant) -> Option<(&str, &PendingClaim)> {
        self.claims
            .iter()
            .find(|(_, p)| p.claim_uid == claim_uid && self.live(p.since, now))
            .map(|(b, p)| (b.as_str(), p))
    }

    /// The live release record of a binding, if any.
    pub fn release_of(&self, binding: &str, now: Instant) -> Option<&PendingRelease> {
        self.releases
            .get(binding)
            .filter(|p| self.live(p.since, now))
    }

    /// Whether a release of the binding is in flight.
    pub fn is_releasing(&self, binding: &str, now: Instant) -> bool {
        self.releases
            .get(binding)
            .is_some_and(|p| self.live(p.since, now))
    }

    /// The live assignments, as binding → (claim uid → cluster).
    pub fn assigned(&self, now: Instant) -> BTreeMap<&str, BTreeMap<&str, &str>> {
        let mut out: BTreeMap<&str, BTreeMap<&str, &str>> = BTreeMap::new();
        for (uid, a) in self
            .assignments
            .iter()
            .filter(|(_, a)| self.live(a.since, now))
        {
            out.entry(a.binding.as_str())
                .or_default()
                .insert(uid.as_str(), a.cluster.as_str());
        }
        out
    }

    /// Bindings that pending claims or assignments are about to use (for orphan reporting).
    pub fn bindings_in_use(&self, now: Instant) -> BTreeSet<String> {
        let claims = self
            .claims
            .iter()
            .filter(|(_, p)| self.live(p.since, now))
            .map(|(b, _)| b.clone());
        let assigned = self
            .assignments
            .values()
            .filter(|a| self.live(a.since, now))
            .map(|a| a.binding.clone());
        claims.chain(assigned).collect()
    }

    /// The live assignment recorded for a claim: a `Written` one means the claim's Bound status
    /// is on the server though the index still shows it pending, so it must not be decided again.
    pub fn assignment_of(&self, claim_uid: &str, now: Instant) -> Option<&PendingAssignment> {
        self.assignments
            .get(claim_uid)
            .filter(|a| self.live(a.since, now))
    }

    /// Whether another claim than `claim_uid` is being written onto `binding` by this replica
    /// right now (its use record or status write sent, no answer yet), for at most `recent`.
    pub fn assigning_other(
        &self,
        binding: &str,
        claim_uid: &str,
        recent: Duration,
        now: Instant,
    ) -> bool {
        self.assignments.iter().any(|(uid, a)| {
            uid != claim_uid
                && a.binding == binding
                && a.state == WriteState::Writing
                && now.saturating_duration_since(a.since) < recent
        })
    }

    /// Number of records, live or not yet expired (for metrics).
    pub fn len(&self) -> usize {
        self.claims.len() + self.releases.len() + self.assignments.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
