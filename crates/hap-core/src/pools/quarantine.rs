//! Quarantine of new accounts: which bindings are on trial, whether a request may take them, and
//! when a Shoot proved one. Pure: every fact comes from the binding's labels and annotations and
//! the Shoot's status, never from what a leader remembers, so a new leader judges alike.
//!
//! A binding is on trial when it carries `accountpool.io/quarantine=Probation` (the operator's
//! claim write puts it there when it hands a quarantined binding to a named request, so that
//! the binding stays on trial after that tenant releases it, should no Shoot have proven it), or
//! when it carries no quarantine record at all, was created at or after the entry's `since`, and
//! nothing shows it served anyone since: no claimed-by label, no use record (`FILLING`), no
//! recorded release. Older bindings are never new: a binding taken over from KEB, or released by
//! an operator that kept no records, loses every trace of its tenants to the cleanup, and only
//! its age tells it from a new account. A tenant or dirty label keeps a binding out of the
//! unclaimed ones anyway. `Passed` (written by the operator once a Shoot on the binding's account
//! was created, `shoot_created`) and `Released` (written by a person) end the trial; any other
//! value reads as no record.

use std::collections::BTreeMap;

use super::BindingView;
use crate::api::{QuarantineSpec, Shoot};
use crate::labels::{CLAIMED_BY, FILLING, LabelLookup, PoolKey};

/// The annotation that records a binding's trial.
pub const QUARANTINE: &str = "accountpool.io/quarantine";
/// On trial: handed to a named request, no Shoot on it has succeeded yet.
pub const PROBATION: &str = "Probation";
/// A Shoot on its account was created (`shoot_created`; the operator writes it).
pub const PASSED: &str = "Passed";
/// A person ended the trial.
pub const RELEASED: &str = "Released";

/// Whether a binding is on trial by its own records and its creation time, in a pool whose
/// entry's `since` is `since` seconds (see the module text). A binding without a creation time
/// (the API server always sets one) is not new.
pub fn on_trial(view: &BindingView, since: i64) -> bool {
    match view.annotations.get(QUARANTINE).map(String::as_str) {
        Some(PROBATION) => true,
        Some(PASSED | RELEASED) => false,
        _ => {
            view.created.is_some_and(|c| i64::from(c.get()) >= since)
                && view.labels.label(CLAIMED_BY).is_none()
                && !view.annotations.contains_key(FILLING)
                && !view.annotations.contains_key(super::lifecycle::RELEASED_AT)
        }
    }
}

/// A creation time as `BindingView::created` keeps it: seconds since the epoch, `None` outside
/// 1970-01-01T00:00:01Z..2106 (no binding is created there).
pub fn creation_second(second: i64) -> Option<std::num::NonZeroU32> {
    u32::try_from(second)
        .ok()
        .and_then(std::num::NonZeroU32::new)
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

/// Per quarantined pool, whether one request may take its bindings on trial, and the entry's
/// `since` in seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gate {
    pools: BTreeMap<PoolKey, (bool, i64)>,
}

impl Gate {
    /// The gate the spec's quarantine entries set for a request of `plan` and `global_account`.
    pub fn for_request(spec: Option<&[QuarantineSpec]>, plan: &str, global_account: &str) -> Self {
        let pools = spec
            .unwrap_or_default()
            .iter()
            .filter_map(|q| {
                let since = q.since_second()?;
                Some((pool_of(q), (q.admits(plan, global_account), since)))
            })
            .collect();
        Gate { pools }
    }

    /// Whether `pool` quarantines its new bindings.
    pub fn quarantines(&self, pool: &PoolKey) -> bool {
        self.pools.contains_key(pool)
    }

    /// Whether the unclaimed binding `view` of `pool` is quarantined and kept from this request.
    pub fn keeps(&self, pool: &PoolKey, view: &BindingView) -> bool {
        self.pools
            .get(pool)
            .is_some_and(|&(admitted, since)| !admitted && on_trial(view, since))
    }

    /// Whether this request takes `pool`'s bindings on trial first (`prefers` may hold for one).
    pub fn ranks_trials_first(&self, pool: &PoolKey) -> bool {
        self.pools.get(pool).is_some_and(|&(admitted, _)| admitted)
    }

    /// Whether the unclaimed binding `view` of `pool` is quarantined and this request is one
    /// the entry names: such requests take quarantined bindings first, so that new accounts are
    /// proven by the traffic meant for it and proven ones stay for everyone else.
    pub fn prefers(&self, pool: &PoolKey, view: &BindingView) -> bool {
        self.pools
            .get(pool)
            .is_some_and(|&(admitted, since)| admitted && on_trial(view, since))
    }
}

/// Whether the operator's claim of `entry` must record the probation: an unclaimed binding on
/// trial in a pool the spec quarantines.
pub fn needs_probation(spec: Option<&[QuarantineSpec]>, entry: &super::BindingEntry) -> bool {
    let Some((key, super::BindingClass::Claimable)) = &entry.pool else {
        return false;
    };
    spec.unwrap_or_default().iter().any(|q| {
        q.since_second()
            .is_some_and(|since| pool_of(q) == *key && on_trial(&entry.view, since))
    })
}

/// The Shoot that proved `binding`, when the binding is on probation and a Shoot counted on its
/// account (on it, or on another binding of the same credential, as after Gardener's forced
/// migration) was created: the operator then records `Passed` on the binding.
pub fn proven_by<'a>(inv: &'a super::Inventory, binding: &str) -> Option<&'a str> {
    let entry = inv.binding(binding)?;
    if !on_probation(&entry.view) {
        return None;
    }
    // In the index a Shoot's binding is the key it is counted under (`binding_key`).
    let on_account = |s: &super::ShootView| {
        s.binding
            .as_deref()
            .is_some_and(|key| key == binding || inv.siblings(binding).any(|k| k == key))
    };
    inv.clusters_on(binding)
        .iter()
        .filter_map(|c| inv.shoot(c))
        .find(|s| s.created && on_account(s))
        .map(|s| s.name.as_str())
}

/// Whether a Shoot's status says it was created, the proof a new account works: `lastOperation`
/// Create Succeeded, or any later operation type (Reconcile, Restore, Migrate), which Gardener
/// only runs once a create succeeded and which replaces the Create record at the next
/// reconcile. A Delete proves nothing: it also follows a create that failed.
pub fn shoot_created(shoot: &Shoot) -> bool {
    shoot
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .is_some_and(|o| match o.type_.as_str() {
            "Create" => o.state == "Succeeded",
            "Reconcile" | "Restore" | "Migrate" => true,
            _ => false,
        })
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
            created: creation_second(NEW),
            ..BindingView::default()
        }
    }

    /// The entry's `since` in the tests, and a creation time after it.
    const SINCE: i64 = 1_767_225_600;
    const NEW: i64 = SINCE + 60;

    fn aws(plans: &[&str], gas: &[&str]) -> QuarantineSpec {
        let list = |l: &[&str]| (!l.is_empty()).then(|| l.iter().map(|s| s.to_string()).collect());
        QuarantineSpec {
            pool: PinPool {
                hyperscaler_type: "aws".into(),
                eu_access: None,
            },
            since: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(SINCE).unwrap(),
            )),
            plans: list(plans),
            global_accounts: list(gas),
        }
    }

    #[test]
    fn a_binding_is_on_trial_until_its_records_show_it_served_or_passed() {
        assert!(on_trial(&view(&[], &[]), SINCE));
        assert!(on_trial(&view(&[], &[(QUARANTINE, PROBATION)]), SINCE));
        assert!(on_trial(
            &view(&[(CLAIMED_BY, "u")], &[(QUARANTINE, PROBATION)]),
            SINCE
        ));
        assert!(!on_trial(&view(&[(CLAIMED_BY, "u")], &[]), SINCE));
        assert!(!on_trial(&view(&[], &[(FILLING, "u")]), SINCE));
        assert!(!on_trial(
            &view(
                &[],
                &[(super::super::lifecycle::RELEASED_AT, "2026-01-01T00:00:00Z")]
            ),
            SINCE
        ));
        assert!(!on_trial(&view(&[], &[(QUARANTINE, PASSED)]), SINCE));
        assert!(!on_trial(&view(&[], &[(QUARANTINE, RELEASED)]), SINCE));
        assert!(
            on_trial(&view(&[], &[(QUARANTINE, "passed")]), SINCE),
            "only the exact words end it"
        );
    }

    #[test]
    fn a_keb_era_binding_without_records_is_no_new_account() {
        // Taken over from KEB: the cleanup job removed tenantName and dirty, so no record of
        // the operator's shows that it served.
        let keb = BindingView {
            created: creation_second(SINCE - 1),
            ..view(&[], &[])
        };
        assert!(!on_trial(&keb, SINCE), "a recycled binding read as new");
        assert!(
            on_trial(&view(&[], &[]), SINCE),
            "created at or after since"
        );
        let unknown = BindingView {
            created: None,
            ..view(&[], &[])
        };
        assert!(!on_trial(&unknown, SINCE));
        // A probation record outlasts the age: it was written when the binding was new.
        let probation = BindingView {
            created: creation_second(SINCE - 1),
            ..view(&[], &[(QUARANTINE, PROBATION)])
        };
        assert!(on_trial(&probation, SINCE));
    }

    #[test]
    fn a_later_operation_type_proves_the_create() {
        let shoot = |t: &str, st: &str| Shoot {
            metadata: Default::default(),
            spec: Default::default(),
            status: Some(crate::api::ShootStatus {
                last_operation: Some(crate::api::gardener::ShootOperation {
                    type_: t.into(),
                    state: st.into(),
                }),
                ..Default::default()
            }),
        };
        for (t, st) in [
            ("Create", "Succeeded"),
            ("Reconcile", "Processing"),
            ("Reconcile", "Error"),
            ("Restore", "Error"),
            ("Migrate", "Succeeded"),
        ] {
            assert!(shoot_created(&shoot(t, st)), "{t} {st}");
        }
        for (t, st) in [
            ("Create", "Processing"),
            ("Create", "Error"),
            ("Delete", "Succeeded"),
            ("Delete", "Processing"),
        ] {
            assert!(!shoot_created(&shoot(t, st)), "{t} {st}");
        }
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
