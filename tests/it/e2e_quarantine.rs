//! End-to-end (real kube-apiserver and gardener-apiserver): quarantine of new accounts. A new
//! binding of a quarantined pool is refused to a request the config does not name, given to a
//! trial request (the claim records the probation on it), and proven when the gardenlet's
//! status of a Shoot on it says the Shoot was created (Create Succeeded, or a later Reconcile:
//! the operator may have missed the Create Succeeded); after its trial tenant left and the
//! cleanup job wiped it, it serves anyone. The operator is stopped during the trial: what it
//! knows of the trial it reads from the binding. Bindings created before the entry's `since`
//! (accounts taken over from KEB) are never new.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use support::*;

const QUARANTINE: &str = "accountpool.io/quarantine";

async fn annotations(hap: &Hap, binding: &str) -> BTreeMap<String, String> {
    bindings_api(&hap.garden, &hap.bindings_ns)
        .get(binding)
        .await
        .expect("get binding")
        .metadata
        .annotations
        .unwrap_or_default()
}

/// The count of one state of the dedicated aws pool in the HapConfig status.
async fn count(hap: &Hap, state: &str) -> Option<i64> {
    let st = hap.config_status().await;
    let pool = st
        .pools
        .into_iter()
        .find(|p| p.hyperscaler_type == "aws" && !p.eu_access)?;
    pool.states.get(state).copied()
}

async fn last_operation(hap: &Hap, shoot: &str, type_: &str, state: &str) {
    support::garden::set_shoot_last_operation(&hap.garden, &hap.bindings_ns, shoot, type_, state)
        .await;
}

/// A quarantine of the aws pool for the trial plan, whose `since` lies before any binding the
/// test creates.
fn trial_quarantine() -> serde_json::Value {
    json!({"quarantine": [{"pool": {"hyperscalerType": "aws"}, "since": "2020-01-01T00:00:00Z", "plans": ["trial"]}]})
}

async fn quarantine_of(hap: &Hap, binding: &str) -> Option<String> {
    annotations(hap, binding).await.get(QUARANTINE).cloned()
}

async fn passed(hap: &Hap, binding: &str) {
    eventually(
        Duration::from_secs(60),
        &format!("{binding} recorded Passed"),
        || async { (quarantine_of(hap, binding).await.as_deref() == Some("Passed")).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_account_serves_only_trial_requests_until_a_shoot_on_it_succeeded() {
    let quarantine = trial_quarantine();
    let mut hap = Hap::new(&["aws", "trial"], quarantine).await;
    hap.binding("aws-new", "aws", &[("hyperscalerType", "aws")])
        .await;
    eventually(
        Duration::from_secs(60),
        "aws-new Quarantined in status.pools",
        || async { (count(&hap, "Quarantined").await? == 1).then_some(()) },
    )
    .await;
    // A paying request is refused the new account, and told why.
    hap.claim(
        "paying",
        json!({"globalAccount": "ga-paying", "plan": "aws", "shootName": "s-paying"}),
    )
    .await;
    let message = hap.ready_reason("paying", "PoolExhausted").await;
    assert!(message.contains("1 free but quarantined"), "{message}");
    // The trial request gets it; the claim write records the probation with the tenant.
    hap.claim(
        "trial",
        json!({"globalAccount": "ga-trial", "plan": "trial", "provider": "aws", "shootName": "s-trial"}),
    )
    .await;
    assert_eq!(hap.bound("trial").await, "aws-new");
    assert_eq!(
        annotations(&hap, "aws-new")
            .await
            .get(QUARANTINE)
            .map(String::as_str),
        Some("Probation")
    );
    // While no operator runs, the Shoot is created and its first reconcile replaces the Create
    // record: the new leader knows the trial only from the binding, and the Reconcile proves
    // the create.
    hap.stop_operator().await;
    hap.shoot("s-trial", "aws-new").await;
    last_operation(&hap, "s-trial", "Create", "Succeeded").await;
    last_operation(&hap, "s-trial", "Reconcile", "Processing").await;
    hap.start_operator().await;
    passed(&hap, "aws-new").await;
    // The trial tenant leaves; the cleanup job wipes the account (removes dirty and tenant).
    hap.delete_shoot("s-trial").await;
    hap.claims()
        .delete("trial", &Default::default())
        .await
        .expect("delete the trial claim");
    eventually(Duration::from_secs(60), "aws-new marked dirty", || async {
        hap.labels("aws-new")
            .await
            .contains_key("dirty")
            .then_some(())
    })
    .await;
    hap.label("aws-new", "dirty", None).await;
    hap.label("aws-new", "tenantName", None).await;
    // Proven: the paying request, waiting all along, gets it.
    assert_eq!(hap.bound("paying").await, "aws-new");
    assert_eq!(count(&hap, "Quarantined").await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_releases_a_quarantined_binding_by_annotating_it_released() {
    let quarantine = json!({"quarantine": [{"pool": {"hyperscalerType": "aws"}, "since": "2020-01-01T00:00:00Z", "globalAccounts": ["canary"]}]});
    let hap = Hap::new(&["aws"], quarantine).await;
    hap.binding("aws-new", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.claim(
        "paying",
        json!({"globalAccount": "ga-paying", "plan": "aws", "shootName": "s-paying"}),
    )
    .await;
    hap.ready_reason("paying", "PoolExhausted").await;
    let patch = json!({"metadata": {"annotations": {QUARANTINE: "Released"}}});
    bindings_api(&hap.garden, &hap.bindings_ns)
        .patch(
            "aws-new",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("release aws-new from quarantine");
    assert_eq!(hap.bound("paying").await, "aws-new");
}

/// The trial tenant leaves while no operator runs, after its Shoot was created: the release
/// records the verdict before the binding goes back, so it comes back proven.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trial_tenant_leaving_after_its_shoot_was_created_leaves_a_proven_account() {
    let mut hap = Hap::new(&["aws", "trial"], trial_quarantine()).await;
    hap.binding("aws-new", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.claim(
        "trial",
        json!({"globalAccount": "ga-trial", "plan": "trial", "provider": "aws", "shootName": "s-trial"}),
    )
    .await;
    assert_eq!(hap.bound("trial").await, "aws-new");
    assert_eq!(
        quarantine_of(&hap, "aws-new").await.as_deref(),
        Some("Probation")
    );
    hap.stop_operator().await;
    hap.shoot("s-trial", "aws-new").await;
    last_operation(&hap, "s-trial", "Reconcile", "Succeeded").await;
    hap.claims()
        .delete("trial", &Default::default())
        .await
        .expect("delete the trial claim");
    hap.start_operator().await;
    passed(&hap, "aws-new").await;
    hap.delete_shoot("s-trial").await;
    eventually(Duration::from_secs(60), "aws-new marked dirty", || async {
        hap.labels("aws-new")
            .await
            .contains_key("dirty")
            .then_some(())
    })
    .await;
    assert_eq!(
        quarantine_of(&hap, "aws-new").await.as_deref(),
        Some("Passed")
    );
}

/// A binding created before the entry's `since` without any record of the operator's (a KEB-era
/// account: the cleanup job removed its tenant and dirty labels) is no new account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_older_than_the_quarantine_serves_a_paying_request() {
    let quarantine = json!({"quarantine": [{"pool": {"hyperscalerType": "aws"}, "since": "2100-01-01T00:00:00Z", "plans": ["trial"]}]});
    let hap = Hap::new(&["aws", "trial"], quarantine).await;
    hap.binding("aws-keb", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.claim(
        "paying",
        json!({"globalAccount": "ga-paying", "plan": "aws", "shootName": "s-paying"}),
    )
    .await;
    assert_eq!(hap.bound("paying").await, "aws-keb");
    assert_eq!(quarantine_of(&hap, "aws-keb").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_rejects_a_quarantine_that_names_no_request_or_a_pool_twice() {
    let client = client().await;
    // Untyped, so that an entry the Rust type cannot hold (no `since`) reaches the API server.
    let resource = kube::api::ApiResource::erase::<hap_operator::api::HapConfig>(&());
    let configs: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client, &resource);
    let attempt = |quarantine: serde_json::Value| {
        let configs = configs.clone();
        async move {
            let body = json!({
                "apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig",
                "metadata": {"name": unique("quarantine-bad")},
                "spec": {"bindingNamespace": "garden-x", "rules": ["aws"], "quarantine": quarantine},
            });
            let config: kube::api::DynamicObject = serde_json::from_value(body).expect("HapConfig");
            match configs.create(&Default::default(), &config).await {
                Ok(c) => panic!("accepted: {:?}", c.data),
                Err(e) => e.to_string(),
            }
        }
    };
    let since = "2020-01-01T00:00:00Z";
    let none = attempt(json!([{"pool": {"hyperscalerType": "aws"}, "since": since}])).await;
    assert!(
        none.contains("spec.quarantine[0]")
            && none.contains("name the requests that may take quarantined bindings"),
        "{none}"
    );
    let twice = attempt(json!([
        {"pool": {"hyperscalerType": "aws"}, "since": since, "plans": ["trial"]},
        {"pool": {"hyperscalerType": "aws", "euAccess": false}, "since": since, "globalAccounts": ["canary"]},
    ]))
    .await;
    assert!(
        twice.contains("spec.quarantine") && twice.contains("listed twice"),
        "{twice}"
    );
    let bad_plan =
        attempt(json!([{"pool": {"hyperscalerType": "aws"}, "since": since, "plans": ["Trial!"]}]))
            .await;
    assert!(
        bad_plan.contains("spec.quarantine[0].plans[0]"),
        "{bad_plan}"
    );
    let no_since = attempt(json!([{"pool": {"hyperscalerType": "aws"}, "plans": ["trial"]}])).await;
    assert!(
        no_since.contains("spec.quarantine[0].since") && no_since.contains("Required"),
        "{no_since}"
    );
}
