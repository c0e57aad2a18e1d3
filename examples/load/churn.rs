//! Phase 6: churn, on the scale phase's landscape and its running operator. For
//! `HAP_BENCH_CHURN_S`, claims come and go at a steady rate, each deleted `HAP_BENCH_CHURN_LIFE_S`
//! after its creation: new tenants (each takes a free binding; its release marks the binding
//! dirty, and a cleanup job here frees it again, as KEB's does) and reuses of the background's
//! tenants, each with a dressed Shoot on the tenant's binding. The HapConfig's refresh cycle and
//! the operator's resync sweep run inside the window. Sampled: VmRSS, VmHWM and CPU every 10 s,
//! `hap_internal_entries` and the lanes' queues every minute.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hap_operator::api::{AccountClaim, HapConfig};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::private_env::{OperatorProcess, env_num};
use super::{MEASURED, binding_ar, claim_obj, concurrently, cpu_seconds, create_binding, garden};
use super::{landscape, mib};

/// What a churn run does.
#[derive(Clone, Debug)]
pub struct Churn {
    pub duration: Duration,
    /// Claims created per second (new tenants and reuses alternate).
    pub rate: f64,
    pub life: Duration,
    /// Samples before this are the warm-up, outside the flatness figure.
    pub warmup: Duration,
    /// The HapConfig's `internalStateRefreshCycleDuration`.
    pub refresh: String,
    /// Free bindings added for the new tenants.
    pub free: usize,
}

impl Churn {
    /// `None` unless `HAP_BENCH_CHURN_S` is set above 0.
    pub fn from_env() -> Option<Self> {
        let secs = env_num("HAP_BENCH_CHURN_S", 0);
        (secs > 0).then(|| {
            let rate = env_num("HAP_BENCH_CHURN_RATE_MILLI", 2000).max(1) as f64 / 1000.0;
            let life = Duration::from_secs(env_num("HAP_BENCH_CHURN_LIFE_S", 60).max(1) as u64);
            // New tenants live `life`, then wait for the cleanup job: twice that, and a margin.
            let needed = (rate / 2.0 * life.as_secs_f64() * 2.0) as usize + 50;
            Self {
                duration: Duration::from_secs(secs as u64),
                rate,
                life,
                warmup: Duration::from_secs(env_num("HAP_BENCH_CHURN_WARMUP_S", 300) as u64),
                refresh: std::env::var("HAP_BENCH_CHURN_REFRESH").unwrap_or_else(|_| "10m".into()),
                free: env_num("HAP_BENCH_CHURN_FREE", needed).max(needed),
            }
        })
    }

    pub fn env_line(&self) -> String {
        format!(
            "HAP_BENCH_CHURN_S={} HAP_BENCH_CHURN_RATE_MILLI={} HAP_BENCH_CHURN_LIFE_S={} HAP_BENCH_CHURN_WARMUP_S={} HAP_BENCH_CHURN_REFRESH={} HAP_BENCH_CHURN_FREE={} HAP_BENCH_RESYNC={}",
            self.duration.as_secs(),
            (self.rate * 1000.0).round(),
            self.life.as_secs(),
            self.warmup.as_secs(),
            self.refresh,
            self.free,
            std::env::var("HAP_BENCH_RESYNC").unwrap_or_else(|_| "5m".into())
        )
    }
}

/// One sample of the operator.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub at: Duration,
    pub rss_kib: u64,
    pub hwm_kib: u64,
    pub cpu: f64,
    /// Churn claims alive (created, not yet deleted).
    pub live: usize,
    /// `hap_internal_entries` and `hap_claim_reconciles_queued`, on the minute's samples.
    pub entries: BTreeMap<String, i64>,
}

pub struct Figures {
    pub samples: Vec<Sample>,
    pub created: usize,
    pub bound: usize,
    pub deleted: usize,
    pub freed: usize,
    /// Create → Bound of the churn claims seen Bound, sorted.
    pub latencies: Vec<Duration>,
    /// Refreshes and resync sweeps the operator logged inside the window.
    pub refreshes: usize,
    pub sweeps: usize,
}

/// Where churn claims live: the scale phase's claim namespace.
struct Ctx {
    client: Client,
    ns: &'static str,
    garden: &'static str,
    profile: garden::Profile,
    live: AtomicUsize,
    deleted: AtomicUsize,
    created: Mutex<BTreeMap<String, Instant>>,
}

/// Runs the churn on `op` and returns its figures.
pub async fn run(
    client: &Client,
    op: &OperatorProcess,
    (ns, garden_s, taken): (&'static str, &'static str, usize),
    churn: &Churn,
) -> Figures {
    set_refresh(client, &churn.refresh).await;
    concurrently((0..churn.free).collect(), 32, |i| async move {
        let labels = BTreeMap::from([("hyperscalerType", "aws".to_string())]);
        create_binding(client, &format!("churn-{i:05}"), garden_s, &labels).await;
    })
    .await;
    let freed = Arc::new(AtomicUsize::new(0));
    let cleanup = tokio::spawn(cleanup_job(client.clone(), garden_s, freed.clone()));
    let (bound, watch) =
        super::watch_bound_selected(client, ns, Some(&format!("{MEASURED}=churn")));
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        ns,
        garden: garden_s,
        profile: garden::profile(client, "aws").await,
        live: AtomicUsize::new(0),
        deleted: AtomicUsize::new(0),
        created: Mutex::default(),
    });
    let lines = |op: &OperatorProcess| {
        (
            log_lines(&op.log, REFRESH_LINE),
            log_lines(&op.log, SWEEP_LINE),
        )
    };
    let before = lines(op);
    let samples = drive(&ctx, op, churn, taken).await;
    // Every claim's deletion is through (the drive waits for its tasks); the release and the
    // cleanup job settle within seconds.
    tokio::time::sleep(Duration::from_secs(10)).await;
    cleanup.abort();
    watch.abort();
    let created = std::mem::take(&mut *ctx.created.lock().unwrap());
    let seen = bound.lock().unwrap().clone();
    let mut latencies: Vec<Duration> = created
        .iter()
        .filter_map(|(n, t0)| seen.get(n).map(|t| t.saturating_duration_since(*t0)))
        .collect();
    latencies.sort();
    Figures {
        samples,
        created: created.len(),
        bound: latencies.len(),
        deleted: ctx.deleted.load(Ordering::SeqCst),
        freed: freed.load(Ordering::SeqCst),
        latencies,
        refreshes: lines(op).0.saturating_sub(before.0),
        sweeps: lines(op).1.saturating_sub(before.1),
    }
}

/// Sets the refresh cycle on the HapConfig the scale phase applied (a field manager of its own).
async fn set_refresh(client: &Client, cycle: &str) {
    let api: Api<HapConfig> = Api::all(client.clone());
    let body = json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "HapConfig",
        "metadata": {"name": "scale"}, "spec": {"internalStateRefreshCycleDuration": cycle}});
    api.patch(
        "scale",
        &PatchParams::apply("bench-churn").force(),
        &Patch::Apply(body),
    )
    .await
    .expect("set the refresh cycle");
}

/// Creates a claim every 1/rate s for the duration, each deleted after its life, and samples
/// the operator meanwhile; returns once every claim is deleted.
async fn drive(ctx: &Arc<Ctx>, op: &OperatorProcess, churn: &Churn, taken: usize) -> Vec<Sample> {
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / churn.rate));
    let mut sample_tick = tokio::time::interval(Duration::from_secs(10));
    let mut samples = Vec::new();
    let mut tasks = Vec::new();
    let mut i = 0usize;
    while start.elapsed() < churn.duration {
        tokio::select! {
            _ = tick.tick() => {
                let (ctx, life) = (ctx.clone(), churn.life);
                tasks.push(tokio::spawn(async move { one(&ctx, i, taken, life).await }));
                i += 1;
            }
            _ = sample_tick.tick() => {
                let s = sample(op, start, ctx, samples.len() % 6 == 0);
                println!("{}", describe(&s));
                samples.push(s);
            }
        }
    }
    for t in tasks {
        t.await.expect("churn task");
    }
    samples.push(sample(op, start, ctx, true));
    samples
}

/// One claim's life: created (with its Shoot for a reuse), kept `life`, deleted.
async fn one(ctx: &Ctx, i: usize, taken: usize, life: Duration) {
    let claims: Api<AccountClaim> = Api::namespaced(ctx.client.clone(), ctx.ns);
    let shoots: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), ctx.garden, &garden::shoot_resource());
    let reuse = i % 2 == 1;
    let name = format!("churn-{i:06}");
    let tenant = if reuse {
        format!("ga-{:05}", (i * 7919) % taken)
    } else {
        name.clone()
    };
    if reuse {
        create_shoot(&shoots, ctx, &name, &tenant, i).await;
    }
    let mut obj = claim_obj(&name, &tenant, &name, false);
    obj.meta_mut().labels = Some(BTreeMap::from([(
        MEASURED.to_string(),
        "churn".to_string(),
    )]));
    let t0 = Instant::now();
    claims
        .create(&PostParams::default(), &obj)
        .await
        .expect("create churn claim");
    ctx.created.lock().unwrap().insert(name.clone(), t0);
    ctx.live.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(life).await;
    if reuse {
        delete_shoot(&shoots, &name).await;
    }
    claims
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete churn claim");
    ctx.live.fetch_sub(1, Ordering::SeqCst);
    ctx.deleted.fetch_add(1, Ordering::SeqCst);
}

async fn create_shoot(api: &Api<DynamicObject>, ctx: &Ctx, name: &str, tenant: &str, i: usize) {
    let binding = format!("aws-{}", &tenant["ga-".len()..]);
    let mut shoot = garden::shoot_object(
        ctx.garden,
        name,
        &binding,
        garden::BindingRef::CredentialsBinding,
        &ctx.profile,
    );
    if landscape::on() {
        landscape::dress(&mut shoot, i, tenant);
    }
    let obj: DynamicObject = serde_json::from_value(shoot).expect("shoot");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create churn Shoot");
    if landscape::on() {
        let project = ctx.garden.trim_start_matches("garden-");
        landscape::set_status(api, name, landscape::status(i, "aws-eu1", project, name)).await;
    }
}

async fn delete_shoot(api: &Api<DynamicObject>, name: &str) {
    let confirm = json!({"metadata": {"annotations": {garden::DELETION_CONFIRMATION: "true"}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(confirm))
        .await
        .expect("confirm the Shoot's deletion");
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete churn Shoot");
}

/// KEB's cleanup job, minus the account's wipe: a binding marked dirty gets its tenant and dirty
/// labels removed, conditioned on the version it was seen at, and is free again.
async fn cleanup_job(client: Client, garden_s: &'static str, freed: Arc<AtomicUsize>) {
    let api: Api<DynamicObject> = Api::namespaced_with(client, garden_s, &binding_ar());
    let stream = watcher(api.clone(), watcher::Config::default().labels("dirty=true"))
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    while let Some(Ok(b)) = stream.next().await {
        let patch = json!({"metadata": {"resourceVersion": b.resource_version(),
            "labels": {"dirty": null, "tenantName": null}}});
        if api
            .patch(&b.name_any(), &PatchParams::default(), &Patch::Merge(patch))
            .await
            .is_ok()
        {
            freed.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn sample(op: &OperatorProcess, start: Instant, ctx: &Ctx, scrape: bool) -> Sample {
    let (rss_kib, hwm_kib) = op.memory_kib().unwrap_or_default();
    Sample {
        at: start.elapsed(),
        rss_kib,
        hwm_kib,
        cpu: cpu_seconds(op.child.id()),
        live: ctx.live.load(Ordering::SeqCst),
        entries: if scrape { entries(op) } else { BTreeMap::new() },
    }
}

/// The series of `hap_internal_entries` and `hap_claim_reconciles_queued` from /metrics.
fn entries(op: &OperatorProcess) -> BTreeMap<String, i64> {
    let Some((200, text)) = op.get("/metrics") else {
        return BTreeMap::new();
    };
    parse_entries(&text)
}

fn parse_entries(text: &str) -> BTreeMap<String, i64> {
    text.lines()
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let name = if let Some(s) = series.strip_prefix("hap_internal_entries{structure=\"") {
                s.strip_suffix("\"}")?.to_string()
            } else {
                let lane = series.strip_prefix("hap_claim_reconciles_queued{lane=\"")?;
                format!("queued_{}", lane.strip_suffix("\"}")?)
            };
            Some((name, value.trim().parse().ok()?))
        })
        .collect()
}

/// Lines of the operator's log so far that contain `needle`.
pub fn log_lines(log: &Path, needle: &str) -> usize {
    std::fs::read_to_string(log)
        .map(|t| t.lines().filter(|l| l.contains(needle)).count())
        .unwrap_or(0)
}

/// The refresh cycle's line and the resync sweep's.
pub const REFRESH_LINE: &str = "refreshing internal state";
pub const SWEEP_LINE: &str = "resync sweep";

fn describe(s: &Sample) -> String {
    let entries: Vec<String> = s
        .entries
        .iter()
        .filter(|(_, n)| **n != 0)
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    format!(
        "churn t={:.0}s VmRSS {:.1} MiB VmHWM {:.1} MiB CPU {:.2} s live {}{}",
        s.at.as_secs_f64(),
        mib(s.rss_kib),
        mib(s.hwm_kib),
        s.cpu,
        s.live,
        if entries.is_empty() {
            String::new()
        } else {
            format!(" entries {}", entries.join(" "))
        }
    )
}

/// The figures after warm-up: RSS median, spread (max − min over the median, in %), the last
/// VmHWM over that median, CPU s/s.
pub struct Steady {
    pub rss_median: f64,
    pub rss_min: f64,
    pub rss_max: f64,
    pub spread_pct: f64,
    pub hwm: f64,
    pub hwm_ratio: f64,
    pub cpu_per_s: f64,
    /// The median of the last quarter of the samples against the first quarter's, in %.
    pub drift_pct: f64,
    /// Per structure: the first and last value after warm-up, and the largest.
    pub entries: BTreeMap<String, (i64, i64, i64)>,
}

pub fn steady(samples: &[Sample], warmup: Duration) -> Option<Steady> {
    let after: Vec<&Sample> = samples.iter().filter(|s| s.at >= warmup).collect();
    let (first, last) = (after.first()?, after.last()?);
    let mut rss: Vec<f64> = after.iter().map(|s| mib(s.rss_kib)).collect();
    rss.sort_by(f64::total_cmp);
    let median = rss[rss.len() / 2];
    let quarter = |part: &[&Sample]| {
        let mut v: Vec<f64> = part.iter().map(|s| mib(s.rss_kib)).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let q = (after.len() / 4).max(1);
    let drift = quarter(&after[after.len() - q..]) / quarter(&after[..q]) - 1.0;
    let (min, max) = (rss[0], rss[rss.len() - 1]);
    let hwm = mib(last.hwm_kib);
    let span = (last.at - first.at).as_secs_f64().max(1.0);
    let mut entries: BTreeMap<String, (i64, i64, i64)> = BTreeMap::new();
    for s in after.iter().filter(|s| !s.entries.is_empty()) {
        for (k, v) in &s.entries {
            let e = entries.entry(k.clone()).or_insert((*v, *v, *v));
            e.1 = *v;
            e.2 = e.2.max(*v);
        }
    }
    Some(Steady {
        rss_median: median,
        rss_min: min,
        rss_max: max,
        spread_pct: (max - min) / median.max(1e-9) * 100.0,
        hwm,
        hwm_ratio: hwm / median.max(1e-9),
        cpu_per_s: (last.cpu - first.cpu) / span,
        drift_pct: drift * 100.0,
        entries,
    })
}

fn pick(lat: &[Duration], q: f64) -> Duration {
    lat.get(((lat.len() as f64 * q) as usize).min(lat.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

/// Prints phase 6, ending with one Markdown table row.
pub fn report(size: &str, churn: &Churn, f: &Figures) {
    println!(
        "== 6. churn over {size}: {:?} at {:.2} claims/s, each deleted after {:?}, refresh cycle {}, resync {} ==",
        churn.duration,
        churn.rate,
        churn.life,
        churn.refresh,
        std::env::var("HAP_BENCH_RESYNC").unwrap_or_else(|_| "5m".into())
    );
    println!(
        "claims created {}, seen Bound {}, deleted {}; bindings freed by the cleanup job {}; refreshes {}, resync sweeps {}",
        f.created, f.bound, f.deleted, f.freed, f.refreshes, f.sweeps
    );
    let (p50, p99) = (pick(&f.latencies, 0.5), pick(&f.latencies, 0.99));
    println!("create -> Bound p50 {p50:.0?}, p99 {p99:.0?}");
    let Some(s) = steady(&f.samples, churn.warmup) else {
        println!("churn: no sample after the warm-up of {:?}", churn.warmup);
        return;
    };
    println!(
        "after the warm-up ({:?}): VmRSS median {:.1} MiB, min {:.1}, max {:.1} (spread {:.1} % of the median; the last quarter's median {:+.1} % from the first's); VmHWM {:.1} MiB = {:.2}x the median; operator CPU {:.4} s/s",
        churn.warmup,
        s.rss_median,
        s.rss_min,
        s.rss_max,
        s.spread_pct,
        s.drift_pct,
        s.hwm,
        s.hwm_ratio,
        s.cpu_per_s
    );
    for (k, (first, last, max)) in &s.entries {
        println!("  {k}: first {first}, last {last}, max {max}");
    }
    println!("reproduce: {}", churn.env_line());
    println!(
        "BENCH-ROW churn | {size} | {:.0} min at {:.2}/s, life {} s, refresh {}, resync {} | {:.1} MiB ({:.1}–{:.1}) | {:.1} % | {:+.1} % | {:.1} MiB | {:.2} | {:.4} | {p50:.0?} / {p99:.0?} | {} / {} / {} / {} |",
        churn.duration.as_secs_f64() / 60.0,
        churn.rate,
        churn.life.as_secs(),
        churn.refresh,
        std::env::var("HAP_BENCH_RESYNC").unwrap_or_else(|_| "5m".into()),
        s.rss_median,
        s.rss_min,
        s.rss_max,
        s.spread_pct,
        s.drift_pct,
        s.hwm,
        s.hwm_ratio,
        s.cpu_per_s,
        f.created,
        f.bound,
        f.refreshes,
        f.sweeps
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entries_and_lane_queues_are_read_from_the_exposition() {
        let text = "# HELP hap_internal_entries x\n\
            hap_internal_entries{structure=\"index_claims\"} 12\n\
            hap_claim_reconciles_queued{lane=\"source\"} 3\n\
            hap_leader 1\n";
        let e = parse_entries(text);
        assert_eq!(e.get("index_claims"), Some(&12));
        assert_eq!(e.get("queued_source"), Some(&3));
        assert_eq!(e.len(), 2);
    }
}
