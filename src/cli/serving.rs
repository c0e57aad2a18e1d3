//! `hap explain --live`: which preference and binding would serve a request now, decided by the
//! operator's own selection (`selection::select_ordered`) over one read of the cluster, with no
//! writes in flight. A dry run: nothing is written, and a claim made meanwhile may change it.

use std::collections::BTreeSet;
use std::time::Instant;

use serde::Serialize;

use crate::k8s::live::PoolsInput;
use crate::pools::ClaimView;
use crate::rules::{CompiledRules, Outcome};
use crate::selection::{
    Choice, InFlight, MultiAccountPolicy, OrderedRequest, UseReason, describe_pool, select_ordered,
};

/// What the operator would do with the request now.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Serving {
    /// The preference of the entry that would serve (1: the primary); for `PoolExhausted` the first.
    pub preference: usize,
    pub hyperscaler_type: String,
    pub eu_access: bool,
    pub shared: bool,
    /// `Claimed`, `Reused`, `SharedLeastUsed`, `FilledMostPopulated`, `Pinned`, or why none:
    /// `PoolExhausted`, `PinnedBindingUnavailable`, `Progressing`.
    pub decision: &'static str,
    pub binding: Option<String>,
    pub message: Option<String>,
}

/// What the operator would do now with a request of `plan` for `ga` that the rules resolved to
/// `o`.
pub fn serving(
    rules: &CompiledRules,
    o: &Outcome,
    input: &PoolsInput,
    plan: &str,
    ga: &str,
) -> Serving {
    let inv = input.inventory();
    let claim = ClaimView {
        namespace: "hap-explain".into(),
        name: "request".into(),
        uid: "hap-explain".into(),
        global_account: ga.to_string(),
        ..Default::default()
    };
    let req = OrderedRequest {
        claim: &claim,
        preferences: &o.preferences,
        provider_type: &o.provider_type,
        pins: rules.pins(),
    };
    let cooldown = input
        .spec
        .release
        .as_ref()
        .and_then(|r| r.cooldown.as_deref());
    let policy = MultiAccountPolicy::from_spec(input.spec.multi_hyperscaler_account.as_ref())
        .with_cooldown(crate::pools::lifecycle::Cooldown::from_spec(
            cooldown,
            jiff::Timestamp::now(),
        ))
        .with_quarantine(crate::pools::quarantine::Gate::for_request(
            input.spec.quarantine.as_deref(),
            plan,
            ga,
        ));
    let p = select_ordered(
        &inv,
        &InFlight::default(),
        &req,
        &policy,
        &BTreeSet::new(),
        Instant::now(),
    );
    let (decision, binding, message) = match p.choice {
        Choice::Claim { binding, .. } => (
            if p.pinned { "Pinned" } else { "Claimed" },
            Some(binding),
            None,
        ),
        Choice::Use { binding, decision } => (
            match decision {
                UseReason::Reused => "Reused",
                UseReason::SharedLeastUsed => "SharedLeastUsed",
                UseReason::FilledMostPopulated => "FilledMostPopulated",
                UseReason::Pinned => "Pinned",
            },
            Some(binding),
            None,
        ),
        Choice::Exhausted { message, .. } if p.pinned => {
            ("PinnedBindingUnavailable", None, Some(message))
        }
        Choice::Exhausted { message, .. } => ("PoolExhausted", None, Some(message)),
        Choice::Wait { binding } | Choice::Bound { binding } | Choice::Lost { binding, .. } => {
            ("Progressing", Some(binding), None)
        }
    };
    Serving {
        preference: p.preference,
        hyperscaler_type: p.pool.hyperscaler_type.clone(),
        eu_access: p.pool.eu_access,
        shared: p.pool.shared,
        decision,
        binding,
        message,
    }
}

/// The text form: one line, then the message if any.
pub fn describe(s: &Serving) -> String {
    let pool = describe_pool(&crate::labels::PoolKey {
        hyperscaler_type: s.hyperscaler_type.clone(),
        eu_access: s.eu_access,
        shared: s.shared,
    });
    let which = if s.preference == 1 {
        "preference 1 (primary)".to_string()
    } else {
        format!("preference {} (fallback)", s.preference)
    };
    match (&s.binding, &s.message) {
        (Some(b), _) => format!("live: {which}, pool {pool}: {} binding {b}", s.decision),
        (None, Some(m)) => format!("live: no binding now ({}): {m}", s.decision),
        (None, None) => format!("live: {which}, pool {pool}: {}", s.decision),
    }
}

#[cfg(test)]
mod tests {

    use serde_json::json;

    use super::*;
    use crate::api::HapConfigSpec;
    use crate::labels::ResolvedLabelKeys;
    use crate::pools::BindingView;

    /// A free binding here, and a claim of another binding namespace bound to a binding of the
    /// same name there: that claim's cluster runs in the other namespace's account.
    fn input() -> PoolsInput {
        let spec: HapConfigSpec =
            serde_json::from_value(json!({"bindingNamespace": "garden-here", "rules": ["aws"]}))
                .expect("spec");
        let there = ClaimView {
            namespace: "claims".into(),
            name: "elsewhere".into(),
            uid: "u-elsewhere".into(),
            global_account: "ga-other".into(),
            bound_binding: Some("aws-1".into()),
            binding_namespace: Some("garden-there".into()),
            ..Default::default()
        };
        PoolsInput {
            config: "default".into(),
            note: None,
            binding_namespace: "garden-here".into(),
            binding_kind: crate::api::BindingKind::CredentialsBinding,
            shoot_namespace: "garden-here".into(),
            keys: ResolvedLabelKeys::from_spec(None),
            bindings: vec![BindingView {
                name: "aws-1".into(),
                resource_version: Some("1".into()),
                labels: [("hyperscalerType".into(), "aws".into())].into(),
                created: crate::pools::quarantine::creation_second(1_767_225_600),
                ..Default::default()
            }],
            others: Vec::new(),
            claims: vec![there],
            shoots: Vec::new(),
            spec,
        }
    }

    #[test]
    fn a_claim_of_another_binding_namespace_does_not_make_a_binding_here_in_use() {
        let input = input();
        let (rules, _) = CompiledRules::from_spec(&input.spec).expect("rules");
        let request = crate::rules::Request {
            plan: "aws",
            platform_region: None,
            cluster_region: None,
            provider: None,
            global_account: None,
        };
        let outcome = rules.evaluate(&request).expect("outcome");
        let s = serving(&rules, &outcome, &input, "aws", "ga-1");
        assert_eq!(
            (s.decision, s.binding.as_deref()),
            ("Claimed", Some("aws-1")),
            "{:?}",
            s.message
        );
    }
    #[test]
    fn the_dry_run_applies_the_quarantine_to_the_requests_plan() {
        let mut input = input();
        input.claims.clear();
        input.spec.rules = Some(vec!["aws".into(), "trial".into()]);
        input.spec.quarantine = serde_json::from_value(serde_json::json!(
            [{"pool": {"hyperscalerType": "aws"}, "since": "2026-01-01T00:00:00Z", "plans": ["trial"]}]
        ))
        .expect("quarantine");
        let (rules, _) = CompiledRules::from_spec(&input.spec).expect("rules");
        let for_plan = |plan: &'static str| {
            let request = crate::rules::Request {
                plan,
                platform_region: None,
                cluster_region: None,
                provider: Some("aws"),
                global_account: None,
            };
            let outcome = rules.evaluate(&request).expect("outcome");
            serving(&rules, &outcome, &input, plan, "ga-1")
        };
        let paying = for_plan("aws");
        assert_eq!(paying.decision, "PoolExhausted", "{:?}", paying.message);
        assert!(
            paying
                .message
                .as_deref()
                .is_some_and(|m| m.contains("1 free but quarantined")),
            "{:?}",
            paying.message
        );
        let trial = for_plan("trial");
        assert_eq!(
            (trial.decision, trial.binding.as_deref()),
            ("Claimed", Some("aws-1"))
        );
    }
}
