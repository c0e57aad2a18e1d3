//! Choosing a binding for one AccountClaim, in the order of docs/design.md §4, over an `Inventory` seen
//! through the in-flight writes (`InFlight`): `select` for one pool, `select_ordered` over an
//! entry's ordered pools with pins (see `ordered` and `pinned`).
//!
//! Decisions where the design is silent:
//! - `internal=true` bindings are never claimed (upstream ignores the label when selecting; we
//!   read it as "not the operator's to hand out"). One that already carries a tenant is used for
//!   that tenant, which needs no write, so invariant §5.4 holds.
//! - A cluster that already uses one of the tenant's bindings in the pool (its Shoot exists, or a
//!   write of this claim is in flight) gets that binding again (`Reused`), even at the limit: it is
//!   not a new cluster, and this makes repeated selection for one claim idempotent.
//! - Without multi-account, should the tenant hold several bindings in the pool (a leftover of an
//!   earlier allowlist, an orphan), its claims go to the one with the most clusters, the first by
//!   name among equals; limits apply only to allowlisted tenants.
//! - Claim candidates are ordered per tenant by rendezvous hashing, so tenants spread over the
//!   free bindings; `exclude` (bindings whose claim just conflicted) moves them to the back, but
//!   they are still tried when nothing else is left, as the compare-and-swap keeps that safe.
//! - A binding a cluster uses is never claimed, whoever uses it: an untenanted binding with a
//!   Shoot on it (created naming it, adopted across a label-key change, or stripped by a cleanup
//!   job too early) would otherwise put a second tenant into that cloud account. The HapConfig
//!   status names such bindings (`InUseWithoutTenant`).
//! - While a claim write for the tenant in the pool is in progress or its outcome is unknown, the
//!   tenant's other claims get `Wait` rather than a second binding (§5.2) or a binding whose
//!   claim may still fail; the claim that made the write retries it.
//! - A binding released by another tenant less than `spec.release.cooldown` ago is not claimed,
//!   nor is any other binding of its credential (the tenant that released it may have it back); among the candidates the never-used ones
//!   come first, then the one released longest ago. Pins ignore the cooldown: a pin
//!   is a person's explicit choice.
//! - In a pool `spec.quarantine` names, a binding on trial (crate::pools::quarantine: new, or
//!   on probation) goes only to requests of the plans or global accounts the entry names, and
//!   those take bindings on trial first, so new accounts are proven by the traffic meant for it.
//!   Pins ignore the quarantine, as they ignore the cooldown.
//! - A cordoned binding (`accountpool.io/cordoned=true`, crate::pools::lifecycle) is never
//!   claimed; a tenant that already holds it keeps using it, so its clusters stay together.
//! - Every `Use` of a binding the operator may release records its claim there (`FILLING`, and
//!   another claim's `claimed-by` removed) with a compare-and-swap before its status
//!   (`claimant::before_use`): no later release can take the binding for untouched, a release
//!   decided on the older version fails, and every leader counts the recorded claims whose status
//!   it does not see yet, so a status write of a previous leader still in flight can neither put
//!   the binding over its limit nor land on a binding released under it.

pub mod account_check;
pub mod claimant;
mod hash;
mod inflight;
mod ordered;
pub mod pinned;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::Instant;

pub use account_check::{
    AfterClaim, Check, ClaimWrite, after_claim, claim_write_on, own_write, siblings_to_check,
};
pub use claimant::{BeforeUse, before_use, has_strays, stray_claimant, strays_of};
pub use hash::weight;
pub use inflight::{
    DEFAULT_TTL, InFlight, PendingAssignment, PendingClaim, PendingRelease, WriteState,
};
pub use ordered::{OrderedRequest, Placement, select_ordered};

use crate::api::{Decision, MultiHyperscalerAccount};
use crate::labels::PoolKey;
use crate::pools::{ClaimView, Inventory};

/// Why an existing binding was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UseReason {
    /// The tenant's binding in the pool (or the one the cluster already uses).
    Reused,
    /// The shared binding with the fewest clusters.
    SharedLeastUsed,
    /// Multi-account: the tenant's binding with the most clusters below the limit.
    FilledMostPopulated,
    /// The binding pinned to the tenant, already labelled for it.
    Pinned,
}

impl From<UseReason> for Decision {
    fn from(r: UseReason) -> Self {
        match r {
            UseReason::Reused => Decision::Reused,
            UseReason::SharedLeastUsed => Decision::SharedLeastUsed,
            UseReason::FilledMostPopulated => Decision::FilledMostPopulated,
            UseReason::Pinned => Decision::Pinned,
        }
    }
}

/// The answer for one claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Already bound and the binding is intact: nothing to do (apply-once).
    Bound { binding: String },
    /// Bound, but the binding is gone or no longer the tenant's: never rebind (docs/design.md §4.1).
    Lost { binding: String, message: String },
    /// Bind to this existing binding; nothing is written on the binding.
    Use {
        binding: String,
        decision: UseReason,
    },
    /// Write `tenantName=<global account>` on the binding, conditioned on this resourceVersion.
    Claim {
        binding: String,
        expected_resource_version: Option<String>,
    },
    /// A claim of `binding` for this tenant is being written; try again shortly.
    Wait { binding: String },
    /// Nothing to bind to; the message names the pool and the selector.
    Exhausted { pool: PoolKey, message: String },
}

impl Choice {
    /// The decision to record in the claim's status, for the choices that bind.
    pub fn decision(&self) -> Option<Decision> {
        match self {
            Choice::Use { decision, .. } => Some((*decision).into()),
            Choice::Claim { .. } => Some(Decision::Claimed),
            _ => None,
        }
    }
}

/// Multi-account settings with their defaults applied (docs/design.md §1, `multiHyperscalerAccount`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MultiAccountPolicy {
    all: bool,
    allowed: BTreeSet<String>,
    default_limit: Option<u32>,
    limits: BTreeMap<String, u32>,
    /// The release cooldown. Carried here, with the other per-config settings every
    /// selection takes, so that no caller signature changes for it.
    cooldown: Option<crate::pools::lifecycle::Cooldown>,
    /// The quarantine of new accounts as it applies to this request (`spec.quarantine`).
    quarantine: crate::pools::quarantine::Gate,
}

impl MultiAccountPolicy {
    /// `["*"]` allows every global account, `[]` or no spec none. Limits below 1 count as unset
    /// (upstream treats 0 so; the CRD rejects them anyway).
    pub fn from_spec(spec: Option<&MultiHyperscalerAccount>) -> Self {
        let Some(spec) = spec else {
            return Self::default();
        };
        let positive = |v: i32| u32::try_from(v).ok().filter(|v| *v > 0);
        let mut limits: BTreeMap<String, u32> = spec
            .limits
            .iter()
            .filter_map(|(k, v)| positive(*v).map(|v| (k.clone(), v)))
            .collect();
        let default_limit = limits.remove("default");
        Self {
            all: spec.allowed_global_accounts.iter().any(|g| g == "*"),
            allowed: spec
                .allowed_global_accounts
                .iter()
                .filter(|g| *g != "*")
                .cloned()
                .collect(),
            default_limit,
            limits,
            cooldown: None,
            quarantine: Default::default(),
        }
    }

    /// The same policy with the release cooldown in force.
    pub fn with_cooldown(mut self, cooldown: Option<crate::pools::lifecycle::Cooldown>) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// The same policy with the quarantine gate of the request in force.
    pub fn with_quarantine(mut self, gate: crate::pools::quarantine::Gate) -> Self {
        self.quarantine = gate;
        self
    }

    /// Whether the global account may hold several bindings per pool.
    pub fn allows(&self, global_account: &str) -> bool {
        self.all || self.allowed.contains(global_account)
    }

    /// Clusters per binding for a provider type: its own limit, else `default`, else none.
    pub fn limit_for(&self, provider_type: &str) -> Option<u32> {
        self.limits
            .get(provider_type)
            .copied()
            .or(self.default_limit)
    }
}

/// One claim to place.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub claim: &'a ClaimView,
    /// The pool the rules chose.
    pub pool: &'a PoolKey,
    /// The provider type of the plan (for the multi-account limit).
    pub provider_type: &'a str,
}

/// Clusters per binding: the cache's plus the in-flight assignments, united by cluster name.
struct Counts<'a> {
    inv: &'a Inventory,
    inflight: &'a InFlight,
    now: Instant,
    assigned: BTreeMap<&'a str, BTreeMap<&'a str, &'a str>>,
}

impl<'a> Counts<'a> {
    fn new(inv: &'a Inventory, inflight: &'a InFlight, now: Instant) -> Self {
        Self {
            inv,
            inflight,
            now,
            assigned: inflight.assigned(now),
        }
    }

    /// Also counts the claims the binding's records name whose status the index does not show
    /// yet (`claimant::pending_claims`): writes of a previous leader may still be in flight.
    fn clusters(&self, binding: &str) -> usize {
        let cached = self.inv.clusters_on(binding);
        let assigned = self
            .assigned
            .get(binding)
            .into_iter()
            .flat_map(|m| m.values().map(|c| c.to_string()));
        let fills = claimant::pending_claims(self.inv, self.inflight, binding, self.now)
            .map(ClaimView::cluster_name);
        let extra: BTreeSet<String> = assigned
            .chain(fills)
            .filter(|c| !cached.contains(c))
            .collect();
        cached.len() + extra.len()
    }

    /// Whether a claim's assignment to the binding is being written.
    fn being_assigned(&self, binding: &str) -> bool {
        self.assigned.get(binding).is_some_and(|m| !m.is_empty())
    }

    fn has(&self, binding: &str, cluster: &str) -> bool {
        self.inv.clusters_on(binding).contains(cluster)
            || self
                .assigned
                .get(binding)
                .is_some_and(|m| m.values().any(|c| *c == cluster))
            || claimant::pending_claims(self.inv, self.inflight, binding, self.now)
                .any(|c| c.cluster_name() == cluster)
    }
}

/// `hyperscalerType=aws, euAccess, dedicated`: how messages name a pool.
pub fn describe_pool(pool: &PoolKey) -> String {
    let eu = if pool.eu_access {
        "euAccess"
    } else {
        "no euAccess"
    };
    let kind = if pool.shared { "shared" } else { "dedicated" };
    format!("hyperscalerType={}, {eu}, {kind}", pool.hyperscaler_type)
}

/// Whether a bound claim's binding is intact, as step 1 of docs/design.md §4 requires.
pub fn check_bound(
    inv: &Inventory,
    inflight: &InFlight,
    claim: &ClaimView,
    now: Instant,
) -> Option<Choice> {
    let binding = claim.bound_binding.as_ref()?;
    let keys = inv.keys();
    let ga = &claim.global_account;
    let lost = |why: String| Choice::Lost {
        binding: binding.clone(),
        message: why,
    };
    let Some(entry) = inv.binding(binding) else {
        return Some(lost(format!("binding {binding} no longer exists")));
    };
    let labels = &entry.view.labels;
    let shared = labels.get(&keys.shared).map(String::as_str) == Some("true");
    let pending = inflight
        .claim_of(binding, now)
        .is_some_and(|p| p.tenant == *ga && p.state == WriteState::Written);
    Some(match labels.get(&keys.tenant_name) {
        _ if shared || pending => Choice::Bound {
            binding: binding.clone(),
        },
        Some(t) if t == ga => Choice::Bound {
            binding: binding.clone(),
        },
        Some(t) => lost(format!(
            "binding {binding} now carries {}={t}, not {ga}",
            keys.tenant_name
        )),
        None => lost(format!(
            "binding {binding} no longer carries {}={ga}",
            keys.tenant_name
        )),
    })
}

/// Whether a claim that records its decision needs a reconcile because of what the inventory
/// says now: the verdict on its recorded binding (`check_bound`: Bound, or lost) no longer
/// matches its phase, or it is the claimant of a stray binding it must give back
/// (`stray_claimant`). A denial is final and a deleting claim belongs to the release: neither
/// needs one for this. The one definition of "a settled claim needs a visit": the revisits after
/// inventory changes (`controller::revisit`), the sweep, and the claim store (which holds a
/// settled claim only while it needs one, `k8s::claim_store`) all ask it. A claim whose
/// binding is on probation and a Shoot on it succeeded needs one too: its reconcile records
/// the end of the trial (`controller::quarantine`). Pure.
pub fn needs_visit(claim: &ClaimView, inv: &Inventory, inflight: &InFlight, now: Instant) -> bool {
    if claim.denied || claim.deleting {
        return false;
    }
    let disagrees = claim.bound_binding.is_some()
        && inv.holds_namespace(claim.binding_namespace.as_deref())
        && matches!(
            check_bound(inv, inflight, claim, now),
            Some(Choice::Lost { .. })
        ) != claim.lost;
    let proven = claim
        .bound_binding
        .as_deref()
        .is_some_and(|b| !claim.lost && crate::pools::quarantine::proven_by(inv, b).is_some());
    disagrees || has_strays(inv, inflight, claim, now) || proven
}

/// Chooses a binding for `req.claim` (docs/design.md §4). Pure: reads the inventory and the in-flight
/// writes; the caller records the result with `InFlight::record` before writing anything.
pub fn select(
    inv: &Inventory,
    inflight: &InFlight,
    req: &Request<'_>,
    policy: &MultiAccountPolicy,
    exclude: &BTreeSet<String>,
    now: Instant,
) -> Choice {
    select_with(inv, inflight, req, policy, exclude, None, now)
}

/// Bindings pinned to other tenants than `tenant`: never claimed for it.
pub(crate) struct Reserved<'a> {
    pub pins: &'a crate::rules::Pins,
    pub tenant: &'a str,
}

/// As `select`, keeping `reserved` bindings from the claim.
pub(crate) fn select_with(
    inv: &Inventory,
    inflight: &InFlight,
    req: &Request<'_>,
    policy: &MultiAccountPolicy,
    exclude: &BTreeSet<String>,
    reserved: Option<&Reserved<'_>>,
    now: Instant,
) -> Choice {
    if let Some(bound) = check_bound(inv, inflight, req.claim, now) {
        return bound;
    }
    let counts = Counts::new(inv, inflight, now);
    let cluster = req.claim.cluster_name();
    let pool = req.pool;
    let members = inv.pool(pool);
    if pool.shared {
        let shared = members.map(|m| &m.shared).into_iter().flatten();
        let shared: Vec<&String> = shared.collect();
        if let Some(b) = shared.iter().find(|b| counts.has(b, &cluster)) {
            return Choice::Use {
                binding: (*b).clone(),
                decision: UseReason::Reused,
            };
        }
        // Sets iterate by name, so `min_by_key` keeps the first name among equal counts.
        return match shared.iter().min_by_key(|b| counts.clusters(b)) {
            Some(b) => Choice::Use {
                binding: (*b).clone(),
                decision: UseReason::SharedLeastUsed,
            },
            None => {
                let any = pool.selectors(inv.keys(), &req.claim.global_account).any;
                let message = format!(
                    "no shared binding in pool {}: selector {any} matches none",
                    describe_pool(pool)
                );
                Choice::Exhausted {
                    pool: pool.clone(),
                    message,
                }
            }
        };
    }
    let limits = Limits {
        policy,
        exclude,
        reserved,
    };
    select_dedicated(inv, inflight, req, &limits, now, &counts)
}

/// What keeps bindings from a claim: the multi-account policy, bindings to try last, bindings
/// pinned to other tenants.
struct Limits<'a> {
    policy: &'a MultiAccountPolicy,
    exclude: &'a BTreeSet<String>,
    reserved: Option<&'a Reserved<'a>>,
}

fn select_dedicated(
    inv: &Inventory,
    inflight: &InFlight,
    req: &Request<'_>,
    limits: &Limits<'_>,
    now: Instant,
    counts: &Counts<'_>,
) -> Choice {
    let own = match own_bindings(inv, inflight, req, now) {
        Ok(own) => own,
        Err(retry) => return retry,
    };
    if let Some(choice) = reuse(&own.mine, req, limits.policy, counts) {
        return choice;
    }
    if let Some(b) = own.writing {
        return Choice::Wait {
            binding: b.to_string(),
        };
    }
    let found = if limits.policy.quarantine.ranks_trials_first(req.pool) {
        // Bindings on trial first: an order of this request's own, so every free binding is
        // checked, then the survivors ranked.
        let (candidates, skipped) = free_candidates(inv, inflight, req, limits, now, counts);
        let ga = req.claim.global_account.as_str();
        let trial = |b: &str| {
            inv.binding(b)
                .is_some_and(|e| limits.policy.quarantine.prefers(req.pool, &e.view))
        };
        spread(inv, limits.exclude, ga, candidates, trial).ok_or(skipped)
    } else {
        first_free(inv, inflight, req, limits, now, counts)
    };
    match found {
        Ok(b) => claim_of(inv, b),
        Err(skipped) => Choice::Exhausted {
            pool: req.pool.clone(),
            message: exhausted_message(inv, req, limits.policy, &skipped, own.mine.len()),
        },
    }
}

/// Claim `b`, conditioned on the version of it the index holds.
fn claim_of(inv: &Inventory, b: &str) -> Choice {
    Choice::Claim {
        binding: b.to_string(),
        expected_resource_version: inv.binding(b).and_then(|e| e.view.resource_version.clone()),
    }
}

/// The tenant's own bindings in a pool.
struct Own<'a> {
    /// Held, or claimed by a write already answered.
    mine: BTreeSet<&'a str>,
    /// One being released, or claimed by another of the tenant's claims: its claims wait for it.
    writing: Option<&'a str>,
}

/// The tenant's bindings in the pool, from the index and the writes in flight. `Err` is this
/// claim's own earlier attempt, unanswered or in doubt, which is tried again before anything
/// else.
fn own_bindings<'a>(
    inv: &'a Inventory,
    inflight: &'a InFlight,
    req: &Request<'a>,
    now: Instant,
) -> Result<Own<'a>, Choice> {
    let (pool, ga) = (req.pool, req.claim.global_account.as_str());
    // A binding of the tenant being released is neither used (the release may succeed) nor
    // replaced (it may fail, and the tenant would hold two): the tenant's claims wait for it.
    let mut writing = None;
    let mut mine: BTreeSet<&str> = BTreeSet::new();
    let cluster = req.claim.cluster_name();
    for b in inv.owned_by(pool, ga) {
        if crate::pools::lifecycle::closed_to(inv, b, &cluster) {
            continue;
        }
        if claimant::stray_claimant(inv, inflight, b, now).is_some() {
            // Never used, and on its way back to the pool (`claimant::stray_claimant`).
            continue;
        }
        if inflight.is_releasing(b, now) || account_wiped(inv, inflight, b, now) {
            writing = writing.or(Some(b.as_str()));
        } else {
            mine.insert(b);
        }
    }
    for (b, p) in inflight.claims_for(pool, ga, now) {
        if inflight.is_releasing(b, now) || account_wiped(inv, inflight, b, now) {
            writing = writing.or(Some(b));
            continue;
        }
        if p.state == WriteState::Written {
            mine.insert(b);
        } else if p.claim_uid == req.claim.uid {
            // This claim's own earlier attempt, unanswered or in doubt: the same compare-and-swap
            // again either succeeds (and the earlier one cannot commit any more) or proves the
            // binding moved on, which the index will show.
            return Err(Choice::Claim {
                binding: b.to_string(),
                expected_resource_version: p.base_resource_version.clone(),
            });
        } else if writing.is_none() {
            writing = Some(b);
        }
    }
    if writing.is_none() {
        writing =
            claimant::recorded_write_in(inv, req.claim, pool).map(|(_, w)| w.binding.as_str());
    }
    Ok(Own { mine, writing })
}

/// Whether another binding of `b`'s credential is dirty or being released: the account is
/// being wiped (or about to be), so no new cluster of the tenant goes into it.
fn account_wiped(inv: &Inventory, inflight: &InFlight, b: &str, now: Instant) -> bool {
    let dirty = &inv.keys().dirty;
    inv.siblings(b).any(|s| {
        inflight.is_releasing(s, now)
            || inv
                .binding(s)
                .is_some_and(|e| crate::labels::LabelLookup::label(&e.view.labels, dirty).is_some())
    })
}

/// One of the tenant's own bindings to use: the one this cluster is already on, else (one
/// account per tenant) the one its clusters are on, else (multi-account) the fullest below the
/// limit.
fn reuse(
    mine: &BTreeSet<&str>,
    req: &Request<'_>,
    policy: &MultiAccountPolicy,
    counts: &Counts<'_>,
) -> Option<Choice> {
    let use_ = |b: &str, decision| Choice::Use {
        binding: b.to_string(),
        decision,
    };
    let cluster = req.claim.cluster_name();
    if let Some(b) = mine.iter().find(|b| counts.has(b, &cluster)) {
        return Some(use_(b, UseReason::Reused));
    }
    let multi = policy.allows(&req.claim.global_account);
    if !multi {
        // Should it hold several (a leftover of an earlier allowlist, an orphan), the one its
        // clusters are on: a second account is never started while one is in use.
        let populated = mine.iter().max_by(|a, b| {
            counts
                .clusters(a)
                .cmp(&counts.clusters(b))
                .then_with(|| b.cmp(a))
        });
        return populated.map(|b| use_(b, UseReason::Reused));
    }
    let limit = policy.limit_for(req.provider_type);
    let below = mine
        .iter()
        .map(|b| (*b, counts.clusters(b)))
        .filter(|(_, n)| limit.is_none_or(|l| *n < l as usize));
    // Highest count wins; among equal counts the first name, hence the reversed name order.
    let best = below.max_by(|(a, n), (b, m)| n.cmp(m).then_with(|| b.cmp(a)));
    best.map(|(b, _)| use_(b, UseReason::FilledMostPopulated))
}

/// Free bindings of the pool skipped for a new tenant, by why, for the Exhausted message.
/// Bindings being claimed or released right now are not counted: the message is part of the
/// claim's status, and a figure that moves would rewrite every waiting claim's status on each
/// change of the pool. Pins change only with the config, so their count may stay.
#[derive(Debug, Default, PartialEq, Eq)]
struct Skipped {
    pinned: usize,
    in_use: usize,
    /// Free by their own labels, but another binding of their credential is held, dirty or
    /// moving.
    account_taken: usize,
    cordoned: usize,
    cleanup_failed: usize,
    cooling: usize,
    quarantined: usize,
}

impl Skipped {
    fn count(&mut self, why: Skip) {
        *match why {
            Skip::CleanupFailed => &mut self.cleanup_failed,
            Skip::Cordoned => &mut self.cordoned,
            Skip::Quarantined => &mut self.quarantined,
            Skip::Cooling => &mut self.cooling,
            Skip::Pinned => &mut self.pinned,
            Skip::InUse => &mut self.in_use,
            Skip::AccountTaken => &mut self.account_taken,
        } += 1;
    }
}

/// Why a free binding is not a new tenant's candidate (`Skipped` counts them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Skip {
    CleanupFailed,
    Cordoned,
    Quarantined,
    Cooling,
    Pinned,
    InUse,
    AccountTaken,
}

/// Whether the claimable binding `b` may go to this new tenant: `Ok(true)` yes, `Ok(false)` it
/// is moving right now (neither a candidate nor counted), else why it is skipped. The one
/// definition both ways of choosing a free binding (`first_free`, `free_candidates`) ask.
fn free_for(
    inv: &Inventory,
    inflight: &InFlight,
    req: &Request<'_>,
    limits: &Limits<'_>,
    (now, counts): (Instant, &Counts<'_>),
    b: &str,
) -> Result<bool, Skip> {
    let (policy, ga) = (limits.policy, req.claim.global_account.as_str());
    let entry = inv.binding(b);
    if entry.is_some_and(|e| crate::pools::lifecycle::is_cleanup_failed(&e.view.labels)) {
        Err(Skip::CleanupFailed)
    } else if entry.is_some_and(|e| crate::pools::lifecycle::is_cordoned(&e.view.labels)) {
        Err(Skip::Cordoned)
    } else if entry.is_some_and(|e| policy.quarantine.keeps(req.pool, &e.view)) {
        Err(Skip::Quarantined)
    } else if let Some(c) = &policy.cooldown
        && account_cooling(inv, c, b, ga)
    {
        Err(Skip::Cooling)
    } else if limits
        .reserved
        .is_some_and(|r| r.pins.reserved_from(b, r.tenant))
    {
        Err(Skip::Pinned)
    } else if inflight.claim_of(b, now).is_some()
        || inflight.is_releasing(b, now)
        || counts.being_assigned(b)
    {
        Ok(false)
    } else if !inv.clusters_on(b).is_empty() {
        Err(Skip::InUse)
    } else if sibling_taken(inv, inflight, counts, b, now) {
        Err(Skip::AccountTaken)
    } else {
        Ok(true)
    }
}

/// The pool's claimable bindings a new tenant may take, and how many others were skipped why.
fn free_candidates<'a>(
    inv: &'a Inventory,
    inflight: &InFlight,
    req: &Request<'_>,
    limits: &Limits<'_>,
    now: Instant,
    counts: &Counts<'_>,
) -> (Vec<&'a String>, Skipped) {
    let claimable = inv
        .pool(req.pool)
        .map(|m| &m.claimable)
        .into_iter()
        .flatten();
    let mut s = Skipped::default();
    let mut candidates = Vec::new();
    for b in claimable {
        match free_for(inv, inflight, req, limits, (now, counts), b) {
            Ok(true) => candidates.push(b),
            Ok(false) => {}
            Err(why) => s.count(why),
        }
    }
    (candidates, s)
}

/// The binding `spread` would choose among `free_candidates` when no binding ranks first for
/// being on trial, found without checking every free binding: the pool keeps its free bindings
/// in rank order (`PoolMembers::claim_order`: never released, then released longest ago), each
/// group of one rank is ordered by the tenant's weight, and bindings are checked in that order
/// until one may be taken. A selection in a pool of 40,000 free bindings checked all of them
/// (~50 ms, BENCHMARKS.md). When none may be taken, every one was checked once: the reasons
/// counted are `free_candidates`'.
fn first_free<'a>(
    inv: &'a Inventory,
    inflight: &InFlight,
    req: &Request<'_>,
    limits: &Limits<'_>,
    now: Instant,
    counts: &Counts<'_>,
) -> Result<&'a String, Skipped> {
    let mut skipped = Skipped::default();
    let Some(members) = inv.pool(req.pool) else {
        return Err(skipped);
    };
    let weigh = hash::weigher(&req.claim.global_account);
    let mut ranks = members.claim_order.iter().peekable();
    // The first one to try last (`exclude`) that may be taken: chosen only if nothing else is.
    let mut last = None;
    while let Some(rank) = ranks.peek().map(|(rank, _)| *rank) {
        let group = ranks.clone();
        let in_group = |(r, _): &&(Option<jiff::Timestamp>, String)| *r == rank;
        let weighed = |(_, b): &'a (Option<jiff::Timestamp>, String)| (weigh(b), Reverse(b));
        // Usually the first in the tenant's order may be taken: found without ordering the rest.
        let first = std::iter::from_fn(|| ranks.next_if(in_group))
            .map(weighed)
            .max();
        let mut order = None;
        let mut next = first;
        while let Some((_, Reverse(b))) = next {
            match free_for(inv, inflight, req, limits, (now, counts), b) {
                Ok(true) if !limits.exclude.contains(b) => return Ok(b),
                Ok(true) => last = last.or(Some(b)),
                Ok(false) => {}
                Err(why) => skipped.count(why),
            }
            let order = order.get_or_insert_with(|| {
                let mut rest: BinaryHeap<_> =
                    group.clone().take_while(in_group).map(weighed).collect();
                rest.pop();
                rest
            });
            next = order.pop();
        }
    }
    last.ok_or(skipped)
}

/// Whether `b` or another binding of its credential was released by another tenant than `ga`
/// less than the cooldown ago: the cooldown is the account's, so a binding Gardener's migration
/// left beside the released one does not hand the account to a new tenant early.
fn account_cooling(
    inv: &Inventory,
    c: &crate::pools::lifecycle::Cooldown,
    b: &str,
    ga: &str,
) -> bool {
    std::iter::once(b)
        .chain(inv.siblings(b))
        .filter_map(|n| inv.binding(n))
        .any(|e| c.keeps(&e.view.annotations, Some(ga)))
}

/// Whether another binding of `b`'s credential is held by a tenant, dirty, or being claimed or
/// released right now: the account is one, so `b` is in use whatever its own labels say, and
/// handing it to a tenant would give one account to two.
fn sibling_taken(
    inv: &Inventory,
    inflight: &InFlight,
    counts: &Counts<'_>,
    b: &str,
    now: Instant,
) -> bool {
    inv.account_held_by_sibling(b).is_some()
        || inv.siblings(b).any(|s| {
            inflight.claim_of(s, now).is_some()
                || inflight.is_releasing(s, now)
                || counts.being_assigned(s)
        })
}

/// Spread: for a request the quarantine names, bindings on trial first; then never-used first,
/// then the one released longest ago; among equals (above all the never-used ones) the
/// tenant's rendezvous hash, so concurrent tenants start apart. Bindings to try last
/// (`exclude`) only when nothing else is left.
fn spread<'a>(
    inv: &Inventory,
    exclude: &BTreeSet<String>,
    ga: &str,
    candidates: Vec<&'a String>,
    trial: impl Fn(&str) -> bool,
) -> Option<&'a String> {
    let released_at = |b: &str| {
        inv.binding(b)
            .and_then(|e| crate::pools::lifecycle::released(&e.view.annotations))
            .map(|(at, _)| at)
    };
    candidates.into_iter().max_by_key(|b| {
        let at = released_at(b);
        (
            !exclude.contains(*b),
            trial(b),
            at.is_none(),
            std::cmp::Reverse(at),
            weight(ga, b),
            std::cmp::Reverse(b.as_str()),
        )
    })
}

/// Why a pool has nothing for this tenant, in words a person can act on.
fn exhausted_message(
    inv: &Inventory,
    req: &Request<'_>,
    policy: &MultiAccountPolicy,
    s: &Skipped,
    mine: usize,
) -> String {
    let (pool, ga) = (req.pool, req.claim.global_account.as_str());
    let claim_sel = pool
        .selectors(inv.keys(), ga)
        .claim
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut message = format!(
        "no claimable binding in pool {}: selector {claim_sel} matches none",
        describe_pool(pool)
    );
    if s.pinned > 0 {
        message.push_str(&format!(
            " ({} free but pinned to other global accounts)",
            s.pinned
        ));
    }
    if s.cooling > 0 {
        message.push_str(&format!(
            " ({} free but released by another tenant less than spec.release.cooldown ago)",
            s.cooling
        ));
    }
    if s.quarantined > 0 {
        message.push_str(&format!(
            " ({} free but quarantined: new accounts go only to the plans and global accounts spec.quarantine names until a Shoot on them succeeds)",
            s.quarantined
        ));
    }
    if s.cordoned > 0 {
        message.push_str(&format!(
            " ({} free but cordoned ({}=true), never given to a new tenant: see status.pools in the HapConfig)",
            s.cordoned,
            crate::pools::lifecycle::CORDONED
        ));
    }
    if s.cleanup_failed > 0 {
        message.push_str(&format!(
            " ({} free but marked {}=true by the cleanup job, never given to a new tenant: see status.pools in the HapConfig)",
            s.cleanup_failed,
            crate::pools::lifecycle::CLEANUP_FAILED
        ));
    }
    if s.in_use > 0 {
        message.push_str(&format!(
            " ({} without a tenant but used by a cluster, never claimed: see bindingsInUse in the HapConfig status)",
            s.in_use
        ));
    }
    if s.account_taken > 0 {
        message.push_str(&format!(
            " ({} without a tenant but referencing the same credential as a binding that is held, dirty or being claimed: one account never serves two tenants)",
            s.account_taken
        ));
    }
    if mine > 0 {
        let multi = policy.allows(ga);
        let limit = policy.limit_for(req.provider_type).filter(|_| multi);
        let l = limit.map_or_else(|| "no".to_string(), |l| l.to_string());
        message.push_str(&format!(
            ", and all {mine} bindings of {ga} in the pool are at the limit ({l} clusters for {})",
            req.provider_type
        ));
    }
    message
}

#[cfg(test)]
mod tests;
