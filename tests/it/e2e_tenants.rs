//! Tenant authorization (`spec.tenants`) on the real control plane and the real gardener-apiserver:
//! each test is an attack that succeeded before the policy existed — a Runtime from a foreign
//! namespace took another tenant's binding, fabricated Shoots burnt bindings, an AccountClaim
//! adopted another tenant's binding — and now ends `TenantNotAllowed` with no claim and no
//! binding touched.

use crate::support;

use std::collections::BTreeMap;

use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::garden::shoot_resource;
use support::platform::{
    Certs, RuntimeSpec, SCOPE_LABEL, WebhookRegistration, api, cluster_resource,
    install_platform_crds, kubectl_at, runtime, runtime_binding, runtime_resource,
    scoped_namespace, scoped_namespace_named,
};
use support::shoot_hook::{REQUEST, request_labels, request_shoot, serve_shoots, shoot_source};
use support::{Hap, Operator, unique};

fn denial(result: Result<DynamicObject, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!("expected a denial, got {other:?}"),
    }
}

/// Every binding of the pool that carries a tenant or is marked dirty: what a request can touch.
async fn touched(hap: &Hap) -> BTreeMap<String, BTreeMap<String, String>> {
    let list = support::bindings_api(&hap.garden, &hap.bindings_ns)
        .list(&ListParams::default())
        .await
        .expect("list bindings");
    list.items
        .into_iter()
        .filter_map(|b| {
            let labels = b.metadata.labels.clone().unwrap_or_default();
            (labels.contains_key("tenantName") || labels.contains_key("dirty"))
                .then(|| (b.metadata.name.clone().unwrap_or_default(), labels))
        })
        .collect()
}

async fn claim_names(hap: &Hap) -> Vec<String> {
    hap.claims()
        .list(&ListParams::default())
        .await
        .expect("list claims")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect()
}

/// (a) A Runtime in a namespace the policy does not allow for that global account asked for the
/// global account of another tenant and was handed that tenant's binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_from_a_foreign_namespace_cannot_take_another_tenants_binding() {
    install_platform_crds().await;
    let scope = unique("tenants");
    let mut hap = Hap::without_operator(&["aws"], json!({})).await;
    let kcp = scoped_namespace(&hap.client, "kcp", &scope).await;
    let foreign = scoped_namespace(&hap.client, "foreign", &scope).await;
    hap.apply_config(
        &["aws"],
        json!({
            "requestSources": [{"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}}],
            "tenants": {"rules": [
                {"name": "keb", "kinds": ["Runtime"], "namespaces": [kcp]},
                {"name": "people", "kinds": ["AccountClaim"]},
            ]},
        }),
    )
    .await;
    // The victim's binding: already labelled for its tenant, so a request for that global
    // account is served from it.
    hap.binding(
        "victim-1",
        "aws",
        &[("hyperscalerType", "aws"), ("tenantName", "ga-victim")],
    )
    .await;
    hap.binding("aws-free", "aws", &[("hyperscalerType", "aws")])
        .await;
    let certs = Certs::new();
    hap.operator = Some(Operator::start_with(&hap.client, certs.args(hap.run_args())).await);
    let addr = hap
        .operator
        .as_ref()
        .and_then(|o| o.handle.webhook.get())
        .expect("webhook address");
    let _hook = WebhookRegistration::register(
        "Runtime",
        &format!("https://{addr}/mutate/runtimes"),
        &certs.ca_bundle(),
        &scope,
        json!({}),
    );
    let spec = |name| RuntimeSpec {
        name,
        global_account: Some("ga-victim"),
        plan: "aws",
        platform_region: "cf-us10",
        region: "eu-central-1",
        provider: "aws",
        binding: "",
        extra_labels: &[],
    };
    let before = touched(&hap).await;

    let attack = api(&hap.client, &foreign, &runtime_resource())
        .create(
            &PostParams::default(),
            &runtime(&foreign, &scope, &spec("rt-x")),
        )
        .await;
    let message = denial(attack);
    assert!(
        message.contains("TenantNotAllowed") && message.contains("rule `keb`"),
        "names the reason and the rule: {message}"
    );
    assert!(claim_names(&hap).await.is_empty(), "no claim was created");
    assert_eq!(touched(&hap).await, before, "no binding touched");

    // The namespace the policy allows is served, from the tenant's own binding.
    api(&hap.client, &kcp, &runtime_resource())
        .create(
            &PostParams::default(),
            &runtime(&kcp, &scope, &spec("rt-ok")),
        )
        .await
        .expect("allowed Runtime admitted");
    assert_eq!(
        runtime_binding(&hap.client, &kcp, "rt-ok").await,
        "victim-1"
    );
}

/// A Shoot that asks for its binding: opted in, tenant and plan labels, no binding name.
async fn shoot_request(hap: &Hap, name: &str, scope: &str, ga: &str) -> DynamicObject {
    request_shoot(hap, name, None, request_labels(scope, ga)).await
}

/// (b) Twenty Shoots with fabricated global accounts each took (and later burnt) a binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fabricated_global_accounts_on_shoots_touch_no_binding() {
    let scope = unique("tenants");
    let mut hap = Hap::without_operator(
        &["aws"],
        json!({
            "requestSources": shoot_source(&scope),
            "tenants": {"rules": [
                {"name": "known-tenants", "kinds": ["Shoot"], "globalAccounts": ["ga-real"]},
            ]},
        }),
    )
    .await;
    for i in 0..21 {
        hap.binding(&format!("aws-{i:02}"), "aws", &[("hyperscalerType", "aws")])
            .await;
    }
    let _hook = serve_shoots(&mut hap, &scope).await;
    let shoots = api(&hap.garden, &hap.bindings_ns, &shoot_resource());
    let before = touched(&hap).await;
    let mut refused = 0;
    for i in 0..20 {
        let obj = shoot_request(
            &hap,
            &format!("fake-{i:02}"),
            &scope,
            &format!("ga-fake-{i}"),
        )
        .await;
        let message = denial(shoots.create(&PostParams::default(), &obj).await);
        assert!(message.contains("TenantNotAllowed"), "{message}");
        refused += 1;
    }
    assert_eq!(refused, 20);
    assert!(claim_names(&hap).await.is_empty(), "no claim was created");
    assert_eq!(touched(&hap).await, before, "no binding touched");

    // The listed tenant is served.
    let ok = shoots
        .create(
            &PostParams::default(),
            &shoot_request(&hap, "real", &scope, "ga-real").await,
        )
        .await
        .expect("the listed tenant's Shoot is admitted");
    let binding: Option<&Value> = ok.data.pointer("/spec/credentialsBindingName");
    assert!(
        binding
            .and_then(Value::as_str)
            .is_some_and(|b| b.starts_with("aws-"))
    );
}

/// (c) An AccountClaim named another tenant's binding in `spec.adoptBinding` and was bound to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_claim_may_adopt_a_binding_only_where_the_policy_allows() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    hap.apply_config(
        &["aws"],
        json!({"tenants": {"rules": [
            {"name": "team", "kinds": ["AccountClaim"], "namespaces": [hap.claims_ns]},
            {"name": "migration", "kinds": ["AccountClaim"], "namespaces": ["kcp-system"], "adoptBinding": true},
        ]}}),
    )
    .await;
    hap.binding(
        "victim-1",
        "aws",
        &[("hyperscalerType", "aws"), ("tenantName", "ga-victim")],
    )
    .await;
    hap.binding("aws-free", "aws", &[("hyperscalerType", "aws")])
        .await;
    let hap = hap.with_operator().await;
    let before = hap.labels("victim-1").await;

    hap.claim(
        "adopt",
        json!({"globalAccount": "ga-victim", "plan": "aws", "adoptBinding": "victim-1"}),
    )
    .await;
    let message = hap.ready_reason("adopt", "TenantNotAllowed").await;
    assert!(
        message.contains("rule `team`") && message.contains("adoptBinding"),
        "{message}"
    );
    assert_eq!(hap.labels("victim-1").await, before, "binding untouched");
    let claim = hap.claims().get("adopt").await.expect("claim");
    let status = claim.status.expect("status");
    assert_eq!(status.phase, Some(hap_operator::api::ClaimPhase::Failed));
    assert!(status.credentials_binding_name.is_none());
    let events = kubectl_at(
        &support::kubeconfig(),
        &[
            "get",
            "events",
            "-n",
            &hap.claims_ns,
            "--field-selector",
            "involvedObject.name=adopt",
            "-o",
            "json",
        ],
        None,
    );
    assert!(
        events.1.contains("TenantNotAllowed"),
        "an event says so: {}",
        events.1
    );

    // A fresh claim from the allowed namespace is served.
    hap.claim("fresh", json!({"globalAccount": "ga-team", "plan": "aws"}))
        .await;
    assert_eq!(hap.bound("fresh").await, "aws-free");
}

/// The API server refuses what the policy cannot mean: users or groups on a rule that covers
/// AccountClaims (they are known at admission only), and two rules of one name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_refuses_a_policy_that_cannot_hold() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    let refused = |tenants: Value| {
        let spec =
            json!({"bindingNamespace": hap.bindings_ns, "rules": ["aws"], "tenants": tenants});
        let body = json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig",
            "metadata": {"name": hap.config}, "spec": spec});
        let configs = hap.configs();
        async move {
            let cfg: hap_operator::api::HapConfig = serde_json::from_value(body).expect("config");
            let pp = kube::api::PatchParams::apply("kubectl").force();
            match configs
                .patch(
                    &cfg.metadata.name.clone().unwrap_or_default(),
                    &pp,
                    &kube::api::Patch::Apply(&cfg),
                )
                .await
            {
                Err(kube::Error::Api(s)) => s.message,
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
    };
    let m = refused(
        json!({"rules": [{"name": "keb", "users": ["system:serviceaccount:kcp-system:keb"]}]}),
    )
    .await;
    assert!(
        m.contains("users and groups are known at admission only"),
        "{m}"
    );
    let m = refused(json!({"rules": [{"name": "a"}, {"name": "a", "kinds": ["Shoot"]}]})).await;
    assert!(m.contains("every name must be unique"), "{m}");
}

/// The group openmcp's scheduler is in, for the tests: the rule names it.
const OPENMCP_GROUP: &str = "hap-test:openmcp";
/// Impersonated requesters: both pass RBAC (system:masters); only the tenant policy tells them
/// apart.
const MASTERS: &str = "system:masters";

/// An openmcp Cluster the test's source serves, for the victim's global account.
fn mcp_cluster(ns: &str, name: Option<&str>, configs: &[&str]) -> DynamicObject {
    let mut meta = json!({"namespace": ns, "labels": {SCOPE_LABEL: ns,
        "metadata.open-control-plane.io/project": "ga-victim"}});
    match name {
        Some(n) => meta["name"] = json!(n),
        None => meta["generateName"] = json!("workload-"),
    }
    let mut spec = json!({"profile": "default.gardener.gcp", "purposes": ["mcp"],
        "tenancy": "Exclusive", "kubernetes": {"version": "1.33"}});
    if !configs.is_empty() {
        spec["clusterConfigs"] = json!(
            configs
                .iter()
                .map(|c| json!({"name": c}))
                .collect::<Vec<_>>()
        );
    }
    serde_json::from_value(json!({"apiVersion": "clusters.openmcp.cloud/v1alpha1",
        "kind": "Cluster", "metadata": meta, "spec": spec}))
    .expect("cluster")
}

/// (d) The source pass creates the claim of a Cluster whose name the API server generates, of
/// one created with its `<name>--hap` reference already listed, and of one an UPDATE gives the
/// reference; none of the three went through the policy, so anyone who may create Clusters
/// could claim for, or reuse, any tenant's binding. Each is refused at admission now, and the
/// allowed requester is served on each path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openmcp_clusters_of_a_requester_the_policy_does_not_allow_are_refused_on_every_path() {
    install_platform_crds().await;
    let scope = unique("tenants");
    let ns_name = unique("platform");
    let mut hap = Hap::without_operator(
        &["gcp"],
        json!({
            "requestSources": [{"id": "mcp", "kind": "Cluster", "matchLabels": {SCOPE_LABEL: ns_name},
                "request": {"plan": {"constant": "gcp"}}}],
            "tenants": {"rules": [{"name": "openmcp", "kinds": ["Cluster"], "groups": [OPENMCP_GROUP]}]},
        }),
    )
    .await;
    hap.binding(
        "victim-1",
        "gcp",
        &[("hyperscalerType", "gcp"), ("tenantName", "ga-victim")],
    )
    .await;
    hap.binding("gcp-free", "gcp", &[("hyperscalerType", "gcp")])
        .await;
    let certs = Certs::new();
    hap.operator = Some(Operator::start_with(&hap.client, certs.args(hap.run_args())).await);
    let addr = hap
        .operator
        .as_ref()
        .and_then(|o| o.handle.webhook.get())
        .expect("webhook address");
    let ns = scoped_namespace_named(&hap.client, &ns_name, &scope).await;
    let pp = PostParams::default();
    // Two Clusters made before the webhook was registered: served by the source, no reference.
    let admin = api(&hap.client, &ns, &cluster_resource());
    for name in ["old-a", "old-b"] {
        admin
            .create(&pp, &mcp_cluster(&ns, Some(name), &[]))
            .await
            .expect("a Cluster before the webhook");
    }
    let _hook = WebhookRegistration::register(
        "Cluster",
        &format!("https://{addr}/mutate/clusters"),
        &certs.ca_bundle(),
        &scope,
        json!({}),
    );
    let kubeconfig = support::kubeconfig();
    let mallory = support::client_as(&kubeconfig, "mallory", &[MASTERS]).await;
    let scheduler =
        support::client_as(&kubeconfig, "openmcp-scheduler", &[MASTERS, OPENMCP_GROUP]).await;
    let as_mallory = api(&mallory, &ns, &cluster_resource());
    let as_scheduler = api(&scheduler, &ns, &cluster_resource());
    let before = touched(&hap).await;
    let refused = |what: &str, result: Result<DynamicObject, kube::Error>| {
        let message = denial(result);
        assert!(
            message.contains("TenantNotAllowed") && message.contains("rule `openmcp`"),
            "{what}: names the reason and the rule: {message}"
        );
    };

    refused(
        "generateName",
        as_mallory.create(&pp, &mcp_cluster(&ns, None, &[])).await,
    );
    refused(
        "reference listed at creation",
        as_mallory
            .create(&pp, &mcp_cluster(&ns, Some("pre"), &["pre--hap"]))
            .await,
    );
    let add_reference = |name: &str| {
        Patch::Merge(json!({"spec": {"clusterConfigs": [{"name": format!("{name}--hap")}]}}))
    };
    refused(
        "an UPDATE that adds the reference",
        as_mallory
            .patch("old-a", &PatchParams::default(), &add_reference("old-a"))
            .await,
    );
    refused(
        "a named Cluster",
        as_mallory
            .create(&pp, &mcp_cluster(&ns, Some("named"), &[]))
            .await,
    );
    // A record of an admission decision the requester writes itself is not taken.
    let mut forged = mcp_cluster(&ns, None, &[]);
    forged
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("accountpool.io/tenant-rule".into(), "openmcp".into());
    refused(
        "generateName with a forged record",
        as_mallory.create(&pp, &forged).await,
    );
    assert!(claim_names(&hap).await.is_empty(), "no claim was created");
    assert_eq!(touched(&hap).await, before, "no binding touched");

    // The allowed requester is served on each path, from the tenant's binding.
    let g = as_scheduler
        .create(&pp, &mcp_cluster(&ns, None, &[]))
        .await
        .expect("the scheduler's generated Cluster is admitted");
    let gname = g.metadata.name.clone().expect("name");
    assert_eq!(
        hap.bound(&format!("cluster.{ns}.{gname}")).await,
        "victim-1"
    );
    as_scheduler
        .create(&pp, &mcp_cluster(&ns, Some("pre"), &["pre--hap"]))
        .await
        .expect("the scheduler's referenced Cluster is admitted");
    assert_eq!(hap.bound(&format!("cluster.{ns}.pre")).await, "victim-1");
    as_scheduler
        .patch("old-b", &PatchParams::default(), &add_reference("old-b"))
        .await
        .expect("the scheduler's UPDATE is admitted");
    assert_eq!(hap.bound(&format!("cluster.{ns}.old-b")).await, "victim-1");
    as_scheduler
        .create(&pp, &mcp_cluster(&ns, Some("named"), &[]))
        .await
        .expect("the scheduler's named Cluster is admitted");
    assert_eq!(hap.bound(&format!("cluster.{ns}.named")).await, "victim-1");
    assert!(
        !hap.labels("gcp-free").await.contains_key("tenantName"),
        "the free binding stays free"
    );
}

/// Runtimes and Shoots are served through the claim the webhook creates: a user the rules do
/// not name is refused there, and the user they name is served — the claim carries the
/// webhook's decision, so the operator's own check lets it through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimes_and_shoots_are_served_only_for_the_users_the_policy_names() {
    install_platform_crds().await;
    let scope = unique("tenants");
    let mut hap = Hap::without_operator(&["aws"], json!({})).await;
    let kcp = scoped_namespace(&hap.client, "kcp", &scope).await;
    hap.apply_config(
        &["aws"],
        json!({
            "requestSources": [
                {"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}},
                {"id": "shoots", "kind": "Shoot", "matchLabels": {REQUEST: "true", SCOPE_LABEL: scope}},
            ],
            "tenants": {"rules": [
                {"name": "keb", "kinds": ["Runtime"], "users": ["keb"]},
                {"name": "gardener-users", "kinds": ["Shoot"], "groups": ["hap-test:shoot-makers"]},
            ]},
        }),
    )
    .await;
    for i in 0..2 {
        hap.binding(&format!("aws-{i}"), "aws", &[("hyperscalerType", "aws")])
            .await;
    }
    let served = serve_shoots(&mut hap, &scope).await;
    let garden_kubeconfig = support::shoot_hook::garden_kubeconfig(&hap);
    let _runtimes = served.register("Runtime", "/mutate/runtimes", &scope, json!({}));
    let kubeconfig = support::kubeconfig();
    let spec = |name| RuntimeSpec {
        name,
        global_account: Some("ga-1"),
        plan: "aws",
        platform_region: "cf-us10",
        region: "eu-central-1",
        provider: "aws",
        binding: "",
        extra_labels: &[],
    };
    let before = touched(&hap).await;
    let mallory = support::client_as(&kubeconfig, "mallory", &[MASTERS]).await;
    let message = denial(
        api(&mallory, &kcp, &runtime_resource())
            .create(
                &PostParams::default(),
                &runtime(&kcp, &scope, &spec("rt-x")),
            )
            .await,
    );
    assert!(
        message.contains("TenantNotAllowed") && message.contains("user `mallory` is not listed"),
        "{message}"
    );
    let garden_mallory = support::client_as(&garden_kubeconfig, "mallory", &[MASTERS]).await;
    let shoot = shoot_request(&hap, "sx", &scope, "ga-2").await;
    let message = denial(
        api(&garden_mallory, &hap.bindings_ns, &shoot_resource())
            .create(&PostParams::default(), &shoot)
            .await,
    );
    assert!(message.contains("TenantNotAllowed"), "{message}");
    assert!(claim_names(&hap).await.is_empty(), "no claim was created");
    assert_eq!(touched(&hap).await, before, "no binding touched");

    let keb = support::client_as(&kubeconfig, "keb", &[MASTERS]).await;
    api(&keb, &kcp, &runtime_resource())
        .create(
            &PostParams::default(),
            &runtime(&kcp, &scope, &spec("rt-ok")),
        )
        .await
        .expect("KEB's Runtime is admitted");
    assert!(
        runtime_binding(&hap.client, &kcp, "rt-ok")
            .await
            .starts_with("aws-")
    );
    let maker = support::client_as(
        &garden_kubeconfig,
        "alice",
        &[MASTERS, "hap-test:shoot-makers"],
    )
    .await;
    let ok = api(&maker, &hap.bindings_ns, &shoot_resource())
        .create(
            &PostParams::default(),
            &shoot_request(&hap, "sok", &scope, "ga-2").await,
        )
        .await
        .expect("the shoot maker's Shoot is admitted");
    assert!(
        ok.data
            .pointer("/spec/credentialsBindingName")
            .and_then(Value::as_str)
            .is_some_and(|b| b.starts_with("aws-"))
    );
}
