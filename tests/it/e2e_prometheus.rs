//! The shipped alerts and dashboard against the real thing (issue 22, item 7): Debian's
//! Prometheus server, on loopback, scrapes `hap run` (a process, default secure metrics) over
//! HTTPS with a ServiceAccount token bound to the shipped reader role, and evaluates the rules
//! taken from the shipped PrometheusRule (every `for:` shortened by `HAP_E2E_ALERT_FOR`, the
//! expressions unchanged). A pool driven to exhaustion makes `HapPoolExhausted` fire, seen through
//! Prometheus' `/api/v1/alerts`; every panel query of the shipped dashboard returns data from
//! that Prometheus; `--keb-metrics` adds KEB's `kcp_keb_v2_*` names.

use crate::support;

use crate::support::deploy;
use crate::support::prometheus;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::scrape::{https_post, scraper};
use support::*;

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A GET over plain HTTP/1.0 on loopback: the body of a 200.
fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s =
        std::net::TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status: u16 = buf.split_whitespace().nth(1)?.parse().ok()?;
    (status == 200).then(|| buf.split_once("\r\n\r\n").map(|x| x.1.to_string()))?
}

/// Percent-encodes a query parameter (everything but unreserved characters).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The address of the server whose start line begins with `message`, from the JSON log.
fn logged_addr(log: &str, message: &str) -> Option<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["msg"].as_str().is_some_and(|m| m.starts_with(message)))
        .and_then(|v| v["addr"].as_str().map(str::to_string))
}

/// A free loopback port (bound and released; Prometheus has no port 0 of its own to report).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// `hap run` with its defaults (secure metrics), its webhook on loopback, KEB's names on.
fn start_operator(hap: &Hap, dir: &Path) -> (Process, std::path::PathBuf) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let log = dir.join("operator.log");
    let file = std::fs::File::create(&log).expect("log");
    let child = Command::new(env!("CARGO_BIN_EXE_hap"))
        .args([
            "run",
            &format!("--config-name={}", hap.config),
            &format!("--claim-namespace={}", hap.claims_ns),
            "--mark-ignored-configs=false",
            "--leader-elect=false",
            "--pending-retry=2s",
            "--http-addr=127.0.0.1:0",
            "--metrics-addr=127.0.0.1:0",
            "--webhook-addr=127.0.0.1:0",
            "--webhook-allow-unauthenticated",
            "--keb-metrics",
            "--log-format=json",
        ])
        .arg(format!("--webhook-cert-file={}", cert.display()))
        .arg(format!("--webhook-key-file={}", key.display()))
        .env("KUBECONFIG", kubeconfig())
        .env_remove("HAP_GARDEN_KUBECONFIG")
        .env("RUST_LOG", "info,kube=warn")
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log"))
        .stderr(file)
        .spawn()
        .expect("spawn hap run");
    (Process(child), log)
}

/// Prometheus on loopback: scrapes `target` every second with the token in `token_file`,
/// evaluates `rules` every second. Returns the process and its HTTP address.
fn start_prometheus(
    dir: &Path,
    target: &str,
    token_file: &Path,
    rules: &Path,
) -> (Process, String) {
    let config = json!({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [rules],
        "scrape_configs": [{
            "job_name": "hap-operator",
            "scheme": "https",
            "metrics_path": "/metrics",
            "authorization": {"credentials_file": token_file},
            "tls_config": {"insecure_skip_verify": true},
            "static_configs": [{"targets": [target]}],
        }],
    });
    let config_file = dir.join("prometheus.yml");
    std::fs::write(&config_file, serde_json::to_string(&config).unwrap()).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
    let child = Command::new(prometheus::bin_dir().join("prometheus"))
        .arg(format!("--config.file={}", config_file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn prometheus");
    (Process(child), addr)
}

/// The result vector of an instant query, if Prometheus answered with success.
fn query(prom: &str, q: &str) -> Option<Vec<Value>> {
    let body = http_get(prom, &format!("/api/v1/query?query={}", encode(q)))?;
    let v: Value = serde_json::from_str(&body).ok()?;
    (v["status"] == "success").then(|| v["data"]["result"].as_array().cloned())?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_prometheus_fires_the_exhaustion_alert_and_answers_every_dashboard_query() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    for b in ["aws-1", "aws-2"] {
        hap.binding(b, "aws", &[("hyperscalerType", "aws")]).await;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (_op, log) = start_operator(&hap, dir.path());
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let https = eventually(
        Duration::from_secs(60),
        "the HTTPS /metrics address",
        || async { logged_addr(&read_log(), "serving /metrics over TLS") },
    )
    .await;
    let webhook = eventually(Duration::from_secs(60), "the webhook address", || async {
        logged_addr(&read_log(), "serving the request-source admission webhooks")
    })
    .await;

    let base = deploy::kustomize("deploy/kustomize/base");
    let mut role = deploy::find(&base, "ClusterRole", "hap-operator-metrics-reader").clone();
    let role_name = unique("hap-operator-metrics-reader");
    role["metadata"]["name"] = json!(role_name);
    deploy::apply(
        std::slice::from_ref(&role),
        "the metrics reader ClusterRole",
    );
    let _role = deploy::Cleanup(deploy::cleanup_for(std::slice::from_ref(&role)));
    let (token, _binding) = scraper(&hap.claims_ns, Some(&role_name));
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token).unwrap();

    let for_ = std::env::var("HAP_E2E_ALERT_FOR").unwrap_or_else(|_| "5s".into());
    let rules = prometheus::write_rule_file(dir.path(), Some(&for_));
    let (_prom, prom) = start_prometheus(dir.path(), &https, &token_file, &rules);
    // The scrape is authorized (RBAC takes effect once kube-apiserver saw the binding).
    eventually(
        Duration::from_secs(60),
        "Prometheus scrapes the operator",
        || async {
            let up = query(&prom, "up{job=\"hap-operator\"}")?;
            (up.first()?["value"][1] == "1").then_some(())
        },
    )
    .await;

    // Drive the pool to exhaustion: two tenants take both bindings, a third waits.
    for (c, ga) in [("c1", "ga-one"), ("c2", "ga-two")] {
        hap.claim(
            c,
            json!({"globalAccount": ga, "plan": "aws", "shootName": c}),
        )
        .await;
        hap.bound(c).await;
    }
    hap.claim(
        "c3",
        json!({"globalAccount": "ga-three", "plan": "aws", "shootName": "c3"}),
    )
    .await;
    hap.ready_reason("c3", "PoolExhausted").await;
    // A review from a client that is not kube-apiserver: the webhook series exist.
    assert_eq!(
        https_post(&webhook, "/mutate/shoots", "{\"forged\": true}").await,
        Some(200)
    );

    let alert = eventually(
        Duration::from_secs(120),
        "HapPoolExhausted firing for aws in /api/v1/alerts",
        || async {
            let body = http_get(&prom, "/api/v1/alerts")?;
            let v: Value = serde_json::from_str(&body).ok()?;
            v["data"]["alerts"]
                .as_array()?
                .iter()
                .find(|a| {
                    a["labels"]["alertname"] == "HapPoolExhausted"
                        && a["labels"]["hyperscaler_type"] == "aws"
                        && a["state"] == "firing"
                })
                .cloned()
        },
    )
    .await;
    assert_eq!(alert["labels"]["severity"], "critical", "{alert}");

    let queries = prometheus::dashboard_queries();
    assert!(queries.len() >= 12, "{queries:?}");
    for (title, q) in &queries {
        eventually(
            Duration::from_secs(60),
            &format!("data for panel {title:?}: {q}"),
            || async { query(&prom, q).filter(|r| !r.is_empty()) },
        )
        .await;
    }

    // KEB's names, scraped like the rest (the operator runs with --keb-metrics).
    let claimed = eventually(Duration::from_secs(30), "KEB's claimed gauge", || async {
        query(
            &prom,
            "kcp_keb_v2_claimed_credentials_bindings{hyperscaler_type=\"aws\"}",
        )
        .filter(|r| r.len() == 2)
    })
    .await;
    let tenants: std::collections::BTreeSet<_> = claimed
        .iter()
        .filter_map(|s| s["metric"]["tenant_name"].as_str())
        .collect();
    assert_eq!(tenants, ["ga-one", "ga-two"].into(), "{claimed:?}");
    let available = query(&prom, "kcp_keb_v2_available_credentials_bindings").unwrap_or_default();
    assert!(
        available.iter().all(|s| s["value"][1] == "0"),
        "{available:?}"
    );
}
