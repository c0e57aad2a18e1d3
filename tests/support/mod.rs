//! Shared harness of the e2e tests: a client for the real control plane started by
//! `e2e/testenv up` (via `make test`), CRD installation, unique names, an in-process operator,
//! and polling helpers. Tests isolate themselves by namespace and HapConfig name, so they share
//! one control plane and run in parallel.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use hap_operator::controller::{Handle, RunArgs};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use kube::{Client, Config};
use serde_json::json;
use tokio::sync::OnceCell;

static CRDS: OnceCell<()> = OnceCell::const_new();
static COUNTER: AtomicU32 = AtomicU32::new(0);

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The kubeconfig of the test control plane. Fails loudly: e2e tests are never skipped.
pub fn kubeconfig() -> PathBuf {
    let path = std::env::var_os("KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".testenv/kubeconfig"));
    assert!(
        path.exists(),
        "no test control plane: {} does not exist. Run `make test`, or `e2e/testenv up` and export KUBECONFIG",
        path.display()
    );
    path
}

/// kubectl built from the same Kubernetes release as the control plane.
pub fn kubectl_path() -> PathBuf {
    if let Some(bin) = std::env::var_os("HAP_K8S_BIN") {
        return PathBuf::from(bin).join("kubectl");
    }
    let out = Command::new(repo_root().join("e2e/build-control-plane.sh"))
        .output()
        .expect("run e2e/build-control-plane.sh");
    assert!(
        out.status.success(),
        "build-control-plane failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("kubectl")
}

/// Runs kubectl against the test control plane; returns (success, stdout, stderr).
pub fn kubectl(args: &[&str]) -> (bool, String, String) {
    kubectl_stdin(args, None)
}

pub fn kubectl_stdin(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write;
    let mut cmd = Command::new(kubectl_path());
    cmd.env("KUBECONFIG", kubeconfig()).args(args);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn kubectl");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
    } else {
        drop(child.stdin.take());
    }
    let out = child.wait_with_output().expect("kubectl output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A client for the test control plane, with the product's and Gardener's CRDs installed.
pub async fn client() -> Client {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig()).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig");
    let client = Client::try_from(config).expect("client");
    CRDS.get_or_init(|| async {
        for dir in ["crds", "e2e/crds"] {
            let path = repo_root().join(dir);
            let (ok, _, err) = kubectl(&[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                path.to_str().expect("path"),
            ]);
            assert!(ok, "installing {dir}: {err}");
        }
        let (ok, _, err) = kubectl(&[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=60s",
        ]);
        assert!(ok, "CRDs not established: {err}");
    })
    .await;
    client
}

/// A name unique to this test process and call, DNS-label safe.
pub fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    format!("{prefix}-{}-{n}", std::process::id() % 100_000)
}

/// Creates a namespace and returns its name.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    let name = unique(prefix);
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
    api.create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

pub fn credentials_binding_resource() -> ApiResource {
    ApiResource {
        group: "security.gardener.cloud".into(),
        version: "v1alpha1".into(),
        api_version: "security.gardener.cloud/v1alpha1".into(),
        kind: "CredentialsBinding".into(),
        plural: "credentialsbindings".into(),
    }
}

pub fn bindings_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &credentials_binding_resource())
}

/// Creates a CredentialsBinding with these labels.
pub async fn create_binding(
    client: &Client,
    ns: &str,
    name: &str,
    provider: &str,
    labels: &[(&str, &str)],
) {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "security.gardener.cloud/v1alpha1",
        "kind": "CredentialsBinding",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "provider": {"type": provider},
        "credentialsRef": {"apiVersion": "v1", "kind": "Secret", "name": format!("{name}-secret"), "namespace": ns},
    }))
    .expect("binding");
    bindings_api(client, ns)
        .create(&PostParams::default(), &obj)
        .await
        .expect("create binding");
}

/// Labels of a binding as the API server has them now.
pub async fn binding_labels(client: &Client, ns: &str, name: &str) -> BTreeMap<String, String> {
    bindings_api(client, ns)
        .get(name)
        .await
        .expect("get binding")
        .metadata
        .labels
        .unwrap_or_default()
}

/// An operator running in this process until the guard is dropped.
pub struct Operator {
    pub handle: Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Operator {
    pub async fn start(client: &Client, config_name: &str) -> Self {
        Self::start_with(client, RunArgs::for_config(config_name)).await
    }

    pub async fn start_with(client: &Client, args: RunArgs) -> Self {
        let handle = Handle {
            ready: Default::default(),
            metrics: Default::default(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = {
            let (client, handle) = (client.clone(), handle.clone());
            tokio::spawn(async move {
                let stop = async move {
                    let _ = rx.await;
                };
                if let Err(e) = hap_operator::controller::run_with(client, args, handle, stop).await
                {
                    panic!("operator stopped with an error: {e:?}");
                }
            })
        };
        let op = Self {
            handle,
            stop: Some(tx),
            task,
        };
        eventually(Duration::from_secs(30), "operator ready", || async {
            op.handle.ready.is_ready().then_some(())
        })
        .await;
        op
    }

    /// Stops the operator and waits for it to finish.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let task = std::mem::replace(&mut self.task, tokio::spawn(async {}));
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("operator shut down in time")
            .expect("operator task");
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// Polls `f` until it returns Some, or fails the test after `timeout` naming what was awaited.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The status of a condition type in a condition list, if present.
pub fn condition<'a>(
    conds: &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conds.iter().find(|c| c.type_ == type_)
}
