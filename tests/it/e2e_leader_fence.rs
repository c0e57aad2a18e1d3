//! End-to-end (real kube-apiserver): a leader that cannot prove it still leads stops writing.
//! A proxy in front of one replica holds every request it sends while a standby takes over: of
//! the writes that replica checked while leading and queued under its request budget, none
//! leaves it after the hand-over. A validating webhook of the test's own holds only the
//! leader's Lease renewals: the replica reports `hap_leader 0` when its fence ends, before its
//! lease could expire, and its run ends with a lost lease, not sitting in the hung renewal.

use crate::support;
use crate::support::http_hold_proxy;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use hap_operator::controller::{Handle, RunArgs, RunError};
use hap_operator::k8s::Cluster;
use hap_operator::k8s::clients::{ApiLimits, from_kubeconfig};
use hap_operator::webhook::tls::{ReloadingCert, server_config};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::{Value, json};
use support::platform::{Certs, kubectl_at};
use support::{Hap, eventually, kubeconfig, unique};

/// What the test's webhook does with Lease writes of `holder`.
#[derive(Default)]
struct Seen {
    /// Hold them from now on.
    hold: bool,
    /// When the first one was held.
    first_held: Option<Instant>,
}

#[derive(Clone)]
struct Gate {
    holder: String,
    seen: Arc<Mutex<Seen>>,
    go: Arc<tokio::sync::Notify>,
}

impl Gate {
    fn with<T>(&self, f: impl FnOnce(&mut Seen) -> T) -> T {
        f(&mut self.seen.lock().expect("lock"))
    }
}

async fn review(State(gate): State<Gate>, body: Bytes) -> String {
    let review: Value = serde_json::from_slice(&body).unwrap_or_default();
    let req = &review["request"];
    let holder = req["object"]["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or("");
    let held = holder == gate.holder
        && gate.with(|s| {
            if s.hold {
                s.first_held.get_or_insert_with(Instant::now);
            }
            s.hold
        });
    if held {
        // Below the registration's timeoutSeconds: the renewal hangs, it is not refused.
        let _ = tokio::time::timeout(Duration::from_secs(25), gate.go.notified()).await;
    }
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": req["uid"], "allowed": true},
    })
    .to_string()
}

/// Serves the test's webhook over TLS on 127.0.0.1; returns its port.
async fn serve(certs: &Certs, gate: Gate) -> u16 {
    let cert = ReloadingCert::new(certs.cert_file(), certs.key_file()).expect("cert");
    let acceptor =
        tokio_rustls::TlsAcceptor::from(server_config(Arc::new(cert), None).expect("tls"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let app = Router::new()
        .route("/validate", post(review))
        .with_state(gate);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                        .await;
                }
            });
        }
    });
    port
}

/// A ValidatingWebhookConfiguration for Lease writes in one namespace; deleted when dropped.
struct Registration(String);

impl Registration {
    fn register(port: u16, ca_bundle: &str, ns: &str) -> Self {
        let name = unique("hap-hung-renewal");
        let body = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": "hung-renewal.accountpool.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 30,
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate"), "caBundle": ca_bundle},
                "rules": [{"apiGroups": ["coordination.k8s.io"], "apiVersions": ["*"],
                    "resources": ["leases"], "operations": ["UPDATE"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            }],
        });
        let (ok, _, err) = kubectl_at(
            &kubeconfig(),
            &["apply", "-f", "-"],
            Some(&body.to_string()),
        );
        assert!(ok, "registering the webhook: {err}");
        Self(name)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = kubectl_at(
            &kubeconfig(),
            &[
                "delete",
                "validatingwebhookconfiguration",
                &self.0,
                "--ignore-not-found",
            ],
            None,
        );
    }
}

/// An operator in this process whose run's result the test reads.
struct Replica {
    handle: Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), RunError>>,
}

impl Replica {
    fn start(cluster: Cluster, args: RunArgs) -> Self {
        let handle = Handle::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let h = handle.clone();
        let task = tokio::spawn(async move {
            let stop = async move {
                let _ = rx.await;
            };
            hap_operator::controller::run_with(cluster, args, h, stop).await
        });
        Self {
            handle,
            stop: Some(tx),
            task,
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_renewal_steps_the_leader_down_before_its_lease_could_expire() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    let certs = Certs::new();
    let gate = Gate {
        holder: "leader-a".into(),
        seen: Arc::default(),
        go: Arc::default(),
    };
    let port = serve(&certs, gate.clone()).await;
    let _registration = Registration::register(port, &certs.ca_bundle(), &hap.claims_ns);

    let mut args = hap.run_args();
    args.leader_elect = true;
    args.lease_namespace = hap.claims_ns.clone();
    args.lease_name = unique("lease");
    args.identity = Some("leader-a".into());
    // Renewals every 2 s; the fence ends 5 s after a renewal was sent.
    let lease = Duration::from_secs(6);
    args.lease_duration_seconds = lease.as_secs();
    let mut replica = Replica::start(hap.client.clone().into(), args);
    eventually(Duration::from_secs(60), "the replica leads", || async {
        (replica.handle.metrics.leader.get() == 1).then_some(())
    })
    .await;

    gate.with(|s| s.hold = true);
    let held = eventually(Duration::from_secs(10), "a renewal held", || async {
        gate.with(|s| s.first_held)
    })
    .await;
    // The last renewal that was answered was sent before the held one, at `s`; the fence ends at
    // `s + lease − 1 s`, before any standby can see the lease expire (`s + lease` at the
    // earliest). By then the replica reports that it does not lead.
    let fence_ended = lease - Duration::from_secs(1);
    let stepped_down = tokio::time::timeout(fence_ended, async {
        while replica.handle.metrics.leader.get() != 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let waited = held.elapsed();
    gate.go.notify_waiters();
    assert!(
        stepped_down.is_ok(),
        "hap_leader still 1 {waited:?} after its renewal hung (lease {lease:?}, fence {fence_ended:?})"
    );
    // And it ends as a replica that lost its lease does: with an error, to come back a standby.
    let ended = tokio::time::timeout(Duration::from_secs(30), &mut replica.task)
        .await
        .expect("the replica's run ends once it stepped down")
        .expect("the run did not panic");
    assert!(matches!(ended, Err(RunError::LostLeadership)), "{ended:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_queued_while_leading_do_not_leave_a_replica_after_the_hand_over() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    let lease_name = unique("lease");
    let lease = Duration::from_secs(4);
    let replica = |id: &str| {
        let mut args = hap.run_args();
        args.leader_elect = true;
        args.lease_namespace = hap.claims_ns.clone();
        args.lease_name = lease_name.clone();
        args.identity = Some(id.into());
        args.lease_duration_seconds = lease.as_secs();
        args
    };
    // Replica a reaches the API server only through the proxy, 4 requests a second: the claims
    // below give it a backlog of writes much longer than its lease.
    let proxy = http_hold_proxy::HttpHoldProxy::start(hap.client.clone()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = proxy.kubeconfig(dir.path().join("kubeconfig"));
    let limits = ApiLimits { qps: 4.0, burst: 4 };
    let via_proxy = from_kubeconfig(&kubeconfig, limits).await.expect("cluster");
    let mut a = Replica::start(via_proxy, replica("replica-a"));
    eventually(Duration::from_secs(60), "replica a leads", || async {
        (a.handle.metrics.leader.get() == 1).then_some(())
    })
    .await;
    let b = Replica::start(hap.client.clone().into(), replica("replica-b"));
    for i in 0..40 {
        hap.claim(
            &format!("c{i}"),
            json!({"globalAccount": format!("ga-{i}"), "plan": "aws"}),
        )
        .await;
    }
    let writes = || {
        proxy
            .arrivals()
            .into_iter()
            .filter(|r| r.is_write())
            .count()
    };
    eventually(Duration::from_secs(60), "replica a writes", || async {
        (writes() >= 8).then_some(())
    })
    .await;
    proxy.hold();
    let held = Instant::now();
    eventually(Duration::from_secs(60), "replica b takes over", || async {
        (b.handle.metrics.leader.get() == 1).then_some(())
    })
    .await;
    let took_over = Instant::now();
    // Until replica a's run ends (it stepped down) nothing it queued may leave it; a replica
    // that keeps running sends its backlog at 4 a second meanwhile.
    let ended = tokio::time::timeout(Duration::from_secs(20), &mut a.task).await;
    proxy.release();
    let arrivals = proxy.arrivals();
    let late: Vec<String> = arrivals
        .iter()
        .filter(|r| r.is_write() && r.at >= took_over)
        .map(|r| {
            format!(
                "{} {} at +{:?}",
                r.method,
                r.path,
                r.at.duration_since(held)
            )
        })
        .collect();
    let in_flight = arrivals
        .iter()
        .filter(|r| r.is_write() && r.held && r.at < took_over)
        .count();
    eprintln!(
        "replica a: {} writes sent, {in_flight} of them sent while held and before the hand-over \
         (in flight: they land after it), b took over {:?} after the hold",
        arrivals.iter().filter(|r| r.is_write()).count(),
        took_over.duration_since(held)
    );
    assert!(
        late.is_empty(),
        "replica a sent {} writes after replica b took over: {late:?}",
        late.len()
    );
    assert_eq!(a.handle.metrics.leader.get(), 0, "replica a's hap_leader");
    let ended = ended.expect("replica a's run ends within 20 s of the hand-over");
    assert!(
        matches!(ended, Ok(Err(RunError::LostLeadership))),
        "{ended:?}"
    );
    drop(b);
}
