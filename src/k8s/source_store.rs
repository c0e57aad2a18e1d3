//! The source controller's cache of one foreign kind: each watched object read once into what a
//! source pass reads of it, keyed as the API server keys it.

use std::collections::HashMap;
use std::sync::Arc;

use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use serde_json::Value;

/// The watched objects as the pure planner reads them: each object version read once, when its
/// watch event arrives, into what a pass reads of it (`SourceKind::watched`), and held only so.
/// A pass reads every object of a kind; encoding them all on every pass was what the operator
/// spent its time on while Shoots arrived against a landscape's cache (at 10k dressed Shoots,
/// most of its CPU, and a shared-pool admission's p50 went from 14 ms to ~180 ms; BENCHMARKS.md,
/// issue 35). Keeping the decoded object beside it would hold every object twice.
pub struct SourceStore<T> {
    /// What of an object is kept.
    shape: Shape<T>,
    /// By namespace and name, as the API server keys them.
    objects: HashMap<(String, String), Arc<T>>,
    /// A re-list under way: what it has listed so far. The objects before it stay visible until
    /// it ends, as kube's reflector keeps them.
    relist: Option<HashMap<(String, String), Arc<T>>>,
    /// A list has ended once.
    ready: bool,
}

/// What of a watched object (as JSON) a store keeps.
pub type Shape<T> = Box<dyn Fn(Value) -> T + Send + Sync>;

impl Default for SourceStore<Value> {
    /// Keeps each object whole.
    fn default() -> Self {
        Self::new(Box::new(std::convert::identity))
    }
}

impl<T> SourceStore<T> {
    /// A store that keeps `shape` of each object.
    pub fn new(shape: Shape<T>) -> Self {
        Self {
            shape,
            objects: HashMap::new(),
            relist: None,
            ready: false,
        }
    }

    pub fn apply(&mut self, event: watcher::Event<DynamicObject>) {
        let key = |o: &DynamicObject| {
            (
                o.metadata.namespace.clone().unwrap_or_default(),
                o.metadata.name.clone().unwrap_or_default(),
            )
        };
        let shape = &self.shape;
        let json = |o: &DynamicObject| serde_json::to_value(o).ok().map(|v| Arc::new(shape(v)));
        match event {
            watcher::Event::Apply(o) => match json(&o) {
                Some(v) => {
                    self.objects.insert(key(&o), v);
                }
                None => {
                    self.objects.remove(&key(&o));
                }
            },
            watcher::Event::Delete(o) => {
                self.objects.remove(&key(&o));
            }
            watcher::Event::Init => self.relist = Some(HashMap::new()),
            watcher::Event::InitApply(o) => {
                if let (Some(list), Some(v)) = (self.relist.as_mut(), json(&o)) {
                    list.insert(key(&o), v);
                }
            }
            watcher::Event::InitDone => {
                if let Some(list) = self.relist.take() {
                    self.objects = list;
                }
                self.ready = true;
            }
        }
    }

    pub fn values(&self) -> Vec<Arc<T>> {
        self.objects.values().cloned().collect()
    }

    /// A list has ended once.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// Keeps what the source controller reads: metadata without managed fields, the operator's
/// own annotations, and the spec; never a status.
pub fn trim(obj: &mut DynamicObject) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.retain(|k, _| k.starts_with("accountpool.io/"));
    }
    if let Some(map) = obj.data.as_object_mut() {
        map.remove("status");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::ApiResource;
    use serde_json::json;

    fn shoot(name: &str, ns: &str, region: &str) -> DynamicObject {
        let ar = ApiResource::erase::<crate::api::AccountClaim>(&());
        let mut o = DynamicObject::new(name, &ar)
            .within(ns)
            .data(json!({"spec": {"region": region}}));
        o.metadata.uid = Some(format!("uid-{ns}-{name}"));
        o
    }

    fn regions(store: &SourceStore<Value>) -> Vec<String> {
        let mut r: Vec<String> = store
            .values()
            .iter()
            .map(|v| {
                format!(
                    "{}/{}",
                    v["metadata"]["namespace"].as_str().unwrap_or(""),
                    v["spec"]["region"].as_str().unwrap_or("")
                )
            })
            .collect();
        r.sort();
        r
    }

    /// Each watch event's object is encoded once and then read by every pass as the same JSON
    /// (the same allocation); objects of one name in two namespaces are two objects; a re-list
    /// replaces the objects only when it ends, dropping those it did not list.
    #[test]
    fn the_store_reads_each_event_once_and_follows_the_watch() {
        use watcher::Event;
        let mut store = SourceStore::default();
        store.apply(Event::Init);
        store.apply(Event::InitApply(shoot("a", "p1", "eu")));
        assert!(
            !store.ready && store.values().is_empty(),
            "nothing before the list ended"
        );
        store.apply(Event::InitApply(shoot("a", "p2", "us")));
        store.apply(Event::InitDone);
        assert!(store.ready);
        assert_eq!(regions(&store), ["p1/eu", "p2/us"]);
        let (one, two) = (store.values(), store.values());
        assert!(
            one.iter().all(|v| two.iter().any(|w| Arc::ptr_eq(v, w))),
            "encoded once"
        );
        store.apply(Event::Apply(shoot("a", "p1", "ap")));
        store.apply(Event::Delete(shoot("a", "p2", "us")));
        assert_eq!(regions(&store), ["p1/ap"]);
        // A re-list: the old objects stay until it ends; one it does not list is gone after.
        store.apply(Event::Apply(shoot("b", "p1", "eu")));
        store.apply(Event::Init);
        store.apply(Event::InitApply(shoot("b", "p1", "sa")));
        assert_eq!(regions(&store), ["p1/ap", "p1/eu"]);
        store.apply(Event::InitDone);
        assert_eq!(regions(&store), ["p1/sa"]);
    }
}
