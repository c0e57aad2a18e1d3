//! Shared harness of the e2e tests: a client for the real control plane started by
//! `e2e/testenv up` (via `make test`; it serves the real Gardener API), CRD installation, unique
//! names, Gardener projects, bindings and Shoots (`garden`), an in-process operator, and polling
//! helpers. Tests isolate themselves by namespace (bindings: a project of their own) and
//! HapConfig name, so they share one control plane and run in parallel.
#![allow(dead_code)]

pub mod deploy;
pub mod garden;
pub mod http_hold_proxy;
pub mod node;
pub mod private_env;
pub mod prometheus;
// Loaded inside `private_env`, which the load benchmark includes by path and which needs it.
pub use private_env::crd_wait;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use hap_operator::controller::{Handle, RunArgs};
use kube::api::{Api, DynamicObject, PostParams};
use kube::{Client, Config};
use serde_json::json;
use tokio::sync::OnceCell;

pub mod platform;
pub mod scrape;
pub mod shoot_hook;
pub mod slow_proxy;

static CRDS: OnceCell<()> = OnceCell::const_new();
static COUNTER: AtomicU32 = AtomicU32::new(0);

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

static KUBECONFIG_OVERRIDE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Points this test binary at another environment than `KUBECONFIG`'s (tests/it/e2e_pods.rs: the
/// node environment). The first call wins; call it before any other helper.
pub fn use_kubeconfig(path: PathBuf) {
    let _ = KUBECONFIG_OVERRIDE.set(path);
}

/// The kubeconfig of the test control plane. Fails loudly: e2e tests are never skipped.
pub fn kubeconfig() -> PathBuf {
    if let Some(path) = KUBECONFIG_OVERRIDE.get() {
        return path.clone();
    }
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

/// The separate garden of the test control plane (`e2e/testenv up --garden --gardener`, as
/// `make test` starts it): a second control plane serving the Gardener API, for the tests of the
/// two-cluster topology. Fails loudly when it is missing: those tests are never skipped.
pub fn garden_kubeconfig() -> PathBuf {
    let path = std::env::var_os("HAP_TEST_GARDEN_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            kubeconfig()
                .parent()
                .expect("kubeconfig dir")
                .join("garden/kubeconfig")
        });
    assert!(
        path.exists(),
        "no separate garden: {} does not exist. Run `make test`, or `e2e/testenv up --garden --gardener`",
        path.display()
    );
    path
}

async fn client_for(path: &std::path::Path) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig");
    Client::try_from(config).expect("client")
}

/// A client of the control plane of `path` that acts as `user` in `groups` (impersonated by
/// the admin), so that admission sees that user; add `system:masters` to pass RBAC.
pub async fn client_as(path: &std::path::Path, user: &str, groups: &[&str]) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("read kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig");
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    Client::try_from(config).expect("client")
}

/// A client for the separate garden (admin).
pub async fn garden_client() -> Client {
    client_for(&garden_kubeconfig()).await
}

/// kube-apiserver's audit log of the control plane of `kubeconfig` (the launcher writes it next
/// to the kubeconfig): every request not made with the admin token, at Metadata level.
pub fn audit_log(kubeconfig: &std::path::Path) -> PathBuf {
    kubeconfig
        .parent()
        .expect("kubeconfig dir")
        .join("logs/audit.log")
}

/// The audit events of `user` (one JSON object per request, stage ResponseComplete).
pub fn audit_events(log: &std::path::Path, user: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(log)
        .unwrap_or_else(|e| panic!("read the audit log {}: {e}", log.display()));
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["user"]["username"] == user && e["stage"] == "ResponseComplete")
        .collect()
}

/// A kubeconfig for the cluster of `admin` with the ServiceAccount's token (TokenRequest via
/// `kubectl create token`), written to `dir/file`.
pub fn sa_kubeconfig(
    admin: &std::path::Path,
    dir: &std::path::Path,
    ns: &str,
    sa: &str,
    file: &str,
) -> PathBuf {
    let admin_path = admin.to_str().expect("utf-8 path");
    let (ok, token, err) = kubectl(&[
        "--kubeconfig",
        admin_path,
        "create",
        "token",
        sa,
        "-n",
        ns,
        "--duration=2h",
    ]);
    assert!(ok, "kubectl create token: {err}");
    let cfg = serde_saphyr::from_str::<serde_json::Value>(&std::fs::read_to_string(admin).unwrap())
        .unwrap();
    let mut cluster = cfg["clusters"][0]["cluster"].clone();
    if let Some(ca) = cluster["certificate-authority"].as_str() {
        // Relative paths are relative to the kubeconfig's directory.
        let base = admin.parent().unwrap().to_path_buf();
        cluster["certificate-authority"] = json!(base.join(ca).to_str().unwrap());
    }
    let cfg = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "testenv", "cluster": cluster}],
        "users": [{"name": sa, "user": {"token": token.trim()}}],
        "contexts": [{"name": sa, "context": {"cluster": "testenv", "user": sa, "namespace": ns}}],
        "current-context": sa,
    });
    let path = dir.join(file);
    std::fs::write(&path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
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

/// A client for the test control plane, with the product's CRDs installed.
pub async fn client() -> Client {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
    let client = client_for(&kubeconfig()).await;
    CRDS.get_or_init(|| async {
        let path = repo_root().join("crds");
        let (ok, _, err) = kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            path.to_str().expect("path"),
        ]);
        assert!(ok, "installing crds/: {err}");
        crd_wait::wait_established(kubectl, crd_wait::PRODUCT_CRDS, Duration::from_secs(60));
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

pub use garden::{create_binding, credentials_binding_resource, project};

pub fn bindings_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &credentials_binding_resource())
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
        let handle = Handle::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = {
            let (client, handle) = (client.clone(), handle.clone());
            tokio::spawn(async move {
                let stop = async move {
                    let _ = rx.await;
                };
                if let Err(e) =
                    hap_operator::controller::run_with(client.into(), args, handle, stop).await
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

/// One isolated HAP: a binding namespace, a claim namespace, a HapConfig of its own name and an
/// operator that watches only those.
pub struct Hap {
    pub client: Client,
    /// Where bindings and Shoots live: the same cluster as `client` unless the test runs with a
    /// separate garden.
    pub garden: Client,
    /// The garden's kubeconfig when it is a separate cluster (passed to the operator).
    pub garden_kubeconfig: Option<PathBuf>,
    pub config: String,
    pub bindings_ns: String,
    pub claims_ns: String,
    pub operator: Option<Operator>,
}

impl Hap {
    /// Creates the namespaces and the HapConfig (`spec` merged over `bindingNamespace` and
    /// `rules`), then starts the operator.
    pub async fn new(rules: &[&str], extra_spec: serde_json::Value) -> Self {
        let hap = Self::without_operator(rules, extra_spec).await;
        hap.with_operator().await
    }

    pub async fn without_operator(rules: &[&str], extra_spec: serde_json::Value) -> Self {
        let client = client().await;
        let bindings_ns = project(&client).await;
        let claims_ns = namespace(&client, "claims").await;
        let config = unique("hap");
        let hap = Self {
            garden: client.clone(),
            garden_kubeconfig: None,
            client,
            config,
            bindings_ns,
            claims_ns,
            operator: None,
        };
        hap.apply_config(rules, extra_spec).await;
        hap
    }

    /// Like [`Hap::new`], with bindings and Shoots in the separate garden: the project is
    /// created there and the operator reads and writes bindings through the garden's kubeconfig.
    pub async fn with_separate_garden(rules: &[&str], extra_spec: serde_json::Value) -> Self {
        let hap = Self::without_operator_with_separate_garden(rules, extra_spec).await;
        hap.with_operator().await
    }

    pub async fn without_operator_with_separate_garden(
        rules: &[&str],
        extra_spec: serde_json::Value,
    ) -> Self {
        let client = client().await;
        let garden = garden_client().await;
        let bindings_ns = project(&garden).await;
        let claims_ns = namespace(&client, "claims").await;
        let hap = Self {
            client,
            garden,
            garden_kubeconfig: Some(garden_kubeconfig()),
            config: unique("hap"),
            bindings_ns,
            claims_ns,
            operator: None,
        };
        hap.apply_config(rules, extra_spec).await;
        hap
    }

    pub async fn with_operator(mut self) -> Self {
        self.start_operator().await;
        self
    }

    pub fn run_args(&self) -> RunArgs {
        let mut args = RunArgs::for_config(&self.config);
        args.claim_namespace = Some(self.claims_ns.clone());
        args.mark_ignored_configs = false;
        args.pending_retry = Duration::from_secs(2);
        args.garden_kubeconfig = self.garden_kubeconfig.clone();
        args
    }

    pub async fn start_operator(&mut self) {
        self.operator = Some(Operator::start_with(&self.client, self.run_args()).await);
    }

    pub async fn stop_operator(&mut self) {
        if let Some(op) = self.operator.take() {
            op.stop().await;
        }
    }

    /// Server-side applies the HapConfig as a user would (field manager `kubectl`).
    pub async fn apply_config(&self, rules: &[&str], extra_spec: serde_json::Value) {
        let mut spec = json!({"bindingNamespace": self.bindings_ns, "rules": rules});
        if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
            for (k, v) in extra {
                s.insert(k.clone(), v.clone());
            }
        }
        let body = json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig", "metadata": {"name": self.config}, "spec": spec});
        let api: Api<hap_operator::api::HapConfig> = Api::all(self.client.clone());
        api.patch(
            &self.config,
            &kube::api::PatchParams::apply("kubectl").force(),
            &kube::api::Patch::Apply(body),
        )
        .await
        .expect("apply HapConfig");
    }

    /// Creates a CredentialsBinding (and its Secret) in the binding namespace.
    pub async fn binding(&self, name: &str, provider: &str, labels: &[(&str, &str)]) {
        create_binding(&self.garden, &self.bindings_ns, name, provider, labels).await;
    }

    /// Creates a CredentialsBinding on credentials of kind `creds` (and the Quota `quota`, if
    /// given) in the binding namespace.
    pub async fn binding_with(
        &self,
        name: &str,
        provider: &str,
        labels: &[(&str, &str)],
        creds: garden::Credentials,
        quota: Option<&str>,
    ) {
        garden::create_binding_with(
            &self.garden,
            &self.bindings_ns,
            name,
            provider,
            labels,
            creds,
            quota,
        )
        .await;
    }

    /// Creates a valid Shoot in the binding namespace that uses `binding`.
    pub async fn shoot(&self, name: &str, binding: &str) {
        garden::create_shoot(&self.garden, &self.bindings_ns, name, binding).await;
    }

    /// Deletes a Shoot of the binding namespace (with Gardener's deletion confirmation).
    pub async fn delete_shoot(&self, name: &str) {
        garden::delete_shoot(&self.garden, &self.bindings_ns, name).await;
    }

    /// Sets (or with `None` removes) a label of a binding, as an account team would with kubectl.
    pub async fn label(&self, binding: &str, key: &str, value: Option<&str>) {
        let patch = json!({"metadata": {"labels": {key: value}}});
        bindings_api(&self.garden, &self.bindings_ns)
            .patch(
                binding,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap_or_else(|e| panic!("label {binding} {key}={value:?}: {e}"));
    }

    pub async fn labels(&self, binding: &str) -> BTreeMap<String, String> {
        binding_labels(&self.garden, &self.bindings_ns, binding).await
    }

    pub fn claims(&self) -> Api<hap_operator::api::AccountClaim> {
        Api::namespaced(self.client.clone(), &self.claims_ns)
    }

    pub fn configs(&self) -> Api<hap_operator::api::HapConfig> {
        Api::all(self.client.clone())
    }

    /// Creates an AccountClaim; `spec` holds the camelCase spec fields.
    pub async fn claim(&self, name: &str, spec: serde_json::Value) {
        let body = json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim", "metadata": {"name": name}, "spec": spec});
        let claim = serde_json::from_value(body).expect("claim");
        self.claims()
            .create(&PostParams::default(), &claim)
            .await
            .expect("create claim");
    }

    /// Waits until the claim is Bound and returns its binding.
    pub async fn bound(&self, name: &str) -> String {
        let api = self.claims();
        eventually(
            Duration::from_secs(60),
            &format!("claim {name} Bound"),
            || {
                let api = api.clone();
                async move {
                    let c = api.get(name).await.ok()?;
                    let s = c.status?;
                    (s.phase == Some(hap_operator::api::ClaimPhase::Bound)).then_some(())?;
                    s.credentials_binding_name
                }
            },
        )
        .await
    }

    /// Waits until the claim's Ready condition carries `reason`; returns its message.
    pub async fn ready_reason(&self, name: &str, reason: &str) -> String {
        let api = self.claims();
        eventually(
            Duration::from_secs(60),
            &format!("claim {name} Ready reason {reason}"),
            || {
                let api = api.clone();
                async move {
                    let c = api.get(name).await.ok()?;
                    let s = c.status?;
                    let cond = condition(&s.conditions, "Ready")?;
                    (cond.reason == reason).then(|| cond.message.clone())
                }
            },
        )
        .await
    }

    pub async fn config_status(&self) -> hap_operator::api::HapConfigStatus {
        self.configs()
            .get(&self.config)
            .await
            .expect("get HapConfig")
            .status
            .unwrap_or_default()
    }

    /// Waits until the HapConfig's condition `type_` has `status` for the current generation.
    pub async fn config_condition(
        &self,
        type_: &str,
        status: &str,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        let api = self.configs();
        let name = self.config.clone();
        eventually(
            Duration::from_secs(60),
            &format!("HapConfig {name} {type_}={status}"),
            || {
                let (api, name) = (api.clone(), name.clone());
                async move {
                    let cfg = api.get(&name).await.ok()?;
                    let generation = cfg.metadata.generation;
                    let st = cfg.status?;
                    (st.observed_generation == generation).then_some(())?;
                    let c = condition(&st.conditions, type_)?;
                    (c.status == status).then(|| c.clone())
                }
            },
        )
        .await
    }
}
