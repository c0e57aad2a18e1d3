//! Wiring: watches into the ledger, leader election and its fence, the HapConfig and
//! AccountClaim controllers, the triggers that bring waiting claims back when their pool moves,
//! HTTP and shutdown, and the stream plumbing between them (relay, spec changes, the sweep).
//! Decisions are made by the pure modules and every API call by `k8s` (`k8s::startup` for the
//! start-up and take-over reads); this module feeds the one and wires the other.
//!
//! Every replica watches everything (HapConfigs, claims, and the bindings and Shoots of the
//! config in force) from its start, and is ready once those caches have synced; only the leader
//! runs the controllers. A standby that takes over re-reads bindings and claims with one
//! consistent list each (the writes of the old leader may not have reached its watches yet),
//! then starts at once with a warm index.

mod account_check;
pub mod args;
pub mod backoff;
mod claim;
mod claim_facts;
#[cfg(test)]
mod claim_tests;
mod claim_write;
#[cfg(test)]
mod claim_write_tests;
mod config;
#[cfg(test)]
mod config_tests;
mod denials;
#[cfg(test)]
mod fixtures;
mod footprint;
mod lanes;
mod leader;
mod lifecycle;
mod outcome;
mod quarantine;
mod release;
#[cfg(test)]
mod release_tests;
mod revisit;
mod sources;
mod sources_adopt;
#[cfg(test)]
mod sources_tests;
mod strays;
mod visits;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::controller::{self as kcontroller, Action};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;

pub use args::{LogFormat, RunArgs};

use crate::api::HapConfig;
use crate::http::Health;
use crate::k8s::active::{ActiveConfig, ConfigResolver, ConfigState};
use crate::k8s::caches::{
    BindingCache, SharedLedger, ShootCache, lock, relist_pages, store_ready, watch_bindings,
    watch_other_bindings, watch_shoots,
};
use crate::k8s::last_good::{LastGood, LastGoodApi};
use crate::k8s::lean::StoredClaim;
use crate::k8s::startup;
use crate::k8s::{Caches, ChangeFeed, Cluster, Retargetable, Writer};
use crate::leadership::Fence;
use crate::ledger::Ledger;
use crate::metrics::{Metrics, SharedMetrics};
use crate::pools::{Kind, binding_view, claim_view};
use backoff::Backoff;

/// Why the operator stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot serve /metrics over HTTPS")]
    Metrics(#[from] crate::secure_metrics::MetricsServeError),
    #[error("cannot serve HTTP on {addr}")]
    Http {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the lease namespace `{0}` does not exist: create it (kubectl create namespace {0}) or point \
         --lease-namespace (env POD_NAMESPACE) at the operator's own namespace"
    )]
    LeaseNamespaceMissing(String),
    #[error("lost the leader lease; stopping so that another replica takes over")]
    LostLeadership,
    #[error("the {0} CRD is not installed or not readable: install crds/ first")]
    CrdMissing(&'static str, #[source] kube::Error),
    #[error("cannot reach the garden (--garden-kubeconfig)")]
    Garden(#[source] crate::k8s::ClientError),
    #[error("cannot start the admission webhook")]
    Webhook(#[source] crate::webhook::WebhookError),
    #[error(transparent)]
    WebhookCallers(#[from] args::UnauthenticatedCallers),
    #[error(
        "the admission webhook's caches ({0}) did not list within {WEBHOOK_SYNC_LIMIT:?}; \
         stopping so that a fresh start lists again"
    )]
    WebhookNotSynced(String),
}

/// How long a replica waits for the webhook's caches before it gives up and exits. Until then
/// it is neither a standby nor a leader, and /livez cannot tell: a start that never ends must
/// end the process.
const WEBHOOK_SYNC_LIMIT: Duration = Duration::from_secs(120);

/// Awaits `fut`, calling `tick` every 10 s while it is pending; false if it is still pending
/// after `limit`.
async fn wait_or_give_up(
    fut: impl Future<Output = ()>,
    limit: Duration,
    mut tick: impl FnMut(Duration),
) -> bool {
    let started = tokio::time::Instant::now();
    let mut fut = std::pin::pin!(fut);
    loop {
        let left = limit.saturating_sub(started.elapsed());
        if left.is_zero() {
            return false;
        }
        match tokio::time::timeout(left.min(Duration::from_secs(10)), &mut fut).await {
            Ok(()) => return true,
            Err(_) => tick(started.elapsed()),
        }
    }
}

/// A claim as the controller's queue names it.
pub type ClaimRef = ObjectRef<StoredClaim>;

/// Shared state of one operator process.
pub struct Context {
    pub args: RunArgs,
    pub writer: Writer,
    pub caches: Caches,
    pub resolver: Arc<ConfigResolver>,
    /// Where the last valid generation is recorded for a restart (not `status.activeSpec`).
    pub last_good: config::LastGoodWriter,
    /// Namespace labels for `spec.tenants`, read only when a rule needs them.
    pub namespaces: crate::k8s::namespaces::NamespaceReader,
    pub ledger: SharedLedger,
    pub metrics: SharedMetrics,
    pub health: Health,
    pub backoff: Backoff,
    /// The reconcile slots of AccountClaims and of request-source claims (first come, first
    /// served).
    pub lanes: lanes::Lanes<ClaimRef>,
    /// Claims to reconcile now (the unsettled ones after a takeover).
    pub claim_kick: futures::channel::mpsc::UnboundedSender<ClaimRef>,
    /// Starts a sweep of every claim now (the refresh cycle) rather than at the end of the period.
    pub sweep_now: Arc<tokio::sync::Notify>,
    pub refresh: Mutex<config::RefreshClock>,
    /// The claim watch has listed every claim once.
    pub claims_synced: Arc<AtomicBool>,
    /// Binding writes the garden refused (RBAC or admission), paused until they may be retried.
    pub denials: denials::Denials,
    /// Request sources: foreign watches and per-source status.
    pub sources: sources::SourceRuntime,
    /// The index holds everything written before this replica led: always, without leader
    /// election; after a takeover, once the re-read succeeded (and why not, meanwhile).
    pub took_over: AtomicBool,
    pub take_over_error: Mutex<Option<String>>,
}

impl Context {
    /// The ledger, locked. Never held across an await.
    pub fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        lock(&self.ledger)
    }
}

/// A handle on a running operator: its health and metrics (for tests and the HTTP server).
#[derive(Clone, Default)]
pub struct Handle {
    pub ready: Health,
    pub metrics: SharedMetrics,
    /// The admission webhook's address, once it listens.
    pub webhook: crate::webhook::WebhookAddr,
    /// The HTTPS /metrics address, once it listens (with `--metrics-secure`).
    pub metrics_addr: Arc<std::sync::OnceLock<std::net::SocketAddr>>,
}

/// The operator's last-known-good record; one that cannot be read is reported and not used
/// (an invalid spec then holds claims until it is fixed, rather than serving unverified rules).
async fn read_last_good(api: &LastGoodApi) -> Option<LastGood> {
    match api.get().await {
        Ok(recorded) => recorded,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the last-known-good record; an invalid HapConfig will hold claims until fixed");
            None
        }
    }
}

/// Runs the operator until `shutdown` resolves, leadership is lost, or a fatal error occurs.
pub async fn run(
    own: Cluster,
    args: RunArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let handle = Handle {
        ready: Health::default(),
        metrics: Arc::new(Metrics::new()),
        webhook: Default::default(),
        metrics_addr: Default::default(),
    };
    run_with(own, args, handle, shutdown).await
}

/// As [`run`], reporting health and metrics through `handle`.
pub async fn run_with(
    own: Cluster,
    args: RunArgs,
    handle: Handle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    if args.webhook_addr.is_some() && args.webhook_callers()? == args::WebhookCallers::Anyone {
        tracing::warn!(
            "the admission webhook serves callers without a client certificate \
             (--webhook-allow-unauthenticated): whoever reaches its port can send a review with \
             any user and groups, and tenant rules naming users or groups hold only as far as the \
             NetworkPolicy keeps others out"
        );
    }
    let stop = CancellationToken::new();
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            shutdown.await;
            stop.cancel();
        });
    }
    serve_http(&args, &handle, &stop).await?;
    preflight(&own, &args).await?;
    if args.metrics_secure {
        serve_secure_metrics(&own, &args, &handle, &stop).await?;
    }
    let last_good = LastGoodApi::new(&own, &args.lease_namespace, &args.config_name);
    let recorded = read_last_good(&last_good).await;
    let garden =
        crate::k8s::clients::garden(&own, args.garden_kubeconfig.as_deref(), args.api_limits())
            .await
            .map_err(RunError::Garden)?;
    let config = ConfigInForce::start(&own, &args, &handle, recorded.clone());
    // Every replica serves the webhooks, the standby too: it creates claims and waits for the
    // leader's decision.
    if let Some(addr) = args.webhook_addr {
        let resolver = config.resolver.clone();
        serve_webhook(&own.priority(), &args, &handle, addr, resolver, &stop).await?;
    }
    let fence = if args.leader_elect {
        Fence::closed()
    } else {
        Fence::open()
    };
    let (ctx, streams) = start_caches(
        &own,
        &garden,
        &args,
        &handle,
        fence.clone(),
        (last_good, recorded),
        config,
    );
    let background = tokio::spawn(background(ctx.clone(), stop.clone()));
    let lease = Lease {
        lost: CancellationToken::new(),
        release: CancellationToken::new(),
        task: None,
    };
    let lease = match lead(&own, &garden, &args, &handle, &ctx, fence, &stop, lease).await {
        Ok(lease) => lease,
        Err(e) => {
            background.abort();
            return Err(e);
        }
    };
    if !stop.is_cancelled() {
        run_controllers(ctx, streams, stop.clone(), lease.lost.clone()).await;
    }
    stop.cancel();
    background.abort();
    hand_over(lease).await
}

/// Health and (unless served securely) metrics on `--http-addr`, until `stop`.
async fn serve_http(
    args: &RunArgs,
    handle: &Handle,
    stop: &CancellationToken,
) -> Result<(), RunError> {
    let listener = tokio::net::TcpListener::bind(args.http_addr)
        .await
        .map_err(|source| RunError::Http {
            addr: args.http_addr,
            source,
        })?;
    let (health, stop) = (handle.ready.clone(), stop.clone());
    let plain = (!args.metrics_secure).then(|| handle.metrics.clone());
    let done = stop.cancelled_owned();
    let limits = crate::http::LIMITS;
    tokio::spawn(crate::http::serve_on(listener, health, plain, limits, done));
    Ok(())
}

/// Starts the admission webhook and waits (bounded) for its caches to list.
async fn serve_webhook(
    own: &Cluster,
    args: &RunArgs,
    handle: &Handle,
    addr: std::net::SocketAddr,
    resolver: Arc<ConfigResolver>,
    stop: &CancellationToken,
) -> Result<(), RunError> {
    let settings = crate::webhook::Settings {
        addr,
        cert_file: args.webhook_cert_file.clone(),
        key_file: args.webhook_key_file.clone(),
        client_ca_file: args.webhook_client_ca.clone(),
        resolver,
        claim_namespace: args.source_claim_namespace(),
        decision_timeout: args.effective_decision_timeout(),
        max_connections: args.webhook_max_connections as usize,
    };
    if settings.decision_timeout < args.webhook_decision_timeout {
        tracing::warn!(decision_timeout = ?settings.decision_timeout, "--webhook-decision-timeout is shortened to --webhook-timeout minus 2 s");
    }
    let metrics = handle.metrics.clone();
    let hook = crate::webhook::start(own, settings, metrics, &handle.webhook, stop.clone())
        .await
        .map_err(RunError::Webhook)?;
    let waited = wait_or_give_up(hook.wait_ready(), WEBHOOK_SYNC_LIMIT, |waited| {
        tracing::warn!(
            waited_s = waited.as_secs(),
            caches = ?hook.unready(),
            "the webhook's caches have not listed yet"
        );
    })
    .await;
    if !waited {
        return Err(RunError::WebhookNotSynced(hook.unready().join(", ")));
    }
    Ok(())
}

/// The lease of a replica: `lost` when leadership goes, `release` to give it up once the
/// controllers have drained, and the task that holds it.
struct Lease {
    lost: CancellationToken,
    release: CancellationToken,
    task: Option<tokio::task::JoinHandle<Result<(), RunError>>>,
}

/// With leader election, waits until this replica leads (or stops) and starts the take-over
/// re-read; without, this replica is the one that writes.
#[allow(clippy::too_many_arguments)]
async fn lead(
    own: &Cluster,
    garden: &Cluster,
    args: &RunArgs,
    handle: &Handle,
    ctx: &Arc<Context>,
    fence: Fence,
    stop: &CancellationToken,
    mut lease: Lease,
) -> Result<Lease, RunError> {
    if !args.leader_elect {
        handle.metrics.leader.set(1);
        return Ok(lease);
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let end = leader::Ending {
        stop: stop.clone(),
        release: lease.release.clone(),
    };
    // Renewals never wait behind the controllers' writes, nor for their connections
    // (`Cluster::lease`).
    let task = tokio::spawn(leader::hold(
        own.lease(),
        args.clone(),
        fence,
        handle.metrics.clone(),
        end,
        tx,
        lease.lost.clone(),
    ));
    tokio::select! {
        _ = stop.cancelled() => {}
        // A standby's lease task also ends, without leading, when told to stop: that is the
        // stop, not an error, whichever of the two this select sees first.
        got = rx => if got.is_err() && !stop.is_cancelled() {
            // The lease task ended before leading: a fatal error (the namespace is missing).
            return match task.await {
                Ok(Err(e)) => Err(e),
                _ => Err(RunError::LostLeadership),
            };
        },
    }
    lease.task = Some(task);
    // The controllers start at once; decisions wait for the re-read (decidable()).
    let (own, garden, ctx, stop) = (own.clone(), garden.clone(), ctx.clone(), stop.clone());
    tokio::spawn(async move { take_over(&own, &garden, &ctx, &stop).await });
    Ok(lease)
}

/// After the controllers have drained (every reconcile and source pass in progress finished,
/// its writes answered): only now may a standby lead. Hands the lease over before exiting, so
/// the standby need not wait for it to expire.
async fn hand_over(lease: Lease) -> Result<(), RunError> {
    lease.release.cancel();
    if let Some(task) = lease.task
        && let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_secs(5), task).await
    {
        return Err(e);
    }
    if lease.lost.is_cancelled() {
        return Err(RunError::LostLeadership);
    }
    Ok(())
}

/// Fails early, with a hint, when the CRDs are missing. An API server that does not answer (it
/// is restarting) is waited for, up to a minute: a crash loop would only add to its load.
/// `/metrics` over HTTPS for authorized scrapers (`--metrics-secure`), on every replica.
async fn serve_secure_metrics(
    own: &Cluster,
    args: &RunArgs,
    handle: &Handle,
    stop: &CancellationToken,
) -> Result<(), RunError> {
    let files = args
        .metrics_cert_file
        .clone()
        .zip(args.metrics_key_file.clone());
    let tls = crate::secure_metrics::tls_config(files)?;
    // Served by a standby too: its reviews (creates) are not fenced, nor queued behind writes.
    let reviewer = crate::k8s::access::api_reviewer(&own.priority());
    let addr = crate::secure_metrics::start(
        args.metrics_addr,
        tls,
        handle.metrics.clone(),
        reviewer,
        stop.clone(),
    )
    .await?;
    let _ = handle.metrics_addr.set(addr);
    Ok(())
}

async fn preflight(own: &Cluster, args: &RunArgs) -> Result<(), RunError> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(200);
    loop {
        match startup::crds_served(own, args.claim_namespace.as_deref()).await {
            Ok(()) => return Ok(()),
            Err((what, e))
                if !matches!(e, kube::Error::Api(_))
                    && started.elapsed() < Duration::from_secs(60) =>
            {
                tracing::warn!(error = %e, what, "the API server does not answer yet; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err((what, e)) => return Err(RunError::CrdMissing(what, e)),
        }
    }
}

/// The watch streams the controllers consume once leading.
struct Streams {
    configs: futures::stream::BoxStream<'static, Result<HapConfig, kube::runtime::watcher::Error>>,
    /// The claim watch's unsettled claims, by ref (`caches::claim_stream`).
    claims: futures::stream::BoxStream<'static, ClaimRef>,
    /// Set: the claim watch's refs are kept for the controller from now on (`relay`).
    claims_listening: Arc<AtomicBool>,
    kicks: futures::channel::mpsc::UnboundedReceiver<ClaimRef>,
    /// Claims whose turn for a slot came (`lanes`).
    turns: futures::channel::mpsc::UnboundedReceiver<ClaimRef>,
}

/// Starts every watch (a standby keeps its caches warm) and builds the shared context.
fn start_caches(
    own: &Cluster,
    garden: &Cluster,
    args: &RunArgs,
    handle: &Handle,
    fence: Fence,
    (last_good, recorded): (LastGoodApi, Option<LastGood>),
    config: ConfigInForce,
) -> (Arc<Context>, Streams) {
    let ConfigInForce {
        feed,
        resolver,
        events: config_rx,
    } = config;
    let ledger = Ledger::for_source_claims_in(args.source_claim_namespace());
    let ledger: SharedLedger = Arc::new(Mutex::new(ledger));
    let claims_synced = Arc::new(AtomicBool::new(false));
    let (claim_store, claim_writer, claims) = startup::claims_stream(
        own,
        args.claim_namespace.as_deref(),
        (ledger.clone(), feed.clone(), claims_synced.clone()),
    );
    let (kick_tx, kick_rx) = futures::channel::mpsc::unbounded();
    let (turn_tx, turn_rx) = futures::channel::mpsc::unbounded();
    let (bindings, others, shoots) = garden_caches(garden, &ledger, &feed);
    let ctx = Arc::new(Context {
        writer: Writer::new(own.clone(), garden.clone(), Some(args.identity()), fence),
        caches: Caches {
            feed: feed.clone(),
            configs: resolver.store().clone(),
            claims: claim_store,
            claim_writer,
            bindings,
            others,
            shoots,
        },
        resolver,
        last_good: config::LastGoodWriter::new(last_good, recorded.as_ref()),
        namespaces: crate::k8s::namespaces::NamespaceReader::new(own),
        ledger,
        metrics: handle.metrics.clone(),
        health: handle.ready.clone(),
        backoff: Backoff::default(),
        lanes: claim_lanes(args, handle, turn_tx),
        claim_kick: kick_tx,
        sweep_now: Arc::default(),
        refresh: Mutex::new(config::RefreshClock::default()),
        claims_synced,
        denials: denials::Denials::default(),
        sources: sources::SourceRuntime::default(),
        took_over: AtomicBool::new(!args.leader_elect),
        take_over_error: Mutex::new(None),
        args: args.clone(),
    });
    ctx.caches.claim_writer.judge_by(judge_of(&ctx));
    // The watch streams run from the start, leading or not; the controllers read them through
    // channels once leading, and until then what they yield is only kept in the stores.
    let (claims, claim_rx, claims_listening) = relay(watch_refs(claims));
    tokio::spawn(claims);
    let streams = Streams {
        configs: config_rx,
        claims: claim_rx,
        claims_listening,
        kicks: kick_rx,
        turns: turn_rx,
    };
    (ctx, streams)
}

/// The binding and Shoot watches, pointed later (`point_caches`). Bindings and Shoots live in
/// the garden, which may be another cluster.
fn garden_caches(
    garden: &Cluster,
    ledger: &SharedLedger,
    feed: &ChangeFeed,
) -> (BindingCache, BindingCache, ShootCache) {
    let (g, l, f) = (garden, ledger, feed);
    (
        Retargetable::new(g.clone(), l.clone(), f.clone(), watch_bindings),
        Retargetable::new(g.clone(), l.clone(), f.clone(), watch_other_bindings),
        Retargetable::new(g.clone(), l.clone(), f.clone(), watch_shoots),
    )
}

/// The claim controllers' lanes; a claim whose turn comes is sent on `turns`.
fn claim_lanes(
    args: &RunArgs,
    handle: &Handle,
    turns: futures::channel::mpsc::UnboundedSender<ClaimRef>,
) -> lanes::Lanes<ClaimRef> {
    lanes::Lanes::with_gauge(
        args.concurrency,
        args.source_concurrency,
        handle.metrics.claim_reconciles_queued.clone(),
        move |r| {
            let _ = turns.unbounded_send(r);
        },
    )
}

/// The replica's one config in force: one HapConfig watch, started before the webhook serves,
/// and one resolver (compiled once per generation, last-known-good seeded from the record)
/// that the webhook and the controllers share.
struct ConfigInForce {
    /// Bumped by every watch event, the config's included (the sweep's change count).
    feed: ChangeFeed,
    resolver: Arc<ConfigResolver>,
    /// The watch's events for the config controller, kept once it listens (`relay`).
    events: futures::stream::BoxStream<'static, Result<HapConfig, kube::runtime::watcher::Error>>,
}

impl ConfigInForce {
    /// The watch keeps to the replica's request budget (`--kube-api-qps`) like every other
    /// watch: it starts before anything is written, and a re-watch waits its turn.
    fn start(own: &Cluster, args: &RunArgs, handle: &Handle, recorded: Option<LastGood>) -> Self {
        let feed = ChangeFeed::default();
        let (resolver, stream) =
            crate::k8s::active::watch(own, args.config_name.clone(), feed.clone());
        let (task, events, _) = relay(stream);
        tokio::spawn(task);
        Self {
            feed,
            resolver: Arc::new(
                resolver
                    .with_last_good(recorded)
                    .counting_compiles_in(handle.metrics.config_compiles.clone()),
            ),
            events,
        }
    }
}

/// Drives `stream` in a task of its own, for the life of the process, and hands its items to the
/// returned receiver, dropping them while nobody receives (a standby, or a leader whose
/// controllers stopped: what matters is in the stores and the ledger).
/// Items are kept from the receiver's first poll, or earlier once the returned flag is set.
fn relay<T: Send + 'static>(
    stream: impl futures::Stream<Item = T> + Send + 'static,
) -> (
    impl Future<Output = ()> + Send + 'static,
    futures::stream::BoxStream<'static, T>,
    Arc<AtomicBool>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<T>();
    let listening = Arc::new(AtomicBool::new(false));
    let task = {
        let listening = listening.clone();
        async move {
            // The stream keeps filling its store after the receiver is gone: the webhook answers
            // from the config store until its last call, after the controllers stopped.
            let mut stream = std::pin::pin!(stream);
            let mut open = true;
            while let Some(item) = stream.next().await {
                if open && listening.load(Ordering::SeqCst) {
                    open = tx.send(item).is_ok();
                }
            }
        }
    };
    let mut rx = rx;
    let flag = listening.clone();
    let rx = futures::stream::poll_fn(move |cx| {
        listening.store(true, Ordering::SeqCst);
        rx.poll_recv(cx)
    })
    .boxed();
    (task, rx, flag)
}

/// Points the binding and Shoot watches (and the index's keys and namespace) at the config in
/// force. Called where the configs move: by every replica's background task (on each change of
/// the caches, and twice a second) and by the config reconcile; never by a claim's reads.
pub(crate) fn point_caches(ctx: &Context) {
    let ConfigState::Active { active, .. } = ctx.resolver.resolve() else {
        return;
    };
    let keys = active.rules.label_keys().clone();
    ctx.ledger()
        .set_target(keys, Some(active.spec.binding_namespace.clone()));
    let target = active.binding_target();
    // A new watch starts from an empty set of bindings (another namespace, or another kind). The
    // Shoots are keyed by the new kind in the same step, which also marks the bindings unlisted:
    // no decision sees Shoots keyed for one kind beside bindings of the other.
    let moved = ctx.caches.bindings.retarget(&target, |l| {
        l.inventory.set_binding_kind(target.kind);
        l.inventory.clear_bindings();
    });
    if moved {
        // Refusals were about bindings of the old namespace or kind.
        ctx.denials.clear();
    }
    ctx.caches
        .others
        .retarget(&active.other_binding_target(), |l| {
            l.inventory.clear_other_bindings()
        });
    ctx.caches
        .shoots
        .retarget(&active.shoot_namespace(), |l| l.inventory.clear_shoots());
}

/// Whether every cache a decision needs has listed once: with a config in force, the targets
/// it names, into an index keyed by its labels. Pointing them is not a reader's job
/// (`point_caches`, where the configs move): until then, a decision waits.
pub(crate) fn caches_ready(ctx: &Context) -> bool {
    let base = store_ready(&ctx.caches.configs) && ctx.claims_synced.load(Ordering::SeqCst);
    match ctx.resolver.resolve() {
        ConfigState::Active { active, .. } => base && pointed_at(ctx, &active),
        _ => base,
    }
}

/// Whether the index is keyed and the caches listed for `active` (takes the ledger's lock).
fn pointed_at(ctx: &Context, active: &ActiveConfig) -> bool {
    let keyed = {
        let l = ctx.ledger();
        l.inventory.keys() == active.rules.label_keys()
            && l.inventory.namespace() == Some(active.spec.binding_namespace.as_str())
    };
    keyed && listed_for(ctx, active)
}

/// Whether the binding and Shoot caches listed `active`'s targets (no ledger lock).
fn listed_for(ctx: &Context, active: &ActiveConfig) -> bool {
    ctx.caches.bindings.listed(&active.binding_target())
        && ctx.caches.others.listed(&active.other_binding_target())
        && ctx.caches.shoots.listed(&active.shoot_namespace())
}

/// Whether a decision may be taken now: every cache listed, and after a takeover the re-read of
/// what the old leader wrote is in the index.
pub(crate) fn decidable(ctx: &Context) -> bool {
    caches_ready(ctx) && ctx.took_over.load(Ordering::SeqCst)
}

/// Whether the index can judge settled claims (`selection::needs_visit`) now: a config is in
/// force, every cache has listed (after a takeover, the re-read too), and the binding and Shoot
/// caches have listed the targets of that config. Without a config the index has no namespace
/// and no bindings, and during a retarget it has none of the new target's: every recorded
/// binding would look lost. The one definition the claim store (`held`), the fetch stage and
/// the sweep (`visits`) and the revisits ask. Never waits for a lock: the claim store asks it
/// under the ledger's.
pub(crate) fn can_judge(ctx: &Context) -> bool {
    let ConfigState::Active { active, .. } = ctx.resolver.resolve() else {
        return false;
    };
    store_ready(&ctx.caches.configs)
        && ctx.claims_synced.load(Ordering::SeqCst)
        && ctx.took_over.load(Ordering::SeqCst)
        && listed_for(ctx, &active)
}

/// The claim store's question whether the index can judge (`can_judge`), for `ctx`; a weak
/// reference, as the context holds the store's writer.
pub(crate) fn judge_of(ctx: &Arc<Context>) -> crate::k8s::claim_store::Judge {
    let ctx = Arc::downgrade(ctx);
    Arc::new(move || ctx.upgrade().is_some_and(|c| can_judge(&c)))
}

/// What runs in every replica: pointing the caches, readiness, the heartbeat.
async fn background(ctx: Arc<Context>, stop: CancellationToken) {
    let mut rx = ctx.caches.feed.subscribe();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut sampled = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = rx.changed() => {}
            _ = tick.tick() => {}
        }
        point_caches(&ctx);
        let now = Instant::now();
        {
            // Taking the lock proves it is not held forever; expired records go.
            ctx.ledger().expire(now);
        }
        ctx.health.beat(now);
        sampled = footprint::sample(&ctx, sampled, now);
        if !ctx.health.is_ready() && caches_ready(&ctx) {
            ctx.health.set_ready();
            tracing::info!("caches synced; ready");
        }
    }
}

/// A standby became the leader: the old leader's last writes may not have reached its watches,
/// so bindings and claims are read again with one consistent list each and merged into the index
/// (the index keeps whatever is newer), before any decision. Retried until it succeeds.
#[tracing::instrument(name = "take_over", skip_all, fields(phase = "takeOver"))]
async fn take_over(own: &Cluster, garden: &Cluster, ctx: &Context, stop: &CancellationToken) {
    let started = Instant::now();
    let mut delay = Duration::from_millis(200);
    loop {
        match reread(own, garden, ctx).await {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!(error = %e, "cannot re-read the inventory after taking over; retrying");
                *ctx.take_over_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
    ctx.took_over.store(true, Ordering::SeqCst);
    ctx.caches.feed.bump();
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "took over with a current inventory"
    );
}

async fn reread(own: &Cluster, garden: &Cluster, ctx: &Context) -> Result<(), kube::Error> {
    // Each kind is one re-list; a failed page abandons it (relist_pages), so that a take-over
    // that has to retry never leaves a re-list open that would keep the index from advancing.
    if let Some(target) = ctx.caches.bindings.target() {
        relist_pages(
            &ctx.ledger,
            Kind::Binding,
            |token| startup::binding_page(garden, &target, token),
            |l, b| l.apply_binding(binding_view(&b, b.credentials()).with_account(b.account())),
        )
        .await?;
    }
    let ns = ctx.args.claim_namespace.as_deref();
    relist_pages(
        &ctx.ledger,
        Kind::Claim,
        |token| startup::claim_page(own, ns, token),
        |l, c| l.apply_claim(claim_view(&c.into())),
    )
    .await
}

async fn run_controllers(
    ctx: Arc<Context>,
    streams: Streams,
    stop: CancellationToken,
    lost: CancellationToken,
) {
    kick_unsettled(&ctx, &streams);
    tokio::spawn({
        let (ctx, stop) = (ctx.clone(), stop.clone());
        async move {
            stop.cancelled().await;
            ctx.lanes.close();
        }
    });
    let config_ticks = futures::stream::once(async {}).chain(coalesced_ticks(
        ctx.caches.feed.clone(),
        Duration::from_secs(1),
        stop.clone(),
    ));
    let configs = ctx.caches.configs.clone();
    let config_controller = Controller::for_stream(spec_changes(streams.configs), configs)
        .reconcile_all_on(config_ticks)
        .graceful_shutdown_on(cancelled(&stop))
        .run(config::reconcile, config::error_policy, ctx.clone())
        .for_each(|r| logged("HapConfig", r));
    let claims = ctx.caches.claims.clone();
    let no_objects = futures::stream::empty::<Result<StoredClaim, kube::runtime::watcher::Error>>();
    let claim_controller = Controller::for_stream(no_objects, claims)
        .with_config(claim_controller_config())
        .reconcile_on(watched_turns(&ctx, streams.claims))
        .reconcile_on(claim_triggers(&ctx, streams.kicks, &stop))
        .reconcile_on(turns(&ctx, streams.turns))
        .graceful_shutdown_on(cancelled(&stop))
        .run(claim::reconcile, claim::error_policy, ctx.clone())
        .for_each(|r| logged("AccountClaim", r));
    let source_controller = sources::run(ctx.clone(), stop.clone());
    tokio::select! {
        _ = async { tokio::join!(config_controller, claim_controller, source_controller) } => {}
        // Leadership gone: the controllers and every reconcile in progress are dropped here, at
        // their next await; the fence already refuses their writes.
        _ = lost.cancelled() => tracing::error!("leadership lost; in-flight work aborted"),
    }
    // Whatever ended them: no claim in line is kicked into a controller that is gone.
    ctx.lanes.close();
    tracing::info!("controllers stopped");
}

/// Every claim not settled, once at the start: a new leader finds the old one's work undone.
/// Settled ones whose binding moved come back through the inventory, the rest with the sweep.
/// The watch's objects are kept from before the store is read: a list that ends in between
/// hands its claims on (k8s::caches::stored_objects) instead of to nobody, and the store read
/// here may be the old list's (a takeover right after an API server restart).
/// They wait for their turns in the lanes, not in kube-runtime's controller (`Lanes::line_up`).
fn kick_unsettled(ctx: &Context, streams: &Streams) {
    streams.claims_listening.store(true, Ordering::SeqCst);
    for claim in ctx.caches.claims.state() {
        let key = claim.ref_by_name();
        if !claim.is_settled() && !ctx.lanes.line_up(&key, claim::lane(&claim, ctx)) {
            let _ = ctx.claim_kick.unbounded_send(key);
        }
    }
}

/// The claim watch's triggers, through the lanes (`lanes::past_the_line`): a claim waits for
/// its turn there, not in kube-runtime's controller, where after a take-over's list a request
/// in its scheduler for every claim in line cost ~740 bytes each. Only a claim whose reconcile
/// runs or whose slot is kept goes to the controller at once.
fn watched_turns(
    ctx: &Arc<Context>,
    refs: futures::stream::BoxStream<'static, ClaimRef>,
) -> impl futures::Stream<Item = ClaimRef> + Send + use<> {
    let ctx = ctx.clone();
    lanes::past_the_line(ctx.lanes.clone(), refs, move |r| {
        let claim = ctx.caches.claims.get(r)?;
        Some(claim::lane(&claim, &ctx))
    })
}

/// What brings a claim to the claim controller besides its own watch: the revisits after
/// inventory changes, the kicks, and the sweep each `--resync`, all through the stage that
/// fetches a settled claim the store does not hold (`visits`).
fn claim_triggers(
    ctx: &Arc<Context>,
    kicks: futures::channel::mpsc::UnboundedReceiver<ClaimRef>,
    stop: &CancellationToken,
) -> impl futures::Stream<Item = ClaimRef> + Send + use<> {
    let pending = revisit::claims_to_revisit(ctx.clone(), stop.clone());
    // Read once at the start of each sweep: counted there.
    let settled: Flagged = Arc::new({
        let ctx = ctx.clone();
        move || {
            ctx.metrics.resync_sweeps.inc();
            let ctx = ctx.clone();
            async move { visits::settled_visits(&ctx).await }.boxed()
        }
    });
    let sweep = resync_sweep(
        ctx.caches.claims.clone(),
        settled,
        ctx.args.resync,
        ctx.sweep_now.clone(),
        stop.clone(),
    );
    let refs = futures::stream::select(futures::stream::select(pending, kicks), sweep);
    visits::stored_first(ctx.clone(), refs)
}

/// Claims whose turn for a slot came, straight to the controller: not behind the fetches of
/// the other triggers (`visits`), which may wait seconds on a slow API server while the slot
/// kept for the claim waits too. A claim the store no longer holds (deleted, or settled, while
/// in line) gives its slot to the next at once.
fn turns(
    ctx: &Arc<Context>,
    turns: futures::channel::mpsc::UnboundedReceiver<ClaimRef>,
) -> impl futures::Stream<Item = ClaimRef> + Send + use<> {
    let ctx = ctx.clone();
    turns.filter(move |r| {
        let held = ctx.caches.claims.get(r).is_some();
        if !held {
            ctx.lanes.forget(r);
        }
        futures::future::ready(held)
    })
}

/// Resolves when `stop` is cancelled (a controller's graceful shutdown).
fn cancelled(stop: &CancellationToken) -> impl std::future::Future<Output = ()> + Send + use<> {
    let stop = stop.clone();
    async move { stop.cancelled().await }
}

/// Logs a failed reconcile of `what`, as the controller's `for_each` step.
fn logged<T, E, Q>(what: &str, r: Result<T, kcontroller::Error<E, Q>>) -> futures::future::Ready<()>
where
    E: std::error::Error + 'static,
    Q: std::error::Error + 'static,
{
    if let Err(e) = r {
        log_controller_error(what, &e);
    }
    futures::future::ready(())
}

fn log_controller_error<E: std::error::Error + 'static, Q: std::error::Error + 'static>(
    what: &str,
    e: &kcontroller::Error<E, Q>,
) {
    match e {
        kcontroller::Error::ObjectNotFound(_) => {}
        other => tracing::warn!(controller = what, error = %other, "reconcile failed"),
    }
}

/// The config watch as far as it concerns a reconcile at once: a new spec, deletion, or another
/// instance starting or stopping to serve it. Every other change (the status this operator
/// writes, above all) reaches the reconcile through the coalesced ticks, at most once a second;
/// reacting to its own status writes made the figures a write loop under load.
fn spec_changes(
    configs: futures::stream::BoxStream<'static, Result<HapConfig, kube::runtime::watcher::Error>>,
) -> impl futures::Stream<Item = Result<HapConfig, kube::runtime::watcher::Error>> + Send {
    type Key = (Option<i64>, bool, bool);
    let mut seen: std::collections::HashMap<String, Key> = std::collections::HashMap::new();
    configs.filter(move |item| {
        let pass = match item {
            Ok(cfg) => {
                let key = (
                    cfg.metadata.generation,
                    config::served_elsewhere(cfg),
                    cfg.metadata.deletion_timestamp.is_some(),
                );
                let uid = cfg.metadata.uid.clone().unwrap_or_default();
                seen.insert(uid, key) != Some(key)
            }
            Err(_) => true,
        };
        futures::future::ready(pass)
    })
}

/// One `()` after each burst of feed changes, at most one per `period`.
fn coalesced_ticks(
    feed: ChangeFeed,
    period: Duration,
    stop: CancellationToken,
) -> impl futures::Stream<Item = ()> + Send {
    let rx = feed.subscribe();
    futures::stream::unfold((rx, stop), move |(mut rx, stop)| async move {
        tokio::select! {
            _ = stop.cancelled() => None,
            changed = rx.changed() => {
                changed.ok()?;
                tokio::time::sleep(period).await;
                rx.borrow_and_update();
                Some(((), (rx, stop)))
            }
        }
    })
}

/// A claim's identity for logs and maps.
pub(crate) fn claim_key(c: &impl kube::Resource) -> String {
    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any())
}

/// After a successful reconcile the claim waits for a change; the safety net is the sweep that,
/// each `--resync` (`resync_sweep`), brings back every claim the store holds (those not
/// settled) and every settled claim the index says needs a visit (`visits::settled_visits`); a
/// settled claim that needs nothing is not brought back. One timer for all claims rather than
/// one each: at 10k claims the controller's timers alone held ~5 MB.
pub(crate) fn resync(_ctx: &Context) -> Action {
    Action::await_change()
}

/// The claim controller's own settings: no limit of its own (a claim takes its place in line
/// for a slot in its lane, `lanes`, first come, first served; kube-runtime's limit takes due
/// claims back in hash order and starved some for minutes).
pub(crate) fn claim_controller_config() -> kcontroller::Config {
    kcontroller::Config::default()
}

/// The claim watch's references of unsettled claims (`caches::claim_stream`), for the claim
/// controller, which reads each claim from the store. A watch error is logged here, by every
/// replica; the watch tries again by itself. (Handed to the controller, an error paused all
/// its triggers, kicks and turns included: 0.8–1.6 s after one error, up to about a minute
/// after many in a row, by kube's trigger backoff.)
fn watch_refs(
    claims: impl futures::Stream<Item = Result<ClaimRef, kube::runtime::watcher::Error>> + Send,
) -> impl futures::Stream<Item = ClaimRef> + Send {
    claims.filter_map(|item| {
        futures::future::ready(match item {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(controller = "AccountClaim", error = %e, "claim watch failed");
                None
            }
        })
    })
}

/// How many claims the sweep hands to the controller at once, and how long it waits before the
/// next ones. The controller's queue keeps the capacity of its longest backlog for good: the
/// whole store at once held ~7 MB at 10k claims. 512 claims a second.
const SWEEP_CHUNK: usize = 128;
const SWEEP_PACE: Duration = Duration::from_millis(250);

/// The claims the sweep brings back besides the store's: the settled ones the index flags
/// (`visits::settled_visits`), read when a sweep starts.
type Flagged = Arc<dyn Fn() -> futures::future::BoxFuture<'static, Vec<ClaimRef>> + Send + Sync>;

/// Every claim in the store (the claims that are not settled) and every settled claim the index
/// says needs a visit (`flagged`, keys only), once each `--resync` (or when `now` is notified),
/// starting one period from now and paced in chunks; the next sweep starts one period after
/// the last chunk. A settled claim that needs nothing costs nothing.
fn resync_sweep(
    claims: Store<StoredClaim>,
    flagged: Flagged,
    period: Duration,
    now: Arc<tokio::sync::Notify>,
    stop: CancellationToken,
) -> impl futures::Stream<Item = ClaimRef> + Send {
    let period = period.max(Duration::from_secs(1));
    let chunks = futures::stream::unfold((stop, Vec::new()), move |(stop, mut left)| {
        let (claims, now, flagged) = (claims.clone(), now.clone(), flagged.clone());
        async move {
            if left.is_empty() {
                tokio::select! {
                    _ = stop.cancelled() => return None,
                    _ = tokio::time::sleep(period) => {}
                    _ = now.notified() => {}
                }
            } else {
                tokio::select! {
                    _ = stop.cancelled() => return None,
                    _ = tokio::time::sleep(SWEEP_PACE) => {}
                }
            }
            if left.is_empty() {
                // Keys only: a copy of the store would keep every claim's old version alive
                // until the sweep reaches it, tens of seconds at 10k claims. The flagged claims
                // first: reading them also takes out of the store what it no longer needs.
                let settled = flagged().await;
                left = claims
                    .state()
                    .iter()
                    .map(|c| ObjectRef::from_obj(c.as_ref()))
                    .collect();
                let stored = left.len();
                left.extend(settled.into_iter().filter(|r| claims.get(r).is_none()));
                // Said only when there is something to visit: on a settled landscape nearly
                // every sweep has nothing (`hap_resync_sweeps_total` counts them all).
                if !left.is_empty() {
                    tracing::info!(
                        stored,
                        flagged = left.len() - stored,
                        "resync sweep: visiting the claims the store holds and the settled ones the index flags"
                    );
                }
            }
            let refs = left.split_off(left.len().saturating_sub(SWEEP_CHUNK));
            Some((futures::stream::iter(refs), (stop, left)))
        }
    });
    chunks.flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::AccountClaim;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    fn claim(name: &str) -> StoredClaim {
        let mut c = AccountClaim::new(name, Default::default());
        c.metadata.namespace = Some("ns".into());
        c.into()
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_that_never_ends_gives_up_with_a_warning_every_10_s() {
        let mut ticks = Vec::new();
        let done = wait_or_give_up(
            futures::future::pending::<()>(),
            Duration::from_secs(120),
            |w| ticks.push(w.as_secs()),
        )
        .await;
        assert!(!done);
        assert_eq!(ticks, (1..=12).map(|i| i * 10).collect::<Vec<_>>());
        let mut ticks = 0;
        let done = wait_or_give_up(
            tokio::time::sleep(Duration::from_secs(25)),
            Duration::from_secs(120),
            |_| ticks += 1,
        )
        .await;
        assert!(done, "a wait that ends in time succeeds");
        assert_eq!(ticks, 2);
    }

    /// A listed store of claims with these names, and its writer.
    fn listed(
        names: &[String],
    ) -> (
        reflector::Store<StoredClaim>,
        reflector::store::Writer<StoredClaim>,
    ) {
        let (store, mut writer) = reflector::store::<StoredClaim>();
        writer.apply_watcher_event(&Event::Init);
        for name in names {
            writer.apply_watcher_event(&Event::InitApply(claim(name)));
        }
        writer.apply_watcher_event(&Event::InitDone);
        (store, writer)
    }

    /// The sweep of `store` with a period of 300 s.
    fn every_300_s(
        store: reflector::Store<StoredClaim>,
        now: Arc<tokio::sync::Notify>,
        stop: &CancellationToken,
    ) -> futures::stream::BoxStream<'static, ClaimRef> {
        resync_sweep(
            store,
            Arc::new(|| futures::future::ready(Vec::new()).boxed()),
            Duration::from_secs(300),
            now,
            stop.clone(),
        )
        .boxed()
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweep_brings_every_claim_back_once_a_period() {
        let (store, mut writer) = listed(&names(&["a", "b"]));
        let stop = CancellationToken::new();
        let mut sweep = every_300_s(store, Arc::default(), &stop);
        let started = tokio::time::Instant::now();
        let mut first: Vec<String> = vec![
            sweep.next().await.expect("a claim").name,
            sweep.next().await.expect("a claim").name,
        ];
        first.sort();
        assert_eq!(first, ["a", "b"]);
        assert_eq!(started.elapsed(), Duration::from_secs(300));
        // A claim created meanwhile is in the next sweep.
        writer.apply_watcher_event(&Event::Apply(claim("c")));
        let mut second = Vec::new();
        for _ in 0..3 {
            second.push(sweep.next().await.expect("a claim").name);
        }
        second.sort();
        assert_eq!(second, ["a", "b", "c"]);
        assert_eq!(started.elapsed(), Duration::from_secs(600));
        stop.cancel();
        assert!(
            sweep.next().await.is_none(),
            "the sweep ends when the operator stops"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweep_brings_back_the_settled_claims_the_index_flags_once_each() {
        // The store holds `a` and `b` (not settled); the index flags `a` (also in the store, a
        // settled claim fetched for its visit) and `s`, which the store does not hold.
        let (store, _writer) = listed(&names(&["a", "b"]));
        let stop = CancellationToken::new();
        let flagged: Flagged = Arc::new(|| {
            futures::future::ready(vec![
                ObjectRef::new("a").within("ns"),
                ObjectRef::new("s").within("ns"),
            ])
            .boxed()
        });
        let mut sweep = resync_sweep(
            store,
            flagged,
            Duration::from_secs(300),
            Arc::default(),
            stop.clone(),
        )
        .boxed();
        let started = tokio::time::Instant::now();
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(sweep.next().await.expect("a claim").name);
        }
        got.sort();
        assert_eq!(got, ["a", "b", "s"]);
        assert_eq!(started.elapsed(), Duration::from_secs(300));
        // Nothing else in that sweep: the next claim comes with the next one.
        sweep.next().await.expect("a claim");
        assert_eq!(started.elapsed(), Duration::from_secs(600));
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_refresh_starts_a_sweep_at_once() {
        let (store, _writer) = listed(&names(&["a"]));
        let (now, stop) = (
            Arc::new(tokio::sync::Notify::new()),
            CancellationToken::new(),
        );
        let mut sweep = every_300_s(store, now.clone(), &stop);
        let started = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_secs(7)).await;
        now.notify_one();
        assert_eq!(sweep.next().await.expect("a claim").name, "a");
        assert_eq!(started.elapsed(), Duration::from_secs(7));
        // The period counts from the end of that sweep.
        assert_eq!(sweep.next().await.expect("a claim").name, "a");
        assert_eq!(started.elapsed(), Duration::from_secs(307));
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_large_sweep_comes_in_paced_chunks() {
        let n = 2 * SWEEP_CHUNK + 10;
        let (store, _writer) = listed(&(0..n).map(|i| format!("c{i}")).collect::<Vec<_>>());
        let stop = CancellationToken::new();
        let mut sweep = every_300_s(store, Arc::default(), &stop);
        let started = tokio::time::Instant::now();
        let mut seen = std::collections::BTreeMap::<String, Duration>::new();
        for _ in 0..n {
            let r = sweep.next().await.expect("a claim");
            seen.insert(r.name, started.elapsed());
        }
        assert_eq!(seen.len(), n, "every claim once");
        let mut at: Vec<Duration> = seen.values().copied().collect();
        at.sort();
        at.dedup();
        let base = Duration::from_secs(300);
        assert_eq!(at, [base, base + SWEEP_PACE, base + 2 * SWEEP_PACE]);
        for t in &at {
            let in_chunk = seen.values().filter(|v| *v == t).count();
            assert!(in_chunk <= SWEEP_CHUNK, "{in_chunk} claims at {t:?}");
        }
        // The next sweep starts one period after the last chunk.
        sweep.next().await.expect("a claim");
        assert_eq!(started.elapsed(), base + 2 * SWEEP_PACE + base);
        stop.cancel();
    }
}
