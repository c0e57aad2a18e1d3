//! The exact API calls of a request-source pass, against a scripted API server (`hap_testkit`):
//! the watch of the source's objects (its list, then a watch that stays open), and the claim it
//! creates for a Runtime created with a binding, with the source's labels — no webhook involved —
//! once the claim list has ended.

use std::time::Duration;

use serde_json::json;

use super::fixtures::*;
use crate::api::{HapConfigSpec, RequestSource};
use crate::labels;
use hap_testkit::Call;

const RUNTIMES: &str = "/apis/infrastructuremanager.kyma-project.io/v1/runtimes";

fn kyma_spec() -> HapConfigSpec {
    let sources: Vec<RequestSource> =
        serde_saphyr::from_str("- {id: kyma, kind: Runtime}").expect("a source");
    HapConfigSpec {
        request_sources: Some(sources),
        ..aws_spec()
    }
}

/// A Kyma Runtime of `GA` whose Shoot names binding `binding`.
fn runtime(name: &str, binding: &str) -> serde_json::Value {
    json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "Runtime",
        "metadata": {"name": name, "namespace": "kcp-system", "uid": format!("uid-{name}"),
            "resourceVersion": "40", "labels": {
            "kyma-project.io/global-account-id": GA, "kyma-project.io/subaccount-id": "sa",
            "kyma-project.io/broker-plan-name": "aws", "kyma-project.io/platform-region": "cf-eu10"}},
        "spec": {"shoot": {"name": name, "region": "eu-1", "provider": {"type": "aws"},
            "secretBindingName": binding}},
    })
}

#[tokio::test]
async fn a_runtime_created_with_a_binding_gets_its_claim_with_the_source_labels() {
    let h = Harness::new(hap_config(kyma_spec()), &[], &[binding("b1", "5", &[])]);
    let list = json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "RuntimeList",
        "metadata": {"resourceVersion": "41"}, "items": [runtime("rt-1", "b1")],
    });
    h.api.expect([
        Call::get(RUNTIMES)
            // In the inventory's pages (each is held whole while decoded), not kube's 500; a
            // paged list without `resourceVersion`: a consistent read.
            .query(&[("limit", &crate::k8s::caches::LIST_PAGE.to_string())])
            .answer(200, list),
        Call::get(RUNTIMES)
            .query(&[
                ("watch", "true"),
                ("resourceVersion", "41"),
                ("timeoutSeconds", "290"),
                ("allowWatchBookmarks", "true"),
            ])
            .hang(),
    ]);
    // The first pass starts the watch; its objects are there once it lists.
    super::sources::pass(&h.ctx, false).await;
    assert!(
        h.api.consumed_within(Duration::from_secs(10)).await,
        "the watch lists and watches"
    );
    h.api.done();

    // Until the claim list has ended, the index may lack the Runtime's claim: no pass plans
    // from it (nothing scripted, so any request fails `done`).
    h.ctx
        .claims_synced
        .store(false, std::sync::atomic::Ordering::SeqCst);
    super::sources::pass(&h.ctx, true).await;
    h.api.done();
    h.ctx
        .claims_synced
        .store(true, std::sync::atomic::Ordering::SeqCst);

    h.api.expect([Call::post("/apis/accountpool.io/v1alpha1/namespaces/default/accountclaims")
    .query(&[("fieldManager", crate::api::SOURCE_FIELD_MANAGER)])
    .body_includes(json!({
        "apiVersion": "accountpool.io/v1alpha1",
        "kind": "AccountClaim",
        "metadata": {
            "name": "runtime.kcp-system.rt-1",
            "namespace": "default",
            "labels": {
                crate::labels::SOURCE_ID: "kyma",
                crate::labels::SOURCE_KIND: "Runtime",
                crate::labels::SOURCE_NAMESPACE: "kcp-system",
                labels::SOURCE_NAME: "rt-1",
                labels::SOURCE_UID: "uid-rt-1",
            },
        },
        "spec": {"globalAccount": GA, "plan": "aws", "adoptBinding": "b1"},
    }))
    .answer(201, json!({
        "apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
        "metadata": {"name": "runtime.kcp-system.rt-1", "namespace": "default", "resourceVersion": "12"},
        "spec": {"globalAccount": GA, "plan": "aws"},
    }))]);
    // Not the resync: the pass must not have recorded the skipped one as done.
    super::sources::pass(&h.ctx, false).await;
    h.api.done();
}

/// Planning walks every watched object: after a pass that planned for a while the controller
/// rests three times as long, so that passes take at most a quarter of a core however large the
/// landscape; a pass that planned nothing (a skipped one) rests nothing.
#[test]
fn the_controller_rests_after_a_long_plan() {
    use std::time::Duration;
    assert_eq!(
        super::sources::rest_after(Duration::from_millis(200)),
        Duration::from_millis(600)
    );
    assert_eq!(super::sources::rest_after(Duration::ZERO), Duration::ZERO);
}
