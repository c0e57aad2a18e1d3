//! How a binding is released, end to end on the real control plane: a request source's claim
//! whose object never existed (a Runtime the API server's schema validation refused after the
//! webhook served it) gives its binding back clean — tenant label removed, no dirty label — while
//! one whose object existed (a Runtime, a Shoot through the real gardener-apiserver) is marked
//! dirty for the cleanup job, and not before the object is gone; a binding two Runtimes shared
//! (one ran, one was refused) is dirty whichever claim goes last. A claim deleted while no valid HapConfig exists says so once, not on every retry,
//! and the `Claimed` event is sent after the status write, not between it and the binding's.

use crate::support;

use std::time::Duration;

use hap_operator::api::ClaimPhase;
use hap_operator::labels::CLAIMED_BY;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use support::garden::{BindingRef, profile, shoot_object, shoot_resource};
use support::platform::{
    Certs, RuntimeSpec, SCOPE_LABEL, WebhookRegistration, api, install_platform_crds, runtime,
    runtime_resource, scoped_namespace, until,
};
use support::{Hap, Operator, eventually, unique};

const UID_LABEL: &str = "accountpool.io/source-uid";

/// The events regarding claim `name` with `reason`.
async fn events_of(hap: &Hap, name: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(hap.client.clone(), &hap.claims_ns);
    let list = api.list(&Default::default()).await.expect("list events");
    list.items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

async fn events(hap: &Hap, name: &str, reason: &str) -> usize {
    events_of(hap, name, reason).await.len()
}

async fn claim_gone(hap: &Hap, name: &str) -> bool {
    hap.claims().get_opt(name).await.ok().flatten().is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_refused_after_admission_leaves_its_binding_clean() {
    // Issue 19, defect 2: the binding of a Runtime the schema refused after the webhook served
    // it was marked dirty for a tenant that never had a cluster.
    install_platform_crds().await;
    let scope = unique("rel");
    let mut hap = Hap::without_operator(
        &["aws"],
        json!({"requestSources": [{"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}}]}),
    )
    .await;
    for b in ["aws-1", "aws-2"] {
        hap.binding(b, "aws", &[("hyperscalerType", "aws")]).await;
    }
    let certs = Certs::new();
    hap.operator = Some(Operator::start_with(&hap.client, certs.args(hap.run_args())).await);
    let addr = hap
        .operator
        .as_ref()
        .and_then(|o| o.handle.webhook.get())
        .expect("webhook address");
    let ns = scoped_namespace(&hap.client, "kcp", &scope).await;
    let runtimes = api(&hap.client, &ns, &runtime_resource());
    let _hook = WebhookRegistration::register(
        "Runtime",
        &format!("https://{addr}/mutate/runtimes"),
        &certs.ca_bundle(),
        &scope,
        json!({}),
    );
    let spec = RuntimeSpec {
        name: "rt-refused",
        global_account: Some("ga-1"),
        plan: "aws",
        platform_region: "cf-us10",
        region: "eu-central-1",
        provider: "aws",
        binding: "",
        extra_labels: &[],
    };
    // A Runtime that exists: its claim carries its UID.
    let live = RuntimeSpec {
        name: "rt-live",
        global_account: Some("ga-live"),
        ..spec
    };
    runtimes
        .create(&PostParams::default(), &runtime(&ns, &scope, &live))
        .await
        .expect("rt-live admitted");
    let live_claim = format!("runtime.{ns}.rt-live");
    let used = hap.bound(&live_claim).await;
    eventually(
        Duration::from_secs(60),
        "rt-live's claim labelled with its UID",
        || async {
            let c = hap.claims().get(&live_claim).await.ok()?;
            c.metadata.labels?.contains_key(UID_LABEL).then_some(())
        },
    )
    .await;

    // Valid for the webhook, refused by the CRD schema, which is checked after mutation.
    let mut obj = runtime(&ns, &scope, &spec);
    obj.data["spec"]["security"]
        .as_object_mut()
        .expect("security")
        .remove("administrators");
    let refused = runtimes.create(&PostParams::default(), &obj).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422),
        "expected the schema to refuse it: {refused:?}"
    );
    let claim = format!("runtime.{ns}.rt-refused");
    let free = hap.bound(&claim).await;
    assert_ne!(free, used);
    assert_eq!(
        hap.labels(&free)
            .await
            .get("tenantName")
            .map(String::as_str),
        Some("ga-1")
    );

    // After the grace period the claim goes, and the binding is free again, not dirty.
    until("the refused Runtime's claim gone", || {
        claim_gone(&hap, &claim)
    })
    .await;
    until("its binding without the tenant label", || async {
        !hap.labels(&free).await.contains_key("tenantName")
    })
    .await;
    assert!(
        !hap.labels(&free).await.contains_key("dirty"),
        "no cluster ever used {free}"
    );
    assert!(
        !hap.labels(&free).await.contains_key(CLAIMED_BY),
        "the record goes with the tenant"
    );
    assert_eq!(events(&hap, &claim, "ReleasedClean").await, 1);

    // Issue 19, defect 1: a claim deleted while its Runtime exists (re-created, or deleted by
    // hand) is not released: the Runtime's Shoot, not created yet, would run on a dirty binding.
    hap.claims()
        .delete(&live_claim, &DeleteParams::default())
        .await
        .expect("delete rt-live's claim");
    eventually(
        Duration::from_secs(60),
        "the release says it waits",
        || async {
            let s = hap.claims().get(&live_claim).await.ok()?.status?;
            let c = support::condition(&s.conditions, "Released")?;
            (c.status == "False" && c.reason == "ObjectExists").then_some(())
        },
    )
    .await;
    assert!(
        !hap.labels(&used).await.contains_key("dirty"),
        "{used} marked dirty under a live Runtime"
    );
    runtimes
        .delete("rt-live", &DeleteParams::default())
        .await
        .expect("delete rt-live");
    until("the used binding marked dirty", || async {
        hap.labels(&used).await.get("dirty").map(String::as_str) == Some("true")
    })
    .await;
    until("rt-live's claim gone", || claim_gone(&hap, &live_claim)).await;
    hap.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shoot_that_existed_leaves_its_binding_dirty() {
    let scope = unique("relshoot");
    let request = "accountpool.io/request";
    let mut hap = Hap::without_operator(
        &["aws"],
        json!({"requestSources": [{"id": "shoots", "kind": "Shoot", "matchLabels": {request: "true", SCOPE_LABEL: scope}}]}),
    )
    .await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    let (ok, _, err) = support::kubectl(&[
        "label",
        "namespace",
        &hap.bindings_ns,
        &format!("{SCOPE_LABEL}={scope}"),
    ]);
    assert!(ok, "{err}");
    let certs = Certs::new();
    hap.operator = Some(Operator::start_with(&hap.client, certs.args(hap.run_args())).await);
    let addr = hap
        .operator
        .as_ref()
        .and_then(|o| o.handle.webhook.get())
        .expect("webhook address");
    let _hook = WebhookRegistration::register(
        "Shoot",
        &format!("https://{addr}/mutate/shoots"),
        &certs.ca_bundle(),
        &scope,
        json!({"matchLabels": {request: "true"}}),
    );
    let p = profile(&hap.garden, "aws").await;
    let mut obj = shoot_object(
        &hap.bindings_ns,
        "s-used",
        "",
        BindingRef::CredentialsBinding,
        &p,
    );
    obj["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("credentialsBindingName");
    obj["metadata"]["labels"] = json!({request: "true", SCOPE_LABEL: scope,
        "accountpool.io/global-account": "ga-1", "accountpool.io/plan": "aws",
        "accountpool.io/platform-region": "cf-us10"});
    let obj: DynamicObject = serde_json::from_value(obj).expect("shoot");
    let created = api(&hap.garden, &hap.bindings_ns, &shoot_resource())
        .create(&PostParams::default(), &obj)
        .await
        .expect("admitted");
    assert_eq!(
        created.data.pointer("/spec/credentialsBindingName"),
        Some(&Value::from("aws-1"))
    );
    let claim = format!("shoot.{}.s-used", hap.bindings_ns);
    // The source recorded that the Shoot exists.
    eventually(
        Duration::from_secs(60),
        "the claim labelled with the Shoot's UID",
        || async {
            let c = hap.claims().get(&claim).await.ok()?;
            c.metadata.labels?.contains_key(UID_LABEL).then_some(())
        },
    )
    .await;
    hap.delete_shoot("s-used").await;
    until("aws-1 marked dirty", || async {
        hap.labels("aws-1").await.get("dirty").map(String::as_str) == Some("true")
    })
    .await;
    assert_eq!(
        hap.labels("aws-1")
            .await
            .get("tenantName")
            .map(String::as_str),
        Some("ga-1"),
        "the cleanup job needs the tenant"
    );
    until("the Shoot's claim gone", || claim_gone(&hap, &claim)).await;
    assert_eq!(events(&hap, &claim, "ReleasedClean").await, 0);
    hap.stop_operator().await;
}

/// Creates Runtime `name` of `ga` and returns its claim's binding once its claim carries the
/// Runtime's UID (it existed).
async fn live_runtime(
    hap: &Hap,
    runtimes: &Api<DynamicObject>,
    ns: &str,
    scope: &str,
    spec: &RuntimeSpec<'_>,
) -> String {
    runtimes
        .create(&PostParams::default(), &runtime(ns, scope, spec))
        .await
        .expect("Runtime admitted");
    let claim = format!("runtime.{ns}.{}", spec.name);
    let binding = hap.bound(&claim).await;
    eventually(
        Duration::from_secs(60),
        "the claim labelled with its Runtime's UID",
        || async {
            let c = hap.claims().get(&claim).await.ok()?;
            c.metadata.labels?.contains_key(UID_LABEL).then_some(())
        },
    )
    .await;
    binding
}

/// Creates Runtime `name`, which the webhook serves and the CRD schema refuses after it, and
/// returns its claim's binding.
async fn refused_runtime(
    hap: &Hap,
    runtimes: &Api<DynamicObject>,
    ns: &str,
    scope: &str,
    spec: &RuntimeSpec<'_>,
) -> String {
    let mut obj = runtime(ns, scope, spec);
    obj.data["spec"]["security"]
        .as_object_mut()
        .expect("security")
        .remove("administrators");
    let refused = runtimes.create(&PostParams::default(), &obj).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422),
        "expected the schema to refuse it: {refused:?}"
    );
    hap.bound(&format!("runtime.{ns}.{}", spec.name)).await
}

async fn delete_claim(hap: &Hap, claim: &str) {
    hap.claims()
        .delete(claim, &DeleteParams::default())
        .await
        .expect("delete the claim");
    until("the claim gone", || claim_gone(hap, claim)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_two_runtimes_shared_is_released_dirty_whichever_claim_goes_last() {
    // Issue 19: Runtime a of a tenant ran on the binding, Runtime b of the same tenant got it by
    // Reuse and was refused. b's claim never served an object; when it went last, the binding
    // went back clean and the next tenant got an account a ran in.
    install_platform_crds().await;
    let scope = unique("relshared");
    let mut hap = Hap::without_operator(
        &["aws"],
        json!({"requestSources": [{"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}}]}),
    )
    .await;
    for b in ["aws-1", "aws-2"] {
        hap.binding(b, "aws", &[("hyperscalerType", "aws")]).await;
    }
    let certs = Certs::new();
    let mut args = certs.args(hap.run_args());
    // The claims are deleted by hand, in the order the test needs: the source clean-up must
    // not take the refused Runtime's claim first.
    args.source_grace = Duration::from_secs(600);
    hap.operator = Some(Operator::start_with(&hap.client, args).await);
    let addr = hap
        .operator
        .as_ref()
        .and_then(|o| o.handle.webhook.get())
        .expect("webhook address");
    let ns = scoped_namespace(&hap.client, "kcp", &scope).await;
    let runtimes = api(&hap.client, &ns, &runtime_resource());
    let _hook = WebhookRegistration::register(
        "Runtime",
        &format!("https://{addr}/mutate/runtimes"),
        &certs.ca_bundle(),
        &scope,
        json!({}),
    );
    fn spec<'a>(name: &'a str, ga: &'a str) -> RuntimeSpec<'a> {
        RuntimeSpec {
            name,
            global_account: Some(ga),
            plan: "aws",
            platform_region: "cf-us10",
            region: "eu-central-1",
            provider: "aws",
            binding: "",
            extra_labels: &[],
        }
    }
    for (ga, used_goes_first) in [("ga-1", true), ("ga-2", false)] {
        let (a, b) = (format!("{ga}-a"), format!("{ga}-b"));
        let binding = live_runtime(&hap, &runtimes, &ns, &scope, &spec(&a, ga)).await;
        let reused = refused_runtime(&hap, &runtimes, &ns, &scope, &spec(&b, ga)).await;
        assert_eq!(reused, binding, "one binding per tenant and pool");
        // The reuse took the first claim's record off the binding.
        assert!(
            !hap.labels(&binding).await.contains_key(CLAIMED_BY),
            "{:?}",
            hap.labels(&binding).await
        );
        runtimes
            .delete(&a, &DeleteParams::default())
            .await
            .expect("delete the live Runtime");
        let (first, last) = if used_goes_first { (&a, &b) } else { (&b, &a) };
        delete_claim(&hap, &format!("runtime.{ns}.{first}")).await;
        let kept = hap.labels(&binding).await;
        assert_eq!(
            kept.get("tenantName").map(String::as_str),
            Some(ga),
            "kept for the other claim: {kept:?}"
        );
        assert!(!kept.contains_key("dirty"), "{kept:?}");
        let last = format!("runtime.{ns}.{last}");
        delete_claim(&hap, &last).await;
        let released = hap.labels(&binding).await;
        assert_eq!(
            released.get("dirty").map(String::as_str),
            Some("true"),
            "{ga}: a Runtime ran on {binding}: {released:?}"
        );
        assert_eq!(
            released.get("tenantName").map(String::as_str),
            Some(ga),
            "the cleanup job needs the tenant"
        );
        assert_eq!(events(&hap, &last, "ReleasedClean").await, 0);
    }
    hap.stop_operator().await;
}

/// The `accountclaim` reconciles the operator has run.
fn reconciles(hap: &Hap) -> u64 {
    let text = hap
        .operator
        .as_ref()
        .expect("operator")
        .handle
        .metrics
        .encode();
    text.lines()
        .find(|l| {
            l.starts_with("hap_reconcile_duration_seconds_count")
                && l.contains("controller=\"accountclaim\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_waiting_for_a_config_is_announced_once_and_backs_off() {
    // Issue 19, defect 9: the backoff was reset on every Ok, so the release retried at ~4 Hz
    // and wrote a new ReleaseWaiting event each time.
    // A HapConfig no generation of which was ever valid: no rules in force.
    let mut hap = Hap::new(&["azurre"], json!({})).await;
    hap.claim(
        "c1",
        json!({"globalAccount": "ga-1", "plan": "aws", "platformRegion": "cf-us10", "provider": "aws"}),
    )
    .await;
    hap.ready_reason("c1", "ConfigInvalid").await;
    hap.claims()
        .delete("c1", &DeleteParams::default())
        .await
        .expect("delete the claim");
    eventually(
        Duration::from_secs(60),
        "c1 says its release waits",
        || async {
            let s = hap.claims().get("c1").await.ok()?.status?;
            let c = support::condition(&s.conditions, "Released")?;
            (c.status == "False" && c.reason == "ConfigInvalid").then_some(())
        },
    )
    .await;
    let (start, at) = (reconciles(&hap), std::time::Instant::now());
    eventually(Duration::from_secs(60), "six more reconciles", || async {
        (reconciles(&hap) >= start + 6).then_some(())
    })
    .await;
    // 0.2 + 0.4 + 0.8 + 1.6 + 3.2 s at the least when the delay grows; under 2 s when it does not.
    assert!(
        at.elapsed() >= Duration::from_secs(3),
        "six retries in {:?}",
        at.elapsed()
    );
    assert_eq!(events(&hap, "c1", "ReleaseWaiting").await, 1);
    assert!(
        hap.claims().get_opt("c1").await.expect("read").is_some(),
        "the finalizer stays while no config is valid"
    );
    hap.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claimed_event_follows_the_status_write() {
    // Issue 19, defect 9: the event was awaited between the binding write and the status write,
    // which widened every race window by a round trip. The test environment runs one etcd, so
    // resourceVersions order the writes.
    use futures::StreamExt;
    let mut hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    let watch = hap
        .claims()
        .watch(&WatchParams::default().fields("metadata.name=c1"), "0")
        .await
        .expect("watch the claim");
    hap.claim(
        "c1",
        json!({"globalAccount": "ga-1", "plan": "aws", "platformRegion": "cf-us10", "provider": "aws"}),
    )
    .await;
    // The version the Bound status write made.
    let bound = tokio::time::timeout(Duration::from_secs(60), async {
        let mut watch = Box::pin(watch);
        while let Some(ev) = watch.next().await {
            if let Ok(WatchEvent::Added(c) | WatchEvent::Modified(c)) = ev
                && c.status.as_ref().and_then(|s| s.phase) == Some(ClaimPhase::Bound)
            {
                return c.metadata.resource_version;
            }
        }
        None
    })
    .await
    .expect("c1 Bound within 60 s");
    let event = eventually(Duration::from_secs(30), "the Claimed event", || async {
        events_of(&hap, "c1", "Claimed").await.pop()
    })
    .await;
    let rv = |v: Option<&String>| {
        v.and_then(|v| v.parse::<u64>().ok())
            .expect("resourceVersion")
    };
    let (status_rv, event_rv) = (
        rv(bound.as_ref()),
        rv(event.metadata.resource_version.as_ref()),
    );
    assert!(
        event_rv > status_rv,
        "the event ({event_rv}) was written before the Bound status ({status_rv})"
    );
    hap.stop_operator().await;
}
