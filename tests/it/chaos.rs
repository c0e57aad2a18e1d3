//! Chaos (real control plane of its own, with the real gardener-apiserver): two `hap run`
//! replicas with leader election serve N AccountClaims of T tenants over dedicated, EU, shared and
//! multi-account pools that run out and are refilled mid-run, while a driver SIGKILLs the leader
//! every few seconds (a supervisor restarts every dead replica, as a Deployment would), restarts
//! kube-apiserver and, once, gardener-apiserver. The leader is also paused (SIGSTOP) past its
//! lease while the standby takes over, then resumed: it must write nothing more (issue 11, the
//! fence). Meanwhile claims are deleted (their bindings released), one tenant's claims arrive in
//! bursts, and the internal-state refresh cycle runs every few seconds. At the end an invariant
//! checker reads the live API state (labels, statuses, managedFields, events) plus what a watch
//! saw during the run, checks every invariant of docs/design.md §5, that no binding leaked (claimed for a
//! tenant, used by nobody, not released) and that the paused leader wrote nothing after it
//! resumed, and prints the counts.
//!
//! Alongside, the source-path phase (`support/chaos_recreate.rs`, issue 19) sends Shoots and
//! Runtimes through the webhook on a pool of their own: fixed names deleted and re-created the
//! moment they are gone, requests gardener-apiserver or the CRD schema refuses after the webhook
//! served them, and requests the API server gives up on while the leader is paused; its checker
//! proves no binding is dirty while an object uses it, none is used by two tenants, every claimed
//! binding serves a live object, is released or is reported, and no binding is dirty that no
//! object ever used. The run passes `--source-grace` 20 s (`HAP_CHAOS_SOURCE_GRACE`), so the
//! source clean-up acts many times within the run.
//!
//! Last, the late-write phase (`support/chaos_late.rs`): each replica reaches its clusters
//! through a hold proxy; round after round the leader's requests are held while it decides on a
//! tenant's binding, it is stopped or starved until the standby took over and decided on the same
//! binding, and only then are the held requests let through. Its checker replays every change
//! seen on the phase's claims and bindings; rounds in which nothing was held are inconclusive.
//!
//! `cargo test --test it -- chaos::` runs the small variant (200 claims, 40 tenants, 3 leader kills, one
//! apiserver restart, one gardener-apiserver restart, three late-write rounds; about three
//! minutes on 2 cores, of which the late-write phase takes ~25 s), then the same with a separate
//! garden (120 claims, two control planes). `make chaos` runs the full one:
//! `HAP_CHAOS_CLAIMS=1000 HAP_CHAOS_TENANTS=200 HAP_CHAOS_KILLS=8 HAP_CHAOS_APISERVER_RESTARTS=2
//! HAP_CHAOS_LATE_ROUNDS=24`.
//!
//! Determinism: the claim mix, the pools and the refills are fixed functions of N and T; pools
//! are refilled with slack, so every claim that has a rule must end Bound whatever the timing of
//! the faults. Only invariants and eventual convergence are asserted, never timings.

#[path = "support/chaos_late.rs"]
mod chaos_late;
#[path = "support/chaos_recreate.rs"]
mod chaos_recreate;
#[path = "support/chaos_sources.rs"]
mod chaos_sources;
#[path = "support/hold_proxy.rs"]
mod hold_proxy;
use crate::support::private_env;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chaos_recreate::garden;
use futures::StreamExt;
use hap_operator::api::{AccountClaim, ClaimPhase, HapConfig};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use private_env::{OperatorProcess, PrivateEnv};
use serde_json::json;

const CONFIG: &str = "chaos";
const LEASE: &str = "hap-chaos";
/// The Gardener project of the run; its namespace holds the bindings, their Secrets and Shoots.
const PROJECT: &str = "chaos";
const BINDINGS_NS: &str = "garden-chaos";
const CLAIMS_NS: &str = "claims-chaos";
const MANAGER: &str = hap_operator::api::FIELD_MANAGER;
/// Multi-account limits of the run (seed 004, scaled down so tenants need several accounts).
const LIMIT_AWS: usize = 2;
const LIMIT_DEFAULT: usize = 3;

// ---------------------------------------------------------------------------------------------
// The scenario: a fixed function of (claims, tenants).

struct Params {
    claims: usize,
    tenants: usize,
    kills: usize,
    apiserver_restarts: usize,
    /// Leaders paused (SIGSTOP) past their lease, then resumed.
    pauses: usize,
    /// Bound claims deleted during the faults (HAP_CHAOS_DELETIONS).
    deletions: usize,
    /// Bursts of BURST claims of one tenant created at once.
    bursts: usize,
    /// Claims are created evenly over this window; faults and refills happen inside it.
    window: Duration,
    settle: Duration,
    /// The source-path phase: fixed names per kind re-created over the window
    /// (HAP_CHAOS_SOURCE_NAMES), refused requests per kind of refusal
    /// (HAP_CHAOS_SOURCE_REFUSALS), and the operator's `--source-grace` (HAP_CHAOS_SOURCE_GRACE,
    /// seconds).
    source_names: usize,
    source_refusals: usize,
    source_grace: Duration,
    /// Rounds of the late-write phase (HAP_CHAOS_LATE_ROUNDS).
    late_rounds: usize,
}

impl Params {
    fn from_env() -> Self {
        Self::with_claims("HAP_CHAOS_CLAIMS", 200)
    }

    /// The claim count from `var`, `default` without it; the rest from the common variables.
    fn with_claims(var: &str, default: usize) -> Self {
        let num = |k: &str, d: usize| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let claims = num(var, default).max(20);
        let tenants = num("HAP_CHAOS_TENANTS", 40).clamp(4, claims);
        let kills = num("HAP_CHAOS_KILLS", (claims / 70).max(3));
        let apiserver_restarts = num("HAP_CHAOS_APISERVER_RESTARTS", 1);
        let pauses = num("HAP_CHAOS_PAUSES", 1);
        let deletions = num("HAP_CHAOS_DELETIONS", claims / 20);
        let bursts = num("HAP_CHAOS_BURSTS", 2);
        // Room for every fault: a kill waits for a leader (lease 4 s), a kube-apiserver restart
        // takes ~7 s, the gardener-apiserver restart ~3 s.
        let secs = (claims as u64 / 8)
            .max(8 * kills as u64 + 10 * apiserver_restarts as u64 + 10 * pauses as u64 + 10);
        Self {
            claims,
            tenants,
            kills,
            apiserver_restarts,
            pauses,
            deletions,
            bursts,
            window: Duration::from_secs(secs),
            settle: Duration::from_secs(180 + claims as u64 / 4),
            source_names: num("HAP_CHAOS_SOURCE_NAMES", (claims / 100).max(3)),
            source_refusals: num("HAP_CHAOS_SOURCE_REFUSALS", 2),
            source_grace: Duration::from_secs(num("HAP_CHAOS_SOURCE_GRACE", 20) as u64),
            late_rounds: num("HAP_CHAOS_LATE_ROUNDS", 3),
        }
    }
}

/// The pool a claim's rule leads to, as the checker groups bindings.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Pool {
    htype: &'static str,
    eu: bool,
    shared: bool,
    provider: &'static str,
}

const AWS: Pool = Pool {
    htype: "aws",
    eu: false,
    shared: false,
    provider: "aws",
};
const AWS_EU: Pool = Pool {
    htype: "aws",
    eu: true,
    shared: false,
    provider: "aws",
};
const AZURE: Pool = Pool {
    htype: "azure",
    eu: false,
    shared: false,
    provider: "azure",
};
const GCP: Pool = Pool {
    htype: "gcp",
    eu: false,
    shared: false,
    provider: "gcp",
};
const GCP_KSA: Pool = Pool {
    htype: "gcp_cf-sa30",
    eu: false,
    shared: false,
    provider: "gcp",
};
const TRIAL_AWS: Pool = Pool {
    htype: "aws",
    eu: false,
    shared: true,
    provider: "aws",
};
const TRIAL_AZURE: Pool = Pool {
    htype: "azure",
    eu: false,
    shared: true,
    provider: "azure",
};
const SCC_1: Pool = Pool {
    htype: "openstack_eu-de-1",
    eu: false,
    shared: true,
    provider: "openstack",
};
const SCC_2: Pool = Pool {
    htype: "openstack_eu-de-2",
    eu: false,
    shared: true,
    provider: "openstack",
};
const DEDICATED: [Pool; 5] = [AWS, AWS_EU, AZURE, GCP, GCP_KSA];

const RULES: &[&str] = &[
    "aws(euAccess=*)",
    "azure",
    "gcp",
    "gcp(PR=cf-sa30)",
    "trial(shared)",
    "sap-converged-cloud(CR=*, shared)",
];

struct ClaimPlan {
    name: String,
    tenant: String,
    spec: serde_json::Value,
    /// `None`: the claim has no rule and must end with reason NoMatchingRule.
    pool: Option<Pool>,
}

fn tenant(t: usize) -> String {
    format!("ga-{t:04}")
}

/// Every eighth tenant may hold several accounts per pool.
fn multi(t: usize) -> bool {
    t.is_multiple_of(8)
}

fn limit_of(pool: &Pool) -> usize {
    if pool.provider == "aws" {
        LIMIT_AWS
    } else {
        LIMIT_DEFAULT
    }
}

fn claim_plan(i: usize, tenants: usize) -> ClaimPlan {
    let t = i % tenants;
    let ga = tenant(t);
    let kind = (i * 7 + i / tenants) % 20;
    let shoot = format!("shoot-{i:05}");
    let (spec, pool) = match kind {
        0..=5 => (
            json!({"plan": "aws", "platformRegion": "cf-us10", "clusterRegion": "us-east-1"}),
            Some(AWS),
        ),
        6 | 7 => (
            json!({"plan": "aws", "platformRegion": "cf-eu11", "clusterRegion": "eu-central-1"}),
            Some(AWS_EU),
        ),
        8..=10 => (
            json!({"plan": "azure", "platformRegion": "cf-us20", "clusterRegion": "eastus"}),
            Some(AZURE),
        ),
        11 | 12 => (
            json!({"plan": "gcp", "platformRegion": "cf-us30", "clusterRegion": "us-central1"}),
            Some(GCP),
        ),
        13 => (
            json!({"plan": "gcp", "platformRegion": "cf-sa30", "clusterRegion": "me-central2"}),
            Some(GCP_KSA),
        ),
        14 | 15 => (
            json!({"plan": "trial", "provider": "aws", "platformRegion": "cf-eu10"}),
            Some(TRIAL_AWS),
        ),
        16 => (
            json!({"plan": "trial", "provider": "azure", "platformRegion": "cf-eu20"}),
            Some(TRIAL_AZURE),
        ),
        17 => (
            json!({"plan": "sap-converged-cloud", "clusterRegion": "eu-de-1"}),
            Some(SCC_1),
        ),
        18 => (
            json!({"plan": "sap-converged-cloud", "clusterRegion": "eu-de-2"}),
            Some(SCC_2),
        ),
        _ if i.is_multiple_of(2) => (json!({"plan": "azure_lite"}), None),
        _ => (
            json!({"plan": "trial", "provider": "aws", "platformRegion": "cf-us10"}),
            Some(TRIAL_AWS),
        ),
    };
    let mut spec = spec;
    spec["globalAccount"] = json!(ga);
    spec["subaccount"] = json!(format!("sa-{i:05}"));
    spec["shootName"] = json!(shoot);
    let name = format!("c-{i:05}");
    ClaimPlan {
        // A share of the requests with a rule arrives as Kyma Runtimes through the webhook; the
        // claim the webhook creates is named after the Runtime.
        name: if pool.is_some() && chaos_sources::is_runtime(i) {
            chaos_sources::claim_name(&name)
        } else {
            name
        },
        tenant: ga,
        spec,
        pool,
    }
}

/// Claims per burst.
const BURST: usize = 6;

/// The tenant of the bursts: a single-account tenant with AWS claims of its own (so the bursts
/// need no binding more), other than the one that holds an internal binding.
fn burst_tenant(plans: &[ClaimPlan], tenants: usize, internal: &str) -> usize {
    (1..tenants)
        .find(|t| {
            !multi(*t)
                && tenant(*t) != internal
                && plans
                    .iter()
                    .any(|p| p.tenant == tenant(*t) && p.pool == Some(AWS))
        })
        .expect("a single-account tenant with AWS claims")
}

/// Burst `k`: BURST claims of one tenant in AWS, created at the same moment.
fn burst_plans(k: usize, t: usize) -> Vec<ClaimPlan> {
    (0..BURST)
        .map(|j| {
            let name = format!("burst-{k}-{j}");
            let spec = json!({"plan": "aws", "platformRegion": "cf-us10", "clusterRegion": "us-east-1",
                "globalAccount": tenant(t), "subaccount": format!("sa-{name}"), "shootName": name});
            ClaimPlan {
                name,
                tenant: tenant(t),
                spec,
                pool: Some(AWS),
            }
        })
        .collect()
}

struct BindingPlan {
    name: String,
    provider: &'static str,
    labels: BTreeMap<String, String>,
}

fn labels_of(pool: &Pool) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([("hyperscalerType".to_string(), pool.htype.to_string())]);
    if pool.eu {
        l.insert("euAccess".into(), "true".into());
    }
    if pool.shared {
        l.insert("shared".into(), "true".into());
    }
    l
}

fn slug(pool: &Pool) -> String {
    format!(
        "{}{}",
        pool.htype.replace('_', "-"),
        if pool.eu { "-eu" } else { "" }
    )
}

/// Everything the run creates besides claims, and what the checker must know about it.
struct Inventory {
    initial: Vec<BindingPlan>,
    /// Refills, in two waves.
    waves: [Vec<BindingPlan>; 2],
    /// Bindings the operator must never write (shared, internal, dirty, foreign tenants).
    untouchable: BTreeSet<String>,
    /// Pre-existing Shoots: (name, binding).
    shoots: Vec<(String, String)>,
    /// The tenant whose claims in `AWS` use an internal binding it already holds.
    internal_tenant: String,
    /// The multi-account tenant that already holds an AWS binding over the limit.
    over_tenant: String,
    needed: BTreeMap<Pool, usize>,
}

fn inventory(claims: &[ClaimPlan], tenants: usize, deletions: usize) -> Inventory {
    // Clusters per (pool, tenant).
    let mut per: BTreeMap<(Pool, usize), usize> = BTreeMap::new();
    for (i, c) in claims.iter().enumerate() {
        if let Some(p) = c.pool.as_ref().filter(|p| !p.shared) {
            *per.entry((p.clone(), i % tenants)).or_default() += 1;
        }
    }
    let internal_t = (0..tenants)
        .find(|t| !multi(*t) && per.contains_key(&(AWS, *t)))
        .expect("a single-account tenant with AWS claims");
    let over_t = 0; // multi by construction
    let mut needed: BTreeMap<Pool, usize> = BTreeMap::new();
    for ((pool, t), n) in &per {
        let need = if multi(*t) {
            n.div_ceil(limit_of(pool))
        } else if *pool == AWS && *t == internal_t {
            0
        } else {
            1
        };
        *needed.entry(pool.clone()).or_default() += need;
    }
    let mut initial = Vec::new();
    let (mut wave1, mut wave2) = (Vec::new(), Vec::new());
    let mut untouchable = BTreeSet::new();
    let add = |list: &mut Vec<BindingPlan>, name: String, pool: &Pool, extra: &[(&str, &str)]| {
        let mut labels = labels_of(pool);
        for (k, v) in extra {
            labels.insert(k.to_string(), v.to_string());
        }
        list.push(BindingPlan {
            name,
            provider: pool.provider,
            labels,
        });
    };
    for pool in DEDICATED {
        let need = needed.get(&pool).copied().unwrap_or(0);
        // A quarter at the start (the pool runs out early), most of the rest in wave one, the
        // rest plus slack (orphans of killed leaders, rounding) in wave two.
        let first = need / 4;
        let second = (need * 3 / 5).max(first) - first;
        // Released bindings go to the cleanup job: a tenant whose last claim in a pool was deleted
        // needs a new one for a later claim.
        let third = need - first - second + need / 5 + 3 + deletions;
        let mut n = 0;
        for (list, count) in [
            (&mut initial, first),
            (&mut wave1, second),
            (&mut wave2, third),
        ] {
            for _ in 0..count {
                add(list, format!("{}-{n:04}", slug(&pool)), &pool, &[]);
                n += 1;
            }
        }
    }
    // Never to be written: internal (free and owned), dirty, another tenant's, shared.
    type Special = (String, Pool, Vec<(&'static str, String)>);
    let specials: Vec<Special> = vec![
        (
            "aws-internal-free".into(),
            AWS,
            vec![("internal", "true".into())],
        ),
        (
            "aws-internal-owned".into(),
            AWS,
            vec![
                ("internal", "true".into()),
                ("tenantName", tenant(internal_t)),
            ],
        ),
        (
            "azure-dirty".into(),
            AZURE,
            vec![("dirty", "true".into()), ("tenantName", "ga-gone".into())],
        ),
        (
            "gcp-foreign".into(),
            GCP,
            vec![("tenantName", "ga-foreign".into())],
        ),
        ("trial-aws-1".into(), TRIAL_AWS, vec![]),
        ("trial-aws-2".into(), TRIAL_AWS, vec![]),
        ("trial-aws-3".into(), TRIAL_AWS, vec![]),
        (
            "trial-aws-internal".into(),
            TRIAL_AWS,
            vec![("internal", "true".into())],
        ),
        ("trial-azure-1".into(), TRIAL_AZURE, vec![]),
        ("trial-azure-2".into(), TRIAL_AZURE, vec![]),
        ("scc-eu-de-1-a".into(), SCC_1, vec![]),
        ("scc-eu-de-1-b".into(), SCC_1, vec![]),
        ("scc-eu-de-2-a".into(), SCC_2, vec![]),
    ];
    for (name, pool, extra) in &specials {
        let extra: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
        add(&mut initial, name.clone(), pool, &extra);
        untouchable.insert(name.clone());
    }
    // The over-limit binding is the multi tenant's own: the operator may not write it either
    // (it already carries the tenant), and no new cluster may land on it.
    add(
        &mut initial,
        "aws-over".into(),
        &AWS,
        &[("tenantName", tenant(over_t).as_str())],
    );
    untouchable.insert("aws-over".into());
    let shoots = (0..=LIMIT_AWS)
        .map(|k| (format!("pre-shoot-{k}"), "aws-over".to_string()))
        .collect();
    Inventory {
        initial,
        waves: [wave1, wave2],
        untouchable,
        shoots,
        internal_tenant: tenant(internal_t),
        over_tenant: tenant(over_t),
        needed,
    }
}

// ---------------------------------------------------------------------------------------------
// API helpers that ride out an apiserver restart.

/// The operator's cluster (HapConfig, claims, Lease) and the garden (bindings, their Secrets,
/// Shoots): one cluster, or two when the run has a separate garden.
#[derive(Clone)]
struct Clusters {
    ops: Client,
    garden: Client,
}

fn bindings_api(garden: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        garden.clone(),
        BINDINGS_NS,
        &garden::credentials_binding_resource(),
    )
}

/// Creates `obj`, retrying while the API server is away; AlreadyExists counts as done.
async fn create_retrying<K>(api: &Api<K>, obj: &K, what: &str)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let start = Instant::now();
    loop {
        match api.create(&PostParams::default(), obj).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(120),
                    "creating {what}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}

/// Lists, retrying while the API server is away.
async fn list_retrying<K>(api: &Api<K>) -> Vec<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
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

/// The Secret first: admission refuses a binding whose Secret does not exist.
async fn create_binding(garden: &Client, b: &BindingPlan) {
    let secret = serde_json::from_value(garden::secret_object(BINDINGS_NS, &b.name, b.provider))
        .expect("secret");
    create_retrying(
        &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(garden.clone(), BINDINGS_NS),
        &secret,
        &b.name,
    )
    .await;
    let obj: DynamicObject = serde_json::from_value(garden::binding_object(
        BINDINGS_NS,
        &b.name,
        b.provider,
        &b.labels,
    ))
    .expect("binding");
    create_retrying(&bindings_api(garden), &obj, &b.name).await;
}

async fn create_bindings(garden: &Client, list: &[BindingPlan]) {
    futures::stream::iter(list)
        .for_each_concurrent(8, |b| create_binding(garden, b))
        .await;
}

// ---------------------------------------------------------------------------------------------
// Replicas, the supervisor and the fault driver.

struct Replicas {
    hap: PathBuf,
    kubeconfig: PathBuf,
    /// Per slot, the operator's cluster's kubeconfig through that slot's hold proxy.
    kubeconfig_via: Vec<PathBuf>,
    /// The separate garden's kubeconfig, if the run has one.
    garden: Option<PathBuf>,
    /// Per slot, the garden's kubeconfig through that slot's hold proxy (separate garden only).
    garden_via: Vec<PathBuf>,
    logs: PathBuf,
    slots: Vec<OperatorProcess>,
    incarnations: usize,
    /// Exits the supervisor saw that the driver did not cause: (identity, status).
    exits: Vec<(String, String)>,
    kills: usize,
    /// The admission webhooks of the replica slots (webhook-created requests).
    webhooks: chaos_sources::Webhooks,
    source_grace: Duration,
}

impl Replicas {
    fn args(&self, slot: usize) -> Vec<String> {
        let mut args: Vec<String> = [
            "--config-name",
            CONFIG,
            "--claim-namespace",
            CLAIMS_NS,
            "--mark-ignored-configs=false",
            "--leader-elect=true",
            "--lease-name",
            LEASE,
            "--lease-namespace",
            CLAIMS_NS,
            "--lease-duration-seconds",
            "4",
            "--log-format",
            "text",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!("--source-grace={}s", self.source_grace.as_secs()));
        // No admission step follows the operator's webhook on the test API servers, and every
        // process shares one clock: the grace's floor (this plus 15 s) then stays at 20 s, the
        // grace the harness plans its waits with.
        args.push("--api-request-timeout=5s".into());
        if let Some(garden) = self.garden_via.get(slot).or(self.garden.as_ref()) {
            args.push(format!("--garden-kubeconfig={}", garden.display()));
        }
        args
    }

    fn spawn(&mut self, slot: char) -> OperatorProcess {
        self.incarnations += 1;
        let identity = format!("replica-{slot}-{}", self.incarnations);
        let log = self.logs.join(format!("replica-{slot}.log"));
        let index = usize::from(slot != 'a');
        let mut args = self.args(index);
        args.extend(self.webhooks.args(slot));
        let kubeconfig = self.kubeconfig_via.get(index).unwrap_or(&self.kubeconfig);
        OperatorProcess::spawn(&self.hap, kubeconfig, &identity, &args, &log)
    }

    fn slot_name(i: usize) -> char {
        (b'a' + i as u8) as char
    }

    /// Restarts every replica that exited by itself (e.g. it lost the lease while the API
    /// server was down and stopped, as it should).
    fn supervise(&mut self) {
        for i in 0..self.slots.len() {
            if let Some(status) = self.slots[i].exited() {
                let id = self.slots[i].identity.clone();
                self.exits.push((id, status.to_string()));
                let fresh = self.spawn(Self::slot_name(i));
                self.slots[i] = fresh;
            }
        }
    }

    /// SIGKILLs the replica with this identity and starts a fresh one in its place.
    fn kill(&mut self, identity: &str) -> bool {
        let Some(i) = self.slots.iter().position(|s| s.identity == identity) else {
            return false;
        };
        self.slots[i].kill();
        self.kills += 1;
        let fresh = self.spawn(Self::slot_name(i));
        self.slots[i] = fresh;
        true
    }

    /// SIGSTOPs the replica with this identity; it keeps its slot (and its lease, until that
    /// runs out).
    fn pause(&mut self, identity: &str) -> bool {
        self.slots
            .iter()
            .find(|s| s.identity == identity)
            .is_some_and(|s| s.signal("STOP"))
    }

    /// SIGTERM: a graceful stop; the supervisor starts a fresh replica once it has exited.
    fn terminate(&mut self, identity: &str) -> bool {
        self.slots
            .iter()
            .find(|s| s.identity == identity)
            .is_some_and(|s| s.signal("TERM"))
    }

    fn resume(&mut self, identity: &str) -> bool {
        self.slots
            .iter()
            .find(|s| s.identity == identity)
            .is_some_and(|s| s.signal("CONT"))
    }

    fn identities(&self) -> Vec<String> {
        self.slots.iter().map(|s| s.identity.clone()).collect()
    }
}

impl chaos_late::Hold for hold_proxy::HoldProxy {
    fn hold(&self) {
        hold_proxy::HoldProxy::hold(self);
    }
    fn release(&self) {
        hold_proxy::HoldProxy::release(self);
    }
    fn pending(&self) -> usize {
        hold_proxy::HoldProxy::pending(self)
    }
}

impl chaos_late::Fleet for Mutex<Replicas> {
    fn slot_of(&self, identity: &str) -> Option<usize> {
        self.lock()
            .unwrap()
            .identities()
            .iter()
            .position(|i| i == identity)
    }
    fn signal(&self, identity: &str, sig: &str) -> bool {
        let mut r = self.lock().unwrap();
        match sig {
            "STOP" => r.pause(identity),
            _ => r.resume(identity),
        }
    }
}

async fn lease_holder(client: &Client) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), CLAIMS_NS)
        .get(LEASE)
        .await
        .ok()?;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// Waits for a live replica to hold the lease, then SIGKILLs it.
async fn kill_leader(client: &Client, replicas: &Mutex<Replicas>) -> Option<String> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if let Some(holder) = lease_holder(client).await {
            let mut r = replicas.lock().unwrap();
            if r.identities().contains(&holder) && r.kill(&holder) {
                return Some(holder);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// SIGSTOPs the leader, waits until another replica holds the lease (it can only take it once
/// the lease ran out; at most 90 s), then SIGCONTs it. Returns its identity, how long it was
/// stopped, when it resumed, and whether another replica had taken the lease by then.
async fn pause_leader(
    client: &Client,
    replicas: &Mutex<Replicas>,
    paused_slot: &tokio::sync::watch::Sender<Option<char>>,
) -> Option<(String, Duration, jiff::Timestamp, bool)> {
    let start = Instant::now();
    let holder = loop {
        if start.elapsed() > Duration::from_secs(60) {
            return None;
        }
        if let Some(holder) = lease_holder(client).await {
            let mut r = replicas.lock().unwrap();
            if r.identities().contains(&holder) && r.pause(&holder) {
                let slot = r.identities().iter().position(|i| *i == holder);
                paused_slot.send_replace(slot.map(Replicas::slot_name));
                break holder;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let paused = Instant::now();
    let mut taken_over = false;
    while paused.elapsed() < Duration::from_secs(90) {
        if lease_holder(client).await.is_some_and(|h| h != holder) {
            taken_over = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let resumed = jiff::Timestamp::now();
    replicas.lock().unwrap().resume(&holder);
    paused_slot.send_replace(None);
    Some((holder, paused.elapsed(), resumed, taken_over))
}

/// One hold proxy per replica slot in front of the kube-apiserver `kubeconfig` names, and that
/// kubeconfig pointing at it (`tag` names the files).
async fn proxies(
    kubeconfig: &Path,
    dir: &Path,
    tag: &str,
) -> Vec<(hold_proxy::HoldProxy, PathBuf)> {
    let text = std::fs::read_to_string(kubeconfig).expect("garden kubeconfig");
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("a server in the garden kubeconfig")
        .trim_matches('"')
        .to_string();
    let target: std::net::SocketAddr = server
        .trim_start_matches("https://")
        .parse()
        .expect("the garden's server as 127.0.0.1:port");
    let mut out = Vec::new();
    for slot in ['a', 'b'] {
        let proxy = hold_proxy::HoldProxy::start(target).await;
        let path = dir.join(format!("{tag}-via-proxy-{slot}.kubeconfig"));
        let via = text.replace(&server, &format!("https://{}", proxy.addr));
        std::fs::write(&path, via).expect("proxied kubeconfig");
        out.push((proxy, path));
    }
    out
}

/// Issue 19, defect 4: the leader's garden requests are held in its proxy, a claim makes it
/// write a binding, and it gets SIGTERM while that write is held; the hold ends once another
/// replica took the lease and bound the claim (or after 15 s). The phase's checker then looks
/// for the damage (two tenants, a binding claimed for nobody and not reported).
async fn sigterm_with_held_write(
    client: &Client,
    replicas: &Mutex<Replicas>,
    proxies: &[(hold_proxy::HoldProxy, PathBuf)],
    phase: &chaos_recreate::Phase,
) -> String {
    let start = Instant::now();
    let (holder, slot) = loop {
        if let Some(h) = lease_holder(client).await {
            let slot = replicas
                .lock()
                .unwrap()
                .identities()
                .iter()
                .position(|i| *i == h);
            if let Some(slot) = slot {
                break (h, slot);
            }
        }
        if start.elapsed() > Duration::from_secs(60) {
            return "SIGTERM with a held write: no leader".into();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let proxy = &proxies[slot].0;
    proxy.hold();
    phase.held_claim().await;
    let held = Instant::now();
    while proxy.pending() == 0 && held.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pending = proxy.pending();
    replicas.lock().unwrap().terminate(&holder);
    let mut moved = false;
    while held.elapsed() < Duration::from_secs(15) {
        moved = moved || lease_holder(client).await.is_some_and(|h| h != holder);
        if moved && phase.held_claim_bound().await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.release();
    // The claim settles only now when the lease stayed: the old leader's write is answered, it
    // drains and hands over, and the next leader decides the claim. The phase's check ("every
    // claimed binding serves a live object, is released, or is reported") is about the settled
    // state, so wait for it, bounded.
    let released = Instant::now();
    let mut bound = phase.held_claim_bound().await;
    while !bound && released.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        bound = phase.held_claim_bound().await;
    }
    format!(
        "SIGTERM leader {holder} with {pending} bytes of its garden requests held; the lease {} while they were held; the claim {} {:.1?} after the release",
        if moved {
            "moved to another replica"
        } else {
            "stayed"
        },
        if bound { "was bound" } else { "was NOT bound" },
        released.elapsed()
    )
}

/// Deletes `n` Bound claims not deleted before, riding out restarts: the last users of their
/// bindings first (their bindings get released), then others, lowest names first.
async fn delete_bound(api: &Api<AccountClaim>, n: usize, deleted: &mut BTreeSet<String>) {
    let claims = list_retrying(api).await;
    let bound: Vec<(String, String)> = claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        // A Runtime's claim belongs to its request source, which would create it again.
        .filter(|c| !c.name_any().starts_with("runtime."))
        .filter(|c| !chaos_recreate::is_phase_claim(&c.name_any()))
        .filter_map(|c| {
            let s = c.status.as_ref()?;
            (s.phase == Some(ClaimPhase::Bound)).then_some(())?;
            Some((c.name_any(), s.credentials_binding_name.clone()?))
        })
        .filter(|(n, _)| !deleted.contains(n))
        .collect();
    let mut users: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, b) in &bound {
        *users.entry(b.as_str()).or_default() += 1;
    }
    let mut names: Vec<(bool, String)> = bound
        .iter()
        .map(|(n, b)| (users[b.as_str()] > 1, n.clone()))
        .collect();
    names.sort();
    let names = names.into_iter().map(|(_, n)| n);
    for name in names.into_iter().take(n) {
        let start = Instant::now();
        while api.delete(&name, &Default::default()).await.is_err()
            && start.elapsed() < Duration::from_secs(60)
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        deleted.insert(name);
    }
}

/// Events the replica `identity` wrote (or repeated) after `since`.
async fn events_of(client: &Client, identity: &str, since: jiff::Timestamp) -> Vec<String> {
    let api = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), CLAIMS_NS);
    let events = list_retrying(&api).await;
    events
        .iter()
        .filter(|e| e.reporting_instance.as_deref() == Some(identity))
        .filter(|e| {
            let last = e
                .series
                .as_ref()
                .map(|s| s.last_observed_time.0)
                .or(e.event_time.as_ref().map(|t| t.0));
            last.is_some_and(|t| t > since)
        })
        .map(|e| format!("{:?} {:?}", e.reason, e.note))
        .collect()
}

#[derive(Clone, Debug)]
enum Fault {
    KillLeader,
    /// SIGSTOP the leader until another replica holds the lease, then SIGCONT it.
    PauseLeader,
    /// Delete this many Bound claims (their bindings are released).
    Delete(usize),
    /// Create burst `.0`: BURST claims of one tenant at once.
    Burst(usize),
    /// kube-apiserver of the operator's cluster (`false`) or of the separate garden (`true`).
    RestartApiserver {
        garden: bool,
    },
    /// gardener-apiserver alone (the bindings' and Shoots' API), once per run.
    RestartGardenerApiserver,
    Refill(usize),
}

/// With a separate garden, restarts alternate between the garden's and the operator's
/// kube-apiserver, the garden's first.
fn schedule(p: &Params, two_clusters: bool) -> Vec<(Duration, Fault)> {
    let w = p.window.as_secs_f64();
    let mut out = Vec::new();
    for k in 0..p.kills {
        out.push((
            w * (k as f64 + 0.6) / (p.kills as f64 + 0.5),
            Fault::KillLeader,
        ));
    }
    for r in 0..p.apiserver_restarts {
        out.push((
            w * (r as f64 + 0.75) / (p.apiserver_restarts as f64 + 0.5),
            Fault::RestartApiserver {
                garden: two_clusters && r % 2 == 0,
            },
        ));
    }
    out.push((w * 0.5, Fault::RestartGardenerApiserver));
    for k in 0..p.pauses {
        out.push((w * (k as f64 + 0.45) / p.pauses as f64, Fault::PauseLeader));
    }
    // Deletions in three rounds, among the faults.
    let rounds = [
        (0.3, p.deletions / 3),
        (0.55, p.deletions / 3),
        (0.8, p.deletions - 2 * (p.deletions / 3)),
    ];
    for (at, n) in rounds {
        if n > 0 {
            out.push((w * at, Fault::Delete(n)));
        }
    }
    for k in 0..p.bursts {
        out.push((w * (k as f64 + 0.25) / p.bursts as f64, Fault::Burst(k)));
    }
    out.push((w * 0.35, Fault::Refill(0)));
    out.push((w * 0.70, Fault::Refill(1)));
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out.into_iter()
        .map(|(t, f)| (Duration::from_secs_f64(t), f))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// What a watch saw during the run.

#[derive(Clone, Default)]
struct Observed {
    /// Claim → every binding it was seen Bound to, in order of first sight.
    bound_to: BTreeMap<String, Vec<String>>,
    /// Claims seen leaving Bound.
    left_bound: BTreeSet<String>,
    /// Claims seen waiting with reason PoolExhausted (proof that the pools ran out).
    exhausted: BTreeSet<String>,
    /// Binding → tenantName values in order (consecutive duplicates folded).
    tenant_history: BTreeMap<String, Vec<Option<String>>>,
    /// Binding → resourceVersions seen.
    versions: BTreeMap<String, BTreeSet<String>>,
    /// Binding → its labels when first seen (as created: admission adds a provider label).
    first_labels: BTreeMap<String, BTreeMap<String, String>>,
}

fn spawn_watches(
    clusters: &Clusters,
    seen: Arc<Mutex<Observed>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let claims = Api::<AccountClaim>::namespaced(clusters.ops.clone(), CLAIMS_NS);
    let s = seen.clone();
    let claim_task = tokio::spawn(async move {
        let stream = watcher(claims, watcher::Config::default())
            .default_backoff()
            .applied_objects();
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            let Ok(c) = ev else { continue };
            let name = c.name_any();
            // A re-created request's new claim has the old name and may get another binding.
            if chaos_recreate::is_phase_claim(&name) {
                continue;
            }
            let st = c.status.as_ref();
            let mut seen = s.lock().unwrap();
            if st.and_then(|s| s.phase) == Some(ClaimPhase::Bound) {
                if let Some(b) = st.and_then(|s| s.credentials_binding_name.clone()) {
                    let list = seen.bound_to.entry(name).or_default();
                    if !list.contains(&b) {
                        list.push(b);
                    }
                }
            } else if seen.bound_to.contains_key(&name) {
                seen.left_bound.insert(name);
            } else if st.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|r| r.type_ == "Ready" && r.reason == "PoolExhausted")
            }) {
                seen.exhausted.insert(name);
            }
        }
    });
    let bindings = bindings_api(&clusters.garden);
    let binding_task = tokio::spawn(async move {
        let stream = watcher(bindings, watcher::Config::default())
            .default_backoff()
            .applied_objects();
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            let Ok(b) = ev else { continue };
            let name = b.name_any();
            let tenant = b.labels().get("tenantName").cloned();
            let mut seen = seen.lock().unwrap();
            seen.first_labels
                .entry(name.clone())
                .or_insert_with(|| b.labels().clone());
            let h = seen.tenant_history.entry(name.clone()).or_default();
            if h.last() != Some(&tenant) {
                h.push(tenant);
            }
            if let Some(rv) = b.resource_version() {
                seen.versions.entry(name).or_default().insert(rv);
            }
        }
    });
    vec![claim_task, binding_task]
}

// ---------------------------------------------------------------------------------------------
// The invariant checker.

#[derive(Debug, Default)]
struct Counts {
    claims: usize,
    expected_bound: usize,
    bound: usize,
    no_matching_rule: usize,
    /// Neither Bound nor carrying a Ready reason (invariant 7).
    lost: usize,
    /// Not Bound although they have a rule and the pools were refilled with slack.
    stuck: usize,
    /// Extra bindings per (tenant, pool) of non-allowlisted tenants (invariant 2).
    duplicate_bindings: usize,
    /// Clusters placed on a binding at or over its limit (invariant 3).
    limit_violations: usize,
    /// Shared, internal, dirty or foreign bindings the operator wrote (invariant 4).
    untouchable_written: usize,
    /// Bound claims seen on a second binding, or leaving Bound (invariant 5).
    bound_changed: usize,
    bound_left: usize,
    /// tenantName set more than once on a binding, or on one that had it (invariant 1).
    tenant_written_twice: usize,
    /// tenantName values the operator wrote for a tenant with no claim in that pool (invariant 1).
    tenant_without_claim: usize,
    /// managedFields of the operator outside labels, finalizers and /status (invariant 6).
    foreign_writes: usize,
    /// Deleted claims still there (their finalizer kept): a release that never happened.
    deleted_left: usize,
    /// Bound claims whose binding is dirty (released while in use).
    bound_to_released: usize,
    /// Bindings claimed in the run that nobody uses and nobody released (leaked).
    orphaned: usize,
    /// Figures, not violations.
    claimed_in_run: usize,
    /// Bindings released clean (tenantName removed) and claimed again.
    reclaimed_after_clean_release: usize,
    released_in_run: usize,
    clusters_on_aws_over: usize,
}

fn pool_of_labels(l: &BTreeMap<String, String>) -> Option<PoolLabels> {
    Some((
        l.get("hyperscalerType")?.clone(),
        l.get("euAccess").map(String::as_str) == Some("true"),
        l.get("shared").map(String::as_str) == Some("true"),
    ))
}

/// (hyperscalerType, euAccess, shared): a pool as the labels name it.
type PoolLabels = (String, bool, bool);

fn key_of(p: &Pool) -> PoolLabels {
    (p.htype.to_string(), p.eu, p.shared)
}

/// Field paths (`f:...` keys) at the top of a managedFields entry.
fn top_fields(
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry,
) -> Vec<String> {
    m.fields_v1
        .as_ref()
        .and_then(|f| f.0.as_object().map(|o| o.keys().cloned().collect()))
        .unwrap_or_default()
}

fn metadata_fields(
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry,
) -> Vec<String> {
    m.fields_v1
        .as_ref()
        .and_then(|f| f.0.get("f:metadata"))
        .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
        .unwrap_or_default()
}

/// The annotation keys an entry of managedFields owns (`f:<key>`, and `.` for the map itself).
fn annotation_fields(
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry,
) -> Vec<String> {
    m.fields_v1
        .as_ref()
        .and_then(|f| f.0.get("f:metadata"))
        .and_then(|v| v.get("f:annotations"))
        .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
        .unwrap_or_default()
}

async fn check(
    at: &Clusters,
    plans: &[ClaimPlan],
    inv: &Inventory,
    initial_labels: &BTreeMap<String, BTreeMap<String, String>>,
    seen: &Observed,
    deleted: &BTreeSet<String>,
) -> Counts {
    let kept = |p: &&ClaimPlan| !deleted.contains(&p.name);
    let mut c = Counts {
        claims: plans.iter().filter(kept).count(),
        expected_bound: plans
            .iter()
            .filter(kept)
            .filter(|p| p.pool.is_some())
            .count(),
        ..Default::default()
    };
    let claims = list_retrying(&Api::<AccountClaim>::namespaced(at.ops.clone(), CLAIMS_NS)).await;
    let bindings = list_retrying(&bindings_api(&at.garden)).await;
    let by_name: BTreeMap<&str, &ClaimPlan> = plans.iter().map(|p| (p.name.as_str(), p)).collect();
    let multi_tenants: BTreeSet<String> = plans
        .iter()
        .map(|p| p.tenant.clone())
        .filter(|t| t[3..].parse::<usize>().is_ok_and(multi))
        .collect();

    // Claims: outcome, and clusters per binding.
    let mut clusters: BTreeMap<String, usize> = BTreeMap::new();
    let mut tenant_pool_bindings: BTreeMap<(String, PoolLabels), BTreeSet<String>> =
        BTreeMap::new();
    for claim in &claims {
        let name = claim.name_any();
        // The source-path phase checks its own.
        if chaos_recreate::is_phase_claim(&name) {
            continue;
        }
        let plan = by_name.get(name.as_str()).expect("a claim of the run");
        if deleted.contains(&name) {
            c.deleted_left += 1;
            eprintln!("deleted claim {name} is still there: {:?}", claim.status);
            continue;
        }
        let st = claim.status.clone().unwrap_or_default();
        let ready = st.conditions.iter().find(|c| c.type_ == "Ready");
        if st.phase == Some(ClaimPhase::Bound) {
            c.bound += 1;
            let b = st.credentials_binding_name.clone().unwrap_or_default();
            *clusters.entry(b.clone()).or_default() += 1;
            if let Some(pool) = plan.pool.as_ref().filter(|p| !p.shared) {
                tenant_pool_bindings
                    .entry((plan.tenant.clone(), key_of(pool)))
                    .or_default()
                    .insert(b);
            }
        } else if ready.is_none_or(|r| r.reason.is_empty()) {
            c.lost += 1;
        } else if ready.is_some_and(|r| r.reason == "NoMatchingRule") && plan.pool.is_none() {
            c.no_matching_rule += 1;
        } else {
            c.stuck += 1;
            eprintln!(
                "stuck: {name} ({:?}) reason {:?}: {:?}",
                plan.pool,
                ready.map(|r| &r.reason),
                ready.map(|r| &r.message)
            );
        }
        // Invariant 6 on claims: the operator's own entries are /status or finalizers only.
        for m in claim.managed_fields() {
            if m.manager.as_deref() != Some(MANAGER) || m.subresource.as_deref() == Some("status") {
                continue;
            }
            if top_fields(m).iter().any(|f| f != "f:metadata")
                || metadata_fields(m).iter().any(|f| f != "f:finalizers")
            {
                c.foreign_writes += 1;
                eprintln!("foreign write on claim {name}: {:?}", m.fields_v1);
            }
        }
    }
    let live: BTreeSet<String> = claims.iter().map(|c| c.name_any()).collect();
    for p in plans.iter().filter(kept) {
        if !live.contains(&p.name) {
            c.lost += 1;
            eprintln!("claim {} is gone though nobody deleted it", p.name);
        }
    }

    // Invariant 2, from the claims: one binding per (tenant, pool) without the allowlist.
    for ((t, pool), set) in &tenant_pool_bindings {
        if !multi_tenants.contains(t) && set.len() > 1 {
            c.duplicate_bindings += set.len() - 1;
            eprintln!("duplicate: {t} in {pool:?} on {set:?}");
        }
    }
    // ... and from the labels.
    let mut labelled: BTreeMap<(String, PoolLabels), usize> = BTreeMap::new();
    let claim_pools: BTreeSet<(String, PoolLabels)> = plans
        .iter()
        .filter_map(|p| p.pool.as_ref().map(|pool| (p.tenant.clone(), key_of(pool))))
        .collect();
    for b in bindings
        .iter()
        .filter(|b| !chaos_recreate::is_phase_binding(b.labels()))
    {
        let name = b.name_any();
        let labels = b.labels().clone();
        let initial = initial_labels.get(&name);
        let tenant = labels.get("tenantName").cloned();
        let dirty = labels.contains_key("dirty");
        if dirty && initial.is_none_or(|l| !l.contains_key("dirty")) {
            c.released_in_run += 1;
            if clusters.contains_key(&name) {
                c.bound_to_released += 1;
                eprintln!("binding {name} was released while claims are bound to it");
            }
        }
        if let (Some(t), Some(pool), false) = (&tenant, pool_of_labels(&labels), dirty) {
            if !pool.2 && !multi_tenants.contains(t) {
                *labelled.entry((t.clone(), pool.clone())).or_default() += 1;
            }
            let written = initial.is_none_or(|l| l.get("tenantName") != Some(t));
            if written {
                c.claimed_in_run += 1;
                if !claim_pools.contains(&(t.clone(), pool)) {
                    c.tenant_without_claim += 1;
                    eprintln!(
                        "binding {name} got tenantName={t} without a claim of {t} in its pool"
                    );
                }
                if !clusters.contains_key(&name) {
                    c.orphaned += 1;
                    eprintln!(
                        "binding {name} claimed for {t} in the run is used by no claim (leaked)"
                    );
                }
            }
        }
        // Invariant 4: untouchable bindings keep their labels and never change.
        if inv.untouchable.contains(&name) {
            let versions = seen.versions.get(&name).map_or(0, BTreeSet::len);
            let ours = b
                .managed_fields()
                .iter()
                .any(|m| m.manager.as_deref() == Some(MANAGER));
            if Some(&labels) != seen.first_labels.get(&name) || versions > 1 || ours {
                c.untouchable_written += 1;
                eprintln!(
                    "untouchable {name} written: labels {labels:?}, {versions} versions, operator in managedFields: {ours}"
                );
            }
        }
        // Invariant 6 on bindings: the operator writes metadata only — labels, and annotations
        // of its own `accountpool.io/` prefix (the release record the cooldown reads) — never
        // spec or anything else.
        for m in b.managed_fields() {
            if m.manager.as_deref() != Some(MANAGER) {
                continue;
            }
            if m.subresource.is_some()
                || top_fields(m).iter().any(|f| f != "f:metadata")
                || metadata_fields(m)
                    .iter()
                    .any(|f| f != "f:labels" && f != "f:annotations")
                || annotation_fields(m)
                    .iter()
                    .any(|f| f != "." && !f.starts_with("f:accountpool.io/"))
            {
                c.foreign_writes += 1;
                eprintln!("foreign write on binding {name}: {:?}", m.fields_v1);
            }
        }
        // Invariant 1: a tenant is never overwritten. A tenantName removed without `dirty` is a
        // clean release (issue 19: its claim never served an object); the binding may then be
        // claimed again.
        let history = seen.tenant_history.get(&name).cloned().unwrap_or_default();
        let sets = history.windows(2).filter(|w| w[1].is_some()).count();
        let overwrites = history
            .windows(2)
            .filter(|w| w[0].is_some() && w[1].is_some())
            .count();
        let had = initial.is_some_and(|l| l.contains_key("tenantName"));
        if overwrites > 0 || (had && sets > 0) {
            c.tenant_written_twice += 1;
            eprintln!("tenantName of {name} changed: {history:?}");
        } else if sets > 1 {
            c.reclaimed_after_clean_release += 1;
        }
    }
    for ((t, pool), n) in &labelled {
        if *n > 1 {
            c.duplicate_bindings += n - 1;
            eprintln!("{t} holds {n} bindings in {pool:?}");
        }
    }
    // Invariant 3: limits of allowlisted tenants. Pre-existing Shoots count; only new clusters
    // beyond max(limit, pre-existing) are violations.
    for b in bindings
        .iter()
        .filter(|b| !chaos_recreate::is_phase_binding(b.labels()))
    {
        let name = b.name_any();
        let Some(t) = b.labels().get("tenantName") else {
            continue;
        };
        if !multi_tenants.contains(t) {
            continue;
        }
        let pool = pool_of_labels(b.labels());
        let provider = if pool.as_ref().is_some_and(|p| p.0.starts_with("aws")) {
            "aws"
        } else {
            "other"
        };
        let limit = if provider == "aws" {
            LIMIT_AWS
        } else {
            LIMIT_DEFAULT
        };
        let pre = inv.shoots.iter().filter(|(_, sb)| *sb == name).count();
        let new = clusters.get(&name).copied().unwrap_or(0);
        if new > 0 && pre + new > limit.max(pre) {
            c.limit_violations += pre + new - limit.max(pre);
            eprintln!(
                "limit: {name} of {t} has {pre} existing + {new} new clusters, limit {limit}"
            );
        }
    }
    c.clusters_on_aws_over = clusters.get("aws-over").copied().unwrap_or(0);
    // Invariant 5, from the watch.
    for (name, list) in &seen.bound_to {
        if list.len() > 1 {
            c.bound_changed += 1;
            eprintln!("claim {name} bound to {list:?}");
        }
    }
    c.bound_left = seen.left_bound.len();
    // Invariant 6 on the HapConfig: the operator writes its status only.
    let cfg = Api::<HapConfig>::all(at.ops.clone())
        .get(CONFIG)
        .await
        .expect("HapConfig");
    for m in cfg.managed_fields() {
        if m.manager.as_deref() == Some(MANAGER) && m.subresource.as_deref() != Some("status") {
            c.foreign_writes += 1;
            eprintln!(
                "operator wrote HapConfig outside /status: {:?}",
                m.fields_v1
            );
        }
    }
    // Shoots are never written.
    let shoots = list_retrying(&Api::<hap_operator::api::Shoot>::namespaced(
        at.garden.clone(),
        BINDINGS_NS,
    ))
    .await;
    for s in &shoots {
        if s.managed_fields()
            .iter()
            .any(|m| m.manager.as_deref() == Some(MANAGER))
        {
            c.foreign_writes += 1;
        }
    }
    c
}

// ---------------------------------------------------------------------------------------------

fn work_dir(variant: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chaos-{variant}-{}", std::process::id()))
}

/// The two variants run one after the other: each brings control planes and two replicas of
/// its own, too much for two cores at once.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_kills_and_an_apiserver_restart_break_no_invariant() {
    let _serial = ONE_AT_A_TIME.lock().await;
    run(Params::from_env(), false).await;
}

/// The same with bindings and Shoots in a separate garden (the replicas get
/// `--garden-kubeconfig`); the apiserver restarts alternate between the garden's and the
/// operator's kube-apiserver. 120 claims by default (`HAP_CHAOS_GARDEN_CLAIMS`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_kills_and_restarts_break_no_invariant_with_a_separate_garden() {
    let _serial = ONE_AT_A_TIME.lock().await;
    run(Params::with_claims("HAP_CHAOS_GARDEN_CLAIMS", 120), true).await;
}

async fn run(p: Params, two_clusters: bool) {
    let dir = work_dir(if two_clusters { "garden" } else { "one" });
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("logs")).expect("work dir");
    eprintln!(
        "chaos: {} claims, {} tenants, {} leader kills, {} apiserver restarts over {:?}; state and logs in {}",
        p.claims,
        p.tenants,
        p.kills,
        p.apiserver_restarts,
        p.window,
        dir.display()
    );
    let env = if two_clusters {
        PrivateEnv::up_with_garden(&dir.join("testenv"))
    } else {
        PrivateEnv::up(&dir.join("testenv"))
    };
    let garden_env = if two_clusters {
        env.garden()
    } else {
        env.handle()
    };
    let clusters = Clusters {
        ops: env.client().await,
        garden: garden_env.client().await,
    };
    let client = clusters.ops.clone();
    let started = Instant::now();

    let claims_ns = serde_json::from_value(json!({"metadata": {"name": CLAIMS_NS}})).expect("ns");
    create_retrying(
        &Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone()),
        &claims_ns,
        CLAIMS_NS,
    )
    .await;
    let project_ns =
        serde_json::from_value(garden::project_namespace_object(PROJECT)).expect("namespace");
    create_retrying(
        &Api::<k8s_openapi::api::core::v1::Namespace>::all(clusters.garden.clone()),
        &project_ns,
        BINDINGS_NS,
    )
    .await;
    let project: DynamicObject =
        serde_json::from_value(garden::project_object(PROJECT)).expect("project");
    create_retrying(
        &Api::all_with(clusters.garden.clone(), &garden::project_resource()),
        &project,
        PROJECT,
    )
    .await;
    let mut plans: Vec<ClaimPlan> = (0..p.claims).map(|i| claim_plan(i, p.tenants)).collect();
    let inv = inventory(&plans, p.tenants, p.deletions);
    let burster = burst_tenant(&plans, p.tenants, &inv.internal_tenant);
    let bursts: Vec<Vec<ClaimPlan>> = (0..p.bursts).map(|k| burst_plans(k, burster)).collect();
    let allowlisted: Vec<String> = (0..p.tenants).filter(|t| multi(*t)).map(tenant).collect();
    let allowed: Vec<String> = allowlisted
        .iter()
        .cloned()
        .chain(chaos_late::multi_tenants(p.late_rounds))
        .collect();
    // The source-path phase's pools, Runtimes' namespace and squatter first: its rules name them.
    let phase = Arc::new(
        chaos_recreate::Phase::prepare(
            chaos_recreate::Setup {
                ops: client.clone(),
                garden: clusters.garden.clone(),
                bindings_ns: BINDINGS_NS.into(),
                claims_ns: CLAIMS_NS.into(),
                config: CONFIG.into(),
                one_cluster: !two_clusters,
            },
            chaos_recreate::Plan {
                names: p.source_names,
                refusals: p.source_refusals,
                run_for: p.window,
                grace: p.source_grace,
            },
            p.pauses,
        )
        .await,
    );
    // The late-write phase's rule first: its claims would match the run's `aws` rule too.
    let rules: Vec<&str> = chaos_late::rules()
        .into_iter()
        .chain(RULES.iter().copied())
        .chain(chaos_recreate::rules())
        .collect();
    let mut sources = chaos_recreate::sources();
    sources.push(chaos_sources::source());
    let cfg: HapConfig = serde_json::from_value(json!({
        "apiVersion": "accountpool.io/v1alpha1",
        "kind": "HapConfig",
        "metadata": {"name": CONFIG},
        "spec": {
            "bindingNamespace": BINDINGS_NS,
            "rules": rules,
            "multiHyperscalerAccount": {
                "allowedGlobalAccounts": allowed,
                "limits": {"default": LIMIT_DEFAULT, "aws": LIMIT_AWS},
            },
            "requestSources": sources,
            // The refresh cycle runs all along: bindings and Shoots listed again every 5 s.
            "internalStateRefreshCycleDuration": "5s",
        },
    }))
    .expect("HapConfig");
    create_retrying(&Api::<HapConfig>::all(client.clone()), &cfg, CONFIG).await;
    // Another team's config, not in force, with a limit beyond i32 (the API server stores it):
    // it once stopped the HapConfig watch of every replica.
    let other: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "accountpool.io/v1alpha1",
        "kind": "HapConfig",
        "metadata": {"name": "other-team"},
        "spec": {"bindingNamespace": "garden-other", "rules": ["aws"],
                 "multiHyperscalerAccount": {"allowedGlobalAccounts": ["*"], "limits": {"aws": 99_999_999_999_i64}}},
    }))
    .expect("HapConfig");
    let raw_configs: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<HapConfig>(&()));
    create_retrying(&raw_configs, &other, "other-team").await;
    create_bindings(&clusters.garden, &inv.initial).await;
    let aws = garden::profile(&clusters.garden, "aws").await;
    for (shoot, binding) in &inv.shoots {
        let obj: DynamicObject = serde_json::from_value(garden::shoot_object(
            BINDINGS_NS,
            shoot,
            binding,
            garden::BindingRef::CredentialsBinding,
            &aws,
        ))
        .expect("Shoot");
        let shoots = Api::namespaced_with(
            clusters.garden.clone(),
            BINDINGS_NS,
            &garden::shoot_resource(),
        );
        create_retrying(&shoots, &obj, shoot).await;
    }
    let mut initial_labels: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for b in inv.initial.iter().chain(inv.waves.iter().flatten()) {
        initial_labels.insert(b.name.clone(), b.labels.clone());
    }
    eprintln!(
        "chaos: dedicated bindings needed per pool {:?}; {} at start, {} + {} in two refills; {} holds aws-internal-owned, {} holds aws-over (over the limit)",
        inv.needed
            .iter()
            .map(|(p, n)| (slug(p), *n))
            .collect::<Vec<_>>(),
        inv.initial.len(),
        inv.waves[0].len(),
        inv.waves[1].len(),
        inv.internal_tenant,
        inv.over_tenant
    );

    let seen = Arc::new(Mutex::new(Observed::default()));
    let mut watches = spawn_watches(&clusters, seen.clone());
    watches.extend(phase.spawn_watches());
    let webhooks = chaos_sources::Webhooks::new(&dir.join("webhook"));
    {
        let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/platform-crds");
        let (ok, _, err) =
            env.kubectl(&["apply", "--server-side", "-f", crds.to_str().expect("path")]);
        assert!(ok, "platform CRDs: {err}");
        private_env::crd_wait::wait_established(
            |args| env.kubectl(args),
            &["runtimes.infrastructuremanager.kyma-project.io"],
            Duration::from_secs(60),
        );
        let file = dir.join("webhook/registrations.json");
        let mut items = webhooks.registrations();
        items.extend(webhooks.timeout_registrations());
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        std::fs::write(&file, list.to_string()).expect("write registrations");
        let (ok, _, err) = env.kubectl(&["apply", "-f", file.to_str().expect("path")]);
        assert!(ok, "webhook registrations: {err}");
        // gardener-apiserver asks the garden's kube-apiserver for the Shoot webhooks.
        let file = dir.join("webhook/shoot-registrations.json");
        let list =
            json!({"apiVersion": "v1", "kind": "List", "items": webhooks.shoot_registrations()});
        std::fs::write(&file, list.to_string()).expect("write registrations");
        let (ok, _, err) = garden_env.kubectl(&["apply", "-f", file.to_str().expect("path")]);
        assert!(ok, "Shoot webhook registrations: {err}");
    }

    // Each slot reaches its clusters through proxies that can hold its requests: the
    // operator's cluster (the late-write phase) and, with a separate garden, the garden (that
    // phase and the SIGTERM scenario at the end).
    let ops_proxies = proxies(&env.kubeconfig, &dir, "ops").await;
    let proxies = if two_clusters {
        proxies(&garden_env.kubeconfig, &dir, "garden").await
    } else {
        Vec::new()
    };
    let replicas = Arc::new(Mutex::new(Replicas {
        // HAP_CHAOS_HAP: a copy of the operator binary, safe from other builds that share the
        // target directory while the run restarts replicas.
        hap: std::env::var_os("HAP_CHAOS_HAP")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_hap"))),
        kubeconfig: env.kubeconfig.clone(),
        kubeconfig_via: ops_proxies.iter().map(|(_, k)| k.clone()).collect(),
        garden: two_clusters.then(|| garden_env.kubeconfig.clone()),
        garden_via: proxies.iter().map(|(_, k)| k.clone()).collect(),
        logs: dir.join("logs"),
        slots: Vec::new(),
        incarnations: 0,
        exits: Vec::new(),
        kills: 0,
        webhooks,
        source_grace: p.source_grace,
    }));
    {
        let mut r = replicas.lock().unwrap();
        let a = r.spawn('a');
        let b = r.spawn('b');
        r.slots = vec![a, b];
    }
    // Supervisor: restart any replica that died on its own.
    let stop = tokio_util::sync::CancellationToken::new();
    let supervisor = {
        let (r, stop) = (replicas.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                r.lock().unwrap().supervise();
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    // Wait for a leader before the clock starts.
    let t0 = Instant::now();
    while lease_holder(&client).await.is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no replica took the lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Claims, created evenly over the window.
    let window_start = Instant::now();
    let (paused_slot, paused_rx) = tokio::sync::watch::channel(None);
    let phase_task = {
        let phase = phase.clone();
        tokio::spawn(async move { phase.drive(paused_rx).await })
    };
    let creator = {
        let client = client.clone();
        let specs: Vec<(String, serde_json::Value)> = plans
            .iter()
            .map(|c| (c.name.clone(), c.spec.clone()))
            .collect();
        let window = p.window;
        let settle = p.settle;
        tokio::spawn(async move {
            let api = Api::<AccountClaim>::namespaced(client.clone(), CLAIMS_NS);
            let n = specs.len();
            futures::stream::iter(specs.into_iter().enumerate())
                .for_each_concurrent(16, |(i, (name, spec))| {
                    let (api, client) = (api.clone(), client.clone());
                    async move {
                        let at = window_start + window.mul_f64(i as f64 / n as f64);
                        tokio::time::sleep_until(at.into()).await;
                        if let Some(runtime) =
                            name.strip_prefix(&format!("runtime.{}.", chaos_sources::RUNTIMES_NS))
                        {
                            chaos_sources::create_until_admitted(
                                &client,
                                runtime,
                                &spec,
                                window + settle,
                            )
                            .await;
                            return;
                        }
                        let obj: AccountClaim = serde_json::from_value(json!({
                            "apiVersion": "accountpool.io/v1alpha1",
                            "kind": "AccountClaim",
                            "metadata": {"name": name},
                            "spec": spec,
                        }))
                        .expect("claim");
                        create_retrying(&api, &obj, &name).await;
                    }
                })
                .await;
        })
    };

    // Faults.
    let mut fault_log = Vec::new();
    let mut apiserver_down = Vec::new();
    let mut deleted = BTreeSet::new();
    let mut paused = Vec::new();
    let claims_api = Api::<AccountClaim>::namespaced(client.clone(), CLAIMS_NS);
    for (at, fault) in schedule(&p, two_clusters) {
        tokio::time::sleep_until((window_start + at).into()).await;
        let t = window_start.elapsed();
        match fault {
            Fault::KillLeader => {
                let who = kill_leader(&client, &replicas).await;
                fault_log.push(format!("{t:>6.1?} SIGKILL leader {who:?}"));
            }
            Fault::PauseLeader => {
                let who = pause_leader(&client, &replicas, &paused_slot).await;
                let text = match &who {
                    Some((id, stopped, _, true)) => {
                        format!(
                            "SIGSTOP leader {id}, SIGCONT after {stopped:.1?} (another replica held the lease)"
                        )
                    }
                    Some((id, stopped, _, false)) => {
                        format!(
                            "SIGSTOP leader {id}, SIGCONT after {stopped:.1?}: NO other replica took the lease"
                        )
                    }
                    None => "SIGSTOP: no leader to pause".into(),
                };
                fault_log.push(format!("{t:>6.1?} {text}"));
                paused.extend(who);
            }
            Fault::Delete(n) => {
                let before = deleted.len();
                delete_bound(&claims_api, n, &mut deleted).await;
                fault_log.push(format!(
                    "{t:>6.1?} deleted {} Bound claims",
                    deleted.len() - before
                ));
            }
            Fault::Burst(k) => {
                let api = claims_api.clone();
                let batch = &bursts[k];
                futures::future::join_all(batch.iter().map(|c| {
                    let api = api.clone();
                    async move {
                        let obj: AccountClaim = serde_json::from_value(json!({
                            "apiVersion": "accountpool.io/v1alpha1",
                            "kind": "AccountClaim",
                            "metadata": {"name": c.name},
                            "spec": c.spec,
                        }))
                        .expect("claim");
                        create_retrying(&api, &obj, &c.name).await;
                    }
                }))
                .await;
                fault_log.push(format!(
                    "{t:>6.1?} burst {k}: {} claims of {} at once",
                    batch.len(),
                    tenant(burster)
                ));
            }
            Fault::RestartApiserver { garden } => {
                let which = if garden { &garden_env } else { &env };
                let took = which.restart_apiserver_async(Duration::from_secs(1)).await;
                apiserver_down.push(took);
                let whose = if garden {
                    "the garden's"
                } else {
                    "the operator's"
                };
                fault_log.push(format!(
                    "{t:>6.1?} {whose} kube-apiserver restarted, unavailable {took:.1?}"
                ));
            }
            Fault::RestartGardenerApiserver => {
                let took = garden_env
                    .restart_gardener_apiserver_async(Duration::from_secs(1))
                    .await;
                fault_log.push(format!(
                    "{t:>6.1?} gardener-apiserver restarted, its APIServices Available after {took:.1?}"
                ));
            }
            Fault::Refill(w) => {
                create_bindings(&clusters.garden, &inv.waves[w]).await;
                fault_log.push(format!(
                    "{t:>6.1?} refill {w}: {} bindings",
                    inv.waves[w].len()
                ));
            }
        }
    }
    creator.await.expect("claim creator");
    let created_in = window_start.elapsed();

    plans.extend(bursts.into_iter().flatten());
    // Convergence: every claim with a rule Bound, every other one with its reason, every deleted
    // one gone.
    let settle_start = Instant::now();
    let kept: Vec<&ClaimPlan> = plans
        .iter()
        .filter(|c| !deleted.contains(&c.name))
        .collect();
    let expected_bound = kept.iter().filter(|c| c.pool.is_some()).count();
    let mut last = (0, 0);
    while settle_start.elapsed() < p.settle {
        let mut claims = list_retrying(&claims_api).await;
        claims.retain(|c| !chaos_recreate::is_phase_claim(&c.name_any()));
        let gone = deleted
            .iter()
            .all(|d| !claims.iter().any(|c| c.name_any() == *d));
        let claims: Vec<&AccountClaim> = claims
            .iter()
            .filter(|c| !deleted.contains(&c.name_any()))
            .collect();
        let bound = claims
            .iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase) == Some(ClaimPhase::Bound))
            .count();
        let reasoned = claims
            .iter()
            .filter(|c| {
                c.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|r| r.type_ == "Ready" && r.reason == "NoMatchingRule")
                })
            })
            .count();
        last = (bound, reasoned);
        if gone && bound == expected_bound && reasoned == kept.len() - expected_bound {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let converged_in = settle_start.elapsed();
    // Let in-flight writes land before reading the final state.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let observed = seen.lock().unwrap().clone();
    let counts = check(
        &clusters,
        &plans,
        &inv,
        &initial_labels,
        &observed,
        &deleted,
    )
    .await;
    let runtime_counts = chaos_sources::check(
        &client,
        &list_retrying(&Api::<AccountClaim>::namespaced(client.clone(), CLAIMS_NS)).await,
    )
    .await;
    phase_task.await.expect("source-path phase");
    if !proxies.is_empty() {
        let line = sigterm_with_held_write(&client, &replicas, &proxies, &phase).await;
        fault_log.push(format!("{:>6.1?} {line}", window_start.elapsed()));
    }
    let phase_counts = phase.check().await;
    // The fence: a leader paused past its lease writes nothing once it resumes (its events name
    // it; every other write is covered by the invariants above).
    // A pause that no standby ended is a failure of its own (the lease was never taken, so the
    // resumed leader's writes are its own to make).
    let mut paused_writes = Vec::new();
    let mut untaken_pauses = 0;
    for (id, _, resumed, taken_over) in &paused {
        if !taken_over {
            untaken_pauses += 1;
            continue;
        }
        for e in events_of(&client, id, *resumed).await {
            paused_writes.push(format!("{id}: {e}"));
        }
    }

    // The late-write phase, once the rest is checked: it needs the lease to itself.
    let late_started = Instant::now();
    let late = chaos_late::Phase::prepare(
        chaos_late::Setup {
            ops: client.clone(),
            garden: clusters.garden.clone(),
            bindings_ns: BINDINGS_NS.into(),
            claims_ns: CLAIMS_NS.into(),
            lease_ns: CLAIMS_NS.into(),
            lease: LEASE.into(),
            one_cluster: !two_clusters,
        },
        p.late_rounds,
    )
    .await;
    watches.extend(late.spawn_watches());
    {
        let slots: Vec<chaos_late::SlotProxies> = ops_proxies
            .iter()
            .enumerate()
            .map(|(i, (ops, _))| chaos_late::SlotProxies {
                ops,
                garden: proxies.get(i).map(|(g, _)| g as &dyn chaos_late::Hold),
            })
            .collect();
        late.drive(replicas.as_ref(), &slots).await;
    }
    let late_counts = late.check().await;
    let late_took = late_started.elapsed();

    stop.cancel();
    let _ = supervisor.await;
    for w in watches {
        w.abort();
    }
    let (exits, kills, incarnations) = {
        let mut r = replicas.lock().unwrap();
        for s in &mut r.slots {
            s.kill();
        }
        (r.exits.clone(), r.kills, r.incarnations)
    };
    let mut panics = Vec::new();
    for e in std::fs::read_dir(dir.join("logs")).expect("logs").flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        panics.extend(
            text.lines()
                .filter(|l| l.contains("panicked"))
                .map(|l| format!("{}: {l}", e.file_name().to_string_lossy())),
        );
    }

    println!(
        "chaos run{}: {} claims, {} tenants ({} allowlisted for multi-account)",
        if two_clusters {
            " with a separate garden"
        } else {
            ""
        },
        p.claims,
        p.tenants,
        allowlisted.len()
    );
    for f in &fault_log {
        println!("  fault {f}");
    }
    println!(
        "  replicas started {incarnations}, SIGKILLed {kills}, exited by themselves {} {exits:?}",
        exits.len()
    );
    println!(
        "  claims created in {created_in:.1?}; converged {converged_in:.1?} later (last poll: {} bound, {} NoMatchingRule)",
        last.0, last.1
    );
    println!("  ---- invariant counts (docs/design.md §5) ----");
    println!(
        "  claims bound                                   {} / {} expected",
        counts.bound, counts.expected_bound
    );
    println!(
        "  claims with NoMatchingRule (no rule, expected) {}",
        counts.no_matching_rule
    );
    println!(
        "  lost claims (neither Bound nor a reason)   §5.7 {}",
        counts.lost
    );
    println!(
        "  stuck claims (rule, pools refilled, unbound)    {}",
        counts.stuck
    );
    println!(
        "  duplicate bindings per (tenant, pool)     §5.2 {}",
        counts.duplicate_bindings
    );
    println!(
        "  limit violations by a new cluster         §5.3 {}",
        counts.limit_violations
    );
    println!(
        "  shared/internal/dirty/foreign written     §5.4 {}",
        counts.untouchable_written
    );
    println!(
        "  bound claims that changed binding         §5.5 {}",
        counts.bound_changed
    );
    println!(
        "  bound claims that left Bound              §5.5 {}",
        counts.bound_left
    );
    println!(
        "  tenantName overwritten on a binding       §5.1 {}",
        counts.tenant_written_twice
    );
    println!(
        "  tenantName written without a claim        §5.1 {}",
        counts.tenant_without_claim
    );
    println!(
        "  writes outside own metadata/finalizers/status   §5.6 {}",
        counts.foreign_writes
    );
    println!(
        "  deleted claims not released (still there)      {}",
        counts.deleted_left
    );
    println!(
        "  claims bound to a released (dirty) binding §5.4 {}",
        counts.bound_to_released
    );
    println!(
        "  leaked bindings (claimed, unused, not released) {}",
        counts.orphaned
    );
    println!(
        "  writes of a paused leader after it resumed      {}",
        paused_writes.len()
    );
    println!("  pauses that no standby ended within 90 s       {untaken_pauses}");
    println!(
        "  operator panics in logs                        {}",
        panics.len()
    );
    println!(
        "  webhook-admitted Runtimes                      {} / {} expected",
        runtime_counts.admitted,
        plans
            .iter()
            .filter(|p| p.name.starts_with("runtime."))
            .count()
    );
    println!(
        "  Runtimes whose binding is not their claim's    {}",
        runtime_counts.mismatched
    );
    println!(
        "  (figures) webhook calls refused and retried (pool exhausted, replica restarting) {}",
        chaos_sources::REFUSED.load(std::sync::atomic::Ordering::Relaxed)
    );
    println!(
        "  (figures) claims that waited on an exhausted pool {}",
        observed.exhausted.len()
    );
    println!(
        "  (figures) bindings claimed in the run {}, released {} (dirty) and {} clean then claimed again, claims deleted {}, burst claims {}; new clusters on the over-limit binding {}",
        counts.claimed_in_run,
        counts.released_in_run,
        counts.reclaimed_after_clean_release,
        deleted.len(),
        p.bursts * BURST,
        counts.clusters_on_aws_over
    );
    phase_counts.print();
    late_counts.print();
    println!("  late-write phase took {late_took:.1?}");
    println!("  total {:.1?}", started.elapsed());
    println!(
        "reproduce: {}={} HAP_CHAOS_TENANTS={} HAP_CHAOS_KILLS={} HAP_CHAOS_APISERVER_RESTARTS={} HAP_CHAOS_PAUSES={} HAP_CHAOS_DELETIONS={} HAP_CHAOS_BURSTS={} HAP_CHAOS_SOURCE_NAMES={} HAP_CHAOS_SOURCE_REFUSALS={} HAP_CHAOS_SOURCE_GRACE={} HAP_CHAOS_LATE_ROUNDS={} cargo test --test it -- chaos:: {} -- --nocapture",
        if two_clusters {
            "HAP_CHAOS_GARDEN_CLAIMS"
        } else {
            "HAP_CHAOS_CLAIMS"
        },
        p.claims,
        p.tenants,
        p.kills,
        p.apiserver_restarts,
        p.pauses,
        p.deletions,
        p.bursts,
        p.source_names,
        p.source_refusals,
        p.source_grace.as_secs(),
        p.late_rounds,
        if two_clusters {
            "with_a_separate_garden"
        } else {
            "leader_kills_and_an_apiserver_restart"
        }
    );

    let clean = counts.lost == 0
        && counts.stuck == 0
        && counts.bound == counts.expected_bound
        && counts.no_matching_rule == counts.claims - counts.expected_bound
        && counts.duplicate_bindings == 0
        && counts.limit_violations == 0
        && counts.untouchable_written == 0
        && counts.bound_changed == 0
        && counts.bound_left == 0
        && counts.tenant_written_twice == 0
        && counts.tenant_without_claim == 0
        && counts.foreign_writes == 0
        && counts.clusters_on_aws_over == 0
        && counts.deleted_left == 0
        && counts.bound_to_released == 0
        && counts.orphaned == 0
        && paused_writes.is_empty()
        && untaken_pauses == 0
        && paused.len() == p.pauses
        && panics.is_empty()
        && runtime_counts.mismatched == 0
        && runtime_counts.admitted
            == plans
                .iter()
                .filter(|p| p.name.starts_with("runtime."))
                .count()
        && kills == p.kills
        && phase_counts.violations() == 0
        && late_counts.violations() == 0
        && late_counts.conclusive > 0;
    if !clean {
        env.save_logs(&dir.join("logs"));
        panic!(
            "chaos found violations: {counts:?}; {runtime_counts:?}; {phase_counts:?}; late writes: {} violations in rounds {:?}, {} conclusive of {}; panics {panics:?}; kills {kills}/{}; pauses {}/{} ({untaken_pauses} no standby ended); writes after a pause {paused_writes:?}. Logs kept in {}",
            late_counts.violations(),
            late_counts.rounds_with_violations,
            late_counts.conclusive,
            late_counts.rounds,
            p.kills,
            paused.len(),
            p.pauses,
            dir.join("logs").display()
        );
    }
    drop(env);
    let _ = std::fs::remove_dir_all(&dir);
}
