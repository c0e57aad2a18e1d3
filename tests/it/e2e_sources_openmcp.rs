//! openmcp Clusters as requests, end to end on the real control plane: the admission webhook adds
//! a `<cluster>--hap` ClusterConfig reference to each matching Cluster (a generated-name Cluster
//! gets a reference of its own and its claim once it exists), the operator creates that
//! ClusterConfig with a patch that sets the Shoot's binding once the claim is Bound, keeps it as
//! it should be, and releases when the Cluster and its Shoot are gone. Never a finalizer on the
//! Cluster.

use crate::support;

use hap_operator::sources::naming::openmcp_shoot_name;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::platform::{
    Certs, SCOPE_LABEL, WebhookRegistration, api, cluster_config_resource, cluster_resource,
    install_platform_crds, scoped_namespace_named, until,
};
use support::{Hap, unique};

fn cluster(
    ns: &str,
    name: Option<&str>,
    project: Option<&str>,
    purposes: &[&str],
    tenancy: &str,
) -> DynamicObject {
    // Each test's Clusters carry their namespace as the scope its source selects.
    let mut meta = json!({"namespace": ns, "labels": {SCOPE_LABEL: ns}});
    match name {
        Some(n) => meta["name"] = json!(n),
        None => meta["generateName"] = json!("workload-"),
    }
    if let Some(p) = project {
        meta["labels"]["metadata.open-control-plane.io/project"] = json!(p);
    }
    serde_json::from_value(json!({
        "apiVersion": "clusters.openmcp.cloud/v1alpha1",
        "kind": "Cluster",
        "metadata": meta,
        "spec": {"profile": "default.gardener.gcp", "purposes": purposes, "tenancy": tenancy, "kubernetes": {"version": "1.33"}},
    }))
    .expect("cluster")
}

fn configs_of(c: &DynamicObject) -> Vec<String> {
    c.data
        .pointer("/spec/clusterConfigs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn patched_binding(cfg: &DynamicObject) -> Option<String> {
    cfg.data
        .pointer("/spec/patches")?
        .as_array()?
        .iter()
        .find(|p| p["path"] == "/spec/credentialsBindingName")
        .and_then(|p| p["value"].as_str().map(String::from))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openmcp_clusters_get_their_binding_through_a_clusterconfig() {
    install_platform_crds().await;
    let scope = unique("mcp");
    let ns_name = unique("platform");
    let mut hap = Hap::without_operator(
        &["gcp", "gcp(PR=cf-eu11, euAccess)", "trial(shared)"],
        json!({
            "plans": {"trial": {"providerFromRequest": true}},
            "multiHyperscalerAccount": {"allowedGlobalAccounts": ["multi"], "limits": {"gcp": 1}},
            // The first matching source serves: trial Clusters (a propagated label) first.
            "requestSources": [
                {
                    "id": "mcp-trial",
                    "kind": "Cluster",
                    "matchLabels": {SCOPE_LABEL: ns_name, "metadata.open-control-plane.io/plan": "trial"},
                    "request": {"plan": {"constant": "trial"}, "provider": {"constant": "gcp"}},
                },
                {
                    "id": "mcp",
                    "kind": "Cluster",
                    "matchLabels": {SCOPE_LABEL: ns_name},
                    "matchPurposes": [{"operator": "ContainsAny", "values": ["mcp", "workload"]}],
                    "request": {"plan": {"constant": "gcp"}},
                },
            ],
        }),
    )
    .await;
    for b in ["gcp-1", "gcp-2", "gcp-3", "gcp-4", "gcp-5"] {
        hap.binding(b, "gcp", &[("hyperscalerType", "gcp")]).await;
    }
    hap.binding(
        "gcp-eu-1",
        "gcp",
        &[("hyperscalerType", "gcp_cf-eu11"), ("euAccess", "true")],
    )
    .await;
    hap.binding(
        "trial-gcp-1",
        "gcp",
        &[("hyperscalerType", "gcp"), ("shared", "true")],
    )
    .await;
    let certs = Certs::new();
    hap.operator =
        Some(support::Operator::start_with(&hap.client, certs.args(hap.run_args())).await);
    let addr = hap
        .operator
        .as_ref()
        .and_then(|o| o.handle.webhook.get())
        .expect("webhook");
    let ns = scoped_namespace_named(&hap.client, &ns_name, &scope).await;
    let _hook = WebhookRegistration::register(
        "Cluster",
        &format!("https://{addr}/mutate/clusters"),
        &certs.ca_bundle(),
        &scope,
        json!({}),
    );
    let clusters = api(&hap.client, &ns, &cluster_resource());
    let configs = api(&hap.client, &ns, &cluster_config_resource());
    let pp = PostParams::default();

    // A named Cluster: reference at admission, claim bound, ClusterConfig with the binding.
    let c1 = clusters
        .create(
            &pp,
            &cluster(&ns, Some("c1"), Some("acme"), &["mcp"], "Exclusive"),
        )
        .await
        .expect("c1 admitted");
    assert_eq!(configs_of(&c1), vec!["c1--hap".to_string()]);
    assert!(
        c1.metadata.finalizers.is_none(),
        "never a finalizer on the Cluster"
    );
    let claim = format!("cluster.{ns}.c1");
    let bound = hap.bound(&claim).await;
    let spec = hap.claims().get(&claim).await.expect("claim").spec;
    assert_eq!(spec.global_account, "acme");
    assert_eq!(
        spec.shoot_name.as_deref(),
        Some(openmcp_shoot_name(&ns, "c1", &Default::default()).as_str())
    );
    until("ClusterConfig c1--hap", || async {
        configs
            .get_opt("c1--hap")
            .await
            .ok()
            .flatten()
            .and_then(|c| patched_binding(&c))
            == Some(bound.clone())
    })
    .await;

    // EU, shared and multi-account pools, as the rules say.
    let with = |name: &str, project: &str, extra: Value| {
        let mut c = cluster(&ns, Some(name), Some(project), &["mcp"], "Exclusive");
        for (k, v) in extra.as_object().into_iter().flatten() {
            c.metadata
                .labels
                .get_or_insert_default()
                .insert(k.clone(), v.as_str().unwrap_or_default().into());
        }
        c
    };
    let eu_label = json!({"metadata.open-control-plane.io/platform-region": "cf-eu11"});
    clusters
        .create(&pp, &with("eu", "eu-acme", eu_label))
        .await
        .expect("eu admitted");
    assert_eq!(hap.bound(&format!("cluster.{ns}.eu")).await, "gcp-eu-1");
    let trial_label = json!({"metadata.open-control-plane.io/plan": "trial"});
    clusters
        .create(&pp, &with("tr", "trial-co", trial_label))
        .await
        .expect("tr admitted");
    assert_eq!(hap.bound(&format!("cluster.{ns}.tr")).await, "trial-gcp-1");
    let tr = hap
        .claims()
        .get(&format!("cluster.{ns}.tr"))
        .await
        .expect("claim");
    assert_eq!(
        tr.metadata
            .labels
            .unwrap_or_default()
            .get("accountpool.io/source-id")
            .map(String::as_str),
        Some("mcp-trial")
    );
    assert!(!hap.labels("trial-gcp-1").await.contains_key("tenantName"));
    clusters
        .create(&pp, &with("m1", "multi", json!({})))
        .await
        .expect("m1 admitted");
    clusters
        .create(&pp, &with("m2", "multi", json!({})))
        .await
        .expect("m2 admitted");
    let (m1, m2) = (
        hap.bound(&format!("cluster.{ns}.m1")).await,
        hap.bound(&format!("cluster.{ns}.m2")).await,
    );
    assert_ne!(
        m1, m2,
        "a limit of one cluster per account: a second account"
    );

    // Someone edits or deletes it: the operator puts it back (it owns it).
    configs
        .patch(
            "c1--hap",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"patches": []}})),
        )
        .await
        .expect("edit");
    until("ClusterConfig restored", || async {
        configs
            .get_opt("c1--hap")
            .await
            .ok()
            .flatten()
            .and_then(|c| patched_binding(&c))
            == Some(bound.clone())
    })
    .await;

    // Dropping the reference is denied.
    let dropped = clusters
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusterConfigs": []}})),
        )
        .await;
    match dropped {
        Err(kube::Error::Api(s)) => {
            assert!(s.message.contains("must keep `c1--hap`"), "{}", s.message)
        }
        other => panic!("expected a denial, got {other:?}"),
    }

    // A Cluster with a generated name: its own reference now, its claim once it exists.
    let g = clusters
        .create(
            &pp,
            &cluster(&ns, None, Some("acme"), &["workload"], "Exclusive"),
        )
        .await
        .expect("generated admitted");
    let gname = g.metadata.name.clone().expect("name");
    let gcfg = configs_of(&g);
    assert_eq!(gcfg.len(), 1);
    assert!(gcfg[0].starts_with("workload-hap-"), "{gcfg:?}");
    assert_eq!(
        hap.bound(&format!("cluster.{ns}.{gname}")).await,
        bound,
        "one tenant, one account"
    );
    until("the generated Cluster's ClusterConfig", || async {
        configs
            .get_opt(&gcfg[0])
            .await
            .ok()
            .flatten()
            .and_then(|c| patched_binding(&c))
            == Some(bound.clone())
    })
    .await;

    // Not matching (purposes, shared tenancy): untouched.
    let p = clusters
        .create(
            &pp,
            &cluster(&ns, Some("plat"), Some("acme"), &["platform"], "Exclusive"),
        )
        .await
        .expect("platform admitted");
    assert!(configs_of(&p).is_empty());
    let s = clusters
        .create(
            &pp,
            &cluster(&ns, Some("shared"), Some("acme"), &["mcp"], "Shared"),
        )
        .await
        .expect("shared admitted");
    assert!(configs_of(&s).is_empty());

    // A bad request is denied naming the field; a dry run claims nothing.
    match clusters
        .create(&pp, &cluster(&ns, Some("bad"), None, &["mcp"], "Exclusive"))
        .await
    {
        Err(kube::Error::Api(s)) => assert!(
            s.message
                .contains("metadata.labels['metadata.open-control-plane.io/project']"),
            "{}",
            s.message
        ),
        other => panic!("expected a denial, got {other:?}"),
    }
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    clusters
        .create(
            &dry,
            &cluster(&ns, Some("dry"), Some("other"), &["mcp"], "Exclusive"),
        )
        .await
        .expect("dry run admitted");
    assert!(
        hap.claims()
            .get_opt(&format!("cluster.{ns}.dry"))
            .await
            .expect("read")
            .is_none()
    );

    // A HapConfig change never moves an assigned binding.
    hap.apply_config(
        &["gcp(euAccess=*)"],
        json!({"requestSources": [{"id": "mcp", "kind": "Cluster", "matchLabels": {SCOPE_LABEL: ns}, "request": {"plan": {"constant": "gcp"}}}]}),
    )
    .await;
    hap.config_condition("Ready", "True").await;
    assert_eq!(hap.bound(&claim).await, bound);
    let cfg = configs.get("c1--hap").await.expect("c1--hap");
    assert_eq!(patched_binding(&cfg), Some(bound.clone()));

    // Release: the Cluster goes; its claim waits for the Shoot the provider made, then the
    // binding is released and the ClusterConfig removed.
    let c2 = clusters
        .create(
            &pp,
            &cluster(&ns, Some("c2"), Some("globex"), &["mcp"], "Exclusive"),
        )
        .await
        .expect("c2 admitted");
    let b2 = hap.bound(&format!("cluster.{ns}.c2")).await;
    assert!(
        ![bound.as_str(), m1.as_str(), m2.as_str()].contains(&b2.as_str()),
        "globex got its own account"
    );
    until("ClusterConfig c2--hap", || async {
        configs.get_opt("c2--hap").await.ok().flatten().is_some()
    })
    .await;
    let shoot = openmcp_shoot_name(&ns, "c2", &Default::default());
    hap.shoot(&shoot, &b2).await;
    clusters
        .delete("c2", &DeleteParams::default())
        .await
        .expect("delete c2");
    drop(c2);
    until("c2's claim deleting and its ClusterConfig gone", || async {
        let deleting = hap
            .claims()
            .get_opt(&format!("cluster.{ns}.c2"))
            .await
            .ok()
            .flatten()
            .is_some_and(|c| c.metadata.deletion_timestamp.is_some());
        deleting && configs.get_opt("c2--hap").await.ok().flatten().is_none()
    })
    .await;
    assert!(!hap.labels(&b2).await.contains_key("dirty"));
    hap.delete_shoot(&shoot).await;
    until("c2's binding released", || async {
        hap.labels(&b2).await.get("dirty").map(String::as_str) == Some("true")
    })
    .await;
    hap.stop_operator().await;
}
