//! The exact API calls of the HapConfig reconcile, against a scripted API server (`hap_testkit`):
//! the first pass records the generation in force and applies the status once; a pass that
//! finds nothing changed writes nothing.

use std::sync::Arc;

use serde_json::json;

use super::fixtures::*;
use crate::api::HapConfigStatus;
use hap_testkit::Call;

/// The record of the generation in force, for a restart while a later one is invalid.
const RECORD: &str = "/api/v1/namespaces/default/configmaps/hap-last-known-good.hap";

/// The record read first (none yet), then applied.
fn last_good() -> [Call; 2] {
    [Call::get(RECORD).fail(404, "NotFound"), record_apply(None)]
}

/// The apply of the record for generation 1, conditioned on `rv` when one was read.
fn record_apply(rv: Option<&str>) -> Call {
    let mut body = json!({
        "kind": "ConfigMap",
        "data": {"uid": "uid-config", "generation": "1"},
    });
    if let Some(rv) = rv {
        body["metadata"] = json!({"resourceVersion": rv});
    }
    Call::patch(RECORD)
        .query(&[("fieldManager", "hap-operator"), ("force", "true")])
        .body_includes(body)
}

/// The record as read, for `generation` of the config.
fn record(generation: i64, rv: &str) -> Call {
    Call::get(RECORD).answer(
        200,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "hap-last-known-good.hap", "namespace": "default", "resourceVersion": rv},
            "data": {"uid": "uid-config", "generation": generation.to_string(), "spec.json": "{\"bindingNamespace\":\"garden\",\"rules\":[\"aws\"]}"},
        }),
    )
}

/// The forced apply of the HapConfig's status, conditioned on the resourceVersion it was
/// computed from.
fn config_status(rv: &str, status: serde_json::Value) -> Call {
    Call::patch(&format!(
        "/apis/accountpool.io/v1alpha1/hapconfigs/{CONFIG}/status"
    ))
    .query(&[("fieldManager", "hap-operator"), ("force", "true")])
    .body_includes(json!({
        "apiVersion": "accountpool.io/v1alpha1",
        "kind": "HapConfig",
        "metadata": {"resourceVersion": rv},
        "status": status,
    }))
}

#[tokio::test]
async fn the_config_status_is_written_once_and_not_again_when_nothing_changed() {
    let cfg = hap_config(aws_spec());
    let mut h = Harness::new(
        cfg.clone(),
        &[],
        &[binding("b1", "5", &[]), binding("b2", "6", &[])],
    );
    let [read, apply] = last_good();
    h.api.expect([
        read,
        apply,
        config_status(
            "100",
            json!({"observedGeneration": 1, "activeGeneration": 1, "freeBindings": 2, "claimedBindings": 0}),
        )
        .answer_rv("101"),
    ]);
    super::config::reconcile(Arc::new(cfg.clone()), h.ctx.clone())
        .await
        .expect("reconciled");
    h.api.done();

    // The watch brings back the object with the status just applied.
    let written = h.api.received().pop().and_then(|r| r.body);
    let status = written.and_then(|b| b.get("status").cloned());
    let status: HapConfigStatus =
        serde_json::from_value(status.expect("a status was sent")).expect("a HapConfig status");
    let mut cfg = cfg;
    cfg.status = Some(status);
    cfg.metadata.resource_version = Some("101".into());
    h.observe_config(cfg.clone());
    super::config::reconcile(Arc::new(cfg), h.ctx.clone())
        .await
        .expect("reconciled");
    h.api.done();
    assert_eq!(h.api.received().len(), 3, "no call in the second pass");
}

/// A replica that lost the lease writes nothing: neither the status nor the last-known-good
/// record, which may hold an older generation than the new leader's. It may read.
#[tokio::test]
async fn a_replica_without_the_lease_writes_no_record_and_no_status() {
    let cfg = hap_config(aws_spec());
    let h = Harness::new(cfg.clone(), &[], &[binding("b1", "5", &[])]);
    h.fence.revoke();
    h.api.expect([Call::get(RECORD).fail(404, "NotFound")]);
    let result = super::config::reconcile(Arc::new(cfg), h.ctx.clone()).await;
    h.api.done();
    let writes: Vec<_> = h
        .api
        .received()
        .into_iter()
        .filter(|r| r.method != http::Method::GET)
        .collect();
    assert!(writes.is_empty(), "writes without the lease: {writes:?}");
    assert!(result.is_err(), "the status write is refused by the fence");
}

/// A record of an earlier generation is replaced on the version read (a paused ex-leader's
/// apply that lands late then conflicts); one at this generation is left as it is.
#[tokio::test]
async fn the_record_is_applied_on_the_version_read_and_only_when_older() {
    let cfg = hap_config(aws_spec());
    let status = json!({"observedGeneration": 1, "activeGeneration": 1});
    let h = Harness::new(cfg.clone(), &[], &[binding("b1", "5", &[])]);
    h.api.expect([
        record(0, "7"),
        record_apply(Some("7")),
        config_status("100", status.clone()).answer_rv("101"),
    ]);
    super::config::reconcile(Arc::new(cfg.clone()), h.ctx.clone())
        .await
        .expect("reconciled");
    h.api.done();

    let h = Harness::new(cfg.clone(), &[], &[binding("b1", "5", &[])]);
    h.api.expect([
        record(1, "8"),
        config_status("100", status).answer_rv("101"),
    ]);
    super::config::reconcile(Arc::new(cfg), h.ctx.clone())
        .await
        .expect("reconciled");
    h.api.done();
}

/// Until every cache has listed (here: the claims), the status keeps the request sources it
/// reported: the source pass waits for the claim list, and an empty list would drop
/// `requestSources` and SourcesAvailable on every start at scale.
#[tokio::test]
async fn a_status_written_before_the_claims_listed_keeps_the_reported_sources() {
    let mut cfg = hap_config(aws_spec());
    let reported = crate::api::SourceStatus {
        id: "kyma".into(),
        kind: "Runtime".into(),
        watching: true,
        message: "serving".into(),
        matching: 3,
        claims: 3,
        bound: 3,
        pending: 0,
        failed: 0,
        unserved: 0,
    };
    cfg.status = Some(HapConfigStatus {
        request_sources: vec![reported],
        ..HapConfigStatus::default()
    });
    let h = Harness::new(cfg.clone(), &[], &[binding("b1", "5", &[])]);
    h.ctx
        .claims_synced
        .store(false, std::sync::atomic::Ordering::SeqCst);
    h.api.always(Call::get(RECORD).fail(404, "NotFound"));
    h.api.always(record_apply(None));
    h.api.always(
        Call::patch(&format!(
            "/apis/accountpool.io/v1alpha1/hapconfigs/{CONFIG}/status"
        ))
        .query(&[("fieldManager", "hap-operator"), ("force", "true")])
        .answer_rv("101"),
    );
    super::config::reconcile(Arc::new(cfg), h.ctx.clone())
        .await
        .expect("reconciled");
    let status = h
        .api
        .received()
        .into_iter()
        .filter_map(|r| r.body)
        .filter_map(|b| b.get("status").cloned())
        .next_back()
        .expect("a status was written");
    assert_eq!(
        status["requestSources"],
        json!([{"id": "kyma", "kind": "Runtime", "watching": true, "message": "serving",
            "matching": 3, "claims": 3, "bound": 3, "pending": 0, "failed": 0, "unserved": 0}]),
        "{status}"
    );
}

/// A failed pass grows the config's backoff; one that succeeds ends the run of failures, so the
/// next failure waits the base delay again (before, the key stayed for good: every later
/// failure started from the cap the last run reached).
#[tokio::test]
async fn a_config_pass_that_succeeds_resets_its_backoff() {
    let cfg = hap_config(aws_spec());
    let h = Harness::new(cfg.clone(), &[], &[binding("b1", "5", &[])]);
    let err = super::config::ConfigError::Write {
        name: "default".into(),
        source: crate::k8s::K8sError::NotFound {
            what: "HapConfig default".into(),
        },
    };
    super::config::error_policy(Arc::new(cfg.clone()), &err, h.ctx.clone());
    super::config::error_policy(Arc::new(cfg.clone()), &err, h.ctx.clone());
    assert_eq!(
        h.ctx.backoff.entries(),
        1,
        "the config's failures are on record"
    );

    let [read, apply] = last_good();
    h.api.expect([
        read,
        apply,
        config_status(
            "100",
            json!({"observedGeneration": 1, "activeGeneration": 1, "freeBindings": 1, "claimedBindings": 0}),
        )
        .answer_rv("101"),
    ]);
    super::config::reconcile(Arc::new(cfg), h.ctx.clone())
        .await
        .expect("reconciled");
    h.api.done();
    assert_eq!(
        h.ctx.backoff.entries(),
        0,
        "a pass that succeeded starts the backoff over"
    );
}

/// A refusal concerns one binding (`denials`). Once that binding is gone from the garden, its
/// refusal must not keep the config Stalled: before, it stayed on record, and the HapConfig read
/// Failed to kstatus and Flux, until the process restarted. One the index lacks whose pause is
/// not long over stays: it may be a record of another target kind or namespace, retried then.
#[tokio::test]
async fn a_refusal_of_a_binding_that_is_gone_no_longer_stalls_the_config() {
    let cfg = hap_config(aws_spec());
    let h = Harness::new(cfg.clone(), &[], &[binding("b1", "5", &[])]);
    let now = std::time::Instant::now();
    let long_ago = now
        .checked_sub(std::time::Duration::from_secs(600))
        .expect("the machine has run for 10 minutes");
    let forbidden = "forbidden: the Secret may not be read";
    h.ctx.denials.refused("b1", forbidden.into(), now);
    h.ctx.denials.refused("gone", forbidden.into(), long_ago);
    h.ctx.denials.refused("other-target", forbidden.into(), now);

    let [read, apply] = last_good();
    let status_path = format!("/apis/accountpool.io/v1alpha1/hapconfigs/{CONFIG}/status");
    h.api.expect([
        read,
        apply,
        Call::patch(&status_path)
            .query(&[("fieldManager", "hap-operator"), ("force", "true")])
            .answer_rv("101"),
    ]);
    super::config::reconcile(Arc::new(cfg), h.ctx.clone())
        .await
        .expect("reconciled");
    h.api.done();

    let body = h
        .api
        .received()
        .pop()
        .and_then(|r| r.body)
        .expect("a status");
    let status: HapConfigStatus =
        serde_json::from_value(body["status"].clone()).expect("a HapConfig status");
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_eq!(ready.status, "False", "b1 is still refused");
    assert!(
        ready.message.contains("2 binding write(s) refused")
            && ready.message.contains("binding b1:")
            && ready.message.contains("binding other-target:"),
        "{}",
        ready.message
    );
    assert!(
        !ready.message.contains("binding gone:"),
        "{}",
        ready.message
    );
    assert_eq!(
        h.ctx.denials.entries(),
        2,
        "the deleted binding's refusal is forgotten"
    );
}
