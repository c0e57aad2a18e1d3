//! Choosing a binding over an entry's ordered pools (docs/rules.md §2.4): a pin that
//! applies decides alone; otherwise the binding the tenant already holds (or is claiming) in any
//! of the pools is reused first — apply-once, never a second account because a fallback exists —
//! and only then the first pool, in order, that can give a new one serves.

use std::collections::BTreeSet;
use std::time::Instant;

use super::pinned::{self, Applied};
use super::{Choice, InFlight, MultiAccountPolicy, Request, UseReason, check_bound, describe_pool};
use crate::labels::PoolKey;
use crate::pools::{ClaimView, Inventory};
use crate::rules::{Pins, Preference};

/// One claim to place over its entry's pools.
#[derive(Clone, Copy, Debug)]
pub struct OrderedRequest<'a> {
    pub claim: &'a ClaimView,
    /// The entry's pools in order (`rules::Outcome::preferences`); never empty.
    pub preferences: &'a [Preference],
    /// The provider type of the plan (for the multi-account limit).
    pub provider_type: &'a str,
    /// Every pin in force.
    pub pins: &'a Pins,
}

/// What to do with one claim, and with which of its pools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub choice: Choice,
    /// The 1-based preference of the entry the choice is in (for `Exhausted`: the first).
    pub preference: usize,
    /// That preference's pool.
    pub pool: PoolKey,
    /// The choice follows a pin; with `Exhausted` it means the pinned binding cannot serve.
    pub pinned: bool,
}

impl Placement {
    fn new(choice: Choice, pref: Option<&Preference>, pinned: bool) -> Self {
        Self {
            choice,
            preference: pref.map_or(1, |p| p.index),
            pool: pref.map_or_else(no_pool, |p| p.pool.clone()),
            pinned,
        }
    }
}

/// Stands in for a pool where a request has none (never with the preferences of an `Outcome`).
fn no_pool() -> PoolKey {
    PoolKey {
        hyperscaler_type: String::new(),
        eu_access: false,
        shared: false,
    }
}

/// Whether a choice keeps the tenant on what it holds (or is claiming) in the pool.
fn keeps_existing(c: &Choice) -> bool {
    matches!(
        c,
        Choice::Use {
            decision: UseReason::Reused | UseReason::FilledMostPopulated,
            ..
        } | Choice::Wait { .. }
    )
}

/// Chooses a binding for `req.claim` over its ordered pools. Pure, as `select`.
pub fn select_ordered(
    inv: &Inventory,
    inflight: &InFlight,
    req: &OrderedRequest<'_>,
    policy: &MultiAccountPolicy,
    exclude: &BTreeSet<String>,
    now: Instant,
) -> Placement {
    let first = |choice| Placement::new(choice, req.preferences.first(), false);
    if let Some(bound) = check_bound(inv, inflight, req.claim, now) {
        return first(bound);
    }
    let ga = req.claim.global_account.as_str();
    if let Some(applied) = pinned::applies(req.pins, inv, ga, req.preferences) {
        return pinned_placement(&applied, req, inv, inflight, now);
    }
    let reserved = super::Reserved {
        pins: req.pins,
        tenant: ga,
    };
    let choices: Vec<(&Preference, Choice)> = req
        .preferences
        .iter()
        .map(|p| {
            let r = Request {
                claim: req.claim,
                pool: &p.pool,
                provider_type: req.provider_type,
            };
            (
                p,
                super::select_with(inv, inflight, &r, policy, exclude, Some(&reserved), now),
            )
        })
        .collect();
    let pick = choices.iter().find(|(_, c)| keeps_existing(c)).or_else(|| {
        choices
            .iter()
            .find(|(_, c)| matches!(c, Choice::Use { .. } | Choice::Claim { .. }))
    });
    if let Some((p, c)) = pick {
        return Placement::new(c.clone(), Some(p), false);
    }
    // Every pool is exhausted: say so for each, in order.
    let message = match choices.as_slice() {
        [(_, Choice::Exhausted { message, .. })] => message.clone(),
        all => {
            let each: Vec<String> = all
                .iter()
                .map(|(p, c)| match c {
                    Choice::Exhausted { message, .. } => format!("{}. {message}", p.index),
                    other => format!("{}. {other:?}", p.index),
                })
                .collect();
            format!(
                "every pool of the entry is exhausted, in order: {}",
                each.join("; ")
            )
        }
    };
    let pool = req
        .preferences
        .first()
        .map_or_else(no_pool, |p| p.pool.clone());
    first(Choice::Exhausted { pool, message })
}

fn pinned_placement(
    applied: &Applied<'_>,
    req: &OrderedRequest<'_>,
    inv: &Inventory,
    inflight: &InFlight,
    now: Instant,
) -> Placement {
    // `applies` returns a position in the list it was given.
    let pref = req.preferences.get(applied.at);
    let ga = req.claim.global_account.as_str();
    // A pin without a pool whose binding is missing names no pool; the first dedicated
    // preference stands for it.
    let pool = pinned::pool_of(applied.pin, inv)
        .or_else(|| pref.map(|p| p.pool.clone()))
        .unwrap_or_else(no_pool);
    let uid = req.claim.uid.as_str();
    let choice = match pinned::choose(applied, &pool, inv, inflight, ga, uid, now) {
        Ok(c) => c,
        Err(message) => Choice::Exhausted {
            pool: pool.clone(),
            message: format!("{message} (pool {})", describe_pool(&pool)),
        },
    };
    Placement {
        choice,
        preference: pref.map_or(1, |p| p.index),
        pool,
        pinned: true,
    }
}
