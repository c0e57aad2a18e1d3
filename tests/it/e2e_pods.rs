//! End-to-end on a real node: the image `make image` builds, imported into containerd, run by a
//! kubelet from the shipped kustomize base and Helm chart — unchanged — in the node environment
//! (`e2e/testenv up --node`, see e2e/README.md). Both replicas Ready under Pod Security
//! `restricted` with their probes answered, metrics through the Service (kube-proxy) and pod IPs,
//! the claim flow with the operator under its own ServiceAccount token, leader failover by pod
//! deletion (a waiting replica takes the released Lease at once, before the old lease expires),
//! and the PodDisruptionBudget holding one replica through evictions.
//!
//! `make test` starts the node environment and exports `HAP_NODE_DIR`; by hand:
//! `e2e/testenv up --node --images $(scripts/image.sh)`, then
//! `cargo test --test it -- e2e_pods:: --nocapture` (the failover figures are printed).

use crate::support;

use crate::support::deploy;
use crate::support::node;

use std::process::Command;
use std::time::{Duration, Instant};

use deploy::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::DeleteParams;
use node::*;
use serde_json::{Value, json};
use support::*;

/// A claim Bound by the operator in the pod, and its binding labelled.
async fn claim_bound(hap: &Hap, claim: &str, tenant: &str) -> String {
    hap.claim(
        claim,
        json!({"globalAccount": tenant, "plan": "aws", "shootName": claim}),
    )
    .await;
    let binding = hap.bound(claim).await;
    assert_eq!(
        hap.labels(&binding)
            .await
            .get("tenantName")
            .map(String::as_str),
        Some(tenant)
    );
    binding
}

/// POSTs an Eviction for a pod, as `kubectl drain` does. (kube's client retries a 429 — the
/// PDB's refusal — with backoff, so kubectl answers here.)
fn evict(ns: &str, pod: &str) -> (bool, String, String) {
    let body = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pod, "namespace": ns}});
    kubectl_stdin(
        &[
            "create",
            "--raw",
            &format!("/api/v1/namespaces/{ns}/pods/{pod}/eviction"),
            "-f",
            "-",
        ],
        Some(&body.to_string()),
    )
}

/// Deletes the claims (the operator in the pods releases their bindings and removes its
/// finalizer) before the operator goes, so nothing is left waiting for it.
async fn release_all(hap: &Hap, claims: &[&str]) {
    for c in claims {
        hap.claims()
            .delete(c, &DeleteParams::default())
            .await
            .unwrap();
    }
    for c in claims {
        eventually(
            Duration::from_secs(60),
            &format!("claim {c} released and gone"),
            || async { hap.claims().get_opt(c).await.ok()?.is_none().then_some(()) },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_base_runs_as_pods_and_fails_over() {
    let _one = ONE_AT_A_TIME.lock().await;
    let client = node_client().await;
    // The base exactly as shipped: hap-system, the Gardener project `kyma` (namespace
    // garden-kyma, which the landscape of the node environment has), the HapConfig `default`.
    // Nothing is patched but the plain /metrics these tests read (`with_plain_metrics`).
    let objs = with_plain_metrics(kustomize("deploy/kustomize/base"));
    let claims_ns = unique("claims");
    let _cleanup = Cleanup(vec![
        vec!["uncordon".into(), NODE.into()],
        delete_args(&["namespace", &claims_ns]),
        delete_args(&["namespace", "hap-system"]),
        delete_args(&["hapconfig", "default"]),
        delete_args(&["clusterrolebinding", "hap-operator"]),
        delete_args(&["clusterrole", "hap-operator"]),
        delete_args(&["clusterrole", "hap-operator-view"]),
        delete_args(&["clusterrole", "hap-operator-edit"]),
    ]);
    kubectl_ok(&["create", "namespace", &claims_ns]);
    let hap = Hap {
        client: client.clone(),
        garden: client.clone(),
        garden_kubeconfig: None,
        config: "default".into(),
        bindings_ns: "garden-kyma".into(),
        claims_ns: claims_ns.clone(),
        operator: None,
    };
    hap.apply_config(&["aws"], json!({})).await;
    for i in 1..=3 {
        hap.binding(&format!("aws-{i}"), "aws", &[("hyperscalerType", "aws")])
            .await;
    }
    apply(&objs, "kustomize base");
    let (leader, standby) = check_running(
        &client,
        "hap-system",
        "hap-operator-metrics",
        "hap-operator",
    )
    .await;
    hap.config_condition("Ready", "True").await;
    let first = claim_bound(&hap, "c1", "ga-1").await;
    check_logs("hap-system", &[pod_name(&leader), pod_name(&standby)]);

    // Failover: delete the leader pod. SIGTERM makes it release the Lease once its controllers
    // have drained, and a waiting replica takes it at once, before the old lease would expire.
    // Usually the standby; the Deployment's replacement pod may start and look first when the
    // drain outlasts its start (once in CI on a loaded machine), and nothing in Kubernetes'
    // election or ours prefers the older replica. `e2e_process::
    // a_released_lease_goes_to_the_waiting_standby_at_once` asserts the standby's take-over where
    // no replacement competes.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "hap-system");
    let before = leases.get("hap-operator").await.unwrap().spec.unwrap();
    let renewed = before.renew_time.clone().unwrap().0;
    let duration = i64::from(before.lease_duration_seconds.unwrap());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "hap-system");
    let t0 = Instant::now();
    pods.delete(&pod_name(&leader), &DeleteParams::default())
        .await
        .unwrap();
    let after = eventually(Duration::from_secs(60), "a new Lease holder", || async {
        let spec = leases.get("hap-operator").await.ok()?.spec?;
        let holder = spec.holder_identity.clone()?;
        (holder != pod_name(&leader)).then_some(spec)
    })
    .await;
    let to_leading = t0.elapsed();
    let successor = after.holder_identity.clone().expect("a holder");
    let by = if successor == pod_name(&standby) {
        "the standby"
    } else {
        "the replacement pod"
    };
    assert_eq!(
        after.lease_transitions,
        before.lease_transitions.map(|t| t + 1),
        "one hand-over"
    );
    let acquired = after.acquire_time.unwrap().0;
    let expiry = renewed
        .checked_add(jiff::SignedDuration::from_secs(duration))
        .unwrap();
    assert!(
        acquired < expiry,
        "{by} took the Lease at {acquired}, before the old lease expired at {expiry}: \
         the leader released it on SIGTERM"
    );
    let second = claim_bound(&hap, "c2", "ga-2").await;
    let to_bound = t0.elapsed();
    assert_ne!(first, second);
    eprintln!(
        "e2e_pods: failover: leader pod deleted -> {by} holds the Lease {} ms -> new claim Bound {} ms",
        to_leading.as_millis(),
        to_bound.as_millis()
    );
    // The other survivor is the standby now.
    eventually(
        Duration::from_secs(120),
        "the other replica Ready as standby",
        || {
            let pods = pods.clone();
            let successor = successor.clone();
            async move {
                let r = ready_pods(&pods, "app.kubernetes.io/name=hap-operator").await;
                let other = r.iter().find(|p| pod_name(p) != successor)?;
                let body = pod_get("hap-system", &pod_name(other), "/metrics")?;
                (r.len() == 2 && metric_line(&body, "hap_leader ")? == "hap_leader 0").then_some(())
            }
        },
    )
    .await;

    // A drain: the node cordoned, the pods evicted one by one (eviction API). The first goes;
    // the PodDisruptionBudget (minAvailable 1) refuses the second while the first cannot come
    // back, so the leader keeps running and leading.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "hap-system");
    eventually(
        Duration::from_secs(60),
        "PDB allows one disruption",
        || async {
            let st = pdbs.get("hap-operator").await.ok()?.status?;
            (st.disruptions_allowed == 1 && st.current_healthy == 2).then_some(())
        },
    )
    .await;
    kubectl_ok(&["cordon", NODE]);
    let ready = ready_pods(&pods, "app.kubernetes.io/name=hap-operator").await;
    let (lead, other): (Vec<Pod>, Vec<Pod>) =
        ready.into_iter().partition(|p| pod_name(p) == successor);
    let (lead, other) = (pod_name(&lead[0]), pod_name(&other[0]));
    let (ok, _, err) = evict("hap-system", &other);
    assert!(ok, "the first eviction is allowed: {err}");
    let (ok, _, err) = evict("hap-system", &lead);
    assert!(
        !ok && err.contains("disruption budget"),
        "the PDB refuses the second eviction: {err}"
    );
    let lease = leases.get("hap-operator").await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some(lead.as_str()));
    let still = pods.get(&lead).await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_none());
    // Work goes on during the drain.
    claim_bound(&hap, "c3", "ga-3").await;
    kubectl_ok(&["uncordon", NODE]);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "hap-system");
    eventually(
        Duration::from_secs(120),
        "two ready replicas after the drain",
        || async {
            let st = deployments.get("hap-operator").await.ok()?.status?;
            (st.ready_replicas == Some(2)).then_some(())
        },
    )
    .await;
    release_all(&hap, &["c1", "c2", "c3"]).await;
    let labels = hap.labels(&first).await;
    assert_eq!(labels.get("dirty").map(String::as_str), Some("true"));
}

/// Writes to `file` a kubeconfig for the pods with a ServiceAccount token of the separate garden:
/// its kube-apiserver at the node IP (where pods reach it; the test's kubeconfig says 127.0.0.1,
/// the host's end of the forwarder) and its CA embedded (no file of the host is in the pod).
fn garden_kubeconfig_for_pods(file: &std::path::Path, ns: &str, sa: &str) {
    let garden = garden_kubeconfig();
    let (ok, token, err) = kubectl(&[
        "--kubeconfig",
        garden.to_str().unwrap(),
        "create",
        "token",
        sa,
        "-n",
        ns,
        "--duration=2h",
    ]);
    assert!(ok, "kubectl create token in the garden: {err}");
    let cfg: Value = serde_saphyr::from_str(&std::fs::read_to_string(&garden).unwrap()).unwrap();
    let cluster = &cfg["clusters"][0]["cluster"];
    let server = cluster["server"]
        .as_str()
        .unwrap()
        .replace("127.0.0.1", NODE_IP);
    let ca = garden
        .parent()
        .unwrap()
        .join(cluster["certificate-authority"].as_str().unwrap());
    let file = file.to_str().unwrap();
    for args in [
        vec![
            "set-cluster".to_string(),
            "garden".into(),
            format!("--server={server}"),
            format!("--certificate-authority={}", ca.display()),
            "--embed-certs=true".into(),
        ],
        vec![
            "set-credentials".into(),
            sa.into(),
            format!("--token={}", token.trim()),
        ],
        vec![
            "set-context".into(),
            "garden".into(),
            "--cluster=garden".into(),
            format!("--user={sa}"),
        ],
        vec!["use-context".into(), "garden".into()],
    ] {
        let mut all = vec!["config", "--kubeconfig", file];
        all.extend(args.iter().map(String::as_str));
        kubectl_ok(&all);
    }
}

/// The Helm chart in the two-cluster topology: the operator's cluster on the node, bindings and
/// Shoots in the separate garden. The garden side (`garden.rbacOnly`) goes to the garden, the
/// operator reads the garden's kubeconfig from a Secret (`garden.kubeconfigSecret`), and it
/// watches claims in one namespace (narrow RBAC). Values only; the kubeconfig in the Secret
/// names the garden at the node IP, as the pods reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_chart_runs_as_pods_with_a_separate_garden() {
    let _one = ONE_AT_A_TIME.lock().await;
    let client = node_client().await;
    let ns = unique("hap-helm");
    let release = "hap";
    let sa = format!("{release}-hap-operator");
    let hap = Hap::without_operator_with_separate_garden(&["aws"], json!({})).await;
    let _cleanup = Cleanup(vec![
        vec![
            "delete".into(),
            "-n".into(),
            "default".into(),
            "role,rolebinding".into(),
            format!("{release}-hap-operator-events"),
            "--ignore-not-found".into(),
        ],
        delete_args(&["namespace", &hap.claims_ns]),
        delete_args(&["namespace", &ns]),
        delete_args(&["clusterrolebinding", &sa]),
        delete_args(&["clusterrole", &sa]),
        delete_args(&["clusterrole", &format!("{sa}-view")]),
        delete_args(&["clusterrole", &format!("{sa}-edit")]),
        delete_args(&["hapconfig", &hap.config]),
    ]);
    for i in 1..=2 {
        hap.binding(&format!("aws-{i}"), "aws", &[("hyperscalerType", "aws")])
            .await;
    }
    let chart = repo_root().join("deploy/helm/hap-operator");
    let values = [
        format!("bindingNamespace={}", hap.bindings_ns),
        format!("claimNamespace={}", hap.claims_ns),
        format!("config.name={}", hap.config),
    ];
    // The garden side, in the garden: the operator's ServiceAccount there and its Role.
    let (ok, out, err) = run(Command::new(helm_path())
        .args([
            "template",
            release,
            chart.to_str().unwrap(),
            "--namespace",
            &ns,
        ])
        .args(["--set", &values[0], "--set", "garden.rbacOnly=true"]));
    assert!(ok, "helm template garden.rbacOnly: {out}\n{err}");
    apply_to(
        &garden_kubeconfig(),
        &parse_stream(&out),
        "helm garden side",
    );
    // The operator's namespace as a cluster admin would create it, enforcing `restricted`, with
    // the garden's kubeconfig in it.
    kubectl_ok(&["create", "namespace", &ns]);
    kubectl_ok(&[
        "label",
        "namespace",
        &ns,
        "pod-security.kubernetes.io/enforce=restricted",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kubeconfig");
    garden_kubeconfig_for_pods(&file, &hap.bindings_ns, &sa);
    kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "hap-garden",
        "-n",
        &ns,
        &format!("--from-file=kubeconfig={}", file.display()),
    ]);
    let (ok, out, err) = run(Command::new(helm_path())
        .env("KUBECONFIG", kubeconfig())
        .args([
            "install",
            release,
            chart.to_str().unwrap(),
            "--namespace",
            &ns,
        ])
        .args([
            "--set", &values[0], "--set", &values[1], "--set", &values[2],
        ])
        .args(["--set", "garden.kubeconfigSecret=hap-garden"])
        // The plain /metrics these tests read through the pod proxy (`with_plain_metrics`).
        .args(["--set", "metrics.secure=false"]));
    assert!(ok, "helm install: {out}\n{err}");
    let (leader, standby) = check_running(&client, &ns, &format!("{sa}-metrics"), &sa).await;
    hap.config_condition("Ready", "True").await;
    claim_bound(&hap, "c1", "ga-helm").await;
    check_logs(&ns, &[pod_name(&leader), pod_name(&standby)]);
    let body = pod_get(&ns, &pod_name(&leader), "/metrics").unwrap();
    assert!(
        body.contains("hap_claim_outcomes_total{outcome=\"Claimed\"} 1"),
        "the leader counted the claim:\n{body}"
    );
    release_all(&hap, &["c1"]).await;
    let (ok, out, err) = run(Command::new(helm_path())
        .env("KUBECONFIG", kubeconfig())
        .args(["uninstall", release, "--namespace", &ns]));
    assert!(ok, "helm uninstall: {out}\n{err}");
}
