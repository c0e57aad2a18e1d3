//! Phase 4: the operator's cost against landscape size. Only the background grows with the size
//! (Shoots, Bound claims, bindings taken by their tenants); the free bindings, the new claims and
//! their concurrency are the same at every size, so that the figures of two sizes compare.
//!
//! Order: setup; the bare-LIST floor (`floor`); a fresh `hap run` timed to /readyz; 20 s to
//! settle; idle (nothing moves); trickle (one new claim every 2 s); burst (new claims at the
//! fixed concurrency, optionally under `perf record`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hap_operator::api::AccountClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde_json::json;

use super::churn::{self, Churn};
use super::floor::{self, Floor};
use super::landscape;
use super::private_env::{OperatorProcess, PrivateEnv, env_num, http_get, request_counts};
use super::profile::Perf;
use super::{
    Counts, MEASURED, Run, apply_config, bound_status, claim_obj, concurrently, cpu_seconds,
    create_binding, diff, garden, mib, namespace, operator_args, project, summarise,
    watch_bound_selected,
};

/// What a scale run builds and measures.
pub struct Sizes {
    pub shoots: usize,
    /// Bindings held by the tenants of the Bound claims (background).
    pub taken: usize,
    /// Bound claims (background).
    pub claims: usize,
    /// Free bindings, the same at every size: one per new claim and a margin.
    pub free: usize,
    pub trickle: usize,
    pub trickle_every: Duration,
    pub burst: usize,
    pub concurrency: usize,
    pub idle: Duration,
    /// Passes of the bare-LIST floor (the lowest figure is kept).
    pub floor_passes: usize,
    /// Phase 6 on this landscape after the burst (`HAP_BENCH_CHURN_S`).
    pub churn: Option<Churn>,
}

impl Sizes {
    pub fn from_env(concurrency: usize) -> Self {
        let trickle = env_num("HAP_BENCH_TRICKLE", 30);
        let burst = env_num("HAP_BENCH_SCALE_NEW", 500);
        Self {
            shoots: env_num("HAP_BENCH_SHOOTS", 10_000),
            taken: env_num("HAP_BENCH_BINDINGS", 5_000).max(1),
            claims: env_num("HAP_BENCH_SCALE_CLAIMS", 10_000),
            free: env_num("HAP_BENCH_FREE", 600).max(trickle + burst),
            trickle,
            trickle_every: Duration::from_millis(env_num("HAP_BENCH_TRICKLE_MS", 2000) as u64),
            burst,
            concurrency,
            idle: Duration::from_secs(env_num("HAP_BENCH_IDLE_S", 30) as u64),
            floor_passes: env_num("HAP_BENCH_FLOOR_PASSES", 2).max(1),
            churn: Churn::from_env(),
        }
    }

    /// Objects the operator caches: Shoots, bindings (taken and free), claims (the new ones
    /// not counted).
    pub fn objects(&self) -> usize {
        self.shoots + self.taken + self.free + self.claims
    }

    pub fn describe(&self) -> String {
        format!(
            "background {} Shoots ({}), {} taken bindings, {} Bound claims; fixed: {} free bindings, trickle {} claims every {:?}, burst {} claims at concurrency {}, idle {:?}",
            self.shoots,
            if landscape::on() {
                "dressed as a landscape's, with a status of a few KB"
            } else {
                "bare"
            },
            self.taken,
            self.claims,
            self.free,
            self.trickle,
            self.trickle_every,
            self.burst,
            self.concurrency,
            self.idle
        )
    }

    /// The environment that reproduces these sizes.
    pub fn env_line(&self) -> String {
        format!(
            "HAP_BENCH_LANDSCAPE={} HAP_BENCH_SHOOTS={} HAP_BENCH_BINDINGS={} HAP_BENCH_SCALE_CLAIMS={} HAP_BENCH_FREE={} HAP_BENCH_TRICKLE={} HAP_BENCH_TRICKLE_MS={} HAP_BENCH_SCALE_NEW={} HAP_BENCH_CONCURRENCY={} HAP_BENCH_IDLE_S={} HAP_BENCH_FLOOR_PASSES={}",
            u8::from(landscape::on()),
            self.shoots,
            self.taken,
            self.claims,
            self.free,
            self.trickle,
            self.trickle_every.as_millis(),
            self.burst,
            self.concurrency,
            self.idle.as_secs(),
            self.floor_passes
        )
    }
}

/// (VmRSS, RssAnon) in KiB.
type Mem = Option<(u64, u64)>;

fn mem(op: &OperatorProcess) -> Mem {
    Some((op.memory_kib()?.0, op.rss_split_kib()?.0))
}

/// New claims of one phase: how many, the operator's CPU seconds, their latencies.
pub struct Phase {
    pub n: usize,
    pub cpu: f64,
    pub run: Option<Run>,
}

impl Phase {
    pub fn ms_per_claim(&self) -> f64 {
        self.cpu * 1e3 / self.n.max(1) as f64
    }
}

/// What the phases after ready measured.
pub struct Phases {
    /// Operator CPU seconds per second over the idle window.
    pub idle_cpu: f64,
    pub mem_idle: Mem,
    pub trickle: Phase,
    pub mem_trickle: Mem,
    pub burst: Phase,
    pub mem_burst: Mem,
    /// The top entries of `perf report` over the burst (empty without HAP_BENCH_PERF).
    pub profile: Vec<String>,
}

pub struct Figures {
    pub setup: Duration,
    pub floor: Floor,
    pub ready: Duration,
    pub mem_ready: Mem,
    pub mem_settled: Mem,
    /// Requests from the start to 20 s after ready.
    pub start_requests: Counts,
    pub phases: Phases,
    /// From ready to the end of the burst (the first resync sweep starts 300 s after the
    /// operator's start).
    pub span: Duration,
    /// Load average before the setup and after the burst.
    pub load: (String, String),
    pub churn: Option<churn::Figures>,
}

const NS: &str = "claims-scale";

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Builds the background and the free bindings of `sizes`; returns the bindings' namespace.
async fn setup(client: &Client, sizes: &Sizes) -> &'static str {
    let garden_s = project(client, "scale").await;
    namespace(client, NS).await;
    apply_config(client, "scale", garden_s).await;
    let taken = sizes.taken;
    concurrently((0..taken + sizes.free).collect(), 32, |i| async move {
        let mut labels = BTreeMap::from([("hyperscalerType", "aws".to_string())]);
        // The first ones are held by the tenants of the Bound claims; the rest are free, for
        // the new claims.
        if i < taken {
            labels.insert("tenantName", format!("ga-{i:05}"));
        }
        create_binding(client, &format!("aws-{i:05}"), garden_s, &labels).await;
    })
    .await;
    create_shoots(client, garden_s, sizes).await;
    create_bound_claims(client, garden_s, sizes).await;
    garden_s
}

async fn create_shoots(client: &Client, garden_s: &'static str, sizes: &Sizes) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), garden_s, &garden::shoot_resource());
    let aws = garden::profile(client, "aws").await;
    let (post, taken) = (PostParams::default(), sizes.taken);
    concurrently((0..sizes.shoots).collect(), 32, |i| {
        let (api, post, aws) = (&api, &post, &aws);
        async move {
            let name = format!("shoot-{i:05}");
            let mut shoot = garden::shoot_object(
                garden_s,
                &name,
                &format!("aws-{:05}", i % taken),
                garden::BindingRef::CredentialsBinding,
                aws,
            );
            if landscape::on() {
                landscape::dress(&mut shoot, i, &format!("ga-{:05}", i % taken));
            }
            let obj: DynamicObject = serde_json::from_value(shoot).expect("shoot");
            api.create(post, &obj).await.expect("create Shoot");
            if landscape::on() {
                let status = landscape::status(i, "aws-eu1", "scale", &name);
                landscape::set_status(api, &name, status).await;
            }
        }
    })
    .await;
}

/// Claims Bound with exactly the status the operator would write, so that it finds nothing to
/// change when it starts.
async fn create_bound_claims(client: &Client, garden_s: &'static str, sizes: &Sizes) {
    let api: Api<AccountClaim> = Api::namespaced(client.clone(), NS);
    let now = Time(jiff::Timestamp::now());
    let (post, taken) = (PostParams::default(), sizes.taken);
    concurrently((0..sizes.claims).collect(), 32, |i| {
        let (claims, post, now) = (&api, &post, &now);
        async move {
            let b = i % taken;
            let name = format!("c-{i:05}");
            let obj = claim_obj(&name, &format!("ga-{b:05}"), &format!("shoot-{i:05}"), true);
            let made = claims.create(post, &obj).await.expect("create claim");
            let status = bound_status(&made, &format!("aws-{b:05}"), garden_s, now);
            claims
                .patch_status(
                    &name,
                    &PatchParams::apply(hap_operator::api::FIELD_MANAGER).force(),
                    &Patch::Apply(json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim", "status": status})),
                )
                .await
                .expect("apply status");
        }
    })
    .await;
}

/// The collections the operator caches in this run: its claims, the bindings and the Shoots of
/// the binding namespace.
fn cached_kinds(client: &Client, garden_s: &str) -> Vec<floor::Kind> {
    let claims: Api<AccountClaim> = Api::namespaced(client.clone(), NS);
    let bindings: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        garden_s,
        &garden::credentials_binding_resource(),
    );
    let shoots: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), garden_s, &garden::shoot_resource());
    vec![
        floor::Kind {
            name: "claims",
            url: claims.resource_url().to_string(),
        },
        floor::Kind {
            name: "bindings",
            url: bindings.resource_url().to_string(),
        },
        floor::Kind {
            name: "Shoots",
            url: shoots.resource_url().to_string(),
        },
    ]
}

/// Waits (off the runtime) for /readyz 200; the time since the process started.
pub(super) async fn ready(op: &OperatorProcess) -> Duration {
    let (port, started) = (op.port, op.started);
    tokio::task::spawn_blocking(move || {
        loop {
            if http_get(port, "/readyz").is_some_and(|(code, _)| code == 200) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(900),
                "scale operator not ready in 900s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .expect("ready wait")
}

/// Runs phase 4 and returns its figures.
pub async fn run(
    env: &PrivateEnv,
    client: &Client,
    hap: &Path,
    logs: &Path,
    sizes: &Sizes,
) -> Figures {
    let load_before = loadavg();
    let t = Instant::now();
    let garden_s = setup(client, sizes).await;
    let setup_time = t.elapsed();
    println!(
        "scale setup: {} objects (+{} status writes) in {setup_time:.1?}",
        sizes.objects(),
        sizes.claims
    );
    let floor = floor::measure(client, &cached_kinds(client, garden_s), sizes.floor_passes).await;
    println!(
        "bare-LIST floor (the lowest of {} passes): {}",
        sizes.floor_passes,
        floor.describe()
    );
    let before = request_counts(&env.apiserver_metrics());
    let op = OperatorProcess::spawn(
        hap,
        &env.kubeconfig,
        "bench-scale",
        &operator_args("scale", NS),
        &logs.join("operator-scale.log"),
    );
    let ready = ready(&op).await;
    let mem_ready = mem(&op);
    // Its own CPU up to ready: decoding and indexing every listed object, on the cores the API
    // servers serve the lists from (the floor skips that work).
    let start_cpu = cpu_seconds(op.child.id());
    println!("start -> /readyz 200: {ready:.2?}; operator CPU until then {start_cpu:.2} s");
    // Settled: the start's own work done (no claim needs a write; see the requests below).
    tokio::time::sleep(Duration::from_secs(20)).await;
    let mem_settled = mem(&op);
    let start_requests = diff(&before, &request_counts(&env.apiserver_metrics()));
    let phases = after_ready(client, &op, sizes, logs).await;
    let span = op.started.elapsed().saturating_sub(ready);
    let load_after = loadavg();
    let churn = match &sizes.churn {
        Some(c) => {
            // Reuses go to tenants that hold their binding through a Bound claim.
            let tenants = sizes.taken.min(sizes.claims).max(1);
            Some(churn::run(client, &op, (NS, garden_s, tenants), c).await)
        }
        None => None,
    };
    Figures {
        setup: setup_time,
        floor,
        ready,
        mem_ready,
        mem_settled,
        start_requests,
        phases,
        span,
        load: (load_before, load_after),
        churn,
    }
}

/// Idle, trickle and burst on a ready operator.
async fn after_ready(client: &Client, op: &OperatorProcess, sizes: &Sizes, logs: &Path) -> Phases {
    let pid = op.child.id();
    let (bound, watch) = watch_bound_selected(client, NS, Some(MEASURED));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sweeps = || super::metric_sum(op.port, "hap_resync_sweeps_total").unwrap_or(0.0);
    let (cpu0, sweeps0) = (cpu_seconds(pid), sweeps());
    tokio::time::sleep(sizes.idle).await;
    let idle_s = cpu_seconds(pid) - cpu0;
    let idle_cpu = idle_s / sizes.idle.as_secs_f64().max(1e-3);
    let idle_sweeps = sweeps() - sweeps0;
    println!(
        "idle: {idle_cpu:.4} CPU s/s over {:?}; {idle_sweeps} resync sweeps began inside it{}",
        sizes.idle,
        if idle_sweeps > 0.0 {
            format!(
                ": {:.3} s of CPU per sweep at most (the window's CPU, its config reconciles on the same period included)",
                idle_s / idle_sweeps
            )
        } else {
            String::new()
        }
    );
    let mem_idle = mem(op);
    let api: Api<AccountClaim> = Api::namespaced(client.clone(), NS);
    let trickle = trickle(&api, &bound, pid, sizes).await;
    let mem_trickle = mem(op);
    let perf = Perf::start_if_asked(pid, logs);
    let burst = burst(&api, &bound, pid, sizes).await;
    let profile = perf.map(Perf::finish).unwrap_or_default();
    let mem_burst = mem(op);
    watch.abort();
    Phases {
        idle_cpu,
        mem_idle,
        trickle,
        mem_trickle,
        burst,
        mem_burst,
        profile,
    }
}

type Seen = Arc<Mutex<HashMap<String, Instant>>>;

/// A new claim of a tenant of its own, labelled as measured; returns its create time.
async fn create_new(api: &Api<AccountClaim>, name: &str) -> Instant {
    let mut obj = claim_obj(name, name, name, false);
    obj.meta_mut().labels = Some(BTreeMap::from([(MEASURED.to_string(), "new".to_string())]));
    let t0 = Instant::now();
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create claim");
    t0
}

/// Waits until every claim of `created` is seen Bound; the phase's figures.
async fn finish(created: HashMap<String, Instant>, bound: &Seen, pid: u32, cpu0: f64) -> Phase {
    let start = Instant::now();
    loop {
        let missing = {
            let seen = bound.lock().unwrap();
            created.keys().filter(|n| !seen.contains_key(*n)).count()
        };
        if missing == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "scale: {missing} of {} new claims not Bound after 900 s",
            created.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cpu = cpu_seconds(pid) - cpu0;
    let seen: HashMap<String, Instant> = {
        let seen = bound.lock().unwrap();
        created.keys().map(|k| (k.clone(), seen[k])).collect()
    };
    Phase {
        n: created.len(),
        cpu,
        run: (!created.is_empty()).then(|| summarise(&created, &seen)),
    }
}

/// One new claim every `trickle_every`, each created when its tick comes.
async fn trickle(api: &Api<AccountClaim>, bound: &Seen, pid: u32, sizes: &Sizes) -> Phase {
    let cpu0 = cpu_seconds(pid);
    let mut tick = tokio::time::interval(sizes.trickle_every);
    let mut created = HashMap::new();
    for i in 0..sizes.trickle {
        tick.tick().await;
        let name = format!("t-{i:05}");
        let t0 = create_new(api, &name).await;
        created.insert(name, t0);
    }
    let phase = finish(created, bound, pid, cpu0).await;
    println!(
        "trickle: {} claims, {:.3} ms CPU per claim",
        phase.n,
        phase.ms_per_claim()
    );
    phase
}

/// `burst` new claims created at the fixed concurrency.
async fn burst(api: &Api<AccountClaim>, bound: &Seen, pid: u32, sizes: &Sizes) -> Phase {
    let cpu0 = cpu_seconds(pid);
    let created: Seen = Arc::default();
    concurrently((0..sizes.burst).collect(), sizes.concurrency, |i| {
        let created = created.clone();
        async move {
            let name = format!("b-{i:05}");
            let t0 = create_new(api, &name).await;
            created.lock().unwrap().insert(name, t0);
        }
    })
    .await;
    let created = std::mem::take(&mut *created.lock().unwrap());
    let phase = finish(created, bound, pid, cpu0).await;
    println!(
        "burst: {} claims, {:.3} ms CPU per claim",
        phase.n,
        phase.ms_per_claim()
    );
    phase
}

fn mem_text(m: Mem) -> String {
    m.map(|(rss, anon)| format!("{:.1}/{:.1}", mib(rss), mib(anon)))
        .unwrap_or_else(|| "-".into())
}

fn kib_per_object(m: Mem, objects: usize) -> f64 {
    m.map_or(0.0, |(rss, _)| rss as f64 / objects.max(1) as f64)
}

fn latencies(p: &Phase) -> String {
    p.run
        .as_ref()
        .map(|r| format!("{:.0?}/{:.0?}", r.p50, r.p99))
        .unwrap_or_else(|| "-".into())
}

/// Size as in a table: "10k/5k/10k" (Shoots / taken bindings / claims).
fn size_label(s: &Sizes) -> String {
    let k = |n: usize| {
        if n.is_multiple_of(1000) {
            format!("{}k", n / 1000)
        } else {
            n.to_string()
        }
    };
    format!("{}/{}/{}", k(s.shoots), k(s.taken), k(s.claims))
}

/// Prints phase 4, ending with one Markdown table row.
pub fn report(sizes: &Sizes, f: &Figures) {
    println!("== 4. scale: {} ==", sizes.describe());
    println!(
        "setup {:.1?}; bare-LIST floor (page {}, the lowest of {} passes): {}",
        f.setup,
        hap_operator::k8s::caches::LIST_PAGE,
        sizes.floor_passes,
        f.floor.describe()
    );
    let ratio = f.ready.as_secs_f64() / f.floor.concurrent.as_secs_f64().max(1e-3);
    println!(
        "start -> /readyz 200 {:.2?}: {ratio:.2}x the concurrent floor, {:.2}x the sequential one",
        f.ready,
        f.ready.as_secs_f64() / f.floor.sequential_total().as_secs_f64().max(1e-3)
    );
    println!(
        "VmRSS/RssAnon MiB: at ready {}, 20 s later {}, after idle {}, after trickle {}, after burst {}; {:.2} KiB per cached object 20 s after ready ({} objects)",
        mem_text(f.mem_ready),
        mem_text(f.mem_settled),
        mem_text(f.phases.mem_idle),
        mem_text(f.phases.mem_trickle),
        mem_text(f.phases.mem_burst),
        kib_per_object(f.mem_settled, sizes.objects()),
        sizes.objects()
    );
    report_start_requests(&f.start_requests);
    report_phases(sizes, &f.phases);
    println!(
        "phases ended {:.0?} after ready; load average before setup {}, after burst {}",
        f.span, f.load.0, f.load.1
    );
    for (i, l) in f.phases.profile.iter().enumerate() {
        println!("  perf top {}: {l}", i + 1);
    }
    println!("BENCH-ROW scale {}", table_row(sizes, f, ratio));
    if let (Some(c), Some(figures)) = (&sizes.churn, &f.churn) {
        churn::report(&size_label(sizes), c, figures);
    }
}

fn report_phases(sizes: &Sizes, p: &Phases) {
    println!("idle {:?}: {:.4} operator CPU s/s", sizes.idle, p.idle_cpu);
    println!(
        "trickle: {} claims every {:?}: {:.3} ms CPU per claim, create -> Bound p50/p99 {}",
        p.trickle.n,
        sizes.trickle_every,
        p.trickle.ms_per_claim(),
        latencies(&p.trickle)
    );
    println!(
        "burst: {} claims at concurrency {}: {:.3} ms CPU per claim, {:.1} claims/s, create -> Bound p50/p99 {}",
        p.burst.n,
        sizes.concurrency,
        p.burst.ms_per_claim(),
        p.burst.run.as_ref().map_or(0.0, |r| r.claims_per_s),
        latencies(&p.burst)
    );
}

fn report_start_requests(delta: &Counts) {
    let writes: f64 = delta
        .iter()
        .filter(|((v, r, _), _)| {
            matches!(v.as_str(), "PATCH" | "PUT" | "POST" | "APPLY") && r == "accountclaims"
        })
        .fold(0.0, |a, (_, d)| a + d);
    let lists: Vec<String> = delta
        .iter()
        .filter(|((v, _, _), _)| v == "LIST")
        .map(|((_, r, _), d)| format!("{r} {d:.0}"))
        .collect();
    println!(
        "requests from start to 20 s after ready (the floor's own LISTs before it): claim writes {writes:.0}; LIST {}",
        lists.join(", ")
    );
}

/// | size | objects | ready | floor concurrent (sequential) | ratio | VmRSS ready / 20 s later /
/// after burst | KiB per object | idle CPU s/s | trickle ms/claim, p50/p99 | burst ms/claim,
/// claims/s, p50/p99 | load before -> after |
fn table_row(sizes: &Sizes, f: &Figures, ratio: f64) -> String {
    let p = &f.phases;
    let rss = |m: Mem| m.map_or(0.0, |(r, _)| mib(r));
    format!(
        "| {} | {} | {:.2} s | {:.2} s ({:.2} s) | {ratio:.2} | {:.0} / {:.0} / {:.0} MiB | {:.2} | {:.4} | {:.3} ms, {} | {:.3} ms, {:.1}/s, {} | {} -> {} |",
        size_label(sizes),
        sizes.objects(),
        f.ready.as_secs_f64(),
        f.floor.concurrent.as_secs_f64(),
        f.floor.sequential_total().as_secs_f64(),
        rss(f.mem_ready),
        rss(f.mem_settled),
        rss(p.mem_burst),
        kib_per_object(f.mem_settled, sizes.objects()),
        p.idle_cpu,
        p.trickle.ms_per_claim(),
        latencies(&p.trickle),
        p.burst.ms_per_claim(),
        p.burst.run.as_ref().map_or(0.0, |r| r.claims_per_s),
        latencies(&p.burst),
        f.load.0,
        f.load.1
    )
}
