//! Watch caches. HapConfigs and AccountClaims are watched cluster-wide for the whole run;
//! bindings and Shoots are watched in the namespaces the config in force names, and the watch
//! is re-targeted when the config changes. Every event bumps a change feed, so that pending
//! claims and pool figures are re-evaluated when the inventory moves.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt, TryStreamExt};
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::writes::binding_resource;
use crate::api::{AccountClaim, BindingKind, HapConfig, Shoot};

/// A counter bumped on every watch event of bindings, Shoots and claims. Consumers read it to
/// coalesce bursts of events into one re-evaluation.
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

/// Where bindings are read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingTarget {
    pub namespace: String,
    pub kind: BindingKind,
}

/// Bindings are read metadata-only: selection needs labels and resourceVersion, never the
/// credentials reference, and Secrets are never read at all.
pub type BindingMeta = PartialObjectMeta<DynamicObject>;
pub type BindingCache = Retargetable<BindingMeta, BindingTarget>;
/// Shoots are watched in one namespace.
pub type ShootTarget = String;
pub type ShootCache = Retargetable<Shoot, ShootTarget>;
/// Builds the watch of a target: the API and its dynamic type.
pub type MakeApi<K, T> = fn(&Client, &T) -> (Api<K>, <K as Resource>::DynamicType);

struct Running<K: Resource + Clone + 'static, T>
where
    K::DynamicType: Eq + Hash + Clone,
{
    target: T,
    store: Store<K>,
    task: JoinHandle<()>,
}

/// A reflector whose watch can be pointed somewhere else while the operator runs.
pub struct Retargetable<K: Resource + Clone + 'static, T>
where
    K::DynamicType: Eq + Hash + Clone,
{
    client: Client,
    feed: ChangeFeed,
    make: MakeApi<K, T>,
    running: RwLock<Option<Running<K, T>>>,
}

impl<K, T> Retargetable<K, T>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
    T: Clone + PartialEq + Debug + Send + Sync + 'static,
{
    pub fn new(client: Client, feed: ChangeFeed, make: MakeApi<K, T>) -> Self {
        Self {
            client,
            feed,
            make,
            running: RwLock::new(None),
        }
    }

    /// Points the watch at `target`; a no-op when it already points there. Returns whether the
    /// target changed.
    pub fn retarget(&self, target: &T) -> bool {
        // Called on every reconcile: the common case (same target) only needs a read lock.
        if let Ok(running) = self.running.read()
            && running.as_ref().is_some_and(|r| &r.target == target)
        {
            return false;
        }
        let Ok(mut running) = self.running.write() else {
            return false;
        };
        if running.as_ref().is_some_and(|r| &r.target == target) {
            return false;
        }
        if let Some(old) = running.take() {
            old.task.abort();
        }
        let (api, dyntype) = (self.make)(&self.client, target);
        let writer = reflector::store::Writer::new(dyntype);
        let store = writer.as_reader();
        let feed = self.feed.clone();
        let stream = watch_into(writer, api, feed);
        tracing::info!(?target, kind = std::any::type_name::<K>(), "watching");
        let task = tokio::spawn(stream);
        *running = Some(Running {
            target: target.clone(),
            store,
            task,
        });
        self.feed.bump();
        true
    }

    /// The current target and its store, if the watch has been started.
    pub fn current(&self) -> Option<(T, Store<K>)> {
        let running = self.running.read().ok()?;
        running
            .as_ref()
            .map(|r| (r.target.clone(), r.store.clone()))
    }

    /// Waits until the current watch has listed everything once.
    pub async fn wait_ready(&self) {
        if let Some((_, store)) = self.current() {
            let _ = store.wait_until_ready().await;
        }
    }

    /// Whether the current watch has listed everything once.
    pub fn is_ready(&self) -> bool {
        self.current().is_some_and(|(_, s)| store_ready(&s))
    }

    /// Drops the cache and lists again (the refresh cycle).
    pub fn restart(&self) {
        let target = self.current().map(|(t, _)| t);
        if let Ok(mut running) = self.running.write()
            && let Some(old) = running.take()
        {
            old.task.abort();
        }
        if let Some(t) = target {
            self.retarget(&t);
        }
    }
}

impl<K: Resource + Clone + 'static, T> Drop for Retargetable<K, T>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn drop(&mut self) {
        if let Ok(mut running) = self.running.write()
            && let Some(old) = running.take()
        {
            old.task.abort();
        }
    }
}

/// Drives one reflector: every event lands in the store and bumps the feed. Watch errors are
/// retried with backoff by the stream itself; they are logged, never fatal.
fn watch_into<K>(
    writer: reflector::store::Writer<K>,
    api: Api<K>,
    feed: ChangeFeed,
) -> impl std::future::Future<Output = ()> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    reflected(api, writer, feed).for_each(|ev| {
        if let Err(e) = ev {
            tracing::warn!(error = %e, "watch error; retrying");
        }
        futures::future::ready(())
    })
}

/// A trimmed, backed-off watch feeding a store, each event also bumping the feed.
fn reflected<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    feed: ChangeFeed,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let stream = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .modify(trim_metadata::<K>);
    reflector::reflector(writer, stream).inspect_ok(move |_| feed.bump())
}

/// Whether a store has finished its first list (without waiting).
pub fn store_ready<K: Resource + Clone + 'static>(store: &Store<K>) -> bool
where
    K::DynamicType: Eq + Hash + Clone,
{
    use futures::FutureExt;
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

/// Drops what no decision reads, to keep the caches small.
fn trim_metadata<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
}

/// The watch stream of the main resource of a controller, tapped so that its events also bump
/// the feed (clusters are counted from claims as well as Shoots).
pub fn controller_stream<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    feed: ChangeFeed,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    reflected(api, writer, feed).touched_objects()
}

/// How the binding watch is built for a target.
pub fn binding_api(
    client: &Client,
    target: &BindingTarget,
) -> (Api<BindingMeta>, kube::core::ApiResource) {
    let ar = binding_resource(target.kind);
    (
        Api::namespaced_with(client.clone(), &target.namespace, &ar),
        ar,
    )
}

/// How the Shoot watch is built for a namespace.
pub fn shoot_api(client: &Client, ns: &ShootTarget) -> (Api<Shoot>, ()) {
    (Api::namespaced(client.clone(), ns), ())
}

/// All caches of one operator process.
pub struct Caches {
    pub feed: ChangeFeed,
    pub configs: Store<HapConfig>,
    pub claims: Store<AccountClaim>,
    pub bindings: BindingCache,
    pub shoots: ShootCache,
}
