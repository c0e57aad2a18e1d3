//! The exact API calls of claim reconciles, against a scripted API server (`k8s::mock`): a new
//! claim bound, a lost compare-and-swap, a reuse of a binding another claim claimed, a
//! multi-account fill, and a stray binding given back.

use std::time::Duration;

use kube::runtime::controller::Action;
use serde_json::json;

use super::fixtures::*;
use crate::labels::CLAIMED_BY;

/// What the status of a claim Bound to `binding` says, in the fields a reader relies on.
fn bound_status(binding: &str, decision: &str) -> serde_json::Value {
    json!({
        "phase": "Bound",
        "credentialsBindingName": binding,
        "bindingNamespace": GARDEN,
        "hyperscalerType": "aws",
        "decision": decision,
    })
}

#[tokio::test]
async fn a_new_claim_gets_its_finalizer_then_the_claim_cas_its_status_and_an_event() {
    let c = claim("c1");
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);

    h.api.expect([add_finalizer(&c).answer_rv("11")]);
    let action = h.reconcile(&c).await.expect("the finalizer is added");
    assert_eq!(action, Action::await_change(), "the update brings it back");

    let c = finalized(c);
    h.observe(&c);
    h.api.expect([
        claim_cas("b1", "5", &c).answer_rv("6"),
        claim_status(&c, bound_status("b1", "Claimed")).answer_rv("12"),
        event(TENANTS, "c1", "Normal", "Claimed"),
    ]);
    let action = h.reconcile(&c).await.expect("bound");
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn a_lost_claim_cas_writes_no_status_and_decides_again() {
    let c = finalized(claim("c1"));
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    h.api
        .expect([claim_cas("b1", "5", &c).fail(409, "Conflict")]);
    let err = h.reconcile(&c).await.expect_err("the binding moved");
    assert!(err.is_conflict(), "{err:?}");
    // The controller's error policy requeues a conflict at once, without growing backoff.
    let action =
        super::claim::error_policy(std::sync::Arc::new(c.clone().into()), &err, h.ctx.clone());
    let soon = (20..200).any(|ms| action == Action::requeue(Duration::from_millis(ms)));
    assert!(soon, "{action:?}");
}

#[tokio::test]
async fn a_reuse_of_a_binding_another_claim_claimed_removes_its_claimed_by_before_the_status() {
    // The tenant holds b1 through claim `first`; claim `second` of the same tenant reuses it.
    let first = bound(finalized(claim("first")), "b1");
    let second = finalized(claim("second"));
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&first, &second],
        &[claimed_binding("b1", "7", "first")],
    );
    h.api.expect([
        binding_cas("b1", "7", json!({CLAIMED_BY: null})).answer_rv("8"),
        claim_status(&second, bound_status("b1", "Reused")).answer_rv("12"),
        event(TENANTS, "second", "Normal", "Reused"),
    ]);
    let action = h.reconcile(&second).await.expect("bound by reuse");
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn a_lost_claimed_by_removal_writes_no_status_and_the_next_pass_decides_on_the_new_binding() {
    let first = bound(finalized(claim("first")), "b1");
    let second = finalized(claim("second"));
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&first, &second],
        &[claimed_binding("b1", "7", "first")],
    );
    h.api
        .expect([binding_cas("b1", "7", json!({CLAIMED_BY: null})).fail(409, "Conflict")]);
    let err = h.reconcile(&second).await.expect_err("the binding moved");
    assert!(err.is_conflict(), "{err:?}");

    // Someone else removed the record meanwhile: nothing left to remove, the claim is bound.
    h.observe_binding(binding("b1", "8", &[("tenantName", GA)]));
    h.api.expect([
        claim_status(&second, bound_status("b1", "Reused")).answer_rv("12"),
        event(TENANTS, "second", "Normal", "Reused"),
    ]);
    let action = h.reconcile(&second).await.expect("bound by reuse");
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn a_fill_records_its_claim_on_the_binding_before_the_status() {
    // GA may hold several accounts, two clusters each; `first` is on b1, `second` fills it.
    let first = bound(finalized(claim("first")), "b1");
    let second = finalized(claim("second"));
    let mut spec = aws_spec();
    spec.multi_hyperscaler_account = Some(crate::api::MultiHyperscalerAccount {
        allowed_global_accounts: vec!["*".into()],
        limits: [("aws".to_string(), 2)].into(),
    });
    let h = Harness::new(
        hap_config(spec),
        &[&first, &second],
        &[claimed_binding("b1", "7", "first"), binding("b2", "3", &[])],
    );
    h.api.expect([
        fill_cas("b1", "7", "uid-second").answer_rv("8"),
        claim_status(&second, bound_status("b1", "FilledMostPopulated")).answer_rv("12"),
        event(TENANTS, "second", "Normal", "FilledMostPopulated"),
    ]);
    let action = h.reconcile(&second).await.expect("bound by a fill");
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn a_bound_claim_gives_back_a_stray_binding_clean() {
    // A paused leader's claim write labelled b2 for `first` after the next leader bound it to
    // b1: nothing uses b2, so tenant and claimed-by go with the CAS, and nothing else is written.
    let first = bound(finalized(claim("first")), "b1");
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&first],
        &[
            binding("b1", "5", &[("tenantName", GA)]),
            claimed_binding("b2", "7", "first"),
        ],
    );
    h.api.expect([
        binding_cas("b2", "7", json!({"tenantName": null, CLAIMED_BY: null})).answer_rv("8"),
        event(TENANTS, "first", "Normal", "StrayReleased"),
    ]);
    h.reconcile(&first).await.expect("reconciled");
}

/// The webhook stamps a kept claim after each call it could not answer (`accountpool.io/admitted-at`,
/// an annotation): a status write of the leader conditioned on the version before the stamp met a
/// Conflict, and the claim went back to the end of its lane to be decided again — twice per
/// Shoot in the separate-garden chaos run. A claim that changed only in metadata the decision does
/// not read is written again on its new version, once, without deciding again.
#[tokio::test]
async fn a_status_write_that_meets_only_a_stamp_is_written_again_on_the_new_version() {
    let c = finalized(claim("c1"));
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    let mut stamped = serde_json::to_value(&c).unwrap();
    stamped["metadata"]["resourceVersion"] = json!("13");
    stamped["metadata"]["annotations"] =
        json!({"accountpool.io/admitted-at": "2026-11-27T01:00:00Z"});
    let mut again = c.clone();
    again.metadata.resource_version = Some("13".into());
    h.api.expect([
        claim_cas("b1", "5", &c).answer_rv("6"),
        claim_status(&c, bound_status("b1", "Claimed")).fail(409, "Conflict"),
        get_claim(&c).answer(200, stamped),
        claim_status(&again, bound_status("b1", "Claimed")).answer_rv("14"),
        event(TENANTS, "c1", "Normal", "Claimed"),
    ]);
    let action = h.reconcile(&c).await.expect("bound on the stamped version");
    assert_eq!(action, Action::await_change());
}

/// A claim whose spec, labels, finalizers or status changed is decided again, as before.
#[tokio::test]
async fn a_status_write_that_meets_another_change_is_decided_again() {
    let c = finalized(claim("c1"));
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    let mut changed = serde_json::to_value(&c).unwrap();
    changed["metadata"]["resourceVersion"] = json!("13");
    changed["metadata"]["generation"] = json!(2);
    h.api.expect([
        claim_cas("b1", "5", &c).answer_rv("6"),
        claim_status(&c, bound_status("b1", "Claimed")).fail(409, "Conflict"),
        get_claim(&c).answer(200, changed),
        // The binding is claimed either way, and said so.
        event(TENANTS, "c1", "Normal", "Claimed"),
    ]);
    let err = h.reconcile(&c).await.expect_err("decided again");
    assert!(err.is_conflict(), "{err:?}");
}

/// Every field the decision reads makes a changed claim one to decide again; annotations and
/// bookkeeping do not.
#[test]
fn only_annotations_and_bookkeeping_count_as_a_restamp() {
    use super::outcome::only_restamped;
    let read = finalized(claim("c1"));
    let same = |f: &dyn Fn(&mut crate::api::AccountClaim)| {
        let mut live = read.clone();
        f(&mut live);
        only_restamped(&read, &live)
    };
    assert!(same(&|c| {
        c.metadata.resource_version = Some("99".into());
        c.metadata.annotations =
            Some([("accountpool.io/admitted-at".to_string(), "t".to_string())].into());
    }));
    type Change<'a> = (&'a str, &'a dyn Fn(&mut crate::api::AccountClaim));
    let changes: [Change; 7] = [
        ("uid", &|c| c.metadata.uid = Some("other".into())),
        ("generation", &|c| c.metadata.generation = Some(2)),
        ("deletion", &|c| *c = deleting(c.clone())),
        ("finalizers", &|c| c.metadata.finalizers = None),
        ("labels", &|c| {
            c.metadata
                .labels
                .get_or_insert_default()
                .insert("accountpool.io/source-uid".into(), "u".into());
        }),
        ("spec", &|c| c.spec.plan = "other".into()),
        ("status", &|c| *c = bound(c.clone(), "b9")),
    ];
    for (what, change) in changes {
        assert!(!same(change), "a change of the {what} counted as a restamp");
    }
}
