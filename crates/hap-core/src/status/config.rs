//! The desired HapConfig status.
//!
//! | situation | Ready | RulesValid | PoolsAvailable | Stalled / Reconciling | observedGeneration |
//! |---|---|---|---|---|---|
//! | not the config in force | False `Ignored` | computed | absent | Stalled=True `Ignored` | generation |
//! | current generation invalid | False `ConfigInvalid` | False `Invalid` | of the active rules, else Unknown | Stalled=True | generation |
//! | still building state | Unknown `Progressing` | computed | Unknown `Progressing` | Reconciling=True | previous |
//! | valid and in force | True `Ready` | True `Valid` | True / False `MissingPool` | absent | generation |
//!
//! A missing pool does not make the config un-Ready: the rules are in force and every other
//! entry serves; `PoolsAvailable=False` lists each entry without a pool. An invalid generation
//! keeps the last valid one serving (`activeGeneration`) and says so in `Stalled`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::{CondStatus, remove_condition, set_condition};
use crate::api::conditions::{reasons, types};
use crate::api::{
    BindingsInUse, HapConfigSpec, HapConfigStatus, OrphanStatus, PinStatus, RuleStatus,
};

/// A rule entry whose pool has no binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingPool {
    /// 1-based index of the entry.
    pub index: i64,
    pub entry: String,
    /// The selector that matches no binding, as `kubectl get -l` takes it.
    pub selector: String,
}

/// Everything the HapConfig status is computed from.
#[derive(Clone, Debug, Default)]
pub struct ConfigInputs {
    pub generation: Option<i64>,
    /// `Some(name)`: this object is not the one in force; `name` is (`--config-name`).
    pub ignored_in_favour_of: Option<String>,
    /// Validation of the current generation: every error and warning, already formatted.
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// The generation whose rules the operator has in force (the last valid one), if any.
    pub active_generation: Option<i64>,
    /// The spec of `active_generation`, recorded so that a restarted operator can serve it.
    pub active_spec: Option<Box<HapConfigSpec>>,
    /// Per rule entry in force, with its pools' figures.
    pub rules: Vec<RuleStatus>,
    pub missing_pools: Vec<MissingPool>,
    pub orphans: Vec<OrphanStatus>,
    /// Bindings clusters use without a tenant, or while dirty (per pool and reason).
    pub bindings_in_use: Vec<BindingsInUse>,
    /// Every pin in force and the state of its binding.
    pub pins: Vec<PinStatus>,
    pub last_refresh_time: Option<Time>,
    /// `Some(message)` while the operator is still building its state (caches not synced).
    pub progressing: Option<String>,
    /// Binding writes the garden refused and no later write has allowed, binding → message.
    pub refused_writes: BTreeMap<String, String>,
    /// Per request source of the rules in force.
    pub sources: Vec<crate::api::SourceStatus>,
    /// Per dedicated pool: bindings per lifecycle state.
    pub pools: Vec<crate::api::PoolLifecycle>,
    /// In `spec.mode: Observe`: the last observation (`None` when not observing).
    pub observation: Option<crate::api::ObservationStatus>,
}

fn list(items: &[String]) -> String {
    items.join("; ")
}

fn entries(n: usize) -> String {
    if n == 1 {
        "1 entry".to_string()
    } else {
        format!("{n} entries")
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The conditions being computed, with the generation and time every change is stamped with.
struct Conds<'t> {
    list: Vec<Condition>,
    gen_: Option<i64>,
    now: &'t Time,
}

impl Conds<'_> {
    fn set(&mut self, type_: &str, status: CondStatus, reason: &str, msg: impl Into<String>) {
        set_condition(
            &mut self.list,
            type_,
            status,
            reason,
            msg,
            self.gen_,
            self.now,
        );
    }

    fn remove(&mut self, type_: &str) {
        remove_condition(&mut self.list, type_);
    }
}

/// The status to write, starting from the current one so that transition times survive.
pub fn desired_config_status(
    current: Option<&HapConfigStatus>,
    input: &ConfigInputs,
    now: &Time,
) -> HapConfigStatus {
    let mut c = Conds {
        list: current.map(|s| s.conditions.clone()).unwrap_or_default(),
        gen_: input.generation,
        now,
    };
    let valid = input.errors.is_empty();
    set_rules_valid(&mut c, input);
    if let Some(active) = &input.ignored_in_favour_of {
        return ignored(c, active);
    }
    let in_force = input.active_generation.is_some();
    // Valid rules that are not in force yet are being loaded: progressing, whatever the caller says.
    let progressing = input
        .progressing
        .clone()
        .or_else(|| (valid && !in_force).then(|| "loading the rules".into()));
    let observed = if valid && progressing.is_some() {
        current.and_then(|s| s.observed_generation)
    } else {
        input.generation
    };
    set_progress(&mut c, input, progressing.as_deref());
    let totals = totals(&input.rules);
    set_pools_available(&mut c, input, progressing.as_deref(), totals);
    if valid && progressing.is_none() {
        set_ready(&mut c, input, totals);
    }
    if in_force {
        super::sources::set_sources_condition(&mut c.list, &input.sources, c.gen_, now);
    } else {
        c.remove(types::SOURCES_AVAILABLE);
    }
    let observation = input.observation.as_ref().filter(|_| in_force);
    super::observation::set_observing_condition(&mut c.list, observation, c.gen_, now);
    assemble(input, c.list, observed, totals)
}

/// `RulesValid`: the current generation's errors and warnings, whether or not it is in force.
fn set_rules_valid(c: &mut Conds<'_>, input: &ConfigInputs) {
    let warnings = match input.warnings.len() {
        0 => String::new(),
        n => format!("; {n} warning(s): {}", list(&input.warnings)),
    };
    if input.errors.is_empty() {
        let msg = format!("{} rule(s) valid{warnings}", input.rules.len());
        c.set(types::RULES_VALID, CondStatus::True, reasons::VALID, msg);
    } else {
        let msg = format!(
            "{} error(s): {}{warnings}",
            input.errors.len(),
            list(&input.errors)
        );
        c.set(types::RULES_VALID, CondStatus::False, reasons::INVALID, msg);
    }
}

/// The whole status of a config that is not the one in force (`active` is).
fn ignored(mut c: Conds<'_>, active: &str) -> HapConfigStatus {
    let msg =
        format!("HapConfig {active} is the one in force (--config-name); this one is ignored");
    c.set(
        types::READY,
        CondStatus::False,
        reasons::IGNORED,
        msg.clone(),
    );
    // Stalled, not just un-Ready: only a person can change which config is in force, and
    // without it kstatus reads InProgress, so a Flux `wait` hangs until its timeout.
    c.set(types::STALLED, CondStatus::True, reasons::IGNORED, msg);
    for t in [types::POOLS_AVAILABLE, types::RECONCILING] {
        c.remove(t);
    }
    HapConfigStatus {
        observed_generation: c.gen_,
        conditions: c.list,
        ..Default::default()
    }
}

/// `Stalled` for an invalid generation, `Reconciling` while state is being built, neither once
/// the rules are in force; `Ready` for the first two.
fn set_progress(c: &mut Conds<'_>, input: &ConfigInputs, progressing: Option<&str>) {
    if !input.errors.is_empty() {
        let serving = match input.active_generation {
            Some(a) => format!("generation {a} stays in force"),
            None => "no rules are in force; claims stay Pending".to_string(),
        };
        let msg = format!(
            "generation {} is invalid ({} error(s): {}); {serving}",
            c.gen_.map_or_else(|| "?".into(), |g| g.to_string()),
            input.errors.len(),
            list(&input.errors)
        );
        let r = reasons::CONFIG_INVALID;
        c.set(types::STALLED, CondStatus::True, r, msg.clone());
        c.set(types::READY, CondStatus::False, r, msg);
        c.remove(types::RECONCILING);
    } else if let Some(msg) = progressing {
        let r = reasons::PROGRESSING;
        c.set(types::RECONCILING, CondStatus::True, r, msg);
        c.set(types::READY, CondStatus::Unknown, r, msg);
        c.remove(types::STALLED);
    } else {
        c.remove(types::STALLED);
        c.remove(types::RECONCILING);
    }
}

/// `PoolsAvailable`: unknown until rules are in force, else each entry without a pool listed.
fn set_pools_available(
    c: &mut Conds<'_>,
    input: &ConfigInputs,
    progressing: Option<&str>,
    (free, claimed): (i64, i64),
) {
    let t = types::POOLS_AVAILABLE;
    match (progressing, input.active_generation.is_some()) {
        (Some(msg), _) if input.errors.is_empty() => {
            c.set(t, CondStatus::Unknown, reasons::PROGRESSING, msg);
        }
        (_, false) => {
            let msg = "no rules are in force";
            c.set(t, CondStatus::Unknown, reasons::CONFIG_INVALID, msg);
        }
        _ if input.missing_pools.is_empty() => {
            let msg =
                format!("every rule entry has a pool ({free} free, {claimed} claimed bindings)");
            c.set(t, CondStatus::True, reasons::POOLS_PRESENT, msg);
        }
        _ => {
            let each: Vec<String> = input
                .missing_pools
                .iter()
                .map(|m| {
                    format!(
                        "entry {} `{}`: no binding matches `{}`",
                        m.index, m.entry, m.selector
                    )
                })
                .collect();
            let msg = format!("{} without a pool: {}", entries(each.len()), list(&each));
            c.set(t, CondStatus::False, reasons::MISSING_POOL, msg);
        }
    }
}

/// `Ready` (and `Stalled`) of valid rules in force: refused garden writes stall the config, as
/// only a person can grant what the garden wants; otherwise Ready with the pool totals.
fn set_ready(c: &mut Conds<'_>, input: &ConfigInputs, (free, claimed): (i64, i64)) {
    if !input.refused_writes.is_empty() {
        // The rules are fine, but the operator cannot do its work: a person must grant what
        // the garden wants, so kstatus must read Failed, not InProgress.
        let each: Vec<String> = input
            .refused_writes
            .iter()
            .map(|(b, m)| format!("binding {b}: {m}"))
            .collect();
        let msg = format!(
            "{} binding write(s) refused by the garden: {}",
            each.len(),
            list(&each)
        );
        c.set(types::READY, CondStatus::False, reasons::FORBIDDEN, &msg);
        c.set(types::STALLED, CondStatus::True, reasons::FORBIDDEN, msg);
        return;
    }
    let missing = match input.missing_pools.len() {
        0 => String::new(),
        n => format!("; {} without a pool (see PoolsAvailable)", entries(n)),
    };
    let msg = format!(
        "generation {} in force: {} rule(s), {free} free and {claimed} claimed bindings{missing}",
        input
            .active_generation
            .map_or_else(|| "?".into(), |g| g.to_string()),
        input.rules.len()
    );
    c.set(types::READY, CondStatus::True, reasons::READY, msg);
}

/// A list shown only with rules in force.
fn kept<T: Clone>(in_force: bool, items: &[T]) -> Vec<T> {
    if in_force { items.to_vec() } else { Vec::new() }
}

/// The status fields beside the conditions: the figures of the rules in force, none without.
fn assemble(
    input: &ConfigInputs,
    conditions: Vec<Condition>,
    observed: Option<i64>,
    (free, claimed): (i64, i64),
) -> HapConfigStatus {
    let in_force = input.active_generation.is_some();
    HapConfigStatus {
        observed_generation: observed,
        active_generation: input.active_generation,
        active_spec: input.active_generation.and(input.active_spec.clone()),
        conditions,
        rule_count: in_force.then(|| count(input.rules.len())),
        free_bindings: in_force.then_some(free),
        claimed_bindings: in_force.then_some(claimed),
        rules: kept(in_force, &input.rules),
        orphans: input.orphans.clone(),
        bindings_in_use: input.bindings_in_use.clone(),
        pins: kept(in_force, &input.pins),
        last_refresh_time: input.last_refresh_time.clone(),
        request_sources: kept(in_force, &input.sources),
        pools: kept(in_force, &input.pools),
        observation: input.observation.clone().filter(|_| in_force),
    }
}

/// The Event to send when the bindings in use without a tenant or while dirty changed from `old`
/// to `new`: `(warning, reason, note)`, or `None` when the set is the same (so a status written
/// again, or a reconcile every second, sends nothing).
pub fn bindings_in_use_event(
    old: Option<&HapConfigStatus>,
    new: &HapConfigStatus,
) -> Option<(bool, &'static str, String)> {
    let before = old
        .map(|s| s.bindings_in_use.as_slice())
        .unwrap_or_default();
    if before == new.bindings_in_use.as_slice() {
        return None;
    }
    if new.bindings_in_use.is_empty() {
        let note = "no binding is used by a cluster without a tenant or while dirty any more";
        return Some((false, "BindingsInUseResolved", note.to_string()));
    }
    let each: Vec<String> = new
        .bindings_in_use
        .iter()
        .map(|b| {
            let more = usize::try_from(b.count)
                .unwrap_or(usize::MAX)
                .saturating_sub(b.bindings.len());
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            format!(
                "{} in pool hyperscalerType={}{}: {}{more}",
                b.reason,
                b.hyperscaler_type,
                if b.eu_access { ", euAccess" } else { "" },
                b.bindings.join(", ")
            )
        })
        .collect();
    let note = format!(
        "bindings used by clusters need a person (never claimed while so; see status.bindingsInUse): {}",
        list(&each)
    );
    Some((true, "BindingsInUse", note))
}

/// Free and claimed bindings over the distinct dedicated pools of the rules, fallback pools
/// included (pools shared by several entries or preferences count once).
fn totals(rules: &[RuleStatus]) -> (i64, i64) {
    let pools: BTreeMap<(&str, bool, bool), (i64, i64)> = rules
        .iter()
        .flat_map(|r| {
            r.pools
                .iter()
                .chain(r.preferences.iter().flat_map(|p| &p.pools))
        })
        .map(|p| {
            (
                (p.hyperscaler_type.as_str(), p.eu_access, p.shared),
                (p.free, p.claimed),
            )
        })
        .collect();
    pools.values().fold((0, 0), |(f, c), (pf, pc)| {
        (f.saturating_add(*pf), c.saturating_add(*pc))
    })
}
