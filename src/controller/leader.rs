//! Leader election on a Lease. Only the leader runs controllers and writes; losing the lease
//! stops them and the process exits, so a paused leader never keeps acting (writes stay
//! compare-and-swap regardless, since a lease is not a fence).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::LeaseManagerBuilder;
use tokio_util::sync::CancellationToken;

use super::{RunArgs, RunError};
use crate::metrics::SharedMetrics;

/// Waits until this replica holds the lease. Returns `Ok(None)` when asked to stop first,
/// else the task that keeps the lease and releases it on `stop` (await it before exiting).
/// While leading, a background task cancels `lost` when the lease is lost.
pub async fn acquire(
    client: &Client,
    args: &RunArgs,
    metrics: &SharedMetrics,
    stop: CancellationToken,
    lost: CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<()>>, RunError> {
    let duration = args.lease_duration_seconds.max(2);
    let build = || {
        LeaseManagerBuilder::new(client.clone(), &args.lease_name)
            .with_namespace(&args.lease_namespace)
            .with_identity(args.identity())
            .with_duration(duration)
            .with_grace((duration / 3).max(1))
            .with_field_manager(format!("{}-lease", crate::api::FIELD_MANAGER))
            .build()
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), &args.lease_namespace);
    tracing::info!(lease = %args.lease_name, namespace = %args.lease_namespace, identity = %args.identity(), "waiting for the leader lease");
    let (mut rx, task) = 'candidate: loop {
        let manager = build().await.map_err(|e| RunError::Lease(Box::new(e)))?;
        let (mut rx, task) = manager.watch().await;
        let release = released(&leases, &args.lease_name);
        tokio::pin!(release);
        loop {
            if *rx.borrow_and_update() {
                break 'candidate (rx, task);
            }
            tokio::select! {
                _ = stop.cancelled() => { task.abort(); return Ok(None); }
                changed = rx.changed() => {
                    if changed.is_err() {
                        return Err(RunError::Lease("the lease task ended".into()));
                    }
                }
                () = &mut release => {
                    // kube-lease-manager's candidate sleeps until the holder's lease would
                    // expire and reads the Lease only then, so it misses a release: a process
                    // that starts meanwhile (the leader's replacement pod) takes the Lease first.
                    // A new manager reads the Lease at once and takes it.
                    task.abort();
                    let _ = task.await;
                    tracing::info!("the leader released the lease; taking it over");
                    continue 'candidate;
                }
            }
        }
    };
    tracing::info!("acquired the leader lease");
    metrics.leader.set(1);
    let metrics = metrics.clone();
    let keeper = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => {
                    // Hand the lease over promptly on a clean shutdown.
                    drop(rx);
                    if let Ok(Ok(manager)) = task.await {
                        let _ = manager.release().await;
                    }
                    break;
                }
                changed = rx.changed() => {
                    if changed.is_err() || !*rx.borrow_and_update() {
                        tracing::error!("lost the leader lease");
                        metrics.leader.set(0);
                        lost.cancel();
                        break;
                    }
                }
            }
        }
    });
    Ok(Some(keeper))
}

/// How often a waiting replica reads the Lease to notice a release.
const RELEASE_POLL: Duration = Duration::from_millis(500);

/// Resolves when the Lease has no holder: released by a leader that stopped cleanly (or never
/// taken). A lease manager that found the Lease free takes it within a round trip, long before
/// the first read here, so a free Lease seen here is one the manager is sleeping through.
async fn released(leases: &Api<Lease>, name: &str) {
    loop {
        tokio::time::sleep(RELEASE_POLL).await;
        // Errors are the lease manager's to report; this only speeds up the hand-over.
        if let Ok(lease) = leases.get_opt(name).await
            && lease
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity)
                .is_none()
        {
            return;
        }
    }
}
