//! The shipped webhook configurations and request-source permissions: the kustomize components
//! and the Helm chart render the same objects; every source can be left off; the rules are
//! least privilege; and they are enough — an operator acting as the chart's ServiceAccount
//! serves a Kyma Runtime and an openmcp Cluster through its webhook on the real control plane.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::PostParams;
use serde_json::{Value, json};
use support::platform::{
    Certs, RuntimeSpec, SCOPE_LABEL, WebhookRegistration, api, cluster_config_resource,
    cluster_resource, helm_template, install_platform_crds, kustomize, runtime, runtime_binding,
    runtime_resource, scoped_namespace, service_account_client, until,
};
use support::{Hap, Operator, kubectl, kubectl_stdin, namespace, unique};

const ALL_SOURCES: [&str; 8] = [
    "--set",
    "sources.runtimes.enabled=true",
    "--set",
    "sources.clusters.enabled=true",
    "--set",
    "sources.shoots.enabled=true",
    "--set",
    "webhook.certManager.enabled=true",
];

fn kind(o: &Value) -> &str {
    o["kind"].as_str().unwrap_or_default()
}

fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or_default()
}

/// What a source object grants or configures, without labels (which differ by packaging).
fn essence(objs: &[Value]) -> BTreeMap<String, Value> {
    objs.iter()
        .filter(|o| {
            let n = name(o);
            n.contains("source")
                || n.contains("webhook")
                || kind(o) == "MutatingWebhookConfiguration"
        })
        .map(|o| {
            let key = format!(
                "{} {}/{}",
                kind(o),
                o["metadata"]["namespace"].as_str().unwrap_or("-"),
                name(o)
            );
            let body = match kind(o) {
                "MutatingWebhookConfiguration" => json!({
                    "annotations": o["metadata"]["annotations"],
                    "webhooks": o["webhooks"],
                }),
                // Selectors differ by packaging (Helm adds the instance label), as for every Service.
                "Service" => o["spec"]["ports"].clone(),
                "Certificate" | "Issuer" => o["spec"].clone(),
                _ => {
                    json!({"rules": o["rules"], "roleRef": o["roleRef"], "subjects": o["subjects"]})
                }
            };
            (key, body)
        })
        .collect()
}

fn webhook_container(objs: &[Value]) -> Value {
    let d = objs
        .iter()
        .find(|o| kind(o) == "Deployment")
        .expect("deployment");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let env: Vec<&Value> = c["env"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter(|v| {
                    v["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("HAP_WEBHOOK"))
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "env": env,
        "port": c["ports"].as_array().and_then(|p| p.iter().find(|p| p["name"] == "webhook")),
        "mount": c["volumeMounts"],
        "volumes": d["spec"]["template"]["spec"]["volumes"],
    })
}

#[test]
fn helm_and_kustomize_ship_the_same_webhooks_and_source_rules() {
    let base = kustomize("deploy/kustomize/overlays/request-sources-cert-manager");
    let chart = helm_template("hap-operator", "hap-system", &ALL_SOURCES);
    let (k, h) = (essence(&base), essence(&chart));
    assert_eq!(k.keys().collect::<Vec<_>>(), h.keys().collect::<Vec<_>>());
    for (key, v) in &k {
        assert_eq!(v, &h[key], "{key} differs between kustomize and helm");
    }
    assert_eq!(webhook_container(&base), webhook_container(&chart));
    for o in base
        .iter()
        .filter(|o| kind(o) == "MutatingWebhookConfiguration")
    {
        let w = &o["webhooks"][0];
        assert_eq!(w["failurePolicy"], "Fail", "{}", name(o));
        assert_eq!(w["sideEffects"], "NoneOnDryRun", "{}", name(o));
        assert_eq!(
            w["clientConfig"]["service"]["port"],
            443,
            "TLS only: {}",
            name(o)
        );
    }
}

/// Checks the cert-manager objects form a CA → serving-certificate chain whose CA is what
/// cainjector injects: a serving certificate injected as caBundle while its key rotates breaks
/// every handshake between the renewal and the next injection (issue 20).
fn check_certificate_chain(objs: &[Value], what: &str) {
    let find = |k: &str, n: &str| {
        objs.iter()
            .find(|o| kind(o) == k && name(o) == n)
            .unwrap_or_else(|| panic!("{what}: no {k} {n}"))
    };
    let hooks: Vec<&Value> = objs
        .iter()
        .filter(|o| kind(o) == "MutatingWebhookConfiguration")
        .collect();
    assert!(!hooks.is_empty(), "{what}: no webhook configuration");
    for hook in hooks {
        let from = hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: {} has no inject-ca-from", name(hook)));
        let (_, ca_name) = from.split_once('/').expect("namespace/name");
        let ca = find("Certificate", ca_name);
        assert_eq!(ca["spec"]["isCA"], true, "{what}: {from} is not a CA");
        // Renewing the CA with the same key keeps the serving certificates it signed valid.
        assert_eq!(
            ca["spec"]["privateKey"]["rotationPolicy"], "Never",
            "{what}"
        );
        let root = find(
            "Issuer",
            ca["spec"]["issuerRef"]["name"].as_str().expect("issuer"),
        );
        assert!(
            root["spec"]["selfSigned"].is_object(),
            "{what}: CA not self-signed"
        );
        let signer = objs
            .iter()
            .find(|o| {
                kind(o) == "Issuer" && o["spec"]["ca"]["secretName"] == ca["spec"]["secretName"]
            })
            .unwrap_or_else(|| panic!("{what}: no CA Issuer for {ca_name}'s Secret"));
        let leaf = find("Certificate", "hap-operator-webhook");
        assert_eq!(
            leaf["spec"]["issuerRef"]["name"], signer["metadata"]["name"],
            "{what}"
        );
        assert_ne!(leaf["spec"]["isCA"], true, "{what}");
        assert_eq!(
            leaf["spec"]["secretName"], "hap-operator-webhook-tls",
            "{what}"
        );
    }
}

#[test]
fn ca_bundle_is_a_ca_that_outlives_serving_certificate_renewals() {
    check_certificate_chain(
        &kustomize("deploy/kustomize/overlays/request-sources-cert-manager"),
        "kustomize",
    );
    check_certificate_chain(
        &helm_template("hap-operator", "hap-system", &ALL_SOURCES),
        "helm",
    );
}

#[test]
fn every_source_can_be_left_off() {
    let none = helm_template("hap-operator", "hap-system", &[]);
    assert!(essence(&none).is_empty(), "{:?}", essence(&none).keys());
    assert_eq!(webhook_container(&none)["env"], json!([]));
    let only = helm_template(
        "hap-operator",
        "hap-system",
        &["--set", "sources.runtimes.enabled=true"],
    );
    let keys: Vec<String> = essence(&only).into_keys().collect();
    assert_eq!(
        keys,
        [
            "ClusterRole -/hap-operator-source-runtimes",
            "ClusterRoleBinding -/hap-operator-source-runtimes",
            "MutatingWebhookConfiguration -/hap-operator-runtimes",
            "Role hap-system/hap-operator-source-claims",
            "RoleBinding hap-system/hap-operator-source-claims",
            "Service hap-system/hap-operator-webhook",
        ]
    );
    // A separate garden: the Shoot webhook goes to an URL, or is left to the garden's admin.
    let url = helm_template(
        "hap-operator",
        "hap-system",
        &[
            "--set",
            "sources.shoots.enabled=true",
            "--set",
            "webhook.url=https://hap.example.com",
        ],
    );
    let shoots = url
        .iter()
        .find(|o| name(o) == "hap-operator-shoots")
        .expect("shoots webhook");
    assert_eq!(
        shoots["webhooks"][0]["clientConfig"]["url"],
        "https://hap.example.com/mutate/shoots"
    );
    let unregistered = helm_template(
        "hap-operator",
        "hap-system",
        &[
            "--set",
            "sources.shoots.enabled=true",
            "--set",
            "sources.shoots.register=false",
        ],
    );
    assert!(
        !unregistered
            .iter()
            .any(|o| kind(o) == "MutatingWebhookConfiguration")
    );
}

/// Found by review: the shipped request-sources overlay and the chart's sources switch served
/// forged reviews (no client CA, no NetworkPolicy) unless the installer added both. Now both come
/// with any request source, and serving callers without a certificate is an explicit opt-out.
#[test]
fn request_sources_bring_the_client_ca_and_the_network_policy_unless_opted_out() {
    let env_names = |objs: &[Value]| -> Vec<String> {
        webhook_container(objs)["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["name"].as_str().map(String::from))
            .collect()
    };
    let client_ca_map = |objs: &[Value]| -> Option<String> {
        webhook_container(objs)["volumes"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == "webhook-client-ca")
            .and_then(|v| v["configMap"]["name"].as_str().map(String::from))
    };
    let has_policy = |objs: &[Value]| objs.iter().any(|o| kind(o) == "NetworkPolicy");
    let secure = |objs: &[Value], what: &str| {
        let env = env_names(objs);
        assert!(
            env.iter().any(|e| e == "HAP_WEBHOOK_CLIENT_CA"),
            "{what}: {env:?}"
        );
        assert!(
            !env.iter().any(|e| e == "HAP_WEBHOOK_ALLOW_UNAUTHENTICATED"),
            "{what}: {env:?}"
        );
        assert_eq!(
            client_ca_map(objs).as_deref(),
            Some("hap-operator-webhook-client-ca"),
            "{what}"
        );
        assert!(has_policy(objs), "{what}: a NetworkPolicy");
    };
    for overlay in ["request-sources", "request-sources-cert-manager"] {
        secure(
            &kustomize(&format!("deploy/kustomize/overlays/{overlay}")),
            overlay,
        );
    }
    let runtimes = ["--set", "sources.runtimes.enabled=true"];
    secure(
        &helm_template("hap-operator", "hap-system", &runtimes),
        "helm",
    );
    secure(
        &helm_template("hap-operator", "hap-system", &ALL_SOURCES),
        "helm, every source",
    );

    // The explicit opt-outs: no CA, the operator told so (it warns at start).
    let open = helm_template(
        "hap-operator",
        "hap-system",
        &[
            runtimes[0],
            runtimes[1],
            "--set",
            "webhook.allowUnauthenticated=true",
        ],
    );
    assert!(env_names(&open).contains(&"HAP_WEBHOOK_ALLOW_UNAUTHENTICATED".to_string()));
    assert!(!env_names(&open).contains(&"HAP_WEBHOOK_CLIENT_CA".to_string()));
    assert_eq!(client_ca_map(&open), None);
    assert!(has_policy(&open), "the policy stays");
    let named = helm_template(
        "hap-operator",
        "hap-system",
        &[
            runtimes[0],
            runtimes[1],
            "--set",
            "webhook.clientCA.configMap=my-ca",
        ],
    );
    assert_eq!(client_ca_map(&named).as_deref(), Some("my-ca"));
    let without_policy = helm_template(
        "hap-operator",
        "hap-system",
        &[
            runtimes[0],
            runtimes[1],
            "--set",
            "networkPolicy.enabled=false",
        ],
    );
    assert!(!has_policy(&without_policy));
    let none = helm_template("hap-operator", "hap-system", &[]);
    assert!(
        !has_policy(&none),
        "no source, no webhook, no policy by default"
    );
    assert_eq!(client_ca_map(&none), None);
}

#[test]
fn source_rules_are_least_privilege() {
    for o in helm_template("hap", "hap-system", &ALL_SOURCES)
        .iter()
        .filter(|o| kind(o).ends_with("Role") && name(o).contains("source"))
    {
        for rule in o["rules"].as_array().expect("rules") {
            let resources: Vec<&str> = rule["resources"]
                .as_array()
                .expect("resources")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let verbs: Vec<&str> = rule["verbs"]
                .as_array()
                .expect("verbs")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            assert!(!rule.to_string().contains('*'), "wildcard: {rule}");
            assert!(
                !resources.iter().any(|r| r.starts_with("secrets")),
                "{rule}"
            );
            let writes: Vec<&&str> = verbs
                .iter()
                .filter(|v| !["get", "list", "watch"].contains(*v))
                .collect();
            if !writes.is_empty() {
                // Writes: only the claims sources make (in one namespace) and the ClusterConfigs
                // the operator owns. Never a Runtime, Cluster or Shoot.
                let ok = (resources == ["accountclaims"] && kind(o) == "Role")
                    || resources == ["clusterconfigs"];
                assert!(
                    ok,
                    "{} {}: writes {writes:?} on {resources:?}",
                    kind(o),
                    name(o)
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_components_pass_server_dry_run() {
    let client = support::client().await;
    install_platform_crds().await;
    // The overlay without cert-manager (its CRDs are not installed here).
    let dir = support::repo_root().join("deploy/kustomize/overlays/request-sources");
    let (ok, out, err) = kubectl(&["kustomize", dir.to_str().expect("path")]);
    assert!(ok, "{err}");
    // Into namespaces of this test (the dry run needs them to exist); CRDs are installed already.
    let (sys, garden) = (
        namespace(&client, "hapsys").await,
        namespace(&client, "garden").await,
    );
    let out: String = out
        .split("\n---\n")
        .filter(|doc| {
            !doc.contains("kind: CustomResourceDefinition") && !doc.contains("kind: Namespace")
        })
        .map(|doc| {
            doc.replace("hap-system", &sys)
                .replace("garden-kyma", &garden)
        })
        .collect::<Vec<_>>()
        .join("\n---\n");
    let (ok, _, err) = kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], Some(&out));
    assert!(ok, "server dry run: {err}");
}

/// The chart's rules, relocated to this test's namespaces, are enough for an operator acting as
/// its ServiceAccount to serve Runtimes and Clusters through the webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_rules_are_enough_to_serve_runtimes_and_clusters() {
    install_platform_crds().await;
    let scope = unique("sa");
    let hap = Hap::without_operator(
        &["aws"],
        json!({"requestSources": [
            {"id": "kyma", "kind": "Runtime", "matchLabels": {SCOPE_LABEL: scope}},
            {"id": "mcp", "kind": "Cluster", "matchLabels": {SCOPE_LABEL: scope}, "request": {"plan": {"constant": "aws"}}},
        ]}),
    )
    .await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.binding("aws-2", "aws", &[("hyperscalerType", "aws")])
        .await;
    let release = unique("hapsrc");
    let ns = namespace(&hap.client, "hapsys").await;
    let objs: Vec<Value> = helm_template(
        &release,
        &ns,
        &[
            "--set",
            &format!("bindingNamespace={}", hap.bindings_ns),
            "--set",
            &format!("claimNamespace={}", hap.claims_ns),
            "--set",
            &format!("fullnameOverride={release}"),
            "--set",
            "sources.runtimes.enabled=true",
            "--set",
            "sources.clusters.enabled=true",
        ],
    )
    .into_iter()
    .filter(|o| kind(o).contains("Role") || kind(o) == "ServiceAccount")
    .collect();
    let stream: String = objs
        .iter()
        .map(|o| format!("---\n{}\n", serde_json::to_string(o).expect("json")))
        .collect();
    let (ok, _, err) = kubectl_stdin(&["apply", "-f", "-"], Some(&stream));
    assert!(ok, "applying the chart's RBAC: {err}");
    let dir = tempfile::tempdir().expect("tempdir");
    // Authorization decisions are cached briefly: wait until the token can read what it needs.
    let sa = service_account_client(dir.path(), &ns, &release).await;
    let probe = api(&sa, &hap.bindings_ns, &runtime_resource());
    until("the ServiceAccount's rules in force", || async {
        probe.list(&Default::default()).await.is_ok()
    })
    .await;

    let certs = Certs::new();
    let mut args = certs.args(hap.run_args());
    args.lease_namespace = ns.clone();
    let op = Operator::start_with(&sa, args).await;
    let addr = op.handle.webhook.get().expect("webhook");
    let kcp = scoped_namespace(&hap.client, "kcp", &scope).await;
    let _rt = WebhookRegistration::register(
        "Runtime",
        &format!("https://{addr}/mutate/runtimes"),
        &certs.ca_bundle(),
        &scope,
        json!({}),
    );
    let _cl = WebhookRegistration::register(
        "Cluster",
        &format!("https://{addr}/mutate/clusters"),
        &certs.ca_bundle(),
        &scope,
        json!({}),
    );

    let spec = RuntimeSpec {
        name: "rt-1",
        global_account: Some("ga-1"),
        plan: "aws",
        platform_region: "cf-us10",
        region: "us-east-1",
        provider: "aws",
        binding: "",
        extra_labels: &[],
    };
    api(&hap.client, &kcp, &runtime_resource())
        .create(&PostParams::default(), &runtime(&kcp, &scope, &spec))
        .await
        .expect("Runtime admitted");
    assert!(
        runtime_binding(&hap.client, &kcp, "rt-1")
            .await
            .starts_with("aws-")
    );

    let cluster: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": kcp, "labels": {SCOPE_LABEL: scope, "metadata.open-control-plane.io/project": "ga-2"}},
        "spec": {"profile": "p", "purposes": ["mcp"], "tenancy": "Exclusive"},
    }))
    .expect("cluster");
    api(&hap.client, &kcp, &cluster_resource())
        .create(&PostParams::default(), &cluster)
        .await
        .expect("Cluster admitted");
    let configs = api(&hap.client, &kcp, &cluster_config_resource());
    until(
        "ClusterConfig c1--hap created by the ServiceAccount",
        || async { configs.get_opt("c1--hap").await.ok().flatten().is_some() },
    )
    .await;
    tokio::time::timeout(Duration::from_secs(30), op.stop())
        .await
        .expect("stopped");
    let _ = kubectl(&[
        "delete",
        "clusterrole,clusterrolebinding",
        "-l",
        &format!("app.kubernetes.io/instance={release}"),
        "--ignore-not-found",
    ]);
}
