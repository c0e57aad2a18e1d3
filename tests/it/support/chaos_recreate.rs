//! The source-path phase of the chaos test (issue 19): requests that arrive through the admission
//! webhook as Shoots (called by gardener-apiserver) and Kyma Runtimes, on a pool of their own
//! (plan `alicloud`, which no other request of the run uses), while the main run's faults go on.
//!
//! - **Re-creation:** fixed Shoot and Runtime names are deleted and created again the moment they
//!   are gone, over and over, each with a tenant of its own; the gap before the re-creation
//!   varies so that it lands on every moment of the operator's clean-up of the gone object.
//! - **Refusal after the webhook:** Shoots with a Kubernetes version the CloudProfile does not
//!   offer or an invalid hibernation schedule (gardener-apiserver refuses them after admission)
//!   and Runtimes with a provider type the CRD schema does not allow; each a fresh tenant.
//! - **Time-outs:** while the main run has its leader paused, Runtimes go to the standby through
//!   a webhook registration with `timeoutSeconds: 1`, below the decision time.
//! - **A squatter:** a Shoot that names a free binding itself (no tenant on the binding), and an
//!   AccountClaim of another tenant in that binding's pool.
//!
//! A watch records bindings, Shoots, Runtimes and the phase's claims; the checker then counts:
//! - **dirty under an object:** a binding marked dirty while an object names it. "While" is
//!   decided from evidence that can only under-report, never invent: the object is known alive at
//!   a resourceVersion at or after the dirty write (Shoots and bindings share the garden's etcd,
//!   whose revision orders every write; Runtimes only when the run has one cluster), or deleted at
//!   a later revision, or the test sent its delete only after the watch had seen the dirty label,
//!   or it is still there at the end;
//! - **two tenants on a binding:** the tenants of every object that ever named it, plus tenant
//!   labels and Bound claims seen on it after the first such object (arrival order of the watches;
//!   claims that are being deleted are not counted);
//! - **claimed but unexplained:** at the end a binding with a tenant and not dirty that no live
//!   object names and the HapConfig does not report in `status.orphans`;
//! - **dirty though never used:** a binding marked dirty that no stored object ever named;
//! - **refused requests:** each must leave no claim and no binding claimed or dirty for it once the
//!   source grace has passed (waited for with a deadline).
//!
//! Self-contained (no `super::` items) so that `tests/it/chaos.rs` can include it by path.
#![allow(dead_code)]

pub use crate::support::garden;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// Where the phase's Runtimes live (the operator's cluster); the main run's are elsewhere.
pub const RUNTIMES_NS: &str = "kcp-src";
const PHASE_LABEL: &str = "chaos/phase";
const PHASE: &str = "sources";
const REPLICA_LABEL: &str = "chaos/replica";
const REQUEST_LABEL: &str = "accountpool.io/request";
const SHOOT_GA: &str = "accountpool.io/global-account";
const RUNTIME_GA: &str = "kyma-project.io/global-account-id";
/// The phase's pool, and the pool of the squatted binding.
const POOL: &str = "alicloud";
const SQUAT_PR: &str = "cf-squat";
const SQUAT_POOL: &str = "alicloud_cf-squat";
const SQUAT_BINDING: &str = "ali-squat-0";
const SQUAT_SHOOT: &str = "sq-0";
const SQUAT_TENANT: &str = "ga-squatter";
const SQUAT_CLAIM: &str = "src-squat";
const HELD_CLAIM: &str = "src-held";
const PLATFORM_REGION: &str = "cf-eu10";
/// Runtimes per pause of the leader that go to the standby with `timeoutSeconds: 1`.
const TIMEOUTS_PER_PAUSE: usize = 2;

/// The rules the phase adds: its own pool, and the squatted binding's.
pub fn rules() -> [&'static str; 2] {
    ["alicloud", "alicloud(PR=cf-squat)"]
}

/// The request sources of the phase; they go before the run's own (the first match serves).
pub fn sources() -> Vec<Value> {
    vec![
        json!({"id": "chaos-src-shoots", "kind": "Shoot", "matchLabels": {PHASE_LABEL: PHASE}}),
        // The CRD allows only four provider types, none of them the pool's: the provider is
        // the source's constant, so that a Runtime with a type outside the schema is served
        // first and then refused by the API server.
        json!({"id": "chaos-src-runtimes", "kind": "Runtime", "matchLabels": {PHASE_LABEL: PHASE},
               "request": {"provider": {"constant": POOL}}}),
    ]
}

/// Claims the phase's requests make (the main checker leaves them to this one).
pub fn is_phase_claim(name: &str) -> bool {
    name.starts_with("shoot.")
        || name.starts_with(&format!("runtime.{RUNTIMES_NS}."))
        || name.starts_with("src-")
}

/// Bindings of the phase's pools (the main checker leaves them to this one).
pub fn is_phase_binding(labels: &BTreeMap<String, String>) -> bool {
    labels
        .get("hyperscalerType")
        .is_some_and(|t| t.starts_with(POOL))
}

fn claim_of(kind: Kind, ns: &str, name: &str) -> String {
    match kind {
        Kind::Shoot => format!("shoot.{ns}.{name}"),
        Kind::Runtime => format!("runtime.{RUNTIMES_NS}.{name}"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Shoot,
    Runtime,
}

/// How a refused request is made invalid after the webhook served it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// Shoot: a Kubernetes version the CloudProfile does not offer.
    UnknownVersion,
    /// Shoot: a hibernation schedule that is not a cron expression.
    BadHibernation,
    /// Runtime: `spec.shoot.provider.type` outside the CRD's enum.
    SchemaEnum,
    /// Runtime: the API server gave up on the webhook (`timeoutSeconds: 1`, leader paused).
    TimedOut,
}

/// The phase's sizes, from the run's parameters.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Fixed names per kind in the re-creation loop.
    pub names: usize,
    /// Refused requests per kind of refusal.
    pub refusals: usize,
    /// How long the loops re-create.
    pub run_for: Duration,
    /// The operator's `--source-grace`.
    pub grace: Duration,
}

impl Plan {
    /// Bindings the pool needs: a new one each time the clean-up releases a name's claim (at
    /// most once per grace), one per refused or timed-out request (today's code burns them),
    /// and slack.
    fn pool_size(&self, pauses: usize) -> usize {
        let per_name = (self.run_for.as_secs() / self.grace.as_secs().max(1)) as usize + 3;
        2 * self.names * per_name + 3 * self.refusals + pauses * TIMEOUTS_PER_PAUSE + 6
    }
}

/// Where the phase runs.
#[derive(Clone)]
pub struct Setup {
    pub ops: Client,
    pub garden: Client,
    /// The binding namespace (Shoots live there too).
    pub bindings_ns: String,
    pub claims_ns: String,
    pub config: String,
    /// One cluster: Runtimes and bindings share one etcd, so their resourceVersions compare.
    pub one_cluster: bool,
}

// ---------------------------------------------------------------------------------------------
// What the watches and the driver saw.

#[derive(Clone, Debug)]
struct Obj {
    kind: Kind,
    name: String,
    tenant: String,
    binding: Option<String>,
    /// Arrival order of the first sighting.
    first_seq: u64,
    /// Highest resourceVersion at which the object was seen to exist.
    alive_rv: u64,
    /// The revision of its deletion, when the watch saw it.
    deleted_rv: Option<u64>,
    /// When the driver first tried to delete it (it existed then).
    delete_sent: Option<Instant>,
}

#[derive(Clone, Debug)]
struct Dirty {
    /// The first dirty version seen: at or after the write that set the label.
    rv: u64,
    /// When the watch saw it: at or after the write.
    at: Instant,
}

#[derive(Clone, Debug, Default)]
struct Bind {
    dirty: Option<Dirty>,
    /// (arrival, tenantName) on every version seen with one.
    tenants: Vec<(u64, String)>,
}

#[derive(Clone, Debug, Default)]
struct ClaimSeen {
    /// (arrival, binding, tenant) for every non-deleting Bound version.
    bound: Vec<(u64, String, String)>,
    uids: BTreeSet<String>,
}

#[derive(Debug)]
struct Request {
    kind: Kind,
    name: String,
    tenant: String,
    how: Refusal,
    at: Instant,
    error: String,
}

#[derive(Default)]
struct Track {
    seq: u64,
    /// By uid.
    objects: BTreeMap<String, Obj>,
    bindings: BTreeMap<String, Bind>,
    claims: BTreeMap<String, ClaimSeen>,
    refused: Vec<Request>,
    /// Requests meant to be refused that the API server stored (the scenario did not happen).
    not_refused: Vec<String>,
    /// Objects the loops created (every re-creation counts).
    created: usize,
    /// Webhook calls of the loops refused before admission (claim being released, no leader,
    /// API server away), retried.
    retried: usize,
    pauses_seen: usize,
}

fn rv_of(o: &DynamicObject) -> u64 {
    o.resource_version()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn str_at<'a>(o: &'a DynamicObject, ptr: &str) -> Option<&'a str> {
    o.data.pointer(ptr).and_then(Value::as_str)
}

fn binding_of(kind: Kind, o: &DynamicObject) -> Option<String> {
    let ptr = match kind {
        Kind::Shoot => "/spec/credentialsBindingName",
        Kind::Runtime => "/spec/shoot/secretBindingName",
    };
    str_at(o, ptr).filter(|b| !b.is_empty()).map(String::from)
}

fn tenant_of(kind: Kind, o: &DynamicObject) -> String {
    let key = match kind {
        Kind::Shoot => SHOOT_GA,
        Kind::Runtime => RUNTIME_GA,
    };
    o.labels()
        .get(key)
        .cloned()
        .unwrap_or_else(|| format!("(no tenant label: {kind:?} {})", o.name_any()))
}

impl Track {
    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn object_alive(&mut self, kind: Kind, o: &DynamicObject) {
        let Some(uid) = o.uid() else { return };
        let seq = self.next();
        let rv = rv_of(o);
        let entry = self.objects.entry(uid).or_insert_with(|| Obj {
            kind,
            name: o.name_any(),
            tenant: tenant_of(kind, o),
            binding: binding_of(kind, o),
            first_seq: seq,
            alive_rv: rv,
            deleted_rv: None,
            delete_sent: None,
        });
        entry.alive_rv = entry.alive_rv.max(rv);
    }

    fn object_deleted(&mut self, kind: Kind, o: &DynamicObject) {
        self.object_alive(kind, o);
        if let Some(obj) = o.uid().and_then(|u| self.objects.get_mut(&u)) {
            obj.deleted_rv = Some(rv_of(o));
        }
    }

    fn binding(&mut self, b: &DynamicObject) {
        if !is_phase_binding(b.labels()) {
            return;
        }
        let seq = self.next();
        let entry = self.bindings.entry(b.name_any()).or_default();
        if let Some(t) = b.labels().get("tenantName") {
            entry.tenants.push((seq, t.clone()));
        }
        if b.labels().get("dirty").map(String::as_str) == Some("true") && entry.dirty.is_none() {
            entry.dirty = Some(Dirty {
                rv: rv_of(b),
                at: Instant::now(),
            });
        }
    }

    fn claim(&mut self, c: &hap_operator::api::AccountClaim) {
        let name = c.name_any();
        if !is_phase_claim(&name) {
            return;
        }
        let seq = self.next();
        let entry = self.claims.entry(name).or_default();
        entry.uids.extend(c.uid());
        let st = c.status.as_ref();
        if c.metadata.deletion_timestamp.is_none()
            && st.and_then(|s| s.phase) == Some(hap_operator::api::ClaimPhase::Bound)
            && let Some(b) = st.and_then(|s| s.credentials_binding_name.clone())
        {
            entry.bound.push((seq, b, c.spec.global_account.clone()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Objects.

fn shoot_resource() -> ApiResource {
    garden::shoot_resource()
}

fn runtime_resource() -> ApiResource {
    ApiResource {
        group: "infrastructuremanager.kyma-project.io".into(),
        version: "v1".into(),
        api_version: "infrastructuremanager.kyma-project.io/v1".into(),
        kind: "Runtime".into(),
        plural: "runtimes".into(),
    }
}

fn tenant_for(kind: Kind, tag: &str) -> String {
    let k = match kind {
        Kind::Shoot => "s",
        Kind::Runtime => "r",
    };
    format!("ga-src-{k}{tag}")
}

/// A Shoot asking for its binding: opted in, tenant and plan labels, no binding name.
fn shoot(ns: &str, name: &str, tenant: &str, replica: &str, p: &garden::Profile) -> Value {
    let mut obj = garden::shoot_object(ns, name, "", garden::BindingRef::CredentialsBinding, p);
    if let Some(spec) = obj["spec"].as_object_mut() {
        spec.remove("credentialsBindingName");
    }
    obj["metadata"]["labels"] = json!({
        REQUEST_LABEL: "true", PHASE_LABEL: PHASE, REPLICA_LABEL: replica,
        SHOOT_GA: tenant, "accountpool.io/plan": POOL,
        "accountpool.io/platform-region": PLATFORM_REGION,
    });
    obj
}

/// A Runtime asking for its binding (`provider`: its `spec.shoot.provider.type`).
fn runtime(name: &str, tenant: &str, replica: &str, provider: &str) -> Value {
    json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
        "metadata": {"name": name, "namespace": RUNTIMES_NS, "labels": {
            PHASE_LABEL: PHASE, REPLICA_LABEL: replica, RUNTIME_GA: tenant,
            "kyma-project.io/subaccount-id": format!("sa-{name}"),
            "kyma-project.io/broker-plan-name": POOL,
            "kyma-project.io/platform-region": PLATFORM_REGION,
        }},
        "spec": {
            "shoot": {
                "name": name, "purpose": "production", "platformRegion": PLATFORM_REGION,
                "region": "eu-central-1", "secretBindingName": "",
                "provider": {"type": provider, "workers": [{"name": "w"}]},
                "networking": {"pods": "100.64.0.0/12", "nodes": "10.250.0.0/16", "services": "100.104.0.0/13"},
            },
            "security": {"administrators": ["a@example.com"], "networking": {"filter": {"egress": {"enabled": false}}}},
        },
    })
}

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("a well-formed object")
}

/// Creates `obj`, retrying while the API server is away; AlreadyExists counts as done.
async fn create_retrying(api: &Api<DynamicObject>, obj: Value) {
    let obj = dynamic(obj);
    let start = Instant::now();
    loop {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(120),
                    "creating {}: {e}",
                    obj.name_any()
                );
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}

async fn list_retrying(api: &Api<DynamicObject>) -> Vec<DynamicObject> {
    let start = Instant::now();
    loop {
        match api.list(&ListParams::default()).await {
            Ok(l) => return l.items,
            Err(e) => {
                assert!(start.elapsed() < Duration::from_secs(120), "list: {e}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The phase.

pub struct Phase {
    setup: Setup,
    plan: Plan,
    track: Arc<Mutex<Track>>,
    /// The bindings of the phase's pool (the squatted one aside).
    pool: Vec<String>,
}

impl Phase {
    /// Creates the phase's bindings, the Runtimes' namespace and the squatter Shoot: before the
    /// HapConfig names the rules, so the pools exist from the start.
    pub async fn prepare(setup: Setup, plan: Plan, pauses: usize) -> Self {
        let pool: Vec<String> = (0..plan.pool_size(pauses))
            .map(|i| format!("ali-{i:03}"))
            .collect();
        let secrets: Api<DynamicObject> = Api::namespaced_with(
            setup.garden.clone(),
            &setup.bindings_ns,
            &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        );
        let bindings: Api<DynamicObject> = Api::namespaced_with(
            setup.garden.clone(),
            &setup.bindings_ns,
            &garden::credentials_binding_resource(),
        );
        let all: Vec<(String, &str)> = pool
            .iter()
            .map(|b| (b.clone(), POOL))
            .chain([(SQUAT_BINDING.to_string(), SQUAT_POOL)])
            .collect();
        futures::stream::iter(all)
            .for_each_concurrent(8, |(name, htype)| {
                let (secrets, bindings, ns) = (&secrets, &bindings, &setup.bindings_ns);
                async move {
                    create_retrying(secrets, garden::secret_object(ns, &name, POOL)).await;
                    let labels = BTreeMap::from([("hyperscalerType".to_string(), htype.into())]);
                    create_retrying(bindings, garden::binding_object(ns, &name, POOL, &labels))
                        .await;
                }
            })
            .await;
        create_retrying(
            &Api::all_with(
                setup.ops.clone(),
                &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
            ),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RUNTIMES_NS}}),
        )
        .await;
        // The squatter names the free binding itself; no opt-in label, so no webhook call.
        let p = garden::profile(&setup.garden, POOL).await;
        let mut squatter = garden::shoot_object(
            &setup.bindings_ns,
            SQUAT_SHOOT,
            SQUAT_BINDING,
            garden::BindingRef::CredentialsBinding,
            &p,
        );
        squatter["metadata"]["labels"] = json!({SHOOT_GA: SQUAT_TENANT});
        create_retrying(
            &Api::namespaced_with(setup.garden.clone(), &setup.bindings_ns, &shoot_resource()),
            squatter,
        )
        .await;
        Self {
            setup,
            plan,
            track: Arc::new(Mutex::new(Track::default())),
            pool,
        }
    }

    /// Watches of bindings, Shoots, the phase's Runtimes and claims, feeding the record.
    pub fn spawn_watches(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let s = &self.setup;
        let bindings: Api<DynamicObject> = Api::namespaced_with(
            s.garden.clone(),
            &s.bindings_ns,
            &garden::credentials_binding_resource(),
        );
        let shoots: Api<DynamicObject> =
            Api::namespaced_with(s.garden.clone(), &s.bindings_ns, &shoot_resource());
        let runtimes: Api<DynamicObject> =
            Api::namespaced_with(s.ops.clone(), RUNTIMES_NS, &runtime_resource());
        let claims: Api<hap_operator::api::AccountClaim> =
            Api::namespaced(s.ops.clone(), &s.claims_ns);
        vec![
            tokio::spawn(watch_bindings(bindings, self.track.clone())),
            tokio::spawn(watch_objects(Kind::Shoot, shoots, self.track.clone())),
            tokio::spawn(watch_objects(Kind::Runtime, runtimes, self.track.clone())),
            tokio::spawn(watch_claims(claims, self.track.clone())),
        ]
    }

    /// Runs the loops, the refused requests and the squatter's claim; on every pause of the
    /// leader (`paused` turns to the paused replica's slot) sends Runtimes with a short webhook
    /// time-out to the other slot. Returns when the loops are done.
    pub async fn drive(&self, paused: tokio::sync::watch::Receiver<Option<char>>) {
        let until = Instant::now() + self.plan.run_for;
        let p = garden::profile(&self.setup.garden, POOL).await;
        let mut loops = Vec::new();
        for k in 0..self.plan.names {
            for kind in [Kind::Shoot, Kind::Runtime] {
                loops.push(self.recreate_loop(kind, format!("rc-{k}"), until, &p));
            }
        }
        let refusals = (0..self.plan.refusals).flat_map(|k| {
            [
                (Kind::Shoot, Refusal::UnknownVersion, k),
                (Kind::Shoot, Refusal::BadHibernation, k),
                (Kind::Runtime, Refusal::SchemaEnum, k),
            ]
        });
        let refused = futures::future::join_all(refusals.enumerate().map(|(i, (kind, how, k))| {
            let p = &p;
            async move {
                // Early in the run, spread out, so the grace has passed by the check.
                tokio::time::sleep(Duration::from_millis(1500 * i as u64 + 2000)).await;
                self.refused_request(kind, how, k, p, until).await;
            }
        }));
        let squat = self.squat_claim();
        let timeouts = self.on_pauses(paused, until);
        futures::join!(futures::future::join_all(loops), refused, squat, timeouts);
    }

    async fn recreate_loop(&self, kind: Kind, name: String, until: Instant, p: &garden::Profile) {
        let tenant = tenant_for(kind, &name);
        let mut i = 0usize;
        loop {
            let replica = if i.is_multiple_of(2) { "a" } else { "b" };
            let obj = match kind {
                Kind::Shoot => shoot(&self.setup.bindings_ns, &name, &tenant, replica, p),
                Kind::Runtime => runtime(&name, &tenant, replica, "aws"),
            };
            let Some(uid) = self.create_admitted(kind, &name, obj, until).await else {
                return;
            };
            if Instant::now() >= until {
                // The last one stays: its binding must end serving it.
                return;
            }
            // Hold it a while, then delete it and wait until it is gone.
            tokio::time::sleep(Duration::from_millis([400, 800, 1200][i % 3])).await;
            self.delete_until_gone(kind, &name, &uid).await;
            // Re-create at a varying moment of the clean-up that follows the deletion (the
            // operator's source pass runs some 250 ms after a burst of changes).
            let gap = [0, 100, 200, 250, 300, 350, 400, 500, 650][i % 9];
            tokio::time::sleep(Duration::from_millis(gap)).await;
            i += 1;
        }
    }

    fn api(&self, kind: Kind) -> Api<DynamicObject> {
        match kind {
            Kind::Shoot => Api::namespaced_with(
                self.setup.garden.clone(),
                &self.setup.bindings_ns,
                &shoot_resource(),
            ),
            Kind::Runtime => {
                Api::namespaced_with(self.setup.ops.clone(), RUNTIMES_NS, &runtime_resource())
            }
        }
    }

    /// Creates until admitted (denials while the earlier claim is released, replicas restarting,
    /// API servers away are retried, switching replicas); the uid, or None after `until` + 90 s.
    async fn create_admitted(
        &self,
        kind: Kind,
        name: &str,
        mut obj: Value,
        until: Instant,
    ) -> Option<String> {
        let api = self.api(kind);
        let mut attempt = 0usize;
        loop {
            obj["metadata"]["labels"][REPLICA_LABEL] =
                json!(if attempt.is_multiple_of(2) { "a" } else { "b" });
            match api
                .create(&PostParams::default(), &dynamic(obj.clone()))
                .await
            {
                Ok(o) => {
                    let mut t = self.track.lock().unwrap();
                    t.object_alive(kind, &o);
                    t.created += 1;
                    return o.uid();
                }
                Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                    // An earlier attempt got through after all.
                    if let Ok(Some(o)) = api.get_opt(name).await {
                        self.track.lock().unwrap().object_alive(kind, &o);
                        return o.uid();
                    }
                }
                Err(e) => {
                    self.track.lock().unwrap().retried += 1;
                    if Instant::now() > until + Duration::from_secs(90) {
                        eprintln!("chaos sources: {kind:?} {name} never admitted again: {e}");
                        return None;
                    }
                }
            }
            attempt += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn delete_until_gone(&self, kind: Kind, name: &str, uid: &str) {
        let api = self.api(kind);
        if let Some(o) = self.track.lock().unwrap().objects.get_mut(uid) {
            o.delete_sent.get_or_insert_with(Instant::now);
        }
        let start = Instant::now();
        loop {
            if kind == Kind::Shoot {
                let confirm =
                    json!({"metadata": {"annotations": {garden::DELETION_CONFIRMATION: "true"}}});
                let _ = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&confirm))
                    .await;
            }
            let _ = api.delete(name, &DeleteParams::default()).await;
            match api.get_opt(name).await {
                Ok(None) => return,
                Ok(Some(o)) if o.uid().as_deref() != Some(uid) => return,
                _ => {}
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "{kind:?} {name} not gone after 120 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// One request the API server refuses after the webhook; recorded with its error.
    /// Retries until the object itself is refused (after the webhook served it). While the
    /// leader is killed every few seconds and the API servers restart, the webhook may keep
    /// answering "could not decide in time": no latency is promised under that, so the bound is
    /// the one every request of the run has, 90 s after the chaos ends (`create_admitted`).
    /// A fixed 120 s from the start, inside a 125 s chaos phase, failed the separate-garden
    /// variant with the Shoot's claim decided, sent back by a garden restart and decided again
    /// after each of several takeovers.
    async fn refused_request(
        &self,
        kind: Kind,
        how: Refusal,
        k: usize,
        p: &garden::Profile,
        until: Instant,
    ) {
        let (name, mut obj) = match how {
            Refusal::UnknownVersion => {
                let name = format!("rf-v{k}");
                let mut o = shoot(&self.setup.bindings_ns, &name, "", "a", p);
                o["spec"]["kubernetes"]["version"] = json!("1.99.0");
                (name, o)
            }
            Refusal::BadHibernation => {
                let name = format!("rf-h{k}");
                let mut o = shoot(&self.setup.bindings_ns, &name, "", "a", p);
                o["spec"]["hibernation"] =
                    json!({"enabled": false, "schedules": [{"start": "not a cron"}]});
                (name, o)
            }
            Refusal::SchemaEnum | Refusal::TimedOut => {
                let name = format!("rf-e{k}");
                (name.clone(), runtime(&name, "", "a", POOL))
            }
        };
        let tenant = tenant_for(kind, &name);
        let ga = if kind == Kind::Shoot {
            SHOOT_GA
        } else {
            RUNTIME_GA
        };
        obj["metadata"]["labels"][ga] = json!(tenant);
        let api = self.api(kind);
        let start = Instant::now();
        let mut attempt = 0usize;
        loop {
            obj["metadata"]["labels"][REPLICA_LABEL] =
                json!(if attempt.is_multiple_of(2) { "a" } else { "b" });
            match api
                .create(&PostParams::default(), &dynamic(obj.clone()))
                .await
            {
                Ok(o) => {
                    let mut t = self.track.lock().unwrap();
                    t.object_alive(kind, &o);
                    t.not_refused.push(format!("{kind:?} {name} ({how:?})"));
                    return;
                }
                // A refusal of the object itself (not the webhook's, not an API server away).
                Err(kube::Error::Api(s))
                    if (s.code == 422 || s.code == 400 || s.code == 403)
                        && !s.message.contains("denied the request") =>
                {
                    eprintln!(
                        "chaos sources: {kind:?} {name} ({how:?}) refused after {} s of retries",
                        start.elapsed().as_secs()
                    );
                    self.track.lock().unwrap().refused.push(Request {
                        kind,
                        name,
                        tenant,
                        how,
                        at: Instant::now(),
                        error: s.message,
                    });
                    return;
                }
                Err(e) => {
                    assert!(
                        Instant::now() < until + Duration::from_secs(90),
                        "{kind:?} {name} ({how:?}) was never refused ({} s of retries): {e}",
                        start.elapsed().as_secs()
                    );
                }
            }
            attempt += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// A claim of another tenant in the squatted binding's pool.
    async fn squat_claim(&self) {
        self.claim(SQUAT_CLAIM, SQUAT_PR, "ga-src-q").await;
    }

    /// The claim whose binding write the SIGTERM scenario holds (a tenant of its own).
    pub async fn held_claim(&self) {
        self.claim(HELD_CLAIM, PLATFORM_REGION, "ga-src-held").await;
    }

    /// Whether the held scenario's claim is Bound.
    pub async fn held_claim_bound(&self) -> bool {
        let api: Api<hap_operator::api::AccountClaim> =
            Api::namespaced(self.setup.ops.clone(), &self.setup.claims_ns);
        api.get_opt(HELD_CLAIM)
            .await
            .ok()
            .flatten()
            .is_some_and(|c| {
                c.status.and_then(|s| s.phase) == Some(hap_operator::api::ClaimPhase::Bound)
            })
    }

    /// A plain AccountClaim of the phase (named `src-…`).
    async fn claim(&self, name: &str, platform_region: &str, tenant: &str) {
        let api: Api<hap_operator::api::AccountClaim> =
            Api::namespaced(self.setup.ops.clone(), &self.setup.claims_ns);
        let obj: hap_operator::api::AccountClaim = serde_json::from_value(json!({
            "apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
            "metadata": {"name": name},
            "spec": {"plan": POOL, "platformRegion": platform_region, "globalAccount": tenant,
                     "subaccount": format!("sa-{name}"), "shootName": name},
        }))
        .expect("claim");
        let start = Instant::now();
        loop {
            match api.create(&PostParams::default(), &obj).await {
                Ok(_) => return,
                Err(kube::Error::Api(s)) if s.code == 409 => return,
                Err(e) => {
                    assert!(start.elapsed() < Duration::from_secs(120), "{name}: {e}");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
    }

    /// On each pause of the leader, Runtimes to the standby's short-time-out registration.
    async fn on_pauses(
        &self,
        mut paused: tokio::sync::watch::Receiver<Option<char>>,
        until: Instant,
    ) {
        let mut n = 0usize;
        loop {
            let slot = tokio::select! {
                changed = paused.changed() => {
                    if changed.is_err() { return; }
                    *paused.borrow_and_update()
                }
                _ = tokio::time::sleep_until((until + Duration::from_secs(30)).into()) => return,
            };
            let Some(slot) = slot else { continue };
            self.track.lock().unwrap().pauses_seen += 1;
            let standby = if slot == 'a' { "tb" } else { "ta" };
            // The standby answers at once, the API server gives up after 1 s, the leader that
            // would decide is stopped: the claim outlives the call.
            let calls = (0..TIMEOUTS_PER_PAUSE).map(|j| {
                let name = format!("to-{n}-{j}");
                async move {
                    let tenant = tenant_for(Kind::Runtime, &name);
                    let obj = runtime(&name, &tenant, standby, "aws");
                    match self
                        .api(Kind::Runtime)
                        .create(&PostParams::default(), &dynamic(obj))
                        .await
                    {
                        Ok(o) => self.track.lock().unwrap().object_alive(Kind::Runtime, &o),
                        Err(e) => self.track.lock().unwrap().refused.push(Request {
                            kind: Kind::Runtime,
                            name,
                            tenant,
                            how: Refusal::TimedOut,
                            at: Instant::now(),
                            error: e.to_string(),
                        }),
                    }
                }
            });
            futures::future::join_all(calls).await;
            n += 1;
        }
    }

    // -----------------------------------------------------------------------------------------
    // The checker.

    /// Waits (at most the grace plus 60 s after the last refused request) until every refused
    /// request's claim is gone and its binding released or free, then counts.
    pub async fn check(&self) -> PhaseCounts {
        let claims_api: Api<hap_operator::api::AccountClaim> =
            Api::namespaced(self.setup.ops.clone(), &self.setup.claims_ns);
        let bindings_api: Api<DynamicObject> = Api::namespaced_with(
            self.setup.garden.clone(),
            &self.setup.bindings_ns,
            &garden::credentials_binding_resource(),
        );
        let last = self
            .track
            .lock()
            .unwrap()
            .refused
            .iter()
            .map(|r| r.at)
            .max();
        let deadline = last.map_or_else(Instant::now, |t| {
            t + self.plan.grace + Duration::from_secs(60)
        });
        let waited = Instant::now();
        let claims = loop {
            let claims = claims_list(&claims_api).await;
            let bindings = phase_bindings(&list_retrying(&bindings_api).await);
            let settled = {
                let t = self.track.lock().unwrap();
                t.refused.iter().all(|r| {
                    refused_outcome(&t, &self.setup.bindings_ns, r, &claims, &bindings).settled
                })
            };
            if settled || Instant::now() >= deadline {
                break claims;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let waited = waited.elapsed();
        let shoots = list_retrying(&self.api(Kind::Shoot)).await;
        let runtimes = list_retrying(&self.api(Kind::Runtime)).await;
        let orphans: BTreeSet<String> =
            Api::<hap_operator::api::HapConfig>::all(self.setup.ops.clone())
                .get(&self.setup.config)
                .await
                .ok()
                .and_then(|c| c.status)
                .map(|s| s.orphans.into_iter().map(|o| o.binding).collect())
                .unwrap_or_default();
        let last_bindings = list_retrying(&bindings_api).await;
        let bindings = phase_bindings(&last_bindings);
        let mut t = self.track.lock().unwrap();
        for (kind, list) in [(Kind::Shoot, &shoots), (Kind::Runtime, &runtimes)] {
            for o in list.iter() {
                t.object_alive(kind, o);
            }
        }
        for b in &last_bindings {
            t.binding(b);
        }
        let live: BTreeSet<String> = shoots
            .iter()
            .chain(&runtimes)
            .filter_map(|o| o.uid())
            .collect();
        let end = End {
            live,
            bindings,
            claims,
            orphans,
        };
        let mut c = count(&t, &self.setup.bindings_ns, self.setup.one_cluster, &end);
        c.waited_for_refused = waited;
        c.pool = self.pool.len();
        c
    }
}

fn phase_bindings(list: &[DynamicObject]) -> BTreeMap<String, BTreeMap<String, String>> {
    list.iter()
        .filter(|b| is_phase_binding(b.labels()))
        .map(|b| (b.name_any(), b.labels().clone()))
        .collect()
}

/// The phase's live claims, with the binding of those Bound and not being deleted.
async fn claims_list(
    api: &Api<hap_operator::api::AccountClaim>,
) -> BTreeMap<String, Option<String>> {
    let start = Instant::now();
    loop {
        match api.list(&ListParams::default()).await {
            Ok(l) => {
                return l
                    .items
                    .iter()
                    .filter(|c| is_phase_claim(&c.name_any()))
                    .map(|c| {
                        let st = c.status.as_ref();
                        let bound = st
                            .filter(|s| s.phase == Some(hap_operator::api::ClaimPhase::Bound))
                            .filter(|_| c.metadata.deletion_timestamp.is_none())
                            .and_then(|s| s.credentials_binding_name.clone());
                        (c.name_any(), bound)
                    })
                    .collect();
            }
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(120),
                    "list claims: {e}"
                );
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}

struct Outcome {
    settled: bool,
    claim_left: bool,
    /// Bindings the request's claim was Bound to that are dirty, or still carry its tenant.
    dirty: Vec<String>,
    claimed: Vec<String>,
}

/// What a refused request left behind, from the live claims and the phase's bindings' labels.
fn refused_outcome(
    t: &Track,
    ns: &str,
    r: &Request,
    claims: &BTreeMap<String, Option<String>>,
    bindings: &BTreeMap<String, BTreeMap<String, String>>,
) -> Outcome {
    let claim = claim_of(r.kind, ns, &r.name);
    let claim_left = claims.contains_key(&claim);
    let seen: BTreeSet<&String> = t
        .claims
        .get(&claim)
        .into_iter()
        .flat_map(|s| s.bound.iter().map(|(_, b, _)| b))
        .collect();
    let (mut dirty, mut claimed) = (Vec::new(), Vec::new());
    for (b, labels) in bindings.iter().filter(|(b, _)| seen.contains(b)) {
        if labels.get("dirty").map(String::as_str) == Some("true") {
            dirty.push(b.clone());
        } else if labels.get("tenantName") == Some(&r.tenant) {
            claimed.push(b.clone());
        }
    }
    Outcome {
        settled: !claim_left && claimed.is_empty(),
        claim_left,
        dirty,
        claimed,
    }
}

/// What the phase's checker found.
#[derive(Debug, Default)]
pub struct PhaseCounts {
    /// Bindings marked dirty while an object named them.
    pub dirty_under_object: usize,
    /// Bindings whose users (objects naming them, tenant labels, Bound claims) are of two tenants.
    pub two_tenants: usize,
    /// Bindings with a tenant, not dirty, that no live object uses and the HapConfig does not
    /// report.
    pub unexplained: usize,
    /// Bindings marked dirty that no stored object ever named.
    pub dirty_never_used: usize,
    /// Refused requests whose claim is still there / whose binding is dirty / still claimed.
    pub refused_claim_left: usize,
    pub refused_dirty: usize,
    pub refused_claimed: usize,
    /// Requests meant to be refused that were stored (the scenario did not happen).
    pub not_refused: usize,
    // Figures.
    pub pool: usize,
    pub created: usize,
    pub retried: usize,
    /// Claims of the loop names beyond the first (the clean-up released one and a new one came).
    pub claims_renewed: usize,
    pub refused: usize,
    /// Refused requests whose claim the watch saw (the webhook had served them).
    pub refused_served: usize,
    pub timed_out: usize,
    pub pauses_seen: usize,
    pub waited_for_refused: Duration,
}

impl PhaseCounts {
    pub fn violations(&self) -> usize {
        self.dirty_under_object
            + self.two_tenants
            + self.unexplained
            + self.dirty_never_used
            + self.refused_claim_left
            + self.refused_dirty
            + self.refused_claimed
            + self.not_refused
    }

    pub fn print(&self) {
        println!("  ---- source path (issue 19): re-created, refused and timed-out requests ----");
        println!(
            "  bindings dirty while an object names them      {}",
            self.dirty_under_object
        );
        println!(
            "  bindings used by two tenants (Shoots counted)  {}",
            self.two_tenants
        );
        println!(
            "  claimed bindings neither used, released nor reported {}",
            self.unexplained
        );
        println!(
            "  dirty bindings no stored object ever named     {}",
            self.dirty_never_used
        );
        println!(
            "  refused requests: claim left {}, binding dirty {}, binding still claimed {}",
            self.refused_claim_left, self.refused_dirty, self.refused_claimed
        );
        println!(
            "  requests meant to be refused that were stored  {}",
            self.not_refused
        );
        println!(
            "  (figures) pool {}, objects created {}, webhook calls retried {}, claims renewed by the clean-up {}, refused {} ({} served by the webhook first, {} timed out over {} pauses), waited {:.1?} for them to settle",
            self.pool,
            self.created,
            self.retried,
            self.claims_renewed,
            self.refused,
            self.refused_served,
            self.timed_out,
            self.pauses_seen,
            self.waited_for_refused
        );
    }
}

/// The live state at the end.
#[derive(Default)]
struct End {
    /// Uids of the Shoots and Runtimes still there.
    live: BTreeSet<String>,
    /// The phase's bindings and their labels.
    bindings: BTreeMap<String, BTreeMap<String, String>>,
    /// The phase's claims, with the binding of those Bound and not being deleted.
    claims: BTreeMap<String, Option<String>>,
    /// Bindings the HapConfig reports in `status.orphans`.
    orphans: BTreeSet<String>,
}

/// Shoots share the garden's etcd with bindings; Runtimes only when the run has one cluster.
fn same_etcd(one_cluster: bool, kind: Kind) -> bool {
    kind == Kind::Shoot || one_cluster
}

/// Whether `o` certainly existed at or after the dirty write `d` (see the module docs).
fn alive_after(one_cluster: bool, o: &Obj, d: &Dirty, live: &BTreeSet<String>, uid: &str) -> bool {
    let by_rv = same_etcd(one_cluster, o.kind)
        && (o.alive_rv >= d.rv || o.deleted_rv.is_some_and(|r| r > d.rv));
    by_rv || o.delete_sent.is_some_and(|t| t > d.at) || live.contains(uid)
}

fn count(t: &Track, ns: &str, one_cluster: bool, end: &End) -> PhaseCounts {
    let End {
        live,
        bindings,
        claims,
        orphans,
    } = end;
    let mut c = PhaseCounts {
        created: t.created,
        retried: t.retried,
        pauses_seen: t.pauses_seen,
        not_refused: t.not_refused.len(),
        ..Default::default()
    };
    for n in &t.not_refused {
        eprintln!("chaos sources: {n} was meant to be refused but was stored");
    }
    let on = |b: &str| -> Vec<(&String, &Obj)> {
        t.objects
            .iter()
            .filter(|(_, o)| o.binding.as_deref() == Some(b))
            .collect()
    };
    for (name, labels) in bindings {
        let users = on(name);
        let track = t.bindings.get(name).cloned().unwrap_or_default();
        // No binding is dirty while an object uses it.
        if let Some(d) = &track.dirty {
            let under: Vec<String> = users
                .iter()
                .filter(|(uid, o)| alive_after(one_cluster, o, d, live, uid))
                .map(|(_, o)| format!("{:?} {} of {}", o.kind, o.name, o.tenant))
                .collect();
            if !under.is_empty() {
                c.dirty_under_object += 1;
                eprintln!("chaos sources: {name} marked dirty while {under:?} used it");
            }
            // No binding is dirty that no stored object ever used.
            if users.is_empty() {
                c.dirty_never_used += 1;
                eprintln!(
                    "chaos sources: {name} marked dirty though no stored object ever named it (tenants {:?})",
                    track
                        .tenants
                        .iter()
                        .map(|(_, t)| t)
                        .collect::<BTreeSet<_>>()
                );
            }
        }
        // No binding is used by two tenants.
        if let Some(first) = users.iter().map(|(_, o)| o.first_seq).min() {
            let mut tenants: BTreeSet<&str> =
                users.iter().map(|(_, o)| o.tenant.as_str()).collect();
            tenants.extend(
                track
                    .tenants
                    .iter()
                    .filter(|(seq, _)| *seq > first)
                    .map(|(_, t)| t.as_str()),
            );
            for s in t.claims.values() {
                tenants.extend(
                    s.bound
                        .iter()
                        .filter(|(seq, b, _)| *seq > first && b == name)
                        .map(|(_, _, t)| t.as_str()),
                );
            }
            if tenants.len() > 1 {
                c.two_tenants += 1;
                eprintln!("chaos sources: {name} used by tenants {tenants:?}");
            }
        }
        // Every claimed binding serves a live object, is released, or is reported.
        let dirty = labels.get("dirty").map(String::as_str) == Some("true");
        if let (Some(tenant), false) = (labels.get("tenantName"), dirty) {
            // A plain AccountClaim of the phase is its own user.
            let serves = users.iter().any(|(uid, _)| live.contains(*uid))
                || claims
                    .iter()
                    .any(|(n, b)| n.starts_with("src-") && b.as_deref() == Some(name.as_str()));
            if !serves && !orphans.contains(name) {
                c.unexplained += 1;
                eprintln!(
                    "chaos sources: {name} claimed for {tenant}, used by no live object, not released, not reported"
                );
            }
        }
    }
    // Refused requests leave nothing behind.
    for r in &t.refused {
        c.refused += 1;
        if r.how == Refusal::TimedOut {
            c.timed_out += 1;
        }
        if t.claims.contains_key(&claim_of(r.kind, ns, &r.name)) {
            c.refused_served += 1;
        }
        let o = refused_outcome(t, ns, r, claims, bindings);
        if o.claim_left || !o.dirty.is_empty() || !o.claimed.is_empty() {
            eprintln!(
                "chaos sources: refused {:?} {} ({:?}, {}) left: claim {}, dirty {:?}, claimed {:?}",
                r.kind, r.name, r.how, r.error, o.claim_left, o.dirty, o.claimed
            );
        }
        c.refused_claim_left += usize::from(o.claim_left);
        c.refused_dirty += o.dirty.len();
        c.refused_claimed += o.claimed.len();
    }
    for (name, s) in &t.claims {
        if name.contains(".rc-") {
            c.claims_renewed += s.uids.len().saturating_sub(1);
        }
    }
    c
}

// ---------------------------------------------------------------------------------------------
// Watches.

async fn watch_objects(kind: Kind, api: Api<DynamicObject>, track: Arc<Mutex<Track>>) {
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        let Ok(ev) = ev else { continue };
        let mut t = track.lock().unwrap();
        match ev {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => t.object_alive(kind, &o),
            watcher::Event::Delete(o) => t.object_deleted(kind, &o),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
}

async fn watch_bindings(api: Api<DynamicObject>, track: Arc<Mutex<Track>>) {
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    while let Some(b) = stream.next().await {
        if let Ok(b) = b {
            track.lock().unwrap().binding(&b);
        }
    }
}

async fn watch_claims(api: Api<hap_operator::api::AccountClaim>, track: Arc<Mutex<Track>>) {
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    while let Some(c) = stream.next().await {
        if let Ok(c) = c {
            track.lock().unwrap().claim(&c);
        }
    }
}

#[cfg(test)]
mod checker_tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn obj(kind: Kind, tenant: &str, binding: &str, first_seq: u64, alive_rv: u64) -> Obj {
        Obj {
            kind,
            name: "rc-0".into(),
            tenant: tenant.into(),
            binding: Some(binding.into()),
            first_seq,
            alive_rv,
            deleted_rv: None,
            delete_sent: None,
        }
    }

    fn dirty_at(rv: u64) -> Bind {
        Bind {
            dirty: Some(Dirty {
                rv,
                at: Instant::now(),
            }),
            tenants: vec![(1, "ga-a".into())],
        }
    }

    fn end_with(binding: &str, l: &[(&str, &str)]) -> End {
        End {
            bindings: BTreeMap::from([(binding.to_string(), labels(l))]),
            ..Default::default()
        }
    }

    #[test]
    fn dirty_under_an_object_needs_evidence_that_it_lived_past_the_dirty_write() {
        let mut t = Track::default();
        t.bindings.insert("ali-000".into(), dirty_at(100));
        t.objects
            .insert("u1".into(), obj(Kind::Runtime, "ga-a", "ali-000", 2, 120));
        let end = end_with("ali-000", &[("dirty", "true"), ("tenantName", "ga-a")]);
        assert_eq!(count(&t, "ns", true, &end).dirty_under_object, 1);
        // Runtimes' revisions do not compare with the garden's: no evidence, nothing counted.
        assert_eq!(count(&t, "ns", false, &end).dirty_under_object, 0);
        // Deleted before the dirty write.
        let o = t.objects.get_mut("u1").unwrap();
        o.alive_rv = 90;
        o.deleted_rv = Some(95);
        assert_eq!(count(&t, "ns", true, &end).dirty_under_object, 0);
        // Deleted after it: it was there when the binding went dirty.
        t.objects.get_mut("u1").unwrap().deleted_rv = Some(101);
        assert_eq!(count(&t, "ns", true, &end).dirty_under_object, 1);
        // Still there at the end, whatever the revisions say.
        let mut end = end;
        end.live.insert("u1".into());
        assert_eq!(count(&t, "ns", false, &end).dirty_under_object, 1);
    }

    #[test]
    fn a_squatting_shoot_and_a_later_tenant_are_two_tenants() {
        let mut t = Track::default();
        t.objects.insert(
            "sq".into(),
            obj(Kind::Shoot, SQUAT_TENANT, SQUAT_BINDING, 1, 10),
        );
        t.bindings.insert(
            SQUAT_BINDING.into(),
            Bind {
                dirty: None,
                tenants: vec![(5, "ga-src-q".into())],
            },
        );
        let mut end = end_with(SQUAT_BINDING, &[("tenantName", "ga-src-q")]);
        end.live.insert("sq".into());
        assert_eq!(count(&t, "ns", true, &end).two_tenants, 1);
        // A tenant label seen before any object used the binding is not a second user.
        t.bindings.get_mut(SQUAT_BINDING).unwrap().tenants = vec![(0, "ga-src-q".into())];
        assert_eq!(count(&t, "ns", true, &end).two_tenants, 0);
    }

    #[test]
    fn a_refused_request_may_leave_neither_a_dirty_nor_a_claimed_binding() {
        let mut t = Track::default();
        t.refused.push(Request {
            kind: Kind::Shoot,
            name: "rf-v0".into(),
            tenant: "ga-r".into(),
            how: Refusal::UnknownVersion,
            at: Instant::now(),
            error: "unsupported kubernetes version".into(),
        });
        t.claims.insert(
            "shoot.ns.rf-v0".into(),
            ClaimSeen {
                bound: vec![(3, "ali-001".into(), "ga-r".into())],
                uids: BTreeSet::from(["c1".to_string()]),
            },
        );
        t.bindings.insert("ali-001".into(), dirty_at(50));
        let end = end_with("ali-001", &[("dirty", "true"), ("tenantName", "ga-r")]);
        let c = count(&t, "ns", true, &end);
        assert_eq!(
            (c.refused_dirty, c.dirty_never_used, c.refused_served),
            (1, 1, 1)
        );
        // Released clean: nothing left behind.
        t.bindings.insert("ali-001".into(), Bind::default());
        let c = count(&t, "ns", true, &end_with("ali-001", &[]));
        assert_eq!(c.violations(), 0);
        // Still claimed for the request's tenant, its claim still there.
        let mut end = end_with("ali-001", &[("tenantName", "ga-r")]);
        end.claims
            .insert("shoot.ns.rf-v0".into(), Some("ali-001".into()));
        let c = count(&t, "ns", true, &end);
        assert_eq!(
            (c.refused_claim_left, c.refused_claimed, c.unexplained),
            (1, 1, 1)
        );
    }
}
