//! Keeping the `Inventory` current one watch event at a time, in time proportional to the change.
//!
//! A view never goes backwards. Every object carries its resourceVersion (etcd's revision, one
//! counter for a whole API server), and an event older than what the index holds is ignored: a
//! watch restarted from a lagging watch cache, or a slow delivery, cannot undo a newer state.
//! Deletions leave a tombstone so that a stale re-list cannot bring a deleted object back.
//!
//! Re-lists are treated as possibly stale. Objects the index holds but a re-list does not name
//! are deleted only when the list is known to be at least as new as them; the others stay as
//! "unconfirmed" until the watch delivers any event of that kind at a later version (events come
//! in version order, so by then the object's own event would have arrived had it still existed).
//! A re-list copies nothing when it begins: every held object carries the number of the last
//! re-list begun before an event or a list named it (`Marked`), so the list's end finds what it
//! did not name by walking the objects once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::tallies::Share;
use super::{
    BindingEntry, BindingView, ClaimView, Inventory, PoolMembers, ShootView, SmallMap, SmallSet,
    classify,
};
use crate::labels::{PoolKey, ResolvedLabelKeys};

/// The kinds the index follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Binding = 0,
    Claim = 1,
    Shoot = 2,
    /// Bindings of the kind the pools are not made of (`Inventory::others`).
    Other = 3,
}

/// A resourceVersion as a number, when it is one (kube-apiserver and gardener-apiserver hand out
/// etcd revisions).
fn number(rv: Option<&str>) -> Option<u64> {
    rv?.parse().ok()
}

/// Whether `new` is a later version than `old`: by number when both are numbers; otherwise any
/// different version counts as later (an unknown format is taken as it comes).
pub fn is_newer(new: Option<&str>, old: Option<&str>) -> bool {
    match (number(new), number(old)) {
        (Some(n), Some(o)) => n > o,
        _ => new != old,
    }
}

/// A re-list in progress, from `begin_relist` to `end_relist`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relist(u64);

/// An object the index holds, with the number of the last re-list begun before an event or a
/// list named it. Re-lists are numbered in the order they begin, so re-list `k` named the object
/// exactly when `mark >= k`: one number answers for every re-list in progress. Copying every
/// held key at each re-list's start instead cost 43 bytes per object for the list's whole time
/// (BENCHMARKS.md, Churn); the mark costs 10–15 bytes per object as counted, always.
#[derive(Clone, Debug)]
pub(super) struct Marked<T> {
    pub(super) item: T,
    mark: u64,
}

impl<T> Marked<T> {
    fn new(item: T, mark: u64) -> Self {
        Marked { item, mark }
    }
}

impl<T> std::ops::Deref for Marked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.item
    }
}

/// What changed since the last `take_changes`: which bindings and which pools.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Everything may have changed (label keys or namespace changed).
    pub all: bool,
    pub bindings: BTreeSet<String>,
    pub pools: BTreeSet<PoolKey>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        !self.all && self.bindings.is_empty() && self.pools.is_empty()
    }
}

/// Per kind: how far the watch has come, tombstones, and the state of a re-list.
#[derive(Clone, Debug, Default)]
struct Book {
    /// Highest version seen in an event or a list of this kind.
    seen: u64,
    /// Deleted keys with the version of their deletion.
    tombstones: HashMap<String, u64>,
    /// Re-lists in progress (a watch's own, and a takeover's re-read can overlap), by number:
    /// the highest version named since each began.
    relists: BTreeMap<u64, u64>,
    /// The number of the last re-list begun; what an object named now is marked with.
    next_relist: u64,
    /// Objects a re-list did not name though they are newer than it, by version.
    unconfirmed: BTreeSet<(u64, String)>,
    /// The version of the newest complete list: an object the index does not hold, at this
    /// version or an older one, was not in it, so it had been deleted by then.
    floor: u64,
}

/// Tombstones kept at most, per kind; beyond that the oldest half goes (a stale list could then
/// bring a long-deleted object back for a moment, which only over-counts).
const MAX_TOMBSTONES: usize = 20_000;

#[derive(Clone, Debug, Default)]
pub(super) struct Books([Book; 4]);

impl Book {
    fn tombstoned(&self, key: &str, rv: Option<u64>) -> bool {
        matches!((self.tombstones.get(key), rv), (Some(t), Some(v)) if v <= *t)
    }

    fn bury(&mut self, key: &str, rv: u64) {
        if self.tombstones.len() >= MAX_TOMBSTONES {
            let mut versions: Vec<u64> = self.tombstones.values().copied().collect();
            versions.sort_unstable();
            let median = versions[versions.len() / 2];
            self.tombstones.retain(|_, v| *v > median);
        }
        let t = self.tombstones.entry(key.to_string()).or_insert(rv);
        *t = (*t).max(rv);
    }

    /// Forgets everything but the re-list counter: a token of a list that began before the reset
    /// must never name a re-list that begins after it.
    fn reset(&mut self) {
        let next_relist = self.next_relist;
        *self = Book {
            next_relist,
            ..Book::default()
        };
    }

    fn named(&mut self, rv: Option<u64>) {
        for listed_max in self.relists.values_mut() {
            *listed_max = (*listed_max).max(rv.unwrap_or(0));
        }
    }
}

impl Inventory {
    fn book(&mut self, kind: Kind) -> &mut Book {
        &mut self.books.0[kind as usize]
    }

    /// Classifies bindings with other label keys (the config changed): every binding again.
    pub fn set_keys(&mut self, keys: ResolvedLabelKeys) {
        if keys == self.keys {
            return;
        }
        self.keys = keys;
        let all: Vec<(BindingView, u64)> = self
            .bindings
            .values()
            .map(|e| (e.view.clone(), e.mark))
            .collect();
        self.pools.clear();
        self.bindings.clear();
        self.accounts.clear();
        self.shared.clear();
        self.multi.clear();
        self.tallies.reset();
        self.life.clear_parts();
        for (view, mark) in all {
            self.insert_binding(view, mark);
        }
        self.rejoin_others();
        self.changes.all = true;
    }

    /// Points the index at another binding namespace: its bindings are dropped (the watch lists
    /// the new namespace) and claims count only when bound there.
    pub fn set_namespace(&mut self, namespace: Option<String>) {
        if namespace == self.namespace {
            return;
        }
        let claims: Vec<ClaimView> = self.claims.values().map(|c| (*c.item).clone()).collect();
        for c in &claims {
            self.count_claim(c, false);
        }
        self.namespace = namespace;
        for c in &claims {
            self.count_claim(c, true);
        }
        self.clear_bindings();
    }

    /// Points the index at the namespace of the request sources' claims (see the field).
    pub fn set_source_claim_namespace(&mut self, namespace: Option<String>) {
        if namespace == self.source_claim_namespace {
            return;
        }
        let claims: Vec<ClaimView> = self.claims.values().map(|c| (*c.item).clone()).collect();
        for c in &claims {
            self.count_claim(c, false);
        }
        self.source_claim_namespace = namespace;
        for c in &claims {
            self.count_claim(c, true);
        }
    }

    /// Drops every binding: the binding watch moves to another namespace or kind.
    pub fn clear_bindings(&mut self) {
        self.bindings.clear();
        self.accounts.clear();
        self.shared.clear();
        self.multi.clear();
        self.pools.clear();
        self.tallies.reset();
        self.life.clear_bindings();
        self.book(Kind::Binding).reset();
        self.rejoin_others();
        self.changes.all = true;
    }

    /// Drops every Shoot: the Shoot watch moves to another namespace.
    pub fn clear_shoots(&mut self) {
        let shoots: Vec<ShootView> = self.shoots.drain().map(|(_, s)| s.item).collect();
        for s in shoots {
            self.count_shoot(&s, false);
        }
        self.book(Kind::Shoot).reset();
    }

    /// What changed since the last call.
    pub fn take_changes(&mut self) -> Changes {
        std::mem::take(&mut self.changes)
    }

    /// Highest version the index has seen of a kind.
    pub fn seen(&self, kind: Kind) -> u64 {
        self.books.0[kind as usize].seen
    }

    /// The watch of `kind` got as far as `rv` (an event or a bookmark): objects a stale re-list
    /// left unconfirmed and older than that are gone.
    pub fn advance(&mut self, kind: Kind, rv: Option<&str>) {
        let Some(rv) = number(rv) else { return };
        let book = self.book(kind);
        if !book.relists.is_empty() {
            // A list names objects in no order of version: only a watch's events prove how far
            // it came. The list's end will say (end_relist).
            return;
        }
        book.seen = book.seen.max(rv);
        let mut gone = Vec::new();
        while let Some((v, _)) = book.unconfirmed.first()
            && *v < rv
        {
            if let Some((_, key)) = book.unconfirmed.pop_first() {
                gone.push(key);
            }
        }
        for key in gone {
            self.remove(kind, &key, rv);
        }
    }

    /// A re-list of `kind` begins: what it does not name may be gone. Pass the token to
    /// `end_relist`; several re-lists may be in progress at once.
    pub fn begin_relist(&mut self, kind: Kind) -> Relist {
        let book = self.book(kind);
        book.next_relist += 1;
        let id = book.next_relist;
        book.relists.insert(id, 0);
        Relist(id)
    }

    /// The number of the last re-list of `kind` begun: what an object named now is marked with.
    fn mark_now(&self, kind: Kind) -> u64 {
        self.books.0[kind as usize].next_relist
    }

    /// A held object's version and its mark (see `Marked`), in one lookup.
    fn held_mut(&mut self, kind: Kind, key: &str) -> Option<(Option<&str>, &mut u64)> {
        match kind {
            Kind::Binding => self
                .bindings
                .get_mut(key)
                .map(|Marked { item, mark }| (item.view.resource_version.as_deref(), mark)),
            Kind::Claim => self
                .claims
                .get_mut(key)
                .map(|Marked { item, mark }| (item.resource_version.as_deref(), mark)),
            Kind::Shoot => self
                .shoots
                .get_mut(key)
                .map(|Marked { item, mark }| (item.resource_version.as_deref(), mark)),
            Kind::Other => self
                .others
                .get_mut(key)
                .map(|Marked { item, mark }| (item.resource_version.as_deref(), mark)),
        }
    }

    /// The held objects of `kind` that re-list `relist` did not name.
    fn unnamed(&self, kind: Kind, relist: u64) -> Vec<String> {
        fn keys<'a, T: 'a>(
            m: impl IntoIterator<Item = (&'a String, &'a Marked<T>)>,
            relist: u64,
        ) -> Vec<String> {
            m.into_iter()
                .filter(|(_, e)| e.mark < relist)
                .map(|(k, _)| k.clone())
                .collect()
        }
        match kind {
            Kind::Binding => keys(&self.bindings, relist),
            Kind::Claim => keys(&self.claims, relist),
            Kind::Shoot => keys(&self.shoots, relist),
            Kind::Other => keys(&self.others, relist),
        }
    }

    /// The re-list `relist` of `kind` is complete; `list_rv` is the list's own version when
    /// known. Objects it did not name are deleted when the list is at least as new as them, else
    /// kept unconfirmed.
    pub fn end_relist(&mut self, kind: Kind, relist: Relist, list_rv: Option<&str>) {
        let Some(listed_max) = self.book(kind).relists.remove(&relist.0) else {
            return;
        };
        let unlisted = self.unnamed(kind, relist.0);
        let book = self.book(kind);
        let bound = number(list_rv).unwrap_or(listed_max);
        book.seen = book.seen.max(bound);
        book.floor = book.floor.max(bound);
        book.tombstones.retain(|_, v| *v > bound);
        for key in unlisted {
            let rv = self.version_of(kind, &key).unwrap_or(0);
            if rv <= bound {
                self.remove(kind, &key, bound);
            } else {
                self.book(kind).unconfirmed.insert((rv, key));
            }
        }
    }

    /// The re-list `relist` of `kind` will not complete (its watch began listing again, stopped,
    /// or its reader failed): it is forgotten and deletes nothing. Without this, one interrupted
    /// list would keep `advance` off for good. A token already ended or forgotten is ignored.
    pub fn abandon_relist(&mut self, kind: Kind, relist: Relist) {
        self.book(kind).relists.remove(&relist.0);
    }

    /// How many re-lists of `kind` are in progress.
    pub fn open_relists(&self, kind: Kind) -> usize {
        self.books.0[kind as usize].relists.len()
    }

    /// Whether the index knows a later state of the object than version `rv` — a newer version,
    /// or its deletion. A reconcile handed such a copy (a controller store can lag the index, or
    /// go back after a stale re-list) must not act on it.
    pub fn knows_later(&self, kind: Kind, key: &str, rv: Option<&str>) -> bool {
        if let Some(held) = self.held_version(kind, key) {
            return held.is_some() && is_newer(held, rv);
        }
        let book = &self.books.0[kind as usize];
        let gone_by = book
            .tombstones
            .get(key)
            .copied()
            .unwrap_or(0)
            .max(book.floor);
        number(rv).is_some_and(|v| v <= gone_by)
    }

    fn version_of(&self, kind: Kind, key: &str) -> Option<u64> {
        number(self.held_version(kind, key)?)
    }

    /// A held object's version (`None` when the index does not hold it).
    fn held_version(&self, kind: Kind, key: &str) -> Option<Option<&str>> {
        match kind {
            Kind::Binding => self
                .bindings
                .get(key)
                .map(|e| e.view.resource_version.as_deref()),
            Kind::Claim => self.claims.get(key).map(|c| c.resource_version.as_deref()),
            Kind::Shoot => self.shoots.get(key).map(|s| s.resource_version.as_deref()),
            Kind::Other => self.others.get(key).map(|o| o.resource_version.as_deref()),
        }
    }

    /// Whether `rv` of `key` may replace what the index holds; bookkeeping for re-lists.
    fn admit(&mut self, kind: Kind, key: &str, rv: Option<&str>) -> bool {
        let n = number(rv);
        self.book(kind).named(n);
        // With no re-list in progress the old mark is below every later re-list's number too.
        let now = (self.open_relists(kind) > 0).then(|| self.mark_now(kind));
        // What the held version says of `rv`: later, the same, and its number.
        let held = self.held_mut(kind, key).map(|(old, mark)| {
            if let Some(now) = now {
                *mark = now;
            }
            (is_newer(rv, old), rv == old, number(old))
        });
        let book = self.book(kind);
        if book.tombstoned(key, n) {
            return false;
        }
        let Some((newer, same, old)) = held else {
            // Not held: an event older than the newest complete list describes an object that
            // list did not contain (a late event of a deleted object).
            let stale = n.is_some_and(|v| v <= book.floor);
            if stale {
                book.bury(key, book.floor);
            }
            return !stale;
        };
        // The object's own event (this version or a later one) confirms what a stale re-list
        // left unconfirmed.
        if (newer || same)
            && let Some(o) = old
        {
            book.unconfirmed.remove(&(o, key.to_string()));
        }
        newer
    }

    fn remove(&mut self, kind: Kind, key: &str, rv: u64) {
        self.book(kind).bury(key, rv);
        let held = match kind {
            Kind::Binding => self.bindings.remove(key).map(|old| {
                self.unindex_binding(&old);
                self.life_clock(key);
            }),
            Kind::Claim => self
                .claims
                .remove(key)
                .map(|old| self.count_claim(&old, false)),
            Kind::Shoot => self
                .shoots
                .remove(key)
                .map(|old| self.count_shoot(&old, false)),
            Kind::Other => self
                .others
                .remove(key)
                .map(|old| self.unjoin_other(key, old.account)),
        };
        if held.is_some() {
            self.gone.push((kind, key.to_string()));
        }
    }

    /// The objects removed since the last call (deleted, or found gone after a re-list).
    pub fn take_gone(&mut self) -> Vec<(Kind, String)> {
        std::mem::take(&mut self.gone)
    }

    /// A binding was added or changed. Returns whether the index took it (it was newer).
    pub fn apply_binding(&mut self, view: BindingView) -> bool {
        let rv = view.resource_version.clone();
        if !self.admit(Kind::Binding, &view.name, rv.as_deref()) {
            return false;
        }
        if let Some(old) = self.bindings.remove(&view.name) {
            self.unindex_binding(&old);
        }
        self.insert_binding(view, self.mark_now(Kind::Binding));
        self.advance(Kind::Binding, rv.as_deref());
        true
    }

    /// A binding as this replica's own compare-and-swap left it, before its watch event comes:
    /// a sibling decided right after the write then decides on the binding's new version, not
    /// on one it would only conflict on. Unlike a watch event it says nothing about other
    /// bindings, so the watch's position does not move. Returns whether the index took it.
    pub fn apply_written_binding(&mut self, view: BindingView) -> bool {
        let rv = view.resource_version.clone();
        if !self.admit(Kind::Binding, &view.name, rv.as_deref()) {
            return false;
        }
        if let Some(old) = self.bindings.remove(&view.name) {
            self.unindex_binding(&old);
        }
        self.insert_binding(view, self.mark_now(Kind::Binding));
        true
    }

    /// A binding was deleted at `rv`. Returns whether the index held it.
    pub fn delete_binding(&mut self, name: &str, rv: Option<&str>) -> bool {
        self.delete(Kind::Binding, name, rv)
    }

    fn delete(&mut self, kind: Kind, key: &str, rv: Option<&str>) -> bool {
        let held = self.version_of(kind, key);
        let at = number(rv).or(held).unwrap_or(0);
        if held.is_some_and(|h| at < h) {
            return false;
        }
        let present = match kind {
            Kind::Binding => self.bindings.contains_key(key),
            Kind::Claim => self.claims.contains_key(key),
            Kind::Shoot => self.shoots.contains_key(key),
            Kind::Other => self.others.contains_key(key),
        };
        if let Some(h) = held {
            self.book(kind).unconfirmed.remove(&(h, key.to_string()));
        }
        self.remove(kind, key, at);
        self.advance(kind, rv);
        present
    }

    fn insert_binding(&mut self, view: BindingView, mark: u64) {
        let pool = classify(&self.keys, &view.labels);
        let internal = view.labels.get(&self.keys.internal).map(String::as_str) == Some("true");
        let entry = BindingEntry {
            view,
            pool,
            internal,
        };
        let name = entry.view.name.clone();
        self.changes.bindings.insert(name.clone());
        if let Some(a) = entry.view.account {
            self.join_account(a, &name, true);
        }
        let clusters = self.clusters_of(&name, entry.view.account).len();
        let share = Share::of(&self.keys, &entry, clusters);
        self.tallies.apply(&name, share, true);
        if let Some((key, class)) = &entry.pool {
            self.changes.pools.insert(key.clone());
            let members = self.pools.entry(key.clone()).or_default();
            add_member(members, class, &entry.view, name.clone());
        }
        self.life_apply(&entry, true);
        self.bindings
            .insert(name.clone(), Marked::new(Box::new(entry), mark));
        self.life_clock(&name);
    }

    fn unindex_binding(&mut self, old: &BindingEntry) {
        self.changes.bindings.insert(old.view.name.clone());
        let clusters = self.clusters_of(&old.view.name, old.view.account).len();
        let share = Share::of(&self.keys, old, clusters);
        self.tallies.apply(&old.view.name, share, false);
        self.life_apply(old, false);
        if let Some(a) = old.view.account {
            self.join_account(a, &old.view.name, false);
        }
        let Some((key, class)) = &old.pool else {
            return;
        };
        self.changes.pools.insert(key.clone());
        if let Some(members) = self.pools.get_mut(key) {
            remove_member(members, class, &old.view);
            // Only the old tenant's set can have emptied: O(log T), not a walk of every tenant.
            if let super::BindingClass::Owned { tenant } = class
                && members.owned.get(tenant).is_some_and(SmallSet::is_empty)
            {
                members.owned.remove(tenant);
            }
            if members.is_empty() {
                self.pools.remove(key);
            }
        }
    }

    /// A binding of the other kind was added or changed (`Kind::Other`). Returns whether the
    /// index took it.
    pub fn apply_other_binding(&mut self, name: &str, other: super::OtherBinding) -> bool {
        let rv = other.resource_version.clone();
        if !self.admit(Kind::Other, name, rv.as_deref()) {
            return false;
        }
        let account = other.account;
        let old = self
            .others
            .insert(
                name.to_string(),
                Marked::new(other, self.mark_now(Kind::Other)),
            )
            .and_then(|o| o.account);
        if old != account {
            self.unjoin_other(name, old);
            self.join_other(name, account);
        }
        self.advance(Kind::Other, rv.as_deref());
        true
    }

    /// A binding of the other kind was deleted at `rv`. Returns whether the index held it.
    pub fn delete_other_binding(&mut self, name: &str, rv: Option<&str>) -> bool {
        self.delete(Kind::Other, name, rv)
    }

    /// Drops every binding of the other kind: its watch moves to another namespace or kind.
    pub fn clear_other_bindings(&mut self) {
        let others: Vec<(String, Marked<super::OtherBinding>)> = self.others.drain().collect();
        for (name, o) in others {
            // `others` no longer holds it: the key is built by name alone.
            let key = self.binding_key(self.other_kind(), &name);
            if let Some(a) = o.account {
                self.join_account(a, &key, false);
            }
        }
        self.book(Kind::Other).reset();
    }

    /// The pools are made of bindings of `kind` from now on: the other kind's bindings go (their
    /// watch lists the new other kind), and every Shoot is counted again under its new key.
    pub fn set_binding_kind(&mut self, kind: super::BindingKind) {
        if kind == self.binding_kind {
            return;
        }
        self.clear_other_bindings();
        let shoots: Vec<Marked<ShootView>> = self.shoots.values().cloned().collect();
        for s in &shoots {
            self.count_shoot(s, false);
        }
        self.binding_kind = kind;
        for mut s in shoots {
            // The key holds the name after the last `/` (a name has none).
            let name = s.binding.as_deref().and_then(|k| k.rsplit('/').next());
            s.item.binding = name.map(|n| self.binding_key(s.binding_kind, n));
            self.count_shoot(&s, true);
            self.shoots.insert(s.name.clone(), s);
        }
        self.changes.all = true;
    }

    fn join_other(&mut self, name: &str, account: Option<super::Account>) {
        if let Some(a) = account {
            let key = self.binding_key(self.other_kind(), name);
            self.join_account(a, &key, true);
        }
    }

    fn unjoin_other(&mut self, name: &str, account: Option<super::Account>) {
        if let Some(a) = account {
            let key = self.binding_key(self.other_kind(), name);
            self.join_account(a, &key, false);
        }
    }

    /// Makes every binding of the other kind a member of its account again (after `accounts`
    /// was cleared with the pools' bindings).
    fn rejoin_others(&mut self) {
        let others: Vec<(String, Option<super::Account>)> = self
            .others
            .iter()
            .map(|(n, o)| (n.clone(), o.account))
            .collect();
        for (name, account) in others {
            self.join_other(&name, account);
        }
    }

    /// A claim was added or changed. Returns whether the index took it.
    pub fn apply_claim(&mut self, view: ClaimView) -> bool {
        let rv = view.resource_version.clone();
        if !self.admit(Kind::Claim, &view.uid, rv.as_deref()) {
            return false;
        }
        if let Some(old) = self.claims.remove(&view.uid) {
            self.count_claim(&old, false);
        }
        self.count_claim(&view, true);
        let mark = self.mark_now(Kind::Claim);
        self.claims
            .insert(view.uid.clone(), Marked::new(Arc::new(view), mark));
        self.advance(Kind::Claim, rv.as_deref());
        true
    }

    /// A claim was deleted at `rv`. Returns whether the index held it.
    pub fn delete_claim(&mut self, uid: &str, rv: Option<&str>) -> bool {
        self.delete(Kind::Claim, uid, rv)
    }

    /// A Shoot was added or changed. Returns whether the index took it.
    pub fn apply_shoot(&mut self, mut view: ShootView) -> bool {
        view.binding = view
            .binding
            .map(|name| self.binding_key(view.binding_kind, &name));
        let rv = view.resource_version.clone();
        if !self.admit(Kind::Shoot, &view.name, rv.as_deref()) {
            return false;
        }
        if let Some(old) = self.shoots.remove(&view.name) {
            self.count_shoot(&old, false);
        }
        self.count_shoot(&view, true);
        let mark = self.mark_now(Kind::Shoot);
        self.shoots
            .insert(view.name.clone(), Marked::new(view, mark));
        self.advance(Kind::Shoot, rv.as_deref());
        true
    }

    /// A Shoot was deleted at `rv`. Returns whether the index held it.
    pub fn delete_shoot(&mut self, name: &str, rv: Option<&str>) -> bool {
        self.delete(Kind::Shoot, name, rv)
    }

    /// Adds (`add`) or removes what one claim contributes: its cluster on its binding, and its
    /// place among the claims waiting for a pool.
    fn count_claim(&mut self, c: &ClaimView, add: bool) {
        if let Some(facts) = &c.source {
            self.count_source_claim(c, facts.source.kind, add);
        }
        self.count_claim_write(c, add);
        if let Some(pool) = &c.waiting_in {
            let set = self.waiting.entry(pool.clone()).or_default();
            if add {
                set.insert(c.uid.clone());
            } else {
                set.remove(&c.uid);
                if set.is_empty() {
                    self.waiting.remove(pool);
                }
            }
        }
        let here = self.holds_namespace(c.binding_namespace.as_deref());
        if c.deleting && !c.lost && here && c.bound_binding.is_some() {
            if add {
                self.releasing.insert(c.uid.clone());
            } else {
                self.releasing.remove(&c.uid);
            }
        }
        if let Some(binding) = c.bound_binding.as_ref().filter(|_| here) {
            let set = self.recorded.entry(binding.clone()).or_default();
            if add {
                set.insert(c.uid.clone());
            } else {
                set.remove(&c.uid);
                if set.is_empty() {
                    self.recorded.remove(binding);
                }
            }
        }
        // A claim whose object names its binding uses it before any status records it: the
        // object's cluster will run there even when the adoption is refused.
        let used = match &c.bound_binding {
            Some(recorded) => Some(recorded).filter(|_| here),
            None => c
                .source
                .as_ref()
                .filter(|_| self.source_claim_namespace.as_deref() == Some(c.namespace.as_str()))
                .and_then(|f| f.adopt.as_ref()),
        };
        let Some(binding) = used.filter(|_| !c.deleting && !c.lost) else {
            return;
        };
        let cluster = c.cluster_name();
        let on = self.claims_on.entry(binding.clone()).or_default();
        if add {
            on.insert(c.uid.clone(), cluster.clone());
        } else {
            on.remove(&c.uid);
            if on.is_empty() {
                self.claims_on.remove(binding);
            }
        }
        self.count_cluster(binding, &cluster, add);
    }

    /// The claim among its tenant's `claim_writes` while its status records a claim write of a
    /// binding it does not record as its own.
    fn count_claim_write(&mut self, c: &ClaimView, add: bool) {
        let Some(w) = &c.claim_write else { return };
        if c.bound_binding.as_deref() == Some(w.binding.as_str()) {
            return;
        }
        let set = self
            .claim_writes
            .entry(c.global_account.clone())
            .or_default();
        if add {
            set.insert(c.uid.clone());
        } else {
            set.remove(&c.uid);
            if set.is_empty() {
                self.claim_writes.remove(&c.global_account);
            }
        }
    }

    fn count_source_claim(&mut self, c: &ClaimView, kind: crate::api::SourceKind, add: bool) {
        self.source_epoch = self.source_epoch.wrapping_add(1);
        let per_kind = self.source_claims.entry(c.namespace.clone()).or_default();
        let uids = per_kind.entry(kind).or_default();
        if add {
            uids.insert(c.uid.clone());
        } else {
            uids.remove(&c.uid);
        }
        if uids.is_empty() {
            per_kind.remove(&kind);
        }
        if per_kind.is_empty() {
            self.source_claims.remove(&c.namespace);
        }
    }

    fn count_shoot(&mut self, s: &ShootView, add: bool) {
        if let Some(binding) = &s.binding {
            self.count_cluster(binding, &s.name, add);
        }
        self.life_shoot(s, add);
    }

    fn count_cluster(&mut self, binding: &str, cluster: &str, add: bool) {
        let account = self.account_of(binding);
        let names = self.account_members(binding);
        self.recounted(names, |inv| {
            tally(&mut inv.clusters, binding, cluster, add);
            tally(&mut inv.cluster_bindings, cluster, binding, add);
            if let Some(a) = account {
                inv.refresh_shared(a);
            }
        });
    }

    /// The indexed bindings of `binding`'s account, itself included; just `binding` when it has
    /// no account or is not indexed.
    pub(super) fn account_members(&self, binding: &str) -> Vec<String> {
        let members = self.account_of(binding).and_then(|a| self.accounts.get(&a));
        match members {
            Some(m) => m.iter().cloned().collect(),
            None => vec![binding.to_string()],
        }
    }

    /// Adds `name` to (or takes it from) the bindings of account `a`; the other bindings of the
    /// account now count the clusters it brings (or no longer count them).
    fn join_account(&mut self, a: crate::pools::Account, name: &str, add: bool) {
        let others: Vec<String> = self
            .accounts
            .get(&a)
            .map(|m| m.iter().filter(|n| *n != name).cloned().collect())
            .unwrap_or_default();
        self.recounted(others, |inv| {
            let members = inv.accounts.entry(a).or_default();
            if add {
                members.insert(name.to_string());
            } else {
                members.remove(name);
            }
            let n = members.len();
            if n == 0 {
                inv.accounts.remove(&a);
            }
            if n >= 2 {
                inv.multi.insert(a);
            } else {
                inv.multi.remove(&a);
            }
            inv.refresh_shared(a);
        });
    }

    /// The union of the clusters on the bindings of account `a`, kept only while two or more
    /// bindings reference it (one binding's clusters are its own).
    fn refresh_shared(&mut self, a: crate::pools::Account) {
        let Some(members) = self.accounts.get(&a).filter(|m| m.len() >= 2) else {
            self.shared.remove(&a);
            return;
        };
        let mut union: SmallMap<u32> = SmallMap::default();
        for n in members {
            for (cluster, k) in self.clusters.get(n).into_iter().flatten() {
                *union.entry_or_default(cluster) += k;
            }
        }
        if union.is_empty() {
            self.shared.remove(&a);
        } else {
            self.shared.insert(a, union);
        }
    }

    /// Runs `change`, then moves the tallies and lifecycle parts of the bindings `names` whose
    /// cluster count or state it moved.
    pub(super) fn recounted(&mut self, names: Vec<String>, change: impl FnOnce(&mut Self)) {
        let before: Vec<(String, usize, Option<super::states::Part>)> = names
            .into_iter()
            .map(|n| {
                let (c, p) = (self.clusters_on(&n).len(), self.life_of(&n));
                (n, c, p)
            })
            .collect();
        change(self);
        for (name, before, part) in before {
            let after = self.clusters_on(&name).len();
            if let Some(e) = self.bindings.get(&name) {
                if before != after {
                    let old = Share::of(&self.keys, e, before);
                    let new = Share::of(&self.keys, e, after);
                    self.tallies.apply(&name, old, false);
                    self.tallies.apply(&name, new, true);
                }
                if let Some((key, _)) = &e.pool {
                    self.changes.pools.insert(key.clone());
                }
                self.life_move(&name, part);
            }
            self.changes.bindings.insert(name);
        }
    }
}

/// The pool-wide set of a role; `None` for a tenant's own bindings (`PoolMembers::owned`).
fn role_set<'a>(
    m: &'a mut PoolMembers,
    class: &super::BindingClass,
) -> Option<&'a mut BTreeSet<String>> {
    use super::BindingClass::*;
    match class {
        Shared => Some(&mut m.shared),
        Claimable => Some(&mut m.claimable),
        InternalFree => Some(&mut m.internal_free),
        Owned { .. } => None,
        Dirty { .. } => Some(&mut m.dirty),
    }
}

fn add_member(m: &mut PoolMembers, class: &super::BindingClass, view: &BindingView, name: String) {
    if matches!(class, super::BindingClass::Claimable) {
        m.claim_order.insert((claim_rank(view), name.clone()));
    }
    if let super::BindingClass::Owned { tenant } = class {
        m.owned.entry(tenant.clone()).or_default().insert(name);
    } else if let Some(set) = role_set(m, class) {
        set.insert(name);
    }
}

fn remove_member(m: &mut PoolMembers, class: &super::BindingClass, view: &BindingView) {
    let name = view.name.as_str();
    if matches!(class, super::BindingClass::Claimable) {
        m.claim_order.remove(&(claim_rank(view), name.to_string()));
    }
    if let super::BindingClass::Owned { tenant } = class {
        if let Some(set) = m.owned.get_mut(tenant) {
            set.remove(name);
        }
    } else if let Some(set) = role_set(m, class) {
        set.remove(name);
    }
}

/// Where a claimable binding stands in `PoolMembers::claim_order`: when it was last released
/// (`None`, first: never). The view is the one indexed, so the rank removed is the rank added.
fn claim_rank(view: &BindingView) -> Option<jiff::Timestamp> {
    super::lifecycle::released(&view.annotations).map(|(at, _)| at)
}

/// Counts one more (or one fewer) source of `inner` under `outer`.
fn tally(map: &mut HashMap<String, SmallMap<u32>>, outer: &str, inner: &str, add: bool) {
    if add {
        *map.entry(outer.to_string())
            .or_default()
            .entry_or_default(inner) += 1;
        return;
    }
    let Some(m) = map.get_mut(outer) else { return };
    if let Some(n) = m.get_mut(inner) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            m.remove(inner);
        }
    }
    if m.is_empty() {
        map.remove(outer);
    }
}

#[cfg(test)]
mod tests;
