//! Wiring: watch caches, leader election, the HapConfig and AccountClaim controllers, the
//! triggers that re-evaluate pending claims when the inventory moves, HTTP and shutdown.
//! Decisions are made by the pure modules; this module only feeds them and writes results.

pub mod active;
pub mod args;
pub mod backoff;
mod claim;
mod config;
mod denials;
mod leader;
mod snapshot;
mod sources;
mod sources_adopt;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::Controller;
use kube::runtime::controller::{self as kcontroller, Action};
use kube::runtime::reflector::{self, ObjectRef};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

pub use args::{LogFormat, RunArgs};

use crate::api::{AccountClaim, ClaimPhase, HapConfig};
use crate::http::Readiness;
use crate::k8s::caches::{binding_api, controller_stream, shoot_api};
use crate::k8s::{Caches, ChangeFeed, Retargetable, Writer};
use crate::metrics::{Metrics, SharedMetrics};
use crate::selection::InFlight;
use active::ConfigResolver;
use backoff::Backoff;

/// Why the operator stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot serve HTTP on {addr}")]
    Http {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("leader election failed")]
    Lease(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("lost the leader lease; stopping so that another replica takes over")]
    LostLeadership,
    #[error("the {0} CRD is not installed or not readable: install crds/ first")]
    CrdMissing(&'static str, #[source] kube::Error),
    #[error("cannot reach the garden (--garden-kubeconfig)")]
    Garden(#[source] crate::k8s::ClientError),
    #[error("cannot start the admission webhook")]
    Webhook(#[source] crate::webhook::WebhookError),
}

/// Shared state of one operator process.
pub struct Context {
    pub args: RunArgs,
    pub writer: Writer,
    pub caches: Caches,
    pub resolver: ConfigResolver,
    pub inflight: Mutex<InFlight>,
    pub metrics: SharedMetrics,
    pub backoff: Backoff,
    pub snapshot: snapshot::SnapshotCache,
    /// Claims to reconcile now (all claims after a refresh).
    pub claim_kick: futures::channel::mpsc::UnboundedSender<ObjectRef<AccountClaim>>,
    pub refresh: Mutex<config::RefreshClock>,
    /// Binding writes the garden refused (RBAC or admission), paused until they may be retried.
    pub denials: denials::Denials,
    /// Request sources: foreign watches and per-source status.
    pub sources: sources::SourceRuntime,
}

/// A handle on a running operator: its readiness and metrics (for tests and the HTTP server).
#[derive(Clone, Default)]
pub struct Handle {
    pub ready: Readiness,
    pub metrics: SharedMetrics,
    /// The admission webhook's address, once it listens.
    pub webhook: crate::webhook::WebhookAddr,
}

/// Runs the operator until `shutdown` resolves, leadership is lost, or a fatal error occurs.
pub async fn run(
    client: Client,
    args: RunArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let handle = Handle {
        ready: Readiness::default(),
        metrics: Arc::new(Metrics::new()),
        webhook: Default::default(),
    };
    run_with(client, args, handle, shutdown).await
}

/// As [`run`], reporting readiness and metrics through `handle`.
pub async fn run_with(
    client: Client,
    args: RunArgs,
    handle: Handle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let stop = CancellationToken::new();
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            shutdown.await;
            stop.cancel();
        });
    }
    let listener = tokio::net::TcpListener::bind(args.http_addr)
        .await
        .map_err(|source| RunError::Http {
            addr: args.http_addr,
            source,
        })?;
    {
        let (ready, metrics, stop) = (handle.ready.clone(), handle.metrics.clone(), stop.clone());
        tokio::spawn(async move {
            if let Err(e) =
                crate::http::serve_on(
                    listener,
                    ready,
                    metrics,
                    async move { stop.cancelled().await },
                )
                .await
            {
                tracing::error!(error = %e, "HTTP server stopped");
            }
        });
    }
    preflight(&client, &args).await?;
    let garden = crate::k8s::clients::garden(&client, args.garden_kubeconfig.as_deref())
        .await
        .map_err(RunError::Garden)?;
    // Every replica serves the webhooks, the standby too: it creates claims and waits for the
    // leader's decision.
    if let Some(addr) = args.webhook_addr {
        let settings = crate::webhook::Settings {
            addr,
            cert_file: args.webhook_cert_file.clone(),
            key_file: args.webhook_key_file.clone(),
            config_name: args.config_name.clone(),
            claim_namespace: args.source_claim_namespace(),
            decision_timeout: args.webhook_decision_timeout,
        };
        let hook = crate::webhook::start(
            &client,
            settings,
            handle.metrics.clone(),
            &handle.webhook,
            stop.clone(),
        )
        .await
        .map_err(RunError::Webhook)?;
        hook.wait_ready().await;
    }

    let lost = CancellationToken::new();
    let mut lease_task = None;
    if args.leader_elect {
        // A standby is healthy: it is ready to take over, so it reports ready.
        handle.ready.set_ready();
        match leader::acquire(&client, &args, &handle.metrics, stop.clone(), lost.clone()).await? {
            Some(task) => lease_task = Some(task),
            None => return Ok(()),
        }
    } else {
        // The only replica is the one that writes.
        handle.metrics.leader.set(1);
    }
    let result = run_controllers(client, garden, args, handle, stop.clone(), lost.clone()).await;
    stop.cancel();
    if let Some(task) = lease_task {
        // Hand the lease over before exiting, so the standby need not wait for it to expire.
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    if lost.is_cancelled() && result.is_ok() {
        return Err(RunError::LostLeadership);
    }
    result
}

/// AccountClaims in the watched namespace, or in all namespaces.
fn claim_api(client: &Client, args: &RunArgs) -> Api<AccountClaim> {
    match &args.claim_namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Fails early, with a hint, when the CRDs are missing.
async fn preflight(client: &Client, args: &RunArgs) -> Result<(), RunError> {
    let lp = kube::api::ListParams::default().limit(1);
    Api::<HapConfig>::all(client.clone())
        .list_metadata(&lp)
        .await
        .map_err(|e| RunError::CrdMissing("HapConfig", e))?;
    claim_api(client, args)
        .list_metadata(&lp)
        .await
        .map_err(|e| RunError::CrdMissing("AccountClaim", e))?;
    Ok(())
}

async fn run_controllers(
    client: Client,
    garden: Client,
    args: RunArgs,
    handle: Handle,
    stop: CancellationToken,
    lost: CancellationToken,
) -> Result<(), RunError> {
    let feed = ChangeFeed::default();
    let (config_store, config_writer) = reflector::store();
    let config_stream = controller_stream(
        Api::<HapConfig>::all(client.clone()),
        config_writer,
        feed.clone(),
    );
    let (claim_store, claim_writer) = reflector::store();
    let claim_stream = controller_stream(claim_api(&client, &args), claim_writer, feed.clone());
    let (kick_tx, kick_rx) = futures::channel::mpsc::unbounded();

    let ctx = Arc::new(Context {
        writer: Writer::new(client.clone(), garden.clone(), Some(args.identity())),
        caches: Caches {
            feed: feed.clone(),
            configs: config_store.clone(),
            claims: claim_store.clone(),
            // Bindings and Shoots live in the garden, which may be another cluster.
            bindings: Retargetable::new(garden.clone(), feed.clone(), binding_api),
            shoots: Retargetable::new(garden.clone(), feed.clone(), shoot_api),
        },
        resolver: ConfigResolver::new(args.config_name.clone(), config_store.clone()),
        inflight: Mutex::new(InFlight::default()),
        metrics: handle.metrics.clone(),
        backoff: Backoff::default(),
        snapshot: snapshot::SnapshotCache::default(),
        claim_kick: kick_tx,
        refresh: Mutex::new(config::RefreshClock::default()),
        denials: denials::Denials::default(),
        sources: sources::SourceRuntime::default(),
        args: args.clone(),
    });

    // Re-evaluate pending claims and pool figures whenever the inventory or the config moves,
    // coalescing bursts of watch events.
    let pending = claims_to_revisit(ctx.clone(), stop.clone());
    let config_ticks = coalesced_ticks(feed.clone(), Duration::from_secs(1), stop.clone());

    let shutdown = || {
        let (stop, lost) = (stop.clone(), lost.clone());
        async move {
            tokio::select! {
                _ = stop.cancelled() => {},
                _ = lost.cancelled() => {},
            }
        }
    };
    let config_controller = Controller::for_stream(config_stream, config_store.clone())
        .reconcile_all_on(config_ticks)
        .graceful_shutdown_on(shutdown())
        .run(config::reconcile, config::error_policy, ctx.clone())
        .for_each(|r| {
            if let Err(e) = r {
                log_controller_error("HapConfig", &e);
            }
            futures::future::ready(())
        });
    let claim_controller = Controller::for_stream(claim_stream, claim_store.clone())
        .with_config(kcontroller::Config::default().concurrency(args.concurrency))
        .reconcile_on(futures::stream::select(pending, kick_rx))
        .graceful_shutdown_on(shutdown())
        .run(claim::reconcile, claim::error_policy, ctx.clone())
        .for_each(|r| {
            if let Err(e) = r {
                log_controller_error("AccountClaim", &e);
            }
            futures::future::ready(())
        });

    let readiness = {
        let (ctx, ready) = (ctx.clone(), handle.ready.clone());
        async move {
            let _ = config_store.wait_until_ready().await;
            let _ = claim_store.wait_until_ready().await;
            ctx.caches.bindings.wait_ready().await;
            ctx.caches.shoots.wait_ready().await;
            ready.set_ready();
            tracing::info!("caches synced; ready");
        }
    };
    let source_controller = sources::run(ctx.clone(), {
        let (stop, lost) = (stop.clone(), lost.clone());
        let token = CancellationToken::new();
        let t = token.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {},
                _ = lost.cancelled() => {},
            }
            t.cancel();
        });
        token
    });
    tokio::join!(
        config_controller,
        claim_controller,
        readiness,
        source_controller
    );
    tracing::info!("controllers stopped");
    Ok(())
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

/// Each time the feed moves (at most every 250 ms): every claim that still needs a decision
/// (not Bound, or being deleted), and every Bound claim whose binding is gone or no longer
/// carries its tenant, so that BindingLost is reported at once rather than at the next resync.
fn claims_to_revisit(
    ctx: Arc<Context>,
    stop: CancellationToken,
) -> impl futures::Stream<Item = ObjectRef<AccountClaim>> + Send {
    coalesced_ticks(ctx.caches.feed.clone(), Duration::from_millis(250), stop).flat_map(move |()| {
        let inventory = match ctx.resolver.resolve() {
            active::ConfigState::Active { active, .. } if ctx.caches.bindings.is_ready() => {
                Some(ctx.snapshot.get(&ctx.caches, active.rules.label_keys()))
            }
            _ => None,
        };
        let now = std::time::Instant::now();
        let mut inflight = ctx.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(inv) = &inventory {
            // Writes the cache now shows are settled; only unsettled ones may override it.
            inflight.observe(inv, now);
        }
        let refs: Vec<ObjectRef<AccountClaim>> = ctx
            .caches
            .claims
            .state()
            .iter()
            // A denial is final: nothing in the inventory can change it.
            .filter(|c| !c.status.as_ref().is_some_and(crate::status::is_denied))
            .filter(|c| {
                let recorded = c.status.as_ref().and_then(claim::recorded_binding);
                let Some(recorded) = recorded.filter(|_| c.metadata.deletion_timestamp.is_none())
                else {
                    return true;
                };
                // Pinned claims are revisited only when the binding's state disagrees with the
                // claim's phase (lost while Bound, or restored while Failed).
                let failed = c.status.as_ref().and_then(|s| s.phase) == Some(ClaimPhase::Failed);
                inventory.as_ref().is_some_and(|inv| {
                    let view = crate::pools::ClaimView {
                        bound_binding: Some(recorded.binding),
                        ..snapshot::claim_view(c)
                    };
                    let lost = matches!(
                        crate::selection::check_bound(inv, &inflight, &view, now),
                        Some(crate::selection::Choice::Lost { .. })
                    );
                    lost != failed
                })
            })
            .map(|c| ObjectRef::from_obj(c.as_ref()))
            .collect();
        futures::stream::iter(refs)
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
pub(crate) fn claim_key(c: &AccountClaim) -> String {
    format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any())
}

/// Requeue after a successful reconcile, as a safety net.
pub(crate) fn resync(ctx: &Context) -> Action {
    Action::requeue(ctx.args.resync)
}
