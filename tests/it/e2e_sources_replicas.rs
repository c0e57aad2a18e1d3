//! Two operator replicas serve the request-source webhooks while one decides: each replica's
//! webhook is called for half of the Runtimes (split by an object selector), the standby's calls
//! create claims that the leader binds, and every Runtime gets one binding of the rules' pool.

use crate::support;

use std::time::Duration;

use kube::api::PostParams;
use serde_json::json;
use support::platform::{
    Certs, RuntimeSpec, SCOPE_LABEL, WebhookRegistration, api, install_platform_crds, runtime,
    runtime_binding, runtime_resource, scoped_namespace,
};
use support::{Hap, Operator, eventually, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_serve_the_webhook_while_one_decides() {
    install_platform_crds().await;
    let scope = unique("two");
    let hap = Hap::without_operator(
        &["azure"],
        json!({"requestSources": [
            {"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}},
            {"id": "mcp", "kind": "Cluster", "matchLabels": {SCOPE_LABEL: scope}, "request": {"plan": {"constant": "azure"}}},
        ]}),
    )
    .await;
    for i in 0..6 {
        hap.binding(&format!("az-{i}"), "azure", &[("hyperscalerType", "azure")])
            .await;
    }
    let certs = Certs::new();
    let lease = unique("lease");
    let replica = |id: &str| {
        let mut args = certs.args(hap.run_args());
        args.leader_elect = true;
        args.lease_name = lease.clone();
        args.lease_namespace = hap.claims_ns.clone();
        args.identity = Some(id.to_string());
        args
    };
    let a = Operator::start_with(&hap.client, replica("replica-a")).await;
    eventually(Duration::from_secs(30), "replica-a leading", || async {
        (a.handle.metrics.leader.get() == 1).then_some(())
    })
    .await;
    let b = Operator::start_with(&hap.client, replica("replica-b")).await;
    assert_eq!(b.handle.metrics.leader.get(), 0, "replica-b is the standby");
    let ns = scoped_namespace(&hap.client, "kcp", &scope).await;
    let url = |op: &Operator| {
        format!(
            "https://{}/mutate/runtimes",
            op.handle.webhook.get().expect("webhook")
        )
    };
    let cluster_url = |op: &Operator| {
        format!(
            "https://{}/mutate/clusters",
            op.handle.webhook.get().expect("webhook")
        )
    };
    let _clusters_to_a = WebhookRegistration::register(
        "Cluster",
        &cluster_url(&a),
        &certs.ca_bundle(),
        &scope,
        json!({"matchLabels": {"hap-test/replica": "a"}}),
    );
    let _clusters_to_b = WebhookRegistration::register(
        "Cluster",
        &cluster_url(&b),
        &certs.ca_bundle(),
        &scope,
        json!({"matchLabels": {"hap-test/replica": "b"}}),
    );
    let _to_a = WebhookRegistration::register(
        "Runtime",
        &url(&a),
        &certs.ca_bundle(),
        &scope,
        json!({"matchLabels": {"hap-test/replica": "a"}}),
    );
    let _to_b = WebhookRegistration::register(
        "Runtime",
        &url(&b),
        &certs.ca_bundle(),
        &scope,
        json!({"matchLabels": {"hap-test/replica": "b"}}),
    );
    let runtimes = api(&hap.client, &ns, &runtime_resource());
    for (i, via) in ["a", "b", "b", "a"].iter().enumerate() {
        let name = format!("rt-{i}");
        let ga = format!("ga-{i}");
        let labels = [("hap-test/replica", *via)];
        let spec = RuntimeSpec {
            name: &name,
            global_account: Some(&ga),
            plan: "azure",
            platform_region: "cf-eu20",
            region: "westeurope",
            provider: "azure",
            binding: "",
            extra_labels: &labels,
        };
        runtimes
            .create(&PostParams::default(), &runtime(&ns, &scope, &spec))
            .await
            .unwrap_or_else(|e| panic!("{name} via replica {via}: {e}"));
    }
    let mut bindings = Vec::new();
    for i in 0..4 {
        let b = runtime_binding(&hap.client, &ns, &format!("rt-{i}")).await;
        assert!(b.starts_with("az-"), "rt-{i} got `{b}`");
        bindings.push(b);
    }
    bindings.sort();
    bindings.dedup();
    assert_eq!(bindings.len(), 4, "four tenants, four accounts");
    // openmcp Clusters through either replica: a ClusterConfig each, decided by the leader.
    let clusters = api(&hap.client, &ns, &support::platform::cluster_resource());
    let configs = api(
        &hap.client,
        &ns,
        &support::platform::cluster_config_resource(),
    );
    for (i, via) in ["a", "b"].iter().enumerate() {
        let c: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
            "metadata": {"name": format!("c-{i}"), "namespace": ns, "labels": {
                SCOPE_LABEL: scope, "hap-test/replica": via, "metadata.open-control-plane.io/project": format!("p-{i}")}},
            "spec": {"profile": "azure", "purposes": ["mcp"], "tenancy": "Exclusive"},
        }))
        .expect("cluster");
        clusters
            .create(&PostParams::default(), &c)
            .await
            .unwrap_or_else(|e| panic!("c-{i} via replica {via}: {e}"));
    }
    for i in 0..2 {
        let name = format!("c-{i}--hap");
        eventually(
            Duration::from_secs(30),
            &format!("ClusterConfig {name}"),
            || async { configs.get_opt(&name).await.ok().flatten().map(|_| ()) },
        )
        .await;
    }

    // Read from the /metrics exposition, as Prometheus would.
    let served = |op: &Operator, kind: &str| {
        op.handle
            .metrics
            .encode()
            .lines()
            .find(|l| {
                l.starts_with("hap_admission_duration_seconds_count")
                    && l.contains(&format!(r#"kind="{kind}""#))
                    && l.contains(r#"outcome="patched""#)
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(
        served(&a, "Runtime"),
        2,
        "the leader's webhook patched its two Runtimes"
    );
    assert_eq!(
        served(&b, "Runtime"),
        2,
        "the standby's webhook patched its two Runtimes"
    );
    assert_eq!(
        served(&a, "Cluster"),
        1,
        "the leader's webhook patched its Cluster"
    );
    assert_eq!(
        served(&b, "Cluster"),
        1,
        "the standby's webhook patched its Cluster"
    );
    assert_eq!(
        b.handle.metrics.leader.get(),
        0,
        "the standby never decided"
    );
    // One config in force per replica: the leader's webhook and controllers resolved the one
    // generation many times, and it was compiled once; so was the standby's.
    let compiles = |op: &Operator| {
        op.handle
            .metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix("hap_config_compiles_total "))
            .and_then(|v| v.parse::<u64>().ok())
    };
    assert_eq!(compiles(&a), Some(1), "the leader compiled the config once");
    assert_eq!(
        compiles(&b),
        Some(1),
        "the standby compiled the config once"
    );
    b.stop().await;
    a.stop().await;
}
