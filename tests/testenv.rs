//! The control-plane launcher itself: `up` is idempotent (a second `up` keeps the same healthy
//! processes) and `down` stops exactly what `up` started and removes its state. Runs a control
//! plane of its own in a temporary directory, beside the one the other tests use.

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

fn pids(dir: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = ["etcd", "kube-apiserver", "kube-controller-manager"]
        .iter()
        .map(|c| {
            let raw = std::fs::read_to_string(dir.join("run").join(format!("{c}.pid")))
                .expect("pid file");
            raw.split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
                .expect("pid")
        })
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
    let first = pids(&dir);
    assert!(first.iter().all(|p| alive(*p)));

    let (ok, out) = testenv(&["up", "--dir", d]);
    assert!(ok, "second up: {out}");
    assert_eq!(pids(&dir), first, "a second up must not start anything new");
    let (ok, out) = testenv(&["status", "--dir", d]);
    assert!(ok, "status: {out}");

    let (ok, out) = testenv(&["down", "--dir", d]);
    assert!(ok, "down: {out}");
    for pid in first {
        assert!(!alive(pid), "process {pid} survived down");
    }
    assert!(!dir.exists(), "down removes its state directory");
    let (ok, _) = testenv(&["status", "--dir", d]);
    assert!(!ok, "status reports a stopped control plane as unhealthy");
}
