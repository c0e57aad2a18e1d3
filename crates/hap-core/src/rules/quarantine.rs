//! Validation of `spec.quarantine` (crate::pools::quarantine decides what it does): every
//! problem names its field, so `hap validate`, the HapConfig's `RulesValid` condition and the
//! CRD's CEL rules (which catch the same mistakes at apply time where they can) agree.

use std::collections::BTreeMap;

use super::Entry;
use super::plans::PlanTable;
use super::pools::PreferenceInfo;
use crate::api::QuarantineSpec;
use crate::diag::{Diagnostic, Reason, Validation, label_value_problem};
use crate::pools::quarantine::pool_of;

/// Adds an error per problem of the quarantine entries to `v`; `rules` are the compiled rule
/// entries, which say where each plan's requests can go.
pub(crate) fn check(
    entries: &[QuarantineSpec],
    rules: &[Entry],
    plans: &PlanTable,
    v: &mut Validation,
) {
    let mut first: BTreeMap<crate::labels::PoolKey, usize> = BTreeMap::new();
    for (i, q) in entries.iter().enumerate() {
        let at = |f: &str| format!("quarantine[{i}].{f}");
        for (field, list) in [("plans", &q.plans), ("globalAccounts", &q.global_accounts)] {
            if list.as_ref().is_some_and(Vec::is_empty) {
                v.errors.push(Diagnostic::field(
                    at(field),
                    Reason::InvalidConfig,
                    "an empty list names no request: leave the field out or name one",
                ));
            }
        }
        if q.since.is_none() {
            v.errors.push(Diagnostic::field(
                at("since"),
                Reason::InvalidConfig,
                "required: the time from which new bindings are quarantined (RFC 3339, e.g. \
                 when the entry is added); without it the entry applies to nothing",
            ));
        }
        unreachable_plans(i, q, rules, plans, v);
        if q.plans.is_none() && q.global_accounts.is_none() {
            v.errors.push(Diagnostic::field(
                format!("quarantine[{i}]"),
                Reason::InvalidConfig,
                "name the requests that may take quarantined bindings (plans, globalAccounts, \
                 or both); with neither, no request could prove a new account",
            ));
        }
        if let Some(problem) = label_value_problem(&q.pool.hyperscaler_type) {
            v.errors.push(Diagnostic::field(
                at("pool.hyperscalerType"),
                Reason::InvalidConfig,
                format!("the pool's hyperscalerType {problem}"),
            ));
        }
        for (j, plan) in q.plans.iter().flatten().enumerate() {
            if plans.get(plan).is_none() {
                v.errors.push(Diagnostic::field(
                    at(&format!("plans[{j}]")),
                    Reason::UnknownPlan,
                    plans.unknown_message(plan),
                ));
            }
        }
        for (j, ga) in q.global_accounts.iter().flatten().enumerate() {
            if let Some(problem) = label_value_problem(ga) {
                v.errors.push(Diagnostic::field(
                    at(&format!("globalAccounts[{j}]")),
                    Reason::InvalidConfig,
                    format!("global account `{ga}` {problem}"),
                ));
            }
        }
        let key = pool_of(q);
        match first.get(&key) {
            Some(earlier) => v.errors.push(Diagnostic::field(
                at("pool"),
                Reason::InvalidConfig,
                format!(
                    "pool hyperscalerType={}{} is quarantine[{earlier}] already: list every pool once",
                    key.hyperscaler_type,
                    if key.eu_access { ", euAccess" } else { "" }
                ),
            )),
            None => {
                first.insert(key, i);
            }
        }
    }
}

/// An error when `q` names plans and no rule entry of any of them can send a request to its
/// pool (e.g. KEB's default `trial` entry goes to the shared pool): no named plan could ever
/// prove a new binding, and every one would be withheld for ever.
fn unreachable_plans(
    i: usize,
    q: &QuarantineSpec,
    rules: &[Entry],
    plans: &PlanTable,
    v: &mut Validation,
) {
    let named = q.plans.as_deref().unwrap_or_default();
    if named.is_empty() || named.iter().any(|p| plans.get(p).is_none()) {
        return; // nothing named, or an unknown plan, which has its own error
    }
    let key = pool_of(q);
    let reached = rules
        .iter()
        .filter(|e| named.contains(&e.rule.plan))
        .any(|e| {
            e.rule
                .pools
                .iter()
                .enumerate()
                .any(|(k, p)| PreferenceInfo::new(k + 1, &e.rule, p, plans).reaches(&key))
        });
    if !reached {
        v.errors.push(Diagnostic::field(
            format!("quarantine[{i}].plans"),
            Reason::InvalidConfig,
            format!(
                "no rule entry of {} sends a request to the dedicated pool hyperscalerType={}{}: \
                 no request of them could prove a new binding, and every new binding would be \
                 withheld; name a plan whose entry reaches the pool, or a global account",
                named.join(", "),
                key.hyperscaler_type,
                if key.eu_access { ", euAccess" } else { "" }
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PinPool;

    fn entry(t: &str, plans: Option<&[&str]>, gas: Option<&[&str]>) -> QuarantineSpec {
        let list = |l: Option<&[&str]>| l.map(|l| l.iter().map(|s| s.to_string()).collect());
        QuarantineSpec {
            pool: PinPool {
                hyperscaler_type: t.into(),
                eu_access: None,
            },
            since: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::UNIX_EPOCH,
            )),
            plans: list(plans),
            global_accounts: list(gas),
        }
    }

    #[test]
    fn each_problem_names_its_entry_field_and_reason() {
        let (plans, _) = PlanTable::from_spec(None);
        let mut v = Validation::default();
        check(
            &[
                entry("aws", None, Some(&["canary"])),
                entry("aws", Some(&["trail"]), None),
                entry("gcp", None, None),
                entry("azure", None, Some(&["bad ga"])),
            ],
            &[],
            &plans,
            &mut v,
        );
        let got: Vec<(Option<&str>, &str)> = v
            .errors
            .iter()
            .map(|d| (d.field.as_deref(), d.reason.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (Some("quarantine[1].plans[0]"), "UnknownPlan"),
                (Some("quarantine[1].pool"), "InvalidConfig"),
                (Some("quarantine[2]"), "InvalidConfig"),
                (Some("quarantine[3].globalAccounts[0]"), "InvalidConfig"),
            ],
            "{:?}",
            v.errors
        );
        assert!(
            v.errors[1].message.contains("quarantine[0] already"),
            "{}",
            v.errors[1].message
        );
        let mut ok = Validation::default();
        check(
            &[entry("aws", None, Some(&["canary"]))],
            &[],
            &plans,
            &mut ok,
        );
        assert!(ok.errors.is_empty(), "{:?}", ok.errors);
    }
}

#[cfg(test)]
mod reach_tests {
    use crate::api::HapConfigSpec;
    use crate::rules::CompiledRules;

    fn errors(rules: &[&str], quarantine: serde_json::Value) -> Vec<(String, String)> {
        let spec: HapConfigSpec = serde_json::from_value(serde_json::json!({
            "bindingNamespace": "garden", "rules": rules, "quarantine": quarantine,
        }))
        .expect("spec");
        match CompiledRules::from_spec(&spec) {
            Ok(_) => Vec::new(),
            Err(v) => v
                .errors
                .iter()
                .map(|d| (d.field.clone().unwrap_or_default(), d.message.clone()))
                .collect(),
        }
    }

    /// An entry stored under an older schema, before `since` was required, must not make the
    /// whole HapConfig unreadable (its watch would stop, and with it the operator): it decodes,
    /// and validation names the missing field.
    #[test]
    fn an_entry_stored_without_since_decodes_and_is_refused_by_name() {
        let got = errors(
            &["aws"],
            serde_json::json!([{"pool": {"hyperscalerType": "aws"}, "plans": ["aws"]}]),
        );
        assert!(
            got.iter()
                .any(|(f, m)| f == "quarantine[0].since" && m.starts_with("required")),
            "{got:?}"
        );
    }

    #[test]
    fn a_named_plan_must_reach_the_quarantined_pool_and_an_empty_list_names_nothing() {
        let q = |plans: serde_json::Value| serde_json::json!([{"pool": {"hyperscalerType": "aws"}, "since": "2026-01-01T00:00:00Z", "plans": plans}]);
        // KEB's default sends trial requests to the shared pool: nothing could prove the aws
        // pool's new bindings.
        let shared = errors(&["aws", "trial(shared)"], q(serde_json::json!(["trial"])));
        assert!(
            shared
                .iter()
                .any(|(f, m)| f == "quarantine[0].plans" && m.contains("hyperscalerType=aws")),
            "{shared:?}"
        );
        assert!(
            errors(&["aws", "trial"], q(serde_json::json!(["trial"]))).is_empty(),
            "trial requests of provider aws reach it"
        );
        let empty = errors(&["aws", "trial"], q(serde_json::json!([])));
        assert!(
            empty.iter().any(|(f, _)| f == "quarantine[0].plans"),
            "{empty:?}"
        );
    }
}
