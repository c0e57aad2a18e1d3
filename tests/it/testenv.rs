//! The control-plane launcher itself: `up` is idempotent (a second `up` keeps the same healthy
//! processes), serves the real Gardener API with the landscape's objects, `up --garden` changes
//! the shape (a separate garden, no Gardener API in the first cluster), `restart-gardener-apiserver`
//! replaces only gardener-apiserver, and `down` stops exactly what `up` started (the garden's
//! processes too) and removes its state. Runs control planes of its own in a temporary
//! directory, beside the one the other tests use.

use std::path::{Path, PathBuf};
use std::process::Command;

fn testenv(args: &[&str]) -> (bool, String) {
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/testenv"))
        .args(args)
        .output()
        .expect("run e2e/testenv");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let bin = std::env::var_os("HAP_K8S_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let out = Command::new(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/build-control-plane.sh"),
            )
            .output()
            .expect("build-control-plane");
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        });
    let out = Command::new(bin.join("kubectl"))
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .expect("kubectl");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn pid(dir: &Path, component: &str) -> Option<u32> {
    let raw = std::fs::read_to_string(dir.join("run").join(format!("{component}.pid"))).ok()?;
    raw.split_whitespace().next().and_then(|p| p.parse().ok())
}

const COMPONENTS: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "gardener-apiserver",
];

fn pids(dir: &Path, components: &[&str]) -> Vec<u32> {
    let mut pids: Vec<u32> = components
        .iter()
        .map(|c| pid(dir, c).unwrap_or_else(|| panic!("pid file of {c} in {}", dir.display())))
        .collect();
    pids.sort();
    pids
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn up_twice_keeps_one_control_plane_and_down_leaves_nothing() {
    let dir: PathBuf = std::env::temp_dir().join(format!("hap-testenv-{}", std::process::id()));
    let d = dir.to_str().expect("utf-8 path");
    let (ok, out) = testenv(&["up", "--dir", d]);
    assert!(ok, "first up: {out}");
    assert!(
        out.contains(&format!("export KUBECONFIG={d}/kubeconfig")),
        "{out}"
    );
    let first = pids(&dir, &COMPONENTS);
    assert!(first.iter().all(|p| alive(*p)));
    // The Gardener API with what a landscape has before any binding.
    let kubeconfig = dir.join("kubeconfig");
    let (ok, out) = kubectl(
        &kubeconfig,
        &[
            "get",
            "cloudprofiles,controllerregistrations,projects",
            "-o",
            "name",
        ],
    );
    assert!(ok, "{out}");
    for name in [
        "cloudprofile.core.gardener.cloud/aws",
        "cloudprofile.core.gardener.cloud/azure",
        "cloudprofile.core.gardener.cloud/gcp",
        "cloudprofile.core.gardener.cloud/openstack",
        "cloudprofile.core.gardener.cloud/alicloud",
        "controllerregistration.core.gardener.cloud/provider-aws",
        "controllerregistration.core.gardener.cloud/networking-calico",
        "project.core.gardener.cloud/kyma",
    ] {
        assert!(out.lines().any(|l| l == name), "{name} in {out}");
    }
    assert!(
        dir.join("logs/audit.log").exists(),
        "kube-apiserver writes an audit log"
    );

    let (ok, out) = testenv(&["up", "--dir", d]);
    assert!(ok, "second up: {out}");
    assert_eq!(
        pids(&dir, &COMPONENTS),
        first,
        "a second up must not start anything new"
    );
    let (ok, out) = testenv(&["status", "--dir", d]);
    assert!(ok, "status: {out}");

    // gardener-apiserver alone: a new process, the rest untouched, the API back.
    let gardener = pid(&dir, "gardener-apiserver").expect("gardener pid");
    let (ok, out) = testenv(&["restart-gardener-apiserver", "--dir", d]);
    assert!(ok, "restart-gardener-apiserver: {out}");
    assert!(!alive(gardener), "the old gardener-apiserver is gone");
    let now = pid(&dir, "gardener-apiserver").expect("gardener pid");
    assert!(now != gardener && alive(now));
    for c in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        assert!(first.contains(&pid(&dir, c).expect("pid")), "{c} kept");
    }
    let (ok, out) = kubectl(&kubeconfig, &["get", "cloudprofile", "aws", "-o", "name"]);
    assert!(ok, "the Gardener API after the restart: {out}");
    let all_first: Vec<u32> = pids(&dir, &COMPONENTS);

    // Another shape: the operator's cluster without the Gardener API, and a separate garden.
    let (ok, out) = testenv(&["up", "--garden", "--dir", d]);
    assert!(ok, "up --garden: {out}");
    assert!(
        out.contains(&format!(
            "export HAP_GARDEN_KUBECONFIG={d}/garden/kubeconfig"
        )),
        "{out}"
    );
    for p in &all_first {
        assert!(!alive(*p), "the first shape was stopped ({p})");
    }
    assert!(pid(&dir, "gardener-apiserver").is_none_or(|p| !alive(p)));
    let ops = pids(&dir, &COMPONENTS[..3]);
    let garden = pids(&dir.join("garden"), &COMPONENTS);
    assert!(ops.iter().chain(&garden).all(|p| alive(*p)));
    let (ok, out) = kubectl(&kubeconfig, &["get", "cloudprofiles"]);
    assert!(!ok, "the operator's cluster serves no Gardener API: {out}");
    let (ok, out) = kubectl(
        &dir.join("garden/kubeconfig"),
        &["get", "project", "kyma", "-o", "name"],
    );
    assert!(ok, "the garden serves it: {out}");

    let (ok, out) = testenv(&["down", "--dir", d]);
    assert!(ok, "down: {out}");
    for pid in ops.iter().chain(&garden) {
        assert!(!alive(*pid), "process {pid} survived down");
    }
    assert!(!dir.exists(), "down removes its state directory");
    let (ok, _) = testenv(&["status", "--dir", d]);
    assert!(!ok, "status reports a stopped control plane as unhealthy");
}
