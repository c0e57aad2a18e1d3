//! The inventory index over the watch caches, rebuilt only when a watch event arrived since the
//! last build, and at most once per `MAX_LAG`: reconciles share one index instead of scanning
//! every claim and Shoot each time.
//!
//! Why a bounded lag is safe: the index is already a watch cache, which lags the API server by
//! more than a few milliseconds; the operator's own writes that the index does not show yet are
//! covered by the in-flight records (selection and release read both), and every binding write
//! is a compare-and-swap. Under a burst of claims the rebuild was most of the operator's CPU
//! (BENCHMARKS.md, "Where the operator's CPU goes").

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::api::{AccountClaim, ClaimPhase};
use crate::k8s::Caches;
use crate::labels::ResolvedLabelKeys;
use crate::pools::{BindingView, ClaimView, Inventory, ShootView};

/// How stale a shared index may be before a changed cache forces a rebuild.
const MAX_LAG: Duration = Duration::from_millis(20);

struct Built {
    version: u64,
    keys: ResolvedLabelKeys,
    at: Instant,
    inventory: Arc<Inventory>,
}

#[derive(Default)]
pub struct SnapshotCache {
    last: Mutex<Option<Built>>,
}

impl SnapshotCache {
    /// The index for the caches as they are now.
    pub fn get(&self, caches: &Caches, keys: &ResolvedLabelKeys) -> Arc<Inventory> {
        // Read the version before the stores: an event landing during the build makes the next
        // call rebuild, never the reverse.
        let version = caches.feed.current();
        if let Ok(last) = self.last.lock()
            && let Some(b) = last.as_ref()
            && b.keys == *keys
            && (b.version == version || b.at.elapsed() < MAX_LAG)
        {
            return b.inventory.clone();
        }
        let at = Instant::now();
        let inventory = Arc::new(build(caches, keys));
        if let Ok(mut last) = self.last.lock() {
            *last = Some(Built {
                version,
                keys: keys.clone(),
                at,
                inventory: inventory.clone(),
            });
        }
        inventory
    }

    /// Forgets the index (the refresh cycle).
    pub fn clear(&self) {
        if let Ok(mut last) = self.last.lock() {
            *last = None;
        }
    }
}

fn build(caches: &Caches, keys: &ResolvedLabelKeys) -> Inventory {
    let bindings = caches
        .bindings
        .current()
        .map(|(_, store)| store.state())
        .unwrap_or_default()
        .into_iter()
        .map(|b| BindingView {
            name: b.name_any(),
            resource_version: b.metadata.resource_version.clone(),
            labels: b.metadata.labels.clone().unwrap_or_default(),
        });
    let claims = caches.claims.state().into_iter().map(|c| claim_view(&c));
    let shoots = caches
        .shoots
        .current()
        .map(|(_, store)| store.state())
        .unwrap_or_default()
        .into_iter()
        .map(|s| ShootView {
            name: s.name_any(),
            binding: s.spec.binding_name().map(str::to_string),
        });
    Inventory::build(keys.clone(), bindings, claims, shoots)
}

/// The plain view of a claim that selection and counting use.
pub fn claim_view(c: &AccountClaim) -> ClaimView {
    let status = c.status.as_ref();
    let bound = status
        .filter(|s| s.phase == Some(ClaimPhase::Bound))
        .and_then(|s| s.credentials_binding_name.clone());
    ClaimView {
        namespace: c.namespace().unwrap_or_default(),
        name: c.name_any(),
        uid: c.uid().unwrap_or_default(),
        global_account: c.spec.global_account.clone(),
        shoot_name: c.spec.shoot_name.clone(),
        bound_binding: bound,
        deleting: c.metadata.deletion_timestamp.is_some(),
    }
}
