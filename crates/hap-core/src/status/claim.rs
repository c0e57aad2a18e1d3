//! The desired AccountClaim status (what a recorded status means lives in `claim_state`).
//!
//! | outcome | phase | Ready / Bound | Stalled / Reconciling |
//! |---|---|---|---|
//! | bound | Bound | True `Bound` | absent |
//! | pending, retried: `ConfigMissing`, `PoolExhausted`, `Progressing`, `InventoryUnavailable`, `Paused`, `Observing` | Pending | False, reason | Reconciling=True |
//! | pending, terminal: `ConfigInvalid`, `NoMatchingRule`, `AmbiguousMatch`, `MissingProvider`, `UnknownPlan`, `BindingNotTenant` | Pending | False, reason | Stalled=True |
//! | binding lost | Failed | False `BindingLost` | Stalled=True |
//! | denied by a rule entry | Failed | False `Denied` | Stalled=True |
//!
//! Retried reasons fix themselves (the HapConfig is applied in the same sync, the cleanup job
//! returns bindings, a claim write finishes). Terminal ones need a person: the claim's spec is
//! immutable, so a new HapConfig (a rule, a plan, a valid generation) or a new claim. Terminal
//! pending claims are still re-evaluated whenever the HapConfig changes, and leave `Stalled` when
//! they bind; they stay `Pending` rather than `Failed` for that reason. A lost binding is
//! `Failed`: the operator never rebinds (docs/design.md §4.1), so the record of the binding stays. A
//! denied claim is `Failed` too: the denial is a decision, recorded once, and a later change of
//! the rules does not revisit it (as a bound claim never moves); a new claim is decided anew.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::{CondStatus, remove_condition, set_condition};
use crate::api::conditions::{reasons, types};
use crate::api::{AccountClaimSpec, AccountClaimStatus, ClaimPhase, Decision, MatchedRule};
use crate::labels::PoolKey;
use crate::selection::describe_pool;

/// Why a claim is not bound yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingReason {
    ConfigMissing,
    ConfigInvalid,
    NoMatchingRule,
    AmbiguousMatch,
    PoolExhausted,
    MissingProvider,
    UnknownPlan,
    /// Another claim of the tenant is claiming a binding in the pool right now.
    Progressing,
    /// The binding or Shoot cache cannot list (a missing CRD, a missing permission).
    InventoryUnavailable,
    /// The garden refused the binding write; a person must grant the permission it names.
    Forbidden,
    /// The binding pinned to the tenant is missing or held by another tenant.
    PinnedBindingUnavailable,
    /// The binding the request adopted (`spec.adoptBinding`) is not the tenant's.
    BindingNotTenant,
    /// The HapConfig in force is paused: the claim waits until it is unpaused.
    Paused,
    /// The HapConfig in force observes (`spec.mode: Observe`): the claim waits for `Enforce`.
    Observing,
}

impl PendingReason {
    /// The condition reason.
    pub fn as_str(self) -> &'static str {
        match self {
            PendingReason::ConfigMissing => reasons::CONFIG_MISSING,
            PendingReason::ConfigInvalid => reasons::CONFIG_INVALID,
            PendingReason::NoMatchingRule => reasons::NO_MATCHING_RULE,
            PendingReason::AmbiguousMatch => reasons::AMBIGUOUS_MATCH,
            PendingReason::PoolExhausted => reasons::POOL_EXHAUSTED,
            PendingReason::MissingProvider => reasons::MISSING_PROVIDER,
            PendingReason::UnknownPlan => reasons::UNKNOWN_PLAN,
            PendingReason::Progressing => reasons::PROGRESSING,
            PendingReason::InventoryUnavailable => reasons::INVENTORY_UNAVAILABLE,
            PendingReason::Forbidden => reasons::FORBIDDEN,
            PendingReason::PinnedBindingUnavailable => reasons::PINNED_BINDING_UNAVAILABLE,
            PendingReason::BindingNotTenant => reasons::BINDING_NOT_TENANT,
            PendingReason::Paused => reasons::PAUSED,
            PendingReason::Observing => reasons::OBSERVING,
        }
    }

    /// Whether only a person can fix it (`Stalled=True`); otherwise the operator retries.
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            PendingReason::ConfigMissing
                | PendingReason::PoolExhausted
                | PendingReason::Progressing
                | PendingReason::PinnedBindingUnavailable
                | PendingReason::InventoryUnavailable
                | PendingReason::Paused
                | PendingReason::Observing
        )
    }
}

/// Where a bound claim points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundTo {
    pub binding: String,
    pub namespace: String,
    pub pool: PoolKey,
    pub matched_rule: MatchedRule,
    pub decision: Decision,
    /// 1-based preference of the matched entry that served the claim.
    pub preference: Option<usize>,
}

/// What happened to the claim in this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// Newly bound.
    Bound(BoundTo),
    /// Already recorded, and the binding is intact: the record stays as written, `Bound` (again,
    /// if it was lost), and a missing `bindingNamespace` is filled with `namespace`.
    Kept { namespace: String },
    /// `cause` says what went wrong; `matched` is the rule and pool when the rules got that far.
    Pending {
        reason: PendingReason,
        cause: String,
        matched: Option<(MatchedRule, PoolKey)>,
    },
    /// The bound binding is gone or no longer the tenant's.
    Lost { cause: String },
    /// The claim is being deleted and its binding cannot be released yet; the record of the
    /// binding stays, `Released=False` says why.
    ReleaseBlocked { reason: &'static str, cause: String },
    /// A deny entry matched; `cause` is the denial's message (`EvalError::Denied`).
    Denied { cause: String, matched: MatchedRule },
    /// `spec.tenants` allows no such requester to claim for this global account; `cause` names
    /// the rules and why each does not hold (`tenancy::decide`). Final, like a denial.
    TenantNotAllowed { cause: String },
}

/// Whether the claim's `Released` condition already says `False` for `reason`: a release that
/// waits for the same cause again is not announced again (one event per claim and cause, not one
/// per retry).
pub fn release_blocked_for(status: Option<&AccountClaimStatus>, reason: &str) -> bool {
    status
        .and_then(|s| super::find_condition(&s.conditions, types::RELEASED))
        .is_some_and(|c| c.status == "False" && c.reason == reason)
}

/// `globalAccount=ga, plan=aws, platformRegion=cf-eu11, ...`: the inputs the rules saw.
fn describe_request(spec: &AccountClaimSpec) -> String {
    let mut parts = vec![
        format!("globalAccount={}", spec.global_account),
        format!("plan={}", spec.plan),
    ];
    let optional = [
        ("platformRegion", &spec.platform_region),
        ("clusterRegion", &spec.cluster_region),
        ("provider", &spec.provider),
        ("shootName", &spec.shoot_name),
    ];
    parts.extend(
        optional
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}"))),
    );
    parts.join(", ")
}

/// The message of the Ready and Bound conditions of a claim bound in this pass, from the
/// status's own fields (the claim cache relies on that: see `status::compact`).
pub fn bound_message(s: &AccountClaimStatus) -> Option<String> {
    let pool = PoolKey {
        hyperscaler_type: s.hyperscaler_type.clone()?,
        eu_access: s.eu_access?,
        shared: s.shared?,
    };
    let rule = s.matched_rule.as_ref()?;
    let preference = match s.preference {
        Some(p) if p > 1 => format!("; fallback preference {p}"),
        _ => String::new(),
    };
    Some(format!(
        "bound to {}/{} ({}; rule {} `{}`{preference}; decision {:?})",
        s.binding_namespace.as_deref()?,
        s.credentials_binding_name.as_deref()?,
        describe_pool(&pool),
        rule.index,
        rule.entry,
        s.decision?
    ))
}

type SetCondition<'a> = dyn Fn(&mut Vec<Condition>, &str, CondStatus, &str, &str) + 'a;

/// A final refusal (a deny entry, or the tenant policy): Failed, Ready/Bound False and Stalled.
fn final_refusal(
    conds: &mut Vec<Condition>,
    set: &SetCondition<'_>,
    (reason, cause): (&str, &str),
    spec: &AccountClaimSpec,
    matched: Option<MatchedRule>,
) -> AccountClaimStatus {
    let msg = format!("{cause} (request: {})", describe_request(spec));
    for t in [types::READY, types::BOUND, types::STALLED] {
        let st = if t == types::STALLED {
            CondStatus::True
        } else {
            CondStatus::False
        };
        set(conds, t, st, reason, &msg);
    }
    remove_condition(conds, types::RECONCILING);
    AccountClaimStatus {
        phase: Some(ClaimPhase::Failed),
        matched_rule: matched,
        ..Default::default()
    }
}

/// The status to write, starting from the current one so that transition times survive.
pub fn desired_claim_status(
    current: Option<&AccountClaimStatus>,
    spec: &AccountClaimSpec,
    generation: Option<i64>,
    outcome: &ClaimOutcome,
    now: &Time,
) -> AccountClaimStatus {
    let mut conds = current.map(|s| s.conditions.clone()).unwrap_or_default();
    let set = |conds: &mut Vec<_>, t: &str, st: CondStatus, r: &str, m: &str| {
        set_condition(conds, t, st, r, m, generation, now)
    };
    let c = &mut conds;
    let status = match outcome {
        ClaimOutcome::Bound(b) => bound(c, &set, b),
        ClaimOutcome::Denied { cause, matched } => final_refusal(
            c,
            &set,
            (reasons::DENIED, cause),
            spec,
            Some(matched.clone()),
        ),
        ClaimOutcome::TenantNotAllowed { cause } => {
            final_refusal(c, &set, (reasons::TENANT_NOT_ALLOWED, cause), spec, None)
        }
        ClaimOutcome::Kept { namespace } => kept(c, &set, current, namespace),
        ClaimOutcome::Pending {
            reason,
            cause,
            matched,
        } => pending(c, &set, spec, (*reason, cause), matched.clone()),
        ClaimOutcome::ReleaseBlocked { reason, cause } => {
            set(c, types::RELEASED, CondStatus::False, reason, cause);
            set(c, types::STALLED, CondStatus::True, reason, cause);
            current.cloned().unwrap_or_default()
        }
        ClaimOutcome::Lost { cause } => {
            let msg = format!("{cause}; the claim is not rebound: delete it and create a new one");
            for t in [types::READY, types::BOUND, types::STALLED] {
                let st = if t == types::STALLED {
                    CondStatus::True
                } else {
                    CondStatus::False
                };
                set(c, t, st, reasons::BINDING_LOST, &msg);
            }
            remove_condition(c, types::RECONCILING);
            // The record of what the claim was bound to stays: it is what an operator needs to act.
            AccountClaimStatus {
                phase: Some(ClaimPhase::Failed),
                ..current.cloned().unwrap_or_default()
            }
        }
    };
    AccountClaimStatus {
        observed_generation: generation,
        conditions: conds,
        claim_write: unsettled_claim_write(current, &status),
        ..status
    }
}

/// The claim write `current` records, until a status records its binding: then it has landed
/// (a claim is recorded on a binding its own write claimed only after that write succeeded).
/// Every other status keeps it, whatever it says: the release settles it before the claim goes.
fn unsettled_claim_write(
    current: Option<&AccountClaimStatus>,
    next: &AccountClaimStatus,
) -> Option<crate::api::PendingClaimWrite> {
    let w = current?.claim_write.clone()?;
    (next.credentials_binding_name.as_deref() != Some(w.binding.as_str())).then_some(w)
}

/// Bound in this pass: every field of the binding recorded, the conditions' message built
/// from them alone (`bound_message`).
fn bound(conds: &mut Vec<Condition>, set: &SetCondition<'_>, b: &BoundTo) -> AccountClaimStatus {
    let status = AccountClaimStatus {
        phase: Some(ClaimPhase::Bound),
        credentials_binding_name: Some(b.binding.clone()),
        binding_namespace: Some(b.namespace.clone()),
        hyperscaler_type: Some(b.pool.hyperscaler_type.clone()),
        eu_access: Some(b.pool.eu_access),
        shared: Some(b.pool.shared),
        matched_rule: Some(b.matched_rule.clone()),
        decision: Some(b.decision),
        preference: b.preference.and_then(|p| i64::try_from(p).ok()),
        ..Default::default()
    };
    let msg = bound_message(&status).unwrap_or_default();
    set(conds, types::READY, CondStatus::True, reasons::BOUND, &msg);
    set(conds, types::BOUND, CondStatus::True, reasons::BOUND, &msg);
    remove_condition(conds, types::STALLED);
    remove_condition(conds, types::RECONCILING);
    status
}

/// Bound before and still: the recorded status stays, conditions that already say Bound keep
/// their message, and a missing `bindingNamespace` is filled in.
fn kept(
    conds: &mut Vec<Condition>,
    set: &SetCondition<'_>,
    current: Option<&AccountClaimStatus>,
    namespace: &str,
) -> AccountClaimStatus {
    let old = current.cloned().unwrap_or_default();
    let ns = old
        .binding_namespace
        .clone()
        .unwrap_or_else(|| namespace.to_string());
    let binding = old.credentials_binding_name.clone().unwrap_or_default();
    let mut msg = format!("bound to {ns}/{binding}");
    if let Some(t) = &old.hyperscaler_type {
        let pool = PoolKey {
            hyperscaler_type: t.clone(),
            eu_access: old.eu_access.unwrap_or(false),
            shared: old.shared.unwrap_or(false),
        };
        msg.push_str(&format!(" ({})", describe_pool(&pool)));
    }
    for t in [types::READY, types::BOUND] {
        // A condition that already says so keeps its message (written with the rule and
        // the decision when the claim was bound): nothing to rewrite.
        let holds = conds
            .iter()
            .any(|c| c.type_ == t && c.status == "True" && c.reason == reasons::BOUND);
        if !holds {
            set(conds, t, CondStatus::True, reasons::BOUND, &msg);
        }
    }
    remove_condition(conds, types::STALLED);
    remove_condition(conds, types::RECONCILING);
    AccountClaimStatus {
        phase: Some(ClaimPhase::Bound),
        binding_namespace: Some(ns),
        ..old
    }
}

/// Not bound yet: Stalled for a reason only a person can fix, Reconciling for one that fixes
/// itself; the rule and pool recorded when the rules got that far.
fn pending(
    conds: &mut Vec<Condition>,
    set: &SetCondition<'_>,
    spec: &AccountClaimSpec,
    (reason, cause): (PendingReason, &str),
    matched: Option<(MatchedRule, PoolKey)>,
) -> AccountClaimStatus {
    let msg = format!("{cause} (request: {})", describe_request(spec));
    let r = reason.as_str();
    set(conds, types::READY, CondStatus::False, r, &msg);
    set(conds, types::BOUND, CondStatus::False, r, &msg);
    let (on, off) = if reason.is_terminal() {
        (types::STALLED, types::RECONCILING)
    } else {
        (types::RECONCILING, types::STALLED)
    };
    set(conds, on, CondStatus::True, r, &msg);
    remove_condition(conds, off);
    let (rule, pool) = matched.unzip();
    AccountClaimStatus {
        phase: Some(ClaimPhase::Pending),
        hyperscaler_type: pool.as_ref().map(|p| p.hyperscaler_type.clone()),
        eu_access: pool.as_ref().map(|p| p.eu_access),
        shared: pool.as_ref().map(|p| p.shared),
        matched_rule: rule,
        ..Default::default()
    }
}
