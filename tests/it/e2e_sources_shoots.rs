//! Gardener Shoots as requests, end to end through the real gardener-apiserver: it calls the
//! operator's admission webhook (registered in the garden's kube-apiserver) on Shoot CREATE and
//! UPDATE. An opted-in Shoot without a binding gets `spec.credentialsBindingName` chosen by the
//! rules through an AccountClaim (dedicated, shared, EU, multi-account); Gardener's own admission
//! then validates it. Two operator replicas serve the webhook while one decides; a Shoot that does
//! not opt in is untouched; a dry run claims nothing; a bad request is denied naming the field; an
//! UPDATE that moves the binding is denied; a HapConfig change moves nothing; deleting the Shoot
//! releases the binding.

use crate::support;

use std::time::Duration;

use hap_operator::api::ClaimPhase;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::garden::{BindingRef, profile, shoot_object, shoot_resource};
use support::platform::{Certs, SCOPE_LABEL, WebhookRegistration, api, until};
use support::shoot_hook::{REQUEST, request_shoot, scope_bindings_namespace};
use support::{Hap, Operator, eventually, unique};

/// A valid Shoot that asks for its binding: opted in, tenant and plan labels, no binding name.
async fn request(hap: &Hap, name: &str, labels: Value) -> DynamicObject {
    request_shoot(hap, name, None, labels).await
}

fn labels(scope: &str, ga: Option<&str>, plan: &str, pr: &str, replica: &str) -> Value {
    let mut l = json!({REQUEST: "true", SCOPE_LABEL: scope, "accountpool.io/plan": plan,
        "accountpool.io/platform-region": pr, "hap-test/replica": replica});
    if let Some(ga) = ga {
        l["accountpool.io/global-account"] = json!(ga);
    }
    l
}

fn binding_of(s: &DynamicObject) -> Option<String> {
    s.data
        .pointer("/spec/credentialsBindingName")
        .and_then(Value::as_str)
        .map(String::from)
}

fn denial(r: Result<DynamicObject, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shoots_get_bindings_through_the_real_gardener_apiserver() {
    shoots_flow(false).await;
}

/// As in a real landscape: the Shoots and their webhook registration in a separate garden, the
/// claims in the operator's cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shoots_get_bindings_with_a_separate_garden() {
    shoots_flow(true).await;
}

async fn shoots_flow(separate_garden: bool) {
    let scope = unique("shoot");
    let source = json!([{"id": "shoots", "kind": "Shoot", "matchLabels": {REQUEST: "true", SCOPE_LABEL: scope}}]);
    let spec = json!({
        "plans": {"trial": {"providerFromRequest": true}},
        "multiHyperscalerAccount": {"allowedGlobalAccounts": ["ga-multi"], "limits": {"aws": 1}},
        "requestSources": source,
    });
    let rules = ["aws(euAccess=*)", "trial(shared)"];
    let hap = if separate_garden {
        Hap::without_operator_with_separate_garden(&rules, spec).await
    } else {
        Hap::without_operator(&rules, spec).await
    };
    let garden_kubeconfig = hap
        .garden_kubeconfig
        .clone()
        .unwrap_or_else(support::kubeconfig);
    for b in ["aws-1", "aws-2", "aws-3"] {
        hap.binding(b, "aws", &[("hyperscalerType", "aws")]).await;
    }
    hap.binding(
        "aws-eu-1",
        "aws",
        &[("hyperscalerType", "aws"), ("euAccess", "true")],
    )
    .await;
    hap.binding(
        "trial-1",
        "aws",
        &[("hyperscalerType", "aws"), ("shared", "true")],
    )
    .await;
    scope_bindings_namespace(&hap, &scope);

    // Two replicas; each replica's webhook is called for half of the Shoots.
    let certs = Certs::new();
    let lease = unique("lease");
    let replica = |id: &str| {
        let mut args = certs.args(hap.run_args());
        args.leader_elect = true;
        args.lease_name = lease.clone();
        args.lease_namespace = hap.claims_ns.clone();
        args.identity = Some(id.into());
        args
    };
    let a = Operator::start_with(&hap.client, replica("replica-a")).await;
    eventually(Duration::from_secs(30), "replica-a leading", || async {
        (a.handle.metrics.leader.get() == 1).then_some(())
    })
    .await;
    let b = Operator::start_with(&hap.client, replica("replica-b")).await;
    let url = |op: &Operator| {
        format!(
            "https://{}/mutate/shoots",
            op.handle.webhook.get().expect("webhook")
        )
    };
    // gardener-apiserver calls the webhooks registered in the garden's kube-apiserver.
    let _to_a = WebhookRegistration::register_in(
        &garden_kubeconfig,
        "Shoot",
        &url(&a),
        &certs.ca_bundle(),
        &scope,
        json!({"matchLabels": {REQUEST: "true", "hap-test/replica": "a"}}),
    );
    let _to_b = WebhookRegistration::register_in(
        &garden_kubeconfig,
        "Shoot",
        &url(&b),
        &certs.ca_bundle(),
        &scope,
        json!({"matchLabels": {REQUEST: "true", "hap-test/replica": "b"}}),
    );

    let shoots = api(&hap.garden, &hap.bindings_ns, &shoot_resource());
    let pp = PostParams::default();
    let create = |name: &'static str, l: Value| {
        let (shoots, hap) = (shoots.clone(), &hap);
        async move {
            let obj = request(hap, name, l).await;
            shoots.create(&PostParams::default(), &obj).await
        }
    };
    let claim_of = |name: &str| format!("shoot.{}.{name}", hap.bindings_ns);

    // Dedicated (via the standby), EU (via the leader), shared: as the rules say.
    let sa = create("s-a", labels(&scope, Some("ga-1"), "aws", "cf-us10", "b"))
        .await
        .expect("s-a");
    let ba = binding_of(&sa).expect("s-a has a binding");
    assert!(ba.starts_with("aws-") && !ba.starts_with("aws-eu"), "{ba}");
    assert_eq!(
        hap.labels(&ba).await.get("tenantName").map(String::as_str),
        Some("ga-1")
    );
    assert_eq!(hap.bound(&claim_of("s-a")).await, ba);
    let sb = create("s-b", labels(&scope, Some("ga-1"), "aws", "cf-eu11", "a"))
        .await
        .expect("s-b");
    assert_eq!(binding_of(&sb).as_deref(), Some("aws-eu-1"));
    let st = create("s-t", labels(&scope, Some("ga-t"), "trial", "cf-us10", "b"))
        .await
        .expect("s-t");
    assert_eq!(binding_of(&st).as_deref(), Some("trial-1"));
    assert!(!hap.labels("trial-1").await.contains_key("tenantName"));
    assert_eq!(
        b.handle.metrics.leader.get(),
        0,
        "the standby served, the leader decided"
    );

    // Multi-account: a second account for the tenant's second cluster.
    let m1 = create(
        "s-m1",
        labels(&scope, Some("ga-multi"), "aws", "cf-us10", "a"),
    )
    .await
    .expect("s-m1");
    let m2 = create(
        "s-m2",
        labels(&scope, Some("ga-multi"), "aws", "cf-us10", "b"),
    )
    .await
    .expect("s-m2");
    assert_ne!(binding_of(&m1), binding_of(&m2));

    // Exhausted: denied, nothing claimed.
    let msg = denial(create("s-e", labels(&scope, Some("ga-2"), "aws", "cf-us10", "a")).await);
    assert!(msg.contains("PoolExhausted"), "{msg}");
    eventually(Duration::from_secs(30), "no claim for s-e", || async {
        hap.claims()
            .get_opt(&claim_of("s-e"))
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // Not opted in: untouched (it names its own binding, as Gardener requires).
    let p = profile(&hap.garden, "aws").await;
    let own: DynamicObject = serde_json::from_value(shoot_object(
        &hap.bindings_ns,
        "s-own",
        &ba,
        BindingRef::CredentialsBinding,
        &p,
    ))
    .expect("shoot");
    let own = shoots.create(&pp, &own).await.expect("s-own");
    assert_eq!(binding_of(&own).as_deref(), Some(ba.as_str()));
    assert!(
        hap.claims()
            .get_opt(&claim_of("s-own"))
            .await
            .expect("read")
            .is_none()
    );

    // A dry run claims nothing (Gardener's validation then refuses a Shoot without a binding;
    // the webhook's warning says what a real request would do).
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let obj = request(
        &hap,
        "s-d",
        labels(&scope, Some("ga-9"), "aws", "cf-us10", "a"),
    )
    .await;
    let _ = shoots.create(&dry, &obj).await;
    assert!(
        hap.claims()
            .get_opt(&claim_of("s-d"))
            .await
            .expect("read")
            .is_none()
    );
    assert!(
        hap.labels("aws-3")
            .await
            .get("tenantName")
            .is_none_or(|t| t != "ga-9")
    );

    // A bad request: denied naming the field.
    let msg = denial(create("s-bad", labels(&scope, None, "aws", "cf-us10", "b")).await);
    assert!(
        msg.contains("metadata.labels['accountpool.io/global-account']"),
        "{msg}"
    );

    // Moving the binding: denied (Gardener itself would allow it).
    let moved = shoots
        .patch(
            "s-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"credentialsBindingName": "aws-eu-1"}})),
        )
        .await;
    match moved {
        Err(kube::Error::Api(s)) => assert!(
            s.message.contains(&format!(
                "spec.credentialsBindingName cannot change from `{ba}`"
            )),
            "{}",
            s.message
        ),
        other => panic!("expected a denial, got {other:?}"),
    }

    // A HapConfig change moves nothing.
    hap.apply_config(
        &["aws", "trial(shared)"],
        json!({"plans": {"trial": {"providerFromRequest": true}}, "requestSources": source}),
    )
    .await;
    hap.config_condition("Ready", "True").await;
    let c = hap.claims().get(&claim_of("s-b")).await.expect("claim s-b");
    assert_eq!(
        c.status.as_ref().and_then(|s| s.phase),
        Some(ClaimPhase::Bound)
    );
    assert_eq!(
        c.status.and_then(|s| s.credentials_binding_name).as_deref(),
        Some("aws-eu-1")
    );
    assert_eq!(
        binding_of(&shoots.get("s-b").await.expect("s-b")).as_deref(),
        Some("aws-eu-1")
    );

    // Deleting the Shoot releases its binding (aws-eu-1 has no other cluster).
    hap.delete_shoot("s-b").await;
    until("aws-eu-1 released", || async {
        hap.labels("aws-eu-1")
            .await
            .get("dirty")
            .map(String::as_str)
            == Some("true")
    })
    .await;
    until("s-b's claim gone", || async {
        hap.claims()
            .get_opt(&claim_of("s-b"))
            .await
            .ok()
            .flatten()
            .is_none()
    })
    .await;
    b.stop().await;
    a.stop().await;
}

/// A legacy landscape (`bindingKind: SecretBinding`): the webhook writes `spec.secretBindingName`,
/// which gardener-apiserver accepts below Kubernetes 1.34.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shoots_get_secret_binding_names_in_a_secret_binding_landscape() {
    let scope = unique("sbshoot");
    let hap = Hap::without_operator(
        &["aws"],
        json!({"bindingKind": "SecretBinding",
            "requestSources": [{"id": "shoots", "kind": "Shoot", "matchLabels": {REQUEST: "true", SCOPE_LABEL: scope}}]}),
    )
    .await;
    support::garden::create_secret_binding(
        &hap.garden,
        &hap.bindings_ns,
        "sb-1",
        "aws",
        &[("hyperscalerType", "aws")],
    )
    .await;
    let (ok, _, err) = support::kubectl(&[
        "label",
        "namespace",
        &hap.bindings_ns,
        &format!("{SCOPE_LABEL}={scope}"),
    ]);
    assert!(ok, "{err}");
    let certs = Certs::new();
    let op = Operator::start_with(&hap.client, certs.args(hap.run_args())).await;
    let url = format!(
        "https://{}/mutate/shoots",
        op.handle.webhook.get().expect("webhook")
    );
    let _hook = WebhookRegistration::register(
        "Shoot",
        &url,
        &certs.ca_bundle(),
        &scope,
        json!({"matchLabels": {REQUEST: "true"}}),
    );
    let p = profile(&hap.garden, "aws").await;
    let mut obj = shoot_object(&hap.bindings_ns, "sb-s", "", BindingRef::SecretBinding, &p);
    obj["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("secretBindingName");
    obj["metadata"]["labels"] = labels(&scope, Some("ga-1"), "aws", "cf-us10", "a");
    let created = api(&hap.garden, &hap.bindings_ns, &shoot_resource())
        .create(
            &PostParams::default(),
            &serde_json::from_value(obj).expect("shoot"),
        )
        .await
        .expect("admitted");
    assert_eq!(
        created.data.pointer("/spec/secretBindingName"),
        Some(&json!("sb-1"))
    );
    assert!(
        created
            .data
            .pointer("/spec/credentialsBindingName")
            .is_none()
    );
    op.stop().await;
}
