//! What one operator process knows, under one lock: the inventory index, fed one watch event at a
//! time, and the operator's own writes the index does not show yet. A decision reads both at one
//! instant, and the event that shows a write's outcome ends its in-flight record in the same step
//! that puts it into the index, so there is no moment at which both or neither count it.

use std::time::Instant;

use crate::labels::ResolvedLabelKeys;
use crate::pools::{BindingView, ClaimView, Inventory, Kind, Relist, ShootView};
use crate::selection::InFlight;

/// How a write ended, as far as the operator can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The server accepted it.
    Written,
    /// The server refused it (conflict, not found, invalid, forbidden): it did not commit.
    Refused,
    /// No answer, or a server error: it may or may not have committed.
    Unknown,
}

#[derive(Clone, Debug, Default)]
pub struct Ledger {
    pub inventory: Inventory,
    pub inflight: InFlight,
}

impl Ledger {
    pub fn new(inflight: InFlight) -> Self {
        Ledger {
            inventory: Inventory::default(),
            inflight,
        }
    }

    /// An empty ledger whose index counts the binding a claim's object names only for claims in
    /// `namespace`, where the operator alone writes the request sources' claims.
    pub fn for_source_claims_in(namespace: String) -> Self {
        let mut ledger = Ledger::default();
        ledger.inventory.set_source_claim_namespace(Some(namespace));
        ledger
    }

    /// The config in force names these label keys and this binding namespace.
    pub fn set_target(&mut self, keys: ResolvedLabelKeys, binding_namespace: Option<String>) {
        self.inventory.set_keys(keys);
        self.inventory.set_namespace(binding_namespace);
        self.settle();
    }

    pub fn apply_binding(&mut self, view: BindingView) {
        let name = view.name.clone();
        if self.inventory.apply_binding(view) {
            self.inflight
                .observe_binding(&name, self.inventory.binding(&name));
        }
        self.settle();
    }

    /// A binding as this replica's own compare-and-swap left it (`Inventory::apply_written_binding`).
    pub fn apply_written_binding(&mut self, view: BindingView) {
        let name = view.name.clone();
        if self.inventory.apply_written_binding(view) {
            self.inflight
                .observe_binding(&name, self.inventory.binding(&name));
        }
        self.settle();
    }

    /// The index's view of `binding` after this replica's use record landed at `written`: the
    /// version the record was conditioned on, `claims` recorded and claimed-by gone, as the merge
    /// patch left it. Nothing when the index has moved past `base` meanwhile.
    pub fn record_written(&mut self, binding: &str, base: &str, written: &str, claims: &str) {
        let Some(entry) = self.inventory.binding(binding) else {
            return;
        };
        if entry.view.resource_version.as_deref() != Some(base) {
            return;
        }
        let mut view = entry.view.clone();
        view.resource_version = Some(written.to_string());
        view.labels.remove(crate::labels::CLAIMED_BY);
        view.annotations
            .insert(crate::labels::FILLING.to_string(), claims.to_string());
        self.apply_written_binding(view);
    }

    pub fn delete_binding(&mut self, name: &str, rv: Option<&str>) {
        self.inventory.delete_binding(name, rv);
        self.settle();
    }

    pub fn apply_claim(&mut self, view: ClaimView) {
        let uid = view.uid.clone();
        if self.inventory.apply_claim(view) {
            self.inflight
                .observe_claim(&uid, self.inventory.claim(&uid));
        }
        self.settle();
    }

    pub fn delete_claim(&mut self, uid: &str, rv: Option<&str>) {
        self.inventory.delete_claim(uid, rv);
        self.settle();
    }

    pub fn apply_shoot(&mut self, view: ShootView) {
        self.inventory.apply_shoot(view);
        self.settle();
    }

    pub fn delete_shoot(&mut self, name: &str, rv: Option<&str>) {
        self.inventory.delete_shoot(name, rv);
        self.settle();
    }

    /// A binding of the kind the pools are not made of (`Inventory::apply_other_binding`).
    pub fn apply_other_binding(&mut self, name: &str, other: crate::pools::OtherBinding) {
        self.inventory.apply_other_binding(name, other);
        self.settle();
    }

    pub fn delete_other_binding(&mut self, name: &str, rv: Option<&str>) {
        self.inventory.delete_other_binding(name, rv);
        self.settle();
    }

    pub fn begin_relist(&mut self, kind: Kind) -> Relist {
        self.inventory.begin_relist(kind)
    }

    pub fn end_relist(&mut self, kind: Kind, relist: Relist, list_rv: Option<&str>) {
        self.inventory.end_relist(kind, relist, list_rv);
        self.settle();
    }

    /// The watch of `kind` got as far as `rv` (a bookmark).
    pub fn advance(&mut self, kind: Kind, rv: Option<&str>) {
        self.inventory.advance(kind, rv);
        self.settle();
    }

    /// The outcome of a claim write of `binding`. The index may already show it (its event can
    /// arrive before the answer), so the record is held against the index at once.
    pub fn claim_outcome(&mut self, binding: &str, outcome: Outcome, now: Instant) {
        match outcome {
            Outcome::Written => self.inflight.claim_written(binding, now),
            Outcome::Refused => self.inflight.claim_failed(binding),
            Outcome::Unknown => self.inflight.claim_unknown(binding, now),
        }
        self.inflight
            .observe_binding(binding, self.inventory.binding(binding));
    }

    /// The outcome of the status write that records claim `uid`'s binding.
    pub fn assignment_outcome(&mut self, uid: &str, outcome: Outcome, now: Instant) {
        match outcome {
            Outcome::Written => self.inflight.assignment_written(uid, now),
            Outcome::Refused => self.inflight.assignment_failed(uid),
            Outcome::Unknown => self.inflight.assignment_unknown(uid, now),
        }
        self.inflight.observe_claim(uid, self.inventory.claim(uid));
    }

    /// The outcome of a release write of `binding`.
    pub fn release_outcome(&mut self, binding: &str, outcome: Outcome, now: Instant) {
        match outcome {
            Outcome::Written => self.inflight.release_written(binding, now),
            Outcome::Refused => self.inflight.release_failed(binding),
            Outcome::Unknown => self.inflight.release_unknown(binding, now),
        }
        self.inflight
            .observe_binding(binding, self.inventory.binding(binding));
    }

    /// Drops expired in-flight records.
    pub fn expire(&mut self, now: Instant) {
        self.inflight.expire(now);
    }

    /// Objects the index dropped end the records that wait for them.
    fn settle(&mut self) {
        for (kind, key) in self.inventory.take_gone() {
            match kind {
                Kind::Binding => self.inflight.observe_binding(&key, None),
                Kind::Claim => self.inflight.observe_claim(&key, None),
                Kind::Shoot | Kind::Other => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
