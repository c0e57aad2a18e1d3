//! End-to-end (real kube-apiserver and gardener-apiserver): a binding that a Shoot uses but that
//! carries no tenant is never handed to a new tenant, and the HapConfig says so (issue 19,
//! defect 3).

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use support::*;

fn aws(ga: &str, shoot: &str) -> serde_json::Value {
    json!({"globalAccount": ga, "plan": "aws", "shootName": shoot})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_a_shoot_uses_without_a_tenant_is_never_claimed_and_is_reported() {
    let hap = Hap::new(&["aws"], json!({})).await;
    for name in ["aws-01", "aws-02", "aws-03"] {
        hap.binding(name, "aws", &[("hyperscalerType", "aws")])
            .await;
    }
    // Created naming the free binding directly: allowed, and outside the operator's hands.
    hap.shoot("foreign", "aws-01").await;
    let reported = eventually(
        Duration::from_secs(60),
        "HapConfig status names aws-01 as InUseWithoutTenant",
        || async {
            let st = hap.config_status().await;
            st.bindings_in_use
                .into_iter()
                .find(|b| b.reason == "InUseWithoutTenant" && b.bindings == ["aws-01"])
        },
    )
    .await;
    assert_eq!(
        (reported.hyperscaler_type.as_str(), reported.count),
        ("aws", 1)
    );
    // Three new tenants: two free bindings, and the third waits rather than share aws-01.
    for i in 1..=3 {
        hap.claim(&format!("c{i}"), aws(&format!("ga-{i}"), &format!("s{i}")))
            .await;
    }
    // Which two bind is up to the race between them; the third must wait, never take aws-01.
    let (got, message) = eventually(
        Duration::from_secs(60),
        "two claims Bound and one PoolExhausted",
        || async {
            let (mut bound, mut waiting) = (BTreeSet::new(), Vec::new());
            for i in 1..=3 {
                let c = hap.claims().get(&format!("c{i}")).await.ok()?;
                let s = c.status?;
                if s.phase == Some(hap_operator::api::ClaimPhase::Bound) {
                    bound.insert(s.credentials_binding_name?);
                } else if let Some(r) =
                    condition(&s.conditions, "Ready").filter(|r| r.reason == "PoolExhausted")
                {
                    waiting.push(r.message.clone());
                }
            }
            (bound.len() == 2 && waiting.len() == 1).then(|| (bound, waiting.remove(0)))
        },
    )
    .await;
    assert_eq!(got, BTreeSet::from(["aws-02".into(), "aws-03".into()]));
    assert!(
        message.contains("without a tenant but used by a cluster"),
        "{message}"
    );
    let labels = hap.labels("aws-01").await;
    assert!(!labels.contains_key("tenantName"), "{labels:?}");
    // aws-01 is not free: the pool has no free binding left.
    eventually(
        Duration::from_secs(30),
        "pool figures free=0 claimed=2",
        || async {
            let st = hap.config_status().await;
            let f = st.rules.first()?.pools.first()?.clone();
            ((f.free, f.claimed, f.total) == (0, 2, 3)).then_some(())
        },
    )
    .await;
    let selector = format!("reason=BindingsInUse,involvedObject.name={}", hap.config);
    let out = eventually(
        Duration::from_secs(30),
        "a BindingsInUse event on the HapConfig",
        || async {
            let (ok, out, _) = kubectl(&[
                "get",
                "events",
                "-A",
                "--field-selector",
                &selector,
                "-o",
                "jsonpath={.items[*].message}",
            ]);
            (ok && !out.is_empty()).then_some(out)
        },
    )
    .await;
    assert!(
        out.contains("InUseWithoutTenant in pool hyperscalerType=aws: aws-01"),
        "the event names the binding: {out}"
    );
}
