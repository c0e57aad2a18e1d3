//! Events about the binding lifecycle, computed from the status before and after a
//! write, so that an Event goes out once per change and never on a rewrite of the same status.

use std::collections::BTreeSet;

use super::{CondStatus, set_condition};
use crate::api::HapConfigStatus;

/// Every cordoned binding the status lists, as `(binding, tenant, reason)`.
fn cordoned(s: &HapConfigStatus) -> BTreeSet<(&str, Option<&str>, &str)> {
    s.pools
        .iter()
        .flat_map(|p| &p.cordoned)
        .map(|c| (c.binding.as_str(), c.tenant.as_deref(), c.reason.as_str()))
        .collect()
}

/// The Event to send when the cordoned bindings changed from `old` to `new`:
/// `(warning, reason, note)`, or `None` when they are the same.
pub fn cordon_event(
    old: Option<&HapConfigStatus>,
    new: &HapConfigStatus,
) -> Option<(bool, &'static str, String)> {
    let before = old.map(cordoned).unwrap_or_default();
    let now = cordoned(new);
    if before == now {
        return None;
    }
    if now.is_empty() {
        let note = "no binding is cordoned any more";
        return Some((false, "CordonsLifted", note.to_string()));
    }
    let each: Vec<String> = now
        .iter()
        .map(|(b, tenant, reason)| {
            let tenant = tenant.map(|t| format!(", held by {t}")).unwrap_or_default();
            let reason = if reason.is_empty() {
                "no reason given".to_string()
            } else {
                (*reason).to_string()
            };
            format!("{b} ({reason}{tenant})")
        })
        .collect();
    let note = format!(
        "cordoned bindings get no new tenant; a tenant that holds one keeps its clusters: {}",
        each.join("; ")
    );
    Some((false, "BindingsCordoned", note))
}

/// Every binding the status lists as not wiped by the cleanup job: binding → (tenant, reason).
fn cleanup_failed(s: &HapConfigStatus) -> std::collections::BTreeMap<&str, (Option<&str>, &str)> {
    s.pools
        .iter()
        .flat_map(|p| &p.cleanup_failed)
        .map(|c| (c.binding.as_str(), (c.tenant.as_deref(), c.reason.as_str())))
        .collect()
}

/// The Events to send when the cleanup job's failure marks changed from `old` to `new`: a
/// Warning `CleanupFailed` per binding newly marked or marked with another reason (once per
/// binding and cause), and one Normal `CleanupFailedCleared` naming the bindings whose mark went.
pub fn cleanup_failed_events(
    old: Option<&HapConfigStatus>,
    new: &HapConfigStatus,
) -> Vec<(bool, &'static str, String)> {
    let before = old.map(cleanup_failed).unwrap_or_default();
    let now = cleanup_failed(new);
    let mut out: Vec<(bool, &'static str, String)> = now
        .iter()
        .filter(|(b, (_, reason))| before.get(*b).map(|(_, r)| r) != Some(reason))
        .map(|(b, (tenant, reason))| {
            let tenant = tenant.map(|t| format!(" (tenant {t})")).unwrap_or_default();
            let reason = if reason.is_empty() {
                "no reason given"
            } else {
                reason
            };
            let note = format!(
                "the cleanup job could not wipe binding {b}{tenant}: {reason}; no new tenant gets it until the job removes accountpool.io/cleanup-failed"
            );
            (true, "CleanupFailed", note)
        })
        .collect();
    let cleared: Vec<&str> = before
        .keys()
        .filter(|b| !now.contains_key(*b))
        .copied()
        .collect();
    if !cleared.is_empty() {
        let note = format!(
            "the cleanup job removed its failure mark from: {}",
            cleared.join(", ")
        );
        out.push((false, "CleanupFailedCleared", note));
    }
    out
}

/// Every suspect binding the status lists, with its codes.
fn suspects(s: &HapConfigStatus) -> BTreeSet<(&str, Vec<&str>)> {
    s.pools
        .iter()
        .flat_map(|p| &p.suspect)
        .map(|b| {
            (
                b.binding.as_str(),
                b.codes.iter().map(String::as_str).collect(),
            )
        })
        .collect()
}

fn describe_suspects(s: &HapConfigStatus) -> String {
    suspects(s)
        .iter()
        .map(|(b, codes)| format!("{b} ({})", codes.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The Event to send when the suspect bindings changed: a Warning naming them, or a Normal
/// event once none is left.
pub fn suspect_event(
    old: Option<&HapConfigStatus>,
    new: &HapConfigStatus,
) -> Option<(bool, &'static str, String)> {
    let before = old.map(suspects).unwrap_or_default();
    if before == suspects(new) {
        return None;
    }
    if suspects(new).is_empty() {
        let note = "no binding is suspect any more: the Shoots' errors cleared";
        return Some((false, "SuspectsCleared", note.to_string()));
    }
    let note = format!(
        "bindings whose Shoots report account errors get no new tenant: {}",
        describe_suspects(new)
    );
    Some((true, "BindingsSuspect", note))
}

/// The `AccountsHealthy` condition: False, reason `Suspect`, naming every suspect binding;
/// True, reason `NoSuspect`, when there is none. Only for a config in force (it has pools).
pub fn set_accounts_condition(
    status: &mut HapConfigStatus,
    generation: Option<i64>,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    let listed = describe_suspects(status);
    let (st, reason, message) = if listed.is_empty() {
        (
            CondStatus::True,
            NO_SUSPECT,
            "no binding's Shoots report account errors".to_string(),
        )
    } else {
        let m =
            format!("Shoots report account errors on: {listed}; these bindings get no new tenant");
        (CondStatus::False, SUSPECT, m)
    };
    set_condition(
        &mut status.conditions,
        ACCOUNTS_HEALTHY,
        st,
        reason,
        message,
        generation,
        now,
    );
}

fn describe_low(s: &HapConfigStatus) -> String {
    crate::pools::lifecycle::low_pools(&s.pools)
        .iter()
        .map(|(t, eu, free, min)| {
            let eu = if *eu { ", euAccess" } else { "" };
            format!("hyperscalerType={t}{eu} ({free} free, minFree {min})")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `PoolsAvailable=False`, reason `PoolLow`, naming the pools below their `minFree`, when the
/// condition would otherwise be True (a missing pool says more and stays).
pub fn set_pool_low_condition(
    status: &mut HapConfigStatus,
    generation: Option<i64>,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    let low = describe_low(status);
    let available = crate::status::find_condition(&status.conditions, POOLS_AVAILABLE)
        .is_some_and(|c| c.status == "True");
    if low.is_empty() || !available {
        return;
    }
    let message = format!("pools below their minimum of free bindings: {low}");
    set_condition(
        &mut status.conditions,
        POOLS_AVAILABLE,
        CondStatus::False,
        POOL_LOW,
        message,
        generation,
        now,
    );
}

/// The Event when the set of low pools changed: a Warning naming them, a Normal one once none is
/// low any more.
pub fn pool_low_event(
    old: Option<&HapConfigStatus>,
    new: &HapConfigStatus,
) -> Option<(bool, &'static str, String)> {
    let names = |s: &HapConfigStatus| -> Vec<(String, bool)> {
        crate::pools::lifecycle::low_pools(&s.pools)
            .into_iter()
            .map(|(t, eu, _, _)| (t, eu))
            .collect()
    };
    let before = old.map(names).unwrap_or_default();
    let now = names(new);
    if before == now {
        return None;
    }
    if now.is_empty() {
        let note = "every pool has at least its minimum of free bindings again";
        return Some((false, "PoolRecovered", note.to_string()));
    }
    let note = format!(
        "pools below their minimum of free bindings: {}",
        describe_low(new)
    );
    Some((true, POOL_LOW, note))
}

const POOLS_AVAILABLE: &str = crate::api::conditions::types::POOLS_AVAILABLE;
/// `PoolsAvailable` reason for pools below `minFree`.
pub const POOL_LOW: &str = "PoolLow";

/// Condition type and reasons of `set_accounts_condition`.
pub const ACCOUNTS_HEALTHY: &str = "AccountsHealthy";
pub const SUSPECT: &str = "Suspect";
pub const NO_SUSPECT: &str = "NoSuspect";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CordonedBinding, PoolLifecycle};

    fn status(cordoned: &[(&str, Option<&str>, &str)]) -> HapConfigStatus {
        HapConfigStatus {
            pools: vec![PoolLifecycle {
                hyperscaler_type: "aws".into(),
                cordoned: cordoned
                    .iter()
                    .map(|(b, t, r)| CordonedBinding {
                        binding: b.to_string(),
                        tenant: t.map(Into::into),
                        reason: r.to_string(),
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_failed_cleanup_gives_one_warning_per_binding_and_reason_and_a_normal_event_when_cleared() {
        let marked = |list: &[(&str, &str)]| {
            let mut s = status(&[]);
            s.pools[0].cleanup_failed = list
                .iter()
                .map(|(b, r)| crate::api::CleanupFailedBinding {
                    binding: b.to_string(),
                    tenant: Some("ga-1".into()),
                    reason: r.to_string(),
                })
                .collect();
            s
        };
        let none = marked(&[]);
        let one = marked(&[("aws-1", "quota API denied")]);
        let ev = cleanup_failed_events(Some(&none), &one);
        assert_eq!(ev.len(), 1, "{ev:?}");
        let (warning, reason, note) = &ev[0];
        assert!(*warning && *reason == "CleanupFailed", "{reason}");
        assert!(
            note.contains("aws-1 (tenant ga-1): quota API denied"),
            "{note}"
        );
        assert!(cleanup_failed_events(Some(&one), &one.clone()).is_empty());
        let two = marked(&[("aws-1", "quota API denied"), ("aws-2", "")]);
        let ev = cleanup_failed_events(Some(&one), &two);
        assert_eq!(ev.len(), 1, "only the new binding: {ev:?}");
        assert!(
            ev[0].2.contains("aws-2 (tenant ga-1): no reason given"),
            "{ev:?}"
        );
        let other = marked(&[("aws-1", "timeout"), ("aws-2", "")]);
        let ev = cleanup_failed_events(Some(&two), &other);
        assert_eq!(ev.len(), 1, "a new cause of the same binding: {ev:?}");
        assert!(ev[0].2.contains("aws-1 (tenant ga-1): timeout"), "{ev:?}");
        let ev = cleanup_failed_events(Some(&other), &marked(&[("aws-2", "")]));
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!((ev[0].0, ev[0].1), (false, "CleanupFailedCleared"));
        assert!(ev[0].2.ends_with("from: aws-1"), "{ev:?}");
    }

    #[test]
    fn suspects_give_a_warning_once_and_a_false_condition_until_they_clear() {
        let mut s = status(&[]);
        s.pools[0].suspect = vec![crate::api::SuspectBinding {
            binding: "aws-1".into(),
            codes: vec!["ERR_INFRA_UNAUTHORIZED".into()],
            shoots: 1,
        }];
        let clear = status(&[]);
        let (warning, reason, note) = suspect_event(Some(&clear), &s).expect("a change");
        assert!(warning && reason == "BindingsSuspect", "{reason}");
        assert!(note.contains("aws-1 (ERR_INFRA_UNAUTHORIZED)"), "{note}");
        assert_eq!(suspect_event(Some(&s), &s.clone()), None);
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH);
        set_accounts_condition(&mut s, Some(3), &now);
        let c = crate::status::find_condition(&s.conditions, ACCOUNTS_HEALTHY).expect("set");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", SUSPECT));
        let (_, reason, _) = suspect_event(Some(&s), &clear).expect("cleared");
        assert_eq!(reason, "SuspectsCleared");
    }

    #[test]
    fn a_pool_below_its_minimum_turns_pools_available_false_with_pool_low() {
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH);
        let mut s = status(&[]);
        s.pools[0].states = [("Free".to_string(), 1)].into();
        s.pools[0].min_free = Some(2);
        set_condition(
            &mut s.conditions,
            POOLS_AVAILABLE,
            CondStatus::True,
            "PoolsPresent",
            "",
            None,
            &now,
        );
        let mut before = s.clone();
        before.pools[0].min_free = None;
        set_pool_low_condition(&mut s, Some(1), &now);
        let c = crate::status::find_condition(&s.conditions, POOLS_AVAILABLE).expect("set");
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", POOL_LOW));
        assert!(
            c.message
                .contains("hyperscalerType=aws (1 free, minFree 2)"),
            "{}",
            c.message
        );
        let (warning, reason, _) = pool_low_event(Some(&before), &s).expect("a change");
        assert!(warning && reason == POOL_LOW);
        assert_eq!(pool_low_event(Some(&s), &s.clone()), None);
        let low = s.clone();
        s.pools[0].states.insert("Free".into(), 2);
        let (_, reason, _) = pool_low_event(Some(&low), &s).expect("recovered");
        assert_eq!(reason, "PoolRecovered");
    }

    #[test]
    fn a_cordon_event_goes_out_once_per_change_naming_binding_reason_and_tenant() {
        let none = status(&[]);
        assert_eq!(cordon_event(None, &none), None);
        let one = status(&[("aws-1", Some("ga-1"), "quota ticket 42")]);
        let (warning, reason, note) = cordon_event(Some(&none), &one).expect("a change");
        assert_eq!((warning, reason), (false, "BindingsCordoned"));
        assert!(
            note.contains("aws-1 (quota ticket 42, held by ga-1)"),
            "{note}"
        );
        assert_eq!(cordon_event(Some(&one), &one.clone()), None);
        // A new reason is a change too.
        let other = status(&[("aws-1", Some("ga-1"), "revoked")]);
        assert!(cordon_event(Some(&one), &other).is_some());
        let (_, reason, _) = cordon_event(Some(&other), &none).expect("lifted");
        assert_eq!(reason, "CordonsLifted");
    }
}
