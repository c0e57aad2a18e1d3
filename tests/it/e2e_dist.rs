//! End-to-end (real kube-apiserver and gardener-apiserver): what `make release` publishes. Two runs
//! of scripts/release.sh give byte-identical files and a SHA256SUMS that verifies; the chart
//! package pins the image digest of the archive; the chart package installs with `helm install`
//! (and a typo in the values fails it, naming the key, while a KEB-shaped values file installs);
//! the kustomize bundle's release overlay and the CRD bundle install with kubectl.
//!
//! The image archive is `HAP_IMAGE_ARCHIVE` (scripts/test.sh passes the one it built), else
//! scripts/image.sh builds it (cached); helm is `HAP_HELM`, else e2e/build-helm.sh.

use crate::support;

use crate::support::deploy;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use deploy::*;
use serde_json::{Value, json};
use support::*;

/// The image archive the release packs.
fn image_archive() -> PathBuf {
    if let Some(p) = std::env::var_os("HAP_IMAGE_ARCHIVE") {
        return PathBuf::from(p);
    }
    let (ok, out, err) = run(&mut Command::new(repo_root().join("scripts/image.sh")));
    assert!(ok, "scripts/image.sh: {err}");
    PathBuf::from(out.trim())
}

fn version() -> String {
    let cargo = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    cargo
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("version in Cargo.toml")
        .to_string()
}

/// One run of scripts/release.sh into `out`.
fn release_into(out: &Path) {
    let (ok, stdout, err) = run(Command::new(repo_root().join("scripts/release.sh"))
        .args(["--out", out.to_str().unwrap(), "--image-archive"])
        .arg(image_archive())
        .env("HAP_HELM", helm_path())
        .env("KUBECTL", kubectl_path()));
    assert!(ok, "scripts/release.sh: {err}");
    assert_eq!(stdout.trim(), out.to_str().unwrap(), "{err}");
}

/// The release, built once per test process (the determinism test builds its own two).
fn dist() -> &'static Path {
    static DIST: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIST.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        release_into(dir.path());
        dir
    })
    .path()
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

fn digest() -> String {
    std::fs::read_to_string(dist().join("image.digest"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn two_release_builds_are_byte_identical_and_checksummed() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    release_into(a.path());
    release_into(b.path());
    let (fa, fb) = (files(a.path()), files(b.path()));
    let v = version();
    let expected = [
        "SHA256SUMS".to_string(),
        format!("hap-operator-{v}-crds.yaml"),
        format!("hap-operator-{v}-install.yaml"),
        format!("hap-operator-{v}-kustomize.tar.gz"),
        format!("hap-operator-{v}.oci.tar"),
        format!("hap-operator-{v}.tgz"),
        "image.digest".to_string(),
    ];
    assert_eq!(
        fa.keys().cloned().collect::<Vec<_>>(),
        expected,
        "what a release holds"
    );
    for (name, bytes) in &fa {
        assert!(
            bytes == &fb[name],
            "{name} differs between two release builds of the same commit"
        );
    }
    // SHA256SUMS lists every other file, and each sum is right.
    let sums = String::from_utf8(fa["SHA256SUMS"].clone()).unwrap();
    let listed: Vec<&str> = sums
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(listed, expected[1..], "{sums}");
    let (ok, out, err) = run(Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(a.path()));
    assert!(ok, "sha256sum --check: {out}{err}");
    // The CRD bundle is crds/ as committed.
    assert_eq!(
        fa[&format!("hap-operator-{v}-crds.yaml")],
        std::fs::read(repo_root().join("crds/accountpool.io.yaml")).unwrap()
    );
}

/// The digest is the archive's manifest, and the chart package's default values and the
/// rendered kustomize install pin it.
#[test]
fn the_release_pins_the_image_digest_of_its_archive() {
    let v = version();
    let digest = digest();
    let (ok, index, err) = run(Command::new("tar")
        .args(["-xOf"])
        .arg(dist().join(format!("hap-operator-{v}.oci.tar")))
        .arg("index.json"));
    assert!(ok, "{err}");
    let index: Value = serde_json::from_str(&index).unwrap();
    assert_eq!(index["manifests"][0]["digest"], json!(digest));
    let (ok, values, err) = run(Command::new("tar")
        .args(["-xzOf"])
        .arg(dist().join(format!("hap-operator-{v}.tgz")))
        .arg("hap-operator/values.yaml"));
    assert!(ok, "{err}");
    let values: Value = serde_saphyr::from_str(&values).unwrap();
    assert_eq!(values["image"]["digest"], json!(digest));
    let install =
        std::fs::read_to_string(dist().join(format!("hap-operator-{v}-install.yaml"))).unwrap();
    let objs = parse_stream(&install);
    let image = &find(&objs, "Deployment", "hap-operator")["spec"]["template"]["spec"]["containers"]
        [0]["image"];
    assert_eq!(
        image,
        &json!(format!("ghcr.io/hap-operator/hap-operator@{digest}"))
    );
}

/// One JSON file of the image archive (an OCI layout).
fn archive_json(archive: &Path, path: &str) -> Value {
    let (ok, text, err) = run(Command::new("tar").arg("-xOf").arg(archive).arg(path));
    assert!(ok, "tar -xOf {} {path}: {err}", archive.display());
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

/// The blob a descriptor's `digest` names (`sha256:<hex>` is `blobs/sha256/<hex>`).
fn blob_of(archive: &Path, descriptor: &Value) -> Value {
    let digest = descriptor["digest"]
        .as_str()
        .expect("a descriptor's digest");
    archive_json(archive, &format!("blobs/{}", digest.replacen(':', "/", 1)))
}

/// The image's own configuration, as the kubelet starts it: a numeric non-root user, and the
/// allocator kept off transparent huge pages and giving freed memory back at once (without, a
/// refresh's lists showed as RSS rises of 18-39 MiB at 30k objects over a higher level;
/// BENCHMARKS.md, Churn). A Deployment's `env` can override them. The benchmarks run the image's
/// binary with what `containerfile_env` reads, so it must read what buildah wrote.
#[test]
fn the_image_runs_non_root_with_the_allocators_settings() {
    let archive = image_archive();
    let index = archive_json(&archive, "index.json");
    let manifest = blob_of(&archive, &index["manifests"][0]);
    let config = &blob_of(&archive, &manifest["config"])["config"];
    assert_eq!(config["User"], json!("65532:65532"), "{config}");
    let env: Vec<&str> = config["Env"]
        .as_array()
        .map(|e| e.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let read: Vec<String> = support::private_env::containerfile_env()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let from_file: Vec<&str> = env
        .iter()
        .copied()
        .filter(|e| !e.starts_with("PATH="))
        .collect();
    assert_eq!(
        from_file, read,
        "the image's Env against the Containerfile as the benchmarks read it"
    );
    for setting in IMAGE_ALLOCATOR_ENV {
        assert!(
            env.contains(&setting),
            "the image's environment {env:?} lacks {setting}"
        );
    }
}

/// What the Containerfile sets, and what the benchmarks of the image's build run with.
const IMAGE_ALLOCATOR_ENV: [&str; 2] = ["MIMALLOC_ALLOW_THP=0", "MIMALLOC_PURGE_DELAY=0"];

/// `helm --kubeconfig <test cluster> <args>`.
fn helm(args: &[&str]) -> (bool, String, String) {
    run(Command::new(helm_path())
        .arg("--kubeconfig")
        .arg(kubeconfig())
        .args(args))
}

/// Uninstalls a Helm release when dropped, also when the test fails.
struct Uninstall(String, String);

impl Drop for Uninstall {
    fn drop(&mut self) {
        let _ = helm(&["uninstall", &self.0, "-n", &self.1, "--wait=false"]);
    }
}

fn deployment_image(ns: &str, name: &str) -> String {
    let (ok, out, err) = kubectl(&[
        "get",
        "deployment",
        name,
        "-n",
        ns,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert!(ok, "get deployment {ns}/{name}: {err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_package_installs_with_helm_and_a_typo_fails() {
    let client = client().await;
    let ns = namespace(&client, "hapdist").await;
    let bindings_ns = project(&client).await;
    let chart = dist().join(format!("hap-operator-{}.tgz", version()));
    let chart = chart.to_str().unwrap();
    let binding = format!("bindingNamespace={bindings_ns}");
    let _ns = Cleanup(vec![vec![
        "delete".into(),
        "namespace".into(),
        ns.clone(),
        "--wait=false".into(),
    ]]);

    let release = unique("hapdist");
    let _uninstall = Uninstall(release.clone(), ns.clone());
    let (ok, out, err) = helm(&["install", &release, chart, "-n", &ns, "--set", &binding]);
    assert!(ok, "helm install {chart}: {out}\n{err}");
    assert_eq!(
        deployment_image(&ns, &format!("{release}-hap-operator")),
        format!("ghcr.io/hap-operator/hap-operator@{}", digest()),
        "the installed Deployment runs the released image by digest"
    );

    // A typo in the chart's own subtrees fails the install and names the key.
    for (typo, key) in [
        ("webhook.certmanager.enabled=true", "certmanager"),
        ("sources.runtimes.enable=true", "enable"),
        ("replicaCout=3", "replicaCout"),
    ] {
        let (ok, out, err) = helm(&[
            "install",
            &unique("haptypo"),
            chart,
            "-n",
            &ns,
            "--set",
            &binding,
            "--set",
            typo,
        ]);
        assert!(!ok, "helm install with {typo} succeeded: {out}");
        assert!(
            err.contains(&format!("'{key}' not allowed")),
            "the error names {key}: {err}"
        );
    }

    // A values file shaped like Kyma Environment Broker's (every top-level key of upstream
    // resources/keb/values.yaml) installs; its HapConfig is rendered from hap.rule.
    let keb = repo_root().join("tests/data/keb-values-shape.yaml");
    let release = unique("hapkeb");
    let config = unique("hapkeb");
    let _uninstall_keb = Uninstall(release.clone(), ns.clone());
    let _config = Cleanup(vec![vec![
        "delete".into(),
        "hapconfig".into(),
        config.clone(),
        "--ignore-not-found".into(),
    ]]);
    let (ok, out, err) = helm(&[
        "install",
        &release,
        chart,
        "-n",
        &ns,
        "-f",
        keb.to_str().unwrap(),
        "--set",
        &binding,
        "--set",
        &format!("fullnameOverride={release}"),
        "--set",
        &format!("config.name={config}"),
    ]);
    assert!(ok, "helm install with a KEB values file: {out}\n{err}");
    let (ok, rules, err) = kubectl(&[
        "get",
        "hapconfig",
        &config,
        "-o",
        "jsonpath={.spec.ruleSyntax}",
    ]);
    assert!(ok && rules == "KEB", "{rules} {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kustomize_bundle_and_the_crd_bundle_install_with_kubectl() {
    let client = client().await;
    let v = version();
    // The CRD bundle, as a user applies it (the test cluster already serves these CRDs from
    // crds/: applying the same objects succeeds and changes nothing).
    let crds = dist().join(format!("hap-operator-{v}-crds.yaml"));
    let (ok, out, err) = kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        crds.to_str().unwrap(),
    ]);
    assert!(ok, "kubectl apply the CRD bundle: {out}\n{err}");
    assert!(
        out.contains("hapconfigs.accountpool.io serverside-applied"),
        "{out}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (ok, _, err) = run(Command::new("tar")
        .arg("-xzf")
        .arg(dist().join(format!("hap-operator-{v}-kustomize.tar.gz")))
        .arg("-C")
        .arg(dir.path()));
    assert!(ok, "untar the kustomize bundle: {err}");
    let overlay = dir
        .path()
        .join(format!("hap-operator-kustomize-{v}/overlays/release"));
    let (ok, rendered, err) = kubectl(&["kustomize", overlay.to_str().unwrap()]);
    assert!(ok, "kubectl kustomize overlays/release: {err}");
    let objs = parse_stream(&rendered);
    // The bundle's overlay is what hap-operator-<v>-install.yaml holds.
    let install =
        std::fs::read_to_string(dist().join(format!("hap-operator-{v}-install.yaml"))).unwrap();
    assert_eq!(objs, parse_stream(&install));

    // Installed for real, moved into the test's own namespaces and cluster-scoped names.
    let place = Place {
        ns: unique("hapdist"),
        bindings_ns: project(&client).await,
        suffix: unique("dist"),
    };
    let objs: Vec<Value> = relocate(&objs, &place)
        .into_iter()
        .filter(|o| kind(o) != "CustomResourceDefinition")
        .map(|mut o| {
            // Cluster-scoped API Priority and Fairness objects, renamed like the RBAC.
            if matches!(kind(&o), "FlowSchema" | "PriorityLevelConfiguration") {
                o["metadata"]["name"] = json!(format!("{}-{}", name(&o), place.suffix));
            }
            if kind(&o) == "FlowSchema" {
                let plc = o["spec"]["priorityLevelConfiguration"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string();
                o["spec"]["priorityLevelConfiguration"]["name"] =
                    json!(format!("{plc}-{}", place.suffix));
            }
            o
        })
        .collect();
    let mut cleanup = cleanup_for(&objs);
    for o in objs
        .iter()
        .filter(|o| matches!(kind(o), "FlowSchema" | "PriorityLevelConfiguration"))
    {
        cleanup.push(vec![
            "delete".into(),
            kind(o).to_lowercase(),
            name(o).into(),
            "--ignore-not-found".into(),
        ]);
    }
    let _cleanup = Cleanup(cleanup);
    apply(&objs, "the released kustomize overlay");
    assert_eq!(
        deployment_image(&place.ns, "hap-operator"),
        format!("ghcr.io/hap-operator/hap-operator@{}", digest())
    );
}

/// A release is HEAD: a work tree with a change not committed (or a file not tracked) is refused
/// at once, naming the files, before any image, chart or bundle is built.
#[test]
fn a_dirty_work_tree_is_refused_before_anything_is_built() {
    let repo = tempfile::tempdir().expect("tempdir");
    let root = repo.path();
    std::fs::create_dir_all(root.join("scripts")).unwrap();
    std::fs::copy(
        repo_root().join("scripts/release.sh"),
        root.join("scripts/release.sh"),
    )
    .unwrap();
    std::fs::write(root.join("Cargo.toml"), "version = \"9.9.9\"\n").unwrap();
    let git = |args: &[&str]| {
        let (ok, _, err) = run(Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(root));
        assert!(ok, "git {args:?}: {err}");
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "release"]);
    std::fs::write(root.join("Cargo.toml"), "version = \"9.9.10\"\n").unwrap();
    std::fs::write(root.join("stray.yaml"), "kind: Stray\n").unwrap();
    let out = root.join("dist");
    let (ok, stdout, err) = run(Command::new(root.join("scripts/release.sh"))
        .args([
            "--out",
            out.to_str().unwrap(),
            "--image-archive",
            "/nonexistent.oci.tar",
        ])
        .env("HAP_HELM", "/nonexistent-helm")
        .env("KUBECTL", "/nonexistent-kubectl"));
    assert!(!ok, "a dirty tree was released: {stdout}\n{err}");
    assert!(
        err.contains("refusing to release from a work tree with changes not in HEAD")
            && err.contains("M Cargo.toml")
            && err.contains("?? stray.yaml")
            && err.contains("commit or remove these changes"),
        "{err}"
    );
    assert!(!out.exists(), "something was written to {}", out.display());
}
