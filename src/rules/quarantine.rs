//! Validation of `spec.quarantine` (crate::pools::quarantine decides what it does): every
//! problem names its field, so `hap validate`, the HapConfig's `RulesValid` condition and the
//! CRD's CEL rules (which catch the same mistakes at apply time where they can) agree.

use std::collections::BTreeMap;

use super::plans::PlanTable;
use crate::api::QuarantineSpec;
use crate::diag::{Diagnostic, Reason, Validation, label_value_problem};
use crate::pools::quarantine::pool_of;

/// Adds an error per problem of the quarantine entries to `v`.
pub(crate) fn check(entries: &[QuarantineSpec], plans: &PlanTable, v: &mut Validation) {
    let mut first: BTreeMap<crate::labels::PoolKey, usize> = BTreeMap::new();
    for (i, q) in entries.iter().enumerate() {
        let at = |f: &str| format!("quarantine[{i}].{f}");
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
            since: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::UNIX_EPOCH,
            ),
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
                entry("aws", Some(&["trial"]), None),
                entry("aws", Some(&["trail"]), None),
                entry("gcp", None, None),
                entry("azure", None, Some(&["bad ga"])),
            ],
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
            &[entry("aws", Some(&["trial"]), Some(&["canary"]))],
            &plans,
            &mut ok,
        );
        assert!(ok.errors.is_empty(), "{:?}", ok.errors);
    }
}
