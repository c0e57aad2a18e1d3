//! Phase 6: churn, on the scale phase's landscape and its running operator. For
//! `HAP_BENCH_CHURN_S`, claims come and go at a steady rate, each deleted `HAP_BENCH_CHURN_LIFE_S`
//! after its creation: new tenants (each takes a free binding; its release marks the binding
//! dirty, and a cleanup job here frees it again, as KEB's does) and reuses of the background's
//! tenants, each with a dressed Shoot on the tenant's binding. The HapConfig's refresh cycle and
//! the operator's resync sweep run inside the window. Sampled off the creating task: VmRSS, the
//! peak since the churn began (VmHWM, reset at its start) and CPU every 10 s,
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

use super::private_env::{OperatorProcess, env_num, http_get, memory_kib};
use super::{MEASURED, binding_ar, claim_obj, concurrently, cpu_seconds, create_binding, garden};
use super::{landscape, median, metric_sum, mib, percentile};

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
            resync()
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
    /// Create → Bound of every churn claim, sorted; a claim never seen Bound counts as its
    /// whole life (it was deleted first), so it raises the percentiles rather than leaving them.
    pub latencies: Vec<Duration>,
    /// Refreshes the operator logged and resync sweeps it counted inside the window.
    pub refreshes: usize,
    pub sweeps: f64,
    /// The operator's VmHWM before the churn (its start and the scale phase), KiB.
    pub hwm_before_kib: u64,
    /// Creations and deletions that failed, and watch errors of the cleanup job.
    pub failures: usize,
    /// Samples the operator did not answer (it had exited).
    pub gone: usize,
}

/// Where churn claims live: the scale phase's claim namespace.
struct Ctx {
    client: Client,
    ns: &'static str,
    garden: &'static str,
    profile: garden::Profile,
    live: AtomicUsize,
    deleted: AtomicUsize,
    failures: AtomicUsize,
    created: Mutex<BTreeMap<String, Instant>>,
}

/// Runs the churn on `op` and returns its figures.
pub async fn run(
    client: &Client,
    op: &OperatorProcess,
    (ns, garden_s, tenants): (&'static str, &'static str, usize),
    churn: &Churn,
) -> Figures {
    let sweeps = || metric_sum(op.port, "hap_resync_sweeps_total").unwrap_or(0.0);
    let before = (log_lines(&op.log, REFRESH_LINE), sweeps());
    set_refresh(client, &churn.refresh).await;
    concurrently((0..churn.free).collect(), 32, |i| async move {
        let labels = BTreeMap::from([("hyperscalerType", "aws".to_string())]);
        create_binding(client, &format!("churn-{i:05}"), garden_s, &labels).await;
    })
    .await;
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        ns,
        garden: garden_s,
        profile: garden::profile(client, "aws").await,
        live: AtomicUsize::new(0),
        deleted: AtomicUsize::new(0),
        failures: AtomicUsize::new(0),
        created: Mutex::default(),
    });
    let freed = Arc::new(AtomicUsize::new(0));
    let cleanup = tokio::spawn(cleanup_job(ctx.clone(), freed.clone()));
    let (bound, watch) =
        super::watch_bound_selected(client, ns, Some(&format!("{MEASURED}=churn")));
    let hwm_before_kib = op.memory_kib().map_or(0, |(_, hwm)| hwm);
    reset_peak(op.child.id());
    let samples = drive(&ctx, op, churn, tenants).await;
    // Every claim's deletion is through (the drive waits for its tasks); the release and the
    // cleanup job settle within seconds.
    tokio::time::sleep(Duration::from_secs(10)).await;
    cleanup.abort();
    watch.abort();
    let created = std::mem::take(&mut *ctx.created.lock().unwrap());
    let seen = bound.lock().unwrap().clone();
    let mut latencies: Vec<Duration> = created
        .iter()
        .map(|(n, t0)| {
            seen.get(n)
                .map_or(churn.life, |t| t.saturating_duration_since(*t0))
        })
        .collect();
    latencies.sort();
    Figures {
        gone: samples.iter().filter(|s| s.rss_kib == 0).count(),
        samples,
        created: created.len(),
        bound: created.keys().filter(|n| seen.contains_key(*n)).count(),
        deleted: ctx.deleted.load(Ordering::SeqCst),
        freed: freed.load(Ordering::SeqCst),
        latencies,
        refreshes: log_lines(&op.log, REFRESH_LINE).saturating_sub(before.0),
        sweeps: sweeps() - before.1,
        hwm_before_kib,
        failures: ctx.failures.load(Ordering::SeqCst),
    }
}

/// Sets VmHWM to the current VmRSS (`clear_refs` 5), so that the peak read later is the churn's.
fn reset_peak(pid: u32) {
    if let Err(e) = std::fs::write(format!("/proc/{pid}/clear_refs"), "5") {
        println!("churn: cannot reset the operator's VmHWM ({e}); the peak includes its start");
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

/// Creates a claim every 1/rate s for the duration, each deleted after its life, while a task
/// of its own samples the operator; returns the samples once every claim is deleted.
async fn drive(ctx: &Arc<Ctx>, op: &OperatorProcess, churn: &Churn, tenants: usize) -> Vec<Sample> {
    let start = Instant::now();
    let sampler = tokio::spawn(sampler(
        ctx.clone(),
        op.child.id(),
        op.port,
        start,
        churn.duration,
    ));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / churn.rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = Vec::new();
    let mut i = 0usize;
    while start.elapsed() < churn.duration {
        tick.tick().await;
        let (ctx, life) = (ctx.clone(), churn.life);
        tasks.push(tokio::spawn(async move {
            if let Err(e) = one(&ctx, i, tenants, life).await {
                eprintln!("churn claim {i}: {e}");
                ctx.failures.fetch_add(1, Ordering::SeqCst);
            }
        }));
        i += 1;
    }
    for t in tasks {
        if t.await.is_err() {
            ctx.failures.fetch_add(1, Ordering::SeqCst);
        }
    }
    let mut samples = sampler.await.expect("churn sampler");
    let (pid, port) = (op.child.id(), op.port);
    let last = tokio::task::spawn_blocking(move || sample_now(pid, port, start, 0, true))
        .await
        .expect("last sample");
    samples.push(last);
    samples
}

/// Every 10 s until `until`, off the runtime's threads (a scrape of /metrics at 100k objects
/// takes a while): VmRSS, VmHWM, CPU, and every minute the entries.
async fn sampler(
    ctx: Arc<Ctx>,
    pid: u32,
    port: u16,
    start: Instant,
    until: Duration,
) -> Vec<Sample> {
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    let mut samples = Vec::new();
    while start.elapsed() < until {
        tick.tick().await;
        let (live, scrape) = (ctx.live.load(Ordering::SeqCst), samples.len() % 6 == 0);
        let s = tokio::task::spawn_blocking(move || sample_now(pid, port, start, live, scrape))
            .await
            .expect("sample");
        println!("{}", describe(&s));
        samples.push(s);
    }
    samples
}

/// One claim's life: created (with its Shoot for a reuse), kept `life`, deleted.
async fn one(ctx: &Ctx, i: usize, tenants: usize, life: Duration) -> Result<(), kube::Error> {
    let claims: Api<AccountClaim> = Api::namespaced(ctx.client.clone(), ctx.ns);
    let shoots: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), ctx.garden, &garden::shoot_resource());
    let reuse = i % 2 == 1;
    let name = format!("churn-{i:06}");
    // A tenant of the background, which holds its binding through a Bound claim of its own: the
    // reuse's release leaves the binding with it.
    let tenant = if reuse {
        format!("ga-{:05}", (i * 7919) % tenants)
    } else {
        name.clone()
    };
    if reuse {
        create_shoot(&shoots, ctx, &name, &tenant, i).await?;
    }
    let mut obj = claim_obj(&name, &tenant, &name, false);
    obj.meta_mut().labels = Some(BTreeMap::from([(
        MEASURED.to_string(),
        "churn".to_string(),
    )]));
    let t0 = Instant::now();
    claims.create(&PostParams::default(), &obj).await?;
    ctx.created.lock().unwrap().insert(name.clone(), t0);
    ctx.live.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(life).await;
    if reuse {
        delete_shoot(&shoots, &name).await?;
    }
    claims.delete(&name, &DeleteParams::default()).await?;
    ctx.live.fetch_sub(1, Ordering::SeqCst);
    ctx.deleted.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

async fn create_shoot(
    api: &Api<DynamicObject>,
    ctx: &Ctx,
    name: &str,
    tenant: &str,
    i: usize,
) -> Result<(), kube::Error> {
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
    api.create(&PostParams::default(), &obj).await?;
    if landscape::on() {
        let project = ctx.garden.trim_start_matches("garden-");
        landscape::set_status(api, name, landscape::status(i, "aws-eu1", project, name)).await;
    }
    Ok(())
}

async fn delete_shoot(api: &Api<DynamicObject>, name: &str) -> Result<(), kube::Error> {
    let confirm = json!({"metadata": {"annotations": {garden::DELETION_CONFIRMATION: "true"}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(confirm))
        .await?;
    api.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

/// KEB's cleanup job, minus the account's wipe: a binding marked dirty gets its tenant and dirty
/// labels removed, conditioned on the version it was seen at, and is free again.
async fn cleanup_job(ctx: Arc<Ctx>, freed: Arc<AtomicUsize>) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), ctx.garden, &binding_ar());
    let stream = watcher(api.clone(), watcher::Config::default().labels("dirty=true"))
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    // A watch error must not end the job: dirty bindings would pile up and the pool drain.
    while let Some(event) = stream.next().await {
        let b = match event {
            Ok(b) => b,
            Err(e) => {
                eprintln!("cleanup job's watch: {e}; retrying");
                ctx.failures.fetch_add(1, Ordering::SeqCst);
                continue;
            }
        };
        let patch = json!({"metadata": {"resourceVersion": b.resource_version(),
            "labels": {"dirty": null, "tenantName": null}}});
        match api
            .patch(&b.name_any(), &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => drop(freed.fetch_add(1, Ordering::SeqCst)),
            // Changed since it was seen: its next event comes through the watch.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                eprintln!("cleanup job: {}: {e}", b.name_any());
                ctx.failures.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// A sample of process `pid` (a blocking read of /proc, and of /metrics when `scrape`).
fn sample_now(pid: u32, port: u16, start: Instant, live: usize, scrape: bool) -> Sample {
    let (rss_kib, hwm_kib) = memory_kib(pid).unwrap_or_default();
    Sample {
        at: start.elapsed(),
        rss_kib,
        hwm_kib,
        cpu: cpu_seconds(pid),
        live,
        entries: if scrape {
            entries(port)
        } else {
            BTreeMap::new()
        },
    }
}

/// The series of `hap_internal_entries` and `hap_claim_reconciles_queued` from /metrics.
fn entries(port: u16) -> BTreeMap<String, i64> {
    let Some((200, text)) = http_get(port, "/metrics") else {
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

/// The refresh cycle's line in the operator's log.
const REFRESH_LINE: &str = "refreshing internal state";

/// Lines of the operator's log so far that contain `needle`.
fn log_lines(log: &Path, needle: &str) -> usize {
    std::fs::read_to_string(log)
        .map(|t| t.lines().filter(|l| l.contains(needle)).count())
        .unwrap_or(0)
}

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

/// The figures after the warm-up: RSS median, spread (max − min over the median, in %), drift,
/// the peak since the churn began (VmHWM, reset at its start) over that median, CPU s/s.
pub struct Steady {
    pub rss_median: f64,
    pub rss_min: f64,
    pub rss_max: f64,
    pub spread_pct: f64,
    /// The median of the last quarter of the samples against the first quarter's, in %.
    pub drift_pct: f64,
    pub hwm: f64,
    pub hwm_ratio: f64,
    pub cpu_per_s: f64,
    /// Per structure: the first and last value after the warm-up, and the largest.
    pub entries: BTreeMap<String, (i64, i64, i64)>,
}

/// `None` without a sample after the warm-up from a running operator.
pub fn steady(samples: &[Sample], warmup: Duration) -> Option<Steady> {
    let after: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at >= warmup && s.rss_kib > 0)
        .collect();
    let (first, last) = (after.first()?, after.last()?);
    let rss = |part: &[&Sample]| part.iter().map(|s| mib(s.rss_kib)).collect::<Vec<f64>>();
    let all = rss(&after);
    let rss_median = median(all.clone());
    let (rss_min, rss_max) = all
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    let q = (after.len() / 4).max(1);
    let drift = median(rss(&after[after.len() - q..])) / median(rss(&after[..q])) - 1.0;
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
        rss_median,
        rss_min,
        rss_max,
        spread_pct: (rss_max - rss_min) / rss_median.max(1e-9) * 100.0,
        drift_pct: drift * 100.0,
        hwm,
        hwm_ratio: hwm / rss_median.max(1e-9),
        cpu_per_s: (last.cpu - first.cpu) / span,
        entries,
    })
}

fn resync() -> String {
    std::env::var("HAP_BENCH_RESYNC").unwrap_or_else(|_| "5m".into())
}

/// Prints phase 6, ending with one Markdown table row.
pub fn report(size: &str, churn: &Churn, f: &Figures) {
    println!(
        "== 6. churn over {size}: {:?} at {:.2} claims/s, each deleted after {:?}, refresh cycle {}, resync {} ==",
        churn.duration,
        churn.rate,
        churn.life,
        churn.refresh,
        resync()
    );
    println!(
        "claims created {}, seen Bound {} (never Bound: {}), deleted {}; bindings freed by the cleanup job {}; failed requests {}; refreshes {}, resync sweeps {}; samples without the operator {}",
        f.created,
        f.bound,
        f.created - f.bound,
        f.deleted,
        f.freed,
        f.failures,
        f.refreshes,
        f.sweeps,
        f.gone
    );
    let (p50, p99) = (
        percentile(&f.latencies, 0.5),
        percentile(&f.latencies, 0.99),
    );
    println!(
        "create -> Bound p50 {p50:.0?}, p99 {p99:.0?} (a claim never Bound counts as its life)"
    );
    let Some(s) = steady(&f.samples, churn.warmup) else {
        println!(
            "churn: no sample of a running operator after the warm-up of {:?}",
            churn.warmup
        );
        return;
    };
    println!(
        "after the warm-up ({:?}): VmRSS median {:.1} MiB, min {:.1}, max {:.1} (spread {:.1} % of the median; the last quarter's median {:+.1} % from the first's); peak since the churn began (VmHWM) {:.1} MiB = {:.2}x the median (before the churn, start and scale phases: {:.1} MiB); operator CPU {:.4} s/s",
        churn.warmup,
        s.rss_median,
        s.rss_min,
        s.rss_max,
        s.spread_pct,
        s.drift_pct,
        s.hwm,
        s.hwm_ratio,
        mib(f.hwm_before_kib),
        s.cpu_per_s
    );
    for (k, (first, last, max)) in &s.entries {
        println!("  {k}: first {first}, last {last}, max {max}");
    }
    println!("reproduce: {}", churn.env_line());
    println!(
        "BENCH-ROW churn | {size} | {:.0} min at {:.2}/s, life {} s, refresh {}, resync {} | {:.1} MiB ({:.1}–{:.1}) | {:.1} % | {:+.1} % | {:.1} MiB (start {:.1}) | {:.2} | {:.4} | {p50:.0?} / {p99:.0?} | {} / {} / {} / {} |",
        churn.duration.as_secs_f64() / 60.0,
        churn.rate,
        churn.life.as_secs(),
        churn.refresh,
        resync(),
        s.rss_median,
        s.rss_min,
        s.rss_max,
        s.spread_pct,
        s.drift_pct,
        s.hwm,
        mib(f.hwm_before_kib),
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
