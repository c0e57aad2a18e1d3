//! The webhook's answer while the HapConfig in force is paused, per request-source kind, on the
//! real API server: a new Runtime and a new openmcp Cluster are refused with 403 `Paused` (the
//! Shoot's case is in tests/it/e2e_lifecycle.rs), and nothing is claimed for them.

use crate::support;

use kube::api::{DynamicObject, PostParams};
use serde_json::json;
use support::platform::{
    Certs, RuntimeSpec, SCOPE_LABEL, WebhookRegistration, api, cluster_resource,
    install_platform_crds, runtime, runtime_resource, scoped_namespace, scoped_namespace_named,
};
use support::{Hap, unique};

/// The create was refused because the config is paused: 403, reason `Paused`, retry later.
fn assert_paused(kind: &str, result: Result<DynamicObject, kube::Error>) {
    match result {
        Err(kube::Error::Api(s)) => {
            assert_eq!(
                (s.code, s.reason.as_str()),
                (403, "Paused"),
                "{kind}: {s:?}"
            );
            assert!(
                s.message.contains("is paused (spec.paused: true")
                    && s.message.contains(&format!("no new {kind} gets"))
                    && s.message.contains("Retry"),
                "{kind}: {}",
                s.message
            );
        }
        other => panic!("{kind}: expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_paused_the_webhook_refuses_new_runtimes_and_clusters_with_paused() {
    install_platform_crds().await;
    let scope = unique("paused");
    let platform_ns = unique("platform");
    let mut hap = Hap::without_operator(
        &["aws", "gcp"],
        json!({
            "paused": true,
            "requestSources": [
                {"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}},
                {"id": "mcp", "kind": "Cluster", "matchLabels": {SCOPE_LABEL: platform_ns},
                 "request": {"plan": {"constant": "gcp"}}},
            ],
        }),
    )
    .await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.binding("gcp-1", "gcp", &[("hyperscalerType", "gcp")])
        .await;
    let certs = Certs::new();
    hap.operator =
        Some(support::Operator::start_with(&hap.client, certs.args(hap.run_args())).await);
    hap.config_condition("Paused", "True").await;
    let addr = hap
        .operator
        .as_ref()
        .and_then(|o| o.handle.webhook.get())
        .expect("webhook address");
    let kcp = scoped_namespace(&hap.client, "kcp", &scope).await;
    let platform = scoped_namespace_named(&hap.client, &platform_ns, &scope).await;
    let _runtimes_hook = WebhookRegistration::register(
        "Runtime",
        &format!("https://{addr}/mutate/runtimes"),
        &certs.ca_bundle(),
        &scope,
        json!({}),
    );
    let _clusters_hook = WebhookRegistration::register(
        "Cluster",
        &format!("https://{addr}/mutate/clusters"),
        &certs.ca_bundle(),
        &scope,
        json!({}),
    );
    let pp = PostParams::default();
    let rt = runtime(
        &kcp,
        &scope,
        &RuntimeSpec {
            name: "rt-1",
            global_account: Some("ga-1"),
            plan: "aws",
            platform_region: "cf-us10",
            region: "eu-central-1",
            provider: "aws",
            binding: "",
            extra_labels: &[],
        },
    );
    assert_paused(
        "Runtime",
        api(&hap.client, &kcp, &runtime_resource())
            .create(&pp, &rt)
            .await,
    );
    let cluster: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "clusters.openmcp.cloud/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": platform, "labels": {
            SCOPE_LABEL: platform, "metadata.open-control-plane.io/project": "acme"}},
        "spec": {"profile": "default.gardener.gcp", "purposes": ["mcp"], "tenancy": "Exclusive",
                 "kubernetes": {"version": "1.33"}},
    }))
    .expect("cluster");
    assert_paused(
        "Cluster",
        api(&hap.client, &platform, &cluster_resource())
            .create(&pp, &cluster)
            .await,
    );
    let claims = hap
        .claims()
        .list(&Default::default())
        .await
        .expect("claims");
    assert!(claims.items.is_empty(), "{:?}", claims.items);
    for b in ["aws-1", "gcp-1"] {
        assert!(!hap.labels(b).await.contains_key("tenantName"), "{b}");
    }
}
