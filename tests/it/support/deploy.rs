//! Rendering and applying the shipped packaging in tests: `kubectl kustomize`, `helm template`
//! (helm from `e2e/build-helm.sh`, exported by `scripts/test.sh` as `HAP_HELM`), moving the
//! rendered objects into a test's own namespaces, server dry runs and applies, cleanup. Used by
//! tests/it/e2e_deploy.rs (the packaging itself) and tests/it/e2e_rbac.rs (the operator under it).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::support::{kubectl, kubectl_stdin, repo_root};

/// The helm binary: `HAP_HELM`, else built (or found in the cache) by e2e/build-helm.sh.
pub fn helm_path() -> PathBuf {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        if let Some(p) = std::env::var_os("HAP_HELM") {
            return PathBuf::from(p);
        }
        let out = Command::new(repo_root().join("e2e/build-helm.sh"))
            .output()
            .expect("run e2e/build-helm.sh");
        assert!(
            out.status.success(),
            "e2e/build-helm.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

pub fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.output().expect("spawn");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Parses a multi-document YAML stream into its objects (empty documents dropped).
pub fn parse_stream(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).expect("parse YAML stream");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `kubectl kustomize <dir>` (no cluster needed).
pub fn kustomize(dir: &str) -> Vec<Value> {
    let (ok, out, err) = kubectl(&["kustomize", repo_root().join(dir).to_str().unwrap()]);
    assert!(ok, "kubectl kustomize {dir}: {err}");
    parse_stream(&out)
}

/// `helm template` of the chart with a release name, a namespace and extra arguments.
pub fn helm_template(release: &str, ns: &str, args: &[&str]) -> Vec<Value> {
    let chart = repo_root().join("deploy/helm/hap-operator");
    let (ok, out, err) = run(Command::new(helm_path())
        .args([
            "template",
            release,
            chart.to_str().unwrap(),
            "--namespace",
            ns,
        ])
        .args(args));
    assert!(ok, "helm template {args:?}: {err}");
    parse_stream(&out)
}

pub fn kind(o: &Value) -> &str {
    o["kind"].as_str().unwrap_or_default()
}

pub fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or_default()
}

pub fn find<'a>(objs: &'a [Value], k: &str, n: &str) -> &'a Value {
    objs.iter()
        .find(|o| kind(o) == k && name(o) == n)
        .unwrap_or_else(|| panic!("no {k} {n} in {:?}", summary(objs)))
}

pub fn summary(objs: &[Value]) -> Vec<String> {
    objs.iter()
        .map(|o| {
            format!(
                "{} {}/{}",
                kind(o),
                o["metadata"]["namespace"].as_str().unwrap_or("-"),
                name(o)
            )
        })
        .collect()
}

/// Objects as a YAML stream (JSON documents are YAML).
pub fn stream(objs: &[Value]) -> String {
    objs.iter()
        .map(|o| serde_json::to_string(o).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Where a test puts the kustomize base: its own operator and binding namespaces, and a suffix
/// on the cluster-scoped RBAC names, so that parallel tests and repeated runs never collide.
pub struct Place {
    pub ns: String,
    pub bindings_ns: String,
    pub suffix: String,
}

/// Moves the base's objects from hap-system / garden-kyma into the test's namespaces and renames
/// the cluster-scoped RBAC. Nothing else changes: the rules stay exactly as shipped.
pub fn relocate(objs: &[Value], p: &Place) -> Vec<Value> {
    let ns_of = |v: &Value| match v.as_str() {
        Some("hap-system") => Some(json!(p.ns)),
        Some("garden-kyma") => Some(json!(p.bindings_ns)),
        _ => None,
    };
    objs.iter()
        .map(|o| {
            let mut o = o.clone();
            let k = kind(&o).to_string();
            if let Some(ns) = ns_of(&o["metadata"]["namespace"]) {
                o["metadata"]["namespace"] = ns;
            }
            if k == "Namespace" && name(&o) == "hap-system" {
                o["metadata"]["name"] = json!(p.ns);
            }
            if k == "ClusterRole" || k == "ClusterRoleBinding" {
                o["metadata"]["name"] = json!(format!("{}-{}", name(&o), p.suffix));
            }
            if k == "ClusterRoleBinding" && o["roleRef"]["kind"] == "ClusterRole" {
                let n = o["roleRef"]["name"].as_str().unwrap().to_string();
                o["roleRef"]["name"] = json!(format!("{n}-{}", p.suffix));
            }
            if let Some(subjects) = o["subjects"].as_array_mut() {
                for s in subjects {
                    if let Some(ns) = ns_of(&s["namespace"]) {
                        s["namespace"] = ns;
                    }
                }
            }
            o
        })
        .collect()
}

/// `kubectl apply --dry-run=server` of these objects; returns stderr (warnings).
pub fn dry_run(objs: &[Value], what: &str) -> String {
    dry_run_in(&crate::support::kubeconfig(), objs, what)
}

/// `kubectl apply --dry-run=server` against the cluster of `kubeconfig` (e.g. the garden).
pub fn dry_run_in(kubeconfig: &std::path::Path, objs: &[Value], what: &str) -> String {
    let path = kubeconfig.to_str().expect("utf-8 path");
    let (ok, out, err) = kubectl_stdin(
        &["--kubeconfig", path, "apply", "--dry-run=server", "-f", "-"],
        Some(&stream(objs)),
    );
    assert!(ok, "{what}: server dry-run failed:\n{err}\n{out}");
    let applied = out
        .lines()
        .filter(|l| l.contains("(server dry run)"))
        .count();
    assert_eq!(
        applied,
        objs.len(),
        "{what}: every object is dry-run applied:\n{out}"
    );
    assert!(
        !err.contains("would violate PodSecurity"),
        "{what}: the Deployment must satisfy Pod Security `restricted`:\n{err}"
    );
    err
}

pub fn apply(objs: &[Value], what: &str) {
    let (ok, out, err) = kubectl_stdin(&["apply", "-f", "-"], Some(&stream(objs)));
    assert!(ok, "{what}: apply failed:\n{err}\n{out}");
}

/// `kubectl apply` of these objects to the cluster of `kubeconfig` (e.g. the separate garden).
pub fn apply_to(kubeconfig: &std::path::Path, objs: &[Value], what: &str) {
    let path = kubeconfig.to_str().expect("utf-8 path");
    let (ok, out, err) = kubectl_stdin(
        &["--kubeconfig", path, "apply", "-f", "-"],
        Some(&stream(objs)),
    );
    assert!(ok, "{what}: apply failed:\n{err}\n{out}");
}

pub fn is_rbac_or_sa(o: &Value) -> bool {
    matches!(
        kind(o),
        "ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding"
    )
}

/// Deletes what a test created, also when it fails.
pub struct Cleanup(pub Vec<Vec<String>>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for args in &self.0 {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let _ = kubectl(&args);
        }
    }
}

pub fn cleanup_for(objs: &[Value]) -> Vec<Vec<String>> {
    objs.iter()
        .filter(|o| matches!(kind(o), "ClusterRole" | "ClusterRoleBinding" | "Namespace"))
        .map(|o| {
            vec![
                "delete".into(),
                kind(o).to_lowercase(),
                name(o).into(),
                "--ignore-not-found".into(),
                "--wait=false".into(),
            ]
        })
        .collect()
}
