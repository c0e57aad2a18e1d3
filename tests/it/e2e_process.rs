//! End-to-end (real kube-apiserver): `hap run` as a process — probes and metrics over HTTP, two
//! replicas with leader election (only the leader acts; the standby takes over when the leader
//! dies), and a clean exit on SIGTERM.

use crate::support;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::*;

struct Replica {
    child: Child,
    port: u16,
}

impl Replica {
    fn start(hap: &Hap, identity: &str, lease: &str) -> Self {
        Self::start_with_lease(hap, identity, lease, 4)
    }

    fn start_with_lease(hap: &Hap, identity: &str, lease: &str, duration_seconds: u32) -> Self {
        Self::start_via(hap, identity, lease, duration_seconds, &kubeconfig())
    }

    fn start_via(
        hap: &Hap,
        identity: &str,
        lease: &str,
        duration_seconds: u32,
        kubeconfig: &std::path::Path,
    ) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let log =
            std::fs::File::create(std::env::temp_dir().join(format!("{lease}-{identity}.log")))
                .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_hap"))
            .args([
                "run",
                "--config-name",
                &hap.config,
                "--claim-namespace",
                &hap.claims_ns,
                "--mark-ignored-configs=false",
            ])
            .args([
                "--leader-elect=true",
                "--lease-name",
                lease,
                "--lease-namespace",
                &hap.claims_ns,
                "--identity",
                identity,
            ])
            .args([
                "--lease-duration-seconds",
                &duration_seconds.to_string(),
                "--http-addr",
                &format!("127.0.0.1:{port}"),
                // Leadership is read off the plain /metrics (tests/it/e2e_metrics_auth.rs covers
                // the HTTPS one).
                "--metrics-secure=false",
                "--log-format",
                "json",
            ])
            .env("KUBECONFIG", kubeconfig)
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn hap run");
        Self { child, port }
    }

    async fn get(&self, path: &str) -> Option<(u16, String)> {
        let (port, path) = (self.port, path.to_string());
        tokio::task::spawn_blocking(move || http_get(port, &path))
            .await
            .ok()?
    }

    async fn is_leader(&self) -> bool {
        self.get("/metrics")
            .await
            .is_some_and(|(_, body)| body.lines().any(|l| l.trim() == "hap_leader 1"))
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success();
        assert!(ok);
        for _ in 0..150 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("hap run did not exit within 15s of SIGTERM");
    }
}

/// The JSON log lines a replica wrote so far (`--log-format json`).
fn log_lines(lease: &str, identity: &str) -> Vec<serde_json::Value> {
    let path = std::env::temp_dir().join(format!("{lease}-{identity}.log"));
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A minimal HTTP/1.1 GET, enough for the operator's probe and metrics endpoints.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, buf))
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_elect_one_leader_and_fail_over() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    for i in 0..4 {
        hap.binding(&format!("aws-{i}"), "aws", &[("hyperscalerType", "aws")])
            .await;
    }
    let lease = unique("lease");
    let mut a = Replica::start(&hap, "replica-a", &lease);
    eventually(Duration::from_secs(30), "replica a leads", || async {
        a.is_leader().await.then_some(())
    })
    .await;
    let b = Replica::start(&hap, "replica-b", &lease);
    eventually(
        Duration::from_secs(30),
        "replica b serves /readyz",
        || async {
            b.get("/readyz")
                .await
                .filter(|(code, _)| *code == 200)
                .map(|_| ())
        },
    )
    .await;
    assert!(!b.is_leader().await, "only one leader");
    let (code, _) = a.get("/livez").await.expect("livez");
    assert_eq!(code, 200);

    hap.claim("c1", json!({"globalAccount": "ga-1", "plan": "aws"}))
        .await;
    let first = hap.bound("c1").await;
    // Pool gauges follow the inventory on the next coalesced tick.
    let names = [
        "hap_available_credentials_bindings{hyperscaler_type=\"aws\"} 3",
        "hap_claimed_credentials_bindings{hyperscaler_type=\"aws\"} 1",
        "hap_credentials_bindings_per_global_account{global_account=\"ga-1\"} 1",
        "hap_claim_outcomes_total{outcome=\"Claimed\"} 1",
        "hap_claim_bind_duration_seconds_count{hyperscaler_type=\"aws\"} 1\n",
        "hap_reconcile_duration_seconds_count{controller=\"accountclaim\"}",
    ];
    eventually(
        Duration::from_secs(20),
        "pool and claim metrics on /metrics",
        || async {
            let body = a.get("/metrics").await?.1;
            names.iter().all(|n| body.contains(n)).then_some(())
        },
    )
    .await;

    // SIGTERM: the leader drains, releases the lease and exits 0; the standby takes over.
    let status = a.terminate();
    assert!(status.success(), "clean exit on SIGTERM, got {status:?}");
    // The claim reconcile's span fields are on its lines, flat, under Gardener's keys.
    let claimed = log_lines(&lease, "replica-a")
        .into_iter()
        .find(|l| l["msg"] == "Claimed a free binding for the tenant")
        .expect("replica a logged the claim write");
    let c1 = format!("{}/c1", hap.claims_ns);
    assert_eq!(
        (&claimed["claim"], &claimed["tenant"], &claimed["binding"]),
        (&json!(c1), &json!("ga-1"), &json!(first)),
        "{claimed}"
    );
    assert_eq!(
        (&claimed["level"], &claimed["controller"]),
        (&json!("info"), &json!("accountclaim"))
    );
    assert!(
        claimed["ts"].is_string() && claimed["logger"].is_string(),
        "{claimed}"
    );
    eventually(Duration::from_secs(30), "replica b takes over", || async {
        b.is_leader().await.then_some(())
    })
    .await;
    eventually(
        Duration::from_secs(30),
        "replica b logs its take-over",
        || async {
            log_lines(&lease, "replica-b")
                .into_iter()
                .find(|l| {
                    l["msg"] == "took over with a current inventory" && l["phase"] == "takeOver"
                })
                .map(drop)
        },
    )
    .await;
    hap.claim("c2", json!({"globalAccount": "ga-1", "plan": "aws"}))
        .await;
    assert_eq!(
        hap.bound("c2").await,
        first,
        "the new leader reuses the tenant's binding"
    );
    hap.claim("c3", json!({"globalAccount": "ga-2", "plan": "aws"}))
        .await;
    assert_ne!(hap.bound("c3").await, first);
}

/// A leader whose API server answers every request 3 s late (a lease of 6 s: writes allowed for
/// 5 s after each renewal) keeps its lease and binds a backlog of claims. Two faults made it lose
/// the lease at its first renewal:
/// - The fence used to be measured from the read before each renewal, and a renewal was a read and
///   a write: 6 s, so the fence had run out by the time the first renewal came back (what the full
///   chaos run showed on a loaded machine: leaders fenced from their first write).
/// - Renewals shared one connection pool with the controllers. When the controllers' first writes,
///   sent the moment the lease was taken, took the open connection before the first renewal did,
///   the renewal went out on a new one: a TLS handshake through the slow link plus the request
///   (6 s), past the 5 s a renewal may take (once in eight fresh-clone CI runs). A backlog makes
///   those writes many; `k8s::clients`' unit test makes the race certain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_behind_a_slow_api_server_keeps_its_lease_and_binds() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    const BACKLOG: usize = 5;
    for i in 0..BACKLOG {
        hap.binding(
            &format!("aws-slow-{i}"),
            "aws",
            &[("hyperscalerType", "aws")],
        )
        .await;
        hap.claim(
            &format!("c-slow-{i}"),
            json!({"globalAccount": format!("ga-slow-{i}"), "plan": "aws"}),
        )
        .await;
    }
    let proxy = slow_proxy::SlowProxy::start(
        slow_proxy::SlowProxy::target_of(&kubeconfig()),
        Duration::from_secs(3),
    )
    .await;
    let lease = unique("lease");
    let via = proxy.kubeconfig(
        &kubeconfig(),
        std::env::temp_dir().join(format!("{lease}-slow.kubeconfig")),
    );
    let mut a = Replica::start_via(&hap, "replica-slow", &lease, 6, &via);
    let claims = hap.claims();
    let mut bound = std::collections::BTreeSet::new();
    for i in 0..BACKLOG {
        let name = format!("c-slow-{i}");
        bound.insert(
            eventually(
                Duration::from_secs(120),
                &format!("{name} bound"),
                || async {
                    let s = claims.get(&name).await.ok()?.status?;
                    (s.phase == Some(hap_operator::api::ClaimPhase::Bound)).then_some(())?;
                    s.credentials_binding_name
                },
            )
            .await,
        );
    }
    assert_eq!(bound.len(), BACKLOG, "one binding per tenant: {bound:?}");
    assert!(
        a.child.try_wait().expect("replica status").is_none(),
        "the replica is still running"
    );
    assert!(a.is_leader().await, "still leading");
    let _ = std::fs::remove_file(via);
}

/// A leader that stops cleanly releases the Lease, and the waiting standby takes it at once —
/// long before the old lease would expire — although it was idle, waiting for that expiry. (The
/// lease manager's candidate only re-reads the Lease at expiry; before the fix a replacement
/// that started in between took the released Lease first.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_goes_to_the_waiting_standby_at_once() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    let lease = unique("lease");
    let duration = 30;
    let mut a = Replica::start_with_lease(&hap, "replica-a", &lease, duration);
    eventually(Duration::from_secs(30), "replica a leads", || async {
        a.is_leader().await.then_some(())
    })
    .await;
    let b = Replica::start_with_lease(&hap, "replica-b", &lease, duration);
    eventually(Duration::from_secs(30), "replica b waits", || async {
        b.get("/readyz")
            .await
            .filter(|(code, _)| *code == 200)
            .map(|_| ())
    })
    .await;
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(hap.client.clone(), &hap.claims_ns);
    let before = leases.get(&lease).await.unwrap().spec.unwrap();
    assert_eq!(before.holder_identity.as_deref(), Some("replica-a"));
    let expiry = before
        .renew_time
        .unwrap()
        .0
        .checked_add(jiff::SignedDuration::from_secs(i64::from(duration)))
        .unwrap();

    assert!(a.terminate().success());
    let after = eventually(Duration::from_secs(60), "replica b holds the Lease", || {
        let (leases, lease) = (leases.clone(), lease.clone());
        async move {
            let spec = leases.get(&lease).await.ok()?.spec?;
            (spec.holder_identity.as_deref() == Some("replica-b")).then_some(spec)
        }
    })
    .await;
    let acquired = after.acquire_time.unwrap().0;
    assert!(
        acquired < expiry,
        "replica b took the Lease at {acquired}: it must take the released Lease at once, not wait for the old lease to expire at {expiry}"
    );
    eventually(Duration::from_secs(30), "replica b leads", || async {
        b.is_leader().await.then_some(())
    })
    .await;
}
