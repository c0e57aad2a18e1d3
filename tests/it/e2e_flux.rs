//! End-to-end with real Flux: source-controller and kustomize-controller (built from their Go
//! modules by e2e/build-flux.sh; `make test` exports the directory as HAP_FLUX_DIR) run as
//! processes against the test kube-apiserver, and pull a Git repository that Flux's own test Git
//! server (hap-gitserver, HTTP on loopback) serves. Flux applies the operator's kustomize package
//! and a HapConfig from Git, reports the HapConfig's health through its own health checks, shows a
//! broken commit (the API server's validation message, or the operator's verdict) while the
//! operator keeps serving the last good rules, and recovers with the next good commit.

use crate::support;

use crate::support::deploy;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use deploy::{Cleanup, Place, cleanup_for, kind, relocate, stream};
use serde_json::{Value, json};
use support::crd_wait::wait_established;
use support::*;

/// The directory with source-controller, kustomize-controller, hap-gitserver and Flux's CRDs
/// (crds/): `HAP_FLUX_DIR`, or built now. Never skipped: without it the test fails.
fn flux_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(p) = std::env::var_os("HAP_FLUX_DIR") {
            let p = PathBuf::from(p);
            assert!(
                p.join("kustomize-controller").is_file(),
                "HAP_FLUX_DIR={} holds no Flux build: run e2e/build-flux.sh",
                p.display()
            );
            return p;
        }
        let out = Command::new(repo_root().join("e2e/build-flux.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run e2e/build-flux.sh");
        assert!(out.status.success(), "e2e/build-flux.sh failed");
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// Processes of this test, killed by pid when dropped; a failed test shows their last log lines.
struct Processes {
    children: Vec<(String, Child)>,
    logs: tempfile::TempDir,
}

impl Processes {
    fn new() -> Self {
        Self {
            children: Vec::new(),
            logs: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn spawn(&mut self, name: &str, cmd: &mut Command) {
        let log = std::fs::File::create(self.logs.path().join(format!("{name}.log"))).expect("log");
        let child = cmd
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.children.push((name.to_string(), child));
    }

    fn log_tail(&self, name: &str) -> String {
        let log = std::fs::read_to_string(self.logs.path().join(format!("{name}.log")))
            .unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            for (name, _) in &self.children {
                eprintln!("--- {name} (last lines)\n{}", self.log_tail(name));
            }
        }
    }
}

/// hap-gitserver on loopback, serving bare repositories from a temporary directory.
struct GitServer {
    child: Child,
    url: String,
    _root: tempfile::TempDir,
}

impl GitServer {
    fn start() -> Self {
        let root = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(flux_dir().join("hap-gitserver"))
            .arg("--root")
            .arg(root.path())
            .stdout(Stdio::piped())
            // It logs every request.
            .stderr(Stdio::null())
            .spawn()
            .expect("start hap-gitserver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("hap-gitserver prints its URL");
        let url = line.trim().to_string();
        assert!(
            url.starts_with("http://127.0.0.1:"),
            "hap-gitserver: {url:?}"
        );
        Self {
            child,
            url,
            _root: root,
        }
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A work tree that pushes to one repository of the Git server, branch main.
struct Repo {
    dir: tempfile::TempDir,
    remote: String,
}

impl Repo {
    fn new(server: &GitServer, name: &str) -> Self {
        let repo = Self {
            dir: tempfile::tempdir().expect("tempdir"),
            remote: format!("{}/{name}.git", server.url),
        };
        repo.git(&["init", "--quiet", "--initial-branch=main"]);
        repo
    }

    fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=platform",
                "-c",
                "user.email=platform@example.com",
            ])
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Writes the files, commits and pushes; returns the commit's hash.
    fn commit(&self, files: &[(&str, String)], message: &str) -> String {
        for (path, text) in files {
            let path = self.dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        self.git(&["add", "--all"]);
        self.git(&["commit", "--quiet", "-m", message]);
        self.git(&["push", "--quiet", &self.remote, "HEAD:main"]);
        self.git(&["rev-parse", "HEAD"])
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Installs Flux's CRDs (from the modules, as built) and starts both controllers for the objects
/// of `ns` only.
fn start_flux(ns: &str) -> Processes {
    let dir = flux_dir();
    let (ok, _, err) = kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        dir.join("crds").to_str().expect("path"),
    ]);
    assert!(ok, "installing Flux's CRDs: {err}");
    wait_established(
        kubectl,
        &[
            "gitrepositories.source.toolkit.fluxcd.io",
            "kustomizations.kustomize.toolkit.fluxcd.io",
        ],
        Duration::from_secs(60),
    );
    let addr = format!("127.0.0.1:{}", free_port());
    let common = [
        "--watch-all-namespaces=false",
        "--enable-leader-election=false",
        "--metrics-addr=0",
        "--health-addr=127.0.0.1:0",
    ];
    let mut procs = Processes::new();
    // source-controller's artifacts, removed with the logs.
    let storage = procs.logs.path().join("storage");
    std::fs::create_dir_all(&storage).expect("storage directory");
    for (name, extra) in [
        (
            "source-controller",
            vec![
                format!("--storage-path={}", storage.display()),
                format!("--storage-addr={addr}"),
                format!("--storage-adv-addr={addr}"),
            ],
        ),
        (
            "kustomize-controller",
            // A Kustomization whose dependency has not applied the new commit yet, or whose
            // source has no artifact yet, is looked at again after this instead of 30 s.
            vec![
                "--no-remote-bases=true".into(),
                "--requeue-dependency=2s".into(),
            ],
        ),
    ] {
        procs.spawn(
            name,
            Command::new(dir.join(name))
                .args(common)
                .args(extra)
                .env("KUBECONFIG", kubeconfig())
                .env("RUNTIME_NAMESPACE", ns),
        );
    }
    procs
}

/// The operator's kustomize base as shipped, moved into this test's namespaces (the helper
/// tests/it/e2e_deploy.rs uses), without what is cluster-wide and shared by every test on this
/// control plane: the CRDs (already served) and the API priority objects.
fn operator_package(place: &Place) -> Vec<Value> {
    let base = deploy::kustomize("deploy/kustomize/base");
    relocate(&base, place)
        .into_iter()
        .map(|mut o| {
            // relocate() leaves `subjects: null` on objects without subjects; client-side
            // kubectl apply drops it, a server-side apply (Flux) refuses the unknown field.
            if let Some(m) = o.as_object_mut() {
                m.retain(|k, v| !(k == "subjects" && v.is_null()));
            }
            o
        })
        .filter(|o| {
            !matches!(
                kind(o),
                "CustomResourceDefinition" | "FlowSchema" | "PriorityLevelConfiguration"
            )
        })
        .collect()
}

/// The overlay Flux builds: the package, with the operator scaled to zero (it runs in this test
/// process, not as a pod).
const OPERATOR_KUSTOMIZATION: &str = "apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - hap-operator.yaml
replicas:
  - name: hap-operator
    count: 0
";

fn hap_config_file(name: &str, bindings_ns: &str, spec: Value) -> String {
    let mut spec_obj = json!({"bindingNamespace": bindings_ns});
    for (k, v) in spec.as_object().expect("spec object") {
        spec_obj[k] = v.clone();
    }
    let doc = json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig",
        "metadata": {"name": name}, "spec": spec_obj});
    serde_json::to_string_pretty(&doc).expect("json")
}

fn flux_objects(ns: &str, git_url: &str, config: &str) -> String {
    let source = json!({"kind": "GitRepository", "name": "platform"});
    let objs = vec![
        json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": "platform", "namespace": ns},
            "spec": {"url": git_url, "ref": {"branch": "main"}, "interval": "5s", "timeout": "20s"}}),
        json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "hap-operator", "namespace": ns},
            "spec": {"path": "./hap-operator", "prune": true, "sourceRef": source,
                "interval": "10m", "retryInterval": "5s", "timeout": "30s"}}),
        json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "hap-config", "namespace": ns},
            "spec": {"path": "./hap", "prune": true, "sourceRef": source,
                "dependsOn": [{"name": "hap-operator"}],
                "interval": "10m", "retryInterval": "5s", "timeout": "30s",
                "healthChecks": [{"apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig",
                    "name": config}]}}),
    ];
    stream(&objs)
}

/// The Kustomization's Ready condition: (status, reason, message, lastAttemptedRevision).
fn kustomization_ready(ns: &str, name: &str) -> Option<(String, String, String, String)> {
    let (ok, out, _) = kubectl(&["get", "kustomization", name, "-n", ns, "-o", "json"]);
    if !ok {
        return None;
    }
    let o: Value = serde_json::from_str(&out).ok()?;
    let cond = o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .clone();
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Some((
        s(&cond["status"]),
        s(&cond["reason"]),
        s(&cond["message"]),
        s(&o["status"]["lastAttemptedRevision"]),
    ))
}

/// Polls until the Kustomization has tried `commit` and its Ready status is `status`; returns
/// (reason, message). The operator runs on this runtime, so kubectl goes to the blocking pool.
async fn await_kustomization(
    procs: &Processes,
    ns: &str,
    name: &str,
    commit: &str,
    status: &str,
) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = None;
    loop {
        let (n, k) = (ns.to_string(), name.to_string());
        let read = tokio::task::spawn_blocking(move || kustomization_ready(&n, &k))
            .await
            .expect("kubectl");
        if let Some((s, reason, message, revision)) = read {
            if s == status && revision.ends_with(commit) {
                eprintln!("Kustomization {name} at {commit}: Ready={s} {reason}: {message}");
                return (reason, message);
            }
            last = Some((s, reason, message, revision));
        }
        assert!(
            Instant::now() < deadline,
            "Kustomization {name}: no Ready={status} for {commit} within 120s; last {last:?}\n\
             --- kustomize-controller:\n{}\n--- source-controller:\n{}",
            procs.log_tail("kustomize-controller"),
            procs.log_tail("source-controller")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Removes what Flux would have pruned had it still run: the Flux objects' finalizers (the
/// controllers are gone when this runs after a failure) and this test's namespaces.
struct FluxCleanup(String);

impl Drop for FluxCleanup {
    fn drop(&mut self) {
        for k in ["kustomization", "gitrepository"] {
            let (_, names, _) = kubectl(&["get", k, "-n", &self.0, "-o", "name"]);
            for n in names.lines() {
                let _ = kubectl(&[
                    "patch",
                    n,
                    "-n",
                    &self.0,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ]);
            }
        }
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"]);
    }
}

/// Flux applies the operator's package and a HapConfig from Git and waits for the HapConfig's
/// health; a commit the API server rejects (CEL) and a commit the operator rejects (a rule that
/// does not parse) make the Kustomization Ready=False while the last good rules keep binding
/// claims; the next good commit makes it Ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_applies_the_hap_config_from_git_and_reports_its_health() {
    let client = client().await;
    let flux_ns = namespace(&client, "flux").await;
    let _flux_cleanup = FluxCleanup(flux_ns.clone());
    let mut hap = Hap {
        garden: client.clone(),
        garden_kubeconfig: None,
        client: client.clone(),
        config: unique("hap-flux"),
        bindings_ns: project(&client).await,
        claims_ns: namespace(&client, "claims").await,
        operator: None,
    };
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    hap.binding("aws-2", "aws", &[("hyperscalerType", "aws")])
        .await;
    let place = Place {
        ns: unique("hapsys"),
        bindings_ns: hap.bindings_ns.clone(),
        suffix: unique("flux"),
    };
    let package = operator_package(&place);
    let _rbac_cleanup = Cleanup(cleanup_for(&package));

    let server = GitServer::start();
    let repo = Repo::new(&server, "platform");
    let (config_name, bindings_ns) = (hap.config.clone(), hap.bindings_ns.clone());
    let config = |spec: Value| hap_config_file(&config_name, &bindings_ns, spec);
    let first = repo.commit(
        &[
            ("hap-operator/hap-operator.yaml", stream(&package)),
            (
                "hap-operator/kustomization.yaml",
                OPERATOR_KUSTOMIZATION.into(),
            ),
            ("hap/hapconfig.yaml", config(json!({"rules": ["aws"]}))),
        ],
        "hap-operator and its rules",
    );
    hap.start_operator().await;
    let procs = start_flux(&flux_ns);
    let git_url = format!("{}/platform.git", server.url);
    let (ok, _, err) = kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&flux_objects(&flux_ns, &git_url, &hap.config)),
    );
    assert!(ok, "applying the Flux objects: {err}");

    // The package is applied as built from Git: relocated, scaled to zero, owned by Flux.
    await_kustomization(&procs, &flux_ns, "hap-operator", &first, "True").await;
    let (ok, replicas, err) = kubectl(&[
        "get",
        "deployment",
        "hap-operator",
        "-n",
        &place.ns,
        "-o",
        "jsonpath={.spec.replicas} {.metadata.labels.kustomize\\.toolkit\\.fluxcd\\.io/name}",
    ]);
    assert!(ok, "the operator's Deployment from Git: {err}");
    assert_eq!(replicas, "0 hap-operator");
    let (reason, message) =
        await_kustomization(&procs, &flux_ns, "hap-config", &first, "True").await;
    assert_eq!(reason, "ReconciliationSucceeded", "{message}");
    assert_eq!(hap.config_status().await.active_generation, Some(1));
    hap.claim("first", json!({"globalAccount": "ga-1", "plan": "aws"}))
        .await;
    hap.bound("first").await;

    // Rejected by the API server (the CRD's CEL rule): Flux shows the API server's message, the
    // HapConfig is not even changed.
    let cel = repo.commit(
        &[(
            "hap/hapconfig.yaml",
            config(json!({"rules": ["aws"], "multiHyperscalerAccount": {"limits": {"aws": 0}}})),
        )],
        "a limit of zero",
    );
    let (reason, message) =
        await_kustomization(&procs, &flux_ns, "hap-config", &cel, "False").await;
    assert_eq!(reason, "ReconciliationFailed", "{message}");
    assert!(
        message.contains("every limit must be at least 1") && message.contains(&hap.config),
        "{message}"
    );
    let status = hap.config_status().await;
    assert_eq!(status.active_generation, Some(1));

    // Accepted by the API server, rejected by the operator: Flux's health check fails at once on
    // the operator's Stalled condition, whose message names the broken rule; generation 1 stays
    // in force and binds the next claim.
    let broken = repo.commit(
        &[(
            "hap/hapconfig.yaml",
            config(json!({"rules": ["aws", "gcp(PR=)"]})),
        )],
        "a rule that does not parse",
    );
    let (reason, message) =
        await_kustomization(&procs, &flux_ns, "hap-config", &broken, "False").await;
    assert_eq!(reason, "HealthCheckFailed", "{message}");
    assert!(
        message.contains(&format!("HapConfig/{}", hap.config)) && message.contains("Failed"),
        "{message}"
    );
    let stalled = hap.config_condition("Stalled", "True").await;
    assert_eq!(stalled.reason, "ConfigInvalid");
    assert!(
        stalled.message.contains("generation 2 is invalid")
            && stalled.message.contains("gcp(PR=)")
            && stalled.message.contains("generation 1 stays in force"),
        "{}",
        stalled.message
    );
    hap.claim("second", json!({"globalAccount": "ga-2", "plan": "aws"}))
        .await;
    let first_binding = hap.bound("first").await;
    let second_binding = hap.bound("second").await;
    assert_ne!(first_binding, second_binding);
    // The operator-side Deployment package is unaffected by the HapConfig's failure.
    let (s, _, _, _) = kustomization_ready(&flux_ns, "hap-operator").expect("hap-operator");
    assert_eq!(s, "True");

    let fixed = repo.commit(
        &[(
            "hap/hapconfig.yaml",
            config(json!({"rules": ["aws", "gcp(PR=cf-sa30)"]})),
        )],
        "the rule fixed",
    );
    let (reason, message) =
        await_kustomization(&procs, &flux_ns, "hap-config", &fixed, "True").await;
    assert_eq!(reason, "ReconciliationSucceeded", "{message}");
    assert_eq!(hap.config_status().await.active_generation, Some(3));

    // Deleting the Kustomizations prunes what Flux applied (the controllers still run).
    let (ok, _, err) = kubectl(&[
        "delete",
        "kustomization",
        "--all",
        "-n",
        &flux_ns,
        "--timeout=60s",
    ]);
    assert!(ok, "deleting the Kustomizations: {err}");
    let (ok, out, _) = kubectl(&[
        "get",
        "hapconfig",
        &hap.config,
        "--ignore-not-found",
        "-o",
        "name",
    ]);
    assert!(ok && out.trim().is_empty(), "pruned: {out}");
    hap.stop_operator().await;
    drop(procs);
}
