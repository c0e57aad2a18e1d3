//! End-to-end (real kube-apiserver): what GitOps tools conclude from the operator's status, and
//! that the operator never fights them over fields.
//!
//! Flux's verdict is computed by Flux's own kstatus library and Argo CD's by its Lua interpreter
//! running deploy/argocd/*/health.lua, both inside e2e/testhelper (a Go program; `make test`
//! builds it and exports HAP_TESTHELPER), on `kubectl get -o json` of live objects. Real Flux,
//! reconciling a HapConfig from Git, runs in tests/it/e2e_flux.rs.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use support::*;

/// The test helper binary. `make test` builds it; a bare `cargo test` builds it here. Never
/// skipped: without it every test of this file fails.
fn testhelper() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("HAP_TESTHELPER") {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "HAP_TESTHELPER={} does not exist: run e2e/build-testhelper.sh",
                p.display()
            );
            return p;
        }
        let out = Command::new(repo_root().join("e2e/build-testhelper.sh"))
            .output()
            .expect("run e2e/build-testhelper.sh");
        assert!(
            out.status.success(),
            "e2e/build-testhelper.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// One line of the helper's output.
#[derive(Debug, Deserialize, Clone, PartialEq, Eq)]
struct Verdict {
    #[serde(default)]
    name: String,
    status: String,
    message: String,
}

/// Runs the helper on `input` (JSON) and returns one verdict per object.
fn helper(args: &[&str], input: &str) -> Vec<Verdict> {
    use std::io::Write;
    let mut child = Command::new(testhelper())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn testhelper");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write to testhelper");
    let out = child.wait_with_output().expect("testhelper output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "testhelper {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a verdict per line"))
        .collect()
}

fn one(mut v: Vec<Verdict>) -> Verdict {
    assert_eq!(v.len(), 1, "{v:?}");
    v.remove(0)
}

fn health_script(kind: &str) -> PathBuf {
    repo_root().join(format!("deploy/argocd/accountpool.io/{kind}/health.lua"))
}

fn kstatus(object: &str) -> Verdict {
    one(helper(&["kstatus"], object))
}

fn argo(kind: &str, object: &str) -> Verdict {
    let script = health_script(kind);
    one(helper(
        &["argohealth", "--script", script.to_str().expect("path")],
        object,
    ))
}

/// `kubectl get -o json` of one object.
fn live_json(resource: &str, namespace: Option<&str>, name: &str) -> String {
    get_json(resource, namespace, name, &[])
}

/// The object with its managedFields, which kubectl leaves out unless asked.
fn live_object_with_managed_fields(resource: &str, namespace: Option<&str>, name: &str) -> Value {
    let json = get_json(resource, namespace, name, &["--show-managed-fields"]);
    serde_json::from_str(&json).expect("kubectl JSON")
}

fn get_json(resource: &str, namespace: Option<&str>, name: &str, extra: &[&str]) -> String {
    let mut args = vec!["get", resource, name, "-o", "json"];
    args.extend(extra);
    if let Some(ns) = namespace {
        args.extend(["-n", ns]);
    }
    let (ok, out, err) = kubectl(&args);
    assert!(ok, "kubectl get {resource} {name}: {err}");
    out
}

/// Waits until Flux's and Argo CD's verdicts on the live object are `flux` and `argo`; returns
/// both. The operator runs on this runtime, so the blocking kubectl and helper calls go to the
/// blocking pool.
async fn gitops_reads(
    kind: &'static str,
    namespace: Option<&str>,
    name: &str,
    flux: &str,
    argo_health: &str,
) -> (Verdict, Verdict) {
    let resource = match kind {
        "HapConfig" => "hapconfig",
        _ => "accountclaim",
    };
    let what = format!("{kind} {name}: kstatus {flux}, Argo CD {argo_health}");
    let (ns, name) = (namespace.map(str::to_string), name.to_string());
    let mut last = None;
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let (ns, name) = (ns.clone(), name.clone());
            let reads = tokio::task::spawn_blocking(move || {
                let json = live_json(resource, ns.as_deref(), &name);
                (kstatus(&json), argo(kind, &json))
            })
            .await
            .expect("reading the object");
            if reads.0.status == flux && reads.1.status == argo_health {
                return reads;
            }
            last = Some(reads);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    match found {
        Ok(reads) => reads,
        Err(_) => panic!("timed out waiting for {what}; last seen {last:?}"),
    }
}

/// Reads the object once, without waiting (for states that must hold right now).
async fn gitops_now(kind: &'static str, namespace: Option<&str>, name: &str) -> (Verdict, Verdict) {
    let resource = match kind {
        "HapConfig" => "hapconfig",
        _ => "accountclaim",
    };
    let (ns, name) = (namespace.map(str::to_string), name.to_string());
    tokio::task::spawn_blocking(move || {
        let json = live_json(resource, ns.as_deref(), &name);
        (kstatus(&json), argo(kind, &json))
    })
    .await
    .expect("reading the object")
}

// ---------------------------------------------------------------------------------------------
// The health checks on their own cases (no cluster needed).

#[derive(Deserialize)]
struct HealthTests {
    tests: Vec<HealthCase>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthCase {
    health_status: Expected,
    input_path: String,
}

#[derive(Deserialize)]
struct Expected {
    status: String,
    message: String,
}

fn yaml_file_as_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("read YAML");
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every case of health_test.yaml (Argo CD's own test format) gives its status and message in
/// Argo CD's interpreter, and Flux's kstatus agrees wherever the two can agree.
#[test]
fn health_checks_pass_their_cases_and_agree_with_kstatus() {
    // What kstatus answers for each case. The two deliberate differences: an object without any
    // status is Current to kstatus (its documented race) but Progressing to the Lua check, and a
    // Failed claim without Stalled (never written by this operator) is only Degraded in Argo CD.
    let kstatus_expected: BTreeMap<(&str, &str), &str> = [
        (("HapConfig", "no_status"), "Current"),
        (("HapConfig", "progressing"), "InProgress"),
        (("HapConfig", "stale_generation"), "InProgress"),
        (("HapConfig", "ready"), "Current"),
        (("HapConfig", "missing_pool"), "Current"),
        (("HapConfig", "invalid"), "Failed"),
        (("HapConfig", "ignored"), "Failed"),
        (("HapConfig", "deleting"), "Terminating"),
        (("AccountClaim", "no_status"), "Current"),
        (("AccountClaim", "bound"), "Current"),
        (("AccountClaim", "pool_exhausted"), "InProgress"),
        (("AccountClaim", "no_matching_rule"), "Failed"),
        (("AccountClaim", "binding_lost"), "Failed"),
        (("AccountClaim", "failed_without_stalled"), "InProgress"),
        (("AccountClaim", "deleting"), "Terminating"),
    ]
    .into_iter()
    .collect();
    let mut seen = Vec::new();
    for kind in ["HapConfig", "AccountClaim"] {
        let dir = repo_root().join(format!("deploy/argocd/accountpool.io/{kind}"));
        let cases: HealthTests =
            serde_json::from_value(yaml_file_as_json(&dir.join("health_test.yaml")))
                .expect("health_test.yaml");
        let mut objects = Vec::new();
        for case in &cases.tests {
            let object = yaml_file_as_json(&dir.join(&case.input_path));
            let input = object.to_string();
            let got = argo(kind, &input);
            assert_eq!(
                (got.status.as_str(), got.message.as_str()),
                (
                    case.health_status.status.as_str(),
                    case.health_status.message.as_str()
                ),
                "{kind} {}",
                case.input_path
            );
            let stem = Path::new(&case.input_path)
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("file name")
                .to_string();
            let want = kstatus_expected
                .get(&(kind, stem.as_str()))
                .unwrap_or_else(|| panic!("no kstatus expectation for {kind} {stem}"));
            assert_eq!(kstatus(&input).status, *want, "kstatus of {kind} {stem}");
            seen.push((kind, stem));
            objects.push(object);
        }
        // No fixture without a case.
        let files = std::fs::read_dir(dir.join("testdata"))
            .expect("testdata")
            .count();
        assert_eq!(
            files,
            cases.tests.len(),
            "{kind}: every testdata file has a case"
        );
        // A List (as `kubectl get -o json` prints several objects) gives one verdict per item.
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string();
        assert_eq!(helper(&["kstatus"], &list).len(), cases.tests.len());
    }
    assert_eq!(seen.len(), kstatus_expected.len(), "every expectation used");
}

// ---------------------------------------------------------------------------------------------
// Live objects.

/// A HapConfig through its lifecycle: Current/Healthy when ready; InProgress/Progressing while a
/// new generation is not observed; Failed/Degraded while the current generation does not parse
/// (even though the last valid one keeps serving); back to Current once fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hap_config_reads_current_in_progress_and_failed() {
    let mut hap = Hap::without_operator(&["aws"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    // Before the operator has written anything, Argo CD already waits; kstatus cannot tell (it
    // reads "no conditions" as Current), which is why the operator writes a status at once.
    let (flux, argo_health) = gitops_now("HapConfig", None, &hap.config).await;
    assert_eq!(
        (flux.status.as_str(), argo_health.status.as_str()),
        ("Current", "Progressing")
    );

    hap.start_operator().await;
    let (flux, argo_health) =
        gitops_reads("HapConfig", None, &hap.config, "Current", "Healthy").await;
    assert_eq!(flux.message, "Resource is Ready");
    assert!(
        argo_health
            .message
            .starts_with("Ready: generation 1 in force"),
        "{}",
        argo_health.message
    );

    // A spec change the operator has not seen yet: generation 2, observedGeneration 1.
    hap.stop_operator().await;
    hap.apply_config(&["aws", "gcp"], json!({})).await;
    let (flux, argo_health) = gitops_now("HapConfig", None, &hap.config).await;
    assert_eq!(flux.status, "InProgress");
    assert_eq!(
        flux.message,
        "HapConfig generation is 2, but latest observed generation is 1"
    );
    assert_eq!(argo_health.status, "Progressing");
    assert_eq!(
        argo_health.message,
        "Waiting for hap-operator to observe generation 2 (observed 1)"
    );
    hap.start_operator().await;
    // gcp has no pool: PoolsAvailable=False, but the rules are in force, so still healthy.
    gitops_reads("HapConfig", None, &hap.config, "Current", "Healthy").await;
    assert_eq!(
        hap.config_condition("PoolsAvailable", "False").await.reason,
        "MissingPool"
    );

    // A rule that does not parse: Stalled, while generation 2 keeps serving.
    hap.apply_config(&["aws", "gcp(PR=)"], json!({})).await;
    let (flux, argo_health) =
        gitops_reads("HapConfig", None, &hap.config, "Failed", "Degraded").await;
    assert!(
        flux.message.contains("generation 3 is invalid") && flux.message.contains("gcp(PR=)"),
        "{}",
        flux.message
    );
    assert!(
        argo_health
            .message
            .starts_with("ConfigInvalid: generation 3 is invalid"),
        "{}",
        argo_health.message
    );
    assert_eq!(hap.config_status().await.active_generation, Some(2));

    hap.apply_config(&["aws", "gcp(PR=cf-sa30)"], json!({}))
        .await;
    gitops_reads("HapConfig", None, &hap.config, "Current", "Healthy").await;
}

/// A HapConfig whose first generation already does not parse has nothing in force: Failed and
/// Degraded from the start, not an endless InProgress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hap_config_invalid_from_the_start_is_failed() {
    let hap = Hap::new(&["aws(PR=)", "azurre"], json!({})).await;
    let (flux, argo_health) =
        gitops_reads("HapConfig", None, &hap.config, "Failed", "Degraded").await;
    assert!(
        flux.message.contains("no rules are in force"),
        "{}",
        flux.message
    );
    assert!(
        argo_health.message.starts_with("ConfigInvalid: "),
        "{}",
        argo_health.message
    );
}

/// An AccountClaim: Current/Healthy when bound; InProgress/Progressing while its pool is
/// exhausted (the operator retries); Failed/Degraded when no rule matches (needs a person) and
/// when its binding is lost; Terminating/Progressing while its release finalizer holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_claim_reads_current_in_progress_failed_and_terminating() {
    let mut hap = Hap::new(&["aws"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    let ns = hap.claims_ns.clone();

    hap.claim("bound", json!({"globalAccount": "ga-1", "plan": "aws"}))
        .await;
    let (flux, argo_health) =
        gitops_reads("AccountClaim", Some(&ns), "bound", "Current", "Healthy").await;
    assert_eq!(flux.message, "Resource is Ready");
    assert!(
        argo_health.message.starts_with("Bound: bound to "),
        "{}",
        argo_health.message
    );

    // The only binding is taken: the next tenant waits, and the operator keeps trying.
    hap.claim("waiting", json!({"globalAccount": "ga-2", "plan": "aws"}))
        .await;
    let (flux, argo_health) = gitops_reads(
        "AccountClaim",
        Some(&ns),
        "waiting",
        "InProgress",
        "Progressing",
    )
    .await;
    assert_eq!(
        hap.ready_reason("waiting", "PoolExhausted").await,
        flux.message
    );
    assert!(
        argo_health.message.starts_with("PoolExhausted: "),
        "{}",
        argo_health.message
    );
    hap.binding("aws-2", "aws", &[("hyperscalerType", "aws")])
        .await;
    gitops_reads("AccountClaim", Some(&ns), "waiting", "Current", "Healthy").await;

    // No rule for the plan: only a new HapConfig can help.
    hap.claim(
        "unmatched",
        json!({"globalAccount": "ga-3", "plan": "azure"}),
    )
    .await;
    let (flux, argo_health) =
        gitops_reads("AccountClaim", Some(&ns), "unmatched", "Failed", "Degraded").await;
    assert_eq!(
        hap.ready_reason("unmatched", "NoMatchingRule").await,
        flux.message
    );
    assert!(argo_health.message.starts_with("NoMatchingRule: "));

    // The bound binding disappears: phase Failed, never rebound.
    let binding = hap.bound("bound").await;
    let (ok, _, err) = kubectl(&[
        "delete",
        "credentialsbinding",
        &binding,
        "-n",
        &hap.bindings_ns,
    ]);
    assert!(ok, "{err}");
    let (_, argo_health) =
        gitops_reads("AccountClaim", Some(&ns), "bound", "Failed", "Degraded").await;
    assert!(
        argo_health.message.starts_with("BindingLost: "),
        "{}",
        argo_health.message
    );

    // Deleted while the operator is away: the release finalizer holds the claim.
    hap.stop_operator().await;
    let (ok, _, err) = kubectl(&[
        "delete",
        "accountclaim",
        "waiting",
        "-n",
        &ns,
        "--wait=false",
    ]);
    assert!(ok, "{err}");
    let (flux, argo_health) = gitops_now("AccountClaim", Some(&ns), "waiting").await;
    assert_eq!(
        (flux.status.as_str(), argo_health.status.as_str()),
        ("Terminating", "Progressing")
    );
    assert_eq!(argo_health.message, "Pending deletion");
    hap.start_operator().await;
    eventually(Duration::from_secs(60), "claim released", || async {
        hap.claims()
            .get_opt("waiting")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Server-side apply ownership.

/// managedFields as (manager, operation, subresource, top-level keys of fieldsV1), plus the
/// fieldsV1 of each entry for closer checks.
fn managed_fields(object: &Value) -> Vec<(String, String, String, Vec<String>, Value)> {
    object["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .map(|m| {
            let fields = m["fieldsV1"].clone();
            let keys = fields
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            (
                m["manager"].as_str().unwrap_or_default().to_string(),
                m["operation"].as_str().unwrap_or_default().to_string(),
                m["subresource"].as_str().unwrap_or_default().to_string(),
                keys,
                fields,
            )
        })
        .collect()
}

/// Applies a manifest as Flux's kustomize-controller does: server-side, its own field manager,
/// and no --force-conflicts, so any conflict fails the apply.
fn flux_apply(manifest: &Value) {
    let (ok, out, err) = kubectl_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager=kustomize-controller",
            "-f",
            "-",
        ],
        Some(&manifest.to_string()),
    );
    assert!(ok, "apply as kustomize-controller: {out}{err}");
    assert!(!err.contains("conflict"), "{err}");
}

/// A HapConfig and an AccountClaim applied by "Flux", reconciled by the operator and applied
/// again: no conflicts, spec stays Flux's, and the operator owns nothing of it. The operator owns
/// exactly `status` through the status subresource, and on a claim its own finalizer entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_server_side_apply_never_conflicts_with_the_operator() {
    let client = client().await;
    let bindings_ns = project(&client).await;
    let claims_ns = namespace(&client, "claims").await;
    let mut hap = Hap {
        garden: client.clone(),
        garden_kubeconfig: None,
        client,
        config: unique("hap"),
        bindings_ns,
        claims_ns,
        operator: None,
    };
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    let (name, bindings_ns) = (hap.config.clone(), hap.bindings_ns.clone());
    let config = |rules: &[&str]| {
        json!({
            "apiVersion": "accountpool.io/v1alpha1",
            "kind": "HapConfig",
            "metadata": {"name": name, "labels": {"kustomize.toolkit.fluxcd.io/name": "hap"}},
            "spec": {"bindingNamespace": bindings_ns, "rules": rules},
        })
    };
    flux_apply(&config(&["aws"]));
    hap.start_operator().await;
    hap.config_condition("Ready", "True").await;
    // Flux applies on every interval, and on every Git change.
    flux_apply(&config(&["aws"]));
    flux_apply(&config(&["aws", "gcp"]));
    gitops_reads("HapConfig", None, &hap.config, "Current", "Healthy").await;
    let object = live_object_with_managed_fields("hapconfig", None, &hap.config);
    assert_eq!(object["spec"]["rules"], json!(["aws", "gcp"]));
    let fields = managed_fields(&object);
    let ours: Vec<_> = fields.iter().filter(|f| f.0 == "hap-operator").collect();
    assert_eq!(ours.len(), 1, "{fields:?}");
    assert_eq!(
        (ours[0].1.as_str(), ours[0].2.as_str(), ours[0].3.clone()),
        ("Apply", "status", vec!["f:status".to_string()]),
        "the operator applies status through /status and owns nothing else"
    );
    let flux: Vec<_> = fields
        .iter()
        .filter(|f| f.0 == "kustomize-controller")
        .collect();
    assert_eq!(flux.len(), 1, "{fields:?}");
    assert_eq!((flux[0].1.as_str(), flux[0].2.as_str()), ("Apply", ""));
    assert!(
        flux[0].3.contains(&"f:spec".to_string()) && !flux[0].3.contains(&"f:status".to_string()),
        "{fields:?}"
    );

    // An AccountClaim from Git, the way a provisioning pipeline would commit it.
    let claim = json!({
        "apiVersion": "accountpool.io/v1alpha1",
        "kind": "AccountClaim",
        "metadata": {"name": "from-git", "namespace": hap.claims_ns},
        "spec": {"globalAccount": "ga-1", "plan": "aws", "shootName": "c-1"},
    });
    flux_apply(&claim);
    assert_eq!(hap.bound("from-git").await, "aws-1");
    flux_apply(&claim);
    let object = live_object_with_managed_fields("accountclaim", Some(&hap.claims_ns), "from-git");
    assert_eq!(
        object["metadata"]["finalizers"],
        json!(["accountpool.io/release"]),
        "Flux's apply leaves the operator's finalizer alone"
    );
    assert_eq!(object["status"]["phase"], "Bound");
    let fields = managed_fields(&object);
    let status: Vec<_> = fields
        .iter()
        .filter(|f| f.0 == "hap-operator" && f.2 == "status")
        .collect();
    assert_eq!(status.len(), 1, "{fields:?}");
    assert_eq!(
        (status[0].1.as_str(), status[0].3.clone()),
        ("Apply", vec!["f:status".to_string()])
    );
    // The finalizer goes in with a JSON patch (it tests the list it read, so two writers cannot
    // lose each other's entries): an Update entry that owns exactly that one set element.
    let main: Vec<_> = fields
        .iter()
        .filter(|f| f.0 == "hap-operator" && f.2.is_empty())
        .collect();
    assert_eq!(main.len(), 1, "{fields:?}");
    assert_eq!(main[0].1, "Update");
    assert_eq!(
        main[0].4,
        json!({"f:metadata": {"f:finalizers": {".": {}, "v:\"accountpool.io/release\"": {}}}}),
        "the operator owns its finalizer entry and nothing of spec"
    );
    let flux: Vec<_> = fields
        .iter()
        .filter(|f| f.0 == "kustomize-controller")
        .collect();
    assert_eq!(flux.len(), 1, "{fields:?}");
    assert!(
        flux[0].3.contains(&"f:spec".to_string()) && !flux[0].3.contains(&"f:status".to_string()),
        "{fields:?}"
    );
}
