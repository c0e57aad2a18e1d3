//! End-to-end on a real node: the request-source admission webhooks served from the operator's
//! pods. The shipped kustomize overlay `request-sources` (every source component, the webhook
//! certificate yours, callers authenticated by the client CA of the node environment's API
//! servers, the NetworkPolicy) runs unchanged on the node of `e2e/testenv up --node --gardener`
//! (e2e/README.md). The certificate is made and installed exactly as docs/sources.md says
//! ("Certificates without cert-manager": that script is run as written); cert-manager does not
//! run here. kube-apiserver calls the webhook through the Service `hap-operator-webhook` (its
//! cluster IP, kube-proxy's DNAT to either replica), and so does gardener-apiserver for Shoots.
//!
//! Proven: a Kyma Runtime and a Gardener Shoot created by a user get their binding from the
//! webhook in a pod; a standby replica answers while only the leader decides; a request that
//! cannot be served is denied naming the field; a dry run claims nothing; a new certificate
//! (another CA) in the Secret is read again from the mounted files without a restart; Runtimes
//! created back to back while the leader pod is being deleted (kube-apiserver's connection on
//! that pod) are all admitted and bound, and the replica that takes the Lease (the standby, or
//! the replacement pod) binds the next.
//!
//! `make test` runs it after tests/it/e2e_pods.rs on the same node environment; by hand:
//! `e2e/testenv up --node --gardener --images $(scripts/image.sh)`, then
//! `cargo test --test it -- e2e_pods_sources:: --nocapture` (the timings are printed).

use crate::support;

use crate::support::deploy;
use crate::support::node;

use std::time::{Duration, Instant};

use deploy::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use node::*;
use serde_json::{Value, json};
use support::garden::{BindingRef, profile, shoot_object, shoot_resource};
use support::platform::{
    RuntimeSpec, SCOPE_LABEL, api, base64_engine, install_platform_crds, runtime, runtime_binding,
    runtime_resource,
};
use support::*;

/// The label every served object of one run carries: the sources select it, cleanup uses it.
const RUN_LABEL: &str = SCOPE_LABEL;

/// The sum of a metric's samples whose line contains `select`, from a pod's /metrics.
fn metric_sum(pod: &str, metric: &str, select: &str) -> u64 {
    pod_get(NS, pod, "/metrics")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(select))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Admission calls for `kind` a pod answered with `outcome` (`""`: any).
fn answered(pod: &str, kind: &str, outcome: &str) -> u64 {
    let select = format!("kind=\"{kind}\"");
    pod_get(NS, pod, "/metrics")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("hap_admission_duration_seconds_count{") && l.contains(&select))
        .filter(|l| outcome.is_empty() || l.contains(&format!("outcome=\"{outcome}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Claims a pod decided `Claimed` (only a leader decides).
fn claimed(pod: &str) -> u64 {
    metric_sum(pod, "hap_claim_outcomes_total", "outcome=\"Claimed\"")
}

fn set_ca_bundle(webhook: &str, ca_pem: &str) {
    let ca = base64_engine::encode(ca_pem.as_bytes());
    let patch = json!([{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca}]);
    kubectl_ok(&[
        "patch",
        "mutatingwebhookconfiguration",
        webhook,
        "--type=json",
        "-p",
        &patch.to_string(),
    ]);
}

/// A Runtime as KEB creates it without a binding, for the tenant `ga`.
fn request_runtime(ns: &str, run: &str, name: &str, ga: &str, plan: &str) -> DynamicObject {
    runtime(
        ns,
        run,
        &RuntimeSpec {
            name,
            global_account: Some(ga),
            plan,
            platform_region: "cf-eu10",
            region: "eu-central-1",
            provider: "aws",
            binding: "",
            extra_labels: &[],
        },
    )
}

/// `kubectl create --dry-run=server` of an object: (admitted, stdout, stderr with the warnings).
fn dry_run_create(obj: &impl serde::Serialize) -> (bool, String, String) {
    kubectl_stdin(
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        Some(&serde_json::to_string(obj).unwrap()),
    )
}

/// A Shoot in the project `kyma` that opts in and names no binding.
async fn request_shoot(client: &kube::Client, run: &str, name: &str, ga: Option<&str>) -> Value {
    let p = profile(client, "aws").await;
    let mut s = shoot_object(BINDINGS_NS, name, "", BindingRef::CredentialsBinding, &p);
    s["spec"]
        .as_object_mut()
        .unwrap()
        .remove("credentialsBindingName");
    let mut labels =
        json!({"accountpool.io/request": "true", "accountpool.io/plan": "aws", RUN_LABEL: run});
    if let Some(ga) = ga {
        labels["accountpool.io/global-account"] = json!(ga);
    }
    s["metadata"]["labels"] = labels;
    s
}

fn denial<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!("expected a denial, got {other:?}"),
    }
}

/// Waits until the kubelet has put the Secret's new files into both pods and each replica has
/// read them: a TLS handshake (through the API server's proxy to the pod's port) makes the
/// webhook look at its files, and it logs the reload. The kubelet refreshes a Secret volume
/// when it syncs the pod: every minute, or at once when the pod changes, so the pods are
/// annotated.
async fn both_replicas_reloaded(pods: &[String], round: &str) {
    for p in pods {
        kubectl_ok(&[
            "annotate",
            "pod",
            "-n",
            NS,
            p,
            &format!("hap-test/certificate={round}"),
            "--overwrite",
        ]);
    }
    for p in pods {
        eventually(
            Duration::from_secs(90),
            &format!("{p} serves the new certificate"),
            || async move {
                // A new TLS connection, straight to the pod: the certificate is chosen (and
                // the files checked) per handshake, and kube-apiserver's pod proxy keeps its
                // connection to a replica open, so through it a replica may never handshake
                // again. The client rejects the certificate (no CA given); the handshake
                // is what counts.
                let (_, ip, _) =
                    kubectl(&["get", "pod", "-n", NS, p, "-o", "jsonpath={.status.podIP}"]);
                let _ = node_http_get(&format!("https://{}:9443/mutate/runtimes", ip.trim()));
                let (_, log, _) = kubectl(&["logs", "-n", NS, p]);
                log.contains("webhook certificate reloaded").then_some(())
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_source_webhooks_are_served_from_pods() {
    let _one = ONE_AT_A_TIME.lock().await;
    let client = node_client().await;
    let started = Instant::now();
    install_platform_crds().await;
    earlier_installation_gone().await;
    let run = unique("ps");
    // Tenants of this run only: a binding an earlier run left labelled is not theirs.
    let ga = |n: u32| format!("{run}-ga-{n}");
    let rt_ns = unique("kcp");
    let shoots = format!("{RUN_LABEL}={run}");
    let mut cleanup = vec![delete_args(&{
        let mut v = vec!["mutatingwebhookconfiguration"];
        v.extend(WEBHOOKS);
        v
    })];
    cleanup.extend([
        vec![
            "annotate".into(),
            "shoots".into(),
            "-n".into(),
            BINDINGS_NS.into(),
            "-l".into(),
            shoots.clone(),
            "confirmation.gardener.cloud/deletion=true".into(),
            "--overwrite".into(),
        ],
        // The served objects gone first (waiting), so that no source adopts them again; then
        // their claims, released by the operator while it still runs (their finalizer would
        // otherwise hold the namespace).
        waiting_delete(&["shoots", "-n", BINDINGS_NS, "-l", &shoots]),
        waiting_delete(&["runtimes", "-n", &rt_ns, "--all"]),
        delete_args(&["namespace", &rt_ns]),
        waiting_delete(&["accountclaims", "-n", NS, "--all"]),
        delete_args(&["namespace", NS]),
        delete_args(&["hapconfig", "default"]),
    ]);
    // The plain /metrics these tests read through the pod proxy (`with_plain_metrics`).
    let objs = with_plain_metrics(kustomize("deploy/kustomize/overlays/request-sources"));
    for o in objs
        .iter()
        .filter(|o| matches!(kind(o), "ClusterRole" | "ClusterRoleBinding"))
    {
        cleanup.push(delete_args(&[&kind(o).to_lowercase(), name(o)]));
    }
    let _cleanup = Cleanup(cleanup);
    kubectl_ok(&["create", "namespace", &rt_ns]);

    // The HapConfig serves Runtimes and opted-in Shoots of the project kyma.
    let hap = overlay_hap(&client);
    hap.apply_config(
        &["aws"],
        json!({"requestSources": [
            {"id": "kyma", "kind": "Runtime", "matchLabels": {RUN_LABEL: run}},
            {"id": "gardener-users", "kind": "Shoot", "matchLabels": {"accountpool.io/request": "true", RUN_LABEL: run}},
        ]}),
    )
    .await;
    for i in 1..=18 {
        hap.binding(&format!("{run}-{i}"), "aws", &[("hyperscalerType", "aws")])
            .await;
    }

    // The overlay as shipped; the Secret and caBundle the documented way, and the ConfigMap with
    // the CA of the client certificate this node environment's kube-apiserver presents (the
    // overlay serves only such callers), before the pods start.
    let (deployment, rest): (Vec<Value>, Vec<Value>) =
        objs.into_iter().partition(|o| kind(o) == "Deployment");
    apply(&rest, "overlay request-sources");
    let certs = tempfile::tempdir().unwrap();
    let script = documented_certificate_script();
    sh(certs.path(), &script);
    let client_ca = node_dir().join("pki/webhook-client-ca.crt");
    kubectl_ok(&[
        "create",
        "configmap",
        "hap-operator-webhook-client-ca",
        "-n",
        NS,
        &format!("--from-file=ca.crt={}", client_ca.display()),
    ]);
    apply(&deployment, "overlay request-sources: the Deployment");
    let (leader, standby) =
        check_running(&client, NS, "hap-operator-metrics", "hap-operator").await;
    let (leader, standby) = (pod_name(&leader), pod_name(&standby));
    hap.config_condition("Ready", "True").await;
    eprintln!(
        "e2e_pods_sources: installed, both replicas Ready {:.1}s after the start",
        started.elapsed().as_secs_f64()
    );
    // Both replicas are endpoints of the webhook Service.
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
    let mut endpoints: Vec<&str> = eps.split_whitespace().collect();
    endpoints.sort();
    let mut both = vec![leader.as_str(), standby.as_str()];
    both.sort();
    assert_eq!(endpoints, both, "the webhook Service's endpoints");

    // A dry run (kube-apiserver -> Service -> a replica) claims nothing; the warning says what a
    // real request would do.
    let runtimes = api(&client, &rt_ns, &runtime_resource());
    let (ok, out, err) = dry_run_create(&request_runtime(&rt_ns, &run, "rt-dry", &ga(1), "aws"));
    assert!(ok, "dry run admitted: {err}");
    assert!(
        err.contains("hap-operator (dry run): no binding assigned"),
        "the dry run's warning: {err}"
    );
    let dry: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        dry.pointer("/spec/shoot/secretBindingName"),
        Some(&json!(""))
    );
    assert!(
        hap.claims()
            .get_opt(&format!("runtime.{rt_ns}.rt-dry"))
            .await
            .unwrap()
            .is_none(),
        "a dry run created no claim"
    );

    // A Runtime created by a user gets its binding from a replica; only the leader decides.
    let t = Instant::now();
    runtimes
        .create(
            &PostParams::default(),
            &request_runtime(&rt_ns, &run, "rt-1", &ga(1), "aws"),
        )
        .await
        .expect("rt-1 admitted");
    let rt1_ms = t.elapsed().as_millis();
    let b1 = runtime_binding(&client, &rt_ns, "rt-1").await;
    assert!(!b1.is_empty(), "rt-1 got a binding");
    assert_eq!(hap.bound(&format!("runtime.{rt_ns}.rt-1")).await, b1);
    assert_eq!(hap.labels(&b1).await.get("tenantName"), Some(&ga(1)));
    assert_eq!(claimed(&leader), 1, "the leader claimed rt-1's binding");
    assert_eq!(claimed(&standby), 0, "a standby never decides");
    let served = |pod: &str| answered(pod, "Runtime", "patched");
    assert_eq!(
        served(&leader) + served(&standby),
        1,
        "one replica served rt-1"
    );

    // The standby answers as well: kube-apiserver's connection steered to it (see steer_to).
    let ca_pem = std::fs::read_to_string(certs.path().join("ca.crt")).unwrap();
    let dry = request_runtime(&rt_ns, &run, "rt-dry", &ga(1), "aws");
    let mut fresh = 0;
    if served(&standby) == 0 {
        let rounds = steer_to(&standby, &ca_pem, &mut fresh, &dry);
        eprintln!(
            "e2e_pods_sources: rt-1 was served by the leader; the standby answered a dry run \
             after {rounds} new connection(s)"
        );
        runtimes
            .create(
                &PostParams::default(),
                &request_runtime(&rt_ns, &run, "rt-2", &ga(2), "aws"),
            )
            .await
            .expect("rt-2 admitted");
        let b2 = runtime_binding(&client, &rt_ns, "rt-2").await;
        assert!(!b2.is_empty() && b2 != b1, "rt-2 got {b2:?}");
        assert_eq!(hap.labels(&b2).await.get("tenantName"), Some(&ga(2)));
        assert_eq!(served(&standby), 1, "the standby served rt-2");
        assert_eq!(claimed(&leader), 2, "the leader claimed rt-2's binding");
        assert_eq!(claimed(&standby), 0);
    }

    // Cannot be served: denied, naming the field; nothing claimed.
    let msg = denial(
        runtimes
            .create(
                &PostParams::default(),
                &request_runtime(&rt_ns, &run, "rt-bad", &ga(1), ""),
            )
            .await,
    );
    assert!(
        msg.contains("runtimes.accountpool.io")
            && msg.contains("metadata.labels['kyma-project.io/broker-plan-name']"),
        "the denial names the webhook and the field: {msg}"
    );
    assert!(
        hap.claims()
            .get_opt(&format!("runtime.{rt_ns}.rt-bad"))
            .await
            .unwrap()
            .is_none()
    );

    // A new certificate from another CA: the documented script again (the Secret replaced, the
    // caBundles set to the new CA only). Admission works again once the replicas serve the new
    // files: no restart.
    let restarts_before = restarts(&client).await;
    let t = Instant::now();
    let renewed = tempfile::tempdir().unwrap();
    sh(renewed.path(), &script);
    both_replicas_reloaded(&[leader.clone(), standby.clone()], "renewed").await;
    eventually(
        Duration::from_secs(30),
        "a dry run admitted with only the new CA trusted",
        || async {
            let (ok, _, _) =
                dry_run_create(&request_runtime(&rt_ns, &run, "rt-dry", &ga(1), "aws"));
            ok.then_some(())
        },
    )
    .await;
    eprintln!(
        "e2e_pods_sources: certificate replaced -> served by both replicas {} ms",
        t.elapsed().as_millis()
    );
    assert_eq!(restarts(&client).await, restarts_before, "no restart");

    // Shoots: gardener-apiserver calls the Shoot webhook through the same Service. It dials the
    // Service's DNS name, which cluster DNS would answer; here the node environment's hosts file
    // for gardener-apiserver does (e2e/README.md).
    let svc: Value = serde_json::from_str(&kubectl_ok(&[
        "get", "service", SERVICE, "-n", NS, "-o", "json",
    ]))
    .unwrap();
    let cluster_ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    let hosts = node_dir().join("run/hosts");
    let name = format!("{SERVICE}.{NS}.svc");
    let kept: String = std::fs::read_to_string(&hosts)
        .expect("the node environment's hosts file for gardener-apiserver")
        .lines()
        .filter(|l| !l.split_whitespace().any(|w| w == name))
        .map(|l| format!("{l}\n"))
        .collect();
    // Written in place: gardener-apiserver sees this inode through a bind mount.
    std::fs::write(&hosts, format!("{kept}{cluster_ip} {name}\n")).unwrap();
    let shoot_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), BINDINGS_NS, &shoot_resource());
    let s1 = unique("s");
    let dry_shoot = request_shoot(&client, &run, &s1, Some(&ga(3))).await;
    // Gardener's validation then refuses the dry run (a Shoot without a binding); the webhook's
    // warning is what shows it answered, and claimed nothing.
    let deadline = Instant::now() + Duration::from_secs(30);
    let err = loop {
        let (_, _, err) = dry_run_create(&dry_shoot);
        if err.contains("hap-operator (dry run): no binding assigned") {
            break err;
        }
        assert!(
            Instant::now() < deadline,
            "gardener-apiserver reaches the webhook (a dry-run Shoot answered) in 30 s: {err}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        err.contains("spec.secretBindingName: Required value"),
        "Gardener's validation, not the webhook, refused the dry run: {err}"
    );
    assert!(
        hap.claims()
            .get_opt(&format!("shoot.{BINDINGS_NS}.{s1}"))
            .await
            .unwrap()
            .is_none(),
        "a dry-run Shoot claimed nothing"
    );
    let t = Instant::now();
    let created = shoot_api
        .create(
            &PostParams::default(),
            &serde_json::from_value(request_shoot(&client, &run, &s1, Some(&ga(3))).await).unwrap(),
        )
        .await
        .expect("Shoot admitted by gardener-apiserver");
    let shoot_ms = t.elapsed().as_millis();
    let bs = created
        .data
        .pointer("/spec/credentialsBindingName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    assert!(!bs.is_empty(), "the Shoot got a binding");
    assert_eq!(hap.labels(&bs).await.get("tenantName"), Some(&ga(3)));
    assert_eq!(hap.bound(&format!("shoot.{BINDINGS_NS}.{s1}")).await, bs);
    assert_eq!(
        created
            .metadata
            .annotations
            .unwrap_or_default()
            .get("accountpool.io/account-claim"),
        Some(&format!("{NS}/shoot.{BINDINGS_NS}.{s1}"))
    );
    let s2 = unique("s");
    let msg = denial(
        shoot_api
            .create(
                &PostParams::default(),
                &serde_json::from_value(request_shoot(&client, &run, &s2, None).await).unwrap(),
            )
            .await,
    );
    assert!(
        msg.contains("shoots.accountpool.io")
            && msg.contains("metadata.labels['accountpool.io/global-account']"),
        "the Shoot's denial names the webhook and the field: {msg}"
    );

    // Failover: kube-apiserver's connection steered to the leader, the leader pod deleted, and
    // Runtimes created back to back through the whole hand-over — SIGTERM, the Lease released
    // and taken, the pod leaving the endpoints and kube-proxy's rules. Each is admitted and
    // bound: the stopping pod still answers what reaches it (closing the connection after each
    // answer) until the Service no longer sends it anything, and a claim is decided by whoever
    // leads at that instant.
    let renewed_ca = std::fs::read_to_string(renewed.path().join("ca.crt")).unwrap();
    steer_to(&leader, &renewed_ca, &mut fresh, &dry);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let t0 = Instant::now();
    pods.delete(&leader, &DeleteParams::default())
        .await
        .unwrap();
    let mut moved: Option<Instant> = None;
    let mut during = Vec::new();
    for i in 0..12u32 {
        if moved.is_some_and(|m| m.elapsed() > Duration::from_millis(1500)) {
            break;
        }
        let name = format!("rt-f{i}");
        runtimes
            .create(
                &PostParams::default(),
                &request_runtime(&rt_ns, &run, &name, &ga(10 + i), "aws"),
            )
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{name}, created {} ms after the leader pod's deletion, not admitted: {e}",
                    t0.elapsed().as_millis()
                )
            });
        during.push((name, ga(10 + i)));
        let holder = leases
            .get("hap-operator")
            .await
            .ok()
            .and_then(|l| l.spec?.holder_identity);
        if moved.is_none() && holder.is_some_and(|h| h != leader) {
            moved = Some(Instant::now());
        }
    }
    let failover_ms = t0.elapsed().as_millis();
    for (name, tenant) in &during {
        let b = runtime_binding(&client, &rt_ns, name).await;
        assert!(!b.is_empty(), "{name} got a binding");
        assert_eq!(hap.labels(&b).await.get("tenantName"), Some(tenant));
        assert_eq!(hap.bound(&format!("runtime.{rt_ns}.{name}")).await, b);
    }
    // The new leader binds. Whichever survivor takes the released Lease leads: the standby, or
    // the Deployment's replacement pod when the old leader's drain outlasted that pod's start
    // (both look every 500 ms; nothing promises the older one wins).
    let successor = eventually(
        Duration::from_secs(30),
        "a surviving replica holds the Lease",
        || async {
            let holder = leases
                .get("hap-operator")
                .await
                .ok()?
                .spec?
                .holder_identity?;
            (holder != leader).then_some(holder)
        },
    )
    .await;
    if successor != standby {
        eprintln!(
            "e2e_pods_sources: the replacement pod {successor}, not the standby {standby}, took the Lease"
        );
    }
    let claimed_before = claimed(&successor);
    runtimes
        .create(
            &PostParams::default(),
            &request_runtime(&rt_ns, &run, "rt-g", &ga(5), "aws"),
        )
        .await
        .expect("rt-g admitted");
    let bg = runtime_binding(&client, &rt_ns, "rt-g").await;
    assert!(!bg.is_empty(), "rt-g got a binding");
    assert_eq!(hap.bound(&format!("runtime.{rt_ns}.rt-g")).await, bg);
    assert_eq!(
        claimed(&successor),
        claimed_before + 1,
        "the new leader {successor} claimed rt-g's binding"
    );
    // The standby's log too, whether or not it took the Lease: e2e_pods asserts the standby's
    // take-over itself, where no requests hold the old leader's drain.
    let mut survivors = vec![successor.clone()];
    if successor != standby {
        survivors.push(standby.clone());
    }
    check_logs(NS, &survivors);
    eprintln!(
        "e2e_pods_sources: admission from pods: Runtime {rt1_ms} ms, Shoot {shoot_ms} ms; leader pod \
         deleted -> {} Runtimes admitted back to back until 1.5 s after a survivor held the Lease, {failover_ms} ms; whole test {:.1}s",
        during.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Makes kube-apiserver's connection to the Runtime webhook end at `pod`. kube-proxy picks a
/// replica per connection and kube-apiserver keeps its connection; a caBundle it has not seen
/// (the same CA followed by `fresh` empty lines) gives the webhook a new client and so a new
/// connection. Dry runs until `pod` answers one: the next call goes over that connection.
/// Returns the number of connections it took.
fn steer_to(pod: &str, ca_pem: &str, fresh: &mut usize, dry: &DynamicObject) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut rounds = 0;
    loop {
        assert!(
            Instant::now() < deadline,
            "no dry run reached {pod} in {rounds} new connections"
        );
        rounds += 1;
        *fresh += 1;
        set_ca_bundle(
            "hap-operator-runtimes",
            &format!("{ca_pem}{}", "\n".repeat(*fresh)),
        );
        let before = answered(pod, "Runtime", "");
        let (ok, _, err) = dry_run_create(dry);
        assert!(ok, "dry run admitted: {err}");
        if answered(pod, "Runtime", "") > before {
            return rounds;
        }
    }
}

/// kubectl arguments deleting `what` and waiting (a minute at most) until it is gone.
fn waiting_delete(what: &[&str]) -> Vec<String> {
    let mut v = vec!["delete".to_string()];
    v.extend(what.iter().map(|s| s.to_string()));
    v.extend(["--ignore-not-found".into(), "--timeout=60s".into()]);
    v
}

/// Container restarts of the operator's pods.
async fn restarts(client: &kube::Client) -> i32 {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    ready_pods(&pods, PODS)
        .await
        .iter()
        .flat_map(|p| {
            p.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
        })
        .map(|c| c.restart_count)
        .sum()
}
