//! End-to-end (real kube-apiserver and gardener-apiserver): the lifecycle figures a pool shows —
//! since when its oldest binding is dirty, the claims in the claim-rate window, the rate and the
//! forecast — come from the objects, so a new leader shows the same figures as the old one did,
//! in the HapConfig status, its metrics, `hap pools` and `hap bindings`.

use crate::support;

use std::time::Duration;

use hap_operator::api::PoolLifecycle;
use serde_json::json;
use support::*;

/// The figures of the dedicated aws pool that must not move with the leader.
#[derive(Debug, PartialEq)]
struct Figures {
    states: std::collections::BTreeMap<String, i64>,
    oldest_dirty_since: Option<jiff::Timestamp>,
    claims_in_window: Option<i64>,
    claim_rate_per_day: Option<String>,
    days_until_empty: Option<String>,
}

impl Figures {
    fn of(p: &PoolLifecycle) -> Self {
        Figures {
            states: p.states.clone(),
            oldest_dirty_since: p.oldest_dirty_since.as_ref().map(|t| t.0),
            claims_in_window: p.claims_in_window,
            claim_rate_per_day: p.claim_rate_per_day.clone(),
            days_until_empty: p.days_until_empty.clone(),
        }
    }
}

fn aws_pool(pools: &[PoolLifecycle]) -> Option<&PoolLifecycle> {
    pools
        .iter()
        .find(|p| p.hyperscaler_type == "aws" && !p.eu_access)
}

/// One metric line's value for the aws pool, as `replica` exports it.
fn pool_metric(replica: &Operator, name: &str) -> Option<f64> {
    let prefix = format!(r#"{name}{{hyperscaler_type="aws",eu_access="false"}} "#);
    replica
        .handle
        .metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

/// What the metrics of `replica` say: claims per day, days until empty (absent while the rate
/// is 0), and since when the oldest binding is dirty (now minus the exported age, in seconds).
fn metric_figures(replica: &Operator) -> Option<(f64, Option<f64>, i64)> {
    let rate = pool_metric(replica, "hap_pool_claims_per_day")?;
    let days = pool_metric(replica, "hap_pool_days_until_empty");
    let age = pool_metric(replica, "hap_pool_oldest_dirty_seconds")?;
    let since = jiff::Timestamp::now().as_second() - age as i64;
    Some((rate, days, since))
}

/// `hap SUBCOMMAND --config NAME -o json` against the test's cluster.
fn hap_json(sub: &str, config: &str) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hap"))
        .env("KUBECONFIG", kubeconfig())
        .env_remove("HAP_GARDEN_KUBECONFIG")
        .args([sub, "--config", config, "-o", "json"])
        .output()
        .expect("run hap");
    assert!(
        out.status.success(),
        "hap {sub}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("hap prints JSON")
}

/// The aws pool's figures as `hap pools -o json` prints them, and the dirty binding's since as
/// `hap bindings -o json` prints it.
fn cli_figures(config: &str, dirty: &str) -> (Figures, Option<String>) {
    let pools = hap_json("pools", config);
    let lifecycle: Vec<PoolLifecycle> =
        serde_json::from_value(pools["lifecycle"].clone()).expect("lifecycle");
    let pool = Figures::of(aws_pool(&lifecycle).expect("aws pool in hap pools"));
    let bindings = hap_json("bindings", config);
    let since = bindings
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["name"] == dirty)
        .and_then(|r| r["since"].as_str().map(String::from));
    (pool, since)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_shows_the_same_dirty_since_claims_rate_and_forecast_as_the_old_one() {
    let hap = Hap::without_operator(&["aws"], json!({})).await;
    for name in ["aws-1", "aws-2", "aws-3"] {
        hap.binding(name, "aws", &[("hyperscalerType", "aws")])
            .await;
    }
    let lease_name = unique("lease");
    let args = |id: &str| {
        let mut args = hap.run_args();
        args.leader_elect = true;
        args.lease_namespace = hap.claims_ns.clone();
        args.lease_name = lease_name.clone();
        args.identity = Some(id.into());
        args.lease_duration_seconds = 4;
        args
    };
    let a = Operator::start_with(&hap.client, args("replica-a")).await;
    eventually(Duration::from_secs(60), "replica a leads", || async {
        (a.handle.metrics.leader.get() == 1).then_some(())
    })
    .await;
    let b = Operator::start_with(&hap.client, args("replica-b")).await;

    // Two tenants claim; one of them goes, and its binding waits for the cleanup job.
    for i in 1..=2 {
        let name = format!("c{i}");
        hap.claim(
            &name,
            json!({"globalAccount": format!("ga-{i}"), "plan": "aws", "shootName": format!("s{i}")}),
        )
        .await;
        hap.bound(&name).await;
    }
    let dirty = hap.bound("c1").await;
    hap.claims()
        .delete("c1", &kube::api::DeleteParams::default())
        .await
        .expect("delete c1");
    let before = eventually(
        Duration::from_secs(60),
        "the old leader's status with a dirty binding and two claims",
        || async {
            let st = hap.config_status().await;
            let p = Figures::of(aws_pool(&st.pools)?);
            (p.states.get("Dirty") == Some(&1)
                && p.claims_in_window == Some(2)
                && p.oldest_dirty_since.is_some())
            .then_some(p)
        },
    )
    .await;
    let metrics_before = eventually(Duration::from_secs(30), "a's pool metrics", || async {
        metric_figures(&a).filter(|(rate, _, _)| *rate > 0.0)
    })
    .await;
    let cli_before = cli_figures(&hap.config, &dirty);
    eprintln!("before: status {before:?}\n metrics {metrics_before:?}\n cli {cli_before:?}");
    // A leader that started after the release must not see it as more recent than it was.
    let since = before.oldest_dirty_since.expect("dirty since");
    eventually(Duration::from_secs(30), "5 s past the release", || async {
        (jiff::Timestamp::now().duration_since(since) > jiff::SignedDuration::from_secs(5))
            .then_some(())
    })
    .await;

    a.stop().await;
    eventually(Duration::from_secs(60), "replica b leads", || async {
        (b.handle.metrics.leader.get() == 1).then_some(())
    })
    .await;
    // A binding of another pool shows in the status only once the new leader wrote it.
    hap.binding("gcp-1", "gcp", &[("hyperscalerType", "gcp")])
        .await;
    let after = eventually(
        Duration::from_secs(60),
        "the new leader's status",
        || async {
            let st = hap.config_status().await;
            st.pools
                .iter()
                .any(|p| p.hyperscaler_type == "gcp")
                .then_some(())?;
            Some(Figures::of(aws_pool(&st.pools)?))
        },
    )
    .await;
    let metrics_after = eventually(Duration::from_secs(30), "b's pool metrics", || async {
        metric_figures(&b)
    })
    .await;
    let cli_after = cli_figures(&hap.config, &dirty);
    eprintln!("after: status {after:?}\n metrics {metrics_after:?}\n cli {cli_after:?}");

    assert_eq!(after, before, "status.pools[aws] across the leader change");
    assert_eq!(
        (metrics_after.0, metrics_after.1),
        (metrics_before.0, metrics_before.1),
        "claims per day and days until empty across the leader change"
    );
    // The age is exported in whole seconds at each pass: its start agrees within two.
    assert!(
        (metrics_after.2 - metrics_before.2).abs() <= 2,
        "oldest dirty since by the metrics: {} before, {} after",
        metrics_before.2,
        metrics_after.2
    );
    assert!(
        (metrics_before.2 - since.as_second()).abs() <= 2,
        "the metric's dirty since {} and the status' {since}",
        metrics_before.2
    );
    // The CLI counts from the same objects: the same figures as the status, either side.
    assert_eq!(cli_before.0, before, "hap pools before");
    assert_eq!(cli_after.0, after, "hap pools after");
    let since_text = Some(since.to_string());
    assert_eq!(cli_before.1, since_text, "hap bindings' since of {dirty}");
    assert_eq!(cli_after.1, since_text, "hap bindings' since of {dirty}");
    b.stop().await;
}
