//! Phase 5: a take-over with a backlog. Claims pile up while no operator runs — new tenants,
//! second claims of tenants that hold a binding (reuses), and deleted claims waiting for their
//! release — then `hap run` starts and the time until every one is decided is measured, beside a
//! client with no logic that makes the same writes on a twin landscape in the same run.
//!
//! The operator's clock starts when its process is spawned (its caches' LISTs included) and is
//! also given from /readyz; the client's when it sends its first write (it knows every
//! resourceVersion from the setup, so it reads nothing). The writes of both are counted from
//! kube-apiserver's and gardener-apiserver's `apiserver_request_total` so the two can be compared.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use hap_operator::api::{AccountClaim, CLAIM_FINALIZER, ClaimPhase};
use hap_operator::labels::{CLAIMED_BY, FILLING};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use super::private_env::{OperatorProcess, PrivateEnv, env_num, request_counts};
use super::{
    Counts, MEASURED, apply_config, binding_ar, bound_status, claim_obj, concurrently, cpu_seconds,
    create_binding, diff, event_obj, mib, namespace, operator_args, project,
};

/// How many unsettled claims of each kind the backlog holds.
#[derive(Clone, Copy)]
pub struct Backlog {
    pub new: usize,
    pub reuse: usize,
    pub release: usize,
    /// The client's writes in flight.
    pub concurrency: usize,
    /// gardener-apiserver's admission plugins back on (ResourceReferenceManager) once the
    /// backlog is built, for both sides: `HAP_BENCH_TAKEOVER_ADMISSION=on`.
    pub admission: bool,
    /// The operator side is a standby taking over from a frozen leader
    /// (`HAP_BENCH_TAKEOVER_STANDBY=on`): leader and standby run while the backlog piles up,
    /// the leader stopped (SIGSTOP) first; the clock starts when the standby holds the Lease.
    pub standby: bool,
}

impl Backlog {
    pub fn from_env(concurrency: usize) -> Self {
        Self {
            new: env_num("HAP_BENCH_TAKEOVER_NEW", 400),
            reuse: env_num("HAP_BENCH_TAKEOVER_REUSE", 400),
            release: env_num("HAP_BENCH_TAKEOVER_RELEASE", 200),
            concurrency,
            admission: std::env::var("HAP_BENCH_TAKEOVER_ADMISSION").is_ok_and(|v| v == "on"),
            standby: std::env::var("HAP_BENCH_TAKEOVER_STANDBY").is_ok_and(|v| v == "on"),
        }
    }

    pub fn total(&self) -> usize {
        self.new + self.reuse + self.release
    }

    pub fn env_line(&self) -> String {
        format!(
            "HAP_BENCH_TAKEOVER_NEW={} HAP_BENCH_TAKEOVER_REUSE={} HAP_BENCH_TAKEOVER_RELEASE={}{}",
            self.new,
            self.reuse,
            self.release,
            if self.admission {
                " HAP_BENCH_TAKEOVER_ADMISSION=on"
            } else {
                ""
            },
        ) + &if self.standby {
            format!(
                " HAP_BENCH_TAKEOVER_STANDBY=on HAP_BENCH_TAKEOVER_LEASE_S={}",
                env_num("HAP_BENCH_TAKEOVER_LEASE_S", 180)
            )
        } else {
            String::new()
        }
    }
}

/// One landscape's backlog as the setup left it: what the no-logic client needs to make the
/// operator's writes without reading anything.
#[derive(Default)]
struct Plan {
    /// (claim, binding, binding resourceVersion) of each new tenant's claim.
    new: Vec<(String, String, String)>,
    /// (claim, the tenant's binding, its resourceVersion, the anchor claim's name).
    reuse: Vec<(String, String, String, String)>,
    /// (claim, its binding, the binding's resourceVersion).
    release: Vec<(String, String, String)>,
}

/// Builds the backlog in project `name`: bindings, the reuse tenants' settled anchor claims,
/// the unsettled claims, and the release claims deleted (held by their finalizer).
async fn build(client: &Client, name: &str, b: Backlog) -> (&'static str, &'static str, Plan) {
    let (garden, claims_ns) = prepare(client, name).await;
    let plan = fill(client, garden, claims_ns, b).await;
    (garden, claims_ns, plan)
}

/// Project `name`, its claim namespace and its HapConfig: (garden namespace, claim namespace).
async fn prepare(client: &Client, name: &str) -> (&'static str, &'static str) {
    let garden = project(client, name).await;
    let claims_ns: &'static str = Box::leak(format!("claims-{name}").into_boxed_str());
    namespace(client, claims_ns).await;
    apply_config(client, name, garden).await;
    (garden, claims_ns)
}

/// The backlog of a prepared project (`build`).
async fn fill(client: &Client, garden: &'static str, claims_ns: &str, b: Backlog) -> Plan {
    let api: Api<AccountClaim> = Api::namespaced(client.clone(), claims_ns);
    let plan = Arc::new(Mutex::new(Plan::default()));
    let now = Time(jiff::Timestamp::now());
    let rows: Vec<(char, usize)> = (0..b.new)
        .map(|i| ('n', i))
        .chain((0..b.reuse).map(|i| ('u', i)))
        .chain((0..b.release).map(|i| ('r', i)))
        .collect();
    concurrently(rows, 32, |(kind, i)| {
        let (api, plan, now) = (&api, plan.clone(), &now);
        async move {
            let row = one(client, api, garden, now, kind, i).await;
            let mut p = plan.lock().unwrap();
            match row {
                Row::New(r) => p.new.push(r),
                Row::Reuse(r) => p.reuse.push(r),
                Row::Release(r) => p.release.push(r),
            }
        }
    })
    .await;
    std::mem::take(&mut *plan.lock().unwrap())
}

enum Row {
    New((String, String, String)),
    Reuse((String, String, String, String)),
    Release((String, String, String)),
}

fn measured(mut c: AccountClaim) -> AccountClaim {
    c.meta_mut().labels = Some(BTreeMap::from([(MEASURED.to_string(), "backlog".into())]));
    c
}

/// One backlog entry: `n` a new tenant and a free binding; `u` a tenant holding a binding
/// through a Bound anchor claim, and its second claim; `r` a Bound claim on the binding it
/// claimed, then deleted.
async fn one(
    client: &Client,
    api: &Api<AccountClaim>,
    garden: &'static str,
    now: &Time,
    kind: char,
    i: usize,
) -> Row {
    let post = PostParams::default();
    let aws = || BTreeMap::from([("hyperscalerType", "aws".to_string())]);
    let (binding, claim, ga) = (
        format!("{kind}-{i:05}"),
        format!("{kind}-{i:05}"),
        format!("ga-{kind}-{i:05}"),
    );
    match kind {
        'n' => {
            let b = create_binding(client, &binding, garden, &aws()).await;
            let c = measured(claim_obj(&claim, &ga, &claim, false));
            api.create(&post, &c).await.expect("create claim");
            Row::New((claim, binding, b.resource_version().expect("rv")))
        }
        'u' => {
            let anchor = format!("anchor-{i:05}");
            let made = api
                .create(&post, &claim_obj(&anchor, &ga, &anchor, true))
                .await
                .expect("create anchor");
            let rv = bound_on(client, garden, (&binding, &ga), &made, now).await;
            let c = measured(claim_obj(&claim, &ga, &claim, false));
            api.create(&post, &c).await.expect("create claim");
            Row::Reuse((claim, binding, rv, anchor))
        }
        _ => {
            let c = measured(claim_obj(&claim, &ga, &claim, true));
            let made = api.create(&post, &c).await.expect("create claim");
            let rv = bound_on(client, garden, (&binding, &ga), &made, now).await;
            api.delete(&claim, &DeleteParams::default())
                .await
                .expect("delete claim");
            Row::Release((claim, binding, rv))
        }
    }
}

/// A binding claimed by `claim` for `tenant` (tenant and claimed-by labels, as the operator's
/// claim write leaves it) and the claim's status Bound to it; the binding's resourceVersion.
async fn bound_on(
    client: &Client,
    garden: &'static str,
    (binding, tenant): (&str, &str),
    claim: &AccountClaim,
    now: &Time,
) -> String {
    let uid = claim.uid().expect("uid");
    let labels = BTreeMap::from([
        ("hyperscalerType", "aws".to_string()),
        ("tenantName", tenant.to_string()),
        (CLAIMED_BY, uid),
    ]);
    let b = create_binding(client, binding, garden, &labels).await;
    let api: Api<AccountClaim> =
        Api::namespaced(client.clone(), &claim.namespace().unwrap_or_default());
    let status = bound_status(claim, binding, garden, now);
    api.patch_status(
        &claim.name_any(),
        &PatchParams::apply(hap_operator::api::FIELD_MANAGER).force(),
        &Patch::Apply(
            json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim", "status": status}),
        ),
    )
    .await
    .expect("apply status");
    b.resource_version().expect("rv")
}

type Seen = Arc<Mutex<HashMap<String, Instant>>>;

/// Records when each measured claim is decided: seen Bound, or gone (a release done).
fn watch_decided(client: &Client, ns: &str) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let api: Api<AccountClaim> = Api::namespaced(client.clone(), ns);
    let s = seen.clone();
    let task = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default().labels(MEASURED));
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            let (obj, gone) = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
                Ok(watcher::Event::Delete(o)) => (o, true),
                _ => continue,
            };
            let bound = obj.status.as_ref().and_then(|s| s.phase) == Some(ClaimPhase::Bound)
                && obj.metadata.deletion_timestamp.is_none();
            if gone || bound {
                s.lock()
                    .unwrap()
                    .entry(obj.name_any())
                    .or_insert_with(Instant::now);
            }
        }
    });
    (seen, task)
}

/// Waits until `n` measured claims are decided; the instant the last one was.
async fn all_decided(seen: &Seen, n: usize, who: &str) -> Instant {
    let start = Instant::now();
    loop {
        let (count, last) = {
            let s = seen.lock().unwrap();
            (s.len(), s.values().max().copied())
        };
        if count >= n {
            return last.expect("decided");
        }
        assert!(
            start.elapsed() < Duration::from_secs(3600),
            "{who}: only {count} of {n} backlog claims decided after an hour"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What one side of the take-over measured.
pub struct Side {
    /// From spawn (operator) or first write (client) to the last claim decided.
    pub decided: Duration,
    /// The operator's start to /readyz 200 (zero for the client).
    pub ready: Duration,
    pub cpu: f64,
    /// (VmRSS, VmHWM) KiB at the end (the operator only).
    pub mem: Option<(u64, u64)>,
    /// Writes by verb and resource, from both API servers' metrics.
    pub writes: BTreeMap<String, f64>,
}

pub struct Figures {
    pub operator: Side,
    pub client: Side,
    pub setup: Duration,
}

fn writes_of(delta: &Counts) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for ((verb, resource, sub), d) in delta {
        if matches!(verb.as_str(), "PATCH" | "APPLY" | "POST" | "PUT") && *d > 0.0 {
            let key = format!("{verb} {resource}{}", if sub.is_empty() { "" } else { "/" });
            *out.entry(format!("{key}{sub}")).or_insert(0.0) += d;
        }
    }
    out
}

fn both_counts(env: &PrivateEnv) -> (Counts, Counts) {
    (
        request_counts(&env.apiserver_metrics()),
        request_counts(&env.gardener_metrics()),
    )
}

fn writes_since(env: &PrivateEnv, before: &(Counts, Counts)) -> BTreeMap<String, f64> {
    let now = both_counts(env);
    let mut w = writes_of(&diff(&before.0, &now.0));
    for (k, v) in writes_of(&diff(&before.1, &now.1)) {
        *w.entry(format!("{k} (gardener)")).or_insert(0.0) += v;
    }
    w
}

/// Runs phase 5: the client's twin first, then the operator's take-over.
pub async fn run(
    env: &PrivateEnv,
    client: &Client,
    hap: &Path,
    logs: &Path,
    b: Backlog,
) -> Figures {
    let t = Instant::now();
    let (garden_c, ns_c, plan) = build(client, "tkbase", b).await;
    if b.standby {
        let setup = t.elapsed();
        let operator = standby_side(env, client, hap, logs, b).await;
        let client_side = no_logic(env, client, (garden_c, ns_c), &plan, b).await;
        return Figures {
            operator,
            client: client_side,
            setup,
        };
    }
    let (_, ns_o, _) = build(client, "takeover", b).await;
    let setup = t.elapsed();
    println!(
        "take-over setup: two landscapes of {} backlog claims in {setup:.1?}",
        b.total()
    );
    if b.admission {
        // Built fast with the plugins off; both sides then write as a real garden admits.
        let took = env.restart_gardener_apiserver_async(Duration::ZERO).await;
        println!("gardener-apiserver restarted with ResourceReferenceManager on in {took:.1?}");
    }
    let client_side = no_logic(env, client, (garden_c, ns_c), &plan, b).await;
    let operator = operator_side(env, client, hap, logs, ns_o, b.total()).await;
    Figures {
        operator,
        client: client_side,
        setup,
    }
}

async fn operator_side(
    env: &PrivateEnv,
    client: &Client,
    hap: &Path,
    logs: &Path,
    ns: &str,
    n: usize,
) -> Side {
    let (seen, watch) = watch_decided(client, ns);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = both_counts(env);
    let op = OperatorProcess::spawn(
        hap,
        &env.kubeconfig,
        "bench-takeover",
        &operator_args("takeover", ns),
        &logs.join("operator-takeover.log"),
    );
    let ready = super::scale::ready(&op).await;
    let last = all_decided(&seen, n, "operator").await;
    let cpu = cpu_seconds(op.child.id());
    // Trailing writes (events) land within a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mem = op.memory_kib();
    watch.abort();
    Side {
        decided: last.saturating_duration_since(op.started),
        ready,
        cpu,
        mem,
        writes: writes_since(env, &before),
    }
}

/// The standby's take-over: a leader and a standby run on the empty project, the leader is
/// frozen (SIGSTOP: it stops renewing, as a hung node's replica does), the backlog piles up
/// while the standby watches, and the clock starts when the standby holds the Lease.
async fn standby_side(
    env: &PrivateEnv,
    client: &Client,
    hap: &Path,
    logs: &Path,
    b: Backlog,
) -> Side {
    let (garden, ns) = prepare(client, "takeover").await;
    let lease_s = env_num("HAP_BENCH_TAKEOVER_LEASE_S", 180);
    let args = |who: &str| {
        let mut a: Vec<String> = operator_args("takeover", ns)
            .into_iter()
            .filter(|a| a != "--leader-elect=false")
            .collect();
        a.extend([format!("--lease-duration-seconds={lease_s}")]);
        OperatorProcess::spawn(
            hap,
            &env.kubeconfig,
            who,
            &a,
            &logs.join(format!("operator-{who}.log")),
        )
    };
    let mut leader = args("bench-leader");
    holder_is(client, ns, "bench-leader").await;
    let standby = args("bench-standby");
    super::scale::ready(&standby).await;
    assert!(leader.signal("STOP"), "SIGSTOP the leader");
    let frozen = Instant::now();
    let (seen, watch) = watch_decided(client, ns);
    fill(client, garden, ns, b).await;
    let filled = frozen.elapsed();
    let before = both_counts(env);
    let cpu_before = cpu_seconds(standby.child.id());
    assert!(
        holder(client, ns).await.as_deref() == Some("bench-leader"),
        "the standby took over before the backlog was built: raise HAP_BENCH_TAKEOVER_LEASE_S"
    );
    holder_is(client, ns, "bench-standby").await;
    let took = Instant::now();
    println!(
        "standby holds the Lease {:.1?} after the leader froze; the backlog was built in {filled:.1?}",
        frozen.elapsed()
    );
    let last = all_decided(&seen, b.total(), "standby").await;
    let cpu = cpu_seconds(standby.child.id()) - cpu_before;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mem = standby.memory_kib();
    watch.abort();
    leader.kill();
    Side {
        decided: last.saturating_duration_since(took),
        ready: Duration::ZERO,
        cpu,
        mem,
        writes: writes_since(env, &before),
    }
}

/// Who holds the operator's Lease in `ns`.
async fn holder(client: &Client, ns: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    leases
        .get_opt("hap-operator")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

/// Waits until `identity` holds the operator's Lease in `ns` (at most ten minutes).
async fn holder_is(client: &Client, ns: &str, identity: &str) {
    let start = Instant::now();
    loop {
        let holder = holder(client, ns).await;
        if holder.as_deref() == Some(identity) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "{identity} does not hold the Lease after 10 minutes (holder: {holder:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The no-logic client on the twin landscape: per claim the operator's writes, in its order.
async fn no_logic(
    env: &PrivateEnv,
    client: &Client,
    (garden, ns): (&'static str, &'static str),
    plan: &Plan,
    b: Backlog,
) -> Side {
    let (seen, watch) = watch_decided(client, ns);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = both_counts(env);
    let claims: Api<AccountClaim> = Api::namespaced(client.clone(), ns);
    let bindings: Api<DynamicObject> = Api::namespaced_with(client.clone(), garden, &binding_ar());
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let apis = (&claims, &bindings, &events, (garden, ns));
    let now = Time(jiff::Timestamp::now());
    let me = std::process::id();
    let cpu0 = cpu_seconds(me);
    let start = Instant::now();
    let work: Vec<Write> = plan
        .new
        .iter()
        .map(Write::New)
        .chain(plan.reuse.iter().map(Write::Reuse))
        .chain(plan.release.iter().map(Write::Release))
        .collect();
    concurrently(work, b.concurrency, |w| {
        let now = &now;
        async move { w.send(apis, now).await }
    })
    .await;
    let last = all_decided(&seen, b.total(), "client").await;
    let cpu = cpu_seconds(me) - cpu0;
    tokio::time::sleep(Duration::from_secs(2)).await;
    watch.abort();
    Side {
        decided: last.saturating_duration_since(start),
        ready: Duration::ZERO,
        cpu,
        mem: None,
        writes: writes_since(env, &before),
    }
}

/// The client's APIs: claims, bindings, events, and the bindings' and claims' namespaces.
type Apis<'a> = (
    &'a Api<AccountClaim>,
    &'a Api<DynamicObject>,
    &'a Api<Event>,
    (&'static str, &'static str),
);

enum Write<'a> {
    New(&'a (String, String, String)),
    Reuse(&'a (String, String, String, String)),
    Release(&'a (String, String, String)),
}

/// A merge patch of a binding's labels and annotations conditioned on `rv`.
fn cas(
    rv: &str,
    labels: serde_json::Value,
    annotations: serde_json::Value,
) -> Patch<serde_json::Value> {
    Patch::Merge(
        json!({"metadata": {"resourceVersion": rv, "labels": labels, "annotations": annotations}}),
    )
}

impl Write<'_> {
    async fn send(&self, (claims, bindings, events, (garden, ns)): Apis<'_>, now: &Time) {
        let pp = PatchParams::default();
        let (name, binding) = match self {
            Write::New((c, b, rv)) => {
                let made = add_finalizer(claims, c).await;
                // As the operator: the claim write is recorded in the claim's status first.
                let made = apply_record(claims, &made, b, rv, garden).await;
                let labels =
                    json!({"tenantName": made.spec.global_account, CLAIMED_BY: made.uid()});
                let patch = cas(rv, labels, json!({}));
                bindings
                    .patch_metadata(b, &pp, &patch)
                    .await
                    .expect("claim write");
                apply_bound(claims, &made, b, garden, now).await;
                (c, b)
            }
            Write::Reuse((c, b, rv, _)) => {
                let made = add_finalizer(claims, c).await;
                let patch = cas(rv, json!({CLAIMED_BY: null}), json!({FILLING: made.uid()}));
                bindings
                    .patch_metadata(b, &pp, &patch)
                    .await
                    .expect("use record");
                apply_bound(claims, &made, b, garden, now).await;
                (c, b)
            }
            Write::Release((c, b, rv)) => {
                let patch = cas(rv, json!({"tenantName": null, CLAIMED_BY: null}), json!({}));
                bindings
                    .patch_metadata(b, &pp, &patch)
                    .await
                    .expect("release");
                remove_finalizer(claims, c).await;
                (c, b)
            }
        };
        events
            .create(&PostParams::default(), &event_obj(name, ns, binding))
            .await
            .expect("post event");
    }
}

async fn add_finalizer(claims: &Api<AccountClaim>, name: &str) -> AccountClaim {
    let ops = json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": [CLAIM_FINALIZER]}
    ]);
    let patch: json_patch::Patch = serde_json::from_value(ops).expect("json patch");
    claims
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .expect("add finalizer")
}

async fn remove_finalizer(claims: &Api<AccountClaim>, name: &str) {
    let ops = json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": CLAIM_FINALIZER},
        {"op": "remove", "path": "/metadata/finalizers/0"}
    ]);
    let patch: json_patch::Patch = serde_json::from_value(ops).expect("json patch");
    match claims
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => panic!("remove finalizer from {name}: {e}"),
    }
}

/// The record of a claim write (`status.claimWrite`), conditioned on the claim's version; the
/// claim at the version it left.
async fn apply_record(
    claims: &Api<AccountClaim>,
    claim: &AccountClaim,
    binding: &str,
    rv: &str,
    garden: &str,
) -> AccountClaim {
    let record = json!({"binding": binding, "resourceVersion": rv, "namespace": garden,
        "kind": "CredentialsBinding"});
    claims
        .patch_status(
            &claim.name_any(),
            &PatchParams::apply(hap_operator::api::FIELD_MANAGER).force(),
            &Patch::Apply(
                json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
                "metadata": {"resourceVersion": claim.resource_version()},
                "status": {"claimWrite": record}}),
            ),
        )
        .await
        .expect("record the claim write")
}

async fn apply_bound(
    claims: &Api<AccountClaim>,
    claim: &AccountClaim,
    binding: &str,
    garden: &str,
    now: &Time,
) {
    let status = bound_status(claim, binding, garden, now);
    claims
        .patch_status(
            &claim.name_any(),
            &PatchParams::apply(hap_operator::api::FIELD_MANAGER).force(),
            &Patch::Apply(
                json!({"apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
                "metadata": {"resourceVersion": claim.resource_version()}, "status": status}),
            ),
        )
        .await
        .expect("apply status");
}

fn side_line(who: &str, s: &Side) -> String {
    let mem = s
        .mem
        .map(|(rss, hwm)| format!("; VmRSS {:.1} MiB, VmHWM {:.1} MiB", mib(rss), mib(hwm)))
        .unwrap_or_default();
    format!(
        "{who}: every claim decided {:.2?} after {}; {:.2} CPU s{mem}",
        s.decided,
        if s.ready.is_zero() && who == "operator" {
            "it took the Lease".to_string()
        } else if s.ready.is_zero() {
            "its first write".to_string()
        } else {
            format!("spawn (ready at {:.2?})", s.ready)
        },
        s.cpu
    )
}

/// Prints phase 5, ending with one Markdown table row.
pub fn report(b: Backlog, f: &Figures) {
    println!(
        "== 5. take-over: {} unsettled claims ({} new tenants, {} reuses, {} releases of deleted claims), client concurrency {} ==",
        b.total(),
        b.new,
        b.reuse,
        b.release,
        b.concurrency
    );
    println!("setup {:.1?}", f.setup);
    println!("{}", side_line("operator", &f.operator));
    println!("{}", side_line("no-logic client", &f.client));
    let after_ready = f.operator.decided.saturating_sub(f.operator.ready);
    let r_spawn = f.operator.decided.as_secs_f64() / f.client.decided.as_secs_f64().max(1e-3);
    let r_ready = after_ready.as_secs_f64() / f.client.decided.as_secs_f64().max(1e-3);
    if b.standby {
        println!(
            "standby / client: {r_spawn:.2}x from taking the Lease; writes (standby | client):"
        );
    } else {
        println!(
            "operator / client: {r_spawn:.2}x from spawn, {r_ready:.2}x from ready; writes (operator | client):"
        );
    }
    let keys: std::collections::BTreeSet<&String> = f
        .operator
        .writes
        .keys()
        .chain(f.client.writes.keys())
        .collect();
    for k in keys {
        let get = |w: &BTreeMap<String, f64>| w.get(k).copied().unwrap_or(0.0);
        println!(
            "  {k}: {:.0} | {:.0}",
            get(&f.operator.writes),
            get(&f.client.writes)
        );
    }
    let hwm = f.operator.mem.map_or(0.0, |(_, h)| mib(h));
    println!(
        "BENCH-ROW takeover | {} ({}/{}/{}){}{} | {:.2} s | {:.2} s | {:.2} s | {r_spawn:.2} | {r_ready:.2} | {:.2} s | {:.2} s | {hwm:.0} MiB |",
        b.total(),
        b.new,
        b.reuse,
        b.release,
        if b.admission { ", RRM on" } else { "" },
        if b.standby {
            ", standby after a frozen leader"
        } else {
            ""
        },
        f.operator.decided.as_secs_f64(),
        f.operator.ready.as_secs_f64(),
        f.client.decided.as_secs_f64(),
        f.operator.cpu,
        f.client.cpu
    );
}
