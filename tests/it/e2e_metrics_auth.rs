//! `/metrics` names every global account served (issue 20, item 3). On the real kube-apiserver,
//! `hap run` with its default settings: the plain HTTP port serves the probes but no metrics; the
//! HTTPS `/metrics` answers 401 without a token or with a made-up one, 403 to a ServiceAccount
//! without the shipped ClusterRole `hap-operator-metrics-reader`, and the metrics (the tenant's
//! global account among them) to one bound to it — the operator asked kube-apiserver
//! (TokenReview, SubjectAccessReview).

use crate::support;

use crate::support::deploy;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::scrape::{https_get, scraper};
use support::*;

/// A GET over plain HTTP/1.0: (status, body).
fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s =
        std::net::TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, buf.split_once("\r\n\r\n")?.1.to_string()))
}

/// The address of the server whose start line begins with `message`, from the JSON log.
fn logged_addr(log: &str, message: &str) -> Option<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["msg"].as_str().is_some_and(|m| m.starts_with(message)))
        .and_then(|v| v["addr"].as_str().map(str::to_string))
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The shipped reader ClusterRole, under a name of this test's.
fn reader_role() -> (String, deploy::Cleanup) {
    let base = deploy::kustomize("deploy/kustomize/base");
    let mut role = deploy::find(&base, "ClusterRole", "hap-operator-metrics-reader").clone();
    let name = unique("hap-operator-metrics-reader");
    role["metadata"]["name"] = json!(name);
    deploy::apply(
        std::slice::from_ref(&role),
        "the metrics reader ClusterRole",
    );
    let cleanup = deploy::Cleanup(deploy::cleanup_for(std::slice::from_ref(&role)));
    (name, cleanup)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_only_to_tokens_allowed_to_read_them() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    hap.binding("aws-1", "aws", &[("hyperscalerType", "aws")])
        .await;
    let ga = unique("ga-secret");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("operator.log");
    let file = std::fs::File::create(&log).expect("log");
    // The defaults, but for the addresses (tests run in parallel) and this test's HapConfig.
    let child = Command::new(env!("CARGO_BIN_EXE_hap"))
        .args([
            "run",
            &format!("--config-name={}", hap.config),
            &format!("--claim-namespace={}", hap.claims_ns),
            "--mark-ignored-configs=false",
            "--leader-elect=false",
            "--http-addr=127.0.0.1:0",
            "--metrics-addr=127.0.0.1:0",
            "--log-format=json",
        ])
        .env("KUBECONFIG", kubeconfig())
        .env_remove("HAP_GARDEN_KUBECONFIG")
        .env("RUST_LOG", "info,kube=warn")
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log"))
        .stderr(file)
        .spawn()
        .expect("spawn hap run");
    let _op = Process(child);
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let http = eventually(Duration::from_secs(30), "the HTTP address", || async {
        logged_addr(&read_log(), "serving /livez")
    })
    .await;
    hap.claim(
        "c1",
        json!({"globalAccount": ga, "plan": "aws", "shootName": "s1"}),
    )
    .await;
    assert_eq!(hap.bound("c1").await, "aws-1");

    // The attack: whoever reaches the pod scrapes without a token. Plain metrics name the
    // tenant once the claim's binding is counted; an answer other than 200 never will.
    let (code, body) = eventually(Duration::from_secs(30), "the plain /metrics", || async {
        http_get(&http, "/metrics").filter(|(code, body)| *code != 200 || body.contains(&ga))
    })
    .await;
    assert!(
        !body.contains(&ga),
        "an unauthenticated scrape of the HTTP port listed the global account ({code}):\n{body}"
    );
    let https = eventually(
        Duration::from_secs(30),
        "the HTTPS /metrics address",
        || async { logged_addr(&read_log(), "serving /metrics over TLS") },
    )
    .await;
    let (code, body) = https_get(&https, "/metrics", None).await.expect("answer");
    assert_eq!(code, 401, "{body}");
    assert!(!body.contains(&ga), "{body}");
    let (code, body) = https_get(&https, "/metrics", Some("made-up"))
        .await
        .expect("answer");
    assert_eq!(code, 401, "{body}");
    assert!(!body.contains(&ga), "{body}");

    let (role, _role) = reader_role();
    let (outsider, _) = scraper(&hap.claims_ns, None);
    let (code, body) = https_get(&https, "/metrics", Some(&outsider))
        .await
        .expect("answer");
    assert_eq!(code, 403, "{body}");
    assert!(!body.contains(&ga), "{body}");
    let (reader, _binding) = scraper(&hap.claims_ns, Some(&role));
    // RBAC takes effect once kube-apiserver's informer saw the binding.
    let names_tenant = |body: &str| {
        body.lines().any(|l| {
            l.starts_with("hap_credentials_bindings_per_global_account") && l.contains(&ga)
        })
    };
    let (_, body) = eventually(
        Duration::from_secs(30),
        "the reader's scrape names the tenant",
        || async {
            https_get(&https, "/metrics", Some(&reader))
                .await
                .filter(|(code, body)| *code == 200 && names_tenant(body))
        },
    )
    .await;
    // KEB's names only with --keb-metrics (tests/it/e2e_prometheus.rs runs with it).
    assert!(!body.contains("kcp_keb_v2"), "{body}");
}
