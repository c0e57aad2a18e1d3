//! Quarantine of new accounts: which bindings are on trial, whether a request may take them, and
//! when a Shoot proved one. Pure: every fact comes from the binding's labels and annotations and
//! the Shoot's status, never from what a leader remembers, so a new leader judges alike.
//!
//! A binding is on trial when it carries `accountpool.io/quarantine=Probation` (the operator's
//! claim write puts it there when it hands a quarantined binding to a named request, so that
//! the binding stays on trial after that tenant releases it, should no Shoot have proven it), or
//! when it carries no quarantine record at all and nothing shows it ever served anyone: no
//! claimed-by label, no use record (`FILLING`), no recorded release. A tenant or dirty label
//! keeps a binding out of the unclaimed ones anyway. `Passed` (written by the operator when a
//! Shoot on the binding reported `lastOperation` Create Succeeded) and `Released` (written by a
//! person) end the trial; any other value reads as no record.

use std::collections::BTreeMap;

use super::BindingView;
use crate::api::{QuarantineSpec, Shoot};
use crate::labels::{CLAIMED_BY, FILLING, LabelLookup, PoolKey};

/// The annotation that records a binding's trial.
pub const QUARANTINE: &str = "accountpool.io/quarantine";
/// On trial: handed to a named request, no Shoot on it has succeeded yet.
pub const PROBATION: &str = "Probation";
/// A Shoot on it reported `lastOperation` Create Succeeded (the operator writes it).
pub const PASSED: &str = "Passed";
/// A person ended the trial.
pub const RELEASED: &str = "Released";

/// Whether a binding is on trial by its own records (see the module text).
pub fn on_trial(view: &BindingView) -> bool {
    match view.annotations.get(QUARANTINE).map(String::as_str) {
        Some(PROBATION) => true,
        Some(PASSED | RELEASED) => false,
        _ => {
            view.labels.label(CLAIMED_BY).is_none()
                && !view.annotations.contains_key(FILLING)
                && !view.annotations.contains_key(super::lifecycle::RELEASED_AT)
        }
    }
}

/// Whether a binding carries the operator's probation record.
pub fn on_probation(view: &BindingView) -> bool {
    view.annotations.get(QUARANTINE).map(String::as_str) == Some(PROBATION)
}

/// The pool a quarantine entry names.
pub fn pool_of(q: &QuarantineSpec) -> PoolKey {
    PoolKey {
        hyperscaler_type: q.pool.hyperscaler_type.clone(),
        eu_access: q.pool.eu_access.unwrap_or(false),
        shared: false,
    }
}

/// Per quarantined pool, whether one request may take its bindings on trial.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gate {
    pools: BTreeMap<PoolKey, bool>,
}

impl Gate {
    /// The gate the spec's quarantine entries set for a request of `plan` and `global_account`.
    pub fn for_request(spec: Option<&[QuarantineSpec]>, plan: &str, global_account: &str) -> Self {
        let pools = spec
            .unwrap_or_default()
            .iter()
            .map(|q| (pool_of(q), q.admits(plan, global_account)))
            .collect();
        Gate { pools }
    }

    /// Whether `pool` quarantines its new bindings.
    pub fn quarantines(&self, pool: &PoolKey) -> bool {
        self.pools.contains_key(pool)
    }

    /// Whether the unclaimed binding `view` of `pool` is quarantined and kept from this request.
    pub fn keeps(&self, pool: &PoolKey, view: &BindingView) -> bool {
        self.pools.get(pool) == Some(&false) && on_trial(view)
    }

    /// Whether the unclaimed binding `view` of `pool` is quarantined and this request is one
    /// the entry names: such requests take quarantined bindings first, so that new accounts are
    /// proven by the traffic meant for it and proven ones stay for everyone else.
    pub fn prefers(&self, pool: &PoolKey, view: &BindingView) -> bool {
        self.pools.get(pool) == Some(&true) && on_trial(view)
    }
}

/// Whether the operator's claim of `entry` must record the probation: an unclaimed binding on
/// trial in a pool the spec quarantines.
pub fn needs_probation(spec: Option<&[QuarantineSpec]>, entry: &super::BindingEntry) -> bool {
    let Some((key, super::BindingClass::Claimable)) = &entry.pool else {
        return false;
    };
    spec.unwrap_or_default().iter().any(|q| pool_of(q) == *key) && on_trial(&entry.view)
}

/// The Shoot that proved `binding`, when the binding is on probation and a Shoot on it reports
/// Create Succeeded: the operator then records `Passed` on the binding.
pub fn proven_by<'a>(inv: &'a super::Inventory, binding: &str) -> Option<&'a str> {
    let entry = inv.binding(binding)?;
    if !on_probation(&entry.view) {
        return None;
    }
    inv.clusters_on(binding)
        .iter()
        .filter_map(|c| inv.shoot(c))
        .find(|s| s.created && s.binding.as_deref() == Some(binding))
        .map(|s| s.name.as_str())
}

/// Whether a Shoot's status says its creation succeeded (`lastOperation` type `Create`, state
/// `Succeeded`): the proof a new account works.
pub fn create_succeeded(shoot: &Shoot) -> bool {
    shoot
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .is_some_and(|o| o.type_ == "Create" && o.state == "Succeeded")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PinPool;

    fn view(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> BindingView {
        BindingView {
            name: "b".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
                .into(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..BindingView::default()
        }
    }

    fn aws(plans: &[&str], gas: &[&str]) -> QuarantineSpec {
        let list = |l: &[&str]| (!l.is_empty()).then(|| l.iter().map(|s| s.to_string()).collect());
        QuarantineSpec {
            pool: PinPool {
                hyperscaler_type: "aws".into(),
                eu_access: None,
            },
            plans: list(plans),
            global_accounts: list(gas),
        }
    }

    #[test]
    fn a_binding_is_on_trial_until_its_records_show_it_served_or_passed() {
        assert!(on_trial(&view(&[], &[])));
        assert!(on_trial(&view(&[], &[(QUARANTINE, PROBATION)])));
        assert!(on_trial(&view(
            &[(CLAIMED_BY, "u")],
            &[(QUARANTINE, PROBATION)]
        )));
        assert!(!on_trial(&view(&[(CLAIMED_BY, "u")], &[])));
        assert!(!on_trial(&view(&[], &[(FILLING, "u")])));
        assert!(!on_trial(&view(
            &[],
            &[(super::super::lifecycle::RELEASED_AT, "2026-01-01T00:00:00Z")]
        )));
        assert!(!on_trial(&view(&[], &[(QUARANTINE, PASSED)])));
        assert!(!on_trial(&view(&[], &[(QUARANTINE, RELEASED)])));
        assert!(
            on_trial(&view(&[], &[(QUARANTINE, "passed")])),
            "only the exact words end it"
        );
    }

    #[test]
    fn the_gate_keeps_trial_bindings_from_unnamed_requests_and_offers_them_to_named_ones() {
        let spec = [aws(&["trial"], &["canary-ga"])];
        let pool = pool_of(&spec[0]);
        let other = PoolKey {
            hyperscaler_type: "gcp".into(),
            ..pool.clone()
        };
        let new = view(&[], &[]);
        let proven = view(&[], &[(QUARANTINE, PASSED)]);
        let paying = Gate::for_request(Some(&spec), "aws", "ga-1");
        assert!(paying.keeps(&pool, &new) && !paying.prefers(&pool, &new));
        assert!(!paying.keeps(&pool, &proven));
        assert!(!paying.keeps(&other, &new), "only the pools the spec names");
        for named in [
            Gate::for_request(Some(&spec), "trial", "ga-1"),
            Gate::for_request(Some(&spec), "aws", "canary-ga"),
        ] {
            assert!(!named.keeps(&pool, &new) && named.prefers(&pool, &new));
            assert!(!named.prefers(&pool, &proven));
        }
        assert_eq!(Gate::for_request(None, "aws", "ga"), Gate::default());
    }
}
