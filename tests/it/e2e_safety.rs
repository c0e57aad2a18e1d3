//! Issue 11 against the real control plane: what the operator does when its inventory cannot be
//! read, when a claim is deleted without a config in force, after a bindingNamespace change, how
//! often waiting claims are looked at again, two instances sharing a cluster, and `hap run` with
//! a missing lease namespace. Each test failed before its fix (see the defects 5, 8, 9,
//! 10); none waits a fixed time and then asserts: positive outcomes are polled with a deadline,
//! and absences are checked after a signal that the operator has processed the cause.

use crate::support;

use std::time::Duration;

use hap_operator::api::AccountClaim;
use hap_operator::controller::{Handle, RunArgs};
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use support::*;

fn aws(ga: &str, shoot: &str) -> serde_json::Value {
    json!({"globalAccount": ga, "plan": "aws", "shootName": shoot})
}

/// An operator in this process that need not become ready.
struct Unready {
    handle: Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Unready {
    fn start(client: &kube::Client, args: RunArgs) -> Self {
        let handle = Handle {
            ready: Default::default(),
            metrics: Default::default(),
            webhook: Default::default(),
            metrics_addr: Default::default(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (client, h) = (client.clone(), handle.clone());
        let task = tokio::spawn(async move {
            let stop = async move {
                let _ = rx.await;
            };
            let _ = hap_operator::controller::run_with(client.into(), args, h, stop).await;
        });
        Self {
            handle,
            stop: Some(tx),
            task,
        }
    }

    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let task = std::mem::replace(&mut self.task, tokio::spawn(async {}));
        let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
    }
}

/// A metric's value in the OpenMetrics text, summed over the series whose labels contain `with`.
fn metric(text: &str, name: &str, with: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(with))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn claims_say_why_while_the_inventory_cannot_be_read_and_readyz_waits() {
    // Defect 5: with the binding and Shoot caches unable to list (here: a garden that refuses
    // the operator's credentials), claims were requeued every 300 ms with no condition, and
    // with leader election /readyz said ready before any cache had synced.
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    hap.claim("c1", aws("ga-1", "s1")).await;
    // A claim bound before (as an earlier operator recorded it): it must stay so.
    hap.claim("c0", aws("ga-0", "s0")).await;
    let bound = json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
        "status": {"phase": "Bound", "credentialsBindingName": "b0",
                   "bindingNamespace": hap.bindings_ns, "hyperscalerType": "aws"}});
    hap.claims()
        .patch_status(
            "c0",
            &PatchParams::apply("earlier-operator").force(),
            &Patch::Apply(bound),
        )
        .await
        .expect("record c0 as bound");
    let bad = tempfile::NamedTempFile::new().expect("temp file");
    let good = std::fs::read_to_string(kubeconfig()).expect("kubeconfig");
    let refused: String = good
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("token:") {
                "    token: not-a-token-this-server-knows".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(bad.path(), refused).expect("write kubeconfig");
    let mut args = hap.run_args();
    args.garden_kubeconfig = Some(bad.path().to_path_buf());
    args.leader_elect = true;
    args.lease_namespace = hap.claims_ns.clone();
    args.lease_name = unique("lease");
    let op = Unready::start(&hap.client, args);
    let message = hap.ready_reason("c1", "InventoryUnavailable").await;
    assert!(
        message.contains("cannot list") && message.contains(&hap.bindings_ns),
        "{message}"
    );
    assert!(
        !op.handle.ready.is_ready(),
        "/readyz must not be ready while the binding and Shoot caches have not listed"
    );
    let leading = op.handle.metrics.encode();
    assert_eq!(metric(&leading, "hap_leader", ""), 1.0, "{leading}");
    // Found by the chaos test: a Bound claim reconciled while the inventory could not be read got
    // the pending status, which erased its binding; it was then bound again elsewhere.
    let reconciled = || {
        metric(
            &op.handle.metrics.encode(),
            "hap_reconcile_duration_seconds_count",
            "accountclaim",
        )
    };
    eventually(
        Duration::from_secs(30),
        "both claims reconciled",
        || async { (reconciled() >= 3.0).then_some(()) },
    )
    .await;
    let c0 = hap
        .claims()
        .get("c0")
        .await
        .expect("c0")
        .status
        .expect("status");
    assert_eq!(
        (c0.phase, c0.credentials_binding_name.as_deref()),
        (Some(hap_operator::api::ClaimPhase::Bound), Some("b0"))
    );
    op.stop().await;
}

#[tokio::test]
async fn a_claim_deleted_without_a_config_in_force_is_released_once_there_is_one() {
    // Defect 9: with no valid config in force, a deleted claim's finalizer was removed without
    // marking its binding dirty, so the tenant's next claim reused an account nobody cleaned.
    let mut hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("b1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.claim("c1", aws("ga-1", "s1")).await;
    assert_eq!(hap.bound("c1").await, "b1");
    hap.configs()
        .delete(&hap.config, &DeleteParams::default())
        .await
        .expect("delete HapConfig");
    // The operator has seen the config go once a new claim says so.
    hap.claim("c2", aws("ga-2", "s2")).await;
    hap.ready_reason("c2", "ConfigMissing").await;
    hap.claims()
        .delete("c1", &DeleteParams::default())
        .await
        .expect("delete claim");
    let api = hap.claims();
    eventually(
        Duration::from_secs(30),
        "a ReleaseWaiting event for c1",
        || {
            let client = hap.client.clone();
            let ns = hap.claims_ns.clone();
            async move {
                let events: kube::Api<k8s_openapi::api::events::v1::Event> =
                    kube::Api::namespaced(client, &ns);
                let list = events.list(&Default::default()).await.ok()?;
                list.items
                    .iter()
                    .any(|e| {
                        e.reason.as_deref() == Some("ReleaseWaiting")
                            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("c1")
                    })
                    .then_some(())
            }
        },
    )
    .await;
    let c1 = api.get("c1").await.expect("c1 still there");
    assert!(
        c1.metadata.deletion_timestamp.is_some() && !c1.finalizers().is_empty(),
        "the finalizer stays while the binding cannot be released"
    );
    assert!(!hap.labels("b1").await.contains_key("dirty"));
    hap.apply_config(&["aws"], json!({})).await;
    eventually(Duration::from_secs(30), "c1 gone", || {
        let api = api.clone();
        async move { api.get_opt("c1").await.ok()?.is_none().then_some(()) }
    })
    .await;
    assert_eq!(
        hap.labels("b1").await.get("dirty").map(String::as_str),
        Some("true"),
        "released for the cleanup job"
    );
    hap.stop_operator().await;
}

#[tokio::test]
async fn claims_bound_in_the_old_binding_namespace_stay_bound_and_are_never_released_here() {
    // Defect 8: after a bindingNamespace change, claims bound in the old namespace were reported
    // BindingLost, and a release could mark dirty a same-named binding they never used.
    let mut hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("b1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.claim("c1", aws("ga-1", "s1")).await;
    assert_eq!(hap.bound("c1").await, "b1");
    let new_ns = namespace(&hap.client, "garden-new").await;
    create_binding(
        &hap.client,
        &new_ns,
        "b1",
        "aws",
        &[("hyperscalerType", "aws"), ("tenantName", "ga-1")],
    )
    .await;
    hap.apply_config(&["aws"], json!({"bindingNamespace": new_ns}))
        .await;
    hap.config_condition("Ready", "True").await;
    // A new claim binds in the new namespace: the operator works on it.
    hap.claim("c2", aws("ga-2", "s2")).await;
    create_binding(
        &hap.client,
        &new_ns,
        "b2",
        "aws",
        &[("hyperscalerType", "aws")],
    )
    .await;
    assert_eq!(hap.bound("c2").await, "b2");
    let c1 = hap.claims().get("c1").await.expect("c1");
    let status = c1.status.expect("status");
    assert_eq!(
        status.phase,
        Some(hap_operator::api::ClaimPhase::Bound),
        "not lost: {:?}",
        status.conditions
    );
    assert_eq!(
        status.binding_namespace.as_deref(),
        Some(hap.bindings_ns.as_str())
    );
    // Deleting it must not touch the same-named binding of the new namespace.
    hap.claims()
        .delete("c1", &DeleteParams::default())
        .await
        .expect("delete c1");
    let api = hap.claims();
    eventually(Duration::from_secs(30), "c1 gone", || {
        let api = api.clone();
        async move { api.get_opt("c1").await.ok()?.is_none().then_some(()) }
    })
    .await;
    let here = binding_labels(&hap.client, &new_ns, "b1").await;
    assert!(!here.contains_key("dirty"), "{here:?}");
    hap.stop_operator().await;
}

#[tokio::test]
async fn pool_exhausted_counts_claims_and_changes_of_other_pools_wake_nobody() {
    // Defect 10: every cache change re-enqueued every non-Bound claim, `PoolExhausted` counted
    // reconciles rather than claims, and its message carried a count that changed.
    let hap = Hap::new(&["aws", "gcp"], json!({})).await;
    for i in 0..4 {
        hap.claim(&format!("c{i}"), aws(&format!("ga-{i}"), &format!("s{i}")))
            .await;
    }
    for i in 0..4 {
        hap.ready_reason(&format!("c{i}"), "PoolExhausted").await;
    }
    let metrics = || {
        hap.operator
            .as_ref()
            .expect("operator")
            .handle
            .metrics
            .encode()
    };
    let versions = || async {
        let mut out = Vec::new();
        for i in 0..4 {
            let c: AccountClaim = hap.claims().get(&format!("c{i}")).await.expect("claim");
            out.push(c.metadata.resource_version.unwrap_or_default());
        }
        out
    };
    let before = versions().await;
    // Another pool moves, several times; the HapConfig figures show the operator saw it all.
    for i in 0..5 {
        hap.binding(&format!("g{i}"), "gcp", &[("hyperscalerType", "gcp")])
            .await;
    }
    eventually(Duration::from_secs(30), "gcp figures", || async {
        let st = hap.config_status().await;
        let free: i64 = st
            .rules
            .iter()
            .flat_map(|r| &r.pools)
            .filter(|p| p.hyperscaler_type == "gcp")
            .map(|p| p.free)
            .sum();
        (free == 5).then_some(())
    })
    .await;
    assert_eq!(
        versions().await,
        before,
        "waiting aws claims were rewritten"
    );
    let exhausted = metric(&metrics(), "hap_claim_outcomes_total", "PoolExhausted");
    assert_eq!(exhausted, 4.0, "one per claim that ran out");
    // One aws binding arrives: one claim binds; the others keep their status as it was.
    hap.binding("a0", "aws", &[("hyperscalerType", "aws")])
        .await;
    let bound = eventually(Duration::from_secs(30), "one aws claim bound", || async {
        for i in 0..4 {
            let c: AccountClaim = hap.claims().get(&format!("c{i}")).await.ok()?;
            if c.status.and_then(|s| s.phase) == Some(hap_operator::api::ClaimPhase::Bound) {
                return Some(i);
            }
        }
        None
    })
    .await;
    let after = versions().await;
    for i in (0..4).filter(|i| *i != bound) {
        assert_eq!(after[i], before[i], "c{i} rewritten by the refill");
    }
    assert_eq!(
        metric(&metrics(), "hap_claim_outcomes_total", "PoolExhausted"),
        4.0
    );
}

#[tokio::test]
async fn an_instance_leaves_alone_a_config_another_instance_serves() {
    // Defect 10: two instances that forgot --mark-ignored-configs=false overwrote each other's
    // HapConfig status forever (Ignored by one, Ready by the other).
    let client = client().await;
    let bindings_ns = namespace(&client, "garden").await;
    let (ns_a, ns_b) = (
        namespace(&client, "claims").await,
        namespace(&client, "claims").await,
    );
    let (cfg_a, cfg_b) = (unique("hap-a"), unique("hap-b"));
    let configs: kube::Api<hap_operator::api::HapConfig> = kube::Api::all(client.clone());
    for name in [&cfg_a, &cfg_b] {
        let body = json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig",
            "metadata": {"name": name}, "spec": {"bindingNamespace": bindings_ns, "rules": ["aws"]}});
        configs
            .patch(
                name,
                &PatchParams::apply("kubectl").force(),
                &Patch::Apply(body),
            )
            .await
            .expect("apply config");
    }
    let start = |name: &str, ns: &str| {
        let mut args = RunArgs::for_config(name);
        args.claim_namespace = Some(ns.to_string());
        args.mark_ignored_configs = true;
        Operator::start_with(&client, args)
    };
    let a = start(&cfg_a, &ns_a).await;
    let b = start(&cfg_b, &ns_b).await;
    let ready = |name: String| {
        let configs = configs.clone();
        async move {
            eventually(Duration::from_secs(30), &format!("{name} Ready"), || {
                let (configs, name) = (configs.clone(), name.clone());
                async move {
                    let st = configs.get(&name).await.ok()?.status?;
                    let c = condition(&st.conditions, "Ready")?;
                    (c.status == "True").then(|| st.clone())
                }
            })
            .await
        }
    };
    ready(cfg_a.clone()).await;
    ready(cfg_b.clone()).await;
    // From here on, record every Ready reason config b's status shows.
    let seen: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let watch = {
        let (configs, seen, name) = (configs.clone(), seen.clone(), cfg_b.clone());
        tokio::spawn(async move {
            use futures::StreamExt;
            let cfg =
                kube::runtime::watcher::Config::default().fields(&format!("metadata.name={name}"));
            let mut events = std::pin::pin!(kube::runtime::watcher(configs, cfg));
            while let Some(ev) = events.next().await {
                let c = match ev {
                    Ok(kube::runtime::watcher::Event::Apply(c))
                    | Ok(kube::runtime::watcher::Event::InitApply(c)) => c,
                    _ => continue,
                };
                if let Some(st) = c.status
                    && let Some(r) = condition(&st.conditions, "Ready")
                {
                    seen.lock().unwrap().push(r.reason.clone());
                }
            }
        })
    };
    // Make both instances look at config b again, several times, and wait until instance A has
    // reconciled that many more times.
    let count = |op: &Operator| {
        metric(
            &op.handle.metrics.encode(),
            "hap_reconcile_duration_seconds_count",
            "hapconfig",
        )
    };
    let before = count(&a);
    for i in 0..3 {
        let touch = json!({"metadata": {"annotations": {"example.com/touched": format!("{i}")}}});
        configs
            .patch(&cfg_b, &PatchParams::default(), &Patch::Merge(touch))
            .await
            .expect("touch config b");
    }
    eventually(
        Duration::from_secs(30),
        "instance A reconciles again",
        || async { (count(&a) >= before + 3.0).then_some(()) },
    )
    .await;
    watch.abort();
    let reasons = seen.lock().unwrap().clone();
    assert!(
        !reasons.is_empty() && reasons.iter().all(|r| r == "Ready"),
        "config b, served by instance B, was marked by instance A: {reasons:?}"
    );
    a.stop().await;
    b.stop().await;
}

#[test]
fn hap_run_names_a_missing_lease_namespace_and_how_to_fix_it() {
    // Defect 10: `hap run` with the default lease namespace missing stopped with a raw API error.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hap"))
        .args([
            "run",
            "--leader-elect=true",
            "--lease-namespace",
            "no-such-namespace-for-the-lease",
            "--http-addr",
            "127.0.0.1:0",
            // Not the default 0.0.0.0:8443: any other process there must not stop this one.
            "--metrics-addr=127.0.0.1:0",
        ])
        .env("KUBECONFIG", kubeconfig())
        .output()
        .expect("run hap");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("no-such-namespace-for-the-lease")
            && text.contains("kubectl create namespace no-such-namespace-for-the-lease"),
        "{text}"
    );
}
