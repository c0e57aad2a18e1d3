//! Helpers for request-source tests: the openmcp and Kyma CRDs (e2e/platform-crds, written from
//! the upstream types because the Go module proxy refuses those modules), a webhook serving
//! certificate from a test CA, webhook registrations scoped to one test's namespaces, and
//! builders for Runtimes and Clusters.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use hap_operator::controller::RunArgs;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use super::{eventually, kubectl, repo_root, unique};

static PLATFORM_CRDS: OnceCell<()> = OnceCell::const_new();

/// Installs the Runtime, Cluster and ClusterConfig CRDs once per test process.
pub async fn install_platform_crds() {
    PLATFORM_CRDS
        .get_or_init(|| async {
            let dir = repo_root().join("e2e/platform-crds");
            let (ok, _, err) = kubectl(&[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                dir.to_str().expect("path"),
            ]);
            assert!(ok, "installing e2e/platform-crds: {err}");
            super::crd_wait::wait_established(
                kubectl,
                &[
                    "runtimes.infrastructuremanager.kyma-project.io",
                    "clusters.clusters.openmcp.cloud",
                    "clusterconfigs.gardener.clusters.openmcp.cloud",
                ],
                std::time::Duration::from_secs(60),
            );
        })
        .await;
}

/// A CA and a serving certificate for 127.0.0.1, in files the operator reads.
pub struct Certs {
    pub dir: tempfile::TempDir,
    pub ca_pem: String,
    ca: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Certs {
    pub fn new() -> Self {
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "hap-test-ca");
        let ca_cert = params.self_signed(&ca_key).expect("CA cert");
        let ca_pem = ca_cert.pem();
        let ca = rcgen::Issuer::new(params, ca_key);
        let certs = Self {
            dir: tempfile::tempdir().expect("tempdir"),
            ca_pem,
            ca,
        };
        certs.issue("hap-webhook");
        certs
    }

    /// Writes a fresh serving certificate with this common name (a rotation).
    pub fn issue(&self, cn: &str) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress("127.0.0.1".parse().expect("ip")));
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.ca).expect("sign");
        // Written next to the target and renamed, as the kubelet swaps a mounted Secret.
        let write = |name: &str, data: &str| {
            let tmp = self.dir.path().join(format!(".{name}.tmp"));
            std::fs::write(&tmp, data).expect("write");
            std::fs::rename(&tmp, self.dir.path().join(name)).expect("rename");
        };
        write("tls.key", &key.serialize_pem());
        write("tls.crt", &cert.pem());
    }

    pub fn cert_file(&self) -> PathBuf {
        self.dir.path().join("tls.crt")
    }

    pub fn key_file(&self) -> PathBuf {
        self.dir.path().join("tls.key")
    }

    pub fn ca_bundle(&self) -> String {
        use base64_engine::encode;
        encode(self.ca_pem.as_bytes())
    }

    /// Webhook settings for an operator of this test.
    pub fn args(&self, mut args: RunArgs) -> RunArgs {
        args.webhook_addr = Some("127.0.0.1:0".parse().expect("addr"));
        args.webhook_cert_file = self.cert_file();
        args.webhook_key_file = self.key_file();
        // Claims of vanished objects go after the shortest grace the operator accepts. The test
        // API servers run no admission step after the operator's webhook and share one clock
        // with it, so an object is stored within a second of the answer.
        args.webhook_decision_timeout = Duration::from_secs(6);
        args.source_grace = Duration::from_secs(1);
        args.api_request_timeout = Duration::from_secs(1);
        // Tests send reviews of their own (forged ones among them) besides the API server's.
        args.webhook_allow_unauthenticated = true;
        args
    }
}

impl Default for Certs {
    fn default() -> Self {
        Self::new()
    }
}

/// Minimal standard base64, to put the CA into a caBundle without another dependency.
pub mod base64_engine {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    pub fn encode(data: &[u8]) -> String {
        let mut out = String::new();
        for chunk in data.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(char::from(T[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}

/// A MutatingWebhookConfiguration for one kind, calling `url`, for objects in namespaces that
/// carry `scope=<value>` (so that concurrent tests never call each other's webhooks). Deleted
/// when dropped.
pub struct WebhookRegistration {
    pub name: String,
    kubeconfig: PathBuf,
}

/// kubectl against the cluster of `kubeconfig` (the test control plane, or the separate garden).
pub fn kubectl_at(
    kubeconfig: &std::path::Path,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(super::kubectl_path())
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn kubectl");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    let out = child.wait_with_output().expect("kubectl output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

impl WebhookRegistration {
    /// Registers in the test control plane.
    pub fn register(
        kind: &str,
        url: &str,
        ca_bundle: &str,
        scope: &str,
        object_selector: Value,
    ) -> Self {
        Self::register_in(
            &super::kubeconfig(),
            kind,
            url,
            ca_bundle,
            scope,
            object_selector,
        )
    }

    /// Registers in the cluster of `kubeconfig` (a separate garden, for Shoots).
    pub fn register_in(
        kubeconfig: &std::path::Path,
        kind: &str,
        url: &str,
        ca_bundle: &str,
        scope: &str,
        object_selector: Value,
    ) -> Self {
        let (group, version, resource) = match kind {
            "Runtime" => ("infrastructuremanager.kyma-project.io", "v1", "runtimes"),
            "Cluster" => ("clusters.openmcp.cloud", "v1alpha1", "clusters"),
            "Shoot" => ("core.gardener.cloud", "v1beta1", "shoots"),
            other => panic!("unknown kind {other}"),
        };
        let name = unique(&format!("hap-{resource}"));
        let body = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": format!("{resource}.accountpool.io"),
                "admissionReviewVersions": ["v1"],
                "sideEffects": "NoneOnDryRun",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "reinvocationPolicy": "Never",
                "clientConfig": {"url": url, "caBundle": ca_bundle},
                "rules": [{"apiGroups": [group], "apiVersions": [version], "resources": [resource], "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {SCOPE_LABEL: scope}},
                "objectSelector": object_selector,
            }],
        });
        let (ok, _, err) = kubectl_at(kubeconfig, &["apply", "-f", "-"], Some(&body.to_string()));
        assert!(ok, "registering the webhook: {err}");
        Self {
            name,
            kubeconfig: kubeconfig.to_path_buf(),
        }
    }
}

impl Drop for WebhookRegistration {
    fn drop(&mut self) {
        let _ = kubectl_at(
            &self.kubeconfig,
            &[
                "delete",
                "mutatingwebhookconfiguration",
                &self.name,
                "--ignore-not-found",
            ],
            None,
        );
    }
}

/// A namespace whose objects the test's webhooks see.
pub async fn scoped_namespace(client: &Client, prefix: &str, scope: &str) -> String {
    scoped_namespace_named(client, &unique(prefix), scope).await
}

/// As [`scoped_namespace`], with the name chosen by the caller.
pub async fn scoped_namespace_named(client: &Client, name: &str, scope: &str) -> String {
    let name = name.to_string();
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {SCOPE_LABEL: scope}}}))
            .expect("namespace");
    api.create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

pub fn runtime_resource() -> ApiResource {
    ApiResource {
        group: "infrastructuremanager.kyma-project.io".into(),
        version: "v1".into(),
        api_version: "infrastructuremanager.kyma-project.io/v1".into(),
        kind: "Runtime".into(),
        plural: "runtimes".into(),
    }
}

pub fn cluster_resource() -> ApiResource {
    ApiResource {
        group: "clusters.openmcp.cloud".into(),
        version: "v1alpha1".into(),
        api_version: "clusters.openmcp.cloud/v1alpha1".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    }
}

pub fn cluster_config_resource() -> ApiResource {
    ApiResource {
        group: "gardener.clusters.openmcp.cloud".into(),
        version: "v1alpha1".into(),
        api_version: "gardener.clusters.openmcp.cloud/v1alpha1".into(),
        kind: "ClusterConfig".into(),
        plural: "clusterconfigs".into(),
    }
}

pub fn api(client: &Client, ns: &str, ar: &ApiResource) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, ar)
}

/// The fields of a Kyma Runtime a test varies.
pub struct RuntimeSpec<'a> {
    pub name: &'a str,
    pub global_account: Option<&'a str>,
    pub plan: &'a str,
    pub platform_region: &'a str,
    pub region: &'a str,
    pub provider: &'a str,
    pub binding: &'a str,
    pub extra_labels: &'a [(&'a str, &'a str)],
}

/// The label that scopes a test's objects, for its webhooks (on the namespace) and its request
/// sources (on the objects): every source watches the whole cluster, so concurrent tests must
/// not select each other's objects.
pub const SCOPE_LABEL: &str = "hap-test-scope";

/// A Runtime as KEB creates it (`spec.shoot.name` = the Runtime name, for short), carrying the
/// test's scope label.
pub fn runtime(ns: &str, scope: &str, r: &RuntimeSpec<'_>) -> DynamicObject {
    let mut labels = serde_json::Map::new();
    labels.insert(SCOPE_LABEL.into(), json!(scope));
    if let Some(ga) = r.global_account {
        labels.insert("kyma-project.io/global-account-id".into(), json!(ga));
    }
    labels.insert(
        "kyma-project.io/subaccount-id".into(),
        json!(format!("sa-{}", r.name)),
    );
    labels.insert("kyma-project.io/broker-plan-name".into(), json!(r.plan));
    labels.insert(
        "kyma-project.io/platform-region".into(),
        json!(r.platform_region),
    );
    for (k, v) in r.extra_labels {
        labels.insert((*k).into(), json!(v));
    }
    serde_json::from_value(json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "kind": "Runtime",
        "metadata": {"name": r.name, "namespace": ns, "labels": labels},
        "spec": {
            "shoot": {
                "name": r.name, "purpose": "production", "platformRegion": r.platform_region,
                "region": r.region, "secretBindingName": r.binding,
                "provider": {"type": r.provider, "workers": [{"name": "cpu-worker-0", "machine": {"type": "m6i.large"}, "minimum": 1, "maximum": 3}]},
                "networking": {"pods": "100.64.0.0/12", "nodes": "10.250.0.0/16", "services": "100.104.0.0/13"},
            },
            "security": {"administrators": ["admin@example.com"], "networking": {"filter": {"egress": {"enabled": false}}}},
        },
    }))
    .expect("runtime")
}

/// A hand-made AdmissionReview of a CREATE, as anyone who reaches the webhook's port can write
/// one: the user in it is made up, nothing vouches for it (issue 20's attack).
pub fn forged_review(kind: Value, resource: Value, ns: &str, name: &str, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": unique("forged"), "kind": kind, "resource": resource,
            "name": name, "namespace": ns, "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:anywhere:anyone"},
            "object": object, "dryRun": false,
        },
    })
}

/// The binding name a Runtime carries now.
pub async fn runtime_binding(client: &Client, ns: &str, name: &str) -> String {
    let rt = api(client, ns, &runtime_resource())
        .get(name)
        .await
        .expect("get runtime");
    rt.data
        .pointer("/spec/shoot/secretBindingName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Waits until `f` holds, polling.
pub async fn until<F, Fut>(what: &str, f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut f = f;
    eventually(Duration::from_secs(60), what, || {
        let fut = f();
        async move { fut.await.then_some(()) }
    })
    .await;
}

/// A client that acts as a ServiceAccount (a TokenRequest token, the test control plane's
/// server and CA), to prove shipped RBAC against the real API server.
pub async fn service_account_client(dir: &std::path::Path, ns: &str, sa: &str) -> Client {
    let (ok, token, err) = kubectl(&["create", "token", sa, "-n", ns, "--duration=2h"]);
    assert!(ok, "kubectl create token: {err}");
    let admin: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(super::kubeconfig()).expect("kubeconfig"))
            .expect("kubeconfig yaml");
    let mut cluster = admin["clusters"][0]["cluster"].clone();
    if let Some(ca) = cluster["certificate-authority"].as_str() {
        let base = super::kubeconfig()
            .parent()
            .expect("kubeconfig dir")
            .to_path_buf();
        cluster["certificate-authority"] = json!(base.join(ca).to_str().expect("path"));
    }
    let cfg = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "testenv", "cluster": cluster}],
        "users": [{"name": sa, "user": {"token": token.trim()}}],
        "contexts": [{"name": sa, "context": {"cluster": "testenv", "user": sa, "namespace": ns}}],
        "current-context": sa,
    });
    let path = dir.join(format!("{sa}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string_pretty(&cfg).expect("json")).expect("write");
    let kc = kube::config::Kubeconfig::read_from(&path).expect("read");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

/// `helm template` of the chart with these settings (the helm CLI from e2e/build-helm.sh).
pub fn helm_template(release: &str, ns: &str, args: &[&str]) -> Vec<Value> {
    let helm = match std::env::var_os("HAP_HELM") {
        Some(p) => PathBuf::from(p),
        None => {
            let out = std::process::Command::new(repo_root().join("e2e/build-helm.sh"))
                .output()
                .expect("run e2e/build-helm.sh");
            assert!(out.status.success(), "e2e/build-helm.sh failed");
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    let out = std::process::Command::new(helm)
        .args(["template", release])
        .arg(repo_root().join("deploy/helm/hap-operator"))
        .args(["--namespace", ns])
        .args(args)
        .output()
        .expect("helm");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    yaml_stream(&String::from_utf8_lossy(&out.stdout))
}

/// `kubectl kustomize` of a directory of the repository.
pub fn kustomize(dir: &str) -> Vec<Value> {
    let (ok, out, err) = kubectl(&["kustomize", repo_root().join(dir).to_str().expect("path")]);
    assert!(ok, "kustomize {dir}: {err}");
    yaml_stream(&out)
}

fn yaml_stream(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("yaml stream")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}
