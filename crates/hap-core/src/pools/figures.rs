//! Pool figures and orphan bindings for HapConfig status, computed from an `Inventory`.
//!
//! Figures per pool: `total` every binding in it (dirty and internal ones included); `free` the
//! bindings a claim could take (internal ones excluded, they are never claimed, and so are
//! untenanted ones a cluster uses and cordoned ones); `claimed` the bindings a tenant holds and that are not dirty;
//! `dirty` those waiting for the cleanup job; `clusters` the clusters on all of them. A shared
//! pool (`shared: true` in its key) has only `total` and `clusters`. So `total = free + claimed +
//! dirty + unclaimed internal + in use without a tenant + cordoned unclaimed` for a dedicated
//! pool. `credentials` counts the pool's bindings by the kind their `credentialsRef` names (it
//! sums to `total`).
//!
//! Bindings in use that need a person: untenanted ones a cluster uses (`InUseWithoutTenant`:
//! never claimed while so, or a second tenant would share the cloud account) and dirty ones a
//! cluster still uses (`DirtyInUse`: the cleanup job would wipe the account under it).
//!
//! Bindings that share a credential with a pool binding (`SharedAccount`): Gardener's forced
//! migration off SecretBindings moves Shoots onto another binding of the same Secret, often a
//! new unlabelled `force-migrated-<name>` one. Their clusters count on the pool binding's
//! account and hold its release; they are listed under the pool binding's pool so that people
//! can label or remove them.
//!
//! Orphans are bindings labelled with a tenant that no bound claim and no Shoot uses. Shared,
//! `internal=true` and dirty bindings are left out: shared and internal ones are not the
//! operator's to hand out, and a dirty binding without clusters is exactly what the cleanup job
//! is waiting for, not a leak. Bindings the controller is writing right now (in flight) are
//! passed in so that a claim made a moment ago does not flash up as an orphan.

use std::collections::{BTreeMap, BTreeSet};

use super::Inventory;
use crate::api::{BindingsInUse, OrphanStatus, PoolFigures};
use crate::labels::PoolKey;

// The reasons are the tallies' words: they count per reason, the figures only read.
pub use super::tallies::{DIRTY_IN_USE, IN_USE_WITHOUT_TENANT};
/// The reason of the bindings that reference the credential of a binding of the pool.
pub const SHARED_ACCOUNT: &str = "SharedAccount";
/// Bindings named per pool and reason; the count says how many there are in all.
pub const IN_USE_NAMED: usize = 10;

/// One pool's bindings in use for one reason: how many, and the first `IN_USE_NAMED` by name.
fn in_use<'a>(
    key: &PoolKey,
    reason: &str,
    total: usize,
    names: impl Iterator<Item = &'a String>,
) -> BindingsInUse {
    BindingsInUse {
        hyperscaler_type: key.hyperscaler_type.clone(),
        eu_access: key.eu_access,
        reason: reason.to_string(),
        count: count(total),
        bindings: names.take(IN_USE_NAMED).cloned().collect(),
    }
}

/// Adds, under the pool of each of `members` (the bindings of one credential) that is in one,
/// the other members.
fn add_sharing<'a>(
    out: &mut BTreeMap<PoolKey, BTreeSet<String>>,
    members: &[&String],
    entry: impl Fn(&str) -> Option<&'a super::BindingEntry>,
) {
    for m in members {
        let Some((key, _)) = entry(m).and_then(|e| e.pool.as_ref()) else {
            continue;
        };
        let others = members.iter().filter(|o| *o != m).map(|o| (*o).clone());
        out.entry(key.clone()).or_default().extend(others);
    }
}

/// Whether the per-binding counters count `e` free: claimable, unused, not withheld.
fn counted_free(inv: &Inventory, e: &super::BindingEntry) -> bool {
    matches!(&e.pool, Some((_, super::BindingClass::Claimable)))
        && inv.clusters_on(&e.view.name).is_empty()
        && !super::lifecycle::withheld(&e.view.labels)
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Inventory {
    /// The figures of one pool; all zero when no binding is in it. Read from the counters the
    /// index keeps per event (`tallies.rs`).
    pub fn figures(&self, key: &PoolKey) -> PoolFigures {
        let mut f = PoolFigures {
            hyperscaler_type: key.hyperscaler_type.clone(),
            eu_access: key.eu_access,
            shared: key.shared,
            ..Default::default()
        };
        let Some(c) = self.tallies.pools.get(key) else {
            return f;
        };
        let (over, taken) = self.shared_account_excess(key);
        f.total = count(c.total);
        f.free = count(c.free.saturating_sub(taken));
        f.claimed = count(c.claimed);
        f.dirty = count(c.dirty);
        f.clusters = count(c.clusters.saturating_sub(over));
        f.credentials = c.credentials.iter().map(|(k, n)| (*k, count(*n))).collect();
        f
    }

    /// What the per-binding counters of pool `key` over-count for credentials two or more
    /// bindings reference: the clusters of an account added once per member binding in the pool
    /// beyond the first, and the members counted free whose account a sibling holds (selection
    /// never takes them). Walks only those credentials.
    fn shared_account_excess(&self, key: &PoolKey) -> (usize, usize) {
        let (mut over, mut taken) = (0, 0);
        for a in &self.multi {
            let members = self.accounts.get(a).into_iter().flatten();
            let in_pool: Vec<&super::BindingEntry> = members
                .filter_map(|n| self.binding(n))
                .filter(|e| e.pool.as_ref().is_some_and(|(k, _)| k == key))
                .collect();
            let Some(first) = in_pool.first() else {
                continue;
            };
            over += (in_pool.len() - 1) * self.clusters_on(&first.view.name).len();
            taken += in_pool
                .iter()
                .filter(|e| {
                    counted_free(self, e) && self.account_held_by_sibling(&e.view.name).is_some()
                })
                .count();
        }
        (over, taken)
    }

    /// The figures of every pool that has a binding, ordered by pool key.
    pub fn all_figures(&self) -> Vec<PoolFigures> {
        self.pools().map(|(key, _)| self.figures(key)).collect()
    }

    /// Per pool, the bindings clusters use without a tenant and the dirty ones clusters still
    /// use, ordered by pool, reason and name; each list names at most `IN_USE_NAMED` bindings.
    /// Then, per pool, the bindings that share a credential with one of its bindings
    /// (`SHARED_ACCOUNT`), walking only the credentials two or more bindings reference.
    pub fn bindings_in_use(&self) -> Vec<BindingsInUse> {
        let mut out = Vec::new();
        let mut sharing = BTreeMap::new();
        for a in &self.multi {
            if let Some(members) = self.accounts.get(a) {
                let members: Vec<&String> = members.iter().collect();
                add_sharing(&mut sharing, &members, |b| self.binding(b));
            }
        }
        for (key, _) in self.pools() {
            for reason in [IN_USE_WITHOUT_TENANT, DIRTY_IN_USE] {
                let Some(used) = self.tallies.in_use.get(&(key.clone(), reason)) else {
                    continue;
                };
                out.push(in_use(key, reason, used.len(), used.iter()));
            }
            if let Some(names) = sharing.get(key) {
                out.push(in_use(key, SHARED_ACCOUNT, names.len(), names.iter()));
            }
        }
        out
    }

    /// Bindings labelled for a tenant that no claim or Shoot uses, ordered by name.
    pub fn orphans(&self, in_flight: &BTreeSet<String>) -> Vec<OrphanStatus> {
        let keys = self.keys();
        self.tallies
            .orphans
            .iter()
            .filter(|name| !in_flight.contains(*name))
            .filter_map(|name| {
                let labels = &self.binding(name)?.view.labels;
                Some(OrphanStatus {
                    binding: name.clone(),
                    tenant: labels.get(&keys.tenant_name)?.clone(),
                    hyperscaler_type: labels
                        .get(&keys.hyperscaler_type)
                        .cloned()
                        .unwrap_or_default(),
                })
            })
            .collect()
    }

    /// Owned (claimed, not dirty) bindings per tenant, over all pools.
    pub fn owned_per_tenant(&self) -> impl Iterator<Item = (&str, usize)> {
        self.tallies.tenants.iter().map(|(t, n)| (t.as_str(), *n))
    }

    /// The bindings and tenants whose series moved since the last call: the per-binding and
    /// per-tenant metric series to update.
    pub fn take_touched(&mut self) -> super::Touched {
        std::mem::replace(&mut self.tallies.touched, super::Touched::none())
    }

    /// Owned bindings of one tenant, over all pools.
    pub fn owned_count(&self, tenant: &str) -> usize {
        self.tallies.tenants.get(tenant).copied().unwrap_or(0)
    }
}

/// The same figures, in-use lists and orphans by a walk over every binding: the reference the
/// per-event counters are checked against.
#[cfg(test)]
pub(crate) mod scan {
    use super::*;

    /// The figures of one pool; all zero when no binding is in it.
    pub fn figures(inv: &Inventory, key: &PoolKey) -> PoolFigures {
        let mut f = PoolFigures {
            hyperscaler_type: key.hyperscaler_type.clone(),
            eu_access: key.eu_access,
            shared: key.shared,
            ..Default::default()
        };
        let Some(m) = inv.pool(key) else { return f };
        let claimed: usize = m.owned.values().map(crate::pools::SmallSet::len).sum();
        let all = m
            .shared
            .iter()
            .chain(&m.claimable)
            .chain(&m.internal_free)
            .chain(&m.dirty)
            .chain(m.owned.values().flatten());
        let (mut total, mut clusters) = (0usize, 0usize);
        // An account's clusters count once per pool, whichever of its bindings are in it.
        let mut accounts = BTreeSet::new();
        for name in all {
            total += 1;
            let account = inv.binding(name).and_then(|e| e.view.account);
            if account.is_none_or(|a| accounts.insert(a)) {
                clusters += inv.clusters_on(name).len();
            }
            if let Some(kind) = inv.binding(name).map(|e| e.view.credentials) {
                *f.credentials.entry(kind).or_default() += 1;
            }
        }
        f.total = count(total);
        // Neither a binding in use, a cordoned or cleanup-failed one, nor one whose account
        // another binding holds can be taken (see selection).
        let taken = m
            .claimable
            .iter()
            .filter(|b| {
                !inv.clusters_on(b).is_empty()
                    || inv
                        .binding(b)
                        .is_some_and(|e| crate::pools::lifecycle::withheld(&e.view.labels))
                    || inv.account_held_by_sibling(b).is_some()
            })
            .count();
        f.free = count(m.claimable.len() - taken);
        f.claimed = count(claimed);
        f.dirty = count(m.dirty.len());
        f.clusters = count(clusters);
        f
    }

    /// Per pool, the bindings clusters use without a tenant and the dirty ones clusters still
    /// use, ordered by pool, reason and name; each list names at most `IN_USE_NAMED` bindings.
    pub fn bindings_in_use(inv: &Inventory) -> Vec<BindingsInUse> {
        let mut out = Vec::new();
        let mut by_account: BTreeMap<crate::pools::Account, Vec<String>> = BTreeMap::new();
        for e in inv.bindings() {
            if let Some(a) = e.view.account {
                by_account.entry(a).or_default().push(e.view.name.clone());
            }
        }
        let mut sharing = BTreeMap::new();
        for members in by_account.values().filter(|m| m.len() >= 2) {
            let members: Vec<&String> = members.iter().collect();
            add_sharing(&mut sharing, &members, |b| inv.binding(b));
        }
        for (key, m) in inv.pools() {
            for (reason, set) in [
                (IN_USE_WITHOUT_TENANT, &m.claimable),
                (DIRTY_IN_USE, &m.dirty),
            ] {
                let used: Vec<&String> = set
                    .iter()
                    .filter(|b| !inv.clusters_on(b).is_empty())
                    .collect();
                if used.is_empty() {
                    continue;
                }
                out.push(in_use(key, reason, used.len(), used.into_iter()));
            }
            if let Some(names) = sharing.get(key) {
                out.push(in_use(key, SHARED_ACCOUNT, names.len(), names.iter()));
            }
        }
        out
    }

    /// Bindings labelled for a tenant that no claim or Shoot uses, ordered by name.
    pub fn orphans(inv: &Inventory, in_flight: &BTreeSet<String>) -> Vec<OrphanStatus> {
        let keys = inv.keys();
        inv.bindings()
            .filter(|e| {
                let labels = &e.view.labels;
                let shared = labels.get(&keys.shared).map(String::as_str) == Some("true");
                !shared && !labels.contains_key(&keys.dirty) && !e.internal
            })
            .filter(|e| {
                inv.clusters_on(&e.view.name).is_empty() && !in_flight.contains(&e.view.name)
            })
            .filter_map(|e| {
                let tenant = e.view.labels.get(&keys.tenant_name)?;
                Some(OrphanStatus {
                    binding: e.view.name.clone(),
                    tenant: tenant.clone(),
                    hyperscaler_type: e
                        .view
                        .labels
                        .get(&keys.hyperscaler_type)
                        .cloned()
                        .unwrap_or_default(),
                })
            })
            .collect()
    }
}
