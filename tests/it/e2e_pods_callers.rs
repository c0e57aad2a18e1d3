//! Issue 20's forged admission review, sent from a real pod on the node environment
//! (`e2e/testenv up --node --gardener`, e2e/README.md): the shipped overlay `request-sources` runs
//! as pods, and a pod in another namespace — no ServiceAccount token, no client certificate, its
//! own image with an HTTPS client (scripts/testhelper-image.sh, test-only) — POSTs a hand-made
//! AdmissionReview for a made-up tenant and a namespace that does not exist to the webhook
//! Service's cluster IP and to each operator pod's `:9443`.
//!
//! Proven: opted out (`webhook-allow-unauthenticated` in place of `webhook-client-ca`) that pod's
//! review is answered `allowed` and a claim is Bound for the made-up tenant (the attack, and
//! proof that the pod reaches the port); with the overlay as shipped, which includes the
//! component `webhook-client-ca` (the CA of the certificate the node environment's
//! kube-apiserver presents, in ConfigMap `hap-operator-webhook-client-ca`), the same pod is refused
//! at TLS on every address, no claim appears and no binding label changes, while a Runtime created
//! through kube-apiserver is still admitted and bound. The node environment's CNI (`bridge`)
//! enforces no NetworkPolicy, so TLS is the only gate tested here.
//!
//! `make test` runs it on the node environment with both images imported; by hand:
//! `e2e/testenv up --node --gardener --images $(scripts/image.sh),$(scripts/testhelper-image.sh)`,
//! then `cargo test --test it -- e2e_pods_callers:: --nocapture`.

use crate::support;

use crate::support::deploy;
use crate::support::node;

use std::collections::BTreeMap;
use std::time::Duration;

use deploy::*;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use node::*;
use serde::Deserialize;
use serde_json::{Value, json};
use support::platform::{
    RuntimeSpec, SCOPE_LABEL, api, forged_review, install_platform_crds, runtime, runtime_binding,
    runtime_resource,
};
use support::*;

/// Built by scripts/testhelper-image.sh and imported into the node's containerd.
const ATTACKER_IMAGE: &str = "localhost/hap-testenv/testhelper:e2e";

/// One line of `testhelper https-post`: how far a POST to one URL got.
#[derive(Debug, Deserialize)]
struct Attempt {
    url: String,
    stage: String,
    #[serde(default)]
    status: u16,
    #[serde(default)]
    body: String,
    #[serde(default)]
    error: String,
}

/// A Runtime of `run` for tenant `ga` in namespace `ns`, without a binding.
fn request_runtime(ns: &str, run: &str, name: &str, ga: &str) -> kube::api::DynamicObject {
    runtime(
        ns,
        run,
        &RuntimeSpec {
            name,
            global_account: Some(ga),
            plan: "aws",
            platform_region: "cf-eu10",
            region: "eu-central-1",
            provider: "aws",
            binding: "",
            extra_labels: &[],
        },
    )
}

/// The review of issue 20: a made-up tenant, in a namespace that does not exist.
fn forged(run: &str, ghost_ns: &str, name: &str, ga: &str) -> Value {
    let object = serde_json::to_value(request_runtime(ghost_ns, run, name, ga)).unwrap();
    forged_review(
        json!({"group": "infrastructuremanager.kyma-project.io", "version": "v1", "kind": "Runtime"}),
        json!({"group": "infrastructuremanager.kyma-project.io", "version": "v1", "resource": "runtimes"}),
        ghost_ns,
        name,
        object,
    )
}

/// The attacker's pod: unprivileged (it passes Pod Security `restricted`), no ServiceAccount
/// token, no client certificate; it POSTs `review` to each URL without checking the server's
/// certificate (a forger needs no trust in it).
fn attacker_pod(name: &str, urls: &[String], review: &Value) -> Value {
    let mut args = vec![
        json!("https-post"),
        json!("--insecure"),
        json!("--body"),
        json!(review.to_string()),
    ];
    args.extend(urls.iter().map(|u| json!(u)));
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "forge", "image": ATTACKER_IMAGE, "imagePullPolicy": "Never", "args": args,
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    })
}

/// Runs the attacker's pod in `ns` until it has ended; what it printed, one attempt per URL.
async fn attack(
    client: &kube::Client,
    ns: &str,
    name: &str,
    urls: &[String],
    review: &Value,
) -> Vec<Attempt> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(attacker_pod(name, urls, review)).unwrap();
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create the attacker's pod");
    eventually(
        Duration::from_secs(90),
        &format!("attacker pod {name} ended"),
        || {
            let pods = pods.clone();
            async move {
                let p = pods.get(name).await.ok()?;
                let status = p.status?;
                let waiting = status
                    .container_statuses
                    .iter()
                    .flatten()
                    .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                    .next();
                assert_ne!(
                    waiting.as_deref(),
                    Some("ErrImageNeverPull"),
                    "{ATTACKER_IMAGE} is not on the node: import $(scripts/testhelper-image.sh) \
                 (`e2e/testenv up --node --images A,B`, or `e2e/testenv load-image --node`)"
                );
                matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")).then_some(())
            }
        },
    )
    .await;
    let log = kubectl_ok(&["logs", "-n", ns, name]);
    let attempts: Vec<Attempt> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: {e}: {l}")))
        .collect();
    assert_eq!(
        attempts.len(),
        urls.len(),
        "{name}: one line per URL:\n{log}"
    );
    attempts
}

/// The webhook's addresses as a pod sees them: the Service's cluster IP (kube-proxy's DNAT to
/// either replica) and each operator pod's IP on the webhook port.
fn webhook_urls(pods: &[Pod]) -> Vec<String> {
    let svc: Value = serde_json::from_str(&kubectl_ok(&[
        "get", "service", SERVICE, "-n", NS, "-o", "json",
    ]))
    .unwrap();
    let ip = svc["spec"]["clusterIP"].as_str().unwrap();
    let mut urls = vec![format!("https://{ip}:443/mutate/runtimes")];
    for p in pods {
        let pod_ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
        urls.push(format!("https://{pod_ip}:9443/mutate/runtimes"));
    }
    urls
}

/// The overlay `request-sources` opted out of caller authentication: its components with
/// `webhook-allow-unauthenticated` in place of `webhook-client-ca`, as a user composes them (a
/// kustomization of their own next to the shipped ones).
fn overlay_opted_out() -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    // kustomize takes only relative paths to other kustomizations: up to `/`, then down.
    let up = "../".repeat(dir.path().components().count() - 1);
    let root = std::path::PathBuf::from(up).join(
        repo_root()
            .join("deploy/kustomize")
            .strip_prefix("/")
            .unwrap(),
    );
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n{}",
            root.join("base").display(),
            [
                "request-sources",
                "source-runtimes",
                "source-clusters",
                "source-shoots",
                "webhook-allow-unauthenticated",
                "network-policy",
            ]
            .iter()
            .map(|c| format!("  - {}\n", root.join("components").join(c).display()))
            .collect::<String>()
        ),
    )
    .unwrap();
    let (ok, out, err) = kubectl(&["kustomize", dir.path().to_str().unwrap()]);
    assert!(
        ok,
        "kubectl kustomize request-sources + webhook-allow-unauthenticated: {err}"
    );
    parse_stream(&out)
}

/// Both replicas of the Deployment now in force Ready, none of the earlier ones left, and the
/// webhook Service's endpoints exactly these pods.
async fn rolled_out(client: &kube::Client, env: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    eventually(
        Duration::from_secs(180),
        &format!("two Ready pods with {env}, no others"),
        || {
            let pods = pods.clone();
            async move {
                let all = pods
                    .list(&ListParams::default().labels(PODS))
                    .await
                    .ok()?
                    .items;
                let has_env = |p: &Pod| {
                    p.spec.as_ref().is_some_and(|s| {
                        s.containers[0].env.iter().flatten().any(|e| e.name == env)
                    })
                };
                let ready = ready_pods(&pods, PODS).await;
                let (_, eps, _) = kubectl(&[
                    "get",
                    "endpointslices",
                    "-n",
                    NS,
                    "-l",
                    &format!("kubernetes.io/service-name={SERVICE}"),
                    "-o",
                    "jsonpath={.items[*].endpoints[*].targetRef.name}",
                ]);
                let mut endpoints: Vec<String> = eps.split_whitespace().map(String::from).collect();
                endpoints.sort();
                let mut names: Vec<String> = ready.iter().map(pod_name).collect();
                names.sort();
                (all.len() == 2
                    && ready.len() == 2
                    && all.iter().all(has_env)
                    && endpoints == names)
                    .then_some(ready)
            }
        },
    )
    .await
}

async fn claim_names(hap: &Hap) -> Vec<String> {
    let mut names: Vec<String> = hap
        .claims()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    names.sort();
    names
}

/// The labels of every binding but `except` (the one the first forgery took: the source's
/// clean-up may release it at any time, which is no doing of the attacker's pod).
async fn labels_of(
    hap: &Hap,
    bindings: &[String],
    except: &str,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut all = BTreeMap::new();
    for b in bindings.iter().filter(|b| *b != except) {
        all.insert(b.clone(), hap.labels(b).await);
    }
    all
}

/// `kubectl delete --all` of `resource` in `ns`, waiting up to a minute.
fn delete_all(resource: &str, ns: &str) -> Vec<String> {
    [
        "delete",
        resource,
        "-n",
        ns,
        "--all",
        "--ignore-not-found",
        "--timeout=60s",
    ]
    .map(String::from)
    .to_vec()
}

/// Everything the test makes, removed when it ends, however it ends.
fn cleanup_of(objs: &[Value], rt_ns: &str, attacker_ns: &str) -> Cleanup {
    let mut cleanup = vec![delete_args(&{
        let mut v = vec!["mutatingwebhookconfiguration"];
        v.extend(WEBHOOKS);
        v
    })];
    cleanup.extend([
        delete_all("runtimes", rt_ns),
        delete_args(&["namespace", rt_ns]),
        delete_args(&["namespace", attacker_ns]),
        delete_all("accountclaims", NS),
        delete_args(&["namespace", NS]),
        delete_args(&["hapconfig", "default"]),
    ]);
    for o in objs
        .iter()
        .filter(|o| matches!(kind(o), "ClusterRole" | "ClusterRoleBinding"))
    {
        cleanup.push(delete_args(&[&kind(o).to_lowercase(), name(o)]));
    }
    Cleanup(cleanup)
}

/// The overlay as shipped, its certificate made as docs/sources.md says, serving Runtimes of
/// this run; four bindings of the run in the pool.
async fn deploy_open(client: &kube::Client, hap: &Hap, objs: Vec<Value>, run: &str) -> Vec<String> {
    hap.apply_config(
        &["aws"],
        json!({"requestSources": [{"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: run}}]}),
    )
    .await;
    let bindings: Vec<String> = (1..=4).map(|i| format!("{run}-{i}")).collect();
    for b in &bindings {
        hap.binding(b, "aws", &[("hyperscalerType", "aws")]).await;
    }
    let (deployment, rest): (Vec<Value>, Vec<Value>) =
        objs.into_iter().partition(|o| kind(o) == "Deployment");
    apply(&rest, "overlay request-sources");
    let certs = tempfile::tempdir().unwrap();
    sh(certs.path(), &documented_certificate_script());
    apply(&deployment, "overlay request-sources: the Deployment");
    check_running(client, NS, "hap-operator-metrics", "hap-operator").await;
    hap.config_condition("Ready", "True").await;
    bindings
}

/// (a) Without the client CA: the pod's forgery is answered `allowed` and a claim for the
/// made-up tenant is Bound. One URL (the Service): each answered forgery burns a binding.
/// Returns the forged claim and the binding it took.
async fn attack_open(
    client: &kube::Client,
    hap: &Hap,
    attacker_ns: &str,
    run: &str,
) -> (String, String) {
    let open = rolled_out(client, "HAP_WEBHOOK_ALLOW_UNAUTHENTICATED").await;
    let service_url = webhook_urls(&open)[0].clone();
    let ghost_a = unique("no-such-ns");
    let tenant_a = format!("{run}-forged-a");
    let answered = attack(
        client,
        attacker_ns,
        "forge-a",
        &[service_url],
        &forged(run, &ghost_a, "rt-a", &tenant_a),
    )
    .await;
    let a = &answered[0];
    assert_eq!(
        (a.stage.as_str(), a.status),
        ("answered", 200),
        "the pod must reach the webhook for this test to mean anything: {a:?}"
    );
    let review: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(review["response"]["allowed"], json!(true), "{a:?}");
    let claim_a = format!("runtime.{ghost_a}.rt-a");
    let taken = hap.bound(&claim_a).await;
    assert_eq!(
        hap.labels(&taken).await.get("tenantName"),
        Some(&tenant_a),
        "the forgery claimed {taken} for the made-up tenant"
    );
    eprintln!(
        "e2e_pods_callers: without the client CA the pod's forgery was answered allowed; {claim_a} Bound to {taken}"
    );
    (claim_a, taken)
}

/// (b) The overlay as shipped, with its component webhook-client-ca: the CA of the client certificate the node
/// environment's kube-apiserver presents (its --admission-control-config-file). Returns the
/// rolled-out pods.
async fn close_with_client_ca(client: &kube::Client) -> Vec<Pod> {
    let client_ca = node_dir().join("pki/webhook-client-ca.crt");
    assert!(
        client_ca.exists(),
        "{} is missing: restart the node environment",
        client_ca.display()
    );
    kubectl_ok(&[
        "create",
        "configmap",
        "hap-operator-webhook-client-ca",
        "-n",
        NS,
        &format!("--from-file=ca.crt={}", client_ca.display()),
    ]);
    let with_ca: Vec<Value> =
        with_plain_metrics(kustomize("deploy/kustomize/overlays/request-sources"))
            .into_iter()
            .filter(|o| kind(o) == "Deployment")
            .collect();
    apply(&with_ca, "overlay request-sources: the Deployment");
    rolled_out(client, "HAP_WEBHOOK_CLIENT_CA").await
}

fn assert_refused_at_tls(refused: &[Attempt]) {
    for r in refused {
        assert_eq!(
            r.stage, "tls",
            "{}: a pod without a client certificate got past TLS: {r:?}",
            r.url
        );
        assert!(
            r.error.contains("certificate required") || r.error.contains("bad certificate"),
            "{}: refused, but not for the missing certificate: {r:?}",
            r.url
        );
    }
    eprintln!(
        "e2e_pods_callers: with the client CA the pod was refused at TLS on {} address(es): {}",
        refused.len(),
        refused[0].error
    );
}

/// kube-apiserver presents its certificate: a Runtime created by a user is admitted and bound.
/// Returns its claim and binding.
async fn a_real_runtime_is_served(
    client: &kube::Client,
    hap: &Hap,
    rt_ns: &str,
    run: &str,
) -> (String, String) {
    api(client, rt_ns, &runtime_resource())
        .create(
            &PostParams::default(),
            &request_runtime(rt_ns, run, "rt-real", &format!("{run}-real")),
        )
        .await
        .expect("kube-apiserver's admission call is served");
    let real = runtime_binding(client, rt_ns, "rt-real").await;
    assert!(!real.is_empty(), "rt-real got a binding");
    let claim_real = format!("runtime.{rt_ns}.rt-real");
    assert_eq!(hap.bound(&claim_real).await, real);
    (claim_real, real)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_review_from_a_pod_is_served_without_the_client_ca_and_refused_at_tls_with_it() {
    let _one = ONE_AT_A_TIME.lock().await;
    let client = node_client().await;
    install_platform_crds().await;
    earlier_installation_gone().await;
    let run = unique("pc");
    let rt_ns = unique("kcp");
    let attacker_ns = unique("attacker");
    let objs = with_plain_metrics(overlay_opted_out());
    let _cleanup = cleanup_of(&objs, &rt_ns, &attacker_ns);
    kubectl_ok(&["create", "namespace", &rt_ns]);
    kubectl_ok(&["create", "namespace", &attacker_ns]);
    let hap = overlay_hap(&client);
    let bindings = deploy_open(&client, &hap, objs, &run).await;
    let (claim_a, taken) = attack_open(&client, &hap, &attacker_ns, &run).await;

    let closed = close_with_client_ca(&client).await;
    let claims_before = claim_names(&hap).await;
    let labels_before = labels_of(&hap, &bindings, &taken).await;
    let ghost_b = unique("no-such-ns");
    let refused = attack(
        &client,
        &attacker_ns,
        "forge-b",
        &webhook_urls(&closed),
        &forged(&run, &ghost_b, "rt-b", &format!("{run}-forged-b")),
    )
    .await;
    assert_refused_at_tls(&refused);
    let (claim_real, real) = a_real_runtime_is_served(&client, &hap, &rt_ns, &run).await;

    // The handshakes failed, so no handler saw the forgery: only the real claim is new (the
    // clean-up may have removed the first forgery's claim meanwhile), and no binding but the
    // real one changed.
    let without_a =
        |v: Vec<String>| -> Vec<String> { v.into_iter().filter(|c| *c != claim_a).collect() };
    let mut expected = without_a(claims_before);
    expected.push(claim_real);
    expected.sort();
    assert_eq!(without_a(claim_names(&hap).await), expected);
    assert!(!claim_names(&hap).await.iter().any(|c| c.contains(&ghost_b)));
    let mut labels_after = labels_of(&hap, &bindings, &taken).await;
    labels_after.remove(&real);
    let mut labels_expected = labels_before;
    labels_expected.remove(&real);
    assert_eq!(labels_after, labels_expected, "binding labels changed");
}
