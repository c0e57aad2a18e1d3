//! End-to-end (real kube-apiserver and gardener-apiserver): the shipped packaging. Every rendered
//! manifest (kustomize base, the monitoring and separate-garden overlays, the garden side, the
//! Helm chart with default, KEB, separate-garden and garden-side values) passes
//! `kubectl apply --dry-run=server`; kustomize and Helm ship the same RBAC in each topology; the
//! RBAC is no wider than documented (`kubectl auth can-i`, and Secrets, WorkloadIdentities,
//! InternalSecrets and Quotas only as the `get` gardener-apiserver's admission demands); the CRD copies under deploy/ and the generated docs
//! do not drift. That the RBAC is sufficient is tests/it/e2e_rbac.rs. The chart's values: the image
//! digest, extra volumes, per-kind webhook failurePolicy, alert thresholds and runbook URLs, a
//! schema closed in every subtree (KEB's top-level keys accepted); the aggregated view/edit roles
//! on the real API server; the ServiceMonitor's token from a Secret.
//!
//! Helm comes from `e2e/build-helm.sh` (built from the Go module proxy, cached); `scripts/test.sh`
//! exports its path as `HAP_HELM`.

use crate::support;

use crate::support::deploy;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::OnceLock;

use deploy::*;
use serde_json::{Value, json};
use support::*;

// ---------------------------------------------------------------------------------------------
// Static checks: copies, versions, workload settings, RBAC shape

#[test]
fn crd_copies_under_deploy_match_crds() {
    let original = std::fs::read_to_string(repo_root().join("crds/accountpool.io.yaml")).unwrap();
    for copy in [
        "deploy/kustomize/base/crds/accountpool.io.yaml",
        "deploy/helm/hap-operator/crds/accountpool.io.yaml",
    ] {
        let text = std::fs::read_to_string(repo_root().join(copy)).unwrap();
        assert!(
            text == original,
            "{copy} drifted from crds/accountpool.io.yaml: run `make crds` (it refreshes the copies)"
        );
    }
}

#[test]
fn versions_follow_cargo() {
    let version = env!("CARGO_PKG_VERSION");
    let chart: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo_root().join("deploy/helm/hap-operator/Chart.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(chart["version"], version, "Chart.yaml version");
    assert_eq!(chart["appVersion"], version, "Chart.yaml appVersion");
    let base = kustomize("deploy/kustomize/base");
    let image = find(&base, "Deployment", "hap-operator")["spec"]["template"]["spec"]["containers"]
        [0]["image"]
        .clone();
    assert_eq!(
        image,
        json!(format!("ghcr.io/hap-operator/hap-operator:{version}"))
    );
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    assert!(dockerfile.contains(&format!("hap-operator:{version}")));
}

/// The Dockerfile builds the image `make image` builds: its last stage sets the Containerfile's
/// environment (the allocator's setting, BENCHMARKS.md, Churn), no more and no less.
#[test]
fn the_dockerfile_image_sets_the_containerfiles_environment() {
    fn env_lines(file: &str) -> Vec<String> {
        let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
        let last_stage = text.rsplit("\nFROM ").next().unwrap_or_default();
        last_stage
            .lines()
            .filter(|l| l.starts_with("ENV "))
            .map(str::to_string)
            .collect()
    }
    let containerfile = env_lines("Containerfile");
    assert!(!containerfile.is_empty(), "the Containerfile sets no ENV");
    assert_eq!(env_lines("Dockerfile"), containerfile);
}

/// The attacker image of the pod tests (scripts/testhelper-image.sh) is test-only: no file
/// under deploy/ names it.
#[test]
fn the_test_only_attacker_image_never_ships() {
    fn walk(dir: &std::path::Path, hits: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, hits);
            } else if std::fs::read_to_string(&path)
                .is_ok_and(|t| t.contains("hap-testenv/testhelper"))
            {
                hits.push(path.display().to_string());
            }
        }
    }
    let mut hits = Vec::new();
    walk(&repo_root().join("deploy"), &mut hits);
    assert!(hits.is_empty(), "deploy/ names a test-only image: {hits:?}");
}

/// The workload settings the issue asks for, in both packagings.
fn check_deployment(d: &Value, what: &str) {
    let spec = &d["spec"];
    assert_eq!(spec["replicas"], 2, "{what}: replicas");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{what}");
    assert!(
        pod["securityContext"]["runAsUser"].as_i64().unwrap() > 0,
        "{what}: numeric non-root user"
    );
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "{what}"
    );
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{what}");
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{what}");
    for k in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(
                c["resources"][k][r].is_string(),
                "{what}: resources.{k}.{r}"
            );
        }
    }
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez", "{what}");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{what}");
    assert_eq!(c["ports"][0]["containerPort"], 8080, "{what}");
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "run", "{what}");
    for a in ["--log-format=json", "--leader-elect=true"] {
        assert!(args.contains(&a), "{what}: {a} in {args:?}");
    }
    let env: BTreeMap<&str, &str> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?,
                e["valueFrom"]["fieldRef"]["fieldPath"].as_str()?,
            ))
        })
        .collect();
    assert_eq!(env.get("POD_NAME"), Some(&"metadata.name"), "{what}");
    assert_eq!(
        env.get("POD_NAMESPACE"),
        Some(&"metadata.namespace"),
        "{what}"
    );
}

#[test]
fn workload_settings_in_both_packagings() {
    let base = kustomize("deploy/kustomize/base");
    check_deployment(find(&base, "Deployment", "hap-operator"), "kustomize");
    let chart = helm_template("hap-operator", "hap-system", &[]);
    check_deployment(find(&chart, "Deployment", "hap-operator"), "helm");
    for objs in [&base, &chart] {
        let pdb = find(objs, "PodDisruptionBudget", "hap-operator");
        assert_eq!(pdb["spec"]["minAvailable"], 1);
        let svc = find(objs, "Service", "hap-operator-metrics");
        assert_eq!(svc["spec"]["ports"][0]["port"], 8080);
    }
}

/// With a separate garden, both packagings mount the garden kubeconfig from a Secret read-only
/// and pass `--garden-kubeconfig` to it; the rest of the workload is unchanged.
#[test]
fn separate_garden_mounts_the_garden_kubeconfig_read_only() {
    let overlay = kustomize("deploy/kustomize/overlays/separate-garden");
    let chart = helm_template(
        "hap-operator",
        "hap-system",
        &["--set", "garden.kubeconfigSecret=hap-operator-garden"],
    );
    for (objs, what) in [(&overlay, "kustomize"), (&chart, "helm")] {
        let d = find(objs, "Deployment", "hap-operator");
        check_deployment(d, what);
        let pod = &d["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        let mount = &c["volumeMounts"][0];
        assert_eq!(mount["readOnly"], true, "{what}: {mount}");
        let dir = mount["mountPath"].as_str().unwrap();
        let args: Vec<&str> = c["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        assert!(
            args.contains(&format!("--garden-kubeconfig={dir}/kubeconfig").as_str()),
            "{what}: {args:?}"
        );
        let volume = &pod["volumes"][0];
        assert_eq!(volume["name"], mount["name"], "{what}");
        assert_eq!(
            volume["secret"]["secretName"], "hap-operator-garden",
            "{what}"
        );
        assert_eq!(volume["secret"]["items"][0]["path"], "kubeconfig", "{what}");
        // Readable by the non-root user without an fsGroup, writable by nobody.
        assert_eq!(volume["secret"]["defaultMode"], 0o444, "{what}");
    }
    // The default topology mounts nothing.
    for objs in [
        kustomize("deploy/kustomize/base"),
        helm_template("hap-operator", "hap-system", &[]),
    ] {
        let pod = &find(&objs, "Deployment", "hap-operator")["spec"]["template"]["spec"];
        assert!(pod["volumes"].is_null(), "{pod}");
    }
}

/// RBAC objects without labels: what grants what to whom.
fn rbac_essence(objs: &[Value]) -> BTreeMap<String, Value> {
    objs.iter()
        .filter(|o| is_rbac_or_sa(o) && kind(o) != "ServiceAccount")
        .map(|o| {
            let key = format!(
                "{} {}/{}",
                kind(o),
                o["metadata"]["namespace"].as_str().unwrap_or("-"),
                name(o)
            );
            let body =
                json!({"rules": o["rules"], "roleRef": o["roleRef"], "subjects": o["subjects"]});
            (key, body)
        })
        .collect()
}

/// In each topology: one cluster (base / default values), the operator's cluster of a separate
/// garden (overlays/separate-garden / garden.kubeconfigSecret) and the garden side (garden /
/// garden.rbacOnly).
#[test]
fn helm_and_kustomize_ship_the_same_rbac() {
    for (dir, values, what) in [
        ("deploy/kustomize/base", vec![], "one cluster"),
        (
            "deploy/kustomize/overlays/separate-garden",
            vec!["--set", "garden.kubeconfigSecret=hap-operator-garden"],
            "the operator's cluster of a separate garden",
        ),
        (
            "deploy/kustomize/garden",
            vec!["--set", "garden.rbacOnly=true"],
            "the garden side",
        ),
    ] {
        let base = rbac_essence(&kustomize(dir));
        let chart = rbac_essence(&helm_template("hap-operator", "hap-system", &values));
        assert_eq!(
            base.keys().collect::<Vec<_>>(),
            chart.keys().collect::<Vec<_>>(),
            "{what}"
        );
        for (k, v) in &base {
            assert_eq!(
                v, &chart[k],
                "{what}: {k} differs between kustomize and helm"
            );
        }
    }
    // The garden side is the same rules whichever cluster it is in.
    let one = rbac_essence(&kustomize("deploy/kustomize/base"));
    let garden = rbac_essence(&kustomize("deploy/kustomize/garden"));
    for (k, v) in &garden {
        assert_eq!(v["rules"], one[k]["rules"], "{k}");
    }
}

/// What bindings reference, as (API group, resource): gardener-apiserver admits a binding update
/// only if the caller may `get` the one a binding's credentialsRef names and each Quota it lists.
const REFERENCED: [(&str, &str); 4] = [
    ("", "secrets"),
    ("security.gardener.cloud", "workloadidentities"),
    ("core.gardener.cloud", "internalsecrets"),
    ("core.gardener.cloud", "quotas"),
];

/// No wildcard, no non-resource URL but `get /metrics` in the scrapers' reader role, only the
/// write verbs the code uses (`create` of TokenReviews and SubjectAccessReviews: the HTTPS
/// /metrics asks who a scraper is), and what bindings reference (Secrets, WorkloadIdentities,
/// InternalSecrets, Quotas) only as a `get`, each alone in its rule, in a namespaced Role: that
/// is all admission asks; `list` or `watch` would let the operator read them all.
fn check_least_privilege(objs: &[Value], what: &str) {
    let writes: BTreeSet<&str> = ["create", "patch"].into();
    check_aggregated_roles(objs, what);
    for o in objs
        .iter()
        .filter(|o| kind(o).ends_with("Role") && !is_aggregated(o))
    {
        for rule in o["rules"].as_array().unwrap() {
            let strings = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                    .unwrap_or_default()
            };
            if rule.get("nonResourceURLs").is_some() {
                assert!(
                    name(o).ends_with("metrics-reader")
                        && strings("nonResourceURLs") == ["/metrics"]
                        && strings("verbs") == ["get"],
                    "{what}: the only non-resource rule is the reader's get /metrics: {rule}"
                );
                continue;
            }
            for k in ["apiGroups", "resources", "verbs", "resourceNames"] {
                assert!(
                    !strings(k).iter().any(|s| s.contains('*')),
                    "{what}: wildcard in {} {}: {rule}",
                    kind(o),
                    name(o)
                );
            }
            for (group, resource) in REFERENCED {
                if strings("resources").iter().any(|r| r.starts_with(resource)) {
                    assert!(
                        kind(o) == "Role"
                            && strings("resources") == [resource]
                            && strings("apiGroups") == [group]
                            && strings("verbs") == ["get"],
                        "{what}: {resource} only as `get`, alone in its rule, in a namespaced Role: {} {}: {rule}",
                        kind(o),
                        name(o)
                    );
                }
            }
            for v in strings("verbs") {
                assert!(
                    ["get", "list", "watch"].contains(&v.as_str()) || writes.contains(v.as_str()),
                    "{what}: verb {v} in {}: {rule}",
                    name(o)
                );
            }
            if strings("verbs").iter().any(|v| v == "create") {
                let res = strings("resources");
                assert!(
                    res == ["leases"]
                        || res == ["events"]
                        || res == ["tokenreviews"]
                        || res == ["subjectaccessreviews"]
                        || res == ["configmaps"],
                    "{what}: create only for leases, events, the metrics' reviews and the last-known-good ConfigMap: {rule}"
                );
            }
        }
    }
}

/// A ClusterRole for people that Kubernetes aggregates into `view`, `edit` or `admin`.
fn is_aggregated(o: &Value) -> bool {
    o["metadata"]["labels"].as_object().is_some_and(|l| {
        l.keys()
            .any(|k| k.starts_with("rbac.authorization.k8s.io/aggregate-to-"))
    })
}

/// The roles aggregated into `view`/`edit`/`admin` cover only accountpool.io, name no wildcard,
/// never write HapConfigs (they decide which tenant gets which account) nor a status (the
/// operator's), and what aggregates into `view` only reads.
fn check_aggregated_roles(objs: &[Value], what: &str) {
    let reads = ["get", "list", "watch"];
    for o in objs.iter().filter(|o| is_aggregated(o)) {
        assert_eq!(kind(o), "ClusterRole", "{what}: {}", name(o));
        let to_view =
            o["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true";
        for rule in o["rules"].as_array().unwrap() {
            let strings = |k: &str| -> Vec<&str> {
                rule[k]
                    .as_array()
                    .map(|a| a.iter().map(|v| v.as_str().unwrap()).collect())
                    .unwrap_or_default()
            };
            assert_eq!(strings("apiGroups"), ["accountpool.io"], "{what}: {rule}");
            let writes = strings("verbs").iter().any(|v| !reads.contains(v));
            assert!(!strings("verbs").contains(&"*"), "{what}: {rule}");
            assert!(
                !to_view || !writes,
                "{what}: {} aggregates into view but writes: {rule}",
                name(o)
            );
            for r in strings("resources") {
                assert!(
                    !writes || r == "accountclaims",
                    "{what}: {} writes {r}; people may write only AccountClaims: {rule}",
                    name(o)
                );
            }
        }
    }
}

#[test]
fn shipped_rbac_is_least_privilege() {
    check_least_privilege(&kustomize("deploy/kustomize/base"), "kustomize");
    check_least_privilege(
        &kustomize("deploy/kustomize/overlays/separate-garden"),
        "kustomize separate-garden",
    );
    check_least_privilege(
        &kustomize("deploy/kustomize/garden"),
        "kustomize garden side",
    );
    check_least_privilege(
        &helm_template(
            "hap",
            "hap-system",
            &["--set", "garden.kubeconfigSecret=garden"],
        ),
        "helm separate garden",
    );
    check_least_privilege(
        &helm_template("hap", "hap-system", &["--set", "garden.rbacOnly=true"]),
        "helm garden side",
    );
    check_least_privilege(&helm_template("hap", "hap-system", &[]), "helm");
    check_least_privilege(
        &helm_template(
            "hap",
            "hap-system",
            &[
                "--set",
                "claimNamespace=claims",
                "--set",
                "shootNamespace=shoots",
            ],
        ),
        "helm narrow",
    );
}

// ---------------------------------------------------------------------------------------------
// Server-side dry runs

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_base_passes_server_dry_run() {
    let client = client().await;
    let base = kustomize("deploy/kustomize/base");
    assert!(
        !base.iter().any(|o| kind(o) == "ServiceMonitor"),
        "the base must apply without the monitoring CRDs"
    );
    let kinds: BTreeSet<&str> = base.iter().map(kind).collect();
    for k in [
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    ] {
        assert!(kinds.contains(k), "the base has a {k}: {kinds:?}");
    }
    let place = Place {
        ns: unique("hapsys"),
        bindings_ns: project(&client).await,
        suffix: unique("dry"),
    };
    let objs = relocate(&base, &place);
    // The operator namespace for real, as shipped (with its Pod Security labels), so that the
    // Deployment is checked against them.
    let ns: Vec<Value> = objs
        .iter()
        .filter(|o| kind(o) == "Namespace")
        .cloned()
        .collect();
    let _cleanup = Cleanup(cleanup_for(&ns));
    apply(&ns, "namespace");
    dry_run(&objs, "kustomize base");
}

const SERVICE_MONITOR_CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "servicemonitors.monitoring.coreos.com",
               "annotations": {"hap-operator.test/stand-in": "minimal schema; the real one comes with the Prometheus Operator"}},
  "spec": {
    "group": "monitoring.coreos.com",
    "names": {"kind": "ServiceMonitor", "listKind": "ServiceMonitorList", "plural": "servicemonitors", "singular": "servicemonitor"},
    "scope": "Namespaced",
    "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
        "type": "object", "required": ["selector", "endpoints"],
        "properties": {
          "selector": {"type": "object", "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}},
          "endpoints": {"type": "array", "items": {"type": "object", "properties": {
            "port": {"type": "string"}, "path": {"type": "string"}, "scheme": {"type": "string"},
            "authorization": {"type": "object", "properties": {"type": {"type": "string"},
              "credentials": {"type": "object", "required": ["key"], "properties": {"name": {"type": "string"}, "key": {"type": "string"}}}}},
            "tlsConfig": {"type": "object", "properties": {"insecureSkipVerify": {"type": "boolean"}}},
            "interval": {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}}}}}}}}}}]
  }
}"#;

/// A minimal stand-in for the Prometheus Operator's ServiceMonitor CRD (same group, kind and
/// the fields the component uses), installed idempotently.
fn install_service_monitor_crd() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let (ok, _, err) = kubectl_stdin(
            &[
                "apply",
                "--server-side",
                "--field-manager=hap-e2e-deploy",
                "-f",
                "-",
            ],
            Some(SERVICE_MONITOR_CRD),
        );
        assert!(ok, "install the ServiceMonitor stand-in CRD: {err}");
        support::crd_wait::wait_established(
            kubectl,
            &["servicemonitors.monitoring.coreos.com"],
            std::time::Duration::from_secs(60),
        );
    });
}

/// A separate garden: the operator's cluster gets the overlay (no Gardener API needed there),
/// the garden gets the garden side, from kustomize and from Helm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_garden_packaging_passes_server_dry_run_in_both_clusters() {
    let client = client().await;
    let garden = garden_client().await;
    let place = Place {
        ns: unique("hapsys"),
        bindings_ns: project(&garden).await,
        suffix: unique("sep"),
    };
    let ops = relocate(
        &kustomize("deploy/kustomize/overlays/separate-garden"),
        &place,
    );
    let ns: Vec<Value> = ops
        .iter()
        .filter(|o| kind(o) == "Namespace")
        .cloned()
        .collect();
    let _cleanup = Cleanup(cleanup_for(&ns));
    apply(&ns, "namespace");
    dry_run(&ops, "kustomize separate-garden overlay");
    let side = relocate(&kustomize("deploy/kustomize/garden"), &place);
    dry_run_in(&garden_kubeconfig(), &side, "kustomize garden side");

    let hapsys = namespace(&client, "hapsys").await;
    let binding_ns = format!("bindingNamespace={}", place.bindings_ns);
    let chart = helm_template(
        &unique("hap"),
        &hapsys,
        &[
            "--set",
            &binding_ns,
            "--set",
            "garden.kubeconfigSecret=hap-operator-garden",
        ],
    );
    dry_run(&chart, "helm separate garden");
    let chart = helm_template(
        &unique("hap"),
        &hapsys,
        &["--set", &binding_ns, "--set", "garden.rbacOnly=true"],
    );
    dry_run_in(&garden_kubeconfig(), &chart, "helm garden side");
}

/// The ServiceMonitor's scrape authenticates with `authorization` (a token from a Secret), never
/// the deprecated `bearerTokenFile`; the Secret is the token of a ServiceAccount bound to the
/// metrics reader role and nothing else.
fn check_scrape_authorization(objs: &[Value], sm: &Value, reader: &str, what: &str) {
    let endpoint = &sm["spec"]["endpoints"][0];
    assert!(
        endpoint.get("bearerTokenFile").is_none(),
        "{what}: bearerTokenFile is deprecated: {endpoint}"
    );
    let auth = &endpoint["authorization"];
    assert_eq!(auth["type"], "Bearer", "{what}: {endpoint}");
    let secret_name = auth["credentials"]["name"]
        .as_str()
        .expect("credentials.name");
    let secret = find(objs, "Secret", secret_name);
    assert_eq!(
        secret["type"], "kubernetes.io/service-account-token",
        "{what}"
    );
    assert_eq!(
        auth["credentials"]["key"], "token",
        "{what}: the token controller fills `token`"
    );
    let sa = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
        .as_str()
        .expect("the token's ServiceAccount");
    find(objs, "ServiceAccount", sa);
    let bindings: Vec<&Value> = objs
        .iter()
        .filter(|o| {
            matches!(kind(o), "ClusterRoleBinding" | "RoleBinding")
                && o["subjects"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s["name"] == sa))
        })
        .collect();
    assert_eq!(bindings.len(), 1, "{what}: the scraper has one binding");
    assert_eq!(bindings[0]["roleRef"]["name"], reader, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitoring_overlay_passes_server_dry_run() {
    let client = client().await;
    install_service_monitor_crd();
    let base = kustomize("deploy/kustomize/base");
    let overlay = kustomize("deploy/kustomize/overlays/monitoring");
    assert_eq!(
        overlay.len(),
        base.len() + 4,
        "the overlay is the base plus the ServiceMonitor and the scraper's ServiceAccount, token Secret and ClusterRoleBinding"
    );
    let sm = find(&overlay, "ServiceMonitor", "hap-operator");
    let svc = find(&base, "Service", "hap-operator-metrics");
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the metrics Service"
        );
    }
    let endpoint = &sm["spec"]["endpoints"][0];
    assert!(
        svc["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == endpoint["port"]),
        "the ServiceMonitor scrapes a port of the Service: {endpoint}"
    );
    assert_eq!(
        endpoint["scheme"], "https",
        "the metrics are served over TLS"
    );
    check_scrape_authorization(&overlay, sm, "hap-operator-metrics-reader", "kustomize");
    let place = Place {
        ns: namespace(&client, "hapsys").await,
        bindings_ns: project(&client).await,
        suffix: unique("mon"),
    };
    let objs = relocate(&overlay, &place);
    dry_run(&objs, "kustomize monitoring overlay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_chart_with_default_values_passes_server_dry_run() {
    let client = client().await;
    let chart = repo_root().join("deploy/helm/hap-operator");
    let (ok, out, err) = run(Command::new(helm_path())
        .args(["lint", "--strict", chart.to_str().unwrap()])
        .args([
            "-f",
            chart.join("examples/keb-values.yaml").to_str().unwrap(),
        ]));
    assert!(ok, "helm lint --strict: {out}\n{err}");
    let ns = namespace(&client, "hapsys").await;
    let bindings_ns = project(&client).await;
    let release = unique("hap");
    let objs = helm_template(
        &release,
        &ns,
        &[
            "--include-crds",
            "--set",
            &format!("bindingNamespace={bindings_ns}"),
        ],
    );
    assert!(
        !objs.iter().any(|o| kind(o) == "HapConfig"),
        "no rules in the default values: no HapConfig is rendered"
    );
    assert!(!objs.iter().any(|o| kind(o) == "ServiceMonitor"));
    assert!(
        objs.iter().any(
            |o| kind(o) == "CustomResourceDefinition" && name(o) == "hapconfigs.accountpool.io"
        )
    );
    dry_run(&objs, "helm default values");

    // With the ServiceMonitor and the narrow (claim-namespace) RBAC.
    install_service_monitor_crd();
    let claims_ns = namespace(&client, "claims").await;
    let objs = helm_template(
        &release,
        &ns,
        &[
            "--set",
            &format!("bindingNamespace={bindings_ns}"),
            "--set",
            &format!("claimNamespace={claims_ns}"),
            "--set",
            "serviceMonitor.enabled=true",
        ],
    );
    let sm = objs
        .iter()
        .find(|o| kind(o) == "ServiceMonitor")
        .expect("ServiceMonitor");
    check_scrape_authorization(
        &objs,
        sm,
        &format!("{release}-hap-operator-metrics-reader"),
        "helm",
    );
    dry_run(&objs, "helm claimNamespace + serviceMonitor");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_chart_with_keb_values_renders_a_keb_hapconfig() {
    let client = client().await;
    let ns = namespace(&client, "hapsys").await;
    let bindings_ns = project(&client).await;
    let config = unique("hapkeb");
    let values = repo_root().join("deploy/helm/hap-operator/examples/keb-values.yaml");
    let objs = helm_template(
        &unique("hap"),
        &ns,
        &[
            "-f",
            values.to_str().unwrap(),
            "--set",
            &format!("bindingNamespace={bindings_ns}"),
            "--set",
            &format!("config.name={config}"),
        ],
    );
    let cfg = find(&objs, "HapConfig", &config);
    let keb: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&values).unwrap()).expect("values");
    let spec = &cfg["spec"];
    assert_eq!(spec["ruleSyntax"], "KEB");
    assert_eq!(spec["rules"], keb["hap"]["rule"], "hap.rule verbatim");
    assert_eq!(spec["bindingNamespace"], json!(bindings_ns));
    assert_eq!(
        spec["multiHyperscalerAccount"],
        json!({
            "allowedGlobalAccounts": keb["hap"]["multiHyperscalerAccount"]["allowedGlobalAccounts"],
            // gcp: 0 ("use default" upstream) left out; sapconvergedcloud is openstack.
            "limits": {"default": 999999, "aws": 180, "azure": 999999, "openstack": 50},
        })
    );
    // The operator's own validation accepts it, and the API server (schema, CEL) too.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hapconfig.json");
    std::fs::write(&file, serde_json::to_string(cfg).unwrap()).unwrap();
    let (ok, out, err) = run(Command::new(env!("CARGO_BIN_EXE_hap")).args([
        "validate",
        "-f",
        file.to_str().unwrap(),
        "-o",
        "json",
    ]));
    assert!(ok, "hap validate of the rendered HapConfig: {out}\n{err}");
    dry_run(&objs, "helm KEB values");

    // Native values render the same way, in Seed syntax.
    let objs = helm_template(
        &unique("hap"),
        &ns,
        &[
            "--set",
            &format!("bindingNamespace={bindings_ns}"),
            "--set",
            &format!("config.name={config}"),
            "--set-json",
            r#"config.rules=["aws","aws(PR=cf-eu11, euAccess)"]"#,
            "--set-json",
            r#"config.spec={"release":{"mode":"Retain"}}"#,
        ],
    );
    let spec = &find(&objs, "HapConfig", &config)["spec"];
    assert_eq!(spec["ruleSyntax"], "Seed");
    assert_eq!(spec["release"]["mode"], "Retain");
    dry_run(&objs, "helm native values");

    // Both rule sources at once is a mistake the chart names.
    let chart = repo_root().join("deploy/helm/hap-operator");
    let (ok, _, err) = run(Command::new(helm_path()).args([
        "template",
        "x",
        chart.to_str().unwrap(),
        "-f",
        values.to_str().unwrap(),
        "--set-json",
        r#"config.rules=["aws"]"#,
    ]));
    assert!(!ok && err.contains("either in hap.rule"), "{err}");
    // values.schema.json: `hap.rule` must be a list, as upstream.
    let (ok, _, err) = run(Command::new(helm_path()).args([
        "template",
        "x",
        chart.to_str().unwrap(),
        "--set",
        "hap.rule=aws",
    ]));
    assert!(!ok && err.contains("/hap/rule"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// What the ServiceAccount may not do

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_can_do_nothing_beyond_the_shipped_rules() {
    let client = client().await;
    let place = Place {
        ns: unique("hapsys"),
        bindings_ns: project(&client).await,
        suffix: unique("cani"),
    };
    let other_ns = namespace(&client, "other").await;
    let objs: Vec<Value> = relocate(&kustomize("deploy/kustomize/base"), &place)
        .into_iter()
        .filter(|o| kind(o) == "Namespace" || is_rbac_or_sa(o))
        .collect();
    let _cleanup = Cleanup(cleanup_for(&objs));
    apply(&objs, "kustomize RBAC");
    let who = format!("system:serviceaccount:{}:hap-operator", place.ns);
    let (op, bns) = (place.ns.as_str(), place.bindings_ns.as_str());
    let can = |args: &[&str]| -> bool {
        let mut full = vec!["auth", "can-i"];
        full.extend_from_slice(args);
        full.push("--as");
        full.push(&who);
        let (ok, out, err) = kubectl(&full);
        assert!(
            out.trim() == "yes" || out.trim() == "no",
            "can-i {args:?}: {out} {err}"
        );
        ok
    };
    let allowed: &[&[&str]] = &[
        &["list", "hapconfigs.accountpool.io"],
        &["watch", "hapconfigs.accountpool.io"],
        &["patch", "hapconfigs.accountpool.io", "--subresource=status"],
        &["list", "accountclaims.accountpool.io", "--all-namespaces"],
        &["patch", "accountclaims.accountpool.io", "-n", &other_ns],
        &[
            "patch",
            "accountclaims.accountpool.io",
            "--subresource=status",
            "-n",
            &other_ns,
        ],
        &[
            "watch",
            "credentialsbindings.security.gardener.cloud",
            "-n",
            bns,
        ],
        &[
            "patch",
            "credentialsbindings.security.gardener.cloud",
            "-n",
            bns,
        ],
        &["patch", "secretbindings.core.gardener.cloud", "-n", bns],
        &["list", "shoots.core.gardener.cloud", "-n", bns],
        // What gardener-apiserver's admission asks before it admits a binding update.
        &["get", "secrets", "-n", bns],
        &[
            "get",
            "workloadidentities.security.gardener.cloud",
            "-n",
            bns,
        ],
        &["get", "internalsecrets.core.gardener.cloud", "-n", bns],
        &["get", "quotas.core.gardener.cloud", "-n", bns],
        &["create", "leases.coordination.k8s.io", "-n", op],
        &["patch", "leases.coordination.k8s.io/hap-operator", "-n", op],
        &["get", "leases.coordination.k8s.io/hap-operator", "-n", op],
        &["create", "configmaps", "-n", op],
        // spec.tenants: a requester namespace's labels, one GET.
        &["get", "namespaces"],
        &["patch", "configmaps/hap-last-known-good.default", "-n", op],
        &["get", "configmaps/hap-last-known-good.default", "-n", op],
        &["create", "events.events.k8s.io", "-n", "default"],
        &["create", "events.events.k8s.io", "-n", &other_ns],
    ];
    let denied: &[&[&str]] = &[
        // Events are created once per outcome change, never updated.
        &["patch", "events.events.k8s.io", "-n", &other_ns],
        // Secrets: only the `get` above, nowhere else, no list or watch.
        &["get", "secrets", "-n", &other_ns],
        &["list", "secrets", "-n", bns],
        &["watch", "secrets", "-n", bns],
        &["get", "secrets", "-n", op],
        &["list", "secrets", "--all-namespaces"],
        // The same for the other kinds bindings reference.
        &[
            "get",
            "workloadidentities.security.gardener.cloud",
            "-n",
            &other_ns,
        ],
        &[
            "list",
            "workloadidentities.security.gardener.cloud",
            "-n",
            bns,
        ],
        &[
            "watch",
            "workloadidentities.security.gardener.cloud",
            "-n",
            bns,
        ],
        &[
            "list",
            "workloadidentities.security.gardener.cloud",
            "--all-namespaces",
        ],
        &[
            "get",
            "internalsecrets.core.gardener.cloud",
            "-n",
            &other_ns,
        ],
        &["list", "internalsecrets.core.gardener.cloud", "-n", bns],
        &["watch", "internalsecrets.core.gardener.cloud", "-n", bns],
        &[
            "list",
            "internalsecrets.core.gardener.cloud",
            "--all-namespaces",
        ],
        &["get", "quotas.core.gardener.cloud", "-n", &other_ns],
        &["list", "quotas.core.gardener.cloud", "-n", bns],
        &["watch", "quotas.core.gardener.cloud", "-n", bns],
        &["list", "quotas.core.gardener.cloud", "--all-namespaces"],
        // Bindings only in the binding namespace, only patch among writes.
        &[
            "patch",
            "credentialsbindings.security.gardener.cloud",
            "-n",
            &other_ns,
        ],
        &[
            "patch",
            "credentialsbindings.security.gardener.cloud",
            "-n",
            op,
        ],
        &[
            "list",
            "credentialsbindings.security.gardener.cloud",
            "--all-namespaces",
        ],
        &[
            "update",
            "credentialsbindings.security.gardener.cloud",
            "-n",
            bns,
        ],
        &[
            "create",
            "credentialsbindings.security.gardener.cloud",
            "-n",
            bns,
        ],
        &[
            "delete",
            "credentialsbindings.security.gardener.cloud",
            "-n",
            bns,
        ],
        &[
            "patch",
            "secretbindings.core.gardener.cloud",
            "-n",
            &other_ns,
        ],
        &["patch", "shoots.core.gardener.cloud", "-n", bns],
        &["delete", "shoots.core.gardener.cloud", "-n", bns],
        &["list", "shoots.core.gardener.cloud", "-n", &other_ns],
        // Workloads and config.
        &["get", "deployments.apps", "-n", op],
        &["patch", "deployments.apps", "-n", op],
        &["create", "deployments.apps", "-n", "default"],
        // ConfigMaps: only the last-known-good record (above), by its name.
        &["get", "configmaps", "-n", op],
        &["get", "pods", "-n", op],
        &["create", "pods", "-n", op],
        &["create", "pods", "--subresource=exec", "-n", op],
        // Own API: no create/delete/update, no spec writes.
        &["create", "hapconfigs.accountpool.io"],
        &["delete", "hapconfigs.accountpool.io"],
        &["update", "hapconfigs.accountpool.io"],
        &["patch", "hapconfigs.accountpool.io"],
        &[
            "update",
            "hapconfigs.accountpool.io",
            "--subresource=status",
        ],
        &["create", "accountclaims.accountpool.io", "-n", &other_ns],
        &["delete", "accountclaims.accountpool.io", "-n", &other_ns],
        &["update", "accountclaims.accountpool.io", "-n", &other_ns],
        // Leases: only its own, only in its namespace.
        &["patch", "leases.coordination.k8s.io/someone-else", "-n", op],
        &["get", "leases.coordination.k8s.io/someone-else", "-n", op],
        &["list", "leases.coordination.k8s.io", "-n", op],
        // The last-known-good record: only its own, never read or written elsewhere.
        &["patch", "configmaps/someone-else", "-n", op],
        &["get", "configmaps/someone-else", "-n", op],
        &["list", "configmaps", "-n", op],
        &["create", "configmaps", "-n", "default"],
        &[
            "delete",
            "leases.coordination.k8s.io/hap-operator",
            "-n",
            op,
        ],
        &["create", "leases.coordination.k8s.io", "-n", "default"],
        &["create", "leases.coordination.k8s.io", "-n", "kube-system"],
        // Events: write-only, events.k8s.io only.
        &["create", "events", "-n", "default"],
        &["list", "events.events.k8s.io", "-n", "default"],
        &["delete", "events.events.k8s.io", "-n", "default"],
        // No escalation.
        &["create", "roles.rbac.authorization.k8s.io", "-n", op],
        &[
            "create",
            "rolebindings.rbac.authorization.k8s.io",
            "-n",
            bns,
        ],
        &["create", "clusterrolebindings.rbac.authorization.k8s.io"],
        &["bind", "clusterroles.rbac.authorization.k8s.io"],
        &["escalate", "clusterroles.rbac.authorization.k8s.io"],
        &["impersonate", "users"],
        &["impersonate", "serviceaccounts", "-n", op],
        &["create", "serviceaccounts", "--subresource=token", "-n", op],
        &["create", "namespaces"],
        &["list", "namespaces"],
        &["watch", "namespaces"],
        &["patch", "namespaces"],
        &["create", "customresourcedefinitions.apiextensions.k8s.io"],
        &["list", "nodes"],
        &["*", "*"],
    ];
    let wrong_yes: Vec<String> = denied
        .iter()
        .filter(|a| can(a))
        .map(|a| a.join(" "))
        .collect();
    let wrong_no: Vec<String> = allowed
        .iter()
        .filter(|a| !can(a))
        .map(|a| a.join(" "))
        .collect();
    assert!(
        wrong_yes.is_empty() && wrong_no.is_empty(),
        "{who}\nallowed but must not be: {wrong_yes:#?}\ndenied but needed: {wrong_no:#?}"
    );
}

/// `kubectl auth can-i --as` against one cluster: the lists of what must be allowed and what
/// denied; returns the mismatches.
fn can_i(
    kubeconfig: &std::path::Path,
    who: &str,
    allowed: &[&[&str]],
    denied: &[&[&str]],
) -> (Vec<String>, Vec<String>) {
    let path = kubeconfig.to_str().expect("utf-8 path");
    let can = |args: &[&str]| -> bool {
        let mut full = vec!["--kubeconfig", path, "auth", "can-i"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--as", who]);
        let (ok, out, err) = kubectl(&full);
        assert!(
            out.trim() == "yes" || out.trim() == "no",
            "can-i {args:?}: {out} {err}"
        );
        ok
    };
    (
        denied
            .iter()
            .filter(|a| can(a))
            .map(|a| a.join(" "))
            .collect(),
        allowed
            .iter()
            .filter(|a| !can(a))
            .map(|a| a.join(" "))
            .collect(),
    )
}

/// A separate garden: the operator's ServiceAccount may do nothing with Gardener objects in its
/// own cluster, and its garden identity exactly the garden-side rules, in the project namespace
/// only, and nothing of the operator's own API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_garden_identities_can_do_nothing_beyond_their_side() {
    let client = client().await;
    let garden = garden_client().await;
    let place = Place {
        ns: unique("hapsys"),
        bindings_ns: project(&garden).await,
        suffix: unique("gcani"),
    };
    let other_project = project(&garden).await;
    let ops: Vec<Value> = relocate(
        &kustomize("deploy/kustomize/overlays/separate-garden"),
        &place,
    )
    .into_iter()
    .filter(|o| kind(o) == "Namespace" || is_rbac_or_sa(o))
    .collect();
    let _cleanup = Cleanup(cleanup_for(&ops));
    apply(&ops, "separate-garden overlay RBAC");
    apply_to(
        &garden_kubeconfig(),
        &relocate(&kustomize("deploy/kustomize/garden"), &place),
        "garden side",
    );
    let bns = place.bindings_ns.as_str();
    // In the operator's cluster (which serves the Gardener API in the test environment too).
    let ops_user = format!("system:serviceaccount:{}:hap-operator", place.ns);
    let ops_ns = namespace(&client, "garden-side").await;
    let (yes, no) = can_i(
        &kubeconfig(),
        &ops_user,
        &[
            &["list", "hapconfigs.accountpool.io"],
            &["patch", "accountclaims.accountpool.io", "-n", &ops_ns],
        ],
        &[
            &[
                "list",
                "credentialsbindings.security.gardener.cloud",
                "-n",
                bns,
            ],
            &[
                "patch",
                "credentialsbindings.security.gardener.cloud",
                "-n",
                bns,
            ],
            &["list", "shoots.core.gardener.cloud", "-n", bns],
            &["get", "secrets", "-n", bns],
            &[
                "get",
                "workloadidentities.security.gardener.cloud",
                "-n",
                bns,
            ],
            &["get", "internalsecrets.core.gardener.cloud", "-n", bns],
            &["get", "quotas.core.gardener.cloud", "-n", bns],
        ],
    );
    assert!(
        yes.is_empty() && no.is_empty(),
        "{ops_user}\nallowed but must not be: {yes:#?}\ndenied but needed: {no:#?}"
    );
    let garden_user = format!("system:serviceaccount:{bns}:hap-operator");
    let (yes, no) = can_i(
        &garden_kubeconfig(),
        &garden_user,
        &[
            &[
                "watch",
                "credentialsbindings.security.gardener.cloud",
                "-n",
                bns,
            ],
            &[
                "patch",
                "credentialsbindings.security.gardener.cloud",
                "-n",
                bns,
            ],
            &["patch", "secretbindings.core.gardener.cloud", "-n", bns],
            &["list", "shoots.core.gardener.cloud", "-n", bns],
            &["get", "secrets", "-n", bns],
            &[
                "get",
                "workloadidentities.security.gardener.cloud",
                "-n",
                bns,
            ],
            &["get", "internalsecrets.core.gardener.cloud", "-n", bns],
            &["get", "quotas.core.gardener.cloud", "-n", bns],
        ],
        &[
            &["list", "secrets", "-n", bns],
            &["watch", "secrets", "-n", bns],
            &["get", "secrets", "-n", &other_project],
            &[
                "get",
                "workloadidentities.security.gardener.cloud",
                "-n",
                &other_project,
            ],
            &[
                "list",
                "workloadidentities.security.gardener.cloud",
                "-n",
                bns,
            ],
            &[
                "watch",
                "workloadidentities.security.gardener.cloud",
                "-n",
                bns,
            ],
            &[
                "list",
                "workloadidentities.security.gardener.cloud",
                "--all-namespaces",
            ],
            &[
                "get",
                "internalsecrets.core.gardener.cloud",
                "-n",
                &other_project,
            ],
            &["list", "internalsecrets.core.gardener.cloud", "-n", bns],
            &["watch", "internalsecrets.core.gardener.cloud", "-n", bns],
            &[
                "list",
                "internalsecrets.core.gardener.cloud",
                "--all-namespaces",
            ],
            &["get", "quotas.core.gardener.cloud", "-n", &other_project],
            &["list", "quotas.core.gardener.cloud", "-n", bns],
            &["watch", "quotas.core.gardener.cloud", "-n", bns],
            &["list", "quotas.core.gardener.cloud", "--all-namespaces"],
            &[
                "patch",
                "credentialsbindings.security.gardener.cloud",
                "-n",
                &other_project,
            ],
            &[
                "list",
                "credentialsbindings.security.gardener.cloud",
                "--all-namespaces",
            ],
            &[
                "create",
                "credentialsbindings.security.gardener.cloud",
                "-n",
                bns,
            ],
            &[
                "delete",
                "credentialsbindings.security.gardener.cloud",
                "-n",
                bns,
            ],
            &["patch", "shoots.core.gardener.cloud", "-n", bns],
            &["create", "shoots.core.gardener.cloud", "-n", bns],
            &["get", "projects.core.gardener.cloud"],
            &["list", "hapconfigs.accountpool.io"],
            &["create", "leases.coordination.k8s.io", "-n", bns],
            &["create", "events.events.k8s.io", "-n", bns],
            &[
                "create",
                "serviceaccounts",
                "--subresource=token",
                "-n",
                bns,
            ],
            &[
                "create",
                "rolebindings.rbac.authorization.k8s.io",
                "-n",
                bns,
            ],
            &["*", "*"],
        ],
    );
    assert!(
        yes.is_empty() && no.is_empty(),
        "{garden_user}\nallowed but must not be: {yes:#?}\ndenied but needed: {no:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Docs that must not drift: the RBAC table in docs/install.md, docs/configuration.md

const RBAC_BEGIN: &str = "<!-- rbac-table:begin (checked by tests/it/e2e_deploy.rs) -->";
const RBAC_END: &str = "<!-- rbac-table:end -->";
const NARROW_BEGIN: &str = "<!-- rbac-narrow-table:begin (checked by tests/it/e2e_deploy.rs) -->";
const NARROW_END: &str = "<!-- rbac-narrow-table:end -->";

fn between<'a>(text: &'a str, begin: &str, end: &str) -> &'a str {
    let start = text
        .find(begin)
        .unwrap_or_else(|| panic!("marker {begin} missing"))
        + begin.len();
    let stop = text[start..]
        .find(end)
        .unwrap_or_else(|| panic!("marker {end} missing"))
        + start;
    &text[start..stop]
}

/// One row per rule: object, API group, resources, names, verbs (the "why" column is prose).
fn rule_rows(objs: &[Value], rename: &dyn Fn(&str) -> String) -> BTreeSet<String> {
    let list = |v: &Value| -> String {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    let mut rows = BTreeSet::new();
    for o in objs
        .iter()
        .filter(|o| matches!(kind(o), "ClusterRole" | "Role"))
    {
        let object = match o["metadata"]["namespace"].as_str() {
            Some(ns) => format!("Role {} in {}", name(o), rename(ns)),
            None => format!("ClusterRole {}", name(o)),
        };
        for r in o["rules"].as_array().unwrap() {
            if r.get("nonResourceURLs").is_some() {
                rows.insert(format!(
                    "{object} | non-resource URL | {} | any | {}",
                    list(&r["nonResourceURLs"]),
                    list(&r["verbs"])
                ));
                continue;
            }
            let group = match list(&r["apiGroups"]).as_str() {
                "" => "core".to_string(),
                g => g.to_string(),
            };
            let names = match list(&r["resourceNames"]).as_str() {
                "" => "any".to_string(),
                n => n.to_string(),
            };
            rows.insert(format!(
                "{object} | {group} | {} | {names} | {}",
                list(&r["resources"]),
                list(&r["verbs"])
            ));
        }
    }
    rows
}

/// The first five cells of each table row, backticks removed.
fn doc_rows(section: &str) -> BTreeSet<String> {
    section
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('|') && !l.starts_with("|--") && !l.starts_with("| Object"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .take(5)
                .map(|c| c.trim().replace('`', ""))
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .collect()
}

#[test]
fn install_doc_rbac_tables_are_the_shipped_rules() {
    let doc = std::fs::read_to_string(repo_root().join("docs/install.md")).unwrap();
    let same = |ns: &str| ns.to_string();
    let shipped = rule_rows(&kustomize("deploy/kustomize/base"), &same);
    let documented = doc_rows(between(&doc, RBAC_BEGIN, RBAC_END));
    assert_eq!(
        documented, shipped,
        "docs/install.md RBAC table vs deploy/kustomize/base/rbac.yaml"
    );
    // A separate garden splits exactly these rules between the two clusters.
    let ops = rule_rows(
        &kustomize("deploy/kustomize/overlays/separate-garden"),
        &same,
    );
    let garden = rule_rows(&kustomize("deploy/kustomize/garden"), &same);
    assert!(ops.is_disjoint(&garden), "{ops:#?}\n{garden:#?}");
    assert_eq!(
        ops.union(&garden).cloned().collect::<BTreeSet<_>>(),
        shipped,
        "the operator's cluster and the garden side together are the one-cluster rules"
    );
    assert!(
        garden
            .iter()
            .all(|r| r.starts_with("Role hap-operator-bindings in garden-kyma"))
    );
    let narrow = helm_template(
        "hap-operator",
        "hap-system",
        &["--set", "claimNamespace=claims-ns-placeholder"],
    );
    let placeholder = |ns: &str| {
        if ns == "claims-ns-placeholder" {
            "<claimNamespace>".to_string()
        } else {
            ns.to_string()
        }
    };
    let shipped: BTreeSet<String> = rule_rows(&narrow, &placeholder);
    let documented = doc_rows(between(&doc, NARROW_BEGIN, NARROW_END));
    assert_eq!(
        documented, shipped,
        "docs/install.md narrow-mode RBAC table vs the Helm chart with claimNamespace"
    );
}

/// The overlay shown in docs/install.md ("Your own overlay") renders as it says: the bindings
/// Role in the other project namespace, the image from the other registry, nothing else moved.
#[test]
fn documented_overlay_renders_as_described() {
    let doc = std::fs::read_to_string(repo_root().join("docs/install.md")).unwrap();
    let start = doc
        .find("# my-overlay/kustomization.yaml\n")
        .expect("overlay example in docs/install.md");
    let body = &doc[start..];
    let body = &body[..body.find("```").expect("end of the code block")];
    // kustomize wants a relative path: from the temporary directory up to / and down again.
    let dir = tempfile::tempdir().unwrap();
    let up = "../".repeat(dir.path().components().count() - 1);
    let base = repo_root().join("deploy/kustomize/base");
    let base = format!("{up}{}", base.to_str().unwrap().trim_start_matches('/'));
    let body = body.replace("../deploy/kustomize/base", &base);
    std::fs::write(dir.path().join("kustomization.yaml"), body).unwrap();
    let (ok, out, err) = kubectl(&["kustomize", dir.path().to_str().unwrap()]);
    assert!(ok, "kubectl kustomize of the documented overlay: {err}");
    let objs = parse_stream(&out);
    for k in ["Role", "RoleBinding"] {
        assert_eq!(
            find(&objs, k, "hap-operator-bindings")["metadata"]["namespace"],
            "garden-myproject"
        );
    }
    assert_eq!(
        find(&objs, "Role", "hap-operator-leader-election")["metadata"]["namespace"],
        "hap-system"
    );
    let image = &find(&objs, "Deployment", "hap-operator")["spec"]["template"]["spec"]["containers"]
        [0]["image"];
    assert_eq!(image, "registry.example.com/hap-operator:0.1.0");
    assert_eq!(objs.len(), kustomize("deploy/kustomize/base").len());
}

mod config_reference {
    //! Renders the field reference of docs/configuration.md from crds/accountpool.io.yaml.
    //! `HAP_BLESS_DOCS=1 cargo test --test it e2e_deploy::config_reference` rewrites it.

    use serde_json::Value;

    pub const BEGIN: &str = "<!-- generated from crds/accountpool.io.yaml by tests/it/e2e_deploy.rs; do not edit: HAP_BLESS_DOCS=1 cargo test --test it e2e_deploy::config_reference -->";
    pub const END: &str = "<!-- end of generated reference -->";

    fn cell(s: &str) -> String {
        s.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace('|', "\\|")
    }

    /// Inline code; `|` is escaped later by `cell` (GFM splits cells before code spans).
    fn code(v: &Value) -> String {
        let s = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        format!("`{}`", s.replace('`', "'"))
    }

    fn type_of(s: &Value) -> String {
        let t = s["type"].as_str().unwrap_or("any");
        match t {
            "array" => format!("[]{}", type_of(&s["items"])),
            "object" if s["additionalProperties"].is_object() => {
                format!("map[string]{}", type_of(&s["additionalProperties"]))
            }
            "integer" | "number" => match s["format"].as_str() {
                Some(f) => format!("{t} ({f})"),
                None => t.to_string(),
            },
            _ => t.to_string(),
        }
    }

    fn constraints(s: &Value) -> String {
        let mut c = Vec::new();
        if let Some(e) = s["enum"].as_array() {
            c.push(format!(
                "one of {}",
                e.iter().map(code).collect::<Vec<_>>().join(", ")
            ));
        }
        if !s["default"].is_null() {
            c.push(format!("default {}", code(&s["default"])));
        }
        for (k, label) in [
            ("minLength", "min length"),
            ("maxLength", "max length"),
            ("minItems", "min items"),
            ("maxItems", "max items"),
            ("minimum", "min"),
            ("maximum", "max"),
        ] {
            if let Some(n) = s[k].as_i64() {
                c.push(format!("{label} {n}"));
            }
        }
        if let Some(p) = s["pattern"].as_str() {
            c.push(format!("pattern {}", code(&Value::String(p.into()))));
        }
        if let Some(t) = s["x-kubernetes-list-type"].as_str() {
            let keys = s["x-kubernetes-list-map-keys"]
                .as_array()
                .map(|k| {
                    k.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            c.push(if keys.is_empty() {
                format!("list type {t}")
            } else {
                format!("list type {t} (keys: {keys})")
            });
        }
        for v in s["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(m) = v["message"].as_str() {
                c.push(format!("rule: {m}"));
            }
        }
        cell(&c.join("; "))
    }

    /// `v` without its validation rules (the status copy of the spec carries none).
    fn without_rules(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(k, _)| *k != "x-kubernetes-validations")
                    .map(|(k, v)| (k.clone(), without_rules(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(without_rules).collect()),
            other => other.clone(),
        }
    }

    /// One row per field, depth first. A sub-object with exactly the fields of `spec` (the
    /// HapConfig's `status.activeSpec`, which has the fields without their validation rules) is
    /// not expanded again.
    fn walk(path: &str, s: &Value, required: bool, spec: &Value, rows: &mut Vec<String>) {
        let copy_of_spec =
            path != "spec" && without_rules(&s["properties"]) == without_rules(&spec["properties"]);
        let mut description = s["description"].as_str().unwrap_or("").to_string();
        if copy_of_spec {
            description.push_str(" (The fields of `spec`.)");
        }
        rows.push(format!(
            "| `{path}` | {} | {} | {} | {} |",
            type_of(s),
            if required { "yes" } else { "" },
            constraints(s),
            cell(&description)
        ));
        if copy_of_spec {
            return;
        }
        let (inner, prefix) = if s["type"] == "array" {
            (&s["items"], format!("{path}[]"))
        } else if s["additionalProperties"].is_object() {
            (&s["additionalProperties"], format!("{path}.<key>"))
        } else {
            (s, path.to_string())
        };
        let req: Vec<&str> = inner["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(props) = inner["properties"].as_object() {
            for (k, v) in props {
                walk(
                    &format!("{prefix}.{k}"),
                    v,
                    req.contains(&k.as_str()),
                    spec,
                    rows,
                );
            }
        }
    }

    /// The generated section (without markers).
    pub fn render(crds_yaml: &str) -> String {
        let docs: Vec<Value> = serde_saphyr::from_multiple(crds_yaml).expect("CRDs");
        let mut out = String::new();
        for crd in docs
            .iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
        {
            let spec = &crd["spec"];
            let kind = spec["names"]["kind"].as_str().unwrap();
            for version in spec["versions"].as_array().unwrap() {
                let schema = &version["schema"]["openAPIV3Schema"];
                out.push_str(&format!(
                    "\n### {kind} (`{}/{}`, {})\n\n",
                    spec["group"].as_str().unwrap(),
                    version["name"].as_str().unwrap(),
                    if spec["scope"] == "Cluster" {
                        "cluster-scoped".to_string()
                    } else {
                        "namespaced".to_string()
                    }
                ));
                if let Some(short) = spec["names"]["shortNames"].as_array() {
                    out.push_str(&format!(
                        "Short names: {}. ",
                        short.iter().map(code).collect::<Vec<_>>().join(", ")
                    ));
                }
                out.push_str(&format!(
                    "Printer columns: {}.\n",
                    version["additionalPrinterColumns"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| c["name"].as_str().unwrap_or("").to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                let req: Vec<&str> = schema["required"]
                    .as_array()
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                for part in ["spec", "status"] {
                    let s = &schema["properties"][part];
                    if s.is_null() {
                        continue;
                    }
                    out.push_str(&format!("\n#### {kind} `{part}`\n\n"));
                    out.push_str("| Field | Type | Required | Constraints | Description |\n");
                    out.push_str("|---|---|---|---|---|\n");
                    let mut rows = Vec::new();
                    walk(
                        part,
                        s,
                        req.contains(&part),
                        &schema["properties"]["spec"],
                        &mut rows,
                    );
                    for r in rows {
                        out.push_str(&r);
                        out.push('\n');
                    }
                }
            }
        }
        out
    }
}

#[test]
fn config_reference_matches_the_crd_schema() {
    let crds = std::fs::read_to_string(repo_root().join("crds/accountpool.io.yaml")).unwrap();
    let generated = config_reference::render(&crds);
    let path = repo_root().join("docs/configuration.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let current = between(&doc, config_reference::BEGIN, config_reference::END);
    let wanted = format!("\n{}\n", generated.trim());
    if current != wanted {
        if std::env::var_os("HAP_BLESS_DOCS").is_some() {
            let head =
                &doc[..doc.find(config_reference::BEGIN).unwrap() + config_reference::BEGIN.len()];
            let tail = &doc[doc.find(config_reference::END).unwrap()..];
            std::fs::write(&path, format!("{head}{wanted}{tail}")).unwrap();
            return;
        }
        panic!(
            "docs/configuration.md drifted from crds/accountpool.io.yaml; regenerate with \
             `HAP_BLESS_DOCS=1 cargo test --test it e2e_deploy::config_reference`"
        );
    }
    // Every spec field of both kinds is in there.
    for field in [
        "spec.bindingNamespace",
        "spec.multiHyperscalerAccount.limits",
        "spec.plans.<key>.providerType",
        "spec.globalAccount",
        "status.conditions[].reason",
    ] {
        assert!(wanted.contains(&format!("`{field}`")), "{field}");
    }
}

/// The NetworkPolicy (issue 20): the chart's and the kustomize component's admit the webhook port
/// from outside the pod network only and the probe and metrics ports from the monitoring
/// namespace only, and both pass a server dry run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_policies_limit_the_webhook_and_metrics_ports() {
    let client = client().await;
    let ns = namespace(&client, "hapsys").await;
    let objs = helm_template(
        &unique("hap"),
        &ns,
        &[
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "sources.runtimes.enabled=true",
        ],
    );
    let chart = objs
        .iter()
        .find(|o| kind(o) == "NetworkPolicy")
        .expect("the chart renders a NetworkPolicy")
        .clone();
    let component = deploy::parse_stream(
        &std::fs::read_to_string(
            repo_root().join("deploy/kustomize/components/network-policy/networkpolicy.yaml"),
        )
        .unwrap(),
    )
    .remove(0);
    for (what, policy) in [("helm", &chart), ("kustomize", &component)] {
        let rules = policy["spec"]["ingress"].as_array().unwrap();
        let ports = |r: &Value| -> Vec<i64> {
            r["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["port"].as_i64().unwrap())
                .collect()
        };
        assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]), "{what}");
        assert_eq!(ports(&rules[0]), [9443], "{what}");
        assert_eq!(
            rules[0]["from"][0]["ipBlock"]["except"],
            json!(["100.96.0.0/11"]),
            "{what}: no pod calls the webhook"
        );
        assert_eq!(ports(&rules[1]), [8080, 8443], "{what}");
        assert_eq!(
            rules[1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "monitoring",
            "{what}"
        );
        assert_eq!(rules.len(), 2, "{what}: nothing else is admitted");
    }
    let mut component = component;
    component["metadata"]["namespace"] = json!(ns);
    dry_run(&[chart, component], "the NetworkPolicies");
}

// ---------------------------------------------------------------------------------------------
// API Priority and Fairness

/// The FlowSchema and PriorityLevelConfiguration of both packagings, applied for real (renamed
/// and pointed at a ServiceAccount of a unique namespace): kube-apiserver accepts them, finds
/// the level (`Dangling=False`), and classifies a request of that ServiceAccount to them, as
/// the `X-Kubernetes-PF-*` headers of its answer show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_requests_are_classified_to_its_own_flow_schema() {
    let _ = client().await;
    let packagings = [
        (kustomize("deploy/kustomize/base"), "kustomize"),
        (helm_template("hap-operator", "hap-system", &[]), "helm"),
    ];
    for (objs, what) in packagings {
        let suffix = unique("apf");
        let sa_ns = unique("hapsys");
        let flow: Vec<Value> = objs
            .iter()
            .filter(|o| o["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1")
            .map(|o| {
                let mut o = o.clone();
                o["metadata"]["name"] = json!(format!("{}-{suffix}", name(&o)));
                if kind(&o) == "FlowSchema" {
                    let level = o["spec"]["priorityLevelConfiguration"]["name"].clone();
                    o["spec"]["priorityLevelConfiguration"]["name"] =
                        json!(format!("{}-{suffix}", level.as_str().unwrap_or_default()));
                    for rule in o["spec"]["rules"].as_array_mut().into_iter().flatten() {
                        for s in rule["subjects"].as_array_mut().into_iter().flatten() {
                            s["serviceAccount"]["namespace"] = json!(sa_ns);
                        }
                    }
                }
                o
            })
            .collect();
        let kinds: BTreeSet<&str> = flow.iter().map(kind).collect();
        assert_eq!(
            kinds,
            BTreeSet::from(["FlowSchema", "PriorityLevelConfiguration"]),
            "{what} ships both"
        );
        let _cleanup = Cleanup(
            flow.iter()
                .map(|o| {
                    vec![
                        "delete".into(),
                        kind(o).to_lowercase(),
                        name(o).into(),
                        "--ignore-not-found".into(),
                    ]
                })
                .collect(),
        );
        apply(&flow, what);
        let fs = find(&flow, "FlowSchema", &format!("hap-operator-{suffix}")).clone();
        let sa = fs["spec"]["rules"][0]["subjects"][0]["serviceAccount"]["name"]
            .as_str()
            .expect("a ServiceAccount subject")
            .to_string();
        let uid_of = |k: &str, n: &str| {
            let (ok, out, err) = kubectl(&["get", k, n, "-o", "jsonpath={.metadata.uid}"]);
            assert!(ok, "{what}: get {k} {n}: {err}");
            out
        };
        let fs_name = name(&fs).to_string();
        let level = fs["spec"]["priorityLevelConfiguration"]["name"]
            .as_str()
            .expect("level")
            .to_string();
        let (fs_uid, level_uid) = (
            uid_of("flowschema", &fs_name),
            uid_of("prioritylevelconfiguration", &level),
        );
        eventually(std::time::Duration::from_secs(30), "Dangling=False", || {
            let (ok, out, _) = kubectl(&[
                "get",
                "flowschema",
                &fs_name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Dangling\")].status}",
            ]);
            std::future::ready((ok && out == "False").then_some(()))
        })
        .await;
        // The request as the operator's ServiceAccount makes it (impersonated: APF classifies
        // the impersonated user). Discovery is open to every authenticated user.
        let user = format!("system:serviceaccount:{sa_ns}:{sa}");
        let group = format!("system:serviceaccounts:{sa_ns}");
        let headers = eventually(
            std::time::Duration::from_secs(30),
            "classified to the schema",
            || {
                let (ok, _, err) = kubectl(&[
                    "get",
                    "--raw",
                    "/apis",
                    "--as",
                    &user,
                    "--as-group",
                    "system:serviceaccounts",
                    "--as-group",
                    &group,
                    "--as-group",
                    "system:authenticated",
                    "-v=8",
                ]);
                let header = |h: &str| {
                    err.lines()
                        .filter_map(|l| l.split_once(&format!("{h}: ")))
                        .map(|(_, v)| v.trim().to_string())
                        .next()
                };
                let got = (
                    header("X-Kubernetes-Pf-Flowschema-Uid"),
                    header("X-Kubernetes-Pf-Prioritylevel-Uid"),
                );
                std::future::ready((ok && got.0.as_deref() == Some(fs_uid.as_str())).then_some(got))
            },
        )
        .await;
        assert_eq!(
            headers.1.as_deref(),
            Some(level_uid.as_str()),
            "{what}: the request runs in the operator's own priority level"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Chart values: image digest, extra volumes, per-kind failurePolicy, alert thresholds, schema

#[test]
fn image_digest_and_extra_volumes_reach_the_deployment() {
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    let objs = helm_template(
        "hap-operator",
        "hap-system",
        &[
            "--set",
            &format!("image.digest={digest}"),
            "--set",
            "image.tag=ignored",
            "--set-json",
            r#"extraVolumes=[{"name":"ca","configMap":{"name":"my-ca"}}]"#,
            "--set-json",
            r#"extraVolumeMounts=[{"name":"ca","mountPath":"/etc/my-ca","readOnly":true}]"#,
        ],
    );
    let pod = &find(&objs, "Deployment", "hap-operator")["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        json!(format!("ghcr.io/hap-operator/hap-operator@{digest}")),
        "a digest wins over the tag"
    );
    assert_eq!(
        pod["volumes"],
        json!([{"name": "ca", "configMap": {"name": "my-ca"}}])
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"],
        json!([{"name": "ca", "mountPath": "/etc/my-ca", "readOnly": true}])
    );
    // With the webhook on, the extra ones come after the chart's own.
    let objs = helm_template(
        "hap-operator",
        "hap-system",
        &[
            "--set",
            "sources.runtimes.enabled=true",
            "--set-json",
            r#"extraVolumes=[{"name":"ca","configMap":{"name":"my-ca"}}]"#,
            "--set-json",
            r#"extraVolumeMounts=[{"name":"ca","mountPath":"/etc/my-ca"}]"#,
        ],
    );
    let pod = &find(&objs, "Deployment", "hap-operator")["spec"]["template"]["spec"];
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names(&pod["volumes"]),
        ["webhook-client-ca", "webhook-tls", "ca"]
    );
    assert_eq!(
        names(&pod["containers"][0]["volumeMounts"]),
        ["webhook-client-ca", "webhook-tls", "ca"]
    );
    // A digest that is not one is refused by the schema.
    let chart = repo_root().join("deploy/helm/hap-operator");
    let (ok, _, err) = run(Command::new(helm_path()).args([
        "template",
        "x",
        chart.to_str().unwrap(),
        "--set",
        "image.digest=latest",
    ]));
    assert!(!ok && err.contains("/image/digest"), "{err}");
}

/// The webhook's connection cap is a value of the chart (issue 35: a burst of first claims holds
/// one connection per call in progress); the schema refuses a cap of 0 and a number too large
/// for the flag.
#[test]
fn the_webhooks_connection_cap_is_a_value() {
    let args = |cap: Option<&str>| -> Vec<String> {
        let mut a = vec![
            "--set".to_string(),
            "sources.runtimes.enabled=true".to_string(),
        ];
        if let Some(cap) = cap {
            a.extend(["--set".to_string(), format!("webhook.maxConnections={cap}")]);
        }
        a
    };
    let flag = |cap: Option<&str>| -> Vec<String> {
        let args = args(cap);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let objs = helm_template("hap-operator", "hap-system", &args);
        let container =
            &find(&objs, "Deployment", "hap-operator")["spec"]["template"]["spec"]["containers"][0];
        container["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a.as_str())
            .filter(|a| a.starts_with("--webhook-max-connections"))
            .map(String::from)
            .collect()
    };
    assert_eq!(flag(None), ["--webhook-max-connections=512"]);
    assert_eq!(flag(Some("2048")), ["--webhook-max-connections=2048"]);
    let chart = repo_root().join("deploy/helm/hap-operator");
    for bad in ["0", "4294967296"] {
        let (ok, _, err) = run(Command::new(helm_path())
            .args(["template", "x", chart.to_str().unwrap()])
            .args(args(Some(bad))));
        assert!(
            !ok && err.contains("/webhook/maxConnections"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn webhook_failure_policy_is_set_per_kind() {
    let objs = helm_template(
        "hap-operator",
        "hap-system",
        &[
            "--set",
            "sources.runtimes.enabled=true",
            "--set",
            "sources.clusters.enabled=true",
            "--set",
            "sources.shoots.enabled=true",
            "--set",
            "sources.clusters.failurePolicy=Ignore",
        ],
    );
    let policy = |n: &str| {
        find(&objs, "MutatingWebhookConfiguration", n)["webhooks"][0]["failurePolicy"].clone()
    };
    assert_eq!(policy("hap-operator-runtimes"), "Fail", "the default");
    assert_eq!(policy("hap-operator-clusters"), "Ignore");
    assert_eq!(policy("hap-operator-shoots"), "Fail");
    let objs = helm_template(
        "hap-operator",
        "hap-system",
        &[
            "--set",
            "sources.shoots.enabled=true",
            "--set",
            "sources.shoots.failurePolicy=Ignore",
        ],
    );
    assert_eq!(
        find(&objs, "MutatingWebhookConfiguration", "hap-operator-shoots")["webhooks"][0]["failurePolicy"],
        "Ignore"
    );
    let chart = repo_root().join("deploy/helm/hap-operator");
    let (ok, _, err) = run(Command::new(helm_path()).args([
        "template",
        "x",
        chart.to_str().unwrap(),
        "--set",
        "sources.runtimes.failurePolicy=Retry",
    ]));
    assert!(
        !ok && err.contains("/sources/runtimes/failurePolicy"),
        "{err}"
    );
}

/// The PrometheusRule the chart renders with default values is the kustomize component's (the
/// chart keeps the file byte-identical, tests/it/alerts.rs; this checks the template on top of it);
/// thresholds and the runbook base URL change exactly their alerts.
#[test]
fn prometheus_rule_defaults_equal_the_component_and_thresholds_apply() {
    let component: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(
            repo_root().join("deploy/kustomize/components/prometheus-rules/prometheusrule.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    let rendered = helm_template(
        "hap-operator",
        "hap-system",
        &["--set", "prometheusRule.enabled=true"],
    );
    let rule = find(&rendered, "PrometheusRule", "hap-operator");
    assert_eq!(rule["spec"], component["spec"]);
    let alerts = |spec: &Value| -> BTreeMap<String, Value> {
        spec["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .filter_map(|r| Some((r["alert"].as_str()?.to_string(), r)))
            .collect()
    };
    for (name, r) in alerts(&component["spec"]) {
        let anchor = name.to_lowercase();
        assert_eq!(
            r["annotations"]["runbook_url"],
            json!(format!(
                "https://github.com/hap-operator/hap-operator/blob/main/docs/operating.md#{anchor}"
            )),
            "{name}"
        );
    }
    let tuned = helm_template(
        "hap-operator",
        "hap-system",
        &[
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "prometheusRule.runbookBaseUrl=https://runbooks.example.org/hap/",
            "--set-json",
            "prometheusRule.thresholds.poolForecastDays=3.5",
            "--set",
            "prometheusRule.thresholds.dirtyHours=12",
            "--set",
            "prometheusRule.thresholds.webhookSlowSeconds=2",
        ],
    );
    let tuned = alerts(&find(&tuned, "PrometheusRule", "hap-operator")["spec"]);
    let shipped = alerts(&component["spec"]);
    let expr = |a: &BTreeMap<String, Value>, n: &str| a[n]["expr"].as_str().unwrap().to_string();
    assert!(expr(&tuned, "HapPoolForecastShort").contains("(hap_pool_days_until_empty) < 3.5"));
    assert!(expr(&tuned, "HapDirtyTooLong").contains("(hap_pool_oldest_dirty_seconds) > 43200"));
    assert!(expr(&tuned, "HapWebhookSlow").contains("[10m]))) > 2\n"));
    assert!(
        tuned["HapDirtyTooLong"]["annotations"]["summary"]
            .as_str()
            .unwrap()
            .ends_with("more than 12h")
    );
    for (name, r) in &tuned {
        assert_eq!(
            r["annotations"]["runbook_url"],
            json!(format!(
                "https://runbooks.example.org/hap#{}",
                name.to_lowercase()
            ))
        );
        if !["HapPoolForecastShort", "HapDirtyTooLong", "HapWebhookSlow"].contains(&name.as_str()) {
            assert_eq!(r["expr"], shipped[name]["expr"], "{name} is not tuned");
        }
    }
    // A rule file whose threshold text changed fails the render instead of dropping the value.
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, err) = run(Command::new("cp")
        .arg("-r")
        .arg(repo_root().join("deploy/helm/hap-operator"))
        .arg(dir.path()));
    assert!(ok, "{err}");
    let chart = dir.path().join("hap-operator");
    let file = chart.join("files/prometheusrule.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace(
            "(hap_pool_days_until_empty) < 7",
            "(hap_pool_days_until_empty) < 8",
        ),
    )
    .unwrap();
    let (ok, _, err) = run(Command::new(helm_path()).args([
        "template",
        "x",
        chart.to_str().unwrap(),
        "--set",
        "prometheusRule.enabled=true",
    ]));
    assert!(
        !ok && err.contains("the rule HapPoolForecastShort no longer contains"),
        "{err}"
    );
}

/// Every object subtree of values.schema.json is closed (`additionalProperties: false`) unless it
/// is a string map or a Kubernetes object passed through (which the API server validates).
#[test]
fn values_schema_closes_every_subtree() {
    fn walk(path: &str, s: &Value, open: &mut Vec<String>) {
        if s["type"] == "object"
            && s.get("properties").is_some()
            && s["additionalProperties"] != false
        {
            open.push(path.to_string());
        }
        if let Some(p) = s["properties"].as_object() {
            for (k, v) in p {
                walk(&format!("{path}.{k}"), v, open);
            }
        }
        if s["items"].is_object() {
            walk(&format!("{path}[]"), &s["items"], open);
        }
    }
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("deploy/helm/hap-operator/values.schema.json"))
            .unwrap(),
    )
    .unwrap();
    let mut open = vec![];
    walk("", &schema, &mut open);
    assert!(
        open.is_empty(),
        "subtrees that accept unknown keys: {open:?}"
    );
    // Every key of values.yaml is in the schema (a value the schema forgot would be a typo).
    let values: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo_root().join("deploy/helm/hap-operator/values.yaml")).unwrap(),
    )
    .unwrap();
    fn keys(path: &str, v: &Value, s: &Value, missing: &mut Vec<String>) {
        let (Some(obj), Some(props)) = (v.as_object(), s["properties"].as_object()) else {
            return;
        };
        for (k, child) in obj {
            match props.get(k) {
                Some(cs) => keys(&format!("{path}.{k}"), child, cs, missing),
                None => missing.push(format!("{path}.{k}")),
            }
        }
    }
    let mut missing = vec![];
    keys("", &values, &schema, &mut missing);
    assert!(
        missing.is_empty(),
        "values.yaml keys the schema lacks: {missing:?}"
    );
    // The KEB top-level keys the schema accepts are those of the KEB-shaped values file.
    let accepted: BTreeSet<String> = schema["properties"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v["$ref"] == "#/definitions/kebKey")
        .map(|(k, _)| k.clone())
        .collect();
    let keb: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo_root().join("tests/data/keb-values-shape.yaml")).unwrap(),
    )
    .unwrap();
    let chart_keys: BTreeSet<String> = values.as_object().unwrap().keys().cloned().collect();
    let keb_only: BTreeSet<String> = keb
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| !chart_keys.contains(*k))
        .cloned()
        .collect();
    assert_eq!(accepted, keb_only);
}

/// A typo anywhere in the chart's own values fails `helm template` naming the key; KEB's values
/// files (the example and one with every top-level key of upstream's) still render.
#[test]
fn a_typo_in_values_fails_naming_the_key() {
    let chart = repo_root().join("deploy/helm/hap-operator");
    for (typo, at, key) in [
        (
            "webhook.certmanager.enabled=true",
            "/webhook",
            "certmanager",
        ),
        (
            "sources.runtimes.enable=true",
            "/sources/runtimes",
            "enable",
        ),
        (
            "serviceMonitor.authorisation.key=x",
            "/serviceMonitor",
            "authorisation",
        ),
        (
            "prometheusRule.thresholds.dirtyHour=1",
            "/prometheusRule/thresholds",
            "dirtyHour",
        ),
        (
            "securityContext.readOnlyRootFileSystem=true",
            "/securityContext",
            "readOnlyRootFileSystem",
        ),
        (
            "garden.serviceAccount.nmae=x",
            "/garden/serviceAccount",
            "nmae",
        ),
        ("hap.rules[0]=aws", "/hap", "rules"),
        ("replicaCout=3", "", "replicaCout"),
    ] {
        let (ok, out, err) = run(Command::new(helm_path()).args([
            "template",
            "x",
            chart.to_str().unwrap(),
            "--set",
            typo,
        ]));
        assert!(!ok, "{typo} rendered: {out}");
        assert!(
            err.contains(&format!(
                "at '{at}': additional properties '{key}' not allowed"
            )),
            "{typo}: {err}"
        );
    }
    for file in [
        chart.join("examples/keb-values.yaml"),
        repo_root().join("tests/data/keb-values-shape.yaml"),
    ] {
        let objs = helm_template("x", "hap-system", &["-f", file.to_str().unwrap()]);
        assert!(
            objs.iter().any(|o| kind(o) == "HapConfig"),
            "{}: {:?}",
            file.display(),
            summary(&objs)
        );
    }
}

/// The built-in `view` and `edit` ClusterRoles gain the aggregated rules on the real API server
/// (kube-controller-manager's clusterrole-aggregation controller): a user bound to `view` in a
/// namespace may read AccountClaims there but not write them; one bound to `edit` may write them
/// but may not write HapConfigs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_and_edit_gain_hapconfigs_and_accountclaims() {
    let client = client().await;
    let place = Place {
        ns: unique("hapsys"),
        bindings_ns: project(&client).await,
        suffix: unique("agg"),
    };
    let roles: Vec<Value> = relocate(&kustomize("deploy/kustomize/base"), &place)
        .into_iter()
        .filter(is_aggregated)
        .collect();
    assert_eq!(roles.len(), 2, "{:?}", summary(&roles));
    let ns = namespace(&client, "tenant").await;
    let (viewer, editor) = (unique("viewer"), unique("editor"));
    let bindings: Vec<Value> = [(&viewer, "view"), (&editor, "edit")]
        .iter()
        .map(|(user, role)| {
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": user, "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
        })
        .collect();
    let mut cleanup = cleanup_for(&roles);
    cleanup.push(vec![
        "delete".into(),
        "namespace".into(),
        ns.clone(),
        "--wait=false".into(),
    ]);
    let _cleanup = Cleanup(cleanup);
    apply(&roles, "aggregated ClusterRoles");
    apply(&bindings, "RoleBindings to view and edit");
    let can = |user: &str, verb: &str, what: &str| -> bool {
        let (what, sub) = what.split_once('/').unwrap_or((what, ""));
        let mut args = vec!["auth", "can-i", verb, what, "-n", &ns, "--as", user];
        let sub = format!("--subresource={sub}");
        if sub != "--subresource=" {
            args.push(&sub);
        }
        let (_, out, err) = kubectl(&args);
        assert!(
            out.trim() == "yes" || out.trim() == "no",
            "can-i {verb} {what}: {out} {err}"
        );
        out.trim() == "yes"
    };
    eventually(
        std::time::Duration::from_secs(30),
        "view and edit aggregate the accountpool.io rules",
        || async {
            (can(&viewer, "list", "accountclaims.accountpool.io")
                && can(&editor, "create", "accountclaims.accountpool.io"))
            .then_some(())
        },
    )
    .await;
    assert!(can(&viewer, "watch", "accountclaims.accountpool.io"));
    assert!(!can(&viewer, "create", "accountclaims.accountpool.io"));
    assert!(!can(&viewer, "delete", "accountclaims.accountpool.io"));
    assert!(can(&editor, "delete", "accountclaims.accountpool.io"));
    assert!(!can(
        &editor,
        "patch",
        "accountclaims.accountpool.io/status"
    ));
    assert!(!can(&editor, "patch", "hapconfigs.accountpool.io"));
    assert!(!can(&editor, "create", "hapconfigs.accountpool.io"));
}
