//! End-to-end (real kube-apiserver and gardener-apiserver): a deny entry that targets global
//! accounts (issue 20, KEB's operation blocklist `GA=` / `GA!=`). With
//! `aws(GA!=GA-Open) deny "plan {plan} is closed for {globalAccount}"` in force, a Shoot of a
//! tenant the entry does not exempt is refused at admission with the message filled in, an
//! AccountClaim of that tenant ends `Denied` with the same message in its status, and the exempt
//! tenant (written in another case) gets its binding both ways; `hap explain` says the same.

use crate::support;

use hap_operator::api::ClaimPhase;
use kube::api::PostParams;
use serde_json::{Value, json};
use support::garden::shoot_resource;
use support::platform::api;
use support::shoot_hook::{refused, request_labels, request_shoot, serve_shoots, shoot_source};
use support::{Hap, unique};

const DENY: &str = r#"aws(GA!=GA-Open) deny "plan {plan} is closed for {globalAccount}""#;

/// `hap explain --live` of this HapConfig for a tenant, as JSON.
fn explain(hap: &Hap, ga: &str) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hap"))
        .args(["explain", "--live", "--config", &hap.config, "-o", "json"])
        .args(["--plan", "aws", "--platform-region", "cf-us10"])
        .args(["--global-account", ga])
        .env("KUBECONFIG", support::kubeconfig())
        .env(
            "HAP_GARDEN_KUBECONFIG",
            hap.garden_kubeconfig.as_ref().expect("garden"),
        )
        .output()
        .expect("run hap explain");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_entry_for_global_accounts_refuses_shoots_and_claims_of_those_tenants() {
    let scope = unique("deny-ga");
    let source = shoot_source(&scope);
    // Shoots live in the separate garden (the test environment's gardener-apiserver runs there).
    let mut hap = Hap::without_operator_with_separate_garden(
        &["aws", DENY],
        json!({"requestSources": source}),
    )
    .await;
    for b in ["aws-1", "aws-2"] {
        hap.binding(b, "aws", &[("hyperscalerType", "aws")]).await;
    }
    let _hook = serve_shoots(&mut hap, &scope).await;
    let shoots = api(&hap.garden, &hap.bindings_ns, &shoot_resource());
    let pp = PostParams::default();

    // Admission: the tenant the entry does not exempt is refused with the message filled in.
    let closed = request_shoot(&hap, "s-closed", None, request_labels(&scope, "ga-closed")).await;
    let message = refused(shoots.create(&pp, &closed).await, "Forbidden");
    assert!(
        message.contains("Denied")
            && message.contains("for global account `ga-closed`: plan aws is closed for ga-closed"),
        "{message}"
    );
    // The exempt tenant, written in another case than the entry, gets its binding.
    let open = shoots
        .create(
            &pp,
            &request_shoot(&hap, "s-open", None, request_labels(&scope, "ga-open")).await,
        )
        .await
        .expect("the exempt tenant's Shoot is admitted");
    let binding = open
        .data
        .pointer("/spec/credentialsBindingName")
        .and_then(Value::as_str)
        .expect("a binding was assigned")
        .to_string();
    assert_eq!(
        hap.labels(&binding)
            .await
            .get("tenantName")
            .map(String::as_str),
        Some("ga-open")
    );

    // AccountClaims: the same decision, in status.
    hap.claim(
        "c-closed",
        json!({"globalAccount": "GA-Closed", "plan": "aws", "platformRegion": "cf-us10"}),
    )
    .await;
    let msg = hap.ready_reason("c-closed", "Denied").await;
    assert!(
        msg.contains("for global account `GA-Closed`: plan aws is closed for GA-Closed"),
        "{msg}"
    );
    let st = hap
        .claims()
        .get("c-closed")
        .await
        .expect("claim")
        .status
        .unwrap_or_default();
    assert_eq!(st.phase, Some(ClaimPhase::Failed));
    assert_eq!(st.matched_rule.map(|m| m.index), Some(2));
    hap.claim(
        "c-open",
        json!({"globalAccount": "ga-open", "plan": "aws", "platformRegion": "cf-us10"}),
    )
    .await;
    assert_eq!(hap.bound("c-open").await, binding, "one account per tenant");
    // The denied tenant holds no binding.
    for b in ["aws-1", "aws-2"] {
        let labels = hap.labels(b).await;
        let tenant = labels.get("tenantName").map(|t| t.to_ascii_lowercase());
        assert_ne!(tenant.as_deref(), Some("ga-closed"), "{b}: {labels:?}");
    }

    // `hap explain` shows the decision for each tenant.
    let closed = explain(&hap, "ga-closed");
    assert_eq!(closed["error"]["reason"], json!("Denied"), "{closed}");
    assert_eq!(closed["error"]["index"], json!(2), "{closed}");
    assert!(
        closed["error"]["message"]
            .as_str()
            .is_some_and(|m| m.ends_with(": plan aws is closed for ga-closed")),
        "{closed}"
    );
    let open = explain(&hap, "Ga-Open");
    assert_eq!(open["hyperscalerType"], json!("aws"), "{open}");
    hap.stop_operator().await;
}

/// The CRD rejects what it can see of a structured entry's global-account condition, naming the
/// entry's field: a condition on an entry that names pools, and both lists at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_account_conditions_the_crd_can_see_are_rejected_at_apply_time() {
    let hap = Hap::without_operator_with_separate_garden(&["aws"], json!({})).await;
    let apply = |entries: &str| {
        let manifest = format!(
            "apiVersion: accountpool.io/v1alpha1\nkind: HapConfig\nmetadata: {{name: {}}}\nspec:\n  bindingNamespace: {}\n  rules: [aws]\n  structuredRules:\n{entries}",
            hap.config, hap.bindings_ns
        );
        support::kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], Some(&manifest))
    };
    let (ok, _, err) = apply(
        "    - {plan: gcp, globalAccounts: [ga-1], oneOf: [{}]}\n    - {plan: azure, globalAccounts: [ga-1], exceptGlobalAccounts: [ga-2], oneOf: []}\n    - {plan: trial, globalAccounts: [\"ga 1\"], oneOf: []}\n",
    );
    assert!(!ok, "accepted");
    assert!(
        err.contains("spec.structuredRules[0]")
            && err
                .contains("globalAccounts: only a deny entry (oneOf: []) may name global accounts"),
        "{err}"
    );
    assert!(
        err.contains("spec.structuredRules[1]")
            && err.contains("globalAccounts and exceptGlobalAccounts are mutually exclusive"),
        "{err}"
    );
    assert!(
        err.contains("spec.structuredRules[2].globalAccounts[0]"),
        "{err}"
    );
    // A structured deny entry for a tenant is accepted.
    let (ok, _, err) = apply(
        "    - {plan: gcp, exceptGlobalAccounts: [GA-1], oneOf: [], message: \"{plan} closed for {globalAccount}\"}\n",
    );
    assert!(ok, "{err}");
}
