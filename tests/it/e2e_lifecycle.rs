//! End-to-end (real kube-apiserver and gardener-apiserver): accounts with a lifecycle (issue 22).
//! Every binding's state in the HapConfig status and the metrics; the cleanup contract (the
//! cleanup job removes `dirty` and the tenant label, and the binding is Free again; a job that
//! could not clean marks the binding `CleanupFailed`); cordon.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use support::*;

fn aws(ga: &str, shoot: &str) -> serde_json::Value {
    json!({"globalAccount": ga, "plan": "aws", "shootName": shoot})
}

/// The states of the dedicated aws pool (no euAccess) in the HapConfig status.
async fn states(hap: &Hap) -> Option<BTreeMap<String, i64>> {
    let st = hap.config_status().await;
    st.pools
        .into_iter()
        .find(|p| p.hyperscaler_type == "aws" && !p.eu_access)
        .map(|p| p.states)
}

fn want(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    let mut all: BTreeMap<String, i64> = [
        "Free",
        "Claimed",
        "Dirty",
        "CoolingDown",
        "Cordoned",
        "CleanupFailed",
        "Suspect",
        "InUseWithoutTenant",
        "Internal",
        "Quarantined",
    ]
    .iter()
    .map(|s| (s.to_string(), 0))
    .collect();
    for (s, n) in pairs {
        all.insert(s.to_string(), *n);
    }
    all
}

/// Sets (or removes) an annotation of a binding, as an operator would with kubectl.
async fn annotate(hap: &Hap, binding: &str, key: &str, value: Option<&str>) {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    bindings_api(&hap.garden, &hap.bindings_ns)
        .patch(
            binding,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap_or_else(|e| panic!("annotate {binding} {key}: {e}"));
}

fn metrics(hap: &Hap) -> String {
    hap.operator
        .as_ref()
        .expect("operator")
        .handle
        .metrics
        .encode()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_binding_has_a_state_in_status_and_metrics_and_a_cleaned_binding_is_free_again() {
    let hap = Hap::new(&["aws"], json!({})).await;
    let aws_only = [("hyperscalerType", "aws")];
    for name in ["aws-free", "aws-used", "aws-own"] {
        hap.binding(name, "aws", &aws_only).await;
    }
    hap.binding(
        "aws-dirty",
        "aws",
        &[
            ("hyperscalerType", "aws"),
            ("tenantName", "ga-old"),
            ("dirty", "true"),
        ],
    )
    .await;
    hap.binding(
        "aws-int",
        "aws",
        &[("hyperscalerType", "aws"), ("internal", "true")],
    )
    .await;
    hap.binding(
        "aws-cord",
        "aws",
        &[
            ("hyperscalerType", "aws"),
            ("accountpool.io/cordoned", "true"),
        ],
    )
    .await;
    annotate(
        &hap,
        "aws-cord",
        "accountpool.io/cordon-reason",
        Some("quota ticket 42"),
    )
    .await;
    hap.shoot("foreign", "aws-used").await;
    // The one claim takes aws-free or aws-own; which one is the hash's choice.
    hap.claim("c1", aws("ga-1", "s1")).await;
    let claimed = hap.bound("c1").await;
    assert!(
        ["aws-free", "aws-own"].contains(&claimed.as_str()),
        "{claimed}"
    );
    let expected = want(&[
        ("Free", 1),
        ("Claimed", 1),
        ("Dirty", 1),
        ("Cordoned", 1),
        ("InUseWithoutTenant", 1),
        ("Internal", 1),
    ]);
    eventually(
        Duration::from_secs(60),
        "every state in status.pools",
        || async { (states(&hap).await? == expected).then_some(()) },
    )
    .await;
    let st = hap.config_status().await;
    let pool = st
        .pools
        .iter()
        .find(|p| p.hyperscaler_type == "aws")
        .expect("aws pool");
    assert!(pool.oldest_dirty_since.is_some(), "{pool:?}");
    let cordoned: Vec<(&str, &str)> = pool
        .cordoned
        .iter()
        .map(|c| (c.binding.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(cordoned, [("aws-cord", "quota ticket 42")]);
    let text = metrics(&hap);
    for line in [
        r#"hap_pool_bindings{hyperscaler_type="aws",eu_access="false",state="Dirty"} 1"#,
        r#"hap_pool_bindings{hyperscaler_type="aws",eu_access="false",state="Free"} 1"#,
        r#"hap_pool_bindings{hyperscaler_type="aws",eu_access="false",state="Suspect"} 0"#,
    ] {
        assert!(text.contains(line), "metrics lack {line}:\n{text}");
    }
    assert!(
        text.contains(r#"hap_pool_oldest_dirty_seconds{hyperscaler_type="aws",eu_access="false"}"#),
        "{text}"
    );
    // The cleanup contract: the job removes dirty and the tenant label; the binding is Free.
    hap.label("aws-dirty", "dirty", None).await;
    hap.label("aws-dirty", "tenantName", None).await;
    let cleaned = want(&[
        ("Free", 2),
        ("Claimed", 1),
        ("Cordoned", 1),
        ("InUseWithoutTenant", 1),
        ("Internal", 1),
    ]);
    eventually(
        Duration::from_secs(60),
        "the cleaned binding counted Free",
        || async { (states(&hap).await? == cleaned).then_some(()) },
    )
    .await;
    let st = hap.config_status().await;
    let pool = st
        .pools
        .iter()
        .find(|p| p.hyperscaler_type == "aws")
        .expect("aws pool");
    assert_eq!(pool.oldest_dirty_since, None, "no dirty binding left");
}

/// The events on the HapConfig with this reason, their messages joined.
async fn events(hap: &Hap, reason: &str) -> String {
    let selector = format!("reason={reason},involvedObject.name={}", hap.config);
    let (ok, out, err) = kubectl(&[
        "get",
        "events",
        "-A",
        "--field-selector",
        &selector,
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(ok, "{err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_binding_gets_no_new_tenant_its_tenant_keeps_it_and_status_and_events_say_why() {
    let hap = Hap::new(&["aws"], json!({})).await;
    hap.binding(
        "aws-1",
        "aws",
        &[
            ("hyperscalerType", "aws"),
            ("accountpool.io/cordoned", "true"),
        ],
    )
    .await;
    annotate(
        &hap,
        "aws-1",
        "accountpool.io/cordon-reason",
        Some("credentials rotated"),
    )
    .await;
    hap.binding(
        "aws-2",
        "aws",
        &[("hyperscalerType", "aws"), ("tenantName", "ga-1")],
    )
    .await;
    hap.shoot("s1", "aws-2").await;
    hap.label("aws-2", "accountpool.io/cordoned", Some("true"))
        .await;
    eventually(
        Duration::from_secs(60),
        "both cordoned in status.pools",
        || async { (states(&hap).await?.get("Cordoned") == Some(&2)).then_some(()) },
    )
    .await;
    // A new tenant: the only unclaimed binding is cordoned, so it waits.
    hap.claim("new", aws("ga-2", "s-new")).await;
    let message = hap.ready_reason("new", "PoolExhausted").await;
    assert!(message.contains("1 free but cordoned"), "{message}");
    // The tenant that holds the cordoned aws-2 keeps it for its next cluster.
    hap.claim("old", aws("ga-1", "s-old")).await;
    assert_eq!(hap.bound("old").await, "aws-2");
    let st = hap.config_status().await;
    let pool = st
        .pools
        .iter()
        .find(|p| p.hyperscaler_type == "aws")
        .expect("aws pool");
    let listed: Vec<(&str, Option<&str>, &str)> = pool
        .cordoned
        .iter()
        .map(|c| (c.binding.as_str(), c.tenant.as_deref(), c.reason.as_str()))
        .collect();
    assert_eq!(
        listed,
        [
            ("aws-1", None, "credentials rotated"),
            ("aws-2", Some("ga-1"), "")
        ]
    );
    let note = eventually(
        Duration::from_secs(30),
        "a BindingsCordoned event",
        || async {
            let out = events(&hap, "BindingsCordoned").await;
            out.contains("aws-2").then_some(out)
        },
    )
    .await;
    assert!(note.contains("aws-1 (credentials rotated)"), "{note}");
    assert!(!hap.labels("aws-1").await.contains_key("tenantName"));
    // Uncordoned: the waiting tenant gets it.
    hap.label("aws-1", "accountpool.io/cordoned", None).await;
    assert_eq!(hap.bound("new").await, "aws-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_paused_nothing_is_written_on_bindings_and_unpausing_resumes_everything() {
    let hap = Hap::new(&["aws"], json!({})).await;
    for name in ["aws-1", "aws-2"] {
        hap.binding(name, "aws", &[("hyperscalerType", "aws")])
            .await;
    }
    hap.claim("c1", aws("ga-1", "s1")).await;
    let first = hap.bound("c1").await;
    let other = if first == "aws-1" { "aws-2" } else { "aws-1" };
    hap.apply_config(&["aws"], json!({"paused": true})).await;
    hap.config_condition("Ready", "True").await;
    // A new claim waits, and nothing is claimed for it.
    hap.claim("c2", aws("ga-2", "s2")).await;
    let message = hap.ready_reason("c2", "Paused").await;
    assert!(
        message.contains("is paused (spec.paused: true)"),
        "{message}"
    );
    // A release waits: the finalizer stays and the binding is not marked dirty.
    hap.claims()
        .delete("c1", &kube::api::DeleteParams::default())
        .await
        .expect("delete c1");
    eventually(
        Duration::from_secs(60),
        "c1's release waits with Paused",
        || async {
            let s = hap.claims().get("c1").await.ok()?.status?;
            let c = condition(&s.conditions, "Released")?;
            (c.status == "False" && c.reason == "Paused").then_some(())
        },
    )
    .await;
    assert!(!hap.labels(&first).await.contains_key("dirty"));
    assert!(!hap.labels(other).await.contains_key("tenantName"));
    // Unpaused: the release and the claim go on.
    hap.apply_config(&["aws"], json!({"paused": false})).await;
    assert_eq!(hap.bound("c2").await, other);
    eventually(Duration::from_secs(60), "c1 released and gone", || async {
        let gone = hap.claims().get_opt("c1").await.ok()?.is_none();
        let dirty = hap.labels(&first).await.get("dirty").cloned();
        (gone && dirty.as_deref() == Some("true")).then_some(())
    })
    .await;
}

async fn annotations(hap: &Hap, binding: &str) -> BTreeMap<String, String> {
    bindings_api(&hap.garden, &hap.bindings_ns)
        .get(binding)
        .await
        .expect("get binding")
        .metadata
        .annotations
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_binding_cools_down_for_other_tenants_across_a_restart_but_not_for_its_own() {
    let mut hap = Hap::new(&["aws"], json!({"release": {"cooldown": "1h"}})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.claim("c1", aws("ga-1", "s1")).await;
    assert_eq!(hap.bound("c1").await, "aws-1");
    hap.claims()
        .delete("c1", &kube::api::DeleteParams::default())
        .await
        .expect("delete c1");
    let record = eventually(
        Duration::from_secs(60),
        "aws-1 released and recorded",
        || async {
            let labels = hap.labels("aws-1").await;
            let a = annotations(&hap, "aws-1").await;
            (labels.get("dirty").map(String::as_str) == Some("true")
                && a.contains_key("accountpool.io/released-at"))
            .then_some(a)
        },
    )
    .await;
    assert_eq!(
        record.get("accountpool.io/released-by").map(String::as_str),
        Some("ga-1")
    );
    // The cleanup job wipes the account and clears both labels; the operator restarts meanwhile.
    hap.stop_operator().await;
    hap.label("aws-1", "dirty", None).await;
    hap.label("aws-1", "tenantName", None).await;
    hap.start_operator().await;
    hap.claim("c2", aws("ga-2", "s2")).await;
    let message = hap.ready_reason("c2", "PoolExhausted").await;
    assert!(message.contains("released by another tenant"), "{message}");
    eventually(
        Duration::from_secs(60),
        "aws-1 CoolingDown in status",
        || async { (states(&hap).await?.get("CoolingDown") == Some(&1)).then_some(()) },
    )
    .await;
    assert!(!hap.labels("aws-1").await.contains_key("tenantName"));
    // The tenant that released it may have it back at once.
    hap.claim("c3", aws("ga-1", "s3")).await;
    assert_eq!(hap.bound("c3").await, "aws-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_bindings_are_taken_never_used_first_then_released_longest_ago() {
    let hap = Hap::new(&["aws"], json!({})).await;
    for (name, at) in [
        ("aws-a", Some("2020-01-01T00:00:00Z")),
        ("aws-b", None),
        ("aws-c", Some("2021-01-01T00:00:00Z")),
        ("aws-d", Some("2019-01-01T00:00:00Z")),
    ] {
        hap.binding(name, "aws", &[("hyperscalerType", "aws")])
            .await;
        if let Some(at) = at {
            annotate(&hap, name, "accountpool.io/released-at", Some(at)).await;
            annotate(&hap, name, "accountpool.io/released-by", Some("ga-old")).await;
        }
    }
    // Let the operator see the annotations before the first claim.
    eventually(Duration::from_secs(60), "four free bindings", || async {
        (states(&hap).await?.get("Free") == Some(&4)).then_some(())
    })
    .await;
    for (i, want) in ["aws-b", "aws-d", "aws-a", "aws-c"].iter().enumerate() {
        let name = format!("c{i}");
        hap.claim(&name, aws(&format!("ga-{i}"), &format!("s{i}")))
            .await;
        assert_eq!(&hap.bound(&name).await, want, "claim {i}");
    }
}

/// Sets a Shoot's `status.lastErrors` codes as the gardenlet would (through shoots/status).
async fn shoot_errors(hap: &Hap, shoot: &str, codes: &[&str]) {
    support::garden::set_shoot_errors(&hap.garden, &hap.bindings_ns, shoot, codes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_whose_shoots_report_account_errors_is_suspect_until_they_clear() {
    let hap = Hap::new(&["aws"], json!({})).await;
    hap.binding(
        "aws-1",
        "aws",
        &[("hyperscalerType", "aws"), ("tenantName", "ga-1")],
    )
    .await;
    hap.binding(
        "aws-2",
        "aws",
        &[("hyperscalerType", "aws"), ("tenantName", "ga-2")],
    )
    .await;
    hap.shoot("s1", "aws-1").await;
    hap.shoot("s2", "aws-2").await;
    hap.config_condition("AccountsHealthy", "True").await;
    // A rate limit is not the account's fault: not suspect by default.
    shoot_errors(&hap, "s2", &["ERR_INFRA_RATE_LIMITS_EXCEEDED"]).await;
    shoot_errors(&hap, "s1", &["ERR_INFRA_UNAUTHORIZED"]).await;
    let cond = hap.config_condition("AccountsHealthy", "False").await;
    assert_eq!(cond.reason, "Suspect");
    assert!(
        cond.message.contains("aws-1 (ERR_INFRA_UNAUTHORIZED)"),
        "{}",
        cond.message
    );
    assert!(!cond.message.contains("aws-2"), "{}", cond.message);
    let expected = want(&[("Claimed", 1), ("Suspect", 1)]);
    eventually(
        Duration::from_secs(60),
        "aws-1 Suspect in status.pools",
        || async { (states(&hap).await? == expected).then_some(()) },
    )
    .await;
    let note = eventually(
        Duration::from_secs(30),
        "a BindingsSuspect event",
        || async {
            let out = events(&hap, "BindingsSuspect").await;
            (!out.is_empty()).then_some(out)
        },
    )
    .await;
    assert!(note.contains("aws-1"), "{note}");
    // The errors clear: the binding is Claimed again.
    shoot_errors(&hap, "s1", &[]).await;
    hap.config_condition("AccountsHealthy", "True").await;
    let cleared = want(&[("Claimed", 2)]);
    eventually(Duration::from_secs(60), "aws-1 Claimed again", || async {
        (states(&hap).await? == cleared).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_below_its_min_free_is_reported_pool_low_with_its_claim_rate_and_forecast() {
    let hap = Hap::new(
        &["aws"],
        json!({"poolLow": {"minFree": 1, "pools": {"aws": 2}}}),
    )
    .await;
    for name in ["aws-1", "aws-2", "aws-3"] {
        hap.binding(name, "aws", &[("hyperscalerType", "aws")])
            .await;
    }
    hap.config_condition("PoolsAvailable", "True").await;
    // Two claims leave one free binding, below the pool's minimum of 2.
    for i in 1..=2 {
        let name = format!("c{i}");
        hap.claim(&name, aws(&format!("ga-{i}"), &format!("s{i}")))
            .await;
        hap.bound(&name).await;
    }
    let cond = hap.config_condition("PoolsAvailable", "False").await;
    assert_eq!(cond.reason, "PoolLow");
    assert!(
        cond.message
            .contains("hyperscalerType=aws (1 free, minFree 2)"),
        "{}",
        cond.message
    );
    let pool = eventually(
        Duration::from_secs(60),
        "claim rate in status.pools",
        || async {
            let st = hap.config_status().await;
            let p = st.pools.into_iter().find(|p| p.hyperscaler_type == "aws")?;
            (p.claims_in_window == Some(2)).then_some(p)
        },
    )
    .await;
    assert_eq!(pool.min_free, Some(2));
    // Two claims in the default 24 h window: 2 per day, one free binding lasts half a day.
    assert_eq!(pool.claim_rate_per_day.as_deref(), Some("2.00"));
    assert_eq!(pool.days_until_empty.as_deref(), Some("0.5"));
    let text = metrics(&hap);
    for line in [
        r#"hap_pool_claims_per_day{hyperscaler_type="aws",eu_access="false"} 2.0"#,
        r#"hap_pool_days_until_empty{hyperscaler_type="aws",eu_access="false"} 0.5"#,
        r#"hap_pool_min_free{hyperscaler_type="aws",eu_access="false"} 2"#,
    ] {
        assert!(text.contains(line), "metrics lack {line}:\n{text}");
    }
    let note = eventually(Duration::from_secs(30), "a PoolLow event", || async {
        let out = events(&hap, "PoolLow").await;
        (!out.is_empty()).then_some(out)
    })
    .await;
    assert!(note.contains("hyperscalerType=aws"), "{note}");
    // A new binding brings the pool back to its minimum.
    hap.binding("aws-4", "aws", &[("hyperscalerType", "aws")])
        .await;
    let cond = hap.config_condition("PoolsAvailable", "True").await;
    assert_eq!(cond.reason, "PoolsPresent");
}

/// The webhook while paused (Shoot source, through the real gardener-apiserver): a new request
/// is refused with reason Paused and a retry message, nothing is claimed; unpaused, the same
/// request gets its binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_paused_the_webhook_refuses_new_shoot_requests_with_paused_and_creates_nothing() {
    use support::garden::shoot_resource;
    use support::platform::api;
    use support::shoot_hook::{refused, request_labels, request_shoot, serve_shoots, shoot_source};
    let scope = unique("paused");
    let source = shoot_source(&scope);
    let mut hap =
        Hap::without_operator(&["aws"], json!({"requestSources": source, "paused": true})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    let _hook = serve_shoots(&mut hap, &scope).await;
    let obj = request_shoot(&hap, "s1", None, request_labels(&scope, "ga-1")).await;
    let shoots = api(&hap.garden, &hap.bindings_ns, &shoot_resource());
    let message = refused(
        shoots.create(&kube::api::PostParams::default(), &obj).await,
        "Paused",
    );
    assert!(
        message.contains("Paused") && message.contains("Retry"),
        "{message}"
    );
    assert!(
        hap.claims()
            .list(&Default::default())
            .await
            .expect("claims")
            .items
            .is_empty()
    );
    assert!(!hap.labels("aws-1").await.contains_key("tenantName"));
    // Unpaused, the same request is served.
    hap.apply_config(&["aws"], json!({"requestSources": source, "paused": false}))
        .await;
    hap.config_condition("Ready", "True").await;
    let served = eventually(
        Duration::from_secs(60),
        "the Shoot admitted with a binding",
        || async {
            shoots
                .create(&kube::api::PostParams::default(), &obj)
                .await
                .ok()
        },
    )
    .await;
    assert_eq!(
        served
            .data
            .pointer("/spec/credentialsBindingName")
            .and_then(|v| v.as_str()),
        Some("aws-1")
    );
}

/// `kubectl ARGS` against the operator's cluster; the command must succeed. Its stdout.
fn kubectl_ok(args: &[&str]) -> String {
    let (ok, out, err) = support::platform::kubectl_at(&support::kubeconfig(), args, None);
    assert!(ok, "kubectl {args:?}: {err}");
    out
}

/// The value of a metric line `name{config="…"} value`, if the series exists.
fn config_metric(hap: &Hap, name: &str) -> Option<i64> {
    let prefix = format!("{name}{{config=\"{}\"}} ", hap.config);
    metrics(hap)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_shows_on_the_hapconfig_with_since_and_by_whom_a_column_and_metrics() {
    let hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    let running = hap.config_condition("Paused", "False").await;
    assert_eq!(running.reason, "NotPaused");
    // Paused by a person with kubectl: the field manager of spec.paused names the tool.
    kubectl_ok(&[
        "patch",
        "hapconfig",
        &hap.config,
        "--type=merge",
        "-p",
        r#"{"spec":{"paused":true}}"#,
    ]);
    let paused = hap.config_condition("Paused", "True").await;
    assert_eq!(paused.reason, "Paused");
    assert!(
        paused.message.contains("(set by kubectl-patch)"),
        "{}",
        paused.message
    );
    hap.config_condition("Ready", "True").await;
    let since = paused.last_transition_time.0.as_second();
    eventually(
        Duration::from_secs(30),
        "hap_paused 1 since the transition, threshold 4h",
        || async {
            (config_metric(&hap, "hap_paused")? == 1
                && config_metric(&hap, "hap_paused_since_timestamp_seconds")? == since
                && config_metric(&hap, "hap_paused_alert_after_seconds")? == 14_400)
                .then_some(())
        },
    )
    .await;
    let table = kubectl_ok(&["get", "hapconfig", &hap.config]);
    eprintln!("$ kubectl get hapconfig\n{table}");
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    // After the columns scripts already read by position; before AGE.
    assert_eq!(
        rows[0][..7],
        ["NAME", "READY", "RULES", "FREE", "CLAIMED", "PAUSED", "AGE"],
        "{table}"
    );
    assert_eq!((rows[1][1], rows[1][5]), ("True", "True"), "{table}");
    // The person who paused says how long it may last.
    kubectl_ok(&[
        "annotate",
        "hapconfig",
        &hap.config,
        "accountpool.io/paused-alert-after=12h",
    ]);
    eventually(Duration::from_secs(30), "threshold 12h", || async {
        (config_metric(&hap, "hap_paused_alert_after_seconds")? == 43_200).then_some(())
    })
    .await;
    let still = hap.config_condition("Paused", "True").await;
    assert_eq!(still.last_transition_time, paused.last_transition_time);
    kubectl_ok(&[
        "patch",
        "hapconfig",
        &hap.config,
        "--type=merge",
        "-p",
        r#"{"spec":{"paused":false}}"#,
    ]);
    hap.config_condition("Paused", "False").await;
    eventually(
        Duration::from_secs(30),
        "hap_paused 0, no since",
        || async {
            (config_metric(&hap, "hap_paused")? == 0
                && config_metric(&hap, "hap_paused_since_timestamp_seconds").is_none())
            .then_some(())
        },
    )
    .await;
}

/// `hap pools ARGS` against the test's garden; returns (exit code, stdout, stderr).
fn hap_pools(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hap"))
        .env("KUBECONFIG", kubeconfig())
        .env_remove("HAP_GARDEN_KUBECONFIG")
        .arg("pools")
        .args(args)
        .output()
        .expect("run hap pools");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The extended cleanup contract, as a cleanup job would drive it: a released binding the job
/// could not wipe carries `accountpool.io/cleanup-failed=true` and a reason; it is
/// `CleanupFailed` in status, metrics and `hap pools`, no new tenant gets it (even once `dirty`
/// is gone), the HapConfig gets an event naming it and the reason; when the job removes the mark
/// of a cleaned binding, it is Free and the waiting claim takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_the_cleanup_job_marks_failed_is_never_claimed_until_the_job_clears_the_mark() {
    const MARK: &str = "accountpool.io/cleanup-failed";
    const WHY: &str = "accountpool.io/cleanup-failed-reason";
    let hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.claim("c1", aws("ga-1", "s1")).await;
    assert_eq!(hap.bound("c1").await, "aws-1");
    hap.claims()
        .delete("c1", &kube::api::DeleteParams::default())
        .await
        .expect("delete c1");
    eventually(Duration::from_secs(60), "aws-1 released dirty", || async {
        (hap.labels("aws-1").await.get("dirty").map(String::as_str) == Some("true")).then_some(())
    })
    .await;
    // The job fails: it keeps dirty and the tenant, and marks the binding with its reason.
    annotate(&hap, "aws-1", WHY, Some("delete of IAM user refused: 403")).await;
    hap.label("aws-1", MARK, Some("true")).await;
    let failed = want(&[("CleanupFailed", 1)]);
    eventually(
        Duration::from_secs(60),
        "aws-1 CleanupFailed in status",
        || async { (states(&hap).await? == failed).then_some(()) },
    )
    .await;
    let st = hap.config_status().await;
    let pool = st
        .pools
        .iter()
        .find(|p| p.hyperscaler_type == "aws")
        .expect("aws pool");
    let listed: Vec<(&str, Option<&str>, &str)> = pool
        .cleanup_failed
        .iter()
        .map(|c| (c.binding.as_str(), c.tenant.as_deref(), c.reason.as_str()))
        .collect();
    assert_eq!(
        listed,
        [("aws-1", Some("ga-1"), "delete of IAM user refused: 403")]
    );
    let line =
        r#"hap_pool_bindings{hyperscaler_type="aws",eu_access="false",state="CleanupFailed"} 1"#;
    eventually(
        Duration::from_secs(30),
        "the CleanupFailed gauge",
        || async { metrics(&hap).contains(line).then_some(()) },
    )
    .await;
    let (code, out, err) = hap_pools(&["--config", &hap.config, "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("json");
    let aws_life = report["lifecycle"]
        .as_array()
        .expect("lifecycle")
        .iter()
        .find(|p| p["hyperscalerType"] == "aws")
        .cloned()
        .expect("aws in hap pools");
    assert_eq!(aws_life["states"]["CleanupFailed"], 1, "{out}");
    assert_eq!(aws_life["cleanupFailed"][0]["binding"], "aws-1", "{out}");
    let (code, table, err) = hap_pools(&["--config", &hap.config]);
    assert_eq!(code, 0, "{err}");
    assert!(table.contains("CleanupFailed=1"), "{table}");
    let note = eventually(Duration::from_secs(30), "a CleanupFailed event", || async {
        let out = events(&hap, "CleanupFailed").await;
        out.contains("aws-1").then_some(out)
    })
    .await;
    assert!(note.contains("delete of IAM user refused: 403"), "{note}");
    // A new tenant waits: the pool's only binding failed its cleanup.
    hap.claim("c2", aws("ga-2", "s2")).await;
    hap.ready_reason("c2", "PoolExhausted").await;
    // The job retries and wipes the account, clears dirty and the tenant but not yet its mark:
    // still nobody's.
    hap.label("aws-1", "dirty", None).await;
    hap.label("aws-1", "tenantName", None).await;
    eventually(
        Duration::from_secs(60),
        "the waiting claim names the mark",
        || async {
            let m = hap.ready_reason("c2", "PoolExhausted").await;
            m.contains("1 free but marked accountpool.io/cleanup-failed=true")
                .then_some(())
        },
    )
    .await;
    assert_eq!(states(&hap).await, Some(failed));
    assert!(!hap.labels("aws-1").await.contains_key("tenantName"));
    // The job removes its mark: the binding is Free and the waiting claim takes it.
    hap.label("aws-1", MARK, None).await;
    assert_eq!(hap.bound("c2").await, "aws-1");
    eventually(
        Duration::from_secs(30),
        "a CleanupFailedCleared event",
        || async {
            let out = events(&hap, "CleanupFailedCleared").await;
            out.contains("aws-1").then_some(())
        },
    )
    .await;
    eventually(Duration::from_secs(60), "aws-1 Claimed", || async {
        (states(&hap).await? == want(&[("Claimed", 1)])).then_some(())
    })
    .await;
}

/// The webhook in observe mode (Shoot source, through the real gardener-apiserver): a Shoot that
/// names the binding another pool chose is admitted untouched — no claim, no adoption, no binding
/// write — even though the source selects it, so that pool's path never depends on the operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_observing_the_webhook_refuses_requests_naming_no_binding_and_creates_nothing() {
    use support::garden::shoot_resource;
    use support::platform::api;
    use support::shoot_hook::{refused, request_labels, request_shoot, serve_shoots, shoot_source};
    let scope = unique("observe");
    let source = shoot_source(&scope);
    let mut hap = Hap::without_operator(
        &["aws"],
        json!({"requestSources": source, "mode": "Observe"}),
    )
    .await;
    hap.binding(
        "aws-1",
        "aws",
        &[("hyperscalerType", "aws"), ("tenantName", "ga-1")],
    )
    .await;
    let _hook = serve_shoots(&mut hap, &scope).await;
    hap.config_condition("Ready", "True").await;
    let before = bindings_api(&hap.garden, &hap.bindings_ns)
        .get("aws-1")
        .await
        .expect("aws-1");
    // KEB's request names its binding: admitted untouched.
    let obj = request_shoot(&hap, "s1", Some("aws-1"), request_labels(&scope, "ga-1")).await;
    let shoots = api(&hap.garden, &hap.bindings_ns, &shoot_resource());
    let admitted = shoots
        .create(&kube::api::PostParams::default(), &obj)
        .await
        .expect("the Shoot is admitted while observing");
    assert_eq!(
        admitted
            .data
            .pointer("/spec/credentialsBindingName")
            .and_then(|v| v.as_str()),
        Some("aws-1")
    );
    let annotations = admitted.metadata.annotations.clone().unwrap_or_default();
    assert!(
        annotations
            .keys()
            .all(|k| !k.starts_with("accountpool.io/")),
        "{annotations:?}"
    );
    // A request that names no binding is refused `Observing`: nothing would give it one now,
    // and after the cutover it would not be served either (the webhook serves on create).
    let bare = request_shoot(&hap, "s2", None, request_labels(&scope, "ga-1")).await;
    let message = refused(
        shoots
            .create(&kube::api::PostParams::default(), &bare)
            .await,
        "Observing",
    );
    assert!(
        message.contains("Observing") && message.contains("names no binding"),
        "{message}"
    );
    // The source pass has seen the Shoot (it matches the source), and no claim exists.
    hap.config_condition("Observing", "True").await;
    eventually(
        Duration::from_secs(60),
        "the source pass to see the Shoot",
        || async {
            let st = hap.config_status().await;
            let s = st.request_sources.first()?;
            (s.matching >= 1).then_some(())
        },
    )
    .await;
    let claims = hap
        .claims()
        .list(&Default::default())
        .await
        .expect("claims");
    assert!(claims.items.is_empty(), "{:?}", claims.items);
    let after = bindings_api(&hap.garden, &hap.bindings_ns)
        .get("aws-1")
        .await
        .expect("aws-1");
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "observe mode wrote the binding"
    );
}

/// A request that names a binding the cleanup job marked failed (adoption): the cluster that
/// already runs on it is adopted and counted, and the binding stays `CleanupFailed`; a request
/// for a new cluster there waits, naming the mark, and nothing is written on the binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adoption_onto_a_binding_marked_cleanup_failed_counts_what_runs_and_starts_nothing_new()
{
    const MARK: &str = "accountpool.io/cleanup-failed";
    let hap = Hap::new(&["aws"], json!({})).await;
    let labels = [
        ("hyperscalerType", "aws"),
        ("tenantName", "ga-1"),
        (MARK, "true"),
    ];
    hap.binding("aws-1", "aws", &labels).await;
    hap.shoot("running", "aws-1").await;
    eventually(Duration::from_secs(60), "aws-1 CleanupFailed", || async {
        (states(&hap).await?.get("CleanupFailed") == Some(&1)).then_some(())
    })
    .await;
    let before = hap.labels("aws-1").await;
    let adopt = |shoot: &str| json!({"globalAccount": "ga-1", "plan": "aws", "shootName": shoot, "adoptBinding": "aws-1"});
    hap.claim("new", adopt("new")).await;
    let message = hap.ready_reason("new", "BindingNotTenant").await;
    assert!(message.contains(MARK), "{message}");
    hap.claim("run", adopt("running")).await;
    assert_eq!(hap.bound("run").await, "aws-1");
    let st = hap
        .claims()
        .get("run")
        .await
        .expect("run")
        .status
        .expect("status");
    assert_eq!(st.decision, Some(hap_operator::api::Decision::Adopted));
    // Still CleanupFailed, and the waiting request still waits.
    assert_eq!(
        states(&hap)
            .await
            .and_then(|s| s.get("CleanupFailed").copied()),
        Some(1)
    );
    let c = hap.claims().get("new").await.expect("new");
    assert_ne!(
        c.status.and_then(|s| s.phase),
        Some(hap_operator::api::ClaimPhase::Bound)
    );
    let after = hap.labels("aws-1").await;
    assert_eq!(before.get("tenantName"), after.get("tenantName"));
    assert_eq!(after.get(MARK).map(String::as_str), Some("true"));
}

/// An edit that switches to Observe but is invalid otherwise holds binding writes at once: the
/// last valid rules stay in force, and a new claim waits `Observing` instead of being bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_edit_that_switches_to_observe_holds_binding_writes_at_once() {
    let hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.config_condition("Ready", "True").await;
    // Two entries for the same plan: invalid.
    hap.apply_config(&["aws", "aws"], json!({"mode": "Observe"}))
        .await;
    hap.config_condition("RulesValid", "False").await;
    hap.claim("c1", json!({"globalAccount": "ga-1", "plan": "aws"}))
        .await;
    let why = hap.ready_reason("c1", "Observing").await;
    assert!(why.contains("observes"), "{why}");
    hap.config_condition("Observing", "True").await;
    assert!(!hap.labels("aws-1").await.contains_key("tenantName"));
}

/// KEB names the binding of its Runtime itself: while observing such a Runtime is admitted
/// untouched, and one that names none (nothing would serve it, now or after the cutover) is
/// refused `Observing`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_observing_a_runtime_naming_its_binding_is_admitted_and_one_naming_none_refused() {
    use support::platform::{
        RuntimeSpec, SCOPE_LABEL, api, install_platform_crds, runtime, runtime_resource,
        scoped_namespace,
    };
    use support::shoot_hook::{refused, serve_shoots};
    install_platform_crds().await;
    let scope = unique("observe-rt");
    let source = json!([{"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}}]);
    let mut hap = Hap::without_operator(
        &["aws"],
        json!({"requestSources": source, "mode": "Observe"}),
    )
    .await;
    hap.binding(
        "aws-1",
        "aws",
        &[("hyperscalerType", "aws"), ("tenantName", "ga-1")],
    )
    .await;
    let served = serve_shoots(&mut hap, &scope).await;
    let _runtimes = served.register("Runtime", "/mutate/runtimes", &scope, json!({}));
    hap.config_condition("Ready", "True").await;
    let ns = scoped_namespace(&hap.client, "kcp", &scope).await;
    let runtimes = api(&hap.client, &ns, &runtime_resource());
    let rt = |name, binding| RuntimeSpec {
        name,
        global_account: Some("ga-1"),
        plan: "aws",
        platform_region: "cf-us10",
        region: "us-east-1",
        provider: "aws",
        binding,
        extra_labels: &[],
    };
    let pp = kube::api::PostParams::default();
    let keb = runtimes
        .create(&pp, &runtime(&ns, &scope, &rt("rt-keb", "aws-1")))
        .await
        .expect("KEB's Runtime is admitted while observing");
    assert_eq!(
        keb.data
            .pointer("/spec/shoot/secretBindingName")
            .and_then(|v| v.as_str()),
        Some("aws-1")
    );
    let message = refused(
        runtimes
            .create(&pp, &runtime(&ns, &scope, &rt("rt-bare", "")))
            .await,
        "Observing",
    );
    assert!(
        message.contains("this Runtime names no binding"),
        "{message}"
    );
    assert!(
        hap.claims()
            .list(&Default::default())
            .await
            .expect("claims")
            .items
            .is_empty()
    );
}
