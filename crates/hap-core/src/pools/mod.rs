//! Plain views of bindings, AccountClaims and Shoots, and the `Inventory` index over them: pool
//! membership, clusters per binding (docs/design.md §4), shoot presence. The index is kept current one
//! watch event at a time (`index.rs`); this file holds the views and what decisions read.
//!
//! Pool membership is decided only by `PoolKey::selectors` (crate::labels); this module derives a
//! candidate `PoolKey` from a binding's labels and then asks the selectors, so the text users see in
//! `hap explain` and what the operator does can never drift apart. Consequences worth knowing:
//! a binding labelled `euAccess=false` matches neither `euAccess=true` nor `!euAccess` and is in no
//! pool; a binding with any `dirty` value (even `false`) is excluded by `!dirty` and counted dirty.
//!
//! A cluster is the union, by name, of non-deleting Bound AccountClaims whose binding lives in the
//! index's binding namespace (their `shootName`, else `namespace/name`, which cannot collide with
//! a Shoot name), claims whose source object names the binding itself (`spec.adoptBinding`,
//! whatever the adoption's verdict: the object's Shoot will run there) and Shoots naming the
//! binding. A deleting claim no longer counts by itself: while
//! its Shoot lives, the Shoot counts instead; this lets two claims of one tenant released at the
//! same time both see the binding as free.

mod account;
pub mod figures;
mod from_api;
mod index;
pub mod lifecycle;
pub mod quarantine;
mod states;
mod tallies;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

pub use account::Account;
pub use from_api::{binding_view, claim_view, claim_view_of, shoot_view};
pub use index::{Changes, Kind, Relist, is_newer};

use crate::api::{BindingKind, CredentialsKind};
use crate::labels::{LabelLookup, PoolKey, ResolvedLabelKeys};
use crate::small_map::{SmallMap, SmallSet};
pub use states::Rules as LifecycleRules;
pub use tallies::Touched;

/// What selection and release need to know about one binding.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BindingView {
    pub name: String,
    /// Precondition for compare-and-swap label writes, and the order of views.
    pub resource_version: Option<String>,
    /// A short sorted list: a `BTreeMap` node of two or three labels took ~550 bytes.
    pub labels: SmallMap<String>,
    /// What the binding's `credentialsRef` names (one byte; status and `hap pools` count them).
    pub credentials: CredentialsKind,
    /// The credential the binding references (`Account`, eight bytes); `None` when unknown, and
    /// then the binding is an account of its own.
    pub account: Option<Account>,
    /// The binding's `accountpool.io/` annotations only (the cordon reason); the rest is
    /// skipped while decoding (crate::k8s::lean).
    pub annotations: BTreeMap<String, String>,
    /// `metadata.creationTimestamp` in seconds since the epoch (`quarantine::creation_second`;
    /// four bytes, held in what was padding): whether the binding can be new to a quarantine
    /// (`quarantine::on_trial`).
    pub created: Option<std::num::NonZeroU32>,
}

/// What selection and release need to know about one AccountClaim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: Option<String>,
    pub global_account: String,
    pub shoot_name: Option<String>,
    /// The binding the claim's status records (`Bound`, or `Failed` when `lost`): once recorded,
    /// the claim never moves (docs/design.md §4.1).
    pub bound_binding: Option<String>,
    /// Where the recorded binding lives (`status.bindingNamespace`); `None` reads as the
    /// binding namespace in force.
    pub binding_namespace: Option<String>,
    /// The status is `Failed`: the recorded binding was lost and holds no cluster of this claim.
    pub lost: bool,
    /// The pool a pending claim waits for (from its status), so that a change of that pool
    /// brings it back.
    pub waiting_in: Option<PoolKey>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// A deny entry refused it: final, nothing in the inventory changes it.
    pub denied: bool,
    /// What the request-source pass reads of a claim a source created (its kind, object, phase,
    /// binding, creation); `None`, one pointer, for every other claim.
    pub source: Option<Box<crate::claim_state::SourceFacts>>,
    /// The claim write its status records as sent and not seen settled (`status.claimWrite`);
    /// boxed: one pointer for the many claims without one.
    pub claim_write: Option<Box<crate::api::PendingClaimWrite>>,
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
    pub resource_version: Option<String>,
    /// `spec.credentialsBindingName`, else `spec.secretBindingName`. In the index: the key the
    /// Shoot is counted under (`Inventory::binding_key`), which tells the two kinds apart.
    pub binding: Option<String>,
    /// Which of the two fields names the binding.
    pub binding_kind: BindingKind,
    /// The codes of `status.lastErrors`, sorted, each once (usually none).
    pub error_codes: Vec<String>,
    /// `status.lastOperation` says the Shoot was created (`quarantine::shoot_created`).
    pub created: bool,
}

/// A binding of the kind the pools are not made of: what counting its Shoots needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OtherBinding {
    pub resource_version: Option<String>,
    pub account: Option<Account>,
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
    /// `claimable` in the order selection ranks a new tenant's candidates in: never released
    /// first, then by the release recorded on them, oldest first (`lifecycle::released`). Kept
    /// per event, so that a selection checks the first few instead of every free binding.
    pub claim_order: BTreeSet<(Option<jiff::Timestamp>, String)>,
    pub internal_free: BTreeSet<String>,
    pub owned: BTreeMap<String, SmallSet>,
    pub dirty: BTreeSet<String>,
}

impl PoolMembers {
    /// Whether a binding in the pool is not dirty: what `PoolKey::usable` says of its labels.
    pub fn has_usable(&self) -> bool {
        !self.shared.is_empty()
            || !self.claimable.is_empty()
            || !self.internal_free.is_empty()
            || self.owned.values().any(|s| !s.is_empty())
    }

    fn is_empty(&self) -> bool {
        self.shared.is_empty()
            && self.claimable.is_empty()
            && self.internal_free.is_empty()
            && self.owned.is_empty()
            && self.dirty.is_empty()
    }
}

/// The clusters on one binding, each with the number of sources (a claim, a Shoot) naming it.
#[derive(Clone, Copy, Debug)]
pub struct Clusters<'a>(Option<&'a SmallMap<u32>>);

impl<'a> Clusters<'a> {
    pub fn len(&self) -> usize {
        self.0.map_or(0, SmallMap::len)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn contains(&self, cluster: &str) -> bool {
        self.0.is_some_and(|m| m.contains_key(cluster))
    }
    pub fn iter(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .into_iter()
            .flat_map(|m| m.keys().map(String::as_str))
    }
}

/// The index over the watch caches: built from their events, one object at a time (index.rs),
/// read by selection, release, figures and the HapConfig status.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    keys: ResolvedLabelKeys,
    /// The binding namespace in force; `None` (tests, the CLI) counts every claim.
    namespace: Option<String>,
    /// Where the operator keeps the claims of request sources. Only there does the binding a
    /// claim's object names count as used: anyone may create AccountClaims with source labels
    /// in a namespace of their own. `None` counts no named binding.
    source_claim_namespace: Option<String>,
    /// Boxed: an entry is ~190 bytes, and a tree node keeps about half of its eleven slots
    /// empty (~380 bytes a binding unboxed, ~250 boxed).
    bindings: BTreeMap<String, index::Marked<Box<BindingEntry>>>,
    /// The indexed bindings per credential (`BindingView::account`).
    accounts: HashMap<Account, SmallSet>,
    /// Per credential two or more bindings reference: the union of their `clusters`
    /// (`clusters_on` reads it; an account of one binding reads that binding's own).
    shared: HashMap<Account, SmallMap<u32>>,
    /// The credentials two or more indexed bindings reference (reported, `bindings_in_use`).
    multi: BTreeSet<Account>,
    /// The kind of the bindings in `bindings` (the pools); Shoots on a binding of the other kind
    /// are counted under that binding's `Kind/name` key (`binding_key`).
    binding_kind: BindingKind,
    /// The bindings of the other kind, by name: only the account each references. Never pooled,
    /// never written; they make a Shoot Gardener moved onto one count with its account, and are
    /// members of `accounts` under their `Kind/name` key.
    others: HashMap<String, index::Marked<OtherBinding>>,
    pools: BTreeMap<PoolKey, PoolMembers>,
    clusters: HashMap<String, SmallMap<u32>>,
    cluster_bindings: HashMap<String, SmallMap<u32>>,
    claims_on: HashMap<String, SmallMap<String>>,
    /// Boxed: the table keeps ~40 % of its slots empty, and a view is ~230 bytes.
    /// Shared (`Arc`): the request-source pass takes its claims' views under the ledger's lock
    /// by reference count alone, and reads them after the lock is gone.
    claims: HashMap<String, index::Marked<Arc<ClaimView>>>,
    recorded: HashMap<String, SmallSet>,
    /// Per global account, the claims whose status records a claim write of a binding it does
    /// not record as its own (`status.claimWrite`): a write perhaps still in flight, maybe a
    /// previous leader's. Few: the record goes once a status records its binding.
    claim_writes: HashMap<String, SmallSet>,
    /// The uids of the deleting claims whose status records a binding here (not lost): the
    /// releases under way, which a hold of binding writes keeps waiting.
    releasing: BTreeSet<String>,
    waiting: HashMap<PoolKey, BTreeSet<String>>,
    shoots: HashMap<String, index::Marked<ShootView>>,
    books: index::Books,
    changes: Changes,
    gone: Vec<(Kind, String)>,
    tallies: tallies::Tallies,
    /// The uids of the claims a request source created, per namespace and kind: the source
    /// controller reads which kinds it must watch, and walks its claims, without walking every
    /// claim.
    source_claims: HashMap<String, BTreeMap<crate::api::SourceKind, BTreeSet<String>>>,
    /// Moves with every event of such a claim: the source controller skips a pass it has done.
    source_epoch: u64,
    /// Binding states and what the lifecycle status names, kept per event (`states.rs`).
    life: states::Tracker,
}

static EMPTY: BTreeSet<String> = BTreeSet::new();
static EMPTY_SET: SmallSet = SmallSet::new();
static EMPTY_MAP: SmallMap<String> = SmallMap::Few(Vec::new());

/// Which pool a binding is in and in which role, by the pool selectors alone.
pub fn classify(
    keys: &ResolvedLabelKeys,
    labels: &impl LabelLookup,
) -> Option<(PoolKey, BindingClass)> {
    let is_true = |k: &str| labels.label(k).map(String::as_str) == Some("true");
    let pool = PoolKey::of(keys, labels)?;
    let tenant = labels.label(&keys.tenant_name).cloned();
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
    if pool.shared || !labels.has_label(&keys.dirty) {
        return None;
    }
    selectors
        .any
        .matches(&Without(labels, &keys.dirty))
        .then_some((pool, BindingClass::Dirty { tenant }))
}

/// Labels as if one of them were not there.
struct Without<'a, L>(&'a L, &'a str);

impl<L: LabelLookup> LabelLookup for Without<'_, L> {
    fn label(&self, key: &str) -> Option<&String> {
        (key != self.1).then(|| self.0.label(key)).flatten()
    }
}

impl Inventory {
    /// The size of the index's maps, by the name of the structure (`hap_internal_entries`): a
    /// map that grows while the landscape does not is a leak. A map of sets counts its sets'
    /// members, so a name left behind inside one shows too.
    pub fn entry_counts(&self) -> [(&'static str, usize); 12] {
        fn members<K, S>(m: &HashMap<K, S>, len: impl Fn(&S) -> usize) -> usize {
            m.values().map(len).sum()
        }
        [
            ("index_bindings", self.bindings.len()),
            ("index_other_bindings", self.others.len()),
            ("index_accounts", members(&self.accounts, SmallSet::len)),
            ("index_shoots", self.shoots.len()),
            ("index_clusters", members(&self.clusters, SmallMap::len)),
            ("index_claims", self.claims.len()),
            ("index_claims_on", members(&self.claims_on, SmallMap::len)),
            ("index_recorded", members(&self.recorded, SmallSet::len)),
            (
                "index_claim_writes",
                members(&self.claim_writes, SmallSet::len),
            ),
            ("index_releasing", self.releasing.len()),
            ("index_waiting", members(&self.waiting, BTreeSet::len)),
            (
                "index_source_claims",
                self.source_claims
                    .values()
                    .flat_map(BTreeMap::values)
                    .map(BTreeSet::len)
                    .sum(),
            ),
        ]
    }

    /// An empty index classifying bindings with `keys`.
    pub fn new(keys: ResolvedLabelKeys) -> Self {
        Inventory {
            keys,
            ..Default::default()
        }
    }

    /// Indexes one complete view of the three kinds (tests, benchmarks, the CLI).
    pub fn build(
        keys: ResolvedLabelKeys,
        bindings: impl IntoIterator<Item = BindingView>,
        claims: impl IntoIterator<Item = ClaimView>,
        shoots: impl IntoIterator<Item = ShootView>,
    ) -> Self {
        let mut inv = Inventory::new(keys);
        for view in bindings {
            inv.apply_binding(view);
        }
        for claim in claims {
            inv.apply_claim(claim);
        }
        for shoot in shoots {
            inv.apply_shoot(shoot);
        }
        inv.take_changes();
        inv
    }

    /// The label keys the bindings were classified with.
    pub fn keys(&self) -> &ResolvedLabelKeys {
        &self.keys
    }

    /// The binding namespace claims are counted for, when one is set.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// Whether the binding a recorded claim write names is one of this index's bindings (its
    /// namespace and kind those in force; a record without them is taken as written here).
    pub fn holds_write(&self, w: &crate::api::PendingClaimWrite) -> bool {
        self.holds_namespace(w.namespace.as_deref())
            && w.kind.is_none_or(|k| k == self.binding_kind)
    }

    /// Whether a claim's binding, recorded in `namespace`, is one of this index's bindings.
    pub fn holds_namespace(&self, namespace: Option<&str>) -> bool {
        match (namespace, &self.namespace) {
            (Some(ns), Some(mine)) => ns == mine,
            _ => true,
        }
    }

    /// One binding with its classification.
    pub fn binding(&self, name: &str) -> Option<&BindingEntry> {
        self.bindings.get(name).map(|e| &*e.item)
    }

    /// Every binding, by name.
    pub fn bindings(&self) -> impl Iterator<Item = &BindingEntry> {
        self.bindings.values().map(|e| &*e.item)
    }

    /// The members of a pool; `None` when no binding is in it.
    pub fn pool(&self, key: &PoolKey) -> Option<&PoolMembers> {
        self.pools.get(key)
    }

    /// Every pool that has at least one binding.
    pub fn pools(&self) -> impl Iterator<Item = (&PoolKey, &PoolMembers)> {
        self.pools.iter()
    }

    /// The pools with a binding that is not dirty (`PoolKey::usable` of every binding, kept per
    /// event, under this index's `keys`: a caller with other keys must walk the labels): what
    /// the MissingPool check needs, without walking the bindings.
    pub fn usable_pools(&self) -> impl Iterator<Item = &PoolKey> {
        self.pools
            .iter()
            .filter(|(_, m)| m.has_usable())
            .map(|(k, _)| k)
    }

    /// The bindings a tenant holds in a pool (dirty ones excluded, as the tenant selector does).
    pub fn owned_by(&self, key: &PoolKey, tenant: &str) -> &SmallSet {
        self.pools
            .get(key)
            .and_then(|m| m.owned.get(tenant))
            .unwrap_or(&EMPTY_SET)
    }

    /// The clusters on a binding's account, by name: those on every binding that references the
    /// same credential (`Account`), so a Shoot Gardener moved to another binding of the account
    /// (of either kind) still counts here.
    pub fn clusters_on(&self, binding: &str) -> Clusters<'_> {
        self.clusters_of(binding, self.account_of(binding))
    }

    /// The kind of the bindings the pools are made of.
    pub fn binding_kind(&self) -> BindingKind {
        self.binding_kind
    }

    /// The key a binding of `kind` named `name` is indexed and counted under: its name when it
    /// is of the pools' kind, else `Kind/name` (no object name holds a `/`, so a SecretBinding
    /// and a CredentialsBinding of one name never meet).
    pub fn binding_key(&self, kind: BindingKind, name: &str) -> String {
        if kind == self.binding_kind {
            name.to_string()
        } else {
            format!("{}/{name}", kind.gvk().2)
        }
    }

    /// The account of an indexed binding, or of a binding of the other kind by its key.
    fn account_of(&self, key: &str) -> Option<Account> {
        if let Some(e) = self.bindings.get(key) {
            return e.view.account;
        }
        let name = key
            .strip_prefix(self.other_kind().gvk().2)?
            .strip_prefix('/')?;
        self.others.get(name)?.account
    }

    /// The kind the pools are not made of.
    pub fn other_kind(&self) -> BindingKind {
        match self.binding_kind {
            BindingKind::CredentialsBinding => BindingKind::SecretBinding,
            BindingKind::SecretBinding => BindingKind::CredentialsBinding,
        }
    }

    /// The bindings of the other kind, by name, with the account each references.
    pub fn other_bindings(&self) -> impl Iterator<Item = (&str, Option<Account>)> {
        self.others.iter().map(|(n, o)| (n.as_str(), o.account))
    }

    /// The clusters of binding `name` whose reference is `account` (it may not be indexed yet).
    fn clusters_of(&self, name: &str, account: Option<Account>) -> Clusters<'_> {
        match account.and_then(|a| self.shared.get(&a)) {
            Some(union) => Clusters(Some(union)),
            None => Clusters(self.clusters.get(name)),
        }
    }

    /// The clusters whose claim or Shoot names this very binding (not its account's others).
    pub fn clusters_on_binding(&self, binding: &str) -> Clusters<'_> {
        Clusters(self.clusters.get(binding))
    }

    /// The other indexed bindings that reference the same credential as `binding`, by name; a
    /// binding of the other kind by its `Kind/name` key (`binding_key`).
    pub fn siblings<'a>(&'a self, binding: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.bindings
            .get(binding)
            .and_then(|e| e.view.account)
            .and_then(|a| self.accounts.get(&a))
            .into_iter()
            .flat_map(SmallSet::iter)
            .map(String::as_str)
            .filter(move |n| *n != binding)
    }

    /// A sibling of `binding` (`siblings`) that keeps the account from a new tenant, with the
    /// label that says so: a tenant, dirty, shared, internal, cordoned or marked cleanup-failed.
    /// Read from the labels, not the pool class, so a sibling in no pool counts too. The account
    /// is one: `binding` is claimable only while every sibling is itself free. The first by name.
    pub fn account_held_by_sibling<'a>(&'a self, binding: &'a str) -> Option<(&'a str, String)> {
        self.siblings(binding).find_map(|s| {
            Some((
                s,
                holding_label(&self.keys, &self.bindings.get(s)?.view.labels)?,
            ))
        })
    }

    /// The bindings a cluster is counted on (normally one).
    #[cfg(test)]
    pub(crate) fn bindings_of_cluster(&self, cluster: &str) -> Vec<&str> {
        self.cluster_bindings
            .get(cluster)
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// The non-deleting claims bound to a binding, as uid → cluster name.
    pub fn claims_on(&self, binding: &str) -> &SmallMap<String> {
        self.claims_on.get(binding).unwrap_or(&EMPTY_MAP)
    }

    /// Whether the index holds a Shoot of that name.
    pub fn shoot(&self, name: &str) -> Option<&ShootView> {
        self.shoots.get(name).map(|s| &s.item)
    }

    /// The index's view of a claim, by uid.
    pub fn claim(&self, uid: &str) -> Option<&ClaimView> {
        self.claims.get(uid).map(|c| &*c.item)
    }

    /// Every claim the index holds.
    pub fn claims(&self) -> impl Iterator<Item = &ClaimView> {
        self.claims.values().map(|c| &*c.item)
    }

    /// Every claim the index holds, shared: a walk that cannot hold the ledger's lock for all of
    /// them at once takes these and asks `claim` for each one's current view.
    pub fn claims_shared(&self) -> Vec<Arc<ClaimView>> {
        self.claims.values().map(|c| c.item.clone()).collect()
    }

    /// The claims whose status records `binding` (Bound or lost, deleting or not), by uid.
    pub fn recorded_on(&self, binding: &str) -> &SmallSet {
        self.recorded.get(binding).unwrap_or(&EMPTY_SET)
    }

    /// The claims of `global_account` whose status records a claim write it does not record as
    /// its binding (`ClaimView::claim_write`), by uid.
    pub fn claim_writes_of(&self, global_account: &str) -> &SmallSet {
        self.claim_writes.get(global_account).unwrap_or(&EMPTY_SET)
    }

    /// The pending claims whose status says they wait for `pool`, by uid.
    pub fn waiting_in(&self, pool: &PoolKey) -> &BTreeSet<String> {
        self.waiting.get(pool).unwrap_or(&EMPTY)
    }

    /// How many deleting claims still record a binding here (releases under way), kept per event.
    pub fn releasing(&self) -> usize {
        self.releasing.len()
    }

    /// Every pool some pending claim waits for, with the number of such claims.
    pub fn waiting(&self) -> impl Iterator<Item = (&PoolKey, usize)> {
        self.waiting.iter().map(|(k, v)| (k, v.len()))
    }

    /// The kinds of the claims request sources created in `namespace`.
    pub fn source_kinds(&self, namespace: &str) -> BTreeSet<crate::api::SourceKind> {
        self.source_claims
            .get(namespace)
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default()
    }

    /// The claims request sources created in `namespace`, by kind, then uid.
    pub fn source_claims(&self, namespace: &str) -> impl Iterator<Item = &Arc<ClaimView>> {
        self.source_claims
            .get(namespace)
            .into_iter()
            .flat_map(BTreeMap::values)
            .flatten()
            .filter_map(|uid| self.claims.get(uid).map(|c| &c.item))
    }

    /// A number that changes whenever a claim a request source created changes.
    pub fn source_epoch(&self) -> u64 {
        self.source_epoch
    }

    /// Number of bindings, claims and Shoots indexed (bindings of the other kind not counted).
    pub fn len(&self) -> (usize, usize, usize) {
        (self.bindings.len(), self.claims.len(), self.shoots.len())
    }
}

#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
#[cfg(test)]
mod random_events;
#[cfg(test)]
mod tests;

/// The label by which a binding keeps its account from a new tenant, as `key=value`: a tenant,
/// dirty, shared, internal, cordoned or marked cleanup-failed. Labels as the index or a fresh
/// read has them.
pub fn holding_label(k: &ResolvedLabelKeys, labels: &impl LabelLookup) -> Option<String> {
    let shown = |key: &str| labels.label(key).map(|v| format!("{key}={v}"));
    let is_true = |key: &str| labels.label(key).map(String::as_str) == Some("true");
    shown(&k.tenant_name)
        .or_else(|| shown(&k.dirty))
        .or_else(|| {
            [&k.shared, &k.internal]
                .into_iter()
                .find(|key| is_true(key))
                .map(|key| format!("{key}=true"))
        })
        .or_else(|| {
            [lifecycle::CORDONED, lifecycle::CLEANUP_FAILED]
                .into_iter()
                .find(|key| is_true(key))
                .map(|key| format!("{key}=true"))
        })
}
