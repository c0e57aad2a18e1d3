//! End-to-end (real kube-apiserver): the HapConfig lifecycle — status through /status,
//! last-known-good on an invalid change, missing pools, the singleton, printer columns.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_writes_observed_generation_and_ready() {
    let hap = Hap::new(&["aws", "gcp(PR=cf-sa30)"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.binding("ksa-1", "gcp", &[("hyperscalerType", "gcp_cf-sa30")])
        .await;
    let ready = hap.config_condition("Ready", "True").await;
    assert_eq!(ready.reason, "Ready");
    let st = hap.config_status().await;
    assert_eq!(st.observed_generation, Some(1));
    assert_eq!(st.active_generation, Some(1));
    assert_eq!(st.rule_count, Some(2));
    assert!(
        condition(&st.conditions, "Reconciling").is_none()
            && condition(&st.conditions, "Stalled").is_none()
    );
    // Status went through the status subresource under the operator's field manager only.
    let cfg = hap.configs().get(&hap.config).await.unwrap();
    let managers: Vec<(String, Option<String>)> = cfg
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| (m.manager.unwrap_or_default(), m.subresource))
        .collect();
    assert!(
        managers.contains(&("hap-operator".into(), Some("status".into()))),
        "{managers:?}"
    );
    assert!(
        !managers
            .iter()
            .any(|(m, sub)| m == "hap-operator" && sub.is_none()),
        "operator must not own spec: {managers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_change_keeps_last_valid_generation_serving() {
    let hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.binding("aws-2", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.config_condition("Ready", "True").await;

    hap.apply_config(&["aws", "aws(PR=)", "azurre"], json!({}))
        .await;
    let rules_valid = hap.config_condition("RulesValid", "False").await;
    assert!(
        rules_valid.message.contains("rule 2") && rules_valid.message.contains("rule 3"),
        "every error named: {}",
        rules_valid.message
    );
    assert!(
        rules_valid.message.contains("azure"),
        "did-you-mean hint: {}",
        rules_valid.message
    );
    let stalled = hap.config_condition("Stalled", "True").await;
    assert!(!stalled.message.is_empty());
    let st = hap.config_status().await;
    assert_eq!(st.observed_generation, Some(2));
    assert_eq!(st.active_generation, Some(1), "generation 1 keeps serving");

    // The last valid rules still serve claims.
    hap.claim("c1", json!({"globalAccount": "ga-1", "plan": "aws"}))
        .await;
    let b = hap.bound("c1").await;
    assert!(b.starts_with("aws-"));

    // ... and survive an operator restart while the current generation is still invalid.
    let mut hap = hap;
    hap.stop_operator().await;
    hap.start_operator().await;
    hap.claim("c2", json!({"globalAccount": "ga-2", "plan": "aws"}))
        .await;
    hap.bound("c2").await;
    assert_eq!(hap.config_status().await.active_generation, Some(1));

    // A fix brings the new generation into force and clears Stalled.
    hap.apply_config(&["aws", "aws(PR=cf-eu11)"], json!({}))
        .await;
    hap.config_condition("RulesValid", "True").await;
    let st = hap.config_status().await;
    assert_eq!(st.active_generation, Some(3));
    assert!(condition(&st.conditions, "Stalled").is_none());
}

/// Attack (issue 20 item 6): whoever may patch `hapconfigs/status` writes a made-up rule into
/// `status.activeSpec` while the spec is invalid — even under the operator's field manager name,
/// which any client may choose — and waits for a restart. The restarted operator must serve the
/// last valid generation it recorded itself, never the injected rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_active_spec_is_not_served_after_a_restart() {
    let mut hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.binding("gcp-1", "gcp", &[("hyperscalerType", "gcp")])
        .await;
    hap.config_condition("Ready", "True").await;
    hap.apply_config(&["aws", "azurre"], json!({})).await;
    hap.config_condition("RulesValid", "False").await;
    hap.stop_operator().await;

    let forged = json!({"status": {"activeGeneration": 1, "activeSpec": {
        "bindingNamespace": hap.bindings_ns, "rules": ["aws", "gcp"]}}});
    let pp = kube::api::PatchParams {
        field_manager: Some("hap-operator".into()),
        ..Default::default()
    };
    hap.configs()
        .patch_status(&hap.config, &pp, &kube::api::Patch::Merge(&forged))
        .await
        .expect("patch status");
    hap.start_operator().await;

    hap.claim("aws-claim", json!({"globalAccount": "ga-a", "plan": "aws"}))
        .await;
    assert_eq!(
        hap.bound("aws-claim").await,
        "aws-1",
        "the recorded rules serve"
    );
    hap.claim("gcp-claim", json!({"globalAccount": "ga-g", "plan": "gcp"}))
        .await;
    hap.ready_reason("gcp-claim", "NoMatchingRule").await;
    let labels = hap.labels("gcp-1").await;
    assert!(
        !labels.contains_key("tenantName"),
        "the injected rule claimed gcp-1: {labels:?}"
    );
    let st = hap.config_status().await;
    let served = st.active_spec.and_then(|s| s.rules).unwrap_or_default();
    assert_eq!(
        served,
        vec!["aws".to_string()],
        "status shows what is served"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_pool_is_reported_without_invalidating_rules() {
    let hap = Hap::new(
        &["aws", "azure", "sap-converged-cloud(CR=*, shared)"],
        json!({}),
    )
    .await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    let pools = hap.config_condition("PoolsAvailable", "False").await;
    assert_eq!(pools.reason, "MissingPool");
    assert!(pools.message.contains("azure"), "{}", pools.message);
    assert!(
        !pools.message.contains("sap-converged-cloud"),
        "wildcard entries need no pool: {}",
        pools.message
    );
    hap.config_condition("RulesValid", "True").await;
    // Adding the pool clears it.
    hap.binding("azure-1", "azure", &[("hyperscalerType", "azure")])
        .await;
    hap.config_condition("PoolsAvailable", "True").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_wait_for_a_missing_config_and_bind_once_it_exists() {
    let client = client().await;
    let bindings_ns = project(&client).await;
    let claims_ns = namespace(&client, "claims").await;
    let mut hap = Hap {
        garden: client.clone(),
        garden_kubeconfig: None,
        client,
        config: unique("hap"),
        bindings_ns,
        claims_ns,
        operator: None,
    };
    hap.start_operator().await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.claim("c1", json!({"globalAccount": "ga-1", "plan": "aws"}))
        .await;
    let msg = hap.ready_reason("c1", "ConfigMissing").await;
    assert!(msg.contains(&hap.config), "{msg}");
    hap.apply_config(&["aws"], json!({})).await;
    assert_eq!(hap.bound("c1").await, "aws-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_hap_shows_the_columns() {
    let hap = Hap::new(&["aws", "trial(shared)"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.binding("aws-2", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.binding(
        "trial-1",
        "aws",
        &[("hyperscalerType", "aws"), ("shared", "true")],
    )
    .await;
    hap.claim(
        "c1",
        json!({"globalAccount": "ga-1", "plan": "aws", "shootName": "shoot-1"}),
    )
    .await;
    let binding = hap.bound("c1").await;
    hap.config_condition("Ready", "True").await;
    let line = eventually(Duration::from_secs(30), "Claimed column = 1", || async {
        let (ok, out, _) = kubectl(&["get", "hapconfig", &hap.config, "--no-headers"]);
        let cols: Vec<String> = out.split_whitespace().map(String::from).collect();
        (ok && cols.get(1..5)
            == Some(&["True".to_string(), "2".into(), "1".into(), "1".into()][..]))
        .then_some(out)
    })
    .await;
    assert!(line.starts_with(&hap.config), "{line}");
    let (ok, out, err) = kubectl(&["get", "hap", "-n", &hap.claims_ns]);
    assert!(ok, "{err}");
    let header = out
        .lines()
        .find(|l| l.contains("PHASE"))
        .unwrap_or_default()
        .to_string();
    for col in ["PHASE", "GLOBAL-ACCOUNT", "PLAN", "BINDING", "TYPE", "AGE"] {
        assert!(header.contains(col), "{col} missing in {header}");
    }
    let row = out
        .lines()
        .find(|l| l.contains("accountclaim"))
        .unwrap_or_default()
        .to_string();
    for cell in ["Bound", "ga-1", "aws", binding.as_str()] {
        assert!(row.contains(cell), "{cell} missing in {row}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_binding_namespace_retargets_the_watch() {
    let hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("aws-old", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.claim("c1", json!({"globalAccount": "ga-1", "plan": "aws"}))
        .await;
    assert_eq!(hap.bound("c1").await, "aws-old");
    // A second Gardener project; the config moves there.
    let project = project(&hap.client).await;
    create_binding(
        &hap.client,
        &project,
        "aws-new",
        "aws",
        &[("hyperscalerType", "aws")],
    )
    .await;
    hap.apply_config(&["aws"], json!({"bindingNamespace": project}))
        .await;
    hap.config_condition("Ready", "True").await;
    hap.claim("c2", json!({"globalAccount": "ga-2", "plan": "aws"}))
        .await;
    assert_eq!(hap.bound("c2").await, "aws-new");
    let st = hap.claims().get("c2").await.unwrap().status.unwrap();
    assert_eq!(st.binding_namespace.as_deref(), Some(project.as_str()));
    let labels = binding_labels(&hap.client, &project, "aws-new").await;
    assert_eq!(labels.get("tenantName").map(String::as_str), Some("ga-2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_config_keeps_bound_claims_and_holds_new_ones() {
    let hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.claim("bound", json!({"globalAccount": "ga-1", "plan": "aws"}))
        .await;
    assert_eq!(hap.bound("bound").await, "aws-1");
    let (ok, _, err) = kubectl(&["delete", "hapconfig", &hap.config]);
    assert!(ok, "{err}");
    hap.claim("new", json!({"globalAccount": "ga-2", "plan": "aws"}))
        .await;
    hap.ready_reason("new", "ConfigMissing").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let st = hap.claims().get("bound").await.unwrap().status.unwrap();
    assert_eq!(st.phase, Some(hap_operator::api::ClaimPhase::Bound));
    assert_eq!(st.credentials_binding_name.as_deref(), Some("aws-1"));
    // The config comes back: the waiting claim binds, the bound one never moved.
    hap.apply_config(&["aws"], json!({})).await;
    hap.binding("aws-2", "aws", &[("hyperscalerType", "aws")])
        .await;
    assert_eq!(hap.bound("new").await, "aws-2");
    assert_eq!(hap.bound("bound").await, "aws-1");
}
