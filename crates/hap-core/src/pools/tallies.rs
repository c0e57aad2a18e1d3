//! Per-pool counters, the bindings in use that need a person and the orphan candidates, kept
//! one watch event at a time: each binding adds its share when it is indexed or its cluster
//! count moves, and takes it back before it changes. The HapConfig status and the metrics read
//! them in O(pools + named bindings) instead of walking every binding once a second
//! (`figures.rs` says what each figure means; its scan is the reference a property test checks
//! them against).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{BindingClass, BindingEntry};
use crate::api::CredentialsKind;
use crate::labels::{PoolKey, ResolvedLabelKeys};

/// One pool's counters (`figures.rs`), as plain counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: usize,
    pub free: usize,
    pub claimed: usize,
    pub dirty: usize,
    pub clusters: usize,
    pub credentials: BTreeMap<CredentialsKind, usize>,
}

/// A cluster uses the binding, but no tenant holds it.
pub const IN_USE_WITHOUT_TENANT: &str = "InUseWithoutTenant";
/// The binding waits for the cleanup job while a cluster uses it.
pub const DIRTY_IN_USE: &str = "DirtyInUse";

/// What the index keeps per event for figures, bindings in use and orphans.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tallies {
    pub(super) pools: BTreeMap<PoolKey, Counts>,
    /// Per pool and reason (`IN_USE_WITHOUT_TENANT`, `DIRTY_IN_USE`), the bindings, by name.
    pub(super) in_use: BTreeMap<(PoolKey, &'static str), BTreeSet<String>>,
    /// Bindings labelled for a tenant, neither shared, dirty nor internal, on no cluster: orphans
    /// unless a write in flight names them.
    pub(super) orphans: BTreeSet<String>,
    /// Owned bindings per tenant, over all pools (the per-tenant metric).
    pub(super) tenants: HashMap<String, usize>,
    pub(super) touched: Touched,
}

/// Beyond this many names the next export redoes every series instead: a replica that never
/// exports (a standby) keeps a bounded set.
const TOUCHED_MAX: usize = 65_536;

/// What moved since the metrics were last exported (`Inventory::take_touched`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Touched {
    /// Every series may have moved (the start, a re-classification, an overflow).
    pub all: bool,
    /// Bindings whose share moved (added, changed, removed, clusters counted).
    pub bindings: BTreeSet<String>,
    /// Tenants whose number of owned bindings moved.
    pub tenants: BTreeSet<String>,
}

impl Default for Touched {
    fn default() -> Self {
        Touched {
            all: true,
            bindings: BTreeSet::new(),
            tenants: BTreeSet::new(),
        }
    }
}

impl Touched {
    /// Nothing moved since: what `take` leaves behind.
    pub fn none() -> Self {
        Touched {
            all: false,
            ..Default::default()
        }
    }

    fn note(&mut self, binding: &str, tenant: Option<&str>) {
        if self.all {
            return;
        }
        self.bindings.insert(binding.to_string());
        if let Some(t) = tenant {
            self.tenants.insert(t.to_string());
        }
        if self.bindings.len() + self.tenants.len() > TOUCHED_MAX {
            *self = Touched::default();
        }
    }
}

/// What one binding adds, given its entry and the number of clusters on it.
#[derive(Debug)]
pub(super) struct Share {
    pool: Option<(PoolKey, Counts)>,
    in_use: Option<(PoolKey, &'static str)>,
    orphan: bool,
    tenant: Option<String>,
}

impl Share {
    pub(super) fn of(keys: &ResolvedLabelKeys, e: &BindingEntry, clusters: usize) -> Self {
        let labels = &e.view.labels;
        let orphan = labels.get(&keys.shared).map(String::as_str) != Some("true")
            && !labels.contains_key(&keys.dirty)
            && !e.internal
            && clusters == 0
            && labels.contains_key(&keys.tenant_name);
        let Some((key, class)) = &e.pool else {
            return Share {
                pool: None,
                in_use: None,
                orphan,
                tenant: None,
            };
        };
        let used = clusters > 0;
        let counts = Counts {
            total: 1,
            free: usize::from(
                *class == BindingClass::Claimable && !used && !super::lifecycle::withheld(labels),
            ),
            claimed: usize::from(matches!(class, BindingClass::Owned { .. })),
            dirty: usize::from(matches!(class, BindingClass::Dirty { .. })),
            clusters,
            credentials: BTreeMap::from([(e.view.credentials, 1)]),
        };
        let in_use = match class {
            BindingClass::Claimable if used => Some((key.clone(), IN_USE_WITHOUT_TENANT)),
            BindingClass::Dirty { .. } if used => Some((key.clone(), DIRTY_IN_USE)),
            _ => None,
        };
        let tenant = match class {
            BindingClass::Owned { tenant } => Some(tenant.clone()),
            _ => None,
        };
        Share {
            pool: Some((key.clone(), counts)),
            in_use,
            orphan,
            tenant,
        }
    }
}

impl Tallies {
    /// Empty counters for a re-classification; every series is redone on the next export.
    pub(super) fn reset(&mut self) {
        *self = Tallies::default();
    }

    /// Adds (`add`) or takes back one binding's share.
    pub(super) fn apply(&mut self, name: &str, share: Share, add: bool) {
        self.touched.note(name, share.tenant.as_deref());
        if let Some((key, c)) = share.pool {
            let entry = self.pools.entry(key.clone()).or_default();
            let step = |n: &mut usize, by: usize| {
                *n = if add { *n + by } else { n.saturating_sub(by) };
            };
            step(&mut entry.total, c.total);
            step(&mut entry.free, c.free);
            step(&mut entry.claimed, c.claimed);
            step(&mut entry.dirty, c.dirty);
            step(&mut entry.clusters, c.clusters);
            for (kind, n) in c.credentials {
                let slot = entry.credentials.entry(kind).or_default();
                step(slot, n);
                if *slot == 0 {
                    entry.credentials.remove(&kind);
                }
            }
            if entry.total == 0 {
                self.pools.remove(&key);
            }
        }
        if let Some(at) = share.in_use {
            let set = self.in_use.entry(at.clone()).or_default();
            if add {
                set.insert(name.to_string());
            } else {
                set.remove(name);
                if set.is_empty() {
                    self.in_use.remove(&at);
                }
            }
        }
        if share.orphan {
            if add {
                self.orphans.insert(name.to_string());
            } else {
                self.orphans.remove(name);
            }
        }
        if let Some(t) = share.tenant {
            let n = self.tenants.entry(t.clone()).or_default();
            *n = if add { *n + 1 } else { n.saturating_sub(1) };
            if *n == 0 {
                self.tenants.remove(&t);
            }
        }
    }
}

#[cfg(test)]
mod tests;
