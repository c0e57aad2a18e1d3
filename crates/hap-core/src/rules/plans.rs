//! The plan table (docs/design.md §3): built-in plans and their provider types, extended or overridden
//! by `spec.plans`, plus the hints for heads that name a provider type or a misspelt plan.

use std::collections::BTreeMap;

use crate::api::PlanSpec;

use super::parse::closest;
use crate::diag::{Diagnostic, Reason};

/// Where a plan's provider type comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Provider {
    Fixed(String),
    /// trial and free: the request's `provider`.
    FromRequest,
}

const BUILT_IN: [(&str, Option<&str>); 14] = [
    ("aws", Some("aws")),
    ("build-runtime-aws", Some("aws")),
    ("preview", Some("aws")),
    ("azure", Some("azure")),
    ("build-runtime-azure", Some("azure")),
    ("azure_lite", Some("azure")),
    ("gcp", Some("gcp")),
    ("build-runtime-gcp", Some("gcp")),
    ("sap-converged-cloud", Some("openstack")),
    ("alicloud", Some("alicloud")),
    ("build-runtime-alicloud", Some("alicloud")),
    ("gdch", Some("gdch")),
    ("trial", None),
    ("free", None),
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanTable {
    plans: BTreeMap<String, Provider>,
}

impl Default for PlanTable {
    fn default() -> Self {
        let plans = BUILT_IN
            .iter()
            .map(|(p, t)| {
                (
                    p.to_string(),
                    t.map_or(Provider::FromRequest, |t| Provider::Fixed(t.to_string())),
                )
            })
            .collect();
        Self { plans }
    }
}

impl PlanTable {
    /// Built-ins with `spec.plans` applied; malformed overrides are InvalidConfig errors.
    pub fn from_spec(overrides: Option<&BTreeMap<String, PlanSpec>>) -> (Self, Vec<Diagnostic>) {
        let mut table = Self::default();
        let mut errors = Vec::new();
        for (plan, spec) in overrides.into_iter().flatten() {
            if !is_plan_name(plan) {
                errors.push(Diagnostic::global(
                    Reason::InvalidConfig,
                    format!("plans: `{plan}` is not a valid plan name (lowercase letters, digits, `-` and `_`, at most 63 characters)"),
                ));
                continue;
            }
            let from_request = spec.provider_from_request == Some(true);
            match (&spec.provider_type, from_request) {
                (Some(t), false) if is_provider_name(t) => {
                    table.plans.insert(plan.clone(), Provider::Fixed(t.clone()));
                }
                (None, true) => {
                    table.plans.insert(plan.clone(), Provider::FromRequest);
                }
                (Some(t), false) => errors.push(Diagnostic::global(
                    Reason::InvalidConfig,
                    format!("plans.{plan}: providerType `{t}` is not valid (lowercase letters, digits and `-`, at most 32 characters)"),
                )),
                _ => errors.push(Diagnostic::global(
                    Reason::InvalidConfig,
                    format!("plans.{plan}: set exactly one of `providerType` or `providerFromRequest: true`"),
                )),
            }
        }
        (table, errors)
    }

    pub fn get(&self, plan: &str) -> Option<&Provider> {
        self.plans.get(plan)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.plans.keys().map(String::as_str)
    }

    /// The UnknownPlan message for `plan`, with the plan a provider type stands for or the
    /// closest plan name.
    pub fn unknown_message(&self, plan: &str) -> String {
        let by_provider: Vec<&str> = self
            .plans
            .iter()
            .filter(|(_, p)| matches!(p, Provider::Fixed(t) if t == plan))
            .map(|(name, _)| name.as_str())
            .collect();
        let hint = if let Some(first) = by_provider
            .iter()
            .find(|p| !p.starts_with("build-runtime-"))
            .or(by_provider.first())
        {
            format!(": `{plan}` is a provider type, not a plan; did you mean `{first}`?")
        } else if let Some(near) = closest(plan, self.names()) {
            format!("; did you mean `{near}`?")
        } else {
            format!(
                "; known plans: {}",
                self.names().collect::<Vec<_>>().join(", ")
            )
        };
        format!("plan `{plan}` is not supported{hint}")
    }
}

fn is_plan_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

fn is_provider_name(s: &str) -> bool {
    is_plan_name(s) && s.len() <= 32 && !s.contains('_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_type_heads_suggest_their_plan() {
        let t = PlanTable::default();
        assert!(
            t.unknown_message("openstack")
                .contains("did you mean `sap-converged-cloud`")
        );
        assert!(t.unknown_message("gpc").contains("did you mean `gcp`"));
        assert_eq!(t.get("trial"), Some(&Provider::FromRequest));
    }

    #[test]
    fn overrides_extend_and_replace() {
        let mut m = BTreeMap::new();
        m.insert(
            "trial".to_string(),
            PlanSpec {
                provider_type: Some("aws".into()),
                provider_from_request: None,
            },
        );
        m.insert("bad".to_string(), PlanSpec::default());
        let (t, errs) = PlanTable::from_spec(Some(&m));
        assert_eq!(t.get("trial"), Some(&Provider::Fixed("aws".into())));
        assert_eq!(errs.len(), 1);
    }
}
