//! Plain views of bindings, AccountClaims and Shoots, and the `Inventory` index built once from a
//! snapshot of the watch caches: pool membership, clusters per binding (DESIGN §4), shoot presence.
//!
//! Pool membership is decided only by `PoolKey::selectors` (crate::labels); this module derives a
//! candidate `PoolKey` from a binding's labels and then asks the selectors, so the text users see in
//! `hap explain` and what the operator does can never drift apart. Consequences worth knowing:
//! a binding labelled `euAccess=false` matches neither `euAccess=true` nor `!euAccess` and is in no
//! pool; a binding with any `dirty` value (even `false`) is excluded by `!dirty` and counted dirty.
//!
//! A cluster is the union, by name, of non-deleting bound AccountClaims (their `shootName`, else
//! `namespace/name`, which cannot collide with a Shoot name) and Shoots naming the binding. A
//! deleting claim no longer counts by itself: while its Shoot lives, the Shoot counts instead; this
//! lets two claims of one tenant released at the same time both see the binding as free.

mod figures;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::labels::{PoolKey, ResolvedLabelKeys};

/// What selection and release need to know about one binding.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BindingView {
    pub name: String,
    /// Precondition for compare-and-swap label writes.
    pub resource_version: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// What selection and release need to know about one AccountClaim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub global_account: String,
    pub shoot_name: Option<String>,
    /// `status.credentialsBindingName` once the claim is Bound.
    pub bound_binding: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

impl ClaimView {
    /// The cluster this claim stands for: its Shoot, or the claim itself when no Shoot is named.
    pub fn cluster_name(&self) -> String {
        match &self.shoot_name {
            Some(shoot) => shoot.clone(),
            None => format!("{}/{}", self.namespace, self.name),
        }
    }
}

/// What cluster counting needs to know about one Shoot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShootView {
    pub name: String,
    /// `spec.credentialsBindingName`, else `spec.secretBindingName`.
    pub binding: Option<String>,
}

/// The role a binding plays in its pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindingClass {
    /// In a shared pool: used by many tenants, never labelled.
    Shared,
    /// Dedicated and unclaimed: may be claimed.
    Claimable,
    /// Dedicated, unclaimed and `internal=true`: never claimed by the operator (see selection).
    InternalFree,
    /// Dedicated and held by a tenant (may be `internal=true`, see `internal`).
    Owned { tenant: String },
    /// Dedicated and carrying the dirty label: waits for the cleanup job.
    Dirty { tenant: Option<String> },
}

/// One binding, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingEntry {
    pub view: BindingView,
    /// `None`: the binding is in no pool (no hyperscalerType, or labels no selector accepts).
    pub pool: Option<(PoolKey, BindingClass)>,
    /// `internal=true`: the operator never writes it.
    pub internal: bool,
}

/// The members of one pool, by role. Sets are ordered by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolMembers {
    pub shared: BTreeSet<String>,
    pub claimable: BTreeSet<String>,
    pub internal_free: BTreeSet<String>,
    pub owned: BTreeMap<String, BTreeSet<String>>,
    pub dirty: BTreeSet<String>,
}

/// The cache's view of one AccountClaim, by uid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRecord {
    pub bound_binding: Option<String>,
    pub deleting: bool,
}

/// Index over one snapshot of the caches; built in O(n log n), answers lookups in O(log n).
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    keys: ResolvedLabelKeys,
    bindings: BTreeMap<String, BindingEntry>,
    pools: BTreeMap<PoolKey, PoolMembers>,
    clusters: HashMap<String, BTreeSet<String>>,
    cluster_bindings: HashMap<String, BTreeSet<String>>,
    claims_on: HashMap<String, BTreeMap<String, String>>,
    shoots: HashSet<String>,
    claims: HashMap<String, ClaimRecord>,
}

static EMPTY: BTreeSet<String> = BTreeSet::new();
static EMPTY_MAP: BTreeMap<String, String> = BTreeMap::new();

/// Which pool a binding is in and in which role, by the pool selectors alone.
pub fn classify(
    keys: &ResolvedLabelKeys,
    labels: &BTreeMap<String, String>,
) -> Option<(PoolKey, BindingClass)> {
    let is_true = |k: &str| labels.get(k).map(String::as_str) == Some("true");
    let pool = PoolKey {
        hyperscaler_type: labels.get(&keys.hyperscaler_type)?.clone(),
        eu_access: is_true(&keys.eu_access),
        shared: is_true(&keys.shared),
    };
    let tenant = labels.get(&keys.tenant_name).cloned();
    let selectors = pool.selectors(keys, tenant.as_deref().unwrap_or_default());
    if selectors.any.matches(labels) {
        let class = if pool.shared {
            BindingClass::Shared
        } else if let (Some(t), Some(sel)) = (tenant, &selectors.tenant)
            && sel.matches(labels)
        {
            BindingClass::Owned { tenant: t }
        } else if selectors.claim.as_ref().is_some_and(|c| c.matches(labels)) {
            if is_true(&keys.internal) {
                BindingClass::InternalFree
            } else {
                BindingClass::Claimable
            }
        } else {
            return None;
        };
        return Some((pool, class));
    }
    // Dirty bindings fail `!dirty`; they belong to the pool they would be in without that label.
    if pool.shared || !labels.contains_key(&keys.dirty) {
        return None;
    }
    let mut clean = labels.clone();
    clean.remove(&keys.dirty);
    selectors
        .any
        .matches(&clean)
        .then_some((pool, BindingClass::Dirty { tenant }))
}

impl Inventory {
    /// Indexes one snapshot of the three caches.
    pub fn build(
        keys: ResolvedLabelKeys,
        bindings: impl IntoIterator<Item = BindingView>,
        claims: impl IntoIterator<Item = ClaimView>,
        shoots: impl IntoIterator<Item = ShootView>,
    ) -> Self {
        let mut inv = Inventory {
            keys,
            ..Default::default()
        };
        for view in bindings {
            inv.add_binding(view);
        }
        inv.index_pools();
        for claim in claims {
            if let (Some(binding), false) = (&claim.bound_binding, claim.deleting) {
                inv.add_cluster(binding, claim.cluster_name());
                let on = inv.claims_on.entry(binding.clone()).or_default();
                on.insert(claim.uid.clone(), claim.cluster_name());
            }
            let record = ClaimRecord {
                bound_binding: claim.bound_binding,
                deleting: claim.deleting,
            };
            inv.claims.insert(claim.uid, record);
        }
        for shoot in shoots {
            if let Some(binding) = &shoot.binding {
                inv.add_cluster(binding, shoot.name.clone());
            }
            inv.shoots.insert(shoot.name);
        }
        inv
    }

    fn add_binding(&mut self, view: BindingView) {
        let pool = classify(&self.keys, &view.labels);
        let internal = view.labels.get(&self.keys.internal).map(String::as_str) == Some("true");
        // The caches never hold two bindings of one name; if a caller passes two, the last wins.
        self.bindings.insert(
            view.name.clone(),
            BindingEntry {
                view,
                pool,
                internal,
            },
        );
    }

    fn index_pools(&mut self) {
        for entry in self.bindings.values() {
            let Some((key, class)) = &entry.pool else {
                continue;
            };
            let members = self.pools.entry(key.clone()).or_default();
            let name = entry.view.name.clone();
            match class {
                BindingClass::Shared => members.shared.insert(name),
                BindingClass::Claimable => members.claimable.insert(name),
                BindingClass::InternalFree => members.internal_free.insert(name),
                BindingClass::Owned { tenant } => members
                    .owned
                    .entry(tenant.clone())
                    .or_default()
                    .insert(name),
                BindingClass::Dirty { .. } => members.dirty.insert(name),
            };
        }
    }

    fn add_cluster(&mut self, binding: &str, cluster: String) {
        self.cluster_bindings
            .entry(cluster.clone())
            .or_default()
            .insert(binding.to_string());
        self.clusters
            .entry(binding.to_string())
            .or_default()
            .insert(cluster);
    }

    /// The label keys the bindings were classified with.
    pub fn keys(&self) -> &ResolvedLabelKeys {
        &self.keys
    }

    /// One binding with its classification.
    pub fn binding(&self, name: &str) -> Option<&BindingEntry> {
        self.bindings.get(name)
    }

    /// Every binding, by name.
    pub fn bindings(&self) -> impl Iterator<Item = &BindingEntry> {
        self.bindings.values()
    }

    /// The members of a pool; `None` when no binding is in it.
    pub fn pool(&self, key: &PoolKey) -> Option<&PoolMembers> {
        self.pools.get(key)
    }

    /// Every pool that has at least one binding.
    pub fn pools(&self) -> impl Iterator<Item = (&PoolKey, &PoolMembers)> {
        self.pools.iter()
    }

    /// The bindings a tenant holds in a pool (dirty ones excluded, as the tenant selector does).
    pub fn owned_by(&self, key: &PoolKey, tenant: &str) -> &BTreeSet<String> {
        self.pools
            .get(key)
            .and_then(|m| m.owned.get(tenant))
            .unwrap_or(&EMPTY)
    }

    /// The clusters on a binding, by name.
    pub fn clusters_on(&self, binding: &str) -> &BTreeSet<String> {
        self.clusters.get(binding).unwrap_or(&EMPTY)
    }

    /// The bindings a cluster is counted on (normally one).
    pub fn bindings_of_cluster(&self, cluster: &str) -> &BTreeSet<String> {
        self.cluster_bindings.get(cluster).unwrap_or(&EMPTY)
    }

    /// The non-deleting claims bound to a binding, as uid → cluster name.
    pub fn claims_on(&self, binding: &str) -> &BTreeMap<String, String> {
        self.claims_on.get(binding).unwrap_or(&EMPTY_MAP)
    }

    /// Whether the Shoot cache holds a Shoot of that name.
    pub fn shoot_exists(&self, name: &str) -> bool {
        self.shoots.contains(name)
    }

    /// The cache's view of a claim, by uid.
    pub fn claim(&self, uid: &str) -> Option<&ClaimRecord> {
        self.claims.get(uid)
    }
}

#[cfg(test)]
pub(crate) mod tests;
