//! End-to-end (real kube-apiserver): ordered fallback pools, deny and pins (issue 13) — fallback
//! when the first pool is exhausted and back to it for a new tenant once it is refilled, a deny
//! with its message, pinning under concurrency with two replicas and a leader hand-over, and the
//! EU/shared fallback constraints rejected at apply time with the entry and the column.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use hap_operator::api::{AccountClaim, ClaimPhase, Decision};
use kube::api::PostParams;
use serde_json::{Value, json};
use support::*;

/// `hap explain --live` against the test control plane, as JSON.
fn explain_live(hap: &Hap, args: &[&str]) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hap"))
        .args(["explain", "--live", "--config", &hap.config, "-o", "json"])
        .args(args)
        .env("KUBECONFIG", kubeconfig())
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

async fn status(hap: &Hap, name: &str) -> hap_operator::api::AccountClaimStatus {
    hap.claims()
        .get(name)
        .await
        .expect("claim")
        .status
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallback_when_the_first_pool_is_exhausted_and_back_once_it_is_refilled() {
    let rules = ["gcp", "gcp(PR=cf-sa30) | ()"];
    let hap = Hap::new(&rules, json!({})).await;
    hap.binding("ksa-1", "gcp", &[("hyperscalerType", "gcp_cf-sa30")])
        .await;
    hap.binding("gcp-1", "gcp", &[("hyperscalerType", "gcp")])
        .await;
    let ksa = |ga: &str, shoot: &str| json!({"globalAccount": ga, "plan": "gcp", "platformRegion": "cf-sa30", "shootName": shoot});
    hap.claim("t1", ksa("ga-1", "s-t1")).await;
    assert_eq!(hap.bound("t1").await, "ksa-1");
    assert_eq!(status(&hap, "t1").await.preference, Some(1));

    // The KSA pool is exhausted: explain --live says the fallback would serve, and it does.
    let live = explain_live(
        &hap,
        &[
            "--plan",
            "gcp",
            "--platform-region",
            "cf-sa30",
            "--global-account",
            "ga-2",
        ],
    );
    assert_eq!(
        (
            &live["live"]["preference"],
            &live["live"]["decision"],
            &live["live"]["binding"]
        ),
        (&json!(2), &json!("Claimed"), &json!("gcp-1")),
        "{live}"
    );
    hap.claim("t2", ksa("ga-2", "s-t2")).await;
    assert_eq!(hap.bound("t2").await, "gcp-1");
    let st = status(&hap, "t2").await;
    assert_eq!(
        (st.preference, st.decision),
        (Some(2), Some(Decision::Claimed))
    );
    assert_eq!(st.hyperscaler_type.as_deref(), Some("gcp"));
    let ready = condition(&st.conditions, "Ready")
        .expect("Ready")
        .message
        .clone();
    assert!(ready.contains("fallback preference 2"), "{ready}");
    let metrics = hap
        .operator
        .as_ref()
        .expect("operator")
        .handle
        .metrics
        .clone();
    let line = "hap_fallback_bindings_total{preference=\"2\",hyperscaler_type=\"gcp\"} 1";
    eventually(Duration::from_secs(10), "the fallback counted", || async {
        metrics.encode().lines().any(|l| l == line).then_some(())
    })
    .await;

    // The HapConfig status shows both preferences of the entry with their pools.
    let prefs = eventually(
        Duration::from_secs(30),
        "per-preference figures",
        || async {
            let st = hap.config_status().await;
            let rule = st.rules.into_iter().find(|r| r.index == 2)?;
            let claimed: Vec<i64> = rule
                .preferences
                .iter()
                .map(|p| p.pools.iter().map(|f| f.claimed).sum())
                .collect();
            (claimed == [1, 1]).then_some(rule.preferences)
        },
    )
    .await;
    assert_eq!(
        prefs
            .iter()
            .map(|p| p.hyperscaler_type.as_str())
            .collect::<Vec<_>>(),
        ["gcp_cf-sa30", "gcp"]
    );

    // The KSA pool is refilled: a new tenant gets it again; ga-2 keeps its fallback account for
    // its next cluster (apply-once: no second account), and no bound claim moves.
    hap.binding("ksa-2", "gcp", &[("hyperscalerType", "gcp_cf-sa30")])
        .await;
    hap.claim("t3", ksa("ga-3", "s-t3")).await;
    assert_eq!(hap.bound("t3").await, "ksa-2");
    assert_eq!(status(&hap, "t3").await.preference, Some(1));
    hap.claim("t2-again", ksa("ga-2", "s-t2-again")).await;
    assert_eq!(hap.bound("t2-again").await, "gcp-1");
    let st = status(&hap, "t2-again").await;
    assert_eq!(
        (st.preference, st.decision),
        (Some(2), Some(Decision::Reused))
    );

    // Reload: the fallback is dropped and the order changes; new decisions follow at once, bound
    // claims stay where they are.
    hap.apply_config(&["gcp", "gcp(PR=cf-sa30)"], json!({}))
        .await;
    hap.config_condition("Ready", "True").await;
    hap.claim("t4", ksa("ga-4", "s-t4")).await;
    let msg = hap.ready_reason("t4", "PoolExhausted").await;
    assert!(msg.contains("hyperscalerType=gcp_cf-sa30"), "{msg}");
    for (claim, binding) in [("t1", "ksa-1"), ("t2", "gcp-1"), ("t3", "ksa-2")] {
        assert_eq!(hap.bound(claim).await, binding, "{claim} moved");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_ends_the_claim_with_its_message() {
    let rules = [
        "aws",
        r#"aws(PR=cf-us21) deny "cf-us21 opens in July: its pool is being set up""#,
    ];
    let hap = Hap::new(&rules, json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.claim(
        "frozen",
        json!({"globalAccount": "ga-1", "plan": "aws", "platformRegion": "cf-us21"}),
    )
    .await;
    let msg = hap.ready_reason("frozen", "Denied").await;
    assert!(
        msg.starts_with("rule 2 `aws(PR=cf-us21) deny \"cf-us21 opens in July: its pool is being set up\"` denies plan `aws` with platform region `cf-us21`")
            && msg.contains(": cf-us21 opens in July: its pool is being set up (request: globalAccount=ga-1"),
        "{msg}"
    );
    let st = status(&hap, "frozen").await;
    assert_eq!(st.phase, Some(ClaimPhase::Failed));
    assert_eq!(st.matched_rule.map(|m| m.index), Some(2));
    assert_eq!(
        condition(&st.conditions, "Stalled").map(|c| (c.status.as_str(), c.reason.as_str())),
        Some(("True", "Denied"))
    );
    let (ok, out, _) = kubectl(&[
        "get",
        "events",
        "-n",
        &hap.claims_ns,
        "--field-selector",
        "reason=Denied",
        "-o",
        "name",
    ]);
    assert!(ok && !out.trim().is_empty(), "a Denied event is published");
    // Another region of the plan is not denied.
    hap.claim(
        "open",
        json!({"globalAccount": "ga-2", "plan": "aws", "platformRegion": "cf-us10"}),
    )
    .await;
    assert_eq!(hap.bound("open").await, "aws-1");

    // Reload: the deny is lifted. New claims bind at once; the denied one stays denied (a
    // denial is a decision, like a binding) and no binding was written for it.
    hap.binding("aws-2", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.apply_config(&["aws"], json!({})).await;
    hap.config_condition("Ready", "True").await;
    hap.claim(
        "after",
        json!({"globalAccount": "ga-3", "plan": "aws", "platformRegion": "cf-us21"}),
    )
    .await;
    assert_eq!(hap.bound("after").await, "aws-2");
    let st = status(&hap, "frozen").await;
    assert_eq!(st.phase, Some(ClaimPhase::Failed));
    assert_eq!(
        condition(&st.conditions, "Ready").map(|c| c.reason.as_str()),
        Some("Denied")
    );
    assert!(!hap.labels("aws-2").await.values().any(|v| v == "ga-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pinning_under_concurrency_with_two_replicas() {
    let pins = json!({"pins": [
        {"globalAccount": "ga-pin", "binding": "aws-pinned"},
        {"globalAccount": "ga-late", "binding": "aws-late", "pool": {"hyperscalerType": "aws"}},
    ]});
    let mut hap = Hap::without_operator(&["aws"], pins).await;
    hap.binding("aws-pinned", "aws", &[("hyperscalerType", "aws")])
        .await;
    for i in 0..4 {
        hap.binding(&format!("aws-{i}"), "aws", &[("hyperscalerType", "aws")])
            .await;
    }
    // Two replicas with leader election: one acts, the other takes over when it stops.
    let lease = unique("lease");
    let replica = |identity: &str| {
        let mut args = hap.run_args();
        args.leader_elect = true;
        args.lease_name = lease.clone();
        args.lease_namespace = hap.claims_ns.clone();
        args.identity = Some(identity.to_string());
        args.lease_duration_seconds = 4;
        args
    };
    let a = Operator::start_with(&hap.client, replica("replica-a")).await;
    let b = Operator::start_with(&hap.client, replica("replica-b")).await;
    let a_leads = eventually(Duration::from_secs(30), "a leader", || async {
        match (a.handle.metrics.leader.get(), b.handle.metrics.leader.get()) {
            (1, 0) => Some(true),
            (0, 1) => Some(false),
            _ => None,
        }
    })
    .await;
    let (first, second) = if a_leads { (a, b) } else { (b, a) };

    // A burst: ten clusters of the pinned tenant and eight other tenants for four free bindings.
    let api = hap.claims();
    let create = |name: String, ga: String| {
        let api = api.clone();
        async move {
            let c: AccountClaim = serde_json::from_value(json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim", "metadata": {"name": name}, "spec": {"globalAccount": ga, "plan": "aws", "shootName": name}})).unwrap();
            api.create(&PostParams::default(), &c).await.unwrap();
        }
    };
    let mut burst: Vec<(String, String)> = (0..10)
        .map(|i| (format!("pin-{i}"), "ga-pin".to_string()))
        .collect();
    burst.extend((0..8).map(|i| (format!("other-{i}"), format!("ga-{i}"))));
    let (early, late) = burst.split_at(9);
    futures::future::join_all(early.iter().map(|(n, g)| create(n.clone(), g.clone()))).await;
    // The leader stops mid-burst; the standby takes over with no memory of writes in flight.
    first.stop().await;
    futures::future::join_all(late.iter().map(|(n, g)| create(n.clone(), g.clone()))).await;
    eventually(Duration::from_secs(30), "the standby leads", || async {
        (second.handle.metrics.leader.get() == 1).then_some(())
    })
    .await;

    for i in 0..10 {
        assert_eq!(
            hap.bound(&format!("pin-{i}")).await,
            "aws-pinned",
            "pin-{i}"
        );
        assert_eq!(
            status(&hap, &format!("pin-{i}")).await.decision,
            Some(Decision::Pinned)
        );
    }
    let mut bound = BTreeSet::new();
    let mut exhausted = 0;
    for i in 0..8 {
        let name = format!("other-{i}");
        let st = eventually(
            Duration::from_secs(60),
            &format!("{name} decided"),
            || async {
                let st = status(&hap, &name).await;
                let reason = condition(&st.conditions, "Ready").map(|c| c.reason.clone())?;
                (reason == "Bound" || reason == "PoolExhausted").then_some(st)
            },
        )
        .await;
        match st.credentials_binding_name {
            Some(b) if st.phase == Some(ClaimPhase::Bound) => {
                assert_ne!(b, "aws-pinned", "{name} got the pinned binding");
                assert!(bound.insert(b.clone()), "{b} given twice");
            }
            _ => exhausted += 1,
        }
    }
    assert_eq!((bound.len(), exhausted), (4, 4), "{bound:?}");
    assert_eq!(
        hap.labels("aws-pinned")
            .await
            .get("tenantName")
            .map(String::as_str),
        Some("ga-pin")
    );

    // A pin whose binding does not exist yet: the tenant waits, then gets exactly that binding.
    hap.claim(
        "late",
        json!({"globalAccount": "ga-late", "plan": "aws", "shootName": "late"}),
    )
    .await;
    let msg = hap.ready_reason("late", "PinnedBindingUnavailable").await;
    assert!(
        msg.contains(
            "ga-late is pinned to binding aws-late (pins[1]): binding aws-late does not exist"
        ),
        "{msg}"
    );
    hap.binding("aws-late", "aws", &[("hyperscalerType", "aws")])
        .await;
    assert_eq!(hap.bound("late").await, "aws-late");
    let pins = eventually(Duration::from_secs(30), "pin states", || async {
        let st = hap.config_status().await;
        let states: Vec<(String, String)> = st
            .pins
            .iter()
            .map(|p| (p.binding.clone(), p.state.clone()))
            .collect();
        (states
            == [
                ("aws-pinned".to_string(), "Held".to_string()),
                ("aws-late".to_string(), "Held".to_string()),
            ])
        .then_some(states)
    })
    .await;
    assert_eq!(pins.len(), 2);
    second.stop().await;
    hap.operator = None;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eu_and_shared_fallback_constraints_are_rejected_at_apply_time() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    let apply = |spec: &str| {
        let manifest = format!(
            "apiVersion: accountpool.io/v1alpha1\nkind: HapConfig\nmetadata: {{name: {}}}\nspec:\n  bindingNamespace: {}\n{spec}",
            hap.config, hap.bindings_ns
        );
        let (ok, _, err) = kubectl_stdin(&["apply", "-f", "-"], Some(&manifest));
        assert!(!ok, "accepted:\n{manifest}");
        err
    };
    let err = apply(
        "  rules:\n    - aws\n    - \"aws(PR=cf-eu11, euAccess) | ()\"\n    - \"gcp(PR=cf-sa30) | () | (shared)\"\n",
    );
    assert!(
        err.contains("spec.rules[1]")
            && err.contains(
                "column 27: a fallback from an EU-access pool to a pool without EU access"
            ),
        "{err}"
    );
    assert!(
        err.contains("spec.rules[2]")
            && err.contains("column 22: a fallback from a dedicated pool to a shared one"),
        "{err}"
    );
    let err = apply("  ruleSyntax: KEB\n  rules:\n    - \"aws(PR=cf-eu11) -> EU,PR | EU | -\"\n");
    assert!(
        err.contains("spec.rules[0]") && err.contains("column 31:"),
        "{err}"
    );
    let err = apply(
        "  structuredRules:\n    - plan: azure\n      oneOf: [{euAccess: Required}, {}]\n    - plan: gcp\n      oneOf: [{}, {shared: true}]\n",
    );
    assert!(
        err.contains("spec.structuredRules[0]")
            && err.contains("oneOf[1]: preference 2 falls back from an EU-access pool"),
        "{err}"
    );
    assert!(
        err.contains("spec.structuredRules[1]")
            && err.contains(
                "oneOf[1]: preference 2 falls back from a dedicated pool to a shared one"
            ),
        "{err}"
    );
    let err = apply(
        "  rules: [aws]\n  pins:\n    - {globalAccount: ga-1, binding: cb-1}\n    - {globalAccount: ga-2, binding: cb-1}\n",
    );
    assert!(
        err.contains("spec.pins") && err.contains("pinned to two global accounts"),
        "{err}"
    );
    // What the CRD cannot see, the operator reports with the same words (RulesValid=False).
    let mut hap = hap;
    hap.start_operator().await;
    hap.apply_config(&["aws", "aws(PR=cf-eu11,\teuAccess) | ()"], json!({}))
        .await;
    let c = hap.config_condition("RulesValid", "False").await;
    assert!(
        c.message.contains("rule 2 `aws(PR=cf-eu11,\teuAccess) | ()`: column 27: preference 2 falls back from an EU-access pool"),
        "{}",
        c.message
    );
}
