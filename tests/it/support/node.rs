//! The node environment (`e2e/testenv up --node`, e2e/README.md) as the pod tests see it: its
//! client, the operator's pods and what every installation of the shipped manifests must show
//! when it runs there (Ready under `restricted`, probes, one leader, metrics through the Service).
//! Shared by tests/it/e2e_pods.rs, tests/it/e2e_pods_sources.rs and tests/it/e2e_pods_callers.rs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;

use crate::support::{
    client, eventually, kubeconfig, kubectl, kubectl_path, repo_root, use_kubeconfig,
};

pub const NODE: &str = "hapnode";
/// The node's address in its network namespace (e2e/tools/cmd/testenv/node.go).
pub const NODE_IP: &str = "10.250.0.1";
pub const IMAGE_ARCHIVE_HINT: &str = "e2e/testenv up --node --images $(scripts/image.sh)";
/// Where the request-source overlay runs on the node, and the names its manifests give.
pub const NS: &str = "hap-system";
pub const BINDINGS_NS: &str = "garden-kyma";
pub const SERVICE: &str = "hap-operator-webhook";
pub const WEBHOOKS: [&str; 3] = [
    "hap-operator-runtimes",
    "hap-operator-clusters",
    "hap-operator-shoots",
];
pub const PODS: &str = "app.kubernetes.io/name=hap-operator";

/// The node environment's state directory: `HAP_NODE_DIR`, else `.testenv-node`.
pub fn node_dir() -> PathBuf {
    std::env::var_os("HAP_NODE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".testenv-node"))
}

/// A client of the node environment (and every helper of this binary pointed at it). Fails
/// loudly when there is none: these tests are never skipped.
pub async fn node_client() -> kube::Client {
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
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub fn kubectl_ok(args: &[&str]) -> String {
    let (ok, out, err) = kubectl(args);
    assert!(ok, "kubectl {}: {err}", args.join(" "));
    out
}

/// The operator pods of a Deployment's selector, Running and Ready.
pub async fn ready_pods(pods: &Api<Pod>, selector: &str) -> Vec<Pod> {
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

pub fn pod_name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// GET through the API server's proxy to a pod's port (the pod IP, on the node).
/// Turns on the plain `/metrics` of the operator's Deployments: these tests read it through
/// kube-apiserver's pod proxy, which never forwards a bearer token, so the shipped HTTPS
/// `/metrics` would answer them 401 (tests/it/e2e_metrics_auth.rs and tests/it/e2e_rbac.rs cover it).
pub fn with_plain_metrics(mut objs: Vec<Value>) -> Vec<Value> {
    for o in objs.iter_mut().filter(|o| o["kind"] == "Deployment") {
        if let Some(cs) = o
            .pointer_mut("/spec/template/spec/containers")
            .and_then(Value::as_array_mut)
        {
            for c in cs.iter_mut().filter(|c| c["name"] == "hap-operator") {
                if let Some(args) = c["args"].as_array_mut() {
                    // Replaced, not appended: the flag may be given once (the kustomize base
                    // sets `--metrics-secure=true`, and a second one stops the operator at start).
                    args.retain(|a| {
                        !a.as_str()
                            .is_some_and(|a| a.starts_with("--metrics-secure"))
                    });
                    args.push(Value::from("--metrics-secure=false"));
                }
            }
        }
    }
    objs
}

pub fn pod_get(ns: &str, pod: &str, path: &str) -> Option<String> {
    let (ok, out, _) = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{ns}/pods/{pod}:8080/proxy{path}"),
    ]);
    ok.then_some(out)
}

/// GET from inside the node's network namespace (Service IPs are reachable only there), by the
/// launcher of this checkout.
pub fn node_http_get(url: &str) -> Option<String> {
    let out = Command::new(repo_root().join("e2e/testenv"))
        .args(["http-get", "--node", url])
        .env("HAP_NODE_DIR", node_dir())
        .output()
        .expect("run e2e/testenv http-get");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn metric_line<'a>(body: &'a str, name: &str) -> Option<&'a str> {
    body.lines().find(|l| l.starts_with(name))
}

/// The kubelet's probe counters for a pod: (liveness, readiness) successes.
pub fn probe_successes(ns: &str, pod: &str) -> (u64, u64) {
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

/// Why pods are not Ready, for a timeout message: each pod's phase, its scheduling condition and
/// its containers' waiting reasons, and the node's taints (a kubelet under disk pressure taints
/// the node, and then nothing is scheduled and the wait only says "timed out").
async fn why_not_ready(client: &kube::Client, pods: &Api<Pod>, selector: &str) -> String {
    let mut lines = Vec::new();
    match pods.list(&ListParams::default().labels(selector)).await {
        Ok(list) if list.items.is_empty() => lines.push(format!("no pod matches {selector}")),
        Ok(list) => lines.extend(list.items.iter().map(pod_state)),
        Err(e) => lines.push(format!("listing pods failed: {e}")),
    }
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    match nodes.get(NODE).await {
        Ok(node) => {
            let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
            let taints: Vec<String> = taints
                .iter()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect();
            lines.push(format!("node {NODE} taints: [{}]", taints.join(", ")));
        }
        Err(e) => lines.push(format!("reading node {NODE} failed: {e}")),
    }
    lines.join("\n")
}

fn pod_state(p: &Pod) -> String {
    let status = p.status.clone().unwrap_or_default();
    let scheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| {
            let reason = c.reason.as_deref().unwrap_or("");
            let message = c.message.as_deref().unwrap_or("");
            format!("PodScheduled={} {reason} {message}", c.status)
        })
        .unwrap_or_else(|| "PodScheduled unknown".into());
    let waiting: Vec<String> = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
        .map(|w| {
            let reason = w.reason.as_deref().unwrap_or("");
            let message = w.message.as_deref().unwrap_or("");
            format!("waiting {reason} {message}")
        })
        .collect();
    format!(
        "pod {}: phase {}, {scheduled}; {}",
        pod_name(p),
        status.phase.as_deref().unwrap_or("unknown"),
        waiting.join("; ")
    )
}

/// What every installation must show once applied: both replicas Ready in a namespace that
/// enforces Pod Security `restricted`, the kubelet's liveness and readiness probes answered,
/// one leader by `hap_leader` on the pod IPs, the Lease held by that pod, and metrics through
/// the Service's cluster IP. Returns (leader, standby).
pub async fn check_running(
    client: &kube::Client,
    ns: &str,
    service: &str,
    lease: &str,
) -> (Pod, Pod) {
    let started = Instant::now();
    let selector = "app.kubernetes.io/name=hap-operator";
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let ready = loop {
        let r = ready_pods(&pods, selector).await;
        if r.len() == 2 {
            break r;
        }
        if started.elapsed() > Duration::from_secs(180) {
            panic!(
                "timed out after 180s waiting for two Ready operator pods in {ns}:\n{}",
                why_not_ready(client, &pods, selector).await
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
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
pub fn check_logs(ns: &str, pods: &[String]) {
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

/// kubectl arguments deleting `what` without waiting: nothing after a test depends on it being
/// gone (names are unique, or used by one test only), and `testenv down` removes the rest.
/// Waits until the pod tests' earlier installation (hap-system and HapConfig `default`) is gone:
/// each removes it without waiting.
pub async fn earlier_installation_gone() {
    eventually(
        Duration::from_secs(120),
        "hap-system and HapConfig default of an earlier installation gone",
        || async {
            let (_, out, _) = kubectl(&[
                "get",
                "namespace/hap-system",
                "hapconfig/default",
                "--ignore-not-found",
                "-o",
                "name",
            ]);
            out.trim().is_empty().then_some(())
        },
    )
    .await;
}

/// The test's handle on what the request-source overlay runs on the node: HapConfig `default`,
/// bindings in `garden-kyma`, claims in the operator's namespace, no operator of the test's own.
pub fn overlay_hap(client: &kube::Client) -> crate::support::Hap {
    crate::support::Hap {
        client: client.clone(),
        garden: client.clone(),
        garden_kubeconfig: None,
        config: "default".into(),
        bindings_ns: BINDINGS_NS.into(),
        claims_ns: NS.into(),
        operator: None,
    }
}

pub fn delete_args(what: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = what.iter().map(|s| s.to_string()).collect();
    v.insert(0, "delete".into());
    v.extend(["--ignore-not-found".into(), "--wait=false".into()]);
    v
}

/// The shell block of docs/sources.md under "Certificates without cert-manager".
pub fn documented_certificate_script() -> String {
    let doc = std::fs::read_to_string(repo_root().join("docs/sources.md")).unwrap();
    let section = doc
        .split("### Certificates without cert-manager")
        .nth(1)
        .expect("docs/sources.md has the section \"Certificates without cert-manager\"");
    let block = section.split("```sh\n").nth(1).expect("a ```sh block");
    block.split("```").next().unwrap().to_string()
}

/// Runs a script as a user would, in `dir`, with the node environment's kubectl and kubeconfig.
pub fn sh(dir: &Path, script: &str) {
    let kubectl_dir = kubectl_path().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        kubectl_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig())
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{script}\nfailed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
