//! End-to-end (real kube-apiserver and gardener-apiserver): one account per credential. Gardener's
//! forced migration off SecretBindings (the Kubernetes 1.34 upgrade) moves a Shoot onto the
//! alphabetically first CredentialsBinding that references the Secret of its SecretBinding, or
//! onto a new unlabelled `force-migrated-<name>` one. Both shapes, built on the real API: the
//! Shoot counts on the pool binding's account, the account never serves a second tenant, and it
//! is not released while the Shoot runs on the other binding.
//! Both binding kinds count: with `bindingKind: SecretBinding` a Shoot moved onto a CredentialsBinding
//! (and with `CredentialsBinding` a Shoot still on a SecretBinding) counts with its account.

use crate::support;

use std::time::Duration;

use hap_operator::api::BindingsInUse;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;
use support::garden::{
    binding_object, create_dynamic, create_secret_binding, credentials_binding_resource,
    secret_binding_resource, shoot_resource,
};
use support::*;

fn aws(ga: &str, shoot: &str) -> serde_json::Value {
    json!({"globalAccount": ga, "plan": "aws", "shootName": shoot})
}

/// Creates CredentialsBinding `name` on the Secret `secret` of the binding namespace.
async fn binding_on(hap: &Hap, name: &str, secret: &str, labels: &[(&str, &str)]) {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut obj = binding_object(&hap.bindings_ns, name, "aws", &labels);
    obj["credentialsRef"]["name"] = json!(secret);
    create_dynamic(
        &hap.garden,
        &hap.bindings_ns,
        &credentials_binding_resource(),
        obj,
    )
    .await;
}

/// The `SharedAccount` entry of the aws pool in `status.bindingsInUse`.
async fn shared_account(hap: &Hap) -> Option<BindingsInUse> {
    hap.config_status()
        .await
        .bindings_in_use
        .into_iter()
        .find(|u| u.hyperscaler_type == "aws" && u.reason == "SharedAccount")
}

/// The clusters the aws pool's figures count.
async fn pool_clusters(hap: &Hap) -> Option<i64> {
    hap.config_status()
        .await
        .rules
        .iter()
        .flat_map(|r| &r.pools)
        .find(|p| p.hyperscaler_type == "aws" && !p.eu_access)
        .map(|p| p.clusters)
}

/// Whether the operator's metrics count `n` clusters on `binding`.
fn metric_clusters(hap: &Hap, binding: &str, n: usize) -> bool {
    let text = hap
        .operator
        .as_ref()
        .expect("operator")
        .handle
        .metrics
        .encode();
    text.contains(&format!(
        "hap_shoots_per_credentials_binding{{credentials_binding=\"{binding}\"}} {n}\n"
    ))
}

/// The claim's `Released` condition as (reason, message), once it is False.
async fn release_blocked(hap: &Hap, claim: &str) -> (String, String) {
    eventually(
        Duration::from_secs(60),
        &format!("claim {claim} Released=False"),
        || async {
            let c = hap.claims().get(claim).await.ok()?;
            let s = c.status?;
            let cond = condition(&s.conditions, "Released")?;
            (cond.status == "False").then(|| (cond.reason.clone(), cond.message.clone()))
        },
    )
    .await
}

/// Deletes the claim, checks that its release waits for the Shoot on the other binding of the
/// account (no dirty label, the claim stays), then deletes the Shoot and sees the release done.
async fn release_waits_for(hap: &Hap, claim: &str, binding: &str, sibling: &str, shoot: &str) {
    hap.claims()
        .delete(claim, &Default::default())
        .await
        .expect("delete claim");
    let (reason, message) = release_blocked(hap, claim).await;
    assert_eq!(reason, "AccountInUseByBinding", "{message}");
    assert!(
        message.contains(sibling) && message.contains(shoot),
        "{message}"
    );
    assert!(
        !hap.labels(binding).await.contains_key("dirty"),
        "released while {shoot} runs on {sibling}"
    );
    hap.delete_shoot(shoot).await;
    eventually(
        Duration::from_secs(90),
        "the binding marked dirty",
        || async {
            (hap.labels(binding).await.get("dirty").map(String::as_str) == Some("true"))
                .then_some(())
        },
    )
    .await;
    eventually(Duration::from_secs(60), "the claim gone", || async {
        hap.claims()
            .get_opt(claim)
            .await
            .ok()
            .and_then(|c| c.is_none().then_some(()))
    })
    .await;
}

/// Shape (b): a new, unlabelled `force-migrated-<name>` CredentialsBinding on the pool binding's
/// Secret, with the Shoot on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shoot_on_a_force_migrated_binding_counts_on_its_account_and_holds_the_release() {
    let hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("aws-01", "aws", &[("hyperscalerType", "aws")])
        .await;
    binding_on(&hap, "force-migrated-aws-01", "aws-01", &[]).await;
    hap.claim("c1", aws("ga-1", "s1")).await;
    assert_eq!(hap.bound("c1").await, "aws-01");
    hap.shoot("s1", "force-migrated-aws-01").await;
    eventually(
        Duration::from_secs(60),
        "the force-migrated binding reported and its Shoot counted on the pool",
        || async {
            let shared = shared_account(&hap).await?;
            let counted = pool_clusters(&hap).await? == 1 && metric_clusters(&hap, "aws-01", 1);
            (shared.bindings == ["force-migrated-aws-01"] && counted).then_some(())
        },
    )
    .await;
    release_waits_for(&hap, "c1", "aws-01", "force-migrated-aws-01", "s1").await;
}

/// Shape (a): a SecretBinding as KEB left it and two CredentialsBindings on its Secret, both
/// labelled for the pool; the Shoot moved off the SecretBinding onto one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_bindings_on_one_secret_never_serve_two_tenants() {
    let hap = Hap::new(&["aws"], json!({})).await;
    let pool = [("hyperscalerType", "aws")];
    // The SecretBinding creates the Secret `acct-1`; the operator watches CredentialsBindings.
    create_secret_binding(&hap.garden, &hap.bindings_ns, "acct-1", "aws", &pool).await;
    binding_on(&hap, "aws-1a", "acct-1", &pool).await;
    binding_on(&hap, "aws-1b", "acct-1", &pool).await;
    hap.claim("c1", aws("ga-1", "s1")).await;
    let held = hap.bound("c1").await;
    let other = if held == "aws-1a" { "aws-1b" } else { "aws-1a" };
    // Another tenant: the other binding references the same Secret, so none is free.
    hap.claim("c2", aws("ga-2", "s2")).await;
    // The other binding counts ga-1's cluster (its claim) on the account: in use.
    let message = hap.ready_reason("c2", "PoolExhausted").await;
    assert!(
        message.contains("1 without a tenant but used by a cluster"),
        "{message}"
    );
    assert!(!hap.labels(other).await.contains_key("tenantName"));
    // The tenant's Shoot, created on the SecretBinding, moved onto the other CredentialsBinding.
    hap.shoot("s1", "acct-1").await;
    let moved = json!({"spec": {"secretBindingName": null, "credentialsBindingName": other}});
    Api::<DynamicObject>::namespaced_with(hap.garden.clone(), &hap.bindings_ns, &shoot_resource())
        .patch("s1", &PatchParams::default(), &Patch::Merge(&moved))
        .await
        .expect("the Shoot moves to a CredentialsBinding of the same Secret");
    eventually(
        Duration::from_secs(60),
        "the Shoot counted on the account",
        || async {
            let shared = shared_account(&hap).await?;
            // The SecretBinding of the Secret (the other kind) is one of the account's too.
            let both = shared.bindings == ["SecretBinding/acct-1", "aws-1a", "aws-1b"];
            (both && metric_clusters(&hap, &held, 1)).then_some(())
        },
    )
    .await;
    release_waits_for(&hap, "c1", &held, other, "s1").await;
    // The account is dirty: still no binding of it for the second tenant.
    let message = hap.ready_reason("c2", "PoolExhausted").await;
    assert!(
        !hap.labels(other).await.contains_key("tenantName"),
        "{message}"
    );
}

/// After the forced migration every Shoot of a tenant sits on the other binding: deleting one
/// claim (its Shoot gone) keeps the account for the tenant's other cluster and lets the claim
/// go, rather than waiting until the tenant's last cluster is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_claim_goes_while_its_other_cluster_runs_on_the_other_binding() {
    let hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("aws-01", "aws", &[("hyperscalerType", "aws")])
        .await;
    binding_on(&hap, "force-migrated-aws-01", "aws-01", &[]).await;
    hap.claim("c1", aws("ga-1", "s1")).await;
    hap.claim("c2", aws("ga-1", "s2")).await;
    assert_eq!(hap.bound("c1").await, "aws-01");
    assert_eq!(hap.bound("c2").await, "aws-01");
    hap.shoot("s1", "force-migrated-aws-01").await;
    eventually(
        Duration::from_secs(60),
        "the Shoot counted on the account",
        || async { metric_clusters(&hap, "aws-01", 2).then_some(()) },
    )
    .await;
    hap.claims()
        .delete("c2", &Default::default())
        .await
        .expect("delete claim");
    eventually(Duration::from_secs(60), "claim c2 gone", || async {
        hap.claims()
            .get_opt("c2")
            .await
            .ok()
            .and_then(|c| c.is_none().then_some(()))
    })
    .await;
    let labels = hap.labels("aws-01").await;
    assert_eq!(labels.get("tenantName").map(String::as_str), Some("ga-1"));
    assert!(!labels.contains_key("dirty"), "{labels:?}");
}

/// A previous leader's claim write that lands late: it labels the other binding of an account
/// one tenant holds for a second tenant's pending claim (tenant and claimed-by in one write, as
/// the operator writes them). The operator, deciding that claim, reads the account's other
/// binding from the API server before recording it, finds the first tenant there, and gives the
/// late write back instead of binding: the account never serves the two tenants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_claim_write_on_the_other_binding_of_a_held_account_is_given_back() {
    late_claim_write_given_back(Hap::new(&["aws"], json!({})).await).await;
}

/// The same with the bindings in a separate garden: the other binding is read there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_claim_write_on_the_other_binding_of_a_held_account_is_given_back_with_a_separate_garden()
 {
    late_claim_write_given_back(Hap::with_separate_garden(&["aws"], json!({})).await).await;
}

async fn late_claim_write_given_back(hap: Hap) {
    let pool = [("hyperscalerType", "aws")];
    create_secret_binding(&hap.garden, &hap.bindings_ns, "acct-1", "aws", &pool).await;
    binding_on(&hap, "aws-1a", "acct-1", &pool).await;
    binding_on(&hap, "aws-1b", "acct-1", &pool).await;
    hap.claim("c1", aws("ga-1", "s1")).await;
    let held = hap.bound("c1").await;
    let other = if held == "aws-1a" { "aws-1b" } else { "aws-1a" };
    hap.claim("c2", aws("ga-2", "s2")).await;
    hap.ready_reason("c2", "PoolExhausted").await;
    let uid = hap
        .claims()
        .get("c2")
        .await
        .expect("c2")
        .metadata
        .uid
        .expect("uid");
    let late =
        json!({"metadata": {"labels": {"tenantName": "ga-2", "accountpool.io/claimed-by": uid}}});
    bindings_api(&hap.garden, &hap.bindings_ns)
        .patch(other, &PatchParams::default(), &Patch::Merge(&late))
        .await
        .expect("the late claim write lands");
    eventually(
        Duration::from_secs(60),
        "the late claim write given back",
        || async {
            let labels = hap.labels(other).await;
            let c2 = hap.claims().get("c2").await.ok()?;
            let phase = c2.status.and_then(|s| s.phase);
            assert_ne!(
                phase,
                Some(hap_operator::api::ClaimPhase::Bound),
                "{other} bound to ga-2 while {held} is ga-1's: {labels:?}"
            );
            (!labels.contains_key("tenantName")
                && !labels.contains_key("accountpool.io/claimed-by"))
            .then_some(())
        },
    )
    .await;
    // Said on the claim: an event naming both bindings.
    let events = eventually(
        Duration::from_secs(30),
        "an AccountContested event",
        || async {
            let (ok, out, _) = kubectl(&[
                "get",
                "events",
                "-n",
                &hap.claims_ns,
                "--field-selector",
                "reason=AccountContested",
                "-o",
                "jsonpath={.items[*].message}",
            ]);
            (ok && out.contains(other) && out.contains(&held)).then_some(out)
        },
    )
    .await;
    assert!(events.contains("tenantName=ga-1"), "{events}");
    let c2 = hap.claims().get("c2").await.expect("c2");
    assert_ne!(
        c2.status.and_then(|s| s.phase),
        Some(hap_operator::api::ClaimPhase::Bound)
    );
    assert_eq!(
        hap.labels(&held)
            .await
            .get("tenantName")
            .map(String::as_str),
        Some("ga-1")
    );
}

/// The release cooldown is the account's: while one binding of the Secret cools down, its other
/// binding, free by its own labels and annotations, goes to no other tenant; the tenant that
/// released it may have the account back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooling_down_binding_keeps_the_other_binding_of_its_account_from_other_tenants() {
    let hap = Hap::new(&["aws"], json!({"release": {"cooldown": "1h"}})).await;
    let pool = [("hyperscalerType", "aws")];
    create_secret_binding(&hap.garden, &hap.bindings_ns, "acct-1", "aws", &pool).await;
    binding_on(&hap, "aws-1a", "acct-1", &pool).await;
    binding_on(&hap, "aws-1b", "acct-1", &pool).await;
    hap.claim("c1", aws("ga-1", "s1")).await;
    let held = hap.bound("c1").await;
    let other = if held == "aws-1a" { "aws-1b" } else { "aws-1a" };
    hap.claims()
        .delete("c1", &Default::default())
        .await
        .expect("delete c1");
    eventually(Duration::from_secs(60), "the binding released", || async {
        (hap.labels(&held).await.get("dirty").map(String::as_str) == Some("true")).then_some(())
    })
    .await;
    // The cleanup job wipes the account and clears both labels: it cools down for an hour.
    hap.label(&held, "dirty", None).await;
    hap.label(&held, "tenantName", None).await;
    hap.claim("c2", aws("ga-2", "s2")).await;
    // Both bindings counted as cooling down once the operator sees the job's writes.
    eventually(
        Duration::from_secs(60),
        "c2 waits for the account's cooldown",
        || async {
            let c2 = hap.claims().get("c2").await.ok()?;
            let s = c2.status?;
            assert_ne!(
                s.phase,
                Some(hap_operator::api::ClaimPhase::Bound),
                "{other} went to ga-2 while the account cools down"
            );
            let ready = condition(&s.conditions, "Ready")?;
            ready
                .message
                .contains("2 free but released by another tenant")
                .then_some(())
        },
    )
    .await;
    assert!(!hap.labels(other).await.contains_key("tenantName"));
    hap.claim("c3", aws("ga-1", "s3")).await;
    hap.bound("c3").await;
}

/// Labels of SecretBinding `name` in the binding namespace.
async fn secret_binding_labels(
    hap: &Hap,
    name: &str,
) -> std::collections::BTreeMap<String, String> {
    Api::<DynamicObject>::namespaced_with(
        hap.garden.clone(),
        &hap.bindings_ns,
        &secret_binding_resource(),
    )
    .get(name)
    .await
    .expect("get SecretBinding")
    .metadata
    .labels
    .unwrap_or_default()
}

/// Moves Shoot `shoot` off its SecretBinding onto CredentialsBinding `to`, as Gardener's
/// maintenance does.
async fn force_migrate(hap: &Hap, shoot: &str, to: &str) {
    let moved = json!({"spec": {"secretBindingName": null, "credentialsBindingName": to}});
    Api::<DynamicObject>::namespaced_with(hap.garden.clone(), &hap.bindings_ns, &shoot_resource())
        .patch(shoot, &PatchParams::default(), &Patch::Merge(&moved))
        .await
        .expect("the Shoot moves to a CredentialsBinding of the same Secret");
}

/// Shape (b) where the pool is made of SecretBindings (`bindingKind: SecretBinding`): the Shoot
/// Gardener moved onto a `force-migrated-<name>` CredentialsBinding, a kind the pool does not
/// hold, still counts on its account. A free-looking SecretBinding whose Secret runs such a
/// Shoot is never handed out, and a tenant's release waits for its Shoot there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_secret_bindings_a_shoot_on_a_force_migrated_credentials_binding_holds_the_account() {
    let hap = Hap::new(&["aws"], json!({"bindingKind": "SecretBinding"})).await;
    let pool = [("hyperscalerType", "aws")];
    create_secret_binding(&hap.garden, &hap.bindings_ns, "aws-01", "aws", &pool).await;
    hap.claim("c1", aws("ga-1", "s1")).await;
    assert_eq!(hap.bound("c1").await, "aws-01");
    hap.shoot("s1", "aws-01").await;
    binding_on(&hap, "force-migrated-aws-01", "aws-01", &[]).await;
    force_migrate(&hap, "s1", "force-migrated-aws-01").await;
    // A second account, free by its labels, whose cluster Gardener moved the same way.
    create_secret_binding(&hap.garden, &hap.bindings_ns, "aws-02", "aws", &pool).await;
    hap.shoot("s9", "aws-02").await;
    binding_on(&hap, "force-migrated-aws-02", "aws-02", &[]).await;
    force_migrate(&hap, "s9", "force-migrated-aws-02").await;
    eventually(
        Duration::from_secs(60),
        "both Shoots counted on their accounts, the other-kind bindings reported",
        || async {
            let shared = shared_account(&hap).await?;
            let counted = pool_clusters(&hap).await? == 2 && metric_clusters(&hap, "aws-02", 1);
            let reported = shared
                .bindings
                .iter()
                .any(|b| b.contains("force-migrated-aws-02"));
            (reported && counted).then_some(())
        },
    )
    .await;
    hap.claim("c2", aws("ga-2", "s2")).await;
    let message = hap.ready_reason("c2", "PoolExhausted").await;
    assert!(
        !secret_binding_labels(&hap, "aws-02")
            .await
            .contains_key("tenantName"),
        "{message}"
    );
    // The tenant's release waits for its Shoot on the force-migrated binding.
    hap.claims()
        .delete("c1", &Default::default())
        .await
        .expect("delete claim");
    let (reason, message) = release_blocked(&hap, "c1").await;
    assert_eq!(reason, "AccountInUseByBinding", "{message}");
    assert!(
        message.contains("force-migrated-aws-01") && message.contains("s1"),
        "{message}"
    );
    let labels = secret_binding_labels(&hap, "aws-01").await;
    assert!(
        !labels.contains_key("dirty"),
        "released while s1 runs: {labels:?}"
    );
    assert_eq!(labels.get("tenantName").map(String::as_str), Some("ga-1"));
    hap.delete_shoot("s1").await;
    eventually(Duration::from_secs(90), "aws-01 marked dirty", || async {
        let labels = secret_binding_labels(&hap, "aws-01").await;
        (labels.get("dirty").map(String::as_str) == Some("true")).then_some(())
    })
    .await;
    let message = hap.ready_reason("c2", "PoolExhausted").await;
    assert!(
        !secret_binding_labels(&hap, "aws-02")
            .await
            .contains_key("tenantName"),
        "{message}"
    );
}

/// The reverse: the pool is made of CredentialsBindings and a Shoot still runs on the
/// SecretBinding of the same Secret (not migrated yet). The pool binding is in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_credentials_bindings_a_shoot_still_on_a_secret_binding_holds_the_account() {
    let hap = Hap::new(&["aws"], json!({})).await;
    let pool = [("hyperscalerType", "aws")];
    // KEB's SecretBinding (unlabelled now) and its Shoot; the pool's CredentialsBinding on the
    // same Secret.
    create_secret_binding(&hap.garden, &hap.bindings_ns, "acct-1", "aws", &[]).await;
    hap.shoot("s1", "acct-1").await;
    binding_on(&hap, "aws-1a", "acct-1", &pool).await;
    eventually(
        Duration::from_secs(60),
        "the Shoot on the SecretBinding counted on the pool binding",
        || async {
            let shared = shared_account(&hap).await?;
            let counted = metric_clusters(&hap, "aws-1a", 1);
            let reported = shared.bindings.iter().any(|b| b.contains("acct-1"));
            (reported && counted).then_some(())
        },
    )
    .await;
    hap.claim("c2", aws("ga-2", "s2")).await;
    let message = hap.ready_reason("c2", "PoolExhausted").await;
    assert!(
        message.contains("1 without a tenant but used by a cluster"),
        "{message}"
    );
    assert!(!hap.labels("aws-1a").await.contains_key("tenantName"));
}

/// `bindingKind` changes while the operator runs: the pools are now the other kind's bindings,
/// and every Shoot counts again on its account under the new kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_binding_kind_counts_every_shoot_again() {
    let hap = Hap::new(&["aws"], json!({})).await;
    let pool = [("hyperscalerType", "aws")];
    create_secret_binding(&hap.garden, &hap.bindings_ns, "acct-1", "aws", &pool).await;
    hap.shoot("s1", "acct-1").await;
    binding_on(&hap, "aws-1a", "acct-1", &pool).await;
    eventually(
        Duration::from_secs(60),
        "the Shoot on the SecretBinding counted on the CredentialsBinding",
        || async { metric_clusters(&hap, "aws-1a", 1).then_some(()) },
    )
    .await;
    hap.apply_config(&["aws"], json!({"bindingKind": "SecretBinding"}))
        .await;
    eventually(
        Duration::from_secs(60),
        "the Shoot counted on the SecretBinding, the CredentialsBinding reported",
        || async {
            let shared = shared_account(&hap).await?;
            let reported = shared.bindings == ["CredentialsBinding/aws-1a"];
            let gone = !metric_clusters(&hap, "aws-1a", 1);
            (reported && gone && metric_clusters(&hap, "acct-1", 1)).then_some(())
        },
    )
    .await;
}
