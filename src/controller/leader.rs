//! Leader election on a Lease, with the fence every write passes (crate::leadership). A standby
//! runs its caches and waits here; the leader renews the lease and extends the fence with each
//! renewal, measured from when the renewal's write was sent. When the fence runs out — renewals
//! failed or did not answer in time, another replica holds the lease, or this process was
//! paused past its lease — `lost` fires, `hap_leader` drops to 0, writes stop at once, in-flight
//! work is dropped, and the process exits to come back as a standby. On shutdown the leader keeps
//! renewing while its controllers drain, and gives the lease up only when told to (`release`):
//! after every write in flight has been answered, so a standby never decides while one of the
//! old leader's writes may still land.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{RunArgs, RunError};
use crate::k8s::lease::{Current, LeaseApi};
use crate::k8s::{Cluster, K8sError};
use crate::leadership::{Fence, Observer, Step};
use crate::metrics::SharedMetrics;

/// How the lease is timed, from `--lease-duration-seconds`.
#[derive(Clone, Copy, Debug)]
struct Timing {
    duration: Duration,
    /// The leader renews this often: three chances per lease.
    renew: Duration,
    /// A standby looks this often: a lease given up on SIGTERM is taken within this time, so it
    /// stays short (a GET of one small object per interval).
    retry: Duration,
    /// The fence ends this much before the lease would, for clocks that run at different rates.
    margin: Duration,
}

impl Timing {
    fn new(seconds: u64) -> Self {
        let duration = Duration::from_secs(seconds.max(2));
        Self {
            duration,
            renew: duration / 3,
            retry: (duration / 4).min(Duration::from_millis(500)),
            margin: (duration / 5).min(Duration::from_secs(1)),
        }
    }
}

/// How a lease task ends: `stop` ends the wait of a standby; a leader keeps renewing until
/// `release`, then revokes its fence and gives the lease up.
pub struct Ending {
    pub stop: CancellationToken,
    pub release: CancellationToken,
}

/// Holds the lease: sends on `acquired` once leading, extends `fence` on every renewal, gives it
/// up on `end.release`, and cancels `lost` (then returns) when leadership ends otherwise.
pub async fn hold(
    own: Cluster,
    args: RunArgs,
    fence: Fence,
    metrics: SharedMetrics,
    end: Ending,
    acquired: oneshot::Sender<()>,
    lost: CancellationToken,
) -> Result<(), RunError> {
    let t = Timing::new(args.lease_duration_seconds);
    let mut h = Holder {
        lease: LeaseApi::new(&own, &args.lease_namespace, &args.lease_name),
        me: args.identity(),
        namespace: args.lease_namespace.clone(),
        t,
        fence,
        metrics,
        observer: Observer::default(),
        acquired: Some(acquired),
        written: None,
    };
    tracing::info!(lease = %args.lease_name, namespace = %args.lease_namespace, identity = %h.me, "waiting for the leader lease");
    loop {
        let leading = h.acquired.is_none();
        if leading && end.release.is_cancelled() {
            give_up(&h.lease, &h.fence, &h.metrics).await;
            return Ok(());
        }
        if !leading && end.stop.is_cancelled() {
            return Ok(());
        }
        let started = Instant::now();
        let mut pause = bounded_round(&mut h, leading, started).await?;
        if leading && h.fence.check(Instant::now()).is_err() {
            tracing::error!("lost the leader lease");
            h.metrics.leader.set(0);
            h.fence.revoke();
            lost.cancel();
            return Ok(());
        }
        if leading {
            // A renewal that answered late, after the fence had lapsed, proves leadership again.
            h.metrics.leader.set(1);
        }
        if h.acquired.is_none() {
            // Renewals start every `renew` however long each took, so a slow API server
            // shortens the pause instead of stretching the gap between renewals.
            pause = pause.min(t.renew.saturating_sub(started.elapsed()));
        }
        let wake = if leading { &end.release } else { &end.stop };
        tokio::select! {
            _ = wake.cancelled() => {}
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// One look at the lease, a leader's bounded. A request that has not answered `duration − margin`
/// after the look started is abandoned: an answer after that would extend a fence that has already ended.
/// A leader whose fence ends while its renewal is still pending cannot prove it leads: it writes
/// nothing (the fence) and reports `hap_leader 0` until the renewal answers; if it is abandoned,
/// the caller finds the fence ended and steps down. A renewal that is merely slow (an API server
/// answering seconds late) still counts when it lands in time, so such a leader keeps its lease.
async fn bounded_round(
    h: &mut Holder,
    leading: bool,
    started: Instant,
) -> Result<Duration, RunError> {
    if !leading {
        // A standby holds nothing a late answer could harm; cutting its requests short only
        // keeps one behind a slow API server (a TLS handshake alone can outlast the lease) from
        // ever taking over.
        return h.round(leading).await;
    }
    let (fence, metrics) = (h.fence.clone(), h.metrics.clone());
    let give_up = started + h.t.duration.saturating_sub(h.t.margin);
    let round = h.round(leading);
    tokio::pin!(round);
    let mut lapsed = false;
    loop {
        let wake = match fence.until() {
            Some(end) if !lapsed && end < give_up => end,
            _ => give_up,
        };
        match tokio::time::timeout_at(wake.into(), &mut round).await {
            Ok(pause) => return pause,
            Err(_) if wake < give_up => {
                lapsed = true;
                if fence.check(Instant::now()).is_err() {
                    tracing::warn!(waited = ?started.elapsed(), "the lease renewal has not answered and the fence has ended: not leading unless it answers");
                    metrics.leader.set(0);
                }
            }
            Err(_) => {
                tracing::warn!(waited = ?started.elapsed(), "the API server did not answer the lease request in time; abandoned it");
                return Ok(Duration::ZERO);
            }
        }
    }
}

/// What a lease task keeps from one look at the lease to the next.
struct Holder {
    lease: LeaseApi,
    me: String,
    /// The lease's namespace, named when it does not exist.
    namespace: String,
    t: Timing,
    fence: Fence,
    metrics: SharedMetrics,
    observer: Observer,
    /// Taken once leading.
    acquired: Option<oneshot::Sender<()>>,
    /// The lease as this replica last wrote it: a leader renews from it with one request (a
    /// conditioned patch), and reads the lease again only when that patch meets a conflict.
    written: Option<Current>,
}

impl Holder {
    /// One look at the lease: read it (a leader trusts its own last write), and take or renew it
    /// when the observer says so. Answers the pause before the next look.
    async fn round(&mut self, leading: bool) -> Result<Duration, RunError> {
        let mut pause = if leading { self.t.renew } else { self.t.retry };
        let current = match self.written.take() {
            Some(mine) if leading => Ok(Some(mine)),
            _ => self.lease.get().await,
        };
        let current = match current {
            Ok(current) => current,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the leader lease");
                return Ok(pause);
            }
        };
        if let Some(c) = &current {
            self.observer.observe(&c.record(), Instant::now());
        }
        match self.observer.step(&self.me, Instant::now()) {
            Step::Take => {
                match write(&self.lease, current.as_ref(), &self.me, self.t, &self.fence).await {
                    Ok(mine) => {
                        self.written = Some(mine);
                        if let Some(tx) = self.acquired.take() {
                            tracing::info!("acquired the leader lease");
                            self.metrics.leader.set(1);
                            let _ = tx.send(());
                        }
                    }
                    Err(K8sError::NotFound { .. }) if current.is_none() => {
                        return Err(RunError::LeaseNamespaceMissing(self.namespace.clone()));
                    }
                    Err(K8sError::Conflict { .. }) => pause = Duration::ZERO,
                    Err(e) => tracing::warn!(error = %e, "cannot write the leader lease"),
                }
            }
            Step::Wait(_) if leading => {
                tracing::error!("another replica holds the leader lease");
                self.fence.revoke();
            }
            Step::Wait(left) => pause = pause.min(left),
        }
        Ok(pause)
    }
}

/// Writes the lease as held by `me` and, when the write lands, extends the fence from when it
/// was sent. Measured from the write, not from the read before it: a standby counts the lease's
/// duration from when it sees this write, which is after it was sent. Measured from the read,
/// an API server that answers slowly closed the fence before the renewal came back.
async fn write(
    lease: &LeaseApi,
    current: Option<&Current>,
    me: &str,
    t: Timing,
    fence: &Fence,
) -> Result<Current, K8sError> {
    let sent = Instant::now();
    let mine = lease.hold(current, me, t.duration).await?;
    fence.renewed(sent, t.duration, t.margin);
    Ok(mine)
}

/// Stops writing, then hands the lease back so that a standby takes it at once.
async fn give_up(lease: &LeaseApi, fence: &Fence, metrics: &SharedMetrics) {
    fence.revoke();
    metrics.leader.set(0);
    if let Ok(Some(current)) = lease.get().await {
        let _ = lease.release(&current).await;
    }
}
