//! The exact API calls of claim reconciles, against a scripted API server (`hap_testkit`): a new
//! claim bound, a lost compare-and-swap, a reuse of a binding another claim claimed, a
//! multi-account fill, a stray binding given back, a claim write given back because another
//! binding of its credential is another tenant's, an adoption and its refusals, and a claim
//! whose inventory cannot be read.

use std::time::Duration;

use kube::runtime::controller::Action;
use serde_json::json;

use super::fixtures::*;
use crate::api::conditions::{reasons, types};
use crate::api::{HapConfigSpec, TenantPolicy, TenantRule};
use crate::labels::CLAIMED_BY;
use hap_testkit::Call;

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
        record_claim_write(&c, "b1", "5").answer_rv("90"),
        claim_cas("b1", "5", &c).answer_rv("6"),
        claim_status(
            &recorded(&c, "b1", "5", "90"),
            bound_status("b1", "Claimed"),
        )
        .answer_rv("12"),
        event(TENANTS, "c1", "Normal", "Claimed"),
    ]);
    let action = h.reconcile(&c).await.expect("bound");
    assert_eq!(action, Action::await_change());
    // The claim time rides in the claim's compare-and-swap: the claim rate counts it.
    let sent = h.api.received();
    let key = crate::pools::lifecycle::CLAIMED_AT.replace('/', "~1");
    let at = sent
        .iter()
        .filter_map(|r| {
            r.body
                .as_ref()?
                .pointer(&format!("/metadata/annotations/{key}"))
        })
        .find_map(|v| v.as_str()?.parse::<jiff::Timestamp>().ok());
    assert!(at.is_some(), "the claim record in {sent:?}");
}

/// Another replica claimed the other binding of the credential for another tenant, and this
/// replica's cache has not seen it: after its own claim write the claim reads the other binding
/// from the API server, says why in its status, gives its binding back with a compare-and-swap
/// on the version it reads, tells, and decides again. No Bound status, no `Claimed` event.
#[tokio::test]
async fn a_claim_write_whose_other_binding_of_the_account_another_tenant_holds_goes_back() {
    let c = finalized(claim("c1"));
    let account = crate::pools::Account::of_secret(Some(GARDEN), None, "acct-1");
    let mut pooled = binding("b1", "5", &[]);
    pooled.account = account;
    // Gardener's unlabelled force-migrated binding on the same Secret: in no pool.
    let mut migrated = binding("force-migrated-b1", "7", &[]);
    migrated.labels = Default::default();
    migrated.account = account;
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[pooled, migrated]);
    let theirs = json!({"tenantName": "ga-other", CLAIMED_BY: "uid-x"});
    let mine = json!({"hyperscalerType": "aws", "tenantName": GA, CLAIMED_BY: "uid-c1"});
    h.api.expect([
        record_claim_write(&c, "b1", "5").answer_rv("91"),
        claim_cas("b1", "5", &c).answer_rv("6"),
        Call::get(&binding_path("force-migrated-b1"))
            .answer(200, binding_now("force-migrated-b1", "9", theirs)),
        claim_status(
            &recorded(&c, "b1", "5", "91"),
            unbound_status("Pending", reasons::PROGRESSING, true),
        )
        .answer_rv("12"),
        Call::get(&binding_path("b1")).answer(200, binding_now("b1", "6", mine)),
        binding_cas("b1", "6", json!({"tenantName": null, CLAIMED_BY: null})).answer_rv("7"),
        event(TENANTS, "c1", "Warning", "AccountContested"),
    ]);
    let action = h.reconcile(&c).await.expect("given back");
    assert_eq!(action, Action::requeue(Duration::from_secs(2)));
    let message = written_ready_message_any(&h);
    assert!(
        message.contains("force-migrated-b1") && message.contains("tenantName=ga-other"),
        "{message}"
    );
}

/// A binding of the aws pool on credential `acct-1`, and Gardener's unlabelled force-migrated
/// binding on the same Secret (in no pool) with `sibling_labels`.
fn on_one_account(
    mut pooled: crate::pools::BindingView,
    sibling_labels: &[(&str, &str)],
) -> [crate::pools::BindingView; 2] {
    let account = crate::pools::Account::of_secret(Some(GARDEN), None, "acct-1");
    pooled.account = account;
    let mut migrated = binding("force-migrated-b1", "7", &[]);
    migrated.labels = sibling_labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into();
    migrated.account = account;
    [pooled, migrated]
}

/// The tenant's binding carries another claim's claim write, not used since (a previous
/// leader's late write, perhaps), whose claim still decides, and the other binding of its
/// credential is another tenant's: a use by this claim would bind it unread. The claim reads
/// the other binding, writes nothing on either binding, and waits for the claim that wrote it
/// to give it back.
#[tokio::test]
async fn a_use_of_a_live_claims_unchecked_claim_write_on_a_contested_account_waits() {
    let c1 = finalized(claim("c1"));
    let c = finalized(claim("c2"));
    let bindings = on_one_account(claimed_binding("b1", "5", "c1"), &[]);
    let h = Harness::new(hap_config(aws_spec()), &[&c1, &c], &bindings);
    let theirs = json!({"tenantName": "ga-other", CLAIMED_BY: "uid-x"});
    h.api.expect([
        Call::get(&binding_path("force-migrated-b1"))
            .answer(200, binding_now("force-migrated-b1", "9", theirs)),
        claim_status(&c, unbound_status("Pending", reasons::PROGRESSING, true)).answer_rv("12"),
    ]);
    let action = h.reconcile(&c).await.expect("waits");
    assert_eq!(action, Action::requeue(Duration::from_secs(10)));
    let message = written_ready_message(&h);
    assert!(
        message.contains("until that claim gives it back") && message.contains("ga-other"),
        "{message}"
    );
}

/// The claim that made the claim write is gone (deleted after its write committed, its fresh
/// read never answered): nobody else would ever give the write back, and no status of it can
/// land any more. The claim that would use the binding gives it back itself, with a
/// compare-and-swap that holds only while claimed-by still names the gone claim, and decides
/// again: it never waits for a claim that does not exist.
#[tokio::test]
async fn a_claim_write_of_a_gone_claim_on_a_contested_account_is_given_back_by_the_next_claim() {
    let c = finalized(claim("c2"));
    let bindings = on_one_account(claimed_binding("b1", "5", "c1"), &[]);
    let h = Harness::new(hap_config(aws_spec()), &[&c], &bindings);
    let theirs = json!({"tenantName": "ga-other", CLAIMED_BY: "uid-x"});
    let late = json!({"hyperscalerType": "aws", "tenantName": GA, CLAIMED_BY: "uid-c1"});
    h.api.expect([
        Call::get(&binding_path("force-migrated-b1"))
            .answer(200, binding_now("force-migrated-b1", "9", theirs)),
        claim_status(&c, unbound_status("Pending", reasons::PROGRESSING, true)).answer_rv("12"),
        Call::get(&binding_path("b1")).answer(200, binding_now("b1", "5", late)),
        binding_cas("b1", "5", json!({"tenantName": null, CLAIMED_BY: null})).answer_rv("6"),
        event(TENANTS, "c2", "Warning", "AccountContested"),
    ]);
    let action = h.reconcile(&c).await.expect("given back");
    assert_eq!(action, Action::requeue(Duration::from_secs(2)));
    let message = written_ready_message_any(&h);
    assert!(message.contains("uid-c1"), "{message}");
}

/// The claim write's claim is recorded Bound to the binding: it was checked before that status
/// was written. A cordoned tenantless sibling (an admin's, after the bind) keeps new tenants
/// off the account, not the tenant already in it: the next claim of the tenant reuses the
/// binding with no read of the sibling and no wait.
#[tokio::test]
async fn a_reuse_of_a_checked_claim_write_beside_a_cordoned_sibling_binds_without_a_read() {
    let first = bound(finalized(claim("c1")), "b1");
    let c = finalized(claim("c2"));
    let cordoned = [(crate::pools::lifecycle::CORDONED, "true")];
    let bindings = on_one_account(claimed_binding("b1", "5", "c1"), &cordoned);
    let h = Harness::new(hap_config(aws_spec()), &[&first, &c], &bindings);
    h.api.expect([
        record_cas("b1", "5", "uid-c2").answer_rv("6"),
        claim_status(&c, bound_status("b1", "Reused")).answer_rv("12"),
        event(TENANTS, "c2", "Normal", "Reused"),
    ]);
    let action = h.reconcile(&c).await.expect("bound by reuse");
    assert_eq!(action, Action::await_change());
}

/// A live claim's unchecked claim write, beside a sibling that is only cordoned (no tenant, not
/// dirty): the tenant is in the account already, so the use reads the sibling and goes ahead.
#[tokio::test]
async fn a_use_beside_a_tenantless_cordoned_sibling_is_not_contested() {
    let c1 = finalized(claim("c1"));
    let c = finalized(claim("c2"));
    let cordoned = [(crate::pools::lifecycle::CORDONED, "true")];
    let bindings = on_one_account(claimed_binding("b1", "5", "c1"), &cordoned);
    let h = Harness::new(hap_config(aws_spec()), &[&c1, &c], &bindings);
    let now = json!({crate::pools::lifecycle::CORDONED: "true"});
    h.api.expect([
        Call::get(&binding_path("force-migrated-b1"))
            .answer(200, binding_now("force-migrated-b1", "9", now)),
        record_cas("b1", "5", "uid-c1,uid-c2").answer_rv("6"),
        claim_status(&c, bound_status("b1", "Reused")).answer_rv("12"),
        event(TENANTS, "c2", "Normal", "Reused"),
    ]);
    let action = h.reconcile(&c).await.expect("bound by reuse");
    assert_eq!(action, Action::await_change());
}

/// A claim given back twice for the same reason: the second give-back's status write would
/// carry the very status the claim has, and a server-side apply that changes nothing does not
/// move the claim's version. It must move it (the message says it again), or a Bound status a
/// previous leader decided on that version could land after the binding went back. That late
/// apply, on the version before the give-back, then meets a Conflict.
#[tokio::test]
async fn a_repeated_give_back_still_moves_the_claims_version() {
    let c = finalized(claim("c1"));
    let bindings = on_one_account(binding("b1", "5", &[]), &[]);
    let h = Harness::new(hap_config(aws_spec()), &[&c], &bindings);
    let theirs = json!({"tenantName": "ga-other", CLAIMED_BY: "uid-x"});
    let mine = |rv| {
        let labels = json!({"hyperscalerType": "aws", "tenantName": GA, CLAIMED_BY: "uid-c1"});
        binding_now("b1", rv, labels)
    };
    h.api.expect([
        record_claim_write(&c, "b1", "5").answer_rv("92"),
        claim_cas("b1", "5", &c).answer_rv("6"),
        Call::get(&binding_path("force-migrated-b1"))
            .answer(200, binding_now("force-migrated-b1", "9", theirs.clone())),
        claim_status(
            &recorded(&c, "b1", "5", "92"),
            unbound_status("Pending", reasons::PROGRESSING, true),
        )
        .answer_rv("12"),
        Call::get(&binding_path("b1")).answer(200, mine("6")),
        binding_cas("b1", "6", json!({"tenantName": null, CLAIMED_BY: null})).answer_rv("7"),
        event(TENANTS, "c1", "Warning", "AccountContested"),
    ]);
    h.reconcile(&c).await.expect("given back");
    let first = written_ready_message_any(&h);
    // The claim as the give-back left it; the binding free again at 7.
    let mut c = c;
    let written = last_status(&h).expect("the give-back's status");
    c.status = Some(serde_json::from_value(written["status"].clone()).expect("a claim status"));
    c.metadata.resource_version = Some("12".into());
    h.observe(&c);
    let [b1, _] = on_one_account(binding("b1", "7", &[]), &[]);
    h.observe_binding(b1);
    h.api.expect([
        // The first claim write went back: the index shows b1 past its base, so no read.
        record_claim_write(&c, "b1", "7").answer_rv("93"),
        claim_cas("b1", "7", &c).answer_rv("8"),
        Call::get(&binding_path("force-migrated-b1"))
            .answer(200, binding_now("force-migrated-b1", "9", theirs)),
        claim_status(
            &recorded(&c, "b1", "7", "93"),
            unbound_status("Pending", reasons::PROGRESSING, true),
        )
        .answer_rv("13"),
        Call::get(&binding_path("b1")).answer(200, mine("8")),
        binding_cas("b1", "8", json!({"tenantName": null, CLAIMED_BY: null})).answer_rv("9"),
        event(TENANTS, "c1", "Warning", "AccountContested"),
    ]);
    h.reconcile(&c).await.expect("given back again");
    assert_ne!(written_ready_message_any(&h), first, "the status moved");
    // A previous leader's Bound status decided on version 12, landing now.
    let late = bound(c.clone(), "b1").status.expect("a Bound status");
    h.api
        .expect([claim_status(&c, bound_status("b1", "Claimed")).fail(409, "Conflict")]);
    let landed = h
        .ctx
        .writer
        .apply_claim_status(TENANTS, "c1", Some("12"), &late)
        .await;
    assert!(
        matches!(landed, Err(crate::k8s::K8sError::Conflict { .. })),
        "{landed:?}"
    );
}

/// The fresh read after a claim write fails (refused, or no answer): the write stands
/// unchecked and the claim is not recorded Bound. Its status says why it waits, naming the
/// read, so that a read that keeps failing leaves a reason, not silence.
#[tokio::test]
async fn a_failed_read_after_a_claim_write_says_so_in_the_claims_status() {
    let c = finalized(claim("c1"));
    let bindings = on_one_account(binding("b1", "5", &[]), &[]);
    let h = Harness::new(hap_config(aws_spec()), &[&c], &bindings);
    h.api.expect([
        record_claim_write(&c, "b1", "5").answer_rv("94"),
        claim_cas("b1", "5", &c).answer_rv("6"),
        Call::get(&binding_path("force-migrated-b1")).fail(403, "Forbidden"),
        claim_status(
            &recorded(&c, "b1", "5", "94"),
            unbound_status("Pending", reasons::PROGRESSING, true),
        )
        .answer_rv("12"),
    ]);
    let err = h.reconcile(&c).await.expect_err("the read failed");
    assert!(!err.is_conflict(), "{err:?}");
    let message = written_ready_message_any(&h);
    assert!(
        message.contains("force-migrated-b1") && message.contains("read"),
        "{message}"
    );
}

/// The message of the Ready condition of the last status written.
fn written_ready_message_any(h: &Harness) -> String {
    let status = last_status(h).expect("a status write");
    let message = &status["status"]["conditions"][0]["message"];
    message.as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_lost_claim_cas_writes_no_status_and_decides_again() {
    let c = finalized(claim("c1"));
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    h.api.expect([
        record_claim_write(&c, "b1", "5").answer_rv("95"),
        claim_cas("b1", "5", &c).fail(409, "Conflict"),
    ]);
    let err = h.reconcile(&c).await.expect_err("the binding moved");
    assert!(err.is_conflict(), "{err:?}");
    // The controller's error policy requeues a conflict at once, without growing backoff.
    let action =
        super::claim::error_policy(std::sync::Arc::new(c.clone().into()), &err, h.ctx.clone());
    let soon = (20..200).any(|ms| action == Action::requeue(Duration::from_millis(ms)));
    assert!(soon, "{action:?}");
}

#[tokio::test]
async fn a_reuse_of_a_binding_another_claim_claimed_records_itself_and_removes_its_claimed_by_before_the_status()
 {
    // The tenant holds b1 through claim `first`; claim `second` of the same tenant reuses it.
    let first = bound(finalized(claim("first")), "b1");
    let second = finalized(claim("second"));
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&first, &second],
        &[claimed_binding("b1", "7", "first")],
    );
    h.api.expect([
        record_cas("b1", "7", "uid-second").answer_rv("8"),
        claim_status(&second, bound_status("b1", "Reused")).answer_rv("12"),
        event(TENANTS, "second", "Normal", "Reused"),
    ]);
    let action = h.reconcile(&second).await.expect("bound by reuse");
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn a_lost_record_write_writes_no_status_and_the_next_pass_decides_on_the_new_binding() {
    let first = bound(finalized(claim("first")), "b1");
    let second = finalized(claim("second"));
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&first, &second],
        &[claimed_binding("b1", "7", "first")],
    );
    h.api
        .expect([record_cas("b1", "7", "uid-second").fail(409, "Conflict")]);
    let err = h.reconcile(&second).await.expect_err("the binding moved");
    assert!(err.is_conflict(), "{err:?}");

    // Someone else removed claimed-by meanwhile: a plain reuse, which still records itself on
    // the version it decided on before its status.
    h.observe_binding(binding("b1", "8", &[("tenantName", GA)]));
    h.api.expect([
        record_cas("b1", "8", "uid-second").answer_rv("9"),
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
        record_cas("b1", "7", "uid-second").answer_rv("8"),
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
    let mut stamped = serde_json::to_value(recorded(&c, "b1", "5", "96")).unwrap();
    stamped["metadata"]["resourceVersion"] = json!("13");
    stamped["metadata"]["annotations"] =
        json!({"accountpool.io/admitted-at": "2026-11-27T01:00:00Z"});
    let mut again = recorded(&c, "b1", "5", "96");
    again.metadata.resource_version = Some("13".into());
    h.api.expect([
        record_claim_write(&c, "b1", "5").answer_rv("96"),
        claim_cas("b1", "5", &c).answer_rv("6"),
        claim_status(
            &recorded(&c, "b1", "5", "96"),
            bound_status("b1", "Claimed"),
        )
        .fail(409, "Conflict"),
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
        record_claim_write(&c, "b1", "5").answer_rv("97"),
        claim_cas("b1", "5", &c).answer_rv("6"),
        claim_status(
            &recorded(&c, "b1", "5", "97"),
            bound_status("b1", "Claimed"),
        )
        .fail(409, "Conflict"),
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
    // The claim cache keeps none of a claim's other labels, and the API server's copy has them:
    // they must not make every stamped claim one to decide again.
    assert!(same(&|c| {
        c.metadata
            .labels
            .get_or_insert_default()
            .insert("kustomize.toolkit.fluxcd.io/name".into(), "claims".into());
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

// ---- adoption (`spec.adoptBinding`) --------------------------------------------------------

/// What the status of a claim that is not bound says for `reason`: its phase and the three
/// conditions, in the order a first write sets them (`retried`: Reconciling, else Stalled).
fn unbound_status(phase: &str, reason: &str, retried: bool) -> serde_json::Value {
    let third = if retried {
        types::RECONCILING
    } else {
        types::STALLED
    };
    json!({
        "phase": phase,
        "conditions": [
            {"type": types::READY, "status": "False", "reason": reason},
            {"type": types::BOUND, "status": "False", "reason": reason},
            {"type": third, "status": "True", "reason": reason},
        ],
    })
}

/// The message of the Ready condition of the last status written; fails when a binding was
/// written (the script would too: this says it in words).
fn written_ready_message(h: &Harness) -> String {
    let received = h.api.received();
    let wrote_binding = received
        .iter()
        .any(|r| r.method != http::Method::GET && r.path.contains("/credentialsbindings"));
    assert!(!wrote_binding, "a binding was written: {received:?}");
    let status = last_status(h).expect("a status write");
    let message = &status["status"]["conditions"][0]["message"];
    message.as_str().unwrap_or_default().to_string()
}

/// The body of the last status write received.
fn last_status(h: &Harness) -> Option<serde_json::Value> {
    let received = h.api.received();
    let write = received.iter().rev().find(|r| r.path.ends_with("/status"));
    write.and_then(|r| r.body.clone())
}

/// A policy of one rule: requesters in `namespace`; `adopt`: they may name their binding.
fn tenants(namespace: &str, adopt: bool) -> TenantPolicy {
    TenantPolicy {
        rules: vec![TenantRule {
            name: "claims".into(),
            namespaces: Some(vec![namespace.into()]),
            adopt_binding: adopt.then_some(true),
            ..Default::default()
        }],
    }
}

#[tokio::test]
async fn an_adopting_claim_gets_its_finalizer_then_records_itself_on_the_named_binding_before_the_status()
 {
    // b1 already carries the tenant (its provisioner chose it); b2 is free and must stay so.
    let c = adopting(claim("c1"), "b1");
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&c],
        &[
            binding("b1", "5", &[("tenantName", GA)]),
            binding("b2", "3", &[]),
        ],
    );
    h.api.expect([add_finalizer(&c).answer_rv("11")]);
    let action = h.reconcile(&c).await.expect("the finalizer is added");
    assert_eq!(action, Action::await_change(), "the update brings it back");

    let c = finalized(c);
    h.observe(&c);
    let mut adopted = bound_status("b1", "Adopted");
    adopted["matchedRule"] =
        json!({"index": 0, "entry": "(adopted: the request named its binding)"});
    h.api.expect([
        record_cas("b1", "5", "uid-c1").answer_rv("6"),
        claim_status(&c, adopted).answer_rv("12"),
    ]);
    let action = h.reconcile(&c).await.expect("adopted");
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn an_adoption_of_a_binding_another_claim_claimed_records_itself_before_the_status() {
    let first = bound(finalized(claim("first")), "b1");
    let second = finalized(adopting(claim("second"), "b1"));
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&first, &second],
        &[claimed_binding("b1", "7", "first")],
    );
    h.api.expect([
        record_cas("b1", "7", "uid-second").answer_rv("8"),
        claim_status(&second, bound_status("b1", "Adopted")).answer_rv("12"),
    ]);
    let action = h.reconcile(&second).await.expect("adopted");
    assert_eq!(action, Action::await_change());

    // A lost compare-and-swap writes no status: the binding moved, the claim is decided again.
    let third = finalized(adopting(claim("third"), "b1"));
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&first, &third],
        &[claimed_binding("b1", "7", "first")],
    );
    h.api
        .expect([record_cas("b1", "7", "uid-third").fail(409, "Conflict")]);
    let err = h.reconcile(&third).await.expect_err("the binding moved");
    assert!(err.is_conflict(), "{err:?}");
}

#[tokio::test]
async fn an_adoption_the_tenant_policy_refuses_ends_tenant_not_allowed_and_writes_no_binding() {
    let refusals = [
        (
            tenants(TENANTS, false),
            "naming a binding (adoptBinding) is not allowed",
        ),
        (tenants("elsewhere", true), "namespace not in [elsewhere]"),
    ];
    for (policy, says) in refusals {
        let c = finalized(adopting(claim("c1"), "b1"));
        let spec = crate::api::HapConfigSpec {
            tenants: Some(policy),
            ..aws_spec()
        };
        let h = Harness::new(
            hap_config(spec),
            &[&c],
            &[binding("b1", "5", &[("tenantName", GA)])],
        );
        let reason = reasons::TENANT_NOT_ALLOWED;
        h.api.expect([
            event(TENANTS, "c1", "Warning", reason),
            claim_status(&c, unbound_status("Failed", reason, false)).answer_rv("12"),
        ]);
        let action = h.reconcile(&c).await.expect("refused");
        assert_eq!(action, Action::await_change(), "final: {says}");
        let message = written_ready_message(&h);
        assert!(message.contains(says), "{message}");
    }

    // The rule that allows adoption lets the same claim record the same binding.
    let c = finalized(adopting(claim("c1"), "b1"));
    let spec = crate::api::HapConfigSpec {
        tenants: Some(tenants(TENANTS, true)),
        ..aws_spec()
    };
    let h = Harness::new(
        hap_config(spec),
        &[&c],
        &[binding("b1", "5", &[("tenantName", GA)])],
    );
    h.api.expect([
        record_cas("b1", "5", "uid-c1").answer_rv("6"),
        claim_status(&c, bound_status("b1", "Adopted")).answer_rv("12"),
    ]);
    h.reconcile(&c).await.expect("adopted");
}

#[tokio::test]
async fn an_adoption_of_a_binding_that_is_not_the_tenants_stays_pending_and_writes_no_binding() {
    let cases = [
        (
            binding("b1", "5", &[("tenantName", "ga-2")]),
            "carries tenantName=ga-2, not ga-1",
        ),
        // Free: the operator claims only bindings it chose itself.
        (binding("b1", "5", &[]), "carries no tenantName"),
        (binding("b9", "5", &[("tenantName", GA)]), "does not exist"),
    ];
    for (b, says) in cases {
        let c = finalized(adopting(claim("c1"), "b1"));
        let h = Harness::new(hap_config(aws_spec()), &[&c], &[b]);
        let reason = reasons::BINDING_NOT_TENANT;
        h.api.expect([
            event(TENANTS, "c1", "Warning", reason),
            claim_status(&c, unbound_status("Pending", reason, false)).answer_rv("12"),
        ]);
        let action = h.reconcile(&c).await.expect("pending");
        // Config and pool changes bring it back; the safety-net retry besides.
        let safety_net = Action::requeue(h.ctx.args.pending_retry);
        assert_eq!(action, safety_net, "{says}");
        let message = written_ready_message(&h);
        assert!(message.contains(says), "{message}");
    }
}

// ---- an inventory that cannot be read ------------------------------------------------------

/// Whether `action` is the first delay of a claim's backoff (200 ms and up to 50% jitter).
fn first_backoff(action: &Action) -> bool {
    (200..=300).any(|ms| *action == Action::requeue(Duration::from_millis(ms)))
}

#[tokio::test]
async fn a_binding_list_the_garden_refuses_leaves_the_claim_pending_inventory_unavailable_with_a_growing_retry()
 {
    let c = finalized(claim("c1"));
    let h = Harness::watching_bindings(
        hap_config(aws_spec()),
        &[&c],
        list_bindings().fail(403, "Forbidden"),
    );
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while h.ctx.caches.bindings.error().is_none() {
        assert!(tokio::time::Instant::now() < end, "the list never failed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reason = reasons::INVENTORY_UNAVAILABLE;
    h.api
        .expect([claim_status(&c, unbound_status("Pending", reason, true)).answer_rv("12")]);
    let action = h.reconcile(&c).await.expect("pending");
    assert!(first_backoff(&action), "{action:?}");
    let message = written_ready_message(&h);
    let says = "cannot list credentialsbindings in namespace garden";
    assert!(message.contains(says), "{message}");

    // Next time the same status stands (nothing is written) and the claim waits longer: the
    // backoff was not reset by a pass that did not settle.
    let written = last_status(&h).expect("a status write");
    let mut again = c.clone();
    again.status = Some(serde_json::from_value(written["status"].clone()).expect("a status"));
    again.metadata.resource_version = Some("12".into());
    h.observe(&again);
    let action = h.reconcile(&again).await.expect("still pending");
    let second = (400..=600).any(|ms| action == Action::requeue(Duration::from_millis(ms)));
    assert!(second, "{action:?}");
}

#[tokio::test]
async fn a_leader_that_cannot_re_read_the_garden_leaves_new_claims_pending_inventory_unavailable() {
    let c = finalized(claim("c1"));
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    h.ctx
        .took_over
        .store(false, std::sync::atomic::Ordering::SeqCst);
    *h.ctx.take_over_error.lock().unwrap() = Some("the garden is unreachable".into());
    let reason = reasons::INVENTORY_UNAVAILABLE;
    h.api
        .expect([claim_status(&c, unbound_status("Pending", reason, true)).answer_rv("12")]);
    let action = h.reconcile(&c).await.expect("pending");
    assert!(first_backoff(&action), "{action:?}");
    let message = written_ready_message(&h);
    let says = "cannot re-read bindings and claims after taking over: the garden is unreachable";
    assert!(message.contains(says), "{message}");
}

#[tokio::test]
async fn an_unreadable_inventory_writes_nothing_for_a_bound_claim_nor_within_the_grace_period() {
    // A bound claim keeps its record untouched: a pending status would erase it.
    let first = bound(finalized(claim("first")), "b1");
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&first],
        &[claimed_binding("b1", "7", "first")],
    );
    h.ctx
        .took_over
        .store(false, std::sync::atomic::Ordering::SeqCst);
    *h.ctx.take_over_error.lock().unwrap() = Some("the garden is unreachable".into());
    let action = h.reconcile(&first).await.expect("waits");
    assert_eq!(action, Action::requeue(Duration::from_secs(1)));

    // Without a cause yet (still listing, within the grace period) a new claim says nothing.
    let c = finalized(claim("c1"));
    let h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    h.ctx
        .took_over
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let action = h.reconcile(&c).await.expect("waits");
    assert_eq!(action, Action::requeue(Duration::from_millis(500)));
}

/// A claim the source pass made for an openmcp Cluster, in the source claim namespace
/// (`default` in the harness), with `rule` as the webhook's record of the user's rule.
fn cluster_claim(rule: Option<&str>) -> crate::api::AccountClaim {
    let mut c = finalized(claim("c1"));
    c.metadata.namespace = Some("default".into());
    let labels = c.metadata.labels.get_or_insert_default();
    for (k, v) in [
        (crate::labels::SOURCE_ID, "mcp"),
        (crate::labels::SOURCE_KIND, "Cluster"),
        (crate::labels::SOURCE_NAMESPACE, "platform"),
        (crate::labels::SOURCE_NAME, "workload-x1"),
    ] {
        labels.insert(k.into(), v.into());
    }
    if let Some(r) = rule {
        c.metadata.annotations.get_or_insert_default().insert(
            crate::sources::naming::ANNOTATION_TENANT_RULE.into(),
            r.into(),
        );
    }
    c
}

#[tokio::test]
async fn a_pass_created_claim_is_checked_and_only_the_recorded_rule_stands_for_its_user() {
    let spec = crate::api::HapConfigSpec {
        tenants: Some(TenantPolicy {
            rules: vec![TenantRule {
                name: "openmcp".into(),
                kinds: Some(vec![crate::api::RequesterKind::Cluster]),
                groups: Some(vec!["openmcp".into()]),
                ..Default::default()
            }],
        }),
        ..aws_spec()
    };
    // No record (the webhook never decided on this request), or a record of another rule.
    for rule in [None, Some("someone-else")] {
        let c = cluster_claim(rule);
        let h = Harness::new(hap_config(spec.clone()), &[&c], &[binding("b1", "5", &[])]);
        let reason = reasons::TENANT_NOT_ALLOWED;
        h.api.expect([
            event("default", "c1", "Warning", reason),
            claim_status(&c, unbound_status("Failed", reason, false)).answer_rv("12"),
        ]);
        let action = h.reconcile(&c).await.expect("refused");
        assert_eq!(action, Action::await_change(), "final");
        let message = written_ready_message(&h);
        assert!(
            message.contains("rule `openmcp`")
                && message.contains("Cluster in namespace `platform`"),
            "{message}"
        );
    }
    // The webhook allowed the user under `openmcp`: served as any claim.
    let c = cluster_claim(Some("openmcp"));
    let h = Harness::new(hap_config(spec), &[&c], &[binding("b1", "5", &[])]);
    h.api.expect([
        record_claim_write(&c, "b1", "5").answer_rv("98"),
        claim_cas("b1", "5", &c).answer_rv("6"),
        claim_status(
            &recorded(&c, "b1", "5", "98"),
            bound_status("b1", "Claimed"),
        )
        .answer_rv("12"),
        event("default", "c1", "Normal", "Claimed"),
    ]);
    h.reconcile(&c).await.expect("bound");
}

/// A sibling reuse decided right after a record landed decides on the version the record left,
/// not on the one its watch event has yet to replace: otherwise every concurrent reuse of one
/// binding conflicts until the event comes, and fifty claims of one tenant starved.
#[tokio::test]
async fn a_sibling_reuse_right_after_a_record_decides_on_the_version_the_record_left() {
    let first = bound(finalized(claim("first")), "b1");
    let second = finalized(claim("second"));
    let third = finalized(claim("third"));
    let h = Harness::new(
        hap_config(aws_spec()),
        &[&first, &second, &third],
        &[binding("b1", "7", &[("tenantName", GA)])],
    );
    h.api.expect([
        record_cas("b1", "7", "uid-second").answer_rv("8"),
        claim_status(&second, bound_status("b1", "Reused")).answer_rv("12"),
        event(TENANTS, "second", "Normal", "Reused"),
    ]);
    h.reconcile(&second).await.expect("bound by reuse");
    h.api.expect([
        record_cas("b1", "8", "uid-second,uid-third").answer_rv("9"),
        claim_status(&third, bound_status("b1", "Reused")).answer_rv("13"),
        event(TENANTS, "third", "Normal", "Reused"),
    ]);
    h.reconcile(&third).await.expect("bound by reuse");
}

/// The config moved its bindings to another namespace, and the caches are not pointed at it yet
/// (that happens where the configs move, in the background task and the config reconcile). A
/// claim is not decided on the old namespace's bindings meanwhile, and its reads move no watch:
/// it waits, writing nothing, for the caches to list the new target. A deleted claim's release
/// waits the same way.
#[tokio::test]
async fn after_the_config_moved_a_claim_waits_for_the_caches_and_its_reads_move_no_watch() {
    let c = finalized(claim("c1"));
    let mut h = Harness::new(hap_config(aws_spec()), &[&c], &[binding("b1", "5", &[])]);
    let before = h.ctx.caches.bindings.target();
    let mut moved = hap_config(HapConfigSpec {
        binding_namespace: "garden-elsewhere".into(),
        ..aws_spec()
    });
    moved.metadata.generation = Some(2);
    moved.metadata.resource_version = Some("101".into());
    h.observe_config(moved);

    let action = h.reconcile(&c).await.expect("waits");
    assert_eq!(
        action,
        Action::requeue(Duration::from_millis(500)),
        "it waits for the listing"
    );
    assert_eq!(
        h.ctx.caches.bindings.target(),
        before,
        "a claim's reads moved no watch"
    );

    let gone = deleting(bound(c, "b1"));
    h.observe(&gone);
    let action = h.reconcile(&gone).await.expect("waits");
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(1)),
        "the release waits too"
    );
    assert_eq!(
        h.ctx.caches.bindings.target(),
        before,
        "a release's reads moved no watch"
    );
}
