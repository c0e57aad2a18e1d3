//! Watches. HapConfigs and AccountClaims are watched cluster-wide for the whole run, into
//! reflector stores (the controllers read them) and, for claims, into the ledger's index too.
//! Bindings and Shoots are watched in the namespaces the config in force names, straight into
//! the index (no store holds whole objects: decisions read only the index), and re-targeted when
//! the config changes. Every event bumps a change feed, so that waiting claims and pool figures
//! are looked at again when the inventory moves.
//!
//! Lists are consistent reads (`resourceVersion=""`), not served from a possibly lagging watch
//! cache; the index still treats every re-list as possibly stale (pools::index).

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use futures::{Stream, StreamExt, TryStreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::lean::{LeanClaim, LeanObject, LeanShoot, StoredClaim, widen};
use super::writes::binding_resource;
use crate::api::{BindingKind, HapConfig, Shoot};
use crate::ledger::Ledger;
use crate::pools::{Kind, Relist, binding_view, shoot_view};

/// A counter bumped on every watch event of bindings, Shoots, claims and configs. Consumers
/// read it to coalesce bursts of events into one re-evaluation.
#[derive(Clone)]
pub struct ChangeFeed(Arc<watch::Sender<u64>>);

impl Default for ChangeFeed {
    fn default() -> Self {
        Self(Arc::new(watch::channel(0).0))
    }
}

impl ChangeFeed {
    pub fn bump(&self) {
        self.0.send_modify(|v| *v = v.wrapping_add(1));
    }
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
    pub fn current(&self) -> u64 {
        *self.0.borrow()
    }
}

/// The ledger, shared by every watch and every reconcile.
pub type SharedLedger = Arc<Mutex<Ledger>>;

/// Locks the ledger; a poisoned lock means a panic elsewhere, and its data is still the best
/// knowledge there is.
pub fn lock(ledger: &Mutex<Ledger>) -> std::sync::MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where bindings are read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingTarget {
    pub namespace: String,
    pub kind: BindingKind,
}

/// Shoots are watched in one namespace.
pub type ShootTarget = String;

/// How a watch of one target is started: it feeds the ledger while `live` says it is current.
type Start<T> = fn(&Client, &T, Feed) -> futures::future::BoxFuture<'static, ()>;

/// What a running watch reports into.
#[derive(Clone)]
pub struct Feed {
    ledger: SharedLedger,
    feed: ChangeFeed,
    state: Arc<WatchState>,
    epoch: u64,
}

impl Feed {
    /// Applies one change to the ledger, unless the watch was re-targeted meanwhile.
    fn apply(&self, f: impl FnOnce(&mut Ledger)) {
        let mut ledger = lock(&self.ledger);
        if self.state.epoch.load(Ordering::SeqCst) == self.epoch {
            f(&mut ledger);
        }
        drop(ledger);
        self.feed.bump();
    }
}

/// The sync state of one re-targetable watch.
#[derive(Default)]
pub struct WatchState {
    epoch: AtomicU64,
    synced: AtomicBool,
    error: Mutex<Option<String>>,
    started: Mutex<Option<Instant>>,
}

impl WatchState {
    fn failed(&self, e: &watcher::Error) {
        let text = e.to_string();
        tracing::warn!(error = %text, "watch error; retrying");
        *self.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(text);
    }

    fn synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
        *self.error.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// A watch into the ledger whose target (namespace, kind) can change while the operator runs.
pub struct Retargetable<T> {
    client: Client,
    ledger: SharedLedger,
    feed: ChangeFeed,
    start: Start<T>,
    state: Arc<WatchState>,
    running: RwLock<Option<(T, JoinHandle<()>)>>,
}

impl<T: Clone + PartialEq + Debug + Send + Sync + 'static> Retargetable<T> {
    pub fn new(client: Client, ledger: SharedLedger, feed: ChangeFeed, start: Start<T>) -> Self {
        Self {
            client,
            ledger,
            feed,
            start,
            state: Arc::default(),
            running: RwLock::new(None),
        }
    }

    /// Points the watch at `target`; a no-op when it already points there. `reset` runs under
    /// the ledger's lock, in the same step that retires the old watch's events. Returns whether
    /// the target changed.
    pub fn retarget(&self, target: &T, reset: impl FnOnce(&mut Ledger)) -> bool {
        // Called on every reconcile: the common case (same target) only needs a read lock.
        if let Ok(running) = self.running.read()
            && running.as_ref().is_some_and(|(t, _)| t == target)
        {
            return false;
        }
        let Ok(mut running) = self.running.write() else {
            return false;
        };
        if running.as_ref().is_some_and(|(t, _)| t == target) {
            return false;
        }
        self.restart_locked(&mut running, target.clone(), reset);
        true
    }

    fn restart_locked(
        &self,
        running: &mut Option<(T, JoinHandle<()>)>,
        target: T,
        reset: impl FnOnce(&mut Ledger),
    ) {
        if let Some((_, task)) = running.take() {
            task.abort();
        }
        let epoch = {
            let mut ledger = lock(&self.ledger);
            let epoch = self.state.epoch.fetch_add(1, Ordering::SeqCst) + 1;
            reset(&mut ledger);
            epoch
        };
        self.state.synced.store(false, Ordering::SeqCst);
        *self.state.error.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *self.state.started.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let feed = Feed {
            ledger: self.ledger.clone(),
            feed: self.feed.clone(),
            state: self.state.clone(),
            epoch,
        };
        tracing::info!(?target, "watching");
        let task = tokio::spawn((self.start)(&self.client, &target, feed));
        *running = Some((target, task));
        self.feed.bump();
    }

    /// The current target, if the watch has been started.
    pub fn target(&self) -> Option<T> {
        let running = self.running.read().ok()?;
        running.as_ref().map(|(t, _)| t.clone())
    }

    /// Whether the current watch has listed everything once.
    pub fn is_ready(&self) -> bool {
        self.target().is_some() && self.state.synced.load(Ordering::SeqCst)
    }

    /// The last error of the current watch while it has not listed everything yet.
    pub fn error(&self) -> Option<String> {
        self.state
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// When the current watch started.
    pub fn started(&self) -> Option<Instant> {
        *self.state.started.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists again and keeps watching (the refresh cycle); the index keeps what it has and
    /// treats the new list as possibly stale.
    pub fn restart(&self) {
        let Ok(mut running) = self.running.write() else {
            return;
        };
        if let Some((target, _)) = running.as_ref() {
            let target = target.clone();
            // The epoch moves on, but the index is kept: a re-list reconciles it.
            let ready = self.state.synced.load(Ordering::SeqCst);
            self.restart_locked(&mut running, target, |_| {});
            self.state.synced.store(ready, Ordering::SeqCst);
        }
    }
}

impl<T> Drop for Retargetable<T> {
    fn drop(&mut self) {
        if let Ok(mut running) = self.running.write()
            && let Some((_, task)) = running.take()
        {
            task.abort();
        }
    }
}

/// Feeds one watcher's events into the ledger, one re-list at a time, recording sync and errors.
async fn drive<K, S>(
    stream: S,
    feed: Feed,
    kind: Kind,
    apply: fn(&mut Ledger, &K),
    delete: fn(&mut Ledger, &K),
) where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    // Events that are already decoded are applied together, under one lock and with one bump:
    // a list page arrives as hundreds of events at once.
    let mut stream = std::pin::pin!(stream.ready_chunks(EVENTS_PER_LOCK));
    let mut relist = None;
    while let Some(events) = stream.next().await {
        feed.apply(|l| {
            for ev in &events {
                match ev {
                    Ok(ev) => {
                        follow(l, kind, &mut relist, ev, apply, delete);
                        if matches!(ev, watcher::Event::InitDone) {
                            feed.state.synced();
                        }
                    }
                    Err(e) => feed.state.failed(e),
                }
            }
        });
    }
}

/// At most this many events are applied under one lock of the ledger, so that a reconcile never
/// waits long for it.
const EVENTS_PER_LOCK: usize = 128;

/// One watch event into the ledger; `relist` carries a re-list from its start to its end.
fn follow<K>(
    l: &mut Ledger,
    kind: Kind,
    relist: &mut Option<Relist>,
    ev: &watcher::Event<K>,
    apply: fn(&mut Ledger, &K),
    delete: fn(&mut Ledger, &K),
) {
    match ev {
        watcher::Event::Init => *relist = Some(l.begin_relist(kind)),
        watcher::Event::InitApply(o) | watcher::Event::Apply(o) => apply(l, o),
        watcher::Event::InitDone => {
            if let Some(r) = relist.take() {
                l.end_relist(kind, r, None);
            }
        }
        watcher::Event::Delete(o) => delete(l, o),
    }
}

/// Lists come in pages of 250: each page's body is buffered whole, and at 500 the buffers of
/// three concurrent lists left the heap ~5 MiB larger for good (10k point: 59-62 MiB at 250,
/// 62-66 at 500, 59 at 100 but ready in 1.7-2.2 s instead of 1.5-1.7).
pub const LIST_PAGE: u32 = 250;

fn watch_config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE)
}

/// The binding watch of a target: metadata only (labels and resourceVersion are all selection
/// needs; the credentials reference is never read).
pub fn watch_bindings(
    client: &Client,
    target: &BindingTarget,
    feed: Feed,
) -> futures::future::BoxFuture<'static, ()> {
    let ar = binding_resource(target.kind);
    let api: Api<LeanObject> = Api::namespaced_with(client.clone(), &target.namespace, &ar);
    let stream = watcher(api, watch_config()).default_backoff();
    Box::pin(drive(
        stream,
        feed,
        Kind::Binding,
        |l, b| l.apply_binding(binding_view(b)),
        |l, b| l.delete_binding(&b.name_any(), b.resource_version().as_deref()),
    ))
}

/// The Shoot watch of a namespace.
pub fn watch_shoots(
    client: &Client,
    ns: &ShootTarget,
    feed: Feed,
) -> futures::future::BoxFuture<'static, ()> {
    let api: Api<LeanShoot> = Api::namespaced(client.clone(), ns);
    let stream = watcher(api, watch_config())
        .default_backoff()
        .map_ok(widen::<LeanShoot, Shoot>);
    Box::pin(drive(
        stream,
        feed,
        Kind::Shoot,
        |l, s| l.apply_shoot(shoot_view(s)),
        |l, s| l.delete_shoot(&s.name_any(), s.resource_version().as_deref()),
    ))
}

/// Drops what no decision reads, to keep the stores small.
fn trim_metadata<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
}

/// The watch stream of a controller's main resource, into its store; its events also bump the
/// feed.
pub fn controller_stream<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    feed: ChangeFeed,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let stream = watcher(api, watch_config())
        .default_backoff()
        .modify(trim_metadata::<K>)
        .inspect_ok(move |_| feed.bump());
    reflector::reflector(writer, stream).touched_objects()
}

/// The claim watch: into the ledger first, then into the controller's store, so that a claim a
/// reconcile reads is never newer in the store than in the index.
pub fn claim_stream(
    api: Api<LeanClaim>,
    writer: reflector::store::Writer<StoredClaim>,
    ledger: SharedLedger,
    feed: ChangeFeed,
    synced: Arc<AtomicBool>,
) -> impl Stream<Item = Result<StoredClaim, watcher::Error>> + Send {
    let stream = watcher(api, watch_config())
        .default_backoff()
        .map_ok(widen::<LeanClaim, StoredClaim>)
        .inspect_ok({
            let mut relist = None;
            move |ev| {
                follow(
                    &mut lock(&ledger),
                    Kind::Claim,
                    &mut relist,
                    ev,
                    |l, c| l.apply_claim(c.view()),
                    |l, c| {
                        l.delete_claim(
                            &c.uid().unwrap_or_default(),
                            c.resource_version().as_deref(),
                        )
                    },
                );
                if matches!(ev, watcher::Event::InitDone) {
                    synced.store(true, Ordering::SeqCst);
                }
                feed.bump();
            }
        });
    reflector::reflector(writer, stream).touched_objects()
}

/// Whether a store has finished its first list (without waiting).
pub fn store_ready<K: Resource + Clone + 'static>(store: &Store<K>) -> bool
where
    K::DynamicType: Eq + Hash + Clone,
{
    use futures::FutureExt;
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

pub type BindingCache = Retargetable<BindingTarget>;
pub type ShootCache = Retargetable<ShootTarget>;

/// All caches of one operator process.
pub struct Caches {
    pub feed: ChangeFeed,
    pub configs: Store<HapConfig>,
    pub claims: Store<StoredClaim>,
    pub bindings: BindingCache,
    pub shoots: ShootCache,
}
