//! The lifecycle state of every dedicated binding: one pure function over its pool
//! role, the clusters on it and what keeps new tenants off it, the per-pool counts that the
//! HapConfig status, `hap pools` and the metrics show, and the clock of when each binding was
//! first seen dirty.
//!
//! Precedence, first match wins: a binding clusters use without a tenant (`InUseWithoutTenant`)
//! needs a person before anything else; then a cleanup job's word that it could not wipe the
//! account (`CleanupFailed`: it may still hold the last tenant's resources, which outranks a
//! cordon that only keeps tenants off); then what an operator or the Shoots said about it
//! (`Cordoned`, `Suspect`); then its place in the cycle (`Dirty`, `Claimed`); an unclaimed
//! `internal=true` binding is `Internal`; an unclaimed one is `Quarantined` (new in a
//! quarantined pool, `quarantine.rs`), `CoolingDown` or `Free`.
//! Shared bindings have no state: they are never claimed, never labelled.
//!
//! The release is recorded on the binding (`RELEASED_AT`, `RELEASED_BY`) in the same
//! compare-and-swap that marks it dirty, so cooldown and spread survive restarts without a write
//! of their own; the cleanup contract asks the job to leave `accountpool.io/` annotations.
//!
//! The index keeps every binding's state, the counts and the dirty clock per watch event
//! (`states.rs`, through `state_of`); the walks here that compute them from scratch are kept,
//! under `cfg(test)`, as the reference it is tested against.
//!
//! The lifecycle figures come from the objects, so every replica and every restart shows the
//! same ones: a dirty binding is dirty since the release recorded on it (`dirty_since`), and a
//! claim is recorded on the binding (`CLAIMED_AT`) in the compare-and-swap that claims it, which
//! the claim rate counts. Only a binding marked dirty without a release record (by hand, or before
//! the operator recorded releases) falls back to when this process first saw it dirty.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::BindingClass;
use crate::api::PoolLifecycle;
#[cfg(test)]
use {
    super::BindingEntry,
    super::Inventory,
    crate::api::{CleanupFailedBinding, CordonedBinding, SuspectBinding},
    crate::labels::PoolKey,
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    std::collections::{BTreeSet, HashMap},
};

/// The label an operator sets (`=true`) to keep new tenants off a binding.
pub const CORDONED: &str = "accountpool.io/cordoned";
/// The annotation saying why a binding is cordoned (free text, shown in status and events).
pub const CORDON_REASON: &str = "accountpool.io/cordon-reason";

/// The label the cleanup job sets (`=true`) on a binding it could not wipe: no new tenant gets
/// it until the job removes the label. The operator never writes it.
pub const CLEANUP_FAILED: &str = "accountpool.io/cleanup-failed";
/// The annotation with the cleanup job's reason (free text, shown in status and events).
pub const CLEANUP_FAILED_REASON: &str = "accountpool.io/cleanup-failed-reason";

/// The annotation recording when the operator released the binding (RFC 3339, seconds), written
/// with the dirty label in one compare-and-swap; the cleanup job leaves it.
pub const RELEASED_AT: &str = "accountpool.io/released-at";
/// The annotation naming the tenant (global account) that released the binding.
pub const RELEASED_BY: &str = "accountpool.io/released-by";

/// The annotation recording when the operator claimed the binding for its tenant (RFC 3339,
/// seconds), written with the tenant label in one compare-and-swap: the claim rate counts it.
pub const CLAIMED_AT: &str = "accountpool.io/claimed-at";

/// The value of `RELEASED_AT` for a release at `now`.
pub fn release_time(now: Timestamp) -> String {
    now.round(jiff::Unit::Second).unwrap_or(now).to_string()
}

/// The release recorded on a binding: when, and by which tenant. `None` when none is recorded
/// or the time does not parse (a hand-edited value counts as never released).
pub fn released(annotations: &BTreeMap<String, String>) -> Option<(Timestamp, Option<&str>)> {
    let at = annotations.get(RELEASED_AT)?.parse::<Timestamp>().ok()?;
    Some((at, annotations.get(RELEASED_BY).map(String::as_str)))
}

/// When the binding was last claimed by the operator (`CLAIMED_AT`); `None` when not recorded or
/// unreadable.
pub fn claimed(annotations: &BTreeMap<String, String>) -> Option<Timestamp> {
    annotations.get(CLAIMED_AT)?.parse::<Timestamp>().ok()
}

/// Since when a dirty binding with these annotations is dirty: the release recorded on it. A
/// record older than the binding's last claim belongs to an earlier tenancy (the binding was
/// marked dirty again without a release by the operator), so it dates nothing: `None`.
pub fn dirty_since(annotations: &BTreeMap<String, String>) -> Option<Timestamp> {
    let (at, _) = released(annotations)?;
    claimed(annotations).is_none_or(|c| c <= at).then_some(at)
}

/// The release cooldown in force (`spec.release.cooldown`) and the wall-clock time to judge it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cooldown {
    pub period: std::time::Duration,
    pub now: Timestamp,
}

impl Cooldown {
    /// From the spec's duration text; `None` when unset, zero or unreadable (the CRD's pattern
    /// keeps unreadable values out).
    pub fn from_spec(cooldown: Option<&str>, now: Timestamp) -> Option<Self> {
        let period = crate::duration::parse(cooldown?).ok()?;
        (!period.is_zero()).then_some(Cooldown { period, now })
    }

    /// Whether a binding with these annotations is kept from `tenant` (`None`: from any tenant
    /// other than the one that released it): released less than the period ago by someone else.
    pub fn keeps(&self, annotations: &BTreeMap<String, String>, tenant: Option<&str>) -> bool {
        let Some((at, by)) = released(annotations) else {
            return false;
        };
        if tenant.is_some() && by == tenant {
            return false;
        }
        let period =
            jiff::SignedDuration::try_from(self.period).unwrap_or(jiff::SignedDuration::MAX);
        at.checked_add(period).is_ok_and(|end| self.now < end)
    }
}

/// Where a dedicated binding is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BindingState {
    /// Unclaimed, clean, unused: the next claim may take it.
    Free,
    /// Held by a tenant.
    Claimed,
    /// Carries the dirty label: waits for the cleanup job.
    Dirty,
    /// Clean and unclaimed, but released too recently to go to another tenant.
    CoolingDown,
    /// Cordoned by an operator: no new tenant; a current tenant keeps its clusters.
    Cordoned,
    /// The cleanup job marked it as not wiped: no new tenant until the job clears the mark.
    CleanupFailed,
    /// Its Shoots report infrastructure errors (credentials, quota): no new tenant.
    Suspect,
    /// A cluster uses it but no tenant holds it: never claimed while so.
    InUseWithoutTenant,
    /// `internal=true` and unclaimed: not the operator's to hand out.
    Internal,
    /// New in a quarantined pool (`spec.quarantine`): only the requests the config names get it
    /// until a Shoot on it has succeeded once or a person releases it.
    Quarantined,
}

/// As its name in status, metrics and `hap bindings -o json`.
impl serde::Serialize for BindingState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl BindingState {
    /// Every state, in the order status and metrics list them.
    pub const ALL: [BindingState; 10] = [
        BindingState::Free,
        BindingState::Claimed,
        BindingState::Dirty,
        BindingState::CoolingDown,
        BindingState::Cordoned,
        BindingState::CleanupFailed,
        BindingState::Suspect,
        BindingState::InUseWithoutTenant,
        BindingState::Internal,
        BindingState::Quarantined,
    ];

    /// The name status, metrics and docs use.
    pub fn as_str(self) -> &'static str {
        match self {
            BindingState::Free => "Free",
            BindingState::Claimed => "Claimed",
            BindingState::Dirty => "Dirty",
            BindingState::CoolingDown => "CoolingDown",
            BindingState::Cordoned => "Cordoned",
            BindingState::CleanupFailed => "CleanupFailed",
            BindingState::Suspect => "Suspect",
            BindingState::InUseWithoutTenant => "InUseWithoutTenant",
            BindingState::Internal => "Internal",
            BindingState::Quarantined => "Quarantined",
        }
    }
}

/// What decides a binding's state besides its pool role.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// Clusters on the binding (claims and Shoots, `Inventory::clusters_on`).
    pub clusters: usize,
    /// Carries `accountpool.io/cordoned=true`.
    pub cordoned: bool,
    /// Carries `accountpool.io/cleanup-failed=true`.
    pub cleanup_failed: bool,
    /// Its Shoots report the configured infrastructure errors.
    pub suspect: bool,
    /// Released less than the cooldown ago.
    pub cooling_down: bool,
    /// In a quarantined pool and on trial (`quarantine::on_trial`).
    pub quarantined: bool,
}

/// The state of a binding in role `class`; `None` for shared bindings.
pub fn state_of(class: &BindingClass, f: Facts) -> Option<BindingState> {
    use BindingState as S;
    Some(match class {
        BindingClass::Shared => return None,
        BindingClass::Claimable if f.clusters > 0 => S::InUseWithoutTenant,
        _ if f.cleanup_failed => S::CleanupFailed,
        _ if f.cordoned => S::Cordoned,
        _ if f.suspect => S::Suspect,
        BindingClass::Dirty { .. } => S::Dirty,
        BindingClass::Owned { .. } => S::Claimed,
        BindingClass::InternalFree => S::Internal,
        BindingClass::Claimable if f.quarantined => S::Quarantined,
        BindingClass::Claimable if f.cooling_down => S::CoolingDown,
        BindingClass::Claimable => S::Free,
    })
}

/// Whether labels carry the cordon label set to `true`.
pub fn is_cordoned(labels: &impl crate::labels::LabelLookup) -> bool {
    labels.label(CORDONED).map(String::as_str) == Some("true")
}

/// Whether labels carry the cleanup job's failure mark set to `true`.
pub fn is_cleanup_failed(labels: &impl crate::labels::LabelLookup) -> bool {
    labels.label(CLEANUP_FAILED).map(String::as_str) == Some("true")
}

/// Whether the cleanup job's mark keeps `cluster` off `binding`: a binding whose cleanup failed
/// may still hold the last tenant's resources, and the job clears `dirty` and the tenant before
/// its mark, so a tenant that still shows on a marked binding gets no new cluster there either.
/// The mark is the account's: on another binding of the same credential it closes this one too.
/// A cluster already counted on the account stays.
pub fn closed_to(inv: &super::Inventory, binding: &str, cluster: &str) -> bool {
    let marked = |b: &str| {
        inv.binding(b)
            .is_some_and(|e| is_cleanup_failed(&e.view.labels))
    };
    (marked(binding) || inv.siblings(binding).any(marked))
        && !inv.clusters_on(binding).contains(cluster)
}

/// Whether a person's or the cleanup job's label keeps new tenants off an unclaimed binding.
pub fn withheld(labels: &impl crate::labels::LabelLookup) -> bool {
    is_cordoned(labels) || is_cleanup_failed(labels)
}

/// Bindings that later features mark: suspect ones, and ones still cooling down (the
/// from-scratch walk below, kept as the reference `states.rs` is tested against).
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Marks<'a> {
    pub suspect: Option<&'a BTreeSet<String>>,
    pub cooling_down: Option<&'a BTreeSet<String>>,
    pub quarantined: Option<&'a BTreeSet<String>>,
}

#[cfg(test)]
impl Inventory {
    /// The facts of one binding.
    pub fn facts(&self, name: &str, marks: Marks<'_>) -> Facts {
        let has = |s: Option<&BTreeSet<String>>| s.is_some_and(|s| s.contains(name));
        Facts {
            clusters: self.clusters_on(name).len(),
            cordoned: self
                .binding(name)
                .is_some_and(|e| is_cordoned(&e.view.labels)),
            cleanup_failed: self
                .binding(name)
                .is_some_and(|e| is_cleanup_failed(&e.view.labels)),
            suspect: has(marks.suspect),
            cooling_down: has(marks.cooling_down),
            quarantined: has(marks.quarantined),
        }
    }

    /// The state of one binding; `None` when it is shared or in no pool.
    pub fn state(&self, name: &str, marks: Marks<'_>) -> Option<BindingState> {
        let (_, class) = self.binding(name)?.pool.as_ref()?;
        state_of(class, self.facts(name, marks))
    }

    /// The bindings of a dedicated pool, by state (every state present, zero when none);
    /// `None` for a shared pool.
    pub fn states(&self, key: &PoolKey, marks: Marks<'_>) -> Option<BTreeMap<BindingState, usize>> {
        if key.shared {
            return None;
        }
        let mut out: BTreeMap<BindingState, usize> =
            BindingState::ALL.iter().map(|s| (*s, 0)).collect();
        let Some(m) = self.pool(key) else {
            return Some(out);
        };
        let names = m
            .claimable
            .iter()
            .chain(&m.internal_free)
            .chain(&m.dirty)
            .chain(m.owned.values().flatten());
        for name in names {
            if let Some(s) = self.state(name, marks) {
                *out.entry(s).or_default() += 1;
            }
        }
        Some(out)
    }

    /// The dirty bindings of every pool, by name.
    pub fn dirty_bindings(&self) -> impl Iterator<Item = (&PoolKey, &str)> {
        self.pools()
            .flat_map(|(k, m)| m.dirty.iter().map(move |b| (k, b.as_str())))
    }
}

#[cfg(test)]
impl Inventory {
    /// Bindings whose Shoots report any of `codes`, at least `threshold` Shoots each: binding →
    /// (the codes seen, sorted, and the number of such Shoots).
    pub fn suspects(
        &self,
        codes: &[String],
        threshold: usize,
    ) -> BTreeMap<String, (BTreeSet<String>, usize)> {
        let mut out: BTreeMap<String, (BTreeSet<String>, usize)> = BTreeMap::new();
        for shoot in self.shoots.values() {
            let Some(b) = &shoot.binding else { continue };
            let seen: Vec<&String> = shoot
                .error_codes
                .iter()
                .filter(|c| codes.contains(c))
                .collect();
            if seen.is_empty() {
                continue;
            }
            let e = out.entry(b.clone()).or_default();
            e.0.extend(seen.into_iter().cloned());
            e.1 += 1;
        }
        out.retain(|_, (_, n)| *n >= threshold.max(1));
        out
    }
}

#[cfg(test)]
impl Inventory {
    /// The lifecycle status of every dedicated pool from scratch, walking every binding and
    /// Shoot, with the dirty clock `clock`: what `lifecycles` must always equal.
    pub fn scan(
        &self,
        rules: &super::LifecycleRules,
        now: Timestamp,
        clock: &DirtyClock,
    ) -> Vec<PoolLifecycle> {
        let cooling: BTreeSet<String> = rules
            .cooldown
            .filter(|p| !p.is_zero())
            .map(|period| {
                let c = Cooldown { period, now };
                self.bindings()
                    .filter(|e| matches!(e.pool, Some((_, BindingClass::Claimable))))
                    .filter(|e| c.keeps(&e.view.annotations, None))
                    .map(|e| e.view.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut suspects = self.suspects(&rules.codes, rules.threshold);
        // An account is suspect as a whole: each other binding of it is, with the codes of the
        // first suspect one by name.
        for (b, v) in suspects.clone() {
            for s in self.siblings(&b) {
                suspects.entry(s.to_string()).or_insert_with(|| v.clone());
            }
        }
        let suspect: BTreeSet<String> = suspects.keys().cloned().collect();
        let quarantined: BTreeSet<String> = self
            .bindings()
            .filter(|e| match &e.pool {
                Some((k, BindingClass::Claimable)) => rules
                    .quarantined
                    .get(k)
                    .is_some_and(|since| super::quarantine::on_trial(&e.view, *since)),
                _ => false,
            })
            .map(|e| e.view.name.clone())
            .collect();
        let marks = Marks {
            cooling_down: Some(&cooling),
            suspect: Some(&suspect),
            quarantined: Some(&quarantined),
        };
        self.scan_lifecycles_with(marks, clock, &suspects)
    }
}

/// Cordoned bindings listed per pool in the status; the state counts say how many in all.
pub const CORDONED_NAMED: usize = 10;

#[cfg(test)]
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
impl Inventory {
    /// The lifecycle status of every dedicated pool that has a binding, ordered by pool key.
    pub fn scan_lifecycles(&self, marks: Marks<'_>, clock: &DirtyClock) -> Vec<PoolLifecycle> {
        self.pools()
            .filter_map(|(key, _)| self.scan_lifecycle(key, marks, clock))
            .collect()
    }

    /// As `scan_lifecycles`, with each pool's suspect bindings named (first ones by name).
    pub fn scan_lifecycles_with(
        &self,
        marks: Marks<'_>,
        clock: &DirtyClock,
        suspects: &BTreeMap<String, (BTreeSet<String>, usize)>,
    ) -> Vec<PoolLifecycle> {
        let mut out = self.scan_lifecycles(marks, clock);
        for p in &mut out {
            let key = PoolKey {
                hyperscaler_type: p.hyperscaler_type.clone(),
                eu_access: p.eu_access,
                shared: false,
            };
            p.suspect = suspects
                .iter()
                .filter(|(b, _)| {
                    self.binding(b)
                        .and_then(|e| e.pool.as_ref())
                        .is_some_and(|(k, _)| *k == key)
                })
                .take(CORDONED_NAMED)
                .map(|(b, (codes, n))| SuspectBinding {
                    binding: b.clone(),
                    codes: codes.iter().cloned().collect(),
                    shoots: count(*n),
                })
                .collect();
        }
        out
    }

    /// The lifecycle status of one pool; `None` for a shared pool.
    pub fn scan_lifecycle(
        &self,
        key: &PoolKey,
        marks: Marks<'_>,
        clock: &DirtyClock,
    ) -> Option<PoolLifecycle> {
        let states = self.states(key, marks)?;
        let m = self.pool(key);
        let dirty = m
            .into_iter()
            .flat_map(|m| m.dirty.iter().map(String::as_str));
        let members = m.into_iter().flat_map(|m| {
            m.claimable
                .iter()
                .chain(&m.internal_free)
                .chain(&m.dirty)
                .chain(m.owned.values().flatten())
        });
        let members: Vec<&BindingEntry> = members.filter_map(|b| self.binding(b)).collect();
        let listed = |on: fn(&crate::small_map::SmallMap<String>) -> bool, why: &str| {
            let mut out: Vec<(String, Option<String>, String)> = members
                .iter()
                .filter(|e| on(&e.view.labels))
                .map(|e| {
                    let tenant = e.view.labels.get(&self.keys().tenant_name).cloned();
                    let reason = e.view.annotations.get(why).cloned().unwrap_or_default();
                    (e.view.name.clone(), tenant, reason)
                })
                .collect();
            out.sort();
            out.truncate(CORDONED_NAMED);
            out
        };
        let cordoned = listed(is_cordoned, CORDON_REASON)
            .into_iter()
            .map(|(binding, tenant, reason)| CordonedBinding {
                binding,
                tenant,
                reason,
            })
            .collect();
        let cleanup_failed = listed(is_cleanup_failed, CLEANUP_FAILED_REASON)
            .into_iter()
            .map(|(binding, tenant, reason)| CleanupFailedBinding {
                binding,
                tenant,
                reason,
            })
            .collect();
        Some(PoolLifecycle {
            hyperscaler_type: key.hyperscaler_type.clone(),
            eu_access: key.eu_access,
            states: states
                .into_iter()
                .map(|(s, n)| (s.as_str().to_string(), count(n)))
                .collect(),
            oldest_dirty_since: clock.oldest(dirty).map(Time),
            cordoned,
            cleanup_failed,
            ..Default::default()
        })
    }
}

/// Claims per day and days until no binding is free at that rate (`None` while the rate is 0).
pub fn forecast(claims: usize, window: std::time::Duration, free: i64) -> (f64, Option<f64>) {
    let days = window.as_secs_f64() / 86_400.0;
    if claims == 0 || days <= 0.0 {
        return (0.0, None);
    }
    let rate = claims as f64 / days;
    (rate, Some(free.max(0) as f64 / rate))
}

/// The pools whose `Free` count is below their minimum, as `(hyperscalerType, euAccess, free,
/// minimum)`, ordered by pool.
pub fn low_pools(pools: &[PoolLifecycle]) -> Vec<(String, bool, i64, i64)> {
    pools
        .iter()
        .filter_map(|p| {
            let min = p.min_free?;
            let free = p
                .states
                .get(BindingState::Free.as_str())
                .copied()
                .unwrap_or(0);
            (free < min).then(|| (p.hyperscaler_type.clone(), p.eu_access, free, min))
        })
        .collect()
}

/// When each dirty binding was first seen dirty by a pass (the reference for `states.rs`).
#[cfg(test)]
#[derive(Clone, Debug, Default)]
pub struct DirtyClock {
    since: HashMap<String, Timestamp>,
}

#[cfg(test)]
impl DirtyClock {
    /// Records `now` for bindings newly dirty, and forgets those no longer dirty (a binding
    /// cleaned and dirtied again starts a new clock).
    pub fn observe<'a>(&mut self, dirty: impl IntoIterator<Item = &'a str>, now: Timestamp) {
        let dirty: BTreeSet<&str> = dirty.into_iter().collect();
        self.since.retain(|b, _| dirty.contains(b.as_str()));
        for b in dirty {
            self.since.entry(b.to_string()).or_insert(now);
        }
    }

    /// Sets when `binding` was first seen dirty (tests building the reference).
    pub fn set(&mut self, binding: &str, at: Timestamp) {
        self.since.insert(binding.to_string(), at);
    }

    /// When the binding was first seen dirty.
    pub fn since(&self, binding: &str) -> Option<Timestamp> {
        self.since.get(binding).copied()
    }

    /// The earliest first-seen time among `bindings`.
    pub fn oldest<'a>(&self, bindings: impl IntoIterator<Item = &'a str>) -> Option<Timestamp> {
        bindings.into_iter().filter_map(|b| self.since(b)).min()
    }
}

#[cfg(test)]
mod tests;
