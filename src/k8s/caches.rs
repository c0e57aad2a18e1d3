//! Watches. HapConfigs and AccountClaims are watched cluster-wide for the whole run, into
//! reflector stores (the controllers read them) and, for claims, into the ledger's index too.
//! Bindings and Shoots are watched in the namespaces the config in force names, straight into
//! the index (no store holds whole objects: decisions read only the index), and re-targeted when
//! the config changes. Every event bumps a change feed, so that waiting claims and pool figures
//! are looked at again when the inventory moves.
//!
//! Lists are consistent reads (`resourceVersion=""`), not served from a possibly lagging watch
//! cache; the index still treats every re-list as possibly stale (pools::index). A refresh lists
//! in a second watch task while the first keeps watching, and is skipped while a list still
//! runs. Every re-list that cannot end (the watcher lists again, its task stops, a reader fails)
//! is abandoned, so that none keeps the index from advancing.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use futures::{Stream, StreamExt, TryStreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

use super::Cluster;
use super::claim_store::ClaimWriter;
use super::lean::{LeanClaim, LeanObject, LeanShoot, StoredClaim, widen};
use super::writes::binding_resource;
use crate::api::{BindingKind, HapConfig, Shoot};
use crate::ledger::Ledger;
use crate::pools::{Kind, OtherBinding, Relist, binding_view, shoot_view};

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

/// How a watch task of one target is started: it feeds the ledger through its `Feed`.
type Start<T> =
    Arc<dyn Fn(&Cluster, &T, Feed) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// What a running watch reports into.
#[derive(Clone)]
pub struct Feed {
    ledger: SharedLedger,
    feed: ChangeFeed,
    state: Arc<WatchState>,
    epoch: u64,
    /// This watch task's own list state.
    task: Arc<TaskState>,
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

    /// This task's list is complete: the watch it replaces (a refresh's predecessor) stops now.
    /// Called outside the ledger's lock, as stopping a task may drop its open re-list.
    fn listed(&self) {
        self.task.listing.store(false, Ordering::SeqCst);
        let previous = self
            .task
            .previous
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(previous) = previous {
            previous.abort();
        }
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

/// One watch task: whether it is listing, and the task it replaces until its list is done.
struct TaskState {
    /// From the task's start (and each watcher `Init`) to its `InitDone`.
    listing: AtomicBool,
    previous: Mutex<Option<AbortHandle>>,
}

impl TaskState {
    fn new(previous: Option<AbortHandle>) -> Arc<Self> {
        Arc::new(Self {
            listing: AtomicBool::new(true),
            previous: Mutex::new(previous),
        })
    }

    fn stop_previous(&self) {
        if let Some(p) = self
            .previous
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            p.abort();
        }
    }
}

/// The watch of the current target: its newest task, which may still be listing while the task
/// it replaced keeps the index current.
struct Run<T> {
    target: T,
    task: JoinHandle<()>,
    state: Arc<TaskState>,
}

impl<T> Run<T> {
    fn stop(&self) {
        self.task.abort();
        self.state.stop_previous();
    }
}

/// A watch into the ledger whose target (namespace, kind) can change while the operator runs.
pub struct Retargetable<T> {
    cluster: Cluster,
    ledger: SharedLedger,
    feed: ChangeFeed,
    start: Start<T>,
    state: Arc<WatchState>,
    running: RwLock<Option<Run<T>>>,
    /// The target whose objects the ledger holds, set under the ledger's lock together with
    /// `synced` (`retarget`), so that `listed` can answer without the lock on `running`, which a
    /// refresh (`restart`) takes every cycle.
    indexed: Mutex<Option<T>>,
}

impl<T: Clone + PartialEq + Debug + Send + Sync + 'static> Retargetable<T> {
    pub fn new(
        cluster: Cluster,
        ledger: SharedLedger,
        feed: ChangeFeed,
        start: impl Fn(&Cluster, &T, Feed) -> futures::future::BoxFuture<'static, ()>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self {
            cluster,
            ledger,
            feed,
            start: Arc::new(start),
            state: Arc::default(),
            running: RwLock::new(None),
            indexed: Mutex::new(None),
        }
    }

    /// Points the watch at `target`; a no-op when it already points there. `reset` runs under
    /// the ledger's lock, in the same step that retires the old watch's events. Returns whether
    /// the target changed.
    pub fn retarget(&self, target: &T, reset: impl FnOnce(&mut Ledger)) -> bool {
        // Called on every reconcile: the common case (same target) only needs a read lock.
        if let Ok(running) = self.running.read()
            && running.as_ref().is_some_and(|r| r.target == *target)
        {
            return false;
        }
        let Ok(mut running) = self.running.write() else {
            return false;
        };
        if running.as_ref().is_some_and(|r| r.target == *target) {
            return false;
        }
        if let Some(old) = running.take() {
            old.stop();
        }
        let epoch = {
            let mut ledger = lock(&self.ledger);
            let epoch = self.state.epoch.fetch_add(1, Ordering::SeqCst) + 1;
            // In the same step as the reset, and before it (a reset that panics must not leave
            // the old target listed): under the ledger's lock the target and the flag always
            // speak of the objects the ledger holds (`listed`).
            *self.indexed.lock().unwrap_or_else(|p| p.into_inner()) = Some(target.clone());
            self.state.synced.store(false, Ordering::SeqCst);
            reset(&mut ledger);
            epoch
        };
        *self.state.error.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *self.state.started.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        tracing::info!(?target, "watching");
        *running = Some(self.spawn(target.clone(), epoch, None));
        self.feed.bump();
        true
    }

    /// Starts a watch task of `target` that replaces `previous` once it has listed.
    fn spawn(&self, target: T, epoch: u64, previous: Option<AbortHandle>) -> Run<T> {
        let state = TaskState::new(previous);
        let feed = Feed {
            ledger: self.ledger.clone(),
            feed: self.feed.clone(),
            state: self.state.clone(),
            epoch,
            task: state.clone(),
        };
        let task = tokio::spawn((self.start)(&self.cluster, &target, feed));
        Run {
            target,
            task,
            state,
        }
    }

    /// The current target, if the watch has been started.
    pub fn target(&self) -> Option<T> {
        let running = self.running.read().ok()?;
        running.as_ref().map(|r| r.target.clone())
    }

    /// Whether the current target has been listed completely once.
    pub fn is_ready(&self) -> bool {
        self.target().is_some() && self.state.synced.load(Ordering::SeqCst)
    }

    /// Whether the ledger holds `target`'s objects and has listed them completely once. Does not
    /// wait for the watch's own lock: it is asked under the ledger's lock (the claim store's
    /// `held`), which `retarget` takes while it holds that lock, and a refresh (`restart`) takes
    /// it every cycle, which must not make the answer flap to `false` (a settled claim fetched
    /// for a visit would then leave the store unvisited). The target it reads is changed only
    /// under the ledger's lock, with the flag.
    pub fn listed(&self, target: &T) -> bool {
        let indexed = self.indexed.lock().unwrap_or_else(|p| p.into_inner());
        indexed.as_ref() == Some(target) && self.state.synced.load(Ordering::SeqCst)
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

    /// Lists again (the refresh cycle): a new watch task lists the target while the current one
    /// keeps watching, and the current one stops only when the new list is complete, so the index
    /// never stops following the cluster. The index keeps what it has and treats the new list
    /// as possibly stale. Returns `false`, starting nothing, while the newest task is still
    /// listing: restarting it would abort that list, and a refresh cycle shorter than one list
    /// would then never finish one.
    pub fn restart(&self) -> bool {
        let Ok(mut running) = self.running.write() else {
            return false;
        };
        let Some(run) = running.as_mut() else {
            return false;
        };
        if run.state.listing.load(Ordering::SeqCst) {
            return false;
        }
        // Any task an earlier refresh replaced has been stopped by its successor's list end.
        run.state.stop_previous();
        let epoch = self.state.epoch.load(Ordering::SeqCst);
        let next = self.spawn(run.target.clone(), epoch, Some(run.task.abort_handle()));
        *run = next;
        self.feed.bump();
        true
    }
}

impl<T> Drop for Retargetable<T> {
    fn drop(&mut self) {
        if let Ok(mut running) = self.running.write()
            && let Some(run) = running.take()
        {
            run.stop();
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
    // Declared before any lock is taken, so that it is dropped (and its list abandoned) after
    // every ledger guard of this task, also when the task is aborted mid-list.
    let mut relist = OpenRelist::new(feed.ledger.clone(), kind);
    // Each list's time goes into the log: at scale, which cache a start waited for.
    let mut list_started = Instant::now();
    while let Some(events) = stream.next().await {
        let mut listed = false;
        feed.apply(|l| {
            for ev in &events {
                match ev {
                    Ok(ev) => {
                        follow(l, kind, &mut relist.relist, ev, apply, delete);
                        match ev {
                            watcher::Event::Init => {
                                feed.task.listing.store(true, Ordering::SeqCst);
                                list_started = Instant::now();
                                listed = false;
                            }
                            watcher::Event::InitDone => {
                                feed.state.synced();
                                listed = true;
                            }
                            _ => {}
                        }
                    }
                    Err(e) => feed.state.failed(e),
                }
            }
        });
        if listed {
            feed.listed();
            tracing::info!(
                ?kind,
                seconds = list_started.elapsed().as_secs_f64(),
                "listed"
            );
        }
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
        watcher::Event::Init => {
            // The watcher lists again before its last list ended (it failed mid-pagination):
            // that list will never end, and left open it would keep `advance` off for good.
            if let Some(r) = relist.take() {
                l.inventory.abandon_relist(kind, r);
            }
            *relist = Some(l.begin_relist(kind));
        }
        watcher::Event::InitApply(o) | watcher::Event::Apply(o) => apply(l, o),
        watcher::Event::InitDone => {
            if let Some(r) = relist.take() {
                l.end_relist(kind, r, None);
            }
        }
        watcher::Event::Delete(o) => delete(l, o),
    }
}

/// A re-list of one kind from its start to its end. Dropped while still open (its reader failed,
/// or its task was stopped mid-list), it is abandoned: an open re-list keeps the index from
/// advancing, so one that can no longer end must not stay.
pub struct OpenRelist {
    ledger: SharedLedger,
    kind: Kind,
    relist: Option<Relist>,
}

impl OpenRelist {
    /// Nothing open yet: `follow` begins one on the watcher's `Init`.
    pub fn new(ledger: SharedLedger, kind: Kind) -> Self {
        Self {
            ledger,
            kind,
            relist: None,
        }
    }

    /// Begins a re-list of `kind` now.
    pub fn begin(ledger: SharedLedger, kind: Kind) -> Self {
        let relist = Some(lock(&ledger).begin_relist(kind));
        Self {
            ledger,
            kind,
            relist,
        }
    }

    /// The list is complete; `list_rv` is its own version.
    pub fn end(mut self, list_rv: Option<&str>) {
        if let Some(r) = self.relist.take() {
            lock(&self.ledger).end_relist(self.kind, r, list_rv);
        }
    }
}

impl Drop for OpenRelist {
    fn drop(&mut self) {
        if let Some(r) = self.relist.take() {
            lock(&self.ledger).inventory.abandon_relist(self.kind, r);
        }
    }
}

/// One page of a paginated list: its items, the continue token, and the list's version.
pub struct Page<P> {
    pub items: Vec<P>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
}

/// Reads every page of one kind into the ledger as one re-list. On an error the re-list is
/// abandoned (nothing is deleted for it) and the error returned.
pub async fn relist_pages<P, E, F, Fut>(
    ledger: &SharedLedger,
    kind: Kind,
    mut page: F,
    apply: impl Fn(&mut Ledger, P),
) -> Result<(), E>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<Page<P>, E>>,
{
    let relist = OpenRelist::begin(ledger.clone(), kind);
    let mut token = None;
    let rv = loop {
        let p = page(token.take()).await?;
        let mut l = lock(ledger);
        for item in p.items {
            apply(&mut l, item);
        }
        match p.continue_token {
            Some(c) if !c.is_empty() => token = Some(c),
            _ => break p.resource_version,
        }
    };
    relist.end(rv.as_deref());
    Ok(())
}

/// Lists come in pages of 250: each page's body is buffered whole, and at 500 the buffers of
/// three concurrent lists left the heap ~5 MiB larger for good (10k point: 59-62 MiB at 250,
/// 62-66 at 500, 59 at 100 but ready in 1.7-2.2 s instead of 1.5-1.7).
pub const LIST_PAGE: u32 = 250;

fn watch_config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE)
}

/// The binding watch of a target: metadata and the kind of the credentials reference (labels and
/// resourceVersion are all selection needs; the kind is shown in status; the credentials
/// themselves are never read).
pub fn watch_bindings(
    garden: &Cluster,
    target: &BindingTarget,
    feed: Feed,
) -> futures::future::BoxFuture<'static, ()> {
    let ar = binding_resource(target.kind);
    let api: Api<LeanObject> = Api::namespaced_with(garden.kube().clone(), &target.namespace, &ar);
    let stream = watcher(api, watch_config()).default_backoff();
    Box::pin(drive(
        stream,
        feed,
        Kind::Binding,
        |l, b| l.apply_binding(binding_view(b, b.credentials()).with_account(b.account())),
        |l, b| l.delete_binding(&b.name_any(), b.resource_version().as_deref()),
    ))
}

/// The watch of the bindings of the other kind (`BindingTarget` names it): only the name and
/// the account each references reach the index. The operator never writes them.
pub fn watch_other_bindings(
    garden: &Cluster,
    target: &BindingTarget,
    feed: Feed,
) -> futures::future::BoxFuture<'static, ()> {
    let ar = binding_resource(target.kind);
    let api: Api<LeanObject> = Api::namespaced_with(garden.kube().clone(), &target.namespace, &ar);
    let stream = watcher(api, watch_config()).default_backoff();
    Box::pin(drive(
        stream,
        feed,
        Kind::Other,
        |l, b| {
            let other = OtherBinding {
                resource_version: b.resource_version(),
                account: b.account(),
            };
            l.apply_other_binding(&b.name_any(), other);
        },
        |l, b| l.delete_other_binding(&b.name_any(), b.resource_version().as_deref()),
    ))
}

/// The Shoot watch of a namespace.
pub fn watch_shoots(
    garden: &Cluster,
    ns: &ShootTarget,
    feed: Feed,
) -> futures::future::BoxFuture<'static, ()> {
    let api: Api<LeanShoot> = Api::namespaced(garden.kube().clone(), ns);
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

/// Drops what no decision reads, to keep the stores small. Kept: the `accountpool.io/`
/// annotations and the managedFields entries that own `spec.paused`, without their field sets
/// beyond that (the `Paused` condition names who paused the config).
fn trim_metadata<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    let pausers: Vec<_> = meta
        .managed_fields
        .take()
        .into_iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:spec")?.get("f:paused"))
                .is_some()
        })
        .map(|mut m| {
            m.fields_v1 = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
                serde_json::json!({"f:spec": {"f:paused": {}}}),
            ));
            m
        })
        .collect();
    meta.managed_fields = (!pausers.is_empty()).then_some(pausers);
    if let Some(a) = meta.annotations.as_mut() {
        a.retain(|k, _| k.starts_with("accountpool.io/"));
    }
    if meta.annotations.as_ref().is_some_and(|a| a.is_empty()) {
        meta.annotations = None;
    }
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
    stored_objects(reflector::reflector(writer, stream), Some)
}

/// The claim watch: into the ledger first, then into the controller's store, translated
/// (`claim_store::to_store`: the store holds a claim only while a reconcile may need it), both in
/// one step under the ledger's lock, so that a watch event never makes the store newer than the
/// index. Only a claim fetched for a visit (`ClaimWriter::insert_fetched`) may be newer in the
/// store than in the index until its event arrives; the store then keeps it against an older,
/// lagging event.
///
/// What comes out are references (`StoredClaim::ref_by_name`) of the claims not settled: the
/// claim controller reads each claim from the store, and a listed claim waits for the list's
/// end, most of a take-over's backlog at once, in 115 bytes instead of 697 (`cargo run
/// --release --example memory`).
pub fn claim_stream(
    api: Api<LeanClaim>,
    writer: ClaimWriter,
    ledger: SharedLedger,
    feed: ChangeFeed,
    synced: Arc<AtomicBool>,
) -> impl Stream<Item = Result<ObjectRef<StoredClaim>, watcher::Error>> + Send {
    let stream = watcher(api, watch_config())
        .default_backoff()
        .map_ok(widen::<LeanClaim, StoredClaim>)
        .inspect_ok({
            let mut relist = None;
            let mut list_started = Instant::now();
            move |ev| {
                if matches!(ev, watcher::Event::Init) {
                    list_started = Instant::now();
                }
                {
                    let mut ledger = lock(&ledger);
                    follow(
                        &mut ledger,
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
                    writer.apply(ev, &ledger, Instant::now());
                }
                if matches!(ev, watcher::Event::InitDone) {
                    synced.store(true, Ordering::SeqCst);
                    tracing::info!(
                        kind = ?Kind::Claim,
                        seconds = list_started.elapsed().as_secs_f64(),
                        "listed"
                    );
                }
                feed.bump();
            }
        });
    stored_objects(stream, unsettled_ref)
}

/// A claim's reference if it is not settled. Settled claims need no reconcile
/// (`claim_state::is_settled`: above all the Bound status a reconcile just wrote); each of
/// those started one more reconcile that found nothing to do.
pub(crate) fn unsettled_ref(c: StoredClaim) -> Option<ObjectRef<StoredClaim>> {
    (!c.is_settled()).then(|| c.ref_by_name())
}

/// The objects of a reflector's events (applied to its store before they come out), each handed
/// on only once the store holds it. The store keeps its old list until a new list is complete
/// (`InitDone`), so a listed object handed on at once was looked up in a store that did not
/// have it yet (a claim created while the watch was away: the controller dropped it as not
/// found) or held an older copy (a claim deleted meanwhile read as still Bound), and nothing
/// brought it back until the sweep. Each object is handed on as `to` makes it, if it makes
/// anything; listed ones wait for the list's end in that form; a list begun again drops those
/// of the one it replaces (they are listed again).
pub fn stored_objects<K, T, S>(
    events: S,
    to: impl Fn(K) -> Option<T> + Send + 'static,
) -> impl Stream<Item = Result<T, watcher::Error>> + Send
where
    T: Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let mut listed: Vec<T> = Vec::new();
    events.flat_map(move |ev| {
        let out: Vec<Result<T, watcher::Error>> = match ev {
            Err(e) => vec![Err(e)],
            Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                to(o).into_iter().map(Ok).collect()
            }
            Ok(watcher::Event::Init) => {
                listed = Vec::new();
                Vec::new()
            }
            Ok(watcher::Event::InitApply(o)) => {
                listed.extend(to(o));
                Vec::new()
            }
            Ok(watcher::Event::InitDone) => {
                std::mem::take(&mut listed).into_iter().map(Ok).collect()
            }
        };
        futures::stream::iter(out)
    })
}

/// Whether a store has finished its first list (without waiting).
pub fn store_ready<K: Resource + Clone + 'static>(store: &Store<K>) -> bool
where
    K::DynamicType: Eq + Hash + Clone,
{
    use futures::FutureExt;
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

/// A watch start for the reconcile unit tests: the target counts as listed at once and nothing
/// is requested; the test puts the inventory into the ledger itself (`hap_testkit` answers only
/// the reconcile's own calls).
#[cfg(test)]
pub fn listed_without_watch<T>(
    _: &Cluster,
    _: &T,
    feed: Feed,
) -> futures::future::BoxFuture<'static, ()> {
    feed.state.synced();
    feed.listed();
    Box::pin(futures::future::pending())
}

pub type BindingCache = Retargetable<BindingTarget>;
pub type ShootCache = Retargetable<ShootTarget>;

/// All caches of one operator process.
pub struct Caches {
    pub feed: ChangeFeed,
    pub configs: Store<HapConfig>,
    /// The claims a reconcile may need (`claim_store`): those not settled, and settled ones
    /// while a visit needs them.
    pub claims: Store<StoredClaim>,
    /// The claim store's writer, for the fetch of a settled claim a visit needs.
    pub claim_writer: ClaimWriter,
    pub bindings: BindingCache,
    /// The bindings of the kind the pools are not made of (`watch_other_bindings`).
    pub others: BindingCache,
    pub shoots: ShootCache,
}

#[cfg(test)]
mod tests;
