//! The exact API calls of a deleting claim's release, against a scripted API server
//! (`hap_testkit`): clean when the claim alone held the binding and no cluster used it, dirty
//! otherwise, and the finalizer removed last.

use kube::runtime::controller::Action;
use serde_json::json;

use super::fixtures::*;
use crate::labels::CLAIMED_BY;
use crate::pools::lifecycle::{RELEASED_AT, RELEASED_BY};
use hap_testkit::Call;

/// The live read of Runtime `kcp-system/<name>`, answered "not found": it never existed.
fn runtime_gone(name: &str) -> Call {
    let path = format!(
        "/apis/infrastructuremanager.kyma-project.io/v1/namespaces/kcp-system/runtimes/{name}"
    );
    Call::get(&path).fail(404, "NotFound")
}

/// The dirty mark of `name` at `rv`, with the release recorded for the cleanup job.
fn mark_dirty(name: &str, rv: &str) -> Call {
    let patch = json!({"metadata": {
        "resourceVersion": rv,
        "labels": {"dirty": "true"},
        "annotations": {RELEASED_BY: GA},
    }});
    binding_cas(name, rv, json!({})).body_includes(patch)
}

#[tokio::test]
async fn a_source_claim_that_alone_held_an_unused_binding_releases_it_clean() {
    let c = deleting(from_source(bound(finalized(claim("c1")), "b1"), "rt-1"));
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&c],
        &[claimed_binding("b1", "7", "c1")],
    );
    h.api.expect([
        runtime_gone("rt-1"),
        binding_cas("b1", "7", json!({"tenantName": null, CLAIMED_BY: null})).answer_rv("8"),
        event(TENANTS, "c1", "Normal", "ReleasedClean"),
        remove_finalizer(&c, 0),
    ]);
    let action = h.reconcile(&c).await.expect("released");
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn a_source_claim_on_a_binding_another_claim_claimed_marks_it_dirty() {
    // Claim `first` claimed b1, c1 was bound to it later (the claimed-by names `first`): a
    // cluster of `first` may have run in the account.
    let c = deleting(from_source(bound(finalized(claim("c1")), "b1"), "rt-1"));
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&c],
        &[claimed_binding("b1", "7", "first")],
    );
    h.api.expect([
        runtime_gone("rt-1"),
        mark_dirty("b1", "7").answer_rv("8"),
        event(TENANTS, "c1", "Normal", "Released"),
        remove_finalizer(&c, 0),
    ]);
    let action = h.reconcile(&c).await.expect("released");
    assert_eq!(action, Action::await_change());
    let sent = h.api.received();
    let at = sent[1].body.as_ref().and_then(|b| {
        b.pointer(&format!(
            "/metadata/annotations/{}",
            RELEASED_AT.replace('/', "~1")
        ))
    });
    assert!(
        at.is_some_and(|t| t.is_string()),
        "the release time: {:?}",
        sent[1].body
    );
}

#[tokio::test]
async fn a_user_claim_marks_its_binding_dirty_without_reading_any_object() {
    let c = deleting(bound(finalized(claim("c1")), "b1"));
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&c],
        &[claimed_binding("b1", "7", "c1")],
    );
    h.api.expect([
        mark_dirty("b1", "7").answer_rv("8"),
        event(TENANTS, "c1", "Normal", "Released"),
        remove_finalizer(&c, 0),
    ]);
    let action = h.reconcile(&c).await.expect("released");
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn a_lost_release_cas_keeps_the_finalizer_and_tells_nobody() {
    let c = deleting(bound(finalized(claim("c1")), "b1"));
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&c],
        &[claimed_binding("b1", "7", "c1")],
    );
    h.api.expect([mark_dirty("b1", "7").fail(409, "Conflict")]);
    let err = h.reconcile(&c).await.expect_err("the binding moved");
    assert!(err.is_conflict(), "{err:?}");
}

#[tokio::test]
async fn a_binding_another_claims_cluster_uses_is_left_alone_and_only_the_finalizer_goes() {
    let c = deleting(bound(finalized(claim("c1")), "b1"));
    let mut other = bound(finalized(claim("other")), "b1");
    other.spec.shoot_name = Some("shoot-other".into());
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&c, &other],
        &[claimed_binding("b1", "7", "c1")],
    );
    h.api.expect([remove_finalizer(&c, 0)]);
    let action = h.reconcile(&c).await.expect("released");
    assert_eq!(action, Action::await_change());
}

/// A claim recorded on the binding whose status does not show yet (a reuse or fill whose status
/// write may still be in flight, perhaps from a previous leader): the release writes nothing and
/// keeps the finalizer, and goes on once that claim is gone.
#[tokio::test]
async fn a_release_waits_while_the_binding_records_a_claim_still_pending() {
    let c = deleting(bound(finalized(claim("c1")), "b1"));
    let pending = finalized(claim("next"));
    let mut b1 = binding("b1", "7", &[("tenantName", GA)]);
    b1.annotations
        .insert(crate::labels::FILLING.into(), "uid-next".into());
    let h = Harness::new(hap_config(aws_spec()), &[&c, &pending], &[b1]);
    // The wait shows on the claim, naming the claim it waits for, and its retries back off:
    // a recorded claim that stays pending holds the release for as long.
    h.api.expect([
        event(TENANTS, "c1", "Normal", "ReleaseWaiting"),
        claim_status(&c, json!({})).answer_rv("12"),
    ]);
    let action = h.reconcile(&c).await.expect("waits");
    let first =
        (200..=300).any(|ms| action == Action::requeue(std::time::Duration::from_millis(ms)));
    assert!(first, "{action:?}");
    let received = h.api.received();
    let written = received
        .iter()
        .rev()
        .find(|r| r.path.ends_with("/status"))
        .and_then(|r| r.body.clone())
        .expect("a status write");
    let released = written["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Released"))
        .expect("a Released condition")
        .clone();
    assert_eq!(released["status"], "False", "{released}");
    assert_eq!(released["reason"], "RecordedUseWaiting", "{released}");
    let message = released["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("b1") && message.contains("next"),
        "{message}"
    );
    h.api.done();

    // The recorded claim is deleted: no status of it can land Bound any more.
    let mut gone = deleting(pending);
    gone.metadata.resource_version = Some("20".into());
    h.observe(&gone);
    h.api.expect([
        mark_dirty("b1", "7").answer_rv("8"),
        event(TENANTS, "c1", "Normal", "Released"),
        remove_finalizer(&c, 0),
    ]);
    let action = h.reconcile(&c).await.expect("released");
    assert_eq!(action, Action::await_change());
}

/// A stray of the claim (a paused leader's late claim write labelled b2 for it after it was
/// bound to b1) goes back before the claim does; while it cannot, the release waits: once the
/// claim is gone, nothing would recognise b2 as a stray any more.
#[tokio::test]
async fn a_release_gives_back_the_claims_stray_first_and_waits_while_it_cannot() {
    let c = deleting(bound(finalized(claim("c1")), "b1"));
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&c],
        &[
            binding("b1", "7", &[("tenantName", GA)]),
            claimed_binding("b2", "9", "c1"),
        ],
    );
    let give_back = || binding_cas("b2", "9", json!({"tenantName": null, CLAIMED_BY: null}));
    h.api.expect([give_back().fail(409, "Conflict")]);
    let action = h.reconcile(&c).await.expect("waits");
    assert_eq!(action, Action::requeue(std::time::Duration::from_secs(1)));
    h.api.done();

    h.api.expect([
        give_back().answer_rv("10"),
        event(TENANTS, "c1", "Normal", "StrayReleased"),
        mark_dirty("b1", "7").answer_rv("8"),
        event(TENANTS, "c1", "Normal", "Released"),
        remove_finalizer(&c, 0),
    ]);
    let action = h.reconcile(&c).await.expect("released");
    assert_eq!(action, Action::await_change());
}
