//! The exact API calls that settle a claim write recorded in a claim's status
//! (`controller::claim_write`), against a scripted API server (`k8s::mock`): a write that could
//! still land is fenced before the claim goes or writes another binding; one that landed is
//! released as the claim's; one that can no longer land lets the claim go at once.

use std::time::Duration;

use kube::runtime::controller::Action;
use serde_json::json;

use super::fixtures::*;
use crate::k8s::mock::Call;
use crate::labels::CLAIMED_BY;

/// A claim being deleted whose status records a claim write of b1 at 5 that no status named:
/// a leader decided it, recorded it, and paused with the write in flight.
fn going() -> crate::api::AccountClaim {
    deleting(recorded(&finalized(claim("c1")), "b1", "5", "11"))
}

/// The binding still has the write's base version: the write may land yet. The release moves
/// the version first (the API server then refuses the write whenever it comes) and keeps the
/// finalizer; once the version moved, the claim goes with nothing else written.
#[tokio::test]
async fn a_claim_write_that_could_still_land_is_fenced_before_the_claim_goes() {
    let c = going();
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    let free = json!({"hyperscalerType": "aws"});
    h.api.expect([
        Call::get(&binding_path("b1")).answer(200, binding_now("b1", "5", free.clone())),
        fence_cas("b1", "5", "c1").answer_rv("6"),
    ]);
    let action = h.reconcile(&c).await.expect("fenced");
    assert_eq!(action, Action::requeue(Duration::from_millis(300)));
    h.api.done();
    h.observe_binding(binding("b1", "6", &[]));
    h.api.expect([
        Call::get(&binding_path("b1")).answer(200, binding_now("b1", "6", free)),
        remove_finalizer(&c, 0),
    ]);
    let action = h.reconcile(&c).await.expect("let go");
    assert_eq!(action, Action::await_change());
}

/// The write landed, and the index has not shown it yet: the claim waits for it (letting the
/// claim go would leave the account labelled for a claim that no longer exists). Once the index
/// shows it, it is the claim's binding that no status named and nothing used: released clean.
#[tokio::test]
async fn a_claim_write_that_landed_is_released_as_the_claims_own() {
    let c = going();
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    let landed = json!({"hyperscalerType": "aws", "tenantName": GA, CLAIMED_BY: "uid-c1"});
    h.api
        .expect([Call::get(&binding_path("b1")).answer(200, binding_now("b1", "6", landed))]);
    let action = h.reconcile(&c).await.expect("waits for the index");
    assert_eq!(action, Action::requeue(Duration::from_millis(300)));
    h.api.done();
    h.observe_binding(claimed_binding("b1", "6", "c1"));
    h.api.expect([
        binding_cas("b1", "6", json!({"tenantName": null, CLAIMED_BY: null})).answer_rv("7"),
        event(TENANTS, "c1", "Normal", "ReleasedClean"),
        remove_finalizer(&c, 0),
    ]);
    let action = h.reconcile(&c).await.expect("released");
    assert_eq!(action, Action::await_change());
}

/// A claim that decides again after a leader change, and whose status records a claim write of
/// another binding that could still land, fences that one before it records and sends its own:
/// else the old write could land after the claim went, where no release would look for it.
#[tokio::test]
async fn a_new_claim_write_fences_an_earlier_one_that_could_still_land() {
    let c = recorded(&finalized(claim("c1")), "b2", "3", "11");
    let bindings = [
        binding("b1", "5", &[]),
        binding("b2", "4", &[("dirty", "true")]),
    ];
    let h = Harness::new(hap_config(aws_spec()), &[&c], &bindings);
    h.api.expect([
        Call::get(&binding_path("b2")).answer(200, binding_now("b2", "3", json!({}))),
        fence_cas("b2", "3", "c1").answer_rv("4"),
    ]);
    let action = h.reconcile(&c).await.expect("fenced");
    assert_eq!(action, Action::requeue(Duration::from_millis(300)));
}
