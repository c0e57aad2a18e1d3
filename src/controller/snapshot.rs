//! The inventory index over the watch caches, rebuilt only when a watch event arrived since the
//! last build: reconciles share one index instead of scanning every claim and Shoot each time.

use std::sync::{Arc, Mutex};

use kube::ResourceExt;

use crate::api::{AccountClaim, ClaimPhase};
use crate::k8s::Caches;
use crate::labels::ResolvedLabelKeys;
use crate::pools::{BindingView, ClaimView, Inventory, ShootView};

#[derive(Default)]
pub struct SnapshotCache {
    last: Mutex<Option<(u64, ResolvedLabelKeys, Arc<Inventory>)>>,
}

impl SnapshotCache {
    /// The index for the caches as they are now.
    pub fn get(&self, caches: &Caches, keys: &ResolvedLabelKeys) -> Arc<Inventory> {
        // Read the version before the stores: an event landing during the build makes the next
        // call rebuild, never the reverse.
        let version = caches.feed.current();
        if let Ok(last) = self.last.lock()
            && let Some((v, k, inv)) = last.as_ref()
            && *v == version
            && k == keys
        {
            return inv.clone();
        }
        let inv = Arc::new(build(caches, keys));
        if let Ok(mut last) = self.last.lock() {
            *last = Some((version, keys.clone(), inv.clone()));
        }
        inv
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
