//! Pins (docs/rules.md §10): which pin applies to a claim, what the pinned binding
//! allows (reuse, claim, wait, or unavailable with the reason), and the state of every pin for
//! the HapConfig status.
//!
//! Decisions where the issue is silent:
//! - A pin without a pool applies where the binding's labels put it; while the binding is
//!   missing, to every dedicated request of the tenant, so the tenant never silently gets
//!   another account. A pin with a pool applies to requests whose entry names that pool.
//! - A pool-scoped pin wins over an unscoped one of the same tenant.
//! - The pinned binding is used whatever its cluster count (a pin wins over multi-account
//!   limits), and no other binding or fallback is ever taken instead.

use std::time::Instant;

use super::{Choice, InFlight, UseReason, WriteState};
use crate::api::PinStatus;
use crate::labels::PoolKey;
use crate::pools::{BindingClass, Inventory};
use crate::rules::{PinRule, Pins, Preference};

/// A pin that applies to a claim, and the preference (position in the list) whose pool it is for.
#[derive(Clone, Copy, Debug)]
pub struct Applied<'a> {
    pub pin: &'a PinRule,
    /// Position in the claim's preference list.
    pub at: usize,
}

/// The pool a pin is for: its own, else the one the binding's labels name (`None` while the
/// binding is missing or in no pool).
pub fn pool_of(pin: &PinRule, inv: &Inventory) -> Option<PoolKey> {
    pin.pool.clone().or_else(|| {
        inv.binding(&pin.binding)
            .and_then(|b| b.pool.as_ref())
            .map(|(key, _)| key.clone())
    })
}

/// The pin of `ga` that applies to a request with these preferences, if any.
pub fn applies<'a>(
    pins: &'a Pins,
    inv: &Inventory,
    ga: &str,
    preferences: &[Preference],
) -> Option<Applied<'a>> {
    let mine: Vec<&PinRule> = pins.of(ga).collect();
    let scoped = mine.iter().filter(|p| p.pool.is_some());
    let unscoped = mine.iter().filter(|p| p.pool.is_none());
    for pin in scoped.chain(unscoped) {
        match pool_of(pin, inv) {
            Some(pool) => {
                if let Some(at) = preferences.iter().position(|p| p.pool == pool) {
                    return Some(Applied { pin, at });
                }
            }
            // Missing (or in no pool): it holds every dedicated request of the tenant.
            None if inv.binding(&pin.binding).is_none() => {
                if let Some(at) = preferences.iter().position(|p| !p.pool.shared) {
                    return Some(Applied { pin, at });
                }
            }
            None => {}
        }
    }
    None
}

/// Why a pinned binding cannot serve `ga` now, or `None` when it can.
fn unavailable(pin: &PinRule, inv: &Inventory, ga: &str, pool: &PoolKey) -> Option<String> {
    let b = &pin.binding;
    let keys = inv.keys();
    let Some(entry) = inv.binding(b) else {
        return Some(format!("binding {b} does not exist"));
    };
    let Some((key, class)) = &entry.pool else {
        return Some(format!(
            "binding {b} is in no pool: its labels match no pool selector (it needs {} and the labels of a pool)",
            keys.hyperscaler_type
        ));
    };
    if key != pool {
        return Some(format!(
            "binding {b} is in pool hyperscalerType={}{}, not in hyperscalerType={}{} that the pin is for",
            key.hyperscaler_type,
            eu_text(key),
            pool.hyperscaler_type,
            eu_text(pool)
        ));
    }
    match class {
        BindingClass::Owned { tenant }
            if tenant == ga && crate::pools::lifecycle::is_cleanup_failed(&entry.view.labels) =>
        {
            Some(format!(
                "binding {b} is marked {}=true by the cleanup job; no new cluster goes there until the job removes the mark",
                crate::pools::lifecycle::CLEANUP_FAILED
            ))
        }
        BindingClass::Owned { tenant } if tenant == ga => None,
        BindingClass::Claimable if !inv.clusters_on(b).is_empty() => Some(format!(
            "binding {b} carries no tenant but a cluster uses it ({}); it is never claimed while in use",
            inv.clusters_on(b).iter().collect::<Vec<_>>().join(", ")
        )),
        BindingClass::Claimable
            if crate::pools::lifecycle::is_cleanup_failed(&entry.view.labels) =>
        {
            Some(format!(
                "binding {b} is marked {}=true by the cleanup job; no tenant gets it until the job removes the mark",
                crate::pools::lifecycle::CLEANUP_FAILED
            ))
        }
        BindingClass::Claimable if inv.account_held_by_sibling(b).is_some() => {
            let (sibling, label) = inv.account_held_by_sibling(b).unwrap_or_default();
            Some(format!(
                "binding {b} references the same credential as binding {sibling} ({label}); one account never serves two tenants"
            ))
        }
        BindingClass::Claimable if crate::pools::lifecycle::is_cordoned(&entry.view.labels) => {
            let reason = entry
                .view
                .annotations
                .get(crate::pools::lifecycle::CORDON_REASON)
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            Some(format!(
                "binding {b} is cordoned{reason}; no new tenant gets it until {}=true is removed",
                crate::pools::lifecycle::CORDONED
            ))
        }
        BindingClass::Claimable => None,
        BindingClass::Owned { tenant } => Some(format!(
            "binding {b} is held by another tenant ({}={tenant}); it is never taken from it",
            keys.tenant_name
        )),
        BindingClass::Shared => Some(format!(
            "binding {b} is shared ({}=true): shared bindings are never pinned",
            keys.shared
        )),
        BindingClass::InternalFree => Some(format!(
            "binding {b} is {}=true and unclaimed: the operator never claims it; label it {}={ga} to hand it over",
            keys.internal, keys.tenant_name
        )),
        BindingClass::Dirty { .. } => Some(format!(
            "binding {b} is {} and waits for the cleanup job",
            keys.dirty
        )),
    }
}

fn eu_text(k: &PoolKey) -> &'static str {
    if k.eu_access { ", euAccess" } else { "" }
}

/// The choice for a claim of `ga` under `applied`, and whether the pinned binding can serve.
/// `Err(message)`: it cannot (missing, held by someone else, ...); the claim waits.
pub fn choose(
    applied: &Applied<'_>,
    pool: &PoolKey,
    inv: &Inventory,
    inflight: &InFlight,
    ga: &str,
    uid: &str,
    now: Instant,
) -> Result<Choice, String> {
    let pin = applied.pin;
    let b = &pin.binding;
    let context = || format!("{ga} is pinned to binding {b} (pins[{}])", pin.item);
    if inflight.is_releasing(b, now) {
        return Err(format!("{}: binding {b} is being released", context()));
    }
    if let Some(p) = inflight.claim_of(b, now) {
        return match (p.tenant == ga, p.state) {
            (true, WriteState::Written) => Ok(Choice::Use {
                binding: b.clone(),
                decision: UseReason::Pinned,
            }),
            // The claim's own earlier attempt, unanswered or in doubt: the same write again.
            (true, WriteState::Writing | WriteState::Unknown) if p.claim_uid == uid => {
                Ok(Choice::Claim {
                    binding: b.clone(),
                    expected_resource_version: p.base_resource_version.clone(),
                })
            }
            (true, WriteState::Writing | WriteState::Unknown) => {
                Ok(Choice::Wait { binding: b.clone() })
            }
            (false, _) => Err(format!(
                "{}: another tenant's claim of it is being written",
                context()
            )),
        };
    }
    if let Some(why) = unavailable(pin, inv, ga, pool) {
        return Err(format!("{}: {why}", context()));
    }
    let owned = inv
        .binding(b)
        .and_then(|e| e.pool.as_ref())
        .is_some_and(|(_, c)| matches!(c, BindingClass::Owned { .. }));
    if owned {
        return Ok(Choice::Use {
            binding: b.clone(),
            decision: UseReason::Pinned,
        });
    }
    let counts = super::Counts::new(inv, inflight, now);
    if super::sibling_taken(inv, inflight, &counts, b, now) {
        return Err(format!(
            "{}: another binding of the same credential is being claimed or released; one account never serves two tenants",
            context()
        ));
    }
    Ok(Choice::Claim {
        binding: b.clone(),
        expected_resource_version: inv.binding(b).and_then(|e| e.view.resource_version.clone()),
    })
}

/// The state of every pin, for the HapConfig status.
pub fn states(pins: &Pins, inv: &Inventory) -> Vec<PinStatus> {
    pins.list()
        .iter()
        .map(|pin| {
            let (state, message) = state(pin, inv);
            PinStatus {
                global_account: pin.global_account.clone(),
                binding: pin.binding.clone(),
                state: state.to_string(),
                message,
            }
        })
        .collect()
}

fn state(pin: &PinRule, inv: &Inventory) -> (&'static str, String) {
    let ga = &pin.global_account;
    let Some(entry) = inv.binding(&pin.binding) else {
        return (
            "Missing",
            format!(
                "binding {} does not exist; {ga}'s claims for {} wait for it",
                pin.binding,
                pin.scope()
            ),
        );
    };
    let pool = pool_of(pin, inv);
    let why = pool
        .as_ref()
        .and_then(|pool| unavailable(pin, inv, ga, pool))
        .or_else(|| {
            pool.is_none()
                .then(|| format!("binding {} is in no pool", pin.binding))
        });
    match (&entry.pool, why) {
        (Some((_, BindingClass::Owned { tenant })), None) if tenant == ga => (
            "Held",
            format!("held by {ga}; its new clusters in this pool use it"),
        ),
        (_, None) => (
            "Free",
            format!("free: the next claim of {ga} in this pool takes it"),
        ),
        (Some((_, BindingClass::Owned { .. })), Some(why)) => ("HeldByOther", why),
        (_, Some(why)) => ("Unusable", why),
    }
}

#[cfg(test)]
mod tests;
