//! End-to-end on a private control plane (issue 19, the last stall of the full chaos run): claims
//! that changed while the operator could not watch them — the operator stopped, kube-apiserver
//! restarted meanwhile, so its claim watch has to list everything again — are reconciled as soon
//! as that list is in, not at the next sweep (`--resync`, ten minutes here).
//!
//! The list's objects reach the controller before the watch's store holds them (the store keeps
//! the old list until the new one is complete): a claim created and deleted while the operator
//! was away was looked up in a store that did not have it yet, and its only trigger was lost.

use crate::support;

// private_env is self-contained (examples/load/main.rs includes it alone), so it brings its own copy
// of support's crd_wait module.
use crate::support::private_env;

use std::path::Path;
use std::time::Duration;

use hap_operator::api::{AccountClaim, CLAIM_FINALIZER};
use kube::api::{DeleteParams, PostParams};
use private_env::{OperatorProcess, PrivateEnv};
use serde_json::json;
use support::slow_proxy::SlowProxy;
use support::*;

/// How long a released claim may take to go once the operator runs again: its watch reconnects
/// with backoff, lists the claims again in two pages, and every request is a second late (11.6 s
/// measured on the loaded 2-core machine). Before the fix the unseen claim was not reconciled at
/// all after the list; the sweep would have come after ten minutes.
const RELEASE_BOUND: Duration = Duration::from_secs(25);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_deleted_while_the_operator_was_away_are_released_after_its_relist() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("relist-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("work dir");
    let env = PrivateEnv::up(&dir.join("testenv"));
    use_kubeconfig(env.kubeconfig.clone());
    let rules = ["aws", r#"aws(PR=cf-us21) deny "closed""#];
    let hap = Hap::without_operator(&rules, json!({})).await;
    for i in 0..2 {
        hap.binding(&format!("aws-{i}"), "aws", &[("hyperscalerType", "aws")])
            .await;
    }
    // More claims than one page of a list (250), so that the list after the restart takes two
    // pages; denied, so settled: they need no reconcile and take no worker from the others.
    let fillers = 260;
    for i in 0..fillers {
        let spec = json!({"globalAccount": "ga-x", "plan": "aws", "platformRegion": "cf-us21"});
        hap.claim(&format!("z-{i:04}"), spec).await;
    }
    // Every request of the operator arrives a second late: the list's second page comes a
    // second after its first, whose claims the controller meanwhile looks up in the store.
    let proxy = SlowProxy::start(
        SlowProxy::target_of(&env.kubeconfig),
        Duration::from_secs(1),
    )
    .await;
    let slow = proxy.kubeconfig(&env.kubeconfig, dir.join("slow.kubeconfig"));
    let args: Vec<String> = [
        "--config-name",
        &hap.config,
        "--claim-namespace",
        &hap.claims_ns,
        "--mark-ignored-configs=false",
        "--leader-elect=false",
        // The safety-net sweep must not be what releases them.
        "--resync=10m",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let log = dir.join("operator.log");
    let op = OperatorProcess::spawn(
        Path::new(env!("CARGO_BIN_EXE_hap")),
        &slow,
        "relist",
        &args,
        &log,
    );
    eventually(
        Duration::from_secs(120),
        "the operator is ready",
        || async { op.get("/readyz").filter(|(code, _)| *code == 200).map(drop) },
    )
    .await;
    // A claim the operator's store holds, Bound.
    hap.claim("seen", json!({"globalAccount": "ga-1", "plan": "aws"}))
        .await;
    hap.bound("seen").await;
    let claims = hap.claims();
    eventually(Duration::from_secs(120), "every filler denied", || async {
        let list = claims.list(&Default::default()).await.ok()?;
        let denied = list
            .items
            .iter()
            .filter(|c| {
                c.status.as_ref().is_some_and(|s| {
                    condition(&s.conditions, "Ready").is_some_and(|r| r.reason == "Denied")
                })
            })
            .count();
        (denied == fillers).then_some(())
    })
    .await;

    assert!(op.signal("STOP"), "SIGSTOP the operator");
    // First the old kube-apiserver goes: it would push the events below into the stopped
    // operator's open watch connection, to be read on SIGCONT.
    env.restart_apiserver(Duration::from_millis(500));
    // While it is away: a claim it never saw (first in the list's order), created with its finalizer and deleted at once
    // (a request's claim the webhook takes back), and the Bound one deleted.
    let mut unseen: AccountClaim = serde_json::from_value(json!({
        "apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
        "metadata": {"name": "a-unseen", "finalizers": [CLAIM_FINALIZER]},
        "spec": {"globalAccount": "ga-2", "plan": "aws"},
    }))
    .expect("claim");
    unseen.metadata.namespace = Some(hap.claims_ns.clone());
    claims
        .create(&PostParams::default(), &unseen)
        .await
        .expect("create claim unseen");
    for name in ["a-unseen", "seen"] {
        claims
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete claim");
    }
    // The operator's watch must not resume where it stopped: the new kube-apiserver's watch
    // cache starts after it, and etcd's history up to now is compacted (a watch served from etcd
    // while that cache starts), so the resumed watch is told its resourceVersion is too old
    // (410) and the claims are listed again.
    compact_etcd(&dir.join("testenv"));
    assert!(op.signal("CONT"), "SIGCONT the operator");

    let started = std::time::Instant::now();
    for name in ["seen", "a-unseen"] {
        let api = claims.clone();
        eventually(
            RELEASE_BOUND,
            &format!(
                "claim {name} released (finalizer removed) after the relist; log {}",
                log.display()
            ),
            || {
                let api = api.clone();
                async move { api.get_opt(name).await.ok()?.is_none().then_some(()) }
            },
        )
        .await;
    }
    eprintln!("both claims released {:?} after SIGCONT", started.elapsed());
    // "seen" was Bound: its binding is marked dirty for the cleanup job.
    eventually(
        Duration::from_secs(10),
        "one binding marked dirty",
        || async {
            let mut dirty = 0;
            for i in 0..2 {
                let labels = hap.labels(&format!("aws-{i}")).await;
                dirty += labels.keys().filter(|k| k.ends_with("dirty")).count();
            }
            (dirty == 1).then_some(())
        },
    )
    .await;
    drop(op);
    drop(env);
    if std::env::var_os("HAP_KEEP_LOGS").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Compacts the private etcd's history up to its current revision (etcd's JSON gateway).
fn compact_etcd(env_dir: &Path) {
    let port: u16 = std::fs::read_to_string(env_dir.join("run/etcd-port"))
        .expect("etcd port")
        .trim()
        .parse()
        .expect("etcd port number");
    let range = etcd_post(port, "/v3/kv/range", &json!({"key": "AA=="}));
    let revision = range["header"]["revision"]
        .as_str()
        .expect("etcd revision")
        .to_string();
    let done = etcd_post(
        port,
        "/v3/kv/compaction",
        &json!({"revision": revision, "physical": true}),
    );
    assert!(done.get("header").is_some(), "etcd compaction: {done}");
}

fn etcd_post(port: u16, path: &str, body: &serde_json::Value) -> serde_json::Value {
    use std::io::{Read, Write};
    let body = body.to_string();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect etcd");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read etcd answer");
    let json = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    // A chunked answer: the JSON object between its first `{` and last `}`.
    let (start, end) = (json.find('{'), json.rfind('}'));
    let json = match (start, end) {
        (Some(a), Some(b)) => &json[a..=b],
        _ => panic!("etcd {path}: {out}"),
    };
    serde_json::from_str(json).unwrap_or_else(|e| panic!("etcd {path}: {e}: {out}"))
}
