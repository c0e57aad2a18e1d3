//! AccountClaim status transitions.

use super::*;
use crate::claim_state::{is_denied, is_settled, recorded_binding};

fn spec() -> AccountClaimSpec {
    AccountClaimSpec {
        global_account: "ga-1".into(),
        plan: "aws".into(),
        platform_region: Some("cf-eu11".into()),
        cluster_region: Some("eu-central-1".into()),
        shoot_name: Some("c-123".into()),
        ..Default::default()
    }
}

fn aws() -> PoolKey {
    PoolKey {
        hyperscaler_type: "aws".into(),
        eu_access: true,
        shared: false,
    }
}

fn rule1() -> MatchedRule {
    MatchedRule {
        index: 1,
        entry: "aws(euAccess=*)".into(),
    }
}

fn bound() -> ClaimOutcome {
    ClaimOutcome::Bound(BoundTo {
        binding: "cb-1".into(),
        namespace: "garden-kyma".into(),
        pool: aws(),
        matched_rule: rule1(),
        decision: Decision::Claimed,
        preference: Some(1),
    })
}

fn pending(reason: PendingReason) -> ClaimOutcome {
    ClaimOutcome::Pending {
        reason,
        cause: format!("cause of {}", reason.as_str()),
        matched: None,
    }
}

#[test]
fn a_bound_claim_records_its_binding_and_is_ready() {
    let s = desired_claim_status(None, &spec(), Some(1), &bound(), &at(1));
    assert_eq!(s.phase, Some(ClaimPhase::Bound));
    assert_eq!(
        (
            s.credentials_binding_name.as_deref(),
            s.binding_namespace.as_deref()
        ),
        (Some("cb-1"), Some("garden-kyma"))
    );
    assert_eq!(
        (s.hyperscaler_type.as_deref(), s.eu_access, s.shared),
        (Some("aws"), Some(true), Some(false))
    );
    assert_eq!(
        (s.matched_rule.clone(), s.decision),
        (Some(rule1()), Some(Decision::Claimed))
    );
    assert_eq!(sr(&s.conditions, types::READY), is("True", reasons::BOUND));
    assert_eq!(sr(&s.conditions, types::BOUND), is("True", reasons::BOUND));
    assert_eq!(
        (
            sr(&s.conditions, types::STALLED),
            sr(&s.conditions, types::RECONCILING)
        ),
        (None, None)
    );
    assert!(
        cond(&s.conditions, types::READY)
            .unwrap()
            .message
            .contains("garden-kyma/cb-1")
    );
    let back = recorded_binding(&s).unwrap();
    assert_eq!(
        (back.binding.as_str(), back.namespace.as_deref(), back.lost),
        ("cb-1", Some("garden-kyma"), false)
    );
}

#[test]
fn retried_pending_reasons_reconcile_and_terminal_ones_stall() {
    use PendingReason::*;
    let all = [
        ConfigMissing,
        ConfigInvalid,
        NoMatchingRule,
        AmbiguousMatch,
        PoolExhausted,
        MissingProvider,
        UnknownPlan,
        Progressing,
    ];
    for reason in all {
        let s = desired_claim_status(None, &spec(), Some(2), &pending(reason), &at(1));
        assert_eq!(s.phase, Some(ClaimPhase::Pending));
        assert_eq!(s.credentials_binding_name, None);
        let r = reason.as_str();
        assert_eq!(sr(&s.conditions, types::READY), is("False", r));
        assert_eq!(sr(&s.conditions, types::BOUND), is("False", r));
        let (on, off) = if reason.is_terminal() {
            (types::STALLED, types::RECONCILING)
        } else {
            (types::RECONCILING, types::STALLED)
        };
        assert_eq!(sr(&s.conditions, on), is("True", r), "{r}");
        assert_eq!(sr(&s.conditions, off), None, "{r}");
        let msg = &cond(&s.conditions, types::READY).unwrap().message;
        for text in [
            &format!("cause of {r}"),
            "globalAccount=ga-1",
            "plan=aws",
            "platformRegion=cf-eu11",
            "clusterRegion=eu-central-1",
        ] {
            assert!(msg.contains(text), "{text}: {msg}");
        }
        assert!(!msg.contains("provider="), "{msg}");
    }
    let terminal: Vec<_> = all
        .iter()
        .filter(|r| r.is_terminal())
        .map(|r| r.as_str())
        .collect();
    assert_eq!(
        terminal,
        [
            "ConfigInvalid",
            "NoMatchingRule",
            "AmbiguousMatch",
            "MissingProvider",
            "UnknownPlan"
        ]
    );
}

#[test]
fn an_exhausted_pool_is_named_in_the_pending_status() {
    let o = ClaimOutcome::Pending {
        reason: PendingReason::PoolExhausted,
        cause: "no claimable binding".into(),
        matched: Some((rule1(), aws())),
    };
    let s = desired_claim_status(None, &spec(), Some(1), &o, &at(1));
    assert_eq!(
        (s.hyperscaler_type.as_deref(), s.eu_access, s.matched_rule),
        (Some("aws"), Some(true), Some(rule1()))
    );
    assert_eq!(s.decision, None);
}

#[test]
fn pending_then_bound_clears_stalled_and_moves_ready() {
    let p = desired_claim_status(
        None,
        &spec(),
        Some(1),
        &pending(PendingReason::NoMatchingRule),
        &at(1),
    );
    let p2 = desired_claim_status(
        Some(&p),
        &spec(),
        Some(1),
        &pending(PendingReason::PoolExhausted),
        &at(2),
    );
    // Still False: the transition time stays, the reason follows, Stalled gives way to Reconciling.
    assert_eq!(
        cond(&p2.conditions, types::READY)
            .unwrap()
            .last_transition_time,
        at(1)
    );
    assert_eq!(
        sr(&p2.conditions, types::READY),
        is("False", reasons::POOL_EXHAUSTED)
    );
    assert_eq!(
        (
            sr(&p2.conditions, types::STALLED),
            sr(&p2.conditions, types::RECONCILING).is_some()
        ),
        (None, true)
    );
    let b = desired_claim_status(Some(&p2), &spec(), Some(1), &bound(), &at(3));
    assert_eq!(
        cond(&b.conditions, types::READY)
            .unwrap()
            .last_transition_time,
        at(3)
    );
    assert_eq!(
        (
            sr(&b.conditions, types::STALLED),
            sr(&b.conditions, types::RECONCILING)
        ),
        (None, None)
    );
}

#[test]
fn a_lost_binding_fails_the_claim_and_keeps_the_record() {
    let b = desired_claim_status(None, &spec(), Some(1), &bound(), &at(1));
    let lost = ClaimOutcome::Lost {
        cause: "binding cb-1 no longer exists".into(),
    };
    let s = desired_claim_status(Some(&b), &spec(), Some(1), &lost, &at(2));
    assert_eq!(s.phase, Some(ClaimPhase::Failed));
    assert_eq!(
        (s.credentials_binding_name.as_deref(), s.decision),
        (Some("cb-1"), Some(Decision::Claimed))
    );
    for t in [types::READY, types::BOUND] {
        assert_eq!(
            sr(&s.conditions, t),
            is("False", reasons::BINDING_LOST),
            "{t}"
        );
    }
    assert_eq!(
        sr(&s.conditions, types::STALLED),
        is("True", reasons::BINDING_LOST)
    );
    assert!(
        cond(&s.conditions, types::READY)
            .unwrap()
            .message
            .contains("no longer exists")
    );
    // The record stays: a lost claim is never rebound.
    assert_eq!(
        recorded_binding(&s).map(|r| (r.binding, r.lost)),
        Some(("cb-1".into(), true))
    );
}

#[test]
fn one_definition_of_bound_whatever_else_the_status_lacks() {
    // A Bound status missing one field counted as bound in the index but not
    // in the reconcile (which requeued it every 200 ms forever), and a Failed one missing them
    // was rebound. Name and phase make the record; nothing else is required.
    let sparse = |phase| AccountClaimStatus {
        phase: Some(phase),
        credentials_binding_name: Some("cb-1".into()),
        ..Default::default()
    };
    let r = recorded_binding(&sparse(ClaimPhase::Bound)).unwrap();
    assert_eq!(
        (r.binding.as_str(), r.namespace, r.lost),
        ("cb-1", None, false)
    );
    assert!(recorded_binding(&sparse(ClaimPhase::Failed)).unwrap().lost);
    assert_eq!(recorded_binding(&sparse(ClaimPhase::Pending)), None);
    // Kept as it is: Bound again, the missing namespace filled in, nothing else invented.
    let kept = ClaimOutcome::Kept {
        namespace: "garden-kyma".into(),
    };
    let s = desired_claim_status(
        Some(&sparse(ClaimPhase::Failed)),
        &spec(),
        Some(1),
        &kept,
        &at(2),
    );
    assert_eq!(s.phase, Some(ClaimPhase::Bound));
    assert_eq!(s.binding_namespace.as_deref(), Some("garden-kyma"));
    assert_eq!((s.hyperscaler_type, s.decision), (None, None));
    assert_eq!(sr(&s.conditions, types::READY), is("True", reasons::BOUND));
    // A complete Bound status is not rewritten.
    let full = desired_claim_status(None, &spec(), Some(1), &bound(), &at(1));
    let again = desired_claim_status(Some(&full), &spec(), Some(1), &kept, &at(9));
    assert!(!claim_status_changed(Some(&full), &again));
}

#[test]
fn recomputing_the_same_claim_status_later_is_not_a_change() {
    let a = desired_claim_status(
        None,
        &spec(),
        Some(1),
        &pending(PendingReason::PoolExhausted),
        &at(1),
    );
    let b = desired_claim_status(
        Some(&a),
        &spec(),
        Some(1),
        &pending(PendingReason::PoolExhausted),
        &at(50),
    );
    assert!(!claim_status_changed(Some(&a), &b));
    assert!(claim_status_changed(None, &b));
    let c = desired_claim_status(
        Some(&a),
        &spec(),
        Some(2),
        &pending(PendingReason::PoolExhausted),
        &at(50),
    );
    assert!(claim_status_changed(Some(&a), &c));
    let d = desired_claim_status(Some(&a), &spec(), Some(1), &bound(), &at(50));
    assert!(claim_status_changed(Some(&a), &d));
}

#[test]
fn a_forbidden_claim_write_stalls_the_claim_with_the_message() {
    let cause =
        "cannot claim binding garden-kyma/cb-1: the garden refused the write: no".to_string();
    let outcome = ClaimOutcome::Pending {
        reason: PendingReason::Forbidden,
        cause,
        matched: Some((rule1(), aws())),
    };
    let s = desired_claim_status(None, &spec(), Some(1), &outcome, &at(1));
    assert_eq!(s.phase, Some(ClaimPhase::Pending));
    assert_eq!(
        sr(&s.conditions, types::READY),
        is("False", reasons::FORBIDDEN)
    );
    assert_eq!(
        sr(&s.conditions, types::STALLED),
        is("True", reasons::FORBIDDEN)
    );
    assert_eq!(sr(&s.conditions, types::RECONCILING), None);
    assert!(
        cond(&s.conditions, types::READY)
            .unwrap()
            .message
            .contains("garden-kyma/cb-1")
    );
}

#[test]
fn a_blocked_release_keeps_the_binding_record_and_says_why() {
    let b = desired_claim_status(None, &spec(), Some(1), &bound(), &at(1));
    let blocked = ClaimOutcome::ReleaseBlocked {
        reason: reasons::FORBIDDEN,
        cause: "cannot release binding garden-kyma/cb-1: the garden refused the write".into(),
    };
    let s = desired_claim_status(Some(&b), &spec(), Some(1), &blocked, &at(2));
    assert_eq!(s.phase, Some(ClaimPhase::Bound));
    assert_eq!(s.credentials_binding_name.as_deref(), Some("cb-1"));
    assert_eq!(
        sr(&s.conditions, types::RELEASED),
        is("False", reasons::FORBIDDEN)
    );
    assert_eq!(
        sr(&s.conditions, types::STALLED),
        is("True", reasons::FORBIDDEN)
    );
    assert_eq!(sr(&s.conditions, types::READY), is("True", reasons::BOUND));
    assert!(
        recorded_binding(&s).is_some_and(|r| !r.lost),
        "still bound until released"
    );
}

#[test]
fn a_fallback_binding_records_its_preference() {
    let ClaimOutcome::Bound(b) = bound() else {
        unreachable!()
    };
    let fallback = ClaimOutcome::Bound(BoundTo {
        preference: Some(2),
        ..b
    });
    let s = desired_claim_status(None, &spec(), Some(1), &fallback, &at(1));
    assert_eq!(s.preference, Some(2));
    let m = &cond(&s.conditions, types::READY).unwrap().message;
    assert!(m.contains("; fallback preference 2;"), "{m}");
    assert_eq!(recorded_binding(&s).map(|r| r.binding), Some("cb-1".into()));
    // The primary says nothing about fallbacks.
    let s = desired_claim_status(None, &spec(), Some(1), &bound(), &at(1));
    let m = &cond(&s.conditions, types::READY).unwrap().message;
    assert!(!m.contains("fallback"), "{m}");
}

#[test]
fn a_denied_claim_fails_with_the_entry_and_the_message_and_stays_denied() {
    let pending = desired_claim_status(
        None,
        &spec(),
        Some(1),
        &pending(PendingReason::PoolExhausted),
        &at(1),
    );
    let denied = ClaimOutcome::Denied {
        cause: "rule 3 `aws(PR=cf-eu11) deny \"frozen\"` denies plan `aws` ...: frozen".into(),
        matched: MatchedRule {
            index: 3,
            entry: "aws(PR=cf-eu11) deny \"frozen\"".into(),
        },
    };
    let s = desired_claim_status(Some(&pending), &spec(), Some(1), &denied, &at(2));
    assert_eq!(s.phase, Some(ClaimPhase::Failed));
    assert_eq!(s.matched_rule.as_ref().map(|m| m.index), Some(3));
    assert_eq!(s.credentials_binding_name, None);
    for t in [types::READY, types::BOUND] {
        assert_eq!(sr(&s.conditions, t), is("False", reasons::DENIED));
    }
    assert_eq!(
        sr(&s.conditions, types::STALLED),
        is("True", reasons::DENIED)
    );
    assert_eq!(sr(&s.conditions, types::RECONCILING), None);
    let m = &cond(&s.conditions, types::READY).unwrap().message;
    assert!(m.ends_with("frozen (request: globalAccount=ga-1, plan=aws, platformRegion=cf-eu11, clusterRegion=eu-central-1, shootName=c-123)"), "{m}");
    assert!(is_denied(&s));
    assert!(!is_denied(&pending));
    // A denial is no binding: nothing to keep or verify.
    assert_eq!(recorded_binding(&s), None);
}

#[test]
fn a_pin_that_cannot_serve_is_retried() {
    assert!(!PendingReason::PinnedBindingUnavailable.is_terminal());
    let s = desired_claim_status(
        None,
        &spec(),
        Some(1),
        &pending(PendingReason::PinnedBindingUnavailable),
        &at(1),
    );
    assert_eq!(
        sr(&s.conditions, types::RECONCILING),
        is("True", reasons::PINNED_BINDING_UNAVAILABLE)
    );
}

/// A claim as the operator leaves it after writing `outcome` (finalizer in place, generation 1).
fn claim_after(outcome: &ClaimOutcome) -> crate::api::AccountClaim {
    let mut c = crate::api::AccountClaim::new("c1", spec());
    c.metadata.generation = Some(1);
    c.metadata.finalizers = Some(vec![crate::api::CLAIM_FINALIZER.to_string()]);
    c.status = Some(desired_claim_status(
        None,
        &spec(),
        Some(1),
        outcome,
        &at(1),
    ));
    c
}

#[test]
fn only_a_recorded_binding_or_a_denial_that_answers_the_generation_is_settled() {
    let settled = claim_after(&bound());
    assert!(is_settled(&settled));
    let denied = ClaimOutcome::Denied {
        cause: "no trial accounts here".into(),
        matched: rule1(),
    };
    assert!(is_settled(&claim_after(&denied)));
    let lost = ClaimOutcome::Lost {
        cause: "binding cb-1 is gone".into(),
    };
    let mut failed = settled.clone();
    failed.status = Some(desired_claim_status(
        settled.status.as_ref(),
        &spec(),
        Some(1),
        &lost,
        &at(2),
    ));
    assert!(is_settled(&failed), "a lost binding stays recorded");

    for reason in [PendingReason::PoolExhausted, PendingReason::NoMatchingRule] {
        assert!(!is_settled(&claim_after(&pending(reason))), "{reason:?}");
    }
    let mut fresh = settled.clone();
    fresh.status = None;
    assert!(!is_settled(&fresh), "no status yet");
    let mut unfinalized = settled.clone();
    unfinalized.metadata.finalizers = Some(vec!["other".into()]);
    assert!(
        !is_settled(&unfinalized),
        "the release finalizer is missing"
    );
    let mut deleting = settled.clone();
    deleting.metadata.deletion_timestamp = Some(at(3));
    assert!(!is_settled(&deleting), "being deleted");
    let mut changed = settled.clone();
    changed.metadata.generation = Some(2);
    assert!(
        !is_settled(&changed),
        "the status answers an older generation"
    );
    let mut old_writer = settled;
    if let Some(s) = old_writer.status.as_mut() {
        s.binding_namespace = None;
    }
    assert!(
        !is_settled(&old_writer),
        "a record without its namespace is completed by a reconcile"
    );
}

#[test]
fn a_release_waiting_for_the_same_cause_is_announced_once() {
    // Every retry of a release waiting for a valid HapConfig wrote an Event.
    let b = desired_claim_status(None, &spec(), Some(1), &bound(), &at(1));
    assert!(!release_blocked_for(Some(&b), reasons::CONFIG_MISSING));
    assert!(!release_blocked_for(None, reasons::CONFIG_MISSING));
    let waiting = ClaimOutcome::ReleaseBlocked {
        reason: reasons::CONFIG_MISSING,
        cause: "the release waits for a valid HapConfig".into(),
    };
    let s = desired_claim_status(Some(&b), &spec(), Some(1), &waiting, &at(2));
    assert!(release_blocked_for(Some(&s), reasons::CONFIG_MISSING));
    // Another cause is news.
    assert!(!release_blocked_for(Some(&s), reasons::CONFIG_INVALID));
}
