//! Load benchmark against a real control plane of its own (`make bench`, i.e. scripts/bench.sh;
//! or `cargo run --release --example load`). Prints figures, asserts nothing about time.
//!
//! 1. Throughput: N claims (default 2000) of T tenants (default 500) created at concurrency C
//!    (default 16) with `hap run` (release build) as a process; claims/s and p50/p99 time from
//!    create to Bound, timed by a watch.
//! 2. Ceiling: the operator's API writes with no logic at the same concurrency — per claim: create
//!    the claim, add the finalizer, the binding write (a tenant's first claim: tenant and
//!    claimed-by labels; its others: the use record), conditioned on the binding's version and one
//!    at a time per binding, as the operator's are; apply the Bound status; post the event.
//! 3. API requests per claim from kube-apiserver's own `apiserver_request_total` (by verb,
//!    resource and subresource, before and after phase 1, the benchmark's own requests
//!    subtracted); LIST per claim after the caches synced.
//! 4. Scale (`scale.rs`): a background of Shoots, taken bindings and Bound claims that grows
//!    with the size, and a foreground that does not (free bindings, new claims, concurrency).
//!    The bare-LIST floor of the operator's caches (`floor.rs`) right before a fresh `hap run`,
//!    timed from start to /readyz 200; memory from /proc; then idle CPU per second, a trickle of
//!    new claims and a burst, optionally under `perf record` (`profile.rs`).
//! 5. Take-over (`takeover.rs`): a backlog of unsettled claims (new tenants, reuses, releases
//!    of deleted claims) left while no operator ran; a fresh `hap run` timed until every one is
//!    decided, beside a no-logic client making the same writes on a twin landscape.
//! 6. Churn (`churn.rs`), on phase 4's landscape and operator after its burst: claims created
//!    and deleted at a steady rate with the refresh cycle and the resync sweep inside the window;
//!    VmRSS, VmHWM, CPU and `hap_internal_entries` sampled.
//!
//! Bindings (each after its Secret) and valid Shoots are served by the real gardener-apiserver,
//! in Gardener projects of their own (`bench`, `base`, `scale`).
//!
//! Environment: HAP_BENCH_CLAIMS, HAP_BENCH_TENANTS, HAP_BENCH_CONCURRENCY, HAP_BENCH_ROUNDS,
//! HAP_BENCH_PACED_CLAIMS, HAP_BENCH_PACED_RATE; for phase 4 HAP_BENCH_SHOOTS,
//! HAP_BENCH_BINDINGS (taken), HAP_BENCH_SCALE_CLAIMS, HAP_BENCH_FREE, HAP_BENCH_TRICKLE,
//! HAP_BENCH_TRICKLE_MS, HAP_BENCH_SCALE_NEW (the burst), HAP_BENCH_IDLE_S,
//! HAP_BENCH_FLOOR_PASSES, HAP_BENCH_PERF, HAP_BENCH_SCALE (0 skips phase 4), HAP_BENCH_LANDSCAPE (0: bare Shoots, `landscape.rs`); for phase 5
//! HAP_BENCH_TAKEOVER_NEW, HAP_BENCH_TAKEOVER_REUSE, HAP_BENCH_TAKEOVER_RELEASE (all 0 skip it),
//! HAP_BENCH_TAKEOVER_ADMISSION=on, HAP_BENCH_TAKEOVER_STANDBY=on (a standby after a frozen
//! leader; HAP_BENCH_TAKEOVER_LEASE_S, default 180, must outlast building the backlog); for
//! phase 6 HAP_BENCH_CHURN_S (0, the default, skips it), HAP_BENCH_CHURN_RATE_MILLI (claims per
//! 1000 s, default 2000), HAP_BENCH_CHURN_LIFE_S, HAP_BENCH_CHURN_WARMUP_S,
//! HAP_BENCH_CHURN_REFRESH (the HapConfig's refresh cycle, default 10m), HAP_BENCH_CHURN_FREE;
//! HAP_BENCH_RESYNC (the operator's `--resync`, every phase); HAP_BENCH_DIR (control-plane state), HAP_BIN (the
//! operator binary; default: `hap` next to this example's directory), HAP_K8S_BIN.

mod churn;
mod floor;
#[path = "../../tests/it/support/garden.rs"]
mod garden;
mod landscape;
#[path = "../../tests/it/support/private_env.rs"]
mod private_env;
mod profile;
mod scale;
mod takeover;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hap_operator::api::{AccountClaim, ClaimPhase, Decision, HapConfig, MatchedRule};
use hap_operator::labels::{CLAIMED_BY, FILLING, PoolKey};
use hap_operator::status::{BoundTo, ClaimOutcome, desired_claim_status};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use private_env::{OperatorProcess, PrivateEnv, env_num, hap_binary, request_counts};
use profile::Perf;
use serde_json::json;

fn binding_ar() -> ApiResource {
    garden::credentials_binding_resource()
}

/// `count` free aws bindings, `aws-00000` on, 32 at a time.
async fn free_bindings(client: &Client, garden: &str, count: usize) {
    let labels = BTreeMap::from([("hyperscalerType", "aws".to_string())]);
    concurrently((0..count).collect(), 32, |i| {
        let (client, labels) = (client, &labels);
        async move {
            create_binding(client, &format!("aws-{i:05}"), garden, labels).await;
        }
    })
    .await;
}

/// Creates the binding's Secret, then the aws binding; returns the binding.
async fn create_binding(
    client: &Client,
    name: &str,
    ns: &str,
    labels: &BTreeMap<&str, String>,
) -> DynamicObject {
    let post = PostParams::default();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let secret = serde_json::from_value(garden::secret_object(ns, name, "aws")).expect("secret");
    secrets.create(&post, &secret).await.expect("create Secret");
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let obj: DynamicObject =
        serde_json::from_value(garden::binding_object(ns, name, "aws", &labels)).expect("binding");
    Api::namespaced_with(client.clone(), ns, &binding_ar())
        .create(&post, &obj)
        .await
        .expect("create binding")
}

fn claim_obj(name: &str, ga: &str, shoot: &str, finalizer: bool) -> AccountClaim {
    let mut meta = json!({"name": name});
    if finalizer {
        meta["finalizers"] = json!([hap_operator::api::CLAIM_FINALIZER]);
    }
    serde_json::from_value(json!({
        "apiVersion": "accountpool.io/v1alpha1",
        "kind": "AccountClaim",
        "metadata": meta,
        "spec": {"globalAccount": ga, "plan": "aws", "platformRegion": "cf-us10", "shootName": shoot},
    }))
    .expect("claim")
}

async fn namespace(client: &Client, name: &str) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    api.create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

/// A Gardener project and its namespace (`garden-<project>`), where bindings may live.
async fn project(client: &Client, project: &str) -> &'static str {
    let ns = garden::create_project(client, project).await;
    Box::leak(ns.into_boxed_str())
}

async fn apply_config(client: &Client, name: &str, ns: &str) {
    let api: Api<HapConfig> = Api::all(client.clone());
    let body = json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig", "metadata": {"name": name},
        "spec": {"bindingNamespace": ns, "rules": ["aws"]}});
    api.patch(
        name,
        &PatchParams::apply("bench").force(),
        &Patch::Apply(body),
    )
    .await
    .expect("apply HapConfig");
}

/// Runs `f` over `items` with `c` in flight; panics on the first error.
async fn concurrently<T, F, Fut>(items: Vec<T>, c: usize, f: F)
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    futures::stream::iter(items).for_each_concurrent(c, f).await;
}

/// The label of the claims a scale run measures: its watch selects them alone, so that the
/// benchmark's own client does not list and decode every cached claim while it measures.
const MEASURED: &str = "hap-bench/measured";

/// Records when each claim of a namespace is first seen Bound.
fn watch_bound(
    client: &Client,
    ns: &str,
) -> (
    Arc<Mutex<HashMap<String, Instant>>>,
    tokio::task::JoinHandle<()>,
) {
    watch_bound_selected(client, ns, None)
}

/// The same for the claims that carry `label` only (all when `None`).
fn watch_bound_selected(
    client: &Client,
    ns: &str,
    label: Option<&str>,
) -> (
    Arc<Mutex<HashMap<String, Instant>>>,
    tokio::task::JoinHandle<()>,
) {
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let api: Api<AccountClaim> = Api::namespaced(client.clone(), ns);
    let s = seen.clone();
    let config = match label {
        Some(l) => watcher::Config::default().labels(l),
        None => watcher::Config::default(),
    };
    let task = tokio::spawn(async move {
        let stream = watcher(api, config).default_backoff().applied_objects();
        futures::pin_mut!(stream);
        // A watch error (the stream retries on its own) must not end the watch: the claims
        // Bound after it would never be seen.
        while let Some(event) = stream.next().await {
            match event {
                Ok(c) if c.status.as_ref().and_then(|s| s.phase) == Some(ClaimPhase::Bound) => {
                    s.lock()
                        .unwrap()
                        .entry(c.name_any())
                        .or_insert_with(Instant::now);
                }
                Ok(_) => {}
                Err(e) => eprintln!("claim watch: {e}; retrying"),
            }
        }
    });
    (seen, task)
}

async fn wait_all(seen: &Mutex<HashMap<String, Instant>>, n: usize, what: &str, limit: Duration) {
    let start = Instant::now();
    while seen.lock().unwrap().len() < n {
        assert!(
            start.elapsed() < limit,
            "{what}: only {} of {n} claims Bound after {limit:?}",
            seen.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Run {
    claims_per_s: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
    wall: Duration,
}

fn summarise(created: &HashMap<String, Instant>, bound: &HashMap<String, Instant>) -> Run {
    let mut lat: Vec<Duration> = created
        .iter()
        .map(|(n, t0)| bound[n].saturating_duration_since(*t0))
        .collect();
    lat.sort();
    let first = created.values().min().copied().expect("claims");
    let last = bound.values().max().copied().expect("claims");
    let wall = last - first;
    Run {
        claims_per_s: created.len() as f64 / wall.as_secs_f64(),
        p50: percentile(&lat, 0.50),
        p99: percentile(&lat, 0.99),
        max: *lat.last().expect("claims"),
        wall,
    }
}

/// The `q` quantile of `sorted` (nearest rank, rounded down); the default when it is empty.
fn percentile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    let i = ((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(i).copied().unwrap_or_default()
}

/// A counter or gauge of the operator's /metrics (the sum of its series); `None` when the
/// endpoint does not answer.
fn metric_sum(port: u16, name: &str) -> Option<f64> {
    let (200, text) = private_env::http_get(port, "/metrics")? else {
        return None;
    };
    Some(
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
            .sum(),
    )
}

fn operator_args(config: &str, claims_ns: &str) -> Vec<String> {
    [
        "--config-name",
        config,
        "--claim-namespace",
        claims_ns,
        // The last-known-good record goes there too: the default (hap-system) does not exist
        // here, and each config reconcile then tried (and failed) to write it.
        "--lease-namespace",
        claims_ns,
        "--mark-ignored-configs=false",
        "--leader-elect=false",
        "--log-format",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(
        std::env::var("HAP_BENCH_RESYNC")
            .ok()
            .into_iter()
            .flat_map(|r| ["--resync".to_string(), r]),
    )
    .collect()
}

fn wait_ready(op: &OperatorProcess, limit: Duration) -> Duration {
    loop {
        if op.get("/readyz").is_some_and(|(code, _)| code == 200) {
            return op.started.elapsed();
        }
        assert!(
            op.started.elapsed() < limit,
            "operator not ready within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// CPU seconds (user + system) a process has used, from /proc/<pid>/stat.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 of stat (utime, stime), counted after the command; USER_HZ is 100.
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds of the operator, kube-apiserver, etcd and this benchmark process.
fn cpu_split(env_dir: &Path, operator: u32) -> [f64; 4] {
    let pid_of = |c: &str| {
        std::fs::read_to_string(env_dir.join("run").join(format!("{c}.pid")))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
            .unwrap_or(0)
    };
    [
        cpu_seconds(operator),
        cpu_seconds(pid_of("kube-apiserver")),
        cpu_seconds(pid_of("etcd")),
        cpu_seconds(std::process::id()),
    ]
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// One throughput round of the operator: its figures, CPU and memory, and the requests it made.
struct OperatorRound {
    run: Run,
    ready: Duration,
    /// CPU seconds: operator, kube-apiserver, etcd, this benchmark.
    cpu: [f64; 4],
    mem: Option<(u64, u64)>,
    requests: Counts,
    gardener_requests: Counts,
}

/// Phase 1, round `r`: `n` claims of `tenants` tenants at concurrency `c`, served by a fresh
/// `hap run` over a pool of its own.
async fn operator_round(
    env: &PrivateEnv,
    client: &Client,
    hap: &Path,
    logs: &Path,
    r: usize,
    (n, tenants, c): (usize, usize, usize),
) -> OperatorRound {
    let post = PostParams::default();
    let name = format!("bench{r}");
    let garden = project(client, &name).await;
    let claims_ns = Box::leak(format!("claims-{name}").into_boxed_str());
    namespace(client, claims_ns).await;
    apply_config(client, &name, garden).await;
    free_bindings(client, garden, tenants + tenants / 10 + 1).await;
    let op = OperatorProcess::spawn(
        hap,
        &env.kubeconfig,
        &format!("{name}-1"),
        &operator_args(&name, claims_ns),
        &logs.join(format!("operator-{name}.log")),
    );
    let ready = wait_ready(&op, Duration::from_secs(120));
    let (bound, watch) = watch_bound(client, claims_ns);
    // Let the caches and the watch settle before counting requests.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = request_counts(&env.apiserver_metrics());
    let gardener_before = request_counts(&env.gardener_metrics());
    let cpu_before = cpu_split(&env.dir, op.child.id());
    let perf = Perf::start_if_asked(op.child.id(), logs);
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let claims: Api<AccountClaim> = Api::namespaced(client.clone(), claims_ns);
    concurrently((0..n).collect(), c, |i| {
        let (claims, post, created) = (&claims, &post, created.clone());
        async move {
            let name = format!("c-{i:05}");
            let obj = claim_obj(
                &name,
                &format!("ga-{:04}", i % tenants),
                &format!("shoot-{i:05}"),
                false,
            );
            let t0 = Instant::now();
            claims.create(post, &obj).await.expect("create claim");
            created.lock().unwrap().insert(name, t0);
        }
    })
    .await;
    wait_all(&bound, n, "operator", Duration::from_secs(1200)).await;
    let cpu_after = cpu_split(&env.dir, op.child.id());
    for (i, l) in perf
        .map(Perf::finish)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        println!("phase 1 round {r} profile #{}: {l}", i + 1);
    }
    print_reconciles(&op, r, n);
    // Trailing writes (events) land within a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = request_counts(&env.apiserver_metrics());
    let gardener_after = request_counts(&env.gardener_metrics());
    let mem = op.memory_kib();
    let run = summarise(&created.lock().unwrap(), &bound.lock().unwrap());
    watch.abort();
    drop(op);
    let mut cpu = [0.0; 4];
    for (i, v) in cpu.iter_mut().enumerate() {
        *v = cpu_after[i] - cpu_before[i];
    }
    OperatorRound {
        run,
        ready,
        cpu,
        mem,
        requests: diff(&before, &after),
        gardener_requests: diff(&gardener_before, &gardener_after),
    }
}

/// Reconciles per claim of each controller, from the operator's own /metrics.
fn print_reconciles(op: &OperatorProcess, r: usize, n: usize) {
    let Some((200, text)) = op.get("/metrics") else {
        println!("phase 1 round {r}: /metrics did not answer");
        return;
    };
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("hap_reconcile_duration_seconds_count") else {
            continue;
        };
        let (labels, value) = rest.rsplit_once(' ').unwrap_or((rest, "0"));
        let count: f64 = value.parse().unwrap_or(0.0);
        println!(
            "phase 1 round {r} reconciles that ran (a claim in line for a slot is not counted) {labels}: {count} ({:.2} per claim)",
            count / n.max(1) as f64
        );
    }
}

/// Phase 2, round `r`: the same API writes without logic. Returns the figures and CPU seconds.
async fn ceiling_round(
    env: &PrivateEnv,
    client: &Client,
    r: usize,
    (n, tenants, c): (usize, usize, usize),
) -> (Run, [f64; 4]) {
    let post = PostParams::default();
    let garden_b = project(client, &format!("base{r}")).await;
    let claims_b: &'static str = Box::leak(format!("claims-base{r}").into_boxed_str());
    namespace(client, claims_b).await;
    let labels = BTreeMap::from([("hyperscalerType", "aws".to_string())]);
    let base_bindings: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), garden_b, &binding_ar());
    // Each tenant's binding version, held while its write is in flight: the operator, too,
    // sends one write on a binding at a time (a use waits for a sibling's record).
    let made: Arc<Mutex<HashMap<usize, String>>> = Arc::default();
    concurrently((0..tenants).collect(), 32, |i| {
        let (client, labels, made) = (client, &labels, made.clone());
        async move {
            let obj = create_binding(client, &format!("base-{i:05}"), garden_b, labels).await;
            made.lock()
                .unwrap()
                .insert(i, obj.resource_version().expect("rv"));
        }
    })
    .await;
    let rvs: Arc<HashMap<usize, tokio::sync::Mutex<String>>> = Arc::new(
        std::mem::take(&mut *made.lock().unwrap())
            .into_iter()
            .map(|(i, rv)| (i, tokio::sync::Mutex::new(rv)))
            .collect(),
    );
    let (base_bound, base_watch) = watch_bound(client, claims_b);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let base_claims: Api<AccountClaim> = Api::namespaced(client.clone(), claims_b);
    let base_events: Api<Event> = Api::namespaced(client.clone(), claims_b);
    let base_created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let before = cpu_split(&env.dir, 0);
    let now = Time(jiff::Timestamp::now());
    concurrently((0..n).collect(), c, |i| {
        let (claims, bindings, events, post, created, rvs, now) = (
            &base_claims,
            &base_bindings,
            &base_events,
            &post,
            base_created.clone(),
            rvs.clone(),
            &now,
        );
        async move {
            let name = format!("c-{i:05}");
            let ga = format!("ga-{:04}", i % tenants);
            let obj = claim_obj(&name, &ga, &format!("shoot-{i:05}"), false);
            let t0 = Instant::now();
            claims.create(post, &obj).await.expect("create claim");
            let made = claims
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::<()>::Json(
                        serde_json::from_value(json!([
                            {"op": "test", "path": "/metadata/finalizers", "value": null},
                            {"op": "add", "path": "/metadata/finalizers",
                             "value": [hap_operator::api::CLAIM_FINALIZER]}
                        ]))
                        .expect("json patch"),
                    ),
                )
                .await
                .expect("add finalizer");
            // The operator's binding write: the claim write (tenant and claimed-by) for a
            // tenant's first claim, the use record (`FILLING`, claimed-by removed) for the others.
            let binding = format!("base-{:05}", i % tenants);
            let uid = made.uid().expect("uid");
            let (labels, annotations) = if i < tenants {
                (json!({"tenantName": ga, CLAIMED_BY: uid}), json!({}))
            } else {
                (json!({CLAIMED_BY: null}), json!({FILLING: uid}))
            };
            {
                let mut rv = rvs[&(i % tenants)].lock().await;
                let written = bindings
                    .patch_metadata(
                        &binding,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"resourceVersion": *rv, "labels": labels, "annotations": annotations}})),
                    )
                    .await
                    .expect("binding write");
                *rv = written.resource_version().expect("rv");
            }
            let status = bound_status(&made, &binding, garden_b, now);
            claims
                .patch_status(
                    &name,
                    &PatchParams::apply("bench").force(),
                    &Patch::Apply(json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
                        "metadata": {"resourceVersion": made.resource_version()}, "status": status})),
                )
                .await
                .expect("apply status");
            events
                .create(post, &event_obj(&name, claims_b, &binding))
                .await
                .expect("post event");
            created.lock().unwrap().insert(name, t0);
        }
    })
    .await;
    wait_all(&base_bound, n, "ceiling", Duration::from_secs(600)).await;
    let after = cpu_split(&env.dir, 0);
    let mut cpu = [0.0; 4];
    for (i, v) in cpu.iter_mut().enumerate() {
        *v = after[i] - before[i];
    }
    let run = summarise(&base_created.lock().unwrap(), &base_bound.lock().unwrap());
    base_watch.abort();
    (run, cpu)
}

/// The Normal event the operator records for a claim it bound (events.k8s.io/v1).
fn event_obj(claim: &str, ns: &str, binding: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"generateName": format!("{claim}-"), "namespace": ns},
        "eventTime": jiff::Timestamp::now().to_string(),
        "reportingController": "accountpool.io/hap-operator",
        "reportingInstance": "bench",
        "action": "Claim",
        "reason": "Claimed",
        "type": "Normal",
        "note": format!("bound to {binding}"),
        "regarding": {"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
                      "name": claim, "namespace": ns},
    }))
    .expect("event")
}

/// Paced: `count` claims of `tenants` tenants created at `rate` per second (one every 1/rate s,
/// whatever the answers take), served by a fresh `hap run`. Returns the figures and the
/// operator's CPU seconds.
async fn paced(
    env: &PrivateEnv,
    client: &Client,
    hap: &Path,
    logs: &Path,
    (count, tenants, rate): (usize, usize, f64),
) -> (Run, f64) {
    let post = PostParams::default();
    let garden = project(client, "paced").await;
    let claims_ns = "claims-paced";
    namespace(client, claims_ns).await;
    apply_config(client, "paced", garden).await;
    free_bindings(client, garden, tenants + 1).await;
    let op = OperatorProcess::spawn(
        hap,
        &env.kubeconfig,
        "paced-1",
        &operator_args("paced", claims_ns),
        &logs.join("operator-paced.log"),
    );
    wait_ready(&op, Duration::from_secs(120));
    let (bound, watch) = watch_bound(client, claims_ns);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu_before = cpu_seconds(op.child.id());
    let claims: Api<AccountClaim> = Api::namespaced(client.clone(), claims_ns);
    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sends = Vec::new();
    for i in 0..count {
        tick.tick().await;
        let (claims, post, created) = (claims.clone(), post.clone(), created.clone());
        sends.push(tokio::spawn(async move {
            let name = format!("p-{i:05}");
            let obj = claim_obj(
                &name,
                &format!("ga-{:04}", i % tenants),
                &format!("paced-{i:05}"),
                false,
            );
            let t0 = Instant::now();
            claims.create(&post, &obj).await.expect("create claim");
            created.lock().unwrap().insert(name, t0);
        }));
    }
    for s in sends {
        s.await.expect("create");
    }
    wait_all(&bound, count, "paced", Duration::from_secs(600)).await;
    let cpu = cpu_seconds(op.child.id()) - cpu_before;
    let run = summarise(&created.lock().unwrap(), &bound.lock().unwrap());
    watch.abort();
    drop(op);
    (run, cpu)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let n = env_num("HAP_BENCH_CLAIMS", 2000);
    let tenants = env_num("HAP_BENCH_TENANTS", 500).clamp(1, n);
    let c = env_num("HAP_BENCH_CONCURRENCY", 16).max(1);
    let rounds = env_num("HAP_BENCH_ROUNDS", 3);
    let paced_rate = env_num("HAP_BENCH_PACED_RATE", 50).max(1) as f64;
    let paced_claims = env_num("HAP_BENCH_PACED_CLAIMS", 1000);
    let sizes = scale::Sizes::from_env(c);
    let hap = hap_binary();
    let dir = std::env::var_os("HAP_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("hap-bench-{}", std::process::id())));
    let logs = dir.with_extension("logs");
    std::fs::create_dir_all(&logs).expect("log dir");
    println!(
        "hap load benchmark: {rounds} rounds of {n} claims / {tenants} tenants at concurrency {c}; {paced_claims} claims paced at {paced_rate}/s; scale: {}",
        if env_num("HAP_BENCH_SCALE", 1) > 0 {
            sizes.describe()
        } else {
            "off".into()
        }
    );
    println!(
        "machine: {} CPUs, {}; load average before: {}",
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        cpu_model(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let image_env: Vec<String> = private_env::containerfile_env()
        .into_iter()
        .map(|(k, v)| match std::env::var_os(&k) {
            Some(own) => format!("{k}={own:?} (this environment's; the image's {v})"),
            None => format!("{k}={v} (the image's)"),
        })
        .collect();
    println!(
        "operator binary: {}, run with {}",
        hap.display(),
        image_env.join(", ")
    );
    let total = Instant::now();
    let env = PrivateEnv::up(&dir);
    // gardener-apiserver's ResourceReferenceManager checks every binding write's Secret through
    // a client limited to 5 requests/s (~2.5 binding writes/s): with it on, the operator and the
    // ceiling alike measure that limit, not the operator. HAP_BENCH_GARDENER_ADMISSION=on keeps it.
    let admission_on = std::env::var("HAP_BENCH_GARDENER_ADMISSION").is_ok_and(|v| v == "on");
    if !admission_on {
        env.disable_gardener_admission("ResourceReferenceManager");
    }
    println!(
        "gardener-apiserver admission plugin ResourceReferenceManager: {}",
        if admission_on {
            "on"
        } else {
            "off (HAP_BENCH_GARDENER_ADMISSION=on to keep it)"
        }
    );
    let client = env.client().await;

    // ---- 1 and 2, alternating: operator throughput, then the ceiling, `rounds` times ------
    let mut ops = Vec::new();
    let mut ceilings = Vec::new();
    for r in 0..rounds {
        ops.push(operator_round(&env, &client, &hap, &logs, r, (n, tenants, c)).await);
        ceilings.push(ceiling_round(&env, &client, r, (n, tenants, c)).await);
        // A line per round as it ends, so that a later failure loses no figure.
        let (o, (b, _)) = (&ops[r], &ceilings[r]);
        println!(
            "round {r} done: operator {:.1} claims/s, {:.3} ms CPU per claim; ceiling {:.1} claims/s",
            o.run.claims_per_s,
            o.cpu[0] * 1e3 / n as f64,
            b.claims_per_s
        );
    }
    // ---- paced --------------------------------------------------------------------------
    let paced_run = if paced_claims > 0 {
        Some(
            paced(
                &env,
                &client,
                &hap,
                &logs,
                (paced_claims, tenants.min(paced_claims), paced_rate),
            )
            .await,
        )
    } else {
        None
    };

    // ---- report --------------------------------------------------------------------------
    println!();
    println!(
        "== 1. operator throughput ({n} claims, {tenants} tenants, concurrency {c}), {rounds} rounds =="
    );
    for (r, o) in ops.iter().enumerate() {
        println!(
            "round {r}: ready {:.2?}; claims/s {:.1}; create -> Bound p50 {:.0?}, p99 {:.0?}, max {:.0?}; wall {:.1?}; CPU s: operator {:.2} ({:.3} ms/claim), kube-apiserver {:.1}, etcd {:.1}, client {:.1}{}",
            o.ready,
            o.run.claims_per_s,
            o.run.p50,
            o.run.p99,
            o.run.max,
            o.run.wall,
            o.cpu[0],
            o.cpu[0] * 1e3 / n as f64,
            o.cpu[1],
            o.cpu[2],
            o.cpu[3],
            o.mem
                .map(|(rss, hwm)| format!("; VmRSS {:.1} MiB, VmHWM {:.1} MiB", mib(rss), mib(hwm)))
                .unwrap_or_default()
        );
    }
    println!("== 2. ceiling: same writes, no logic, concurrency {c}, {rounds} rounds ==");
    for (r, (run, cpu)) in ceilings.iter().enumerate() {
        println!(
            "round {r}: claims/s {:.1}; create -> Bound p50 {:.0?}, p99 {:.0?}, max {:.0?}; wall {:.1?}; CPU s: kube-apiserver {:.1}, etcd {:.1}, client {:.1}; operator / ceiling {:.2}",
            run.claims_per_s,
            run.p50,
            run.p99,
            run.max,
            run.wall,
            cpu[1],
            cpu[2],
            cpu[3],
            ops[r].run.claims_per_s / run.claims_per_s
        );
    }
    if rounds > 0 {
        println!(
            "median of {rounds}: operator CPU per claim {:.3} ms (the ceiling's client, making the same writes without logic: {:.3} ms); operator claims/s {:.1}; ceiling claims/s {:.1}; operator / ceiling {:.2}",
            median(ops.iter().map(|o| o.cpu[0] * 1e3 / n as f64).collect()),
            median(
                ceilings
                    .iter()
                    .map(|(_, c)| c[3] * 1e3 / n as f64)
                    .collect()
            ),
            median(ops.iter().map(|o| o.run.claims_per_s).collect()),
            median(ceilings.iter().map(|(r, _)| r.claims_per_s).collect()),
            median(
                ops.iter()
                    .zip(&ceilings)
                    .map(|(o, (b, _))| o.run.claims_per_s / b.claims_per_s)
                    .collect()
            ),
        );
    }
    if let Some((run, cpu)) = &paced_run {
        println!(
            "== paced: {paced_claims} claims at {paced_rate}/s == create -> Bound p50 {:.0?}, p99 {:.0?}, max {:.0?}; operator CPU {:.2} s ({:.3} ms/claim)",
            run.p50,
            run.p99,
            run.max,
            cpu,
            cpu * 1e3 / paced_claims as f64
        );
    }
    if let Some(first) = ops.first() {
        report_requests(first, n);
    }
    // ---- 4. scale: the cost against landscape size ---------------------------------------
    if env_num("HAP_BENCH_SCALE", 1) > 0 {
        let figures = scale::run(&env, &client, &hap, &logs, &sizes).await;
        scale::report(&sizes, &figures);
    }
    // ---- 5. take-over: a backlog that piled up while no operator ran ---------------------
    let backlog = takeover::Backlog::from_env(c);
    if backlog.total() > 0 {
        let figures = takeover::run(&env, &client, &hap, &logs, backlog).await;
        takeover::report(backlog, &figures);
    }
    println!("total benchmark time {:.1?}", total.elapsed());
    println!();
    println!(
        "reproduce: make bench   (or: cargo build --release --bin hap --example load && HAP_BENCH_ROUNDS={rounds} HAP_BENCH_CLAIMS={n} HAP_BENCH_TENANTS={tenants} HAP_BENCH_CONCURRENCY={c} HAP_BENCH_PACED_CLAIMS={paced_claims} HAP_BENCH_PACED_RATE={paced_rate} {} {} target/release/examples/load)",
        sizes.env_line(),
        backlog.env_line()
    );
    drop(env);
    let _ = std::fs::remove_dir_all(&logs);
}

/// Phase 3: the operator's requests during round 0, per claim.
fn report_requests(o: &OperatorRound, n: usize) {
    println!(
        "== 3. requests during round 0, per claim: kube-apiserver, then gardener-apiserver (bindings, Shoots); the benchmark client's own and gardener-apiserver's admission reads subtracted =="
    );
    let mut list_total = 0.0;
    let mut total_req = 0.0;
    let mut delta = o.requests.clone();
    // gardener-apiserver serves the binding writes; kube-apiserver only proxies them.
    for ((verb, resource, sub), d) in &o.gardener_requests {
        delta.insert(
            (verb.clone(), format!("{resource} (gardener)"), sub.clone()),
            *d,
        );
    }
    let mut admission = 0.0;
    for ((verb, resource, sub), d) in &delta {
        // The benchmark itself (one POST per claim, its own watch), kube-apiserver's identity
        // lease heartbeat (the operator runs without leader election here), and
        // gardener-apiserver's ResourceReferenceManager: per binding write it reads the Secret
        // and dry-run-creates a copy (as gardener-apiserver, never as the operator).
        let own = match (verb.as_str(), resource.as_str(), sub.as_str()) {
            ("POST", "accountclaims", "") => n as f64,
            ("WATCH", "accountclaims", "") => *d,
            ("PUT", "leases", "") => *d,
            (_, "secrets", _) => {
                admission += d;
                *d
            }
            _ => 0.0,
        };
        let op_d = d - own;
        if op_d <= 0.0 {
            continue;
        }
        if verb == "LIST" {
            list_total += op_d;
        }
        total_req += op_d;
        let what = if sub.is_empty() {
            resource.clone()
        } else {
            format!("{resource}/{sub}")
        };
        println!(
            "  {verb:<6} {what:<28} {:>8.0} total  {:>6.3} per claim",
            op_d,
            op_d / n as f64
        );
    }
    println!(
        "  all verbs: {:.2} requests per claim; LIST per claim after caches synced: {:.4}; gardener-apiserver's own Secret checks {:.2} per claim",
        total_req / n as f64,
        list_total / n as f64,
        admission / n as f64
    );
}

type Counts = BTreeMap<(String, String, String), f64>;

fn diff(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

/// The Bound status the operator itself would write for this claim (so that it finds nothing to
/// change when it starts over a cluster prepared by the benchmark).
fn bound_status(
    claim: &AccountClaim,
    binding: &str,
    ns: &str,
    now: &Time,
) -> hap_operator::api::AccountClaimStatus {
    let outcome = ClaimOutcome::Bound(BoundTo {
        binding: binding.to_string(),
        namespace: ns.to_string(),
        pool: PoolKey {
            hyperscaler_type: "aws".into(),
            eu_access: false,
            shared: false,
        },
        matched_rule: MatchedRule {
            index: 1,
            entry: "aws".into(),
        },
        decision: Decision::Claimed,
        preference: Some(1),
    });
    desired_claim_status(None, &claim.spec, claim.metadata.generation, &outcome, now)
}
