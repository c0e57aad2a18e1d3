//! Writes the operator has made (or is making) that the watch caches have not shown yet — the
//! "expectations" of Gardener and client-go. Selection and release read the caches *through* this
//! structure, so that a claim written a moment ago counts as if the cache already showed it.
//!
//! Three kinds of entry, each `Writing` (request sent, outcome unknown) or `Written` (the API server
//! accepted it):
//! - a **claim** of binding X for tenant T in pool P: X is offered to nobody else; once Written it
//!   is T's binding in P; while Writing, T's other claims in P wait instead of claiming a second;
//! - a **release** of binding X (dirty label): X is neither reused nor claimed;
//! - an **assignment** of a claim's cluster to binding X (the claim's status is about to say
//!   Bound): the cluster counts toward X's limit and keeps X from being released.
//!
//! An entry ends when the cache shows the write (`observe`), when the write fails (`*_failed`), or
//! after the time-to-live, whichever comes first. Clocks are never read here: callers pass `now`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::Choice;
use crate::labels::PoolKey;
use crate::pools::{ClaimView, Inventory};

/// How long an expectation outlives its write at most; watch events normally arrive within
/// milliseconds, so an entry this old means a lost event and the cache is trusted again.
pub const DEFAULT_TTL: Duration = Duration::from_secs(120);

/// Where a write stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteState {
    /// Sent; the API server has not answered.
    Writing,
    /// Accepted by the API server; the cache has not shown it yet.
    Written,
}

/// A claim of a binding for a tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingClaim {
    pub tenant: String,
    pub pool: PoolKey,
    /// The resourceVersion the write was conditioned on; a cache showing another one has caught up.
    pub base_resource_version: Option<String>,
    /// The AccountClaim whose selection made this claim.
    pub claim_uid: String,
    pub state: WriteState,
    pub since: Instant,
}

/// A release (dirty label) of a binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRelease {
    pub base_resource_version: Option<String>,
    pub state: WriteState,
    pub since: Instant,
}

/// A cluster placed on a binding by a status write the cache has not shown yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingAssignment {
    pub binding: String,
    pub cluster: String,
    pub state: WriteState,
    pub since: Instant,
}

/// The expectations of one operator process. Not thread-safe by itself: the controller keeps it
/// behind one mutex and holds that mutex from `select` to `record`, never across a write.
#[derive(Clone, Debug)]
pub struct InFlight {
    ttl: Duration,
    claims: BTreeMap<String, PendingClaim>,
    releases: BTreeMap<String, PendingRelease>,
    assignments: BTreeMap<String, PendingAssignment>,
}

impl Default for InFlight {
    fn default() -> Self {
        Self::new(DEFAULT_TTL)
    }
}

impl InFlight {
    /// An empty structure whose entries live at most `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            claims: BTreeMap::new(),
            releases: BTreeMap::new(),
            assignments: BTreeMap::new(),
        }
    }

    fn live(&self, since: Instant, now: Instant) -> bool {
        now.saturating_duration_since(since) < self.ttl
    }

    /// Records what `choice` is about to write for `claim`: call right after `select`, under the
    /// same lock, before sending anything.
    pub fn record(&mut self, claim: &ClaimView, pool: &PoolKey, choice: &Choice, now: Instant) {
        let binding = match choice {
            Choice::Claim {
                binding,
                expected_resource_version,
            } => {
                let pending = PendingClaim {
                    tenant: claim.global_account.clone(),
                    pool: pool.clone(),
                    base_resource_version: expected_resource_version.clone(),
                    claim_uid: claim.uid.clone(),
                    state: WriteState::Writing,
                    since: now,
                };
                self.claims.insert(binding.clone(), pending);
                binding
            }
            Choice::Use { binding, .. } => binding,
            _ => return,
        };
        let assignment = PendingAssignment {
            binding: binding.clone(),
            cluster: claim.cluster_name(),
            state: WriteState::Writing,
            since: now,
        };
        self.assignments.insert(claim.uid.clone(), assignment);
    }

    /// The claim write of `binding` succeeded.
    pub fn claim_written(&mut self, binding: &str, now: Instant) {
        if let Some(p) = self.claims.get_mut(binding) {
            p.state = WriteState::Written;
            p.since = now;
        }
    }

    /// The claim write of `binding` failed (conflict or otherwise): the binding is offered again
    /// and the claim's cluster leaves it.
    pub fn claim_failed(&mut self, binding: &str) {
        if let Some(p) = self.claims.remove(binding)
            && self
                .assignments
                .get(&p.claim_uid)
                .is_some_and(|a| a.binding == binding)
        {
            self.assignments.remove(&p.claim_uid);
        }
    }

    /// The claim's Bound status was written.
    pub fn assignment_written(&mut self, claim_uid: &str, now: Instant) {
        if let Some(a) = self.assignments.get_mut(claim_uid) {
            a.state = WriteState::Written;
            a.since = now;
        }
    }

    /// The claim's Bound status could not be written: its cluster leaves the binding.
    pub fn assignment_failed(&mut self, claim_uid: &str) {
        self.assignments.remove(claim_uid);
    }

    /// The claim is gone (its finalizer was removed): its cluster no longer lands anywhere.
    pub fn forget_claim(&mut self, claim_uid: &str) {
        self.assignments.remove(claim_uid);
    }

    /// A release write of `binding`, conditioned on `base_resource_version`, is about to be sent.
    pub fn release_started(
        &mut self,
        binding: &str,
        base_resource_version: Option<String>,
        now: Instant,
    ) {
        let pending = PendingRelease {
            base_resource_version,
            state: WriteState::Writing,
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

    /// The release write of `binding` failed.
    pub fn release_failed(&mut self, binding: &str) {
        self.releases.remove(binding);
    }

    /// Drops every entry the cache now shows, and every expired one. Call with each new snapshot.
    pub fn observe(&mut self, inv: &Inventory, now: Instant) {
        let ttl = self.ttl;
        let live = |since: Instant| now.saturating_duration_since(since) < ttl;
        // The write was conditioned on `base`; a cached binding at any other version includes it.
        let caught_up = |binding: &str, base: &Option<String>| {
            inv.binding(binding)
                .is_none_or(|e| e.view.resource_version != *base)
        };
        self.claims.retain(|b, p| {
            live(p.since)
                && !(p.state == WriteState::Written && caught_up(b, &p.base_resource_version))
        });
        self.releases.retain(|b, p| {
            live(p.since)
                && !(p.state == WriteState::Written && caught_up(b, &p.base_resource_version))
        });
        self.assignments.retain(|uid, a| {
            let pending = inv.claim(uid).is_some_and(|c| {
                !c.deleting && c.bound_binding.as_deref() != Some(a.binding.as_str())
            });
            live(a.since) && pending
        });
    }

    /// Forgets the written entries recorded before `t`: after a full re-list that started at `t`,
    /// the caches show every write that had completed by then. Writes still in progress stay.
    pub fn forget_written_before(&mut self, t: Instant) {
        let keep = |state: WriteState, since: Instant| state == WriteState::Writing || since >= t;
        self.claims.retain(|_, p| keep(p.state, p.since));
        self.releases.retain(|_, p| keep(p.state, p.since));
        self.assignments.retain(|_, a| keep(a.state, a.since));
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
    /// is on the server though the cache still shows it pending, so it must not be decided again.
    pub fn assignment_of(&self, claim_uid: &str, now: Instant) -> Option<&PendingAssignment> {
        self.assignments
            .get(claim_uid)
            .filter(|a| self.live(a.since, now))
    }

    /// Number of entries, live or not yet swept (for metrics).
    pub fn len(&self) -> usize {
        self.claims.len() + self.releases.len() + self.assignments.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
