//! Leader election on a Lease. Only the leader runs controllers and writes; losing the lease
//! stops them and the process exits, so a paused leader never keeps acting (writes stay
//! compare-and-swap regardless, since a lease is not a fence).

use kube::Client;
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
    let manager = LeaseManagerBuilder::new(client.clone(), &args.lease_name)
        .with_namespace(&args.lease_namespace)
        .with_identity(args.identity())
        .with_duration(duration)
        .with_grace((duration / 3).max(1))
        .with_field_manager(format!("{}-lease", crate::api::FIELD_MANAGER))
        .build()
        .await
        .map_err(|e| RunError::Lease(Box::new(e)))?;
    let (mut rx, task) = manager.watch().await;
    tracing::info!(lease = %args.lease_name, namespace = %args.lease_namespace, identity = %args.identity(), "waiting for the leader lease");
    loop {
        if *rx.borrow_and_update() {
            break;
        }
        tokio::select! {
            _ = stop.cancelled() => { task.abort(); return Ok(None); }
            changed = rx.changed() => {
                if changed.is_err() {
                    return Err(RunError::Lease("the lease task ended".into()));
                }
            }
        }
    }
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
