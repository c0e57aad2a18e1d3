//! The source controller's clean-up on the real control plane: a claim handed out again by an
//! admission (stamped `accountpool.io/admitted-at`) keeps its grace from that stamp, not from its
//! creation; the delete is conditioned on the resourceVersion read before the object was looked
//! for, so a stamp written in between wins; and a replica that does not lead writes nothing.

use crate::support;

use std::time::{Duration, Instant};

use hap_operator::api::AccountClaim;
use hap_operator::k8s::sources::SourceWrites;
use hap_operator::k8s::{K8sError, Writer};
use hap_operator::leadership::Fence;
use hap_operator::sources::naming::ANNOTATION_ADMITTED_AT;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::platform::{
    Certs, RuntimeSpec, SCOPE_LABEL, WebhookRegistration, api, install_platform_crds, runtime,
    runtime_resource, scoped_namespace,
};
use support::{Hap, eventually, unique};

fn rt<'a>(name: &'a str, ga: &'a str) -> RuntimeSpec<'a> {
    RuntimeSpec {
        name,
        global_account: Some(ga),
        plan: "aws",
        platform_region: "cf-us10",
        region: "eu-central-1",
        provider: "aws",
        binding: "",
        extra_labels: &[],
    }
}

fn claim_object(name: &str) -> AccountClaim {
    serde_json::from_value(json!({
        "apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
        "metadata": {"name": name},
        "spec": {"globalAccount": "ga-1", "plan": "aws"},
    }))
    .expect("claim")
}

fn stamp(at: jiff::Timestamp) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION_ADMITTED_AT: at.to_string()}}}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_handed_out_again_keeps_its_grace_from_the_stamp() {
    install_platform_crds().await;
    let scope = unique("gc");
    let mut hap = Hap::without_operator(
        &["aws"],
        json!({"requestSources": [{"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}}]}),
    )
    .await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    let certs = Certs::new();
    let args = certs.args(hap.run_args());
    let grace = args.effective_source_grace();
    hap.operator = Some(support::Operator::start_with(&hap.client, args).await);
    let addr = hap
        .operator
        .as_ref()
        .and_then(|o| o.handle.webhook.get())
        .expect("webhook address");
    let ns = scoped_namespace(&hap.client, "kcp", &scope).await;
    let _hook = WebhookRegistration::register(
        "Runtime",
        &format!("https://{addr}/mutate/runtimes"),
        &certs.ca_bundle(),
        &scope,
        json!({}),
    );
    let runtimes = api(&hap.client, &ns, &runtime_resource());
    runtimes
        .create(
            &PostParams::default(),
            &runtime(&ns, &scope, &rt("rt-a", "ga-1")),
        )
        .await
        .expect("rt-a admitted");
    let claim = format!("runtime.{ns}.rt-a");
    assert_eq!(hap.bound(&claim).await, "aws-1");
    // Old by its creation: without the stamp, its clean-up may run as soon as the object goes.
    eventually(grace * 3, "the claim older than the grace", || async {
        let c = hap.claims().get(&claim).await.ok()?;
        let created = c.metadata.creation_timestamp?.0;
        let age = jiff::Timestamp::now().duration_since(created);
        (age > jiff::SignedDuration::try_from(grace).ok()?).then_some(())
    })
    .await;

    // The claim is handed out again (the webhook stamps it, as for a request re-created under
    // the same name), and the object is gone right after: its admission may still be under way.
    let stamped = Instant::now();
    hap.claims()
        .patch(
            &claim,
            &PatchParams::default(),
            &stamp(jiff::Timestamp::now()),
        )
        .await
        .expect("stamp");
    runtimes
        .delete("rt-a", &DeleteParams::default())
        .await
        .expect("delete rt-a");
    eventually(
        grace * 4,
        "the claim of the vanished Runtime deleted",
        || async {
            let c = hap.claims().get_opt(&claim).await.ok()?;
            c.is_none_or(|c| c.metadata.deletion_timestamp.is_some())
                .then_some(())
        },
    )
    .await;
    // One second for the stamp's and the Date header's resolution.
    assert!(
        stamped.elapsed() + Duration::from_secs(1) >= grace,
        "deleted {:?} after the stamp; the grace is {grace:?}",
        stamped.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stamp_after_the_read_makes_the_clean_up_delete_fail() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    let writes = SourceWrites::new(Writer::new(
        hap.client.clone().into(),
        hap.client.clone().into(),
        None,
        Fence::open(),
    ));
    hap.claims()
        .create(&PostParams::default(), &claim_object("c1"))
        .await
        .expect("create claim");
    let read = writes.read_claim(&hap.claims_ns, "c1").await.expect("read");
    let server_now = read.server_now.expect("the API server's Date");
    let drift = jiff::Timestamp::now().duration_since(server_now).abs();
    assert!(drift < jiff::SignedDuration::from_secs(5), "{drift:?}");
    let live = read.claim.expect("claim");
    let (uid, version) = (
        live.metadata.uid.clone().expect("uid"),
        live.metadata.resource_version.clone().expect("version"),
    );
    // A webhook hands the claim out between the read and the delete.
    hap.claims()
        .patch(
            "c1",
            &PatchParams::default(),
            &stamp(jiff::Timestamp::now()),
        )
        .await
        .expect("stamp");
    let r = writes
        .delete_claim(&hap.claims_ns, "c1", &uid, &version)
        .await;
    assert!(matches!(r, Err(K8sError::Conflict { .. })), "{r:?}");
    assert!(
        hap.claims().get_opt("c1").await.expect("get").is_some(),
        "the stamped claim stays"
    );
    // Read again, the delete goes through.
    let live = writes
        .read_claim(&hap.claims_ns, "c1")
        .await
        .expect("read")
        .claim
        .expect("claim");
    let version = live.metadata.resource_version.expect("version");
    writes
        .delete_claim(&hap.claims_ns, "c1", &uid, &version)
        .await
        .expect("delete");
    assert!(
        writes
            .read_claim(&hap.claims_ns, "missing")
            .await
            .expect("read")
            .claim
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_does_not_lead_creates_no_claim() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    let writes = SourceWrites::new(Writer::new(
        hap.client.clone().into(),
        hap.client.clone().into(),
        None,
        Fence::closed(),
    ));
    let r = writes
        .create_claim(&hap.claims_ns, &claim_object("c1"))
        .await;
    assert!(matches!(r, Err(K8sError::Fenced { .. })), "{r:?}");
    assert!(
        hap.claims().get_opt("c1").await.expect("get").is_none(),
        "created although fenced"
    );
}
