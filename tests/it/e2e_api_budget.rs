//! `hap run --kube-api-qps/--kube-api-burst` as a process against the real kube-apiserver: the
//! flags reach the client the binary builds, so the requests the API server receives from it
//! (its audit log, by the ServiceAccount the operator runs as) arrive no faster than the budget.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

struct Operator(Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A namespace and a ServiceAccount in it (cluster-admin: this test is about pace, not rights),
/// and a kubeconfig with its token; the audit log records the ServiceAccount's requests.
fn service_account(ns: &str) -> (std::path::PathBuf, String, tempfile::TempDir) {
    let admin = kubeconfig();
    for args in [
        vec!["create", "namespace", ns],
        vec!["-n", ns, "create", "serviceaccount", "budget"],
    ] {
        let (ok, _, err) = kubectl(&args);
        assert!(ok, "kubectl {args:?}: {err}");
    }
    let binding = format!("{ns}-budget");
    let subject = format!("{ns}:budget");
    let (ok, _, err) = kubectl(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=cluster-admin",
        "--serviceaccount",
        &subject,
    ]);
    assert!(ok, "clusterrolebinding: {err}");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = sa_kubeconfig(&admin, dir.path(), ns, "budget", "kubeconfig");
    (path, format!("system:serviceaccount:{ns}:budget"), dir)
}

/// When the API server received each of the first `n` requests of `user`.
fn first_received(user: &str, n: usize) -> Vec<jiff::Timestamp> {
    let log = audit_log(&kubeconfig());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut got: Vec<jiff::Timestamp> = audit_events(&log, user)
            .iter()
            .filter_map(|e| e["requestReceivedTimestamp"].as_str()?.parse().ok())
            .collect();
        if got.len() >= n {
            got.sort();
            got.truncate(n);
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "only {} requests of {user} within 60 s",
            got.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn hap_run_keeps_to_the_request_budget_its_flags_set() {
    // At start the operator lists its CRDs, reads its last-known-good record, lists and watches
    // HapConfigs and claims and reads its Lease: several requests at once without a budget. At
    // 4 a second with a burst of 1, every one waits its quarter second.
    // The operator stops at start when the product's CRDs are not served (make test may run
    // this file first, on a fresh control plane): install them as every e2e test does.
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(client());
    let ns = format!("budget-{}", std::process::id());
    let (kc, user, _dir) = service_account(&ns);
    let _operator = Operator(
        Command::new(env!("CARGO_BIN_EXE_hap"))
            .args([
                "run",
                "--http-addr",
                "127.0.0.1:0",
                "--metrics-secure=false",
            ])
            .args(["--config-name", &ns, "--claim-namespace", &ns])
            .args(["--lease-namespace", &ns, "--leader-elect=false"])
            .args(["--kube-api-qps=4", "--kube-api-burst=1"])
            .env("KUBECONFIG", &kc)
            .env_remove("HAP_KUBE_API_QPS")
            .env_remove("HAP_KUBE_API_BURST")
            .env_remove("HAP_GARDEN_KUBECONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start hap run"),
    );
    let at = first_received(&user, 5);
    // Four tokens at 4 a second: a full second from the first request to the fifth, less what
    // the first request's own start-up (process, TLS handshake) may have delayed it. Without a
    // budget the five arrived within 48 ms.
    let span = (at[4] - at[0])
        .total(jiff::Unit::Millisecond)
        .unwrap_or(0.0);
    assert!(
        span >= 800.0,
        "5 requests of {user} within {span} ms at 4/s"
    );
    let binding = format!("{ns}-budget");
    let _ = kubectl(&["delete", "clusterrolebinding", &binding, "--wait=false"]);
    let _ = kubectl(&["delete", "namespace", &ns, "--wait=false"]);
}
