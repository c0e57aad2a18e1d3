//! End-to-end on a real node: the image `make image` builds, imported into containerd, run by a
//! kubelet from the shipped kustomize base and Helm chart — unchanged — in the node environment
//! (`e2e/testenv up --node`, see e2e/README.md). Both replicas Ready under Pod Security
//! `restricted` with their probes answered, metrics through the Service (kube-proxy) and pod IPs,
//! the claim flow with the operator under its own ServiceAccount token, leader failover by pod
//! deletion (the standby takes the released Lease at once, before the replacement pod), and the
//! PodDisruptionBudget holding one replica through evictions.
//!
//! `make test` starts the node environment and exports `HAP_NODE_DIR`; by hand:
//! `e2e/testenv up --node --images $(scripts/image.sh)`, then
//! `cargo test --test e2e_pods -- --nocapture` (the failover figures are printed).

mod support;

#[path = "support/deploy.rs"]
mod deploy;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use deploy::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};
use support::*;

const NODE: &str = "hapnode";
/// The node's address in its network namespace (e2e/tools/cmd/testenv/node.go).
const NODE_IP: &str = "10.250.0.1";
const IMAGE_ARCHIVE_HINT: &str = "e2e/testenv up --node --images $(scripts/image.sh)";

/// The node environment's state directory: `HAP_NODE_DIR`, else `.testenv-node`.
fn node_dir() -> PathBuf {
    std::env::var_os("HAP_NODE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".testenv-node"))
}

/// A client of the node environment (and every helper of this binary pointed at it). Fails
/// loudly when there is none: these tests are never skipped.
async fn node_client() -> kube::Client {
    let kubeconfig = node_dir().join("kubeconfig");
    assert!(
        kubeconfig.exists(),
        "no node environment: {} does not exist. Run `make test`, or `{IMAGE_ARCHIVE_HINT}` and \
         export HAP_NODE_DIR={}",
        kubeconfig.display(),
        node_dir().display()
    );
    use_kubeconfig(kubeconfig);
    client().await
}

/// One operator installation at a time: each watches AccountClaims cluster-wide or acts on the
/// same node, so two at once would answer each other's claims.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn kubectl_ok(args: &[&str]) -> String {
    let (ok, out, err) = kubectl(args);
    assert!(ok, "kubectl {}: {err}", args.join(" "));
    out
}

/// The operator pods of a Deployment's selector, Running and Ready.
async fn ready_pods(pods: &Api<Pod>, selector: &str) -> Vec<Pod> {
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .collect()
}

fn pod_name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// GET through the API server's proxy to a pod's port (the pod IP, on the node).
fn pod_get(ns: &str, pod: &str, path: &str) -> Option<String> {
    let (ok, out, _) = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{ns}/pods/{pod}:8080/proxy{path}"),
    ]);
    ok.then_some(out)
}

/// GET from inside the node's network namespace (Service IPs are reachable only there), by the
/// launcher of this checkout.
fn node_http_get(url: &str) -> Option<String> {
    let out = Command::new(repo_root().join("e2e/testenv"))
        .args(["http-get", "--node", url])
        .env("HAP_NODE_DIR", node_dir())
        .output()
        .expect("run e2e/testenv http-get");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn metric_line<'a>(body: &'a str, name: &str) -> Option<&'a str> {
    body.lines().find(|l| l.starts_with(name))
}

/// The kubelet's probe counters for a pod: (liveness, readiness) successes.
fn probe_successes(ns: &str, pod: &str) -> (u64, u64) {
    let (ok, out, _) = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{NODE}/proxy/metrics/probes"),
    ]);
    if !ok {
        return (0, 0);
    }
    let count = |probe: &str| -> u64 {
        out.lines()
            .filter(|l| l.starts_with("prober_probe_total{"))
            .filter(|l| {
                l.contains(&format!("namespace=\"{ns}\""))
                    && l.contains(&format!("pod=\"{pod}\""))
                    && l.contains(&format!("probe_type=\"{probe}\""))
                    && l.contains("result=\"successful\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum()
    };
    (count("Liveness"), count("Readiness"))
}

/// What every installation must show once applied: both replicas Ready in a namespace that
/// enforces Pod Security `restricted`, the kubelet's liveness and readiness probes answered,
/// one leader by `hap_leader` on the pod IPs, the Lease held by that pod, and metrics through
/// the Service's cluster IP. Returns (leader, standby).
async fn check_running(client: &kube::Client, ns: &str, service: &str, lease: &str) -> (Pod, Pod) {
    let started = Instant::now();
    let selector = "app.kubernetes.io/name=hap-operator";
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let ready = eventually(Duration::from_secs(180), "two Ready operator pods", || {
        let pods = pods.clone();
        async move {
            let r = ready_pods(&pods, selector).await;
            (r.len() == 2).then_some(r)
        }
    })
    .await;
    eprintln!(
        "e2e_pods: {ns}: both replicas Ready {:.1}s after apply",
        started.elapsed().as_secs_f64()
    );
    let namespace: Namespace = Api::all(client.clone()).get(ns).await.unwrap();
    assert_eq!(
        namespace
            .metadata
            .labels
            .unwrap_or_default()
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted"),
        "the pods were admitted under Pod Security restricted"
    );
    for p in &ready {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some(NODE));
        // The ServiceAccount admission plugin gave the pod its token the normal way: a projected
        // volume with a bound token (the operator reads it through in-cluster configuration).
        let projected = spec.volumes.iter().flatten().any(|v| {
            v.projected.as_ref().is_some_and(|p| {
                p.sources
                    .iter()
                    .flatten()
                    .any(|s| s.service_account_token.is_some())
            })
        });
        assert!(
            projected,
            "{}: a projected ServiceAccount token volume",
            pod_name(p)
        );
        let status = p.status.as_ref().unwrap();
        let c = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(c.restart_count, 0, "{}: no restarts", pod_name(p));
        assert_eq!(c.image, "ghcr.io/hap-operator/hap-operator:0.1.0");
        // The kubelet answered both probes (liveness starts after initialDelaySeconds).
        let name = pod_name(p);
        eventually(
            Duration::from_secs(60),
            &format!("{name}: liveness and readiness probes succeeded"),
            || {
                let name = name.clone();
                async move {
                    let (live, ready) = probe_successes(ns, &name);
                    (live >= 1 && ready >= 1).then_some(())
                }
            },
        )
        .await;
    }
    // hap_leader on each pod IP: exactly one leads, and it holds the Lease.
    let (leader, standby) = eventually(
        Duration::from_secs(60),
        "one pod reports hap_leader 1, the other 0",
        || {
            let ready = ready.clone();
            async move {
                let mut leading = Vec::new();
                for p in &ready {
                    let body = pod_get(ns, &pod_name(p), "/metrics")?;
                    leading.push(metric_line(&body, "hap_leader ")? == "hap_leader 1");
                }
                match leading.as_slice() {
                    [true, false] => Some((ready[0].clone(), ready[1].clone())),
                    [false, true] => Some((ready[1].clone(), ready[0].clone())),
                    _ => None,
                }
            }
        },
    )
    .await;
    let holder = Api::<Lease>::namespaced(client.clone(), ns)
        .get(lease)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(
        holder,
        Some(pod_name(&leader)),
        "the Lease holder is the pod (POD_NAME)"
    );
    // Through the Service: cluster IP, kube-proxy's DNAT to either pod.
    let svc: Value = serde_json::from_str(&kubectl_ok(&[
        "get", "service", service, "-n", ns, "-o", "json",
    ]))
    .unwrap();
    let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    let port = svc["spec"]["ports"][0]["port"].as_i64().unwrap();
    let body = eventually(
        Duration::from_secs(30),
        "metrics through the Service",
        || {
            let url = format!("http://{ip}:{port}/metrics");
            async move { node_http_get(&url) }
        },
    )
    .await;
    assert!(
        metric_line(&body, "hap_leader ").is_some(),
        "the Service's /metrics is the operator's:\n{body}"
    );
    (leader, standby)
}

/// The operator's logs (both pods, through the kubelet): JSON only, no RBAC trouble.
fn check_logs(ns: &str, pods: &[String]) {
    for p in pods {
        let log = kubectl_ok(&["logs", "-n", ns, p]);
        assert!(
            log.contains("waiting for the leader lease"),
            "{p}: leader election ran:\n{log}"
        );
        for bad in ["forbidden", "cannot publish event", "Unauthorized"] {
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| l.to_lowercase().contains(&bad.to_lowercase()))
                .collect();
            assert!(
                lines.is_empty(),
                "{p}: RBAC trouble ({bad}):\n{}",
                lines.join("\n")
            );
        }
        assert!(
            log.lines()
                .filter(|l| !l.trim().is_empty())
                .all(|l| serde_json::from_str::<Value>(l).is_ok()),
            "{p}: --log-format=json: every line is JSON:\n{log}"
        );
    }
}

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

/// kubectl arguments deleting `what` without waiting: nothing after a test depends on it being
/// gone (names are unique, or used by one test only), and `testenv down` removes the rest.
fn delete_args(what: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = what.iter().map(|s| s.to_string()).collect();
    v.insert(0, "delete".into());
    v.extend(["--ignore-not-found".into(), "--wait=false".into()]);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_base_runs_as_pods_and_fails_over() {
    let _one = ONE_AT_A_TIME.lock().await;
    let client = node_client().await;
    // The base exactly as shipped: hap-system, the Gardener project `kyma` (namespace
    // garden-kyma, which the landscape of the node environment has), the HapConfig `default`.
    // Nothing is patched.
    let objs = kustomize("deploy/kustomize/base");
    let claims_ns = unique("claims");
    let _cleanup = Cleanup(vec![
        vec!["uncordon".into(), NODE.into()],
        delete_args(&["namespace", &claims_ns]),
        delete_args(&["namespace", "hap-system"]),
        delete_args(&["hapconfig", "default"]),
        delete_args(&["clusterrolebinding", "hap-operator"]),
        delete_args(&["clusterrole", "hap-operator"]),
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

    // Failover: delete the leader pod. SIGTERM makes it release the Lease; the waiting standby
    // takes it at once, before the old lease would expire and before the replacement starts.
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
    assert_eq!(
        after.holder_identity,
        Some(pod_name(&standby)),
        "the waiting standby took the Lease, not the replacement pod"
    );
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
        "the standby took the Lease at {acquired}, before the old lease expired at {expiry}: \
         the leader released it on SIGTERM"
    );
    let second = claim_bound(&hap, "c2", "ga-2").await;
    let to_bound = t0.elapsed();
    assert_ne!(first, second);
    eprintln!(
        "e2e_pods: failover: leader pod deleted -> standby holds the Lease {} ms -> new claim Bound {} ms",
        to_leading.as_millis(),
        to_bound.as_millis()
    );
    // The replacement joins as the standby.
    eventually(
        Duration::from_secs(120),
        "the replacement Ready as standby",
        || {
            let pods = pods.clone();
            let standby = pod_name(&standby);
            async move {
                let r = ready_pods(&pods, "app.kubernetes.io/name=hap-operator").await;
                let other = r.iter().find(|p| pod_name(p) != standby)?;
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
    let (lead, other): (Vec<Pod>, Vec<Pod>) = ready
        .into_iter()
        .partition(|p| pod_name(p) == pod_name(&standby));
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
        .args(["--set", "garden.kubeconfigSecret=hap-garden"]));
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
