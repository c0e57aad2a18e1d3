//! Kyma Runtimes as requests, end to end on the real control plane: the operator's admission
//! webhook (TLS, called by kube-apiserver) fills `spec.shoot.secretBindingName` with a binding
//! the rules chose through an AccountClaim, denies what it cannot serve naming the field, never
//! claims in a dry run, refuses to move a set binding, adopts Runtimes that name their binding,
//! and releases when the Runtime and its Shoot are gone. Two replicas serve while one decides.

use crate::support;

use std::time::Duration;

use hap_operator::api::{ClaimPhase, Decision};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::platform::{
    Certs, RuntimeSpec, SCOPE_LABEL, WebhookRegistration, api, install_platform_crds, runtime,
    runtime_binding, runtime_resource, scoped_namespace, until,
};
use support::{Hap, eventually, unique};

const RULES: [&str; 2] = ["aws(euAccess=*)", "trial(shared)"];

fn rt<'a>(name: &'a str, ga: &'a str, plan: &'a str, pr: &'a str) -> RuntimeSpec<'a> {
    RuntimeSpec {
        name,
        global_account: Some(ga),
        plan,
        platform_region: pr,
        region: "eu-central-1",
        provider: "aws",
        binding: "",
        extra_labels: &[],
    }
}

async fn denial(result: Result<kube::api::DynamicObject, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kyma_runtimes_get_bindings_chosen_by_the_rules() {
    install_platform_crds().await;
    let scope = unique("kyma");
    let mut hap = Hap::without_operator(
        &RULES,
        json!({
            "plans": {"trial": {"providerFromRequest": true}},
            "multiHyperscalerAccount": {"allowedGlobalAccounts": ["ga-multi"], "limits": {"aws": 1}},
            "requestSources": [{
                "id": "kyma",
                "kind": "Runtime",
                "matchLabels": {SCOPE_LABEL: scope},
                "matchExpressions": [{"key": "hap-test/skip", "operator": "DoesNotExist"}],
            }],
        }),
    )
    .await;
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
    let certs = Certs::new();
    let args = certs.args(hap.run_args());
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
    let create = |r: RuntimeSpec<'_>| {
        let (runtimes, obj) = (runtimes.clone(), runtime(&ns, &scope, &r));
        async move { runtimes.create(&PostParams::default(), &obj).await }
    };
    let claim_of = |name: &str| format!("runtime.{ns}.{name}");

    // Dedicated, EU and shared pools, each as the rules say.
    create(rt("rt-a", "ga-1", "aws", "cf-us10"))
        .await
        .expect("rt-a admitted");
    let a = runtime_binding(&hap.client, &ns, "rt-a").await;
    assert!(
        a.starts_with("aws-") && !a.starts_with("aws-eu"),
        "rt-a got {a}"
    );
    assert_eq!(
        hap.labels(&a).await.get("tenantName").map(String::as_str),
        Some("ga-1")
    );
    assert_eq!(hap.bound(&claim_of("rt-a")).await, a);
    create(rt("rt-b", "ga-1", "aws", "cf-eu11"))
        .await
        .expect("rt-b admitted");
    assert_eq!(runtime_binding(&hap.client, &ns, "rt-b").await, "aws-eu-1");
    create(rt("rt-c", "ga-t", "trial", "cf-us10"))
        .await
        .expect("rt-c admitted");
    assert_eq!(runtime_binding(&hap.client, &ns, "rt-c").await, "trial-1");
    assert!(!hap.labels("trial-1").await.contains_key("tenantName"));

    // Multi-account: with a limit of one cluster per account the tenant's second cluster gets a
    // second account.
    create(rt("rt-m1", "ga-multi", "aws", "cf-us10"))
        .await
        .expect("rt-m1");
    create(rt("rt-m2", "ga-multi", "aws", "cf-us10"))
        .await
        .expect("rt-m2");
    let (m1, m2) = (
        runtime_binding(&hap.client, &ns, "rt-m1").await,
        runtime_binding(&hap.client, &ns, "rt-m2").await,
    );
    assert_ne!(m1, m2);
    for b in [&m1, &m2] {
        assert_eq!(
            hap.labels(b).await.get("tenantName").map(String::as_str),
            Some("ga-multi")
        );
    }

    // Pool exhausted: denied with the reason, and nothing claimed.
    let msg = denial(create(rt("rt-e", "ga-2", "aws", "cf-us10")).await).await;
    assert!(msg.contains("PoolExhausted"), "{msg}");
    eventually(
        Duration::from_secs(30),
        "the refused claim removed",
        || async {
            hap.claims()
                .get_opt(&claim_of("rt-e"))
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;

    // A Runtime no source matches is untouched.
    let skip = [("hap-test/skip", "yes")];
    create(RuntimeSpec {
        extra_labels: &skip,
        ..rt("rt-x", "ga-1", "aws", "cf-us10")
    })
    .await
    .expect("rt-x admitted");
    assert_eq!(runtime_binding(&hap.client, &ns, "rt-x").await, "");

    // A dry run claims nothing.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let out = runtimes
        .create(
            &dry,
            &runtime(&ns, &scope, &rt("rt-d", "ga-9", "aws", "cf-us10")),
        )
        .await
        .expect("dry run admitted");
    assert_eq!(
        out.data.pointer("/spec/shoot/secretBindingName"),
        Some(&json!(""))
    );
    assert!(
        hap.claims()
            .get_opt(&claim_of("rt-d"))
            .await
            .expect("read")
            .is_none()
    );

    // A bad request is denied naming the field.
    let msg = denial(
        create(RuntimeSpec {
            global_account: None,
            ..rt("rt-bad", "", "aws", "cf-us10")
        })
        .await,
    )
    .await;
    assert!(
        msg.contains("metadata.labels['kyma-project.io/global-account-id']"),
        "{msg}"
    );
    assert!(msg.contains("globalAccount"), "{msg}");
    assert!(
        hap.claims()
            .get_opt(&claim_of("rt-bad"))
            .await
            .expect("read")
            .is_none()
    );

    // Moving a set binding is denied.
    let moved = runtimes
        .patch(
            "rt-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"shoot": {"secretBindingName": "aws-3"}}})),
        )
        .await;
    let msg = match moved {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!("expected a denial, got {other:?}"),
    };
    assert!(
        msg.contains(&format!(
            "spec.shoot.secretBindingName cannot change from `{a}` to `aws-3`"
        )),
        "{msg}"
    );

    // Adoption: a Runtime that names its binding is recorded, and reported when the binding is
    // not the tenant's.
    let named = RuntimeSpec {
        binding: &a,
        ..rt("rt-own", "ga-1", "aws", "cf-us10")
    };
    create(named).await.expect("rt-own admitted");
    let foreign = RuntimeSpec {
        binding: &a,
        ..rt("rt-foreign", "ga-3", "aws", "cf-us10")
    };
    create(foreign).await.expect("rt-foreign admitted");
    assert_eq!(hap.bound(&claim_of("rt-own")).await, a);
    let own = hap.claims().get(&claim_of("rt-own")).await.expect("claim");
    assert_eq!(own.status.and_then(|s| s.decision), Some(Decision::Adopted));
    let msg = hap
        .ready_reason(&claim_of("rt-foreign"), "BindingNotTenant")
        .await;
    assert!(msg.contains("tenantName=ga-1, not ga-3"), "{msg}");

    // A HapConfig change never moves an assigned binding.
    hap.apply_config(
        &["aws", "trial(shared)"],
        json!({
            "plans": {"trial": {"providerFromRequest": true}},
            "requestSources": [{"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}}],
        }),
    )
    .await;
    hap.config_condition("Ready", "True").await;
    assert_eq!(runtime_binding(&hap.client, &ns, "rt-b").await, "aws-eu-1");
    let b = hap
        .claims()
        .get(&claim_of("rt-b"))
        .await
        .expect("claim rt-b");
    assert_eq!(
        b.status.as_ref().and_then(|s| s.phase),
        Some(ClaimPhase::Bound)
    );
    assert_eq!(
        b.status.and_then(|s| s.credentials_binding_name).as_deref(),
        Some("aws-eu-1")
    );

    // Release: the Runtime goes, its claim waits for the Shoot, then the binding is dirty.
    hap.shoot("rt-b", "aws-eu-1").await;
    runtimes
        .delete("rt-b", &DeleteParams::default())
        .await
        .expect("delete rt-b");
    until("the claim of rt-b deleting", || async {
        hap.claims()
            .get_opt(&claim_of("rt-b"))
            .await
            .ok()
            .flatten()
            .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
    })
    .await;
    assert!(
        !hap.labels("aws-eu-1").await.contains_key("dirty"),
        "released while its Shoot exists"
    );
    hap.delete_shoot("rt-b").await;
    until("aws-eu-1 released", || async {
        hap.labels("aws-eu-1")
            .await
            .get("dirty")
            .map(String::as_str)
            == Some("true")
    })
    .await;
    until("the claim of rt-b gone", || async {
        hap.claims()
            .get_opt(&claim_of("rt-b"))
            .await
            .ok()
            .flatten()
            .is_none()
    })
    .await;

    // `kubectl hap claims` shows which object each claim serves.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hap"))
        .args(["claims", "-n", &hap.claims_ns, "-o", "json"])
        .env("KUBECONFIG", support::kubeconfig())
        .output()
        .expect("hap claims");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    let a_row = rows
        .iter()
        .find(|r| r["name"] == claim_of("rt-a"))
        .expect("rt-a's claim listed");
    assert_eq!(a_row["source"], "kyma");
    assert_eq!(a_row["sourceObject"], format!("Runtime {ns}/rt-a"));
    assert_eq!(a_row["binding"], json!(a));

    // The source reports what it serves.
    until("the source status", || async {
        hap.config_status()
            .await
            .request_sources
            .iter()
            .any(|s| s.id == "kyma" && s.watching && s.bound >= 5 && s.pending == 1)
    })
    .await;
    hap.stop_operator().await;
}

/// Found by review: a Runtime created naming a free binding is adopted only once a person labels
/// the binding, so its claim stays Pending `BindingNotTenant` and records no binding; nothing
/// kept the binding out of selection until KIM created the Runtime's Shoot, and another
/// tenant's claim got it (two tenants on one account once the Shoot landed). The named binding
/// counts as used from the moment the Runtime's claim exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_naming_a_free_binding_keeps_it_from_other_tenants_before_its_shoot_exists() {
    install_platform_crds().await;
    let scope = unique("kyma-named");
    let mut hap = Hap::without_operator(
        &["aws"],
        json!({"requestSources": [{"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}}]}),
    )
    .await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    let certs = Certs::new();
    let args = certs.args(hap.run_args());
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
    let named = RuntimeSpec {
        binding: "aws-1",
        ..rt("rt-named", "ga-1", "aws", "cf-us10")
    };
    runtimes
        .create(&PostParams::default(), &runtime(&ns, &scope, &named))
        .await
        .expect("rt-named admitted");
    let msg = hap
        .ready_reason(&format!("runtime.{ns}.rt-named"), "BindingNotTenant")
        .await;
    assert!(msg.contains("carries no tenantName"), "{msg}");

    hap.claim(
        "other-tenant",
        json!({"globalAccount": "ga-2", "plan": "aws"}),
    )
    .await;
    let msg = hap.ready_reason("other-tenant", "PoolExhausted").await;
    assert!(msg.contains("used by a cluster"), "{msg}");
    assert!(
        !hap.labels("aws-1").await.contains_key("tenantName"),
        "aws-1 stays without a tenant"
    );
    hap.stop_operator().await;
}
