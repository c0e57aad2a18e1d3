//! `hap run --kube-api-qps/--kube-api-burst` as a process: the flags reach the client the binary
//! builds, so its requests arrive at the API server no faster than the budget allows. The API
//! server is a stand-in that answers every request with an empty list and records when each
//! arrived (no control plane needed).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A server that answers every request with an empty list and records its arrival.
fn recording_server() -> (u16, Arc<Mutex<Vec<Instant>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let body =
            r#"{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"1"},"items":[]}"#;
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let log = log.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                if conn.read(&mut buf).unwrap_or(0) > 0 {
                    log.lock().expect("log").push(Instant::now());
                }
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    (port, seen)
}

struct Operator(Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The arrival times of the first `n` requests of `hap run` with `flags`, against a stand-in.
fn first_requests(flags: &[&str], n: usize) -> Vec<Instant> {
    let (port, seen) = recording_server();
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n\
             users: [{{name: u, user: {{}}}}]\n"
        ),
    )
    .expect("write kubeconfig");
    let _operator = Operator(
        Command::new(env!("CARGO_BIN_EXE_hap"))
            .args([
                "run",
                "--http-addr",
                "127.0.0.1:0",
                "--metrics-secure=false",
            ])
            .args(flags)
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("HAP_KUBE_API_QPS")
            .env_remove("HAP_KUBE_API_BURST")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start hap run"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut got = seen.lock().expect("log").clone();
        if got.len() >= n {
            got.sort();
            return got[..n].to_vec();
        }
        assert!(
            Instant::now() < deadline,
            "only {} requests within 30 s",
            got.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn hap_run_keeps_to_the_request_budget_its_flags_set() {
    // At start the operator lists its CRDs, reads its last-known-good record, lists and watches
    // HapConfigs and claims and reads its Lease: eight requests within ~0.1 s without a budget.
    // At 4 a second with a burst of 1, five of them take at least a second.
    let limited = first_requests(&["--kube-api-qps=4", "--kube-api-burst=1"], 5);
    let span = limited[4].duration_since(limited[0]);
    assert!(
        span >= Duration::from_millis(950),
        "5 requests within {span:?} at 4/s"
    );
}
