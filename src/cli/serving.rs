//! `hap explain --live`: which preference and binding would serve a request now, decided by the
//! operator's own selection (`selection::select_ordered`) over one read of the cluster, with no
//! writes in flight. A dry run: nothing is written, and a claim made meanwhile may change it.

use std::collections::BTreeSet;
use std::time::Instant;

use serde::Serialize;

use super::live::PoolsInput;
use crate::pools::{ClaimView, Inventory};
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

pub fn serving(rules: &CompiledRules, o: &Outcome, input: &PoolsInput, ga: &str) -> Serving {
    let inv = Inventory::build(
        input.keys.clone(),
        input.bindings.clone(),
        input.claims.clone(),
        input.shoots.clone(),
    );
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
    let policy = MultiAccountPolicy::from_spec(input.spec.multi_hyperscaler_account.as_ref());
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
