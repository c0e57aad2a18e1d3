//! The exact API calls that settle a claim write recorded in a claim's status
//! (`controller::claim_write`), against a scripted API server (`hap_testkit`): a write that could
//! still land is fenced before the claim goes or writes another binding; one that landed is
//! released as the claim's; one that can no longer land lets the claim go at once.

use std::time::Duration;

use kube::runtime::controller::Action;
use serde_json::json;

use super::fixtures::*;
use crate::labels::CLAIMED_BY;
use hap_testkit::Call;

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
    // The index saw the fence's version: the write can never land, and nothing is read again.
    h.observe_binding(binding("b1", "6", &[]));
    h.api.expect([remove_finalizer(&c, 0)]);
    let action = h.reconcile(&c).await.expect("let go");
    assert_eq!(action, Action::await_change());
    let _ = free;
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
        binding("b2", "3", &[("dirty", "true")]),
    ];
    let h = Harness::new(hap_config(aws_spec()), &[&c], &bindings);
    h.api.expect([
        Call::get(&binding_path("b2")).answer(200, binding_now("b2", "3", json!({}))),
        fence_cas("b2", "3", "c1").answer_rv("4"),
    ]);
    let action = h.reconcile(&c).await.expect("fenced");
    assert_eq!(action, Action::requeue(Duration::from_millis(300)));
}

/// The claim's status write, whatever it says (its body includes an empty status).
fn any_status(c: &crate::api::AccountClaim) -> Call {
    claim_status(c, json!({}))
}

/// The last status body written, if any.
fn last_status(h: &Harness) -> Option<serde_json::Value> {
    let received = h.api.received();
    let write = received.iter().rev().find(|r| r.path.ends_with("/status"));
    write.and_then(|r| r.body.clone())
}

/// A claim write the garden refuses outright (403) never landed and never can: the status
/// written next carries no record of it, so no later settle reads or fences that binding (the
/// fence would be refused too, and the claim could never go).
#[tokio::test]
async fn a_claim_write_the_garden_refuses_leaves_no_record_behind() {
    let c = finalized(claim("c1"));
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    let r = recorded(&c, "b1", "5", "90");
    h.api.expect([
        record_claim_write(&c, "b1", "5").answer_rv("90"),
        claim_cas("b1", "5", &c).fail(403, "Forbidden"),
        event(TENANTS, "c1", "Warning", "Forbidden"),
        any_status(&r).answer_rv("91"),
    ]);
    h.reconcile(&c).await.expect("pending, forbidden");
    let status = last_status(&h).expect("a status");
    assert_eq!(status["status"]["phase"], "Pending", "{status}");
    assert!(status["status"].get("claimWrite").is_none(), "{status}");
}

/// The fence itself refused (403): the claim keeps its finalizer and says why, and the binding
/// is paused like any refused write (no fence again before its time).
#[tokio::test]
async fn a_refused_fence_keeps_the_claim_and_says_why() {
    let c = going();
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    h.api.expect([
        Call::get(&binding_path("b1")).answer(200, binding_now("b1", "5", json!({}))),
        fence_cas("b1", "5", "c1").fail(403, "Forbidden"),
        event(TENANTS, "c1", "Warning", "Forbidden"),
        any_status(&c).answer_rv("12"),
    ]);
    let action = h.reconcile(&c).await.expect("blocked");
    assert_ne!(action, Action::await_change());
    let status = last_status(&h).expect("a status");
    let message = status["status"]["conditions"].to_string();
    assert!(message.contains("fence a claim write on"), "{message}");
    h.api.done();
    // Paused: the next look neither reads nor writes b1 (and the status says it already).
    let mut c = c;
    c.status = Some(serde_json::from_value(status["status"].clone()).expect("a claim status"));
    c.metadata.resource_version = Some("12".into());
    h.observe(&c);
    h.api.expect([]);
    h.reconcile(&c).await.expect("still blocked");
    h.api.done();
}

/// While the config is paused a claim whose status records a claim write is not let go, and
/// nothing is read or written on the binding: the write may have landed (its release would
/// write the binding) or may still land (only a fence, a write, settles it).
#[tokio::test]
async fn a_claim_going_with_a_recorded_claim_write_waits_while_paused() {
    let c = going();
    let spec = crate::api::HapConfigSpec {
        paused: Some(true),
        ..aws_spec()
    };
    let h = Harness::new(hap_config(spec), &[&c], &[claimed_binding("b1", "6", "c1")]);
    h.api.expect([
        event(TENANTS, "c1", "Normal", "ReleaseWaiting"),
        any_status(&c).answer_rv("12"),
    ]);
    let action = h.reconcile(&c).await.expect("waits");
    assert_ne!(action, Action::await_change());
    let status = last_status(&h).expect("a status");
    assert!(status.to_string().contains("paused"), "{status}");
}

/// A record the webhook's `admitted-at` stamp raced is written again on the stamped version,
/// once, as a status write is (a conflict would otherwise send the claim back to decide).
#[tokio::test]
async fn a_record_that_meets_only_a_stamp_is_written_again_on_the_new_version() {
    let c = finalized(claim("c1"));
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    let mut stamped = serde_json::to_value(&c).unwrap();
    stamped["metadata"]["resourceVersion"] = json!("13");
    stamped["metadata"]["annotations"] =
        json!({"accountpool.io/admitted-at": "2026-11-27T01:00:00Z"});
    let mut again = c.clone();
    again.metadata.resource_version = Some("13".into());
    h.api.expect([
        record_claim_write(&c, "b1", "5").fail(409, "Conflict"),
        get_claim(&c).answer(200, stamped),
        record_claim_write(&again, "b1", "5").answer_rv("14"),
        claim_cas("b1", "5", &c).answer_rv("6"),
        claim_status(&recorded(&c, "b1", "5", "14"), json!({"phase": "Bound"})).answer_rv("15"),
        event(TENANTS, "c1", "Normal", "Claimed"),
    ]);
    let action = h.reconcile(&c).await.expect("bound");
    assert_eq!(action, Action::await_change());
}

/// Settling an earlier record fails (the read gets no answer): the new claim write is never
/// sent, so it ends in the ledger; the claim, deleted then, sends nothing for it (it had no
/// record) and goes once the earlier write proves void.
#[tokio::test]
async fn a_claim_write_never_sent_is_never_sent_by_the_release() {
    let c = recorded(&finalized(claim("c1")), "b2", "3", "11");
    let bindings = [
        binding("b1", "5", &[]),
        binding("b2", "3", &[("dirty", "true")]),
    ];
    let h = Harness::new(hap_config(aws_spec()), &[&c], &bindings);
    h.api
        .expect([Call::get(&binding_path("b2")).fail(500, "InternalError")]);
    h.reconcile(&c).await.expect_err("the read failed");
    h.api.done();
    let c = deleting(c);
    h.observe(&c);
    h.api.expect([
        Call::get(&binding_path("b2")).answer(200, binding_now("b2", "4", json!({}))),
        remove_finalizer(&c, 0),
    ]);
    let action = h.reconcile(&c).await.expect("let go");
    assert_eq!(action, Action::await_change());
}

/// A refused claim write drops the record even when the status says the same otherwise (a
/// second 403 after the pause, the same cause): compared with the status that holds the record,
/// the write is made. The ordinary status write would be skipped as unchanged.
#[tokio::test]
async fn a_repeated_refusal_still_drops_the_record() {
    use crate::status::{ClaimOutcome, PendingReason, desired_claim_status};
    let c = finalized(claim("c1"));
    let outcome = ClaimOutcome::Pending {
        reason: PendingReason::Forbidden,
        cause: "cannot claim binding garden/b1: forbidden".into(),
        matched: None,
    };
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
    let mut c = c;
    c.status = Some(desired_claim_status(
        None,
        &c.spec,
        c.metadata.generation,
        &outcome,
        &now,
    ));
    let c = recorded(&c, "b1", "5", "20");
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    h.api.expect([]);
    super::outcome::write_outcome(&c, &h.ctx, &outcome)
        .await
        .expect("nothing to write");
    h.api.done();
    h.api.expect([any_status(&c).answer_rv("21")]);
    super::outcome::write_outcome_dropping_record(&c, &h.ctx, &outcome)
        .await
        .expect("written");
    let status = last_status(&h).expect("a status");
    assert!(status["status"].get("claimWrite").is_none(), "{status}");
}

/// The recorded binding cannot be read (403): the claim says so and looks again later; it is
/// not let go, and nothing is written on the binding.
#[tokio::test]
async fn a_record_whose_binding_cannot_be_read_keeps_the_claim_and_says_why() {
    let c = going();
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    h.api.expect([
        Call::get(&binding_path("b1")).fail(403, "Forbidden"),
        any_status(&c).answer_rv("12"),
    ]);
    let action = h.reconcile(&c).await.expect("blocked");
    assert_ne!(action, Action::await_change());
    let status = last_status(&h).expect("a status").to_string();
    assert!(status.contains("cannot read binding garden/b1"), "{status}");
}

/// While paused, a claim whose recorded write can no longer land (the index saw a later version
/// of the binding) is let go as any claim that never got a binding: nothing is read or written.
#[tokio::test]
async fn a_claim_with_a_void_record_goes_even_while_paused() {
    let c = going();
    let spec = crate::api::HapConfigSpec {
        paused: Some(true),
        ..aws_spec()
    };
    let h = Harness::new(hap_config(spec), &[&c], &[binding("b1", "6", &[])]);
    h.api.expect([remove_finalizer(&c, 0)]);
    let action = h.reconcile(&c).await.expect("let go");
    assert_eq!(action, Action::await_change());
}
