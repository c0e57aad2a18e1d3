//! Who reconciles next: claims wait for a reconcile slot in the order they were triggered, in
//! two lanes — claims of request sources (an admission call is waiting on them) and all others
//! — so that neither a backlog of AccountClaims nor a claim that comes back again and again
//! keeps a webhook's claim waiting.
//!
//! Why not kube-runtime's own limit (`Config::concurrency`): once its slots are full, it parks
//! every due claim in a hash set and takes them back in hash order, not in the order they came.
//! A claim that requeues itself every 100 ms (waiting for its newer copy, or a lost
//! compare-and-swap) is parked and taken again and again, while a claim whose place in the set
//! comes late is not taken at all for minutes: the separate-garden chaos run saw a webhook's claim
//! never reconciled in two minutes after a takeover while the leader decided 236 others. So the
//! controller runs without that limit and every reconcile first queues here, on semaphores that
//! hand out permits first come, first served.

use tokio::sync::{Semaphore, SemaphorePermit};

use crate::labels::SOURCE_ID;

/// The lane a claim queues in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Created for a request source's object (Shoot, Runtime, Cluster): an admission call
    /// may be waiting for its decision, bounded by the webhook's decision timeout.
    Source,
    /// Every other claim (AccountClaims people and GitOps apply).
    Claims,
}

/// The lane of a claim with these labels. A claim created for a request source carries the
/// source's id (`SOURCE_ID`); whoever may create AccountClaims can set it too, which moves
/// their claims into the source lane and no further (every claim is still decided by the same
/// rules).
pub fn lane_of(labels: &std::collections::BTreeMap<String, String>) -> Lane {
    if labels.contains_key(SOURCE_ID) {
        Lane::Source
    } else {
        Lane::Claims
    }
}

/// The reconcile slots of both lanes.
#[derive(Debug)]
pub struct Lanes {
    claims: Semaphore,
    source: Semaphore,
}

impl Lanes {
    /// `claims` slots for AccountClaims, `source` slots for request-source claims (each at
    /// least one).
    pub fn new(claims: u16, source: u16) -> Self {
        Self {
            claims: Semaphore::new(usize::from(claims.max(1))),
            source: Semaphore::new(usize::from(source.max(1))),
        }
    }

    /// Waits for a slot in `lane`, behind every reconcile that queued there earlier. `None`
    /// once the lanes are closed (the operator stops).
    pub async fn enter(&self, lane: Lane) -> Option<SemaphorePermit<'_>> {
        let semaphore = match lane {
            Lane::Source => &self.source,
            Lane::Claims => &self.claims,
        };
        semaphore.acquire().await.ok()
    }

    /// Sends every queued reconcile away without a slot: a stopping operator finishes the
    /// reconciles that run and starts no other (kube-runtime's graceful shutdown waits for
    /// every reconcile it started, and those queued here are started ones).
    pub fn close(&self) {
        self.claims.close();
        self.source.close();
    }
}

#[cfg(test)]
#[path = "lanes_tests.rs"]
mod tests;
