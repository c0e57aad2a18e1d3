//! Fixtures of the reconcile tests (tests only): claims, bindings and a HapConfig as builders, a
//! `Context` over one scripted cluster (`hap_testkit`, the operator's cluster and the garden in
//! one) whose index holds them, and the calls a reconcile makes, each as one scripted `Call`.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::backoff::Backoff;
use super::{ClaimRef, Context, RunArgs, config, denials, sources};
use crate::api::{AccountClaim, AccountClaimSpec, CLAIM_FINALIZER, HapConfig, HapConfigSpec};
use crate::http::Health;
use crate::k8s::active::ConfigResolver;
use crate::k8s::caches::{Feed, listed_without_watch};
use crate::k8s::claim_store::ClaimWriter;
use crate::k8s::last_good::LastGoodApi;
use crate::k8s::lean::StoredClaim;
use crate::k8s::namespaces::NamespaceReader;
use crate::k8s::{BindingTarget, Caches, ChangeFeed, Cluster, Retargetable, Writer};
use crate::labels::{CLAIMED_BY, PoolKey};
use crate::leadership::Fence;
use crate::ledger::Ledger;
use crate::metrics::Metrics;
use crate::pools::{BindingView, claim_view};
use crate::status::{BoundTo, ClaimOutcome, desired_claim_status};
use hap_testkit::{Call, Listed, Script};

pub const CONFIG: &str = "hap";
pub const GARDEN: &str = "garden";
pub const TENANTS: &str = "tenants";
pub const GA: &str = "ga-1";

// ---- objects -------------------------------------------------------------------------------

/// An AccountClaim of `GA` for plan aws in `TENANTS`, uid `uid-<name>`, at resourceVersion 10,
/// without finalizer or status.
pub fn claim(name: &str) -> AccountClaim {
    let mut c = AccountClaim::new(
        name,
        AccountClaimSpec {
            global_account: GA.into(),
            plan: "aws".into(),
            ..Default::default()
        },
    );
    c.metadata.namespace = Some(TENANTS.into());
    c.metadata.uid = Some(format!("uid-{name}"));
    c.metadata.resource_version = Some("10".into());
    c.metadata.generation = Some(1);
    c.metadata.creation_timestamp = Some(Time(Timestamp::now()));
    c
}

/// With the release finalizer, as after the reconcile's first write (a new resourceVersion).
pub fn finalized(mut c: AccountClaim) -> AccountClaim {
    c.metadata.finalizers = Some(vec![CLAIM_FINALIZER.into()]);
    c.metadata.resource_version = Some("11".into());
    c
}

/// Recorded Bound to `binding` (the status a reconcile writes when it claims it).
pub fn bound(mut c: AccountClaim, binding: &str) -> AccountClaim {
    let to = BoundTo {
        binding: binding.into(),
        namespace: GARDEN.into(),
        pool: aws_pool(),
        matched_rule: crate::api::MatchedRule {
            index: 1,
            entry: "aws".into(),
        },
        decision: crate::api::Decision::Claimed,
        preference: Some(1),
    };
    let now = Time(Timestamp::now());
    let status = desired_claim_status(
        None,
        &c.spec,
        c.metadata.generation,
        &ClaimOutcome::Bound(to),
        &now,
    );
    c.status = Some(status);
    c.metadata.resource_version = Some("12".into());
    c
}

/// Being deleted (its finalizer holds it).
pub fn deleting(mut c: AccountClaim) -> AccountClaim {
    c.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    c
}

/// Naming its binding (`spec.adoptBinding`), as a claim made for a request that came with one.
pub fn adopting(mut c: AccountClaim, binding: &str) -> AccountClaim {
    c.spec.adopt_binding = Some(binding.into());
    c
}

/// Made by request source `kyma` for Runtime `kcp-system/<runtime>`, whose object never
/// existed (no source uid label).
pub fn from_source(mut c: AccountClaim, runtime: &str) -> AccountClaim {
    let labels = c.metadata.labels.get_or_insert_with(BTreeMap::new);
    for (k, v) in [
        (crate::labels::SOURCE_ID, "kyma"),
        (crate::labels::SOURCE_KIND, "Runtime"),
        (crate::labels::SOURCE_NAMESPACE, "kcp-system"),
        (crate::labels::SOURCE_NAME, runtime),
    ] {
        labels.insert(k.into(), v.into());
    }
    c
}

/// A binding of the aws pool at `rv`, with `labels` besides `hyperscalerType=aws`.
pub fn binding(name: &str, rv: &str, labels: &[(&str, &str)]) -> BindingView {
    let mut all = BTreeMap::from([("hyperscalerType".to_string(), "aws".to_string())]);
    all.extend(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    BindingView {
        name: name.into(),
        resource_version: Some(rv.into()),
        labels: all.into(),
        credentials: crate::api::CredentialsKind::Secret,
        account: None,
        annotations: BTreeMap::new(),
        created: None,
    }
}

/// A binding of the aws pool claimed by claim `claimant` for `GA`.
pub fn claimed_binding(name: &str, rv: &str, claimant: &str) -> BindingView {
    let by = format!("uid-{claimant}");
    binding(name, rv, &[("tenantName", GA), (CLAIMED_BY, &by)])
}

pub fn aws_pool() -> PoolKey {
    PoolKey {
        hyperscaler_type: "aws".into(),
        eu_access: false,
        shared: false,
    }
}

/// The HapConfig in force: bindings in `GARDEN`, one rule `aws`; generation 1 at resourceVersion
/// 100.
pub fn hap_config(spec: HapConfigSpec) -> HapConfig {
    let mut cfg = HapConfig::new(CONFIG, spec);
    cfg.metadata.uid = Some("uid-config".into());
    cfg.metadata.generation = Some(1);
    cfg.metadata.resource_version = Some("100".into());
    cfg
}

pub fn aws_spec() -> HapConfigSpec {
    HapConfigSpec {
        binding_namespace: GARDEN.into(),
        rules: Some(vec!["aws".into()]),
        ..Default::default()
    }
}

// ---- the context ---------------------------------------------------------------------------

/// A leader's `Context` over one scripted cluster, its caches listed, its index holding the
/// fixture's bindings and claims.
pub struct Harness {
    pub ctx: Arc<Context>,
    pub api: Script,
    /// The leader's fence, held for an hour; `revoke` it to act as a replica that lost the lease.
    pub fence: Fence,
    /// The claims the lanes kicked when their turn came.
    pub turns: Arc<Mutex<Vec<ClaimRef>>>,
    configs: Listed<HapConfig>,
}

/// How the fixture's binding watch starts (`k8s::caches`).
type BindingStart = fn(&Cluster, &BindingTarget, Feed) -> BoxFuture<'static, ()>;

impl Harness {
    pub fn new(cfg: HapConfig, claims: &[&AccountClaim], bindings: &[BindingView]) -> Self {
        let h = Self::build(cfg, claims, listed_without_watch);
        h.index(claims, bindings);
        assert!(
            super::decidable(&h.ctx),
            "the fixture's caches count as listed"
        );
        h
    }

    /// With the operator's own binding watch over the scripted cluster instead of one that
    /// counts as listed: its list is answered by `list` whenever it is made (a watch retries on
    /// its own clock, `Script::always`). The Shoot watch counts as listed; the index holds the
    /// claims, and only the bindings the watch brings.
    pub fn watching_bindings(cfg: HapConfig, claims: &[&AccountClaim], list: Call) -> Self {
        let h = Self::build(cfg, claims, crate::k8s::caches::watch_bindings);
        h.api.always(list);
        h.index(claims, &[]);
        h
    }

    /// A leader's context whose caches are not pointed at the config yet.
    fn build(cfg: HapConfig, claims: &[&AccountClaim], bindings: BindingStart) -> Self {
        let (cluster, api) = crate::k8s::scripted();
        let args = RunArgs::for_config(CONFIG);
        let feed = ChangeFeed::default();
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let configs = Listed::new(vec![cfg]);
        let stored: Vec<StoredClaim> = claims
            .iter()
            .map(|c| StoredClaim::from((*c).clone()))
            .collect();
        let (claim_store, claim_writer) = ClaimWriter::listed(stored);
        let (kick, _) = futures::channel::mpsc::unbounded();
        let turns: Arc<Mutex<Vec<ClaimRef>>> = Arc::default();
        let fence = Fence::closed();
        let hour = std::time::Duration::from_secs(3600);
        fence.renewed(std::time::Instant::now(), hour, std::time::Duration::ZERO);
        let ctx = Arc::new(Context {
            writer: Writer::new(
                cluster.clone(),
                cluster.clone(),
                Some("test".into()),
                fence.clone(),
            ),
            caches: Caches {
                feed: feed.clone(),
                configs: configs.store(),
                claims: claim_store,
                claim_writer,
                bindings: Retargetable::new(
                    cluster.clone(),
                    ledger.clone(),
                    feed.clone(),
                    bindings,
                ),
                others: Retargetable::new(
                    cluster.clone(),
                    ledger.clone(),
                    feed.clone(),
                    listed_without_watch,
                ),
                shoots: Retargetable::new(
                    cluster.clone(),
                    ledger.clone(),
                    feed.clone(),
                    listed_without_watch,
                ),
            },
            resolver: Arc::new(ConfigResolver::new(CONFIG.into(), configs.store())),
            last_good: config::LastGoodWriter::new(
                LastGoodApi::new(&cluster, &args.lease_namespace, CONFIG),
                None,
            ),
            namespaces: NamespaceReader::new(&cluster),
            ledger,
            metrics: Arc::new(Metrics::new()),
            health: Health::default(),
            backoff: Backoff::default(),
            lanes: super::lanes::Lanes::new(args.concurrency, args.source_concurrency, {
                let turns = turns.clone();
                move |r| turns.lock().unwrap_or_else(|p| p.into_inner()).push(r)
            }),
            claim_kick: kick,
            sweep_now: Arc::default(),
            refresh: Mutex::new(config::RefreshClock::default()),
            claims_synced: Arc::new(AtomicBool::new(true)),
            denials: denials::Denials::default(),
            sources: sources::SourceRuntime::default(),
            took_over: AtomicBool::new(true),
            take_over_error: Mutex::new(None),
            args,
        });
        ctx.caches.claim_writer.judge_by(super::judge_of(&ctx));
        Self {
            ctx,
            api,
            fence,
            turns,
            configs,
        }
    }

    /// Points the binding and Shoot watches at the config, which resets the index's bindings:
    /// the fixture's go in after.
    fn index(&self, claims: &[&AccountClaim], bindings: &[BindingView]) {
        super::point_caches(&self.ctx);
        let mut l = self.ctx.ledger();
        for b in bindings {
            l.apply_binding(b.clone());
        }
        for c in claims {
            l.apply_claim(claim_view(c));
        }
    }

    /// The claim store without `c` (the index keeps it), as the claim watch leaves a settled
    /// claim out.
    pub fn forget_stored(&self, c: &AccountClaim) {
        self.ctx.caches.claim_writer.forget(&c.clone().into());
    }

    /// A newer copy of a claim, as its watch brings it into the index.
    pub fn observe(&self, c: &AccountClaim) {
        self.ctx.ledger().apply_claim(claim_view(c));
    }

    /// A newer copy of a binding, as its watch brings it into the index.
    pub fn observe_binding(&self, b: BindingView) {
        self.ctx.ledger().apply_binding(b);
    }

    /// The HapConfig deleted, as its watch takes it out of the store.
    pub fn delete_config(&mut self, cfg: HapConfig) {
        self.configs.delete(cfg);
    }

    /// A newer copy of the HapConfig, as its watch brings it into the store.
    pub fn observe_config(&mut self, cfg: HapConfig) {
        self.configs.apply(cfg);
    }

    /// Runs one claim reconcile (the controller's entry point) and checks the script.
    pub async fn reconcile(
        &self,
        c: &AccountClaim,
    ) -> Result<kube::runtime::controller::Action, super::outcome::ClaimError> {
        let result = super::claim::reconcile(Arc::new(c.clone().into()), self.ctx.clone()).await;
        self.api.done();
        result
    }
}

// ---- the calls -----------------------------------------------------------------------------

fn claim_path(c: &AccountClaim) -> String {
    format!(
        "/apis/accountpool.io/v1alpha1/namespaces/{}/accountclaims/{}",
        c.namespace().unwrap_or_default(),
        c.name_any()
    )
}

pub fn binding_path(name: &str) -> String {
    format!("/apis/security.gardener.cloud/v1alpha1/namespaces/{GARDEN}/credentialsbindings/{name}")
}

/// A binding's metadata as a GET answers it: `rv` and `labels`.
pub fn binding_now(name: &str, rv: &str, labels: Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {"name": name, "namespace": GARDEN, "resourceVersion": rv, "labels": labels}})
}

const MANAGER: (&str, &str) = ("fieldManager", crate::api::FIELD_MANAGER);

/// The JSON patch that adds the release finalizer to a claim without finalizers: `test` the
/// list is absent, then add it.
pub fn add_finalizer(c: &AccountClaim) -> Call {
    Call::patch(&claim_path(c)).query(&[MANAGER]).body(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": [CLAIM_FINALIZER]},
    ]))
}

/// The JSON patch that removes the release finalizer at `index`, testing it is still there.
pub fn remove_finalizer(c: &AccountClaim, index: usize) -> Call {
    let path = format!("/metadata/finalizers/{index}");
    Call::patch(&claim_path(c)).query(&[MANAGER]).body(json!([
        {"op": "test", "path": path, "value": CLAIM_FINALIZER},
        {"op": "remove", "path": path},
    ]))
}

/// A merge patch of a binding's labels (`null` removes one) conditioned on `rv`.
pub fn binding_cas(name: &str, rv: &str, labels: Value) -> Call {
    Call::patch(&binding_path(name))
        .query(&[MANAGER])
        .body(json!({"metadata": {"resourceVersion": rv, "labels": labels}}))
}

/// The fence of claim `claimant`'s earlier claim write of `name` at `rv`: one annotation,
/// conditioned on that version, which it moves.
pub fn fence_cas(name: &str, rv: &str, claimant: &str) -> Call {
    let uid = format!("uid-{claimant}");
    Call::patch(&binding_path(name))
        .query(&[MANAGER])
        .body(json!({"metadata": {
            "resourceVersion": rv,
            "labels": {},
            "annotations": {crate::labels::CLAIM_WRITE_FENCED: format!("{uid}@{rv}")},
        }}))
}

/// The write before a claim is recorded Bound to a binding it did not claim: claimed-by removed
/// and the record of the claims being bound there set, one CAS.
pub fn record_cas(name: &str, rv: &str, fills: &str) -> Call {
    Call::patch(&binding_path(name))
        .query(&[MANAGER])
        .body(json!({"metadata": {
            "resourceVersion": rv,
            "labels": {CLAIMED_BY: null},
            "annotations": {crate::labels::FILLING: fills},
        }}))
}

/// The claim CAS of a binding: tenant and claimed-by together.
pub fn claim_cas(name: &str, rv: &str, c: &AccountClaim) -> Call {
    let uid = c.uid().unwrap_or_default();
    // The claim record's time is the clock's: only its presence is checked (claim_tests).
    Call::patch(&binding_path(name))
        .query(&[MANAGER])
        .body_includes(json!({"metadata": {
            "resourceVersion": rv,
            "labels": {"tenantName": GA, CLAIMED_BY: uid},
        }}))
}

/// The forced server-side apply of a claim's status, conditioned on the claim's resourceVersion,
/// whose status has at least `status`.
pub fn claim_status(c: &AccountClaim, status: Value) -> Call {
    Call::patch(&format!("{}/status", claim_path(c)))
        .query(&[MANAGER, ("force", "true")])
        .body_includes(json!({
            "apiVersion": "accountpool.io/v1alpha1",
            "kind": "AccountClaim",
            "metadata": {"resourceVersion": c.resource_version()},
            "status": status,
        }))
}

/// The record of a claim write of `binding` at `rv` in the claim's status (`status.claimWrite`),
/// written before the binding's compare-and-swap.
pub fn record_claim_write(c: &AccountClaim, binding: &str, rv: &str) -> Call {
    let record = json!({"claimWrite": {"binding": binding, "resourceVersion": rv,
        "namespace": GARDEN, "kind": "CredentialsBinding"}});
    claim_status(c, record)
}

/// The claim as the record of its claim write of `binding` at `binding_rv` left it, at `rv`.
pub fn recorded(c: &AccountClaim, binding: &str, binding_rv: &str, rv: &str) -> AccountClaim {
    let mut c = c.clone();
    let mut status = c.status.clone().unwrap_or_default();
    status.claim_write = Some(crate::api::PendingClaimWrite {
        binding: binding.into(),
        resource_version: binding_rv.into(),
        namespace: Some(GARDEN.into()),
        kind: Some(crate::api::BindingKind::CredentialsBinding),
    });
    c.status = Some(status);
    c.metadata.resource_version = Some(rv.into());
    c
}

/// The first list of the binding watch (`k8s::caches::watch_bindings`), one page.
pub fn list_bindings() -> Call {
    Call::get(&format!(
        "/apis/security.gardener.cloud/v1alpha1/namespaces/{GARDEN}/credentialsbindings"
    ))
    .query(&[("limit", "250")])
}

/// A read of the claim (after a status write met a Conflict).
pub fn get_claim(c: &AccountClaim) -> Call {
    Call::get(&claim_path(c))
}

/// An event about `regarding` (in its namespace) with this type and reason.
pub fn event(ns: &str, regarding: &str, type_: &str, reason: &str) -> Call {
    Call::post(&format!("/apis/events.k8s.io/v1/namespaces/{ns}/events")).body_includes(json!({
        "type": type_,
        "reason": reason,
        "regarding": {"name": regarding},
        "reportingController": crate::api::FIELD_MANAGER,
        "reportingInstance": "test",
    }))
}
