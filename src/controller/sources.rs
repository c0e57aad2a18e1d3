//! The source controller (leader only): keeps the watches of the foreign request objects the
//! config needs, runs `sources::sync` over them after every burst of changes, and carries out
//! its plan — claims created, labelled or deleted, ClusterConfigs written or deleted, every write
//! through the fenced writer — and keeps each source's status for the HapConfig. A change that
//! touches neither a source's claims, its objects nor the config starts no pass (the index counts
//! source claims per event), and with no source configured and no source claim left none runs.
//! A pass reads the source claims of its namespace from the index (`pools::ClaimView::source`),
//! never from the claim store, which holds settled claims only for a visit.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::core::ApiResource;
use tokio_util::sync::CancellationToken;

use super::Context;
use crate::api::{AccountClaim, BindingKind, SourceKind, SourceStatus};
use crate::claim_state::SourceRef;
use crate::k8s::Cluster;
use crate::k8s::active::ConfigState;
use crate::k8s::sources::{ForeignCache, SourceWrites};
use crate::pools::{ClaimView, Inventory};
use crate::sources::kinds::{Watched, cluster_config_resource};
use crate::sources::naming::ANNOTATION_SOURCE;
use crate::sources::sync::{
    Action, ClaimRecord, CleanUp, ConfigRef, KindView, LiveClaim, Pass, PassInput,
    clean_up as clean_up_step, plan_pass,
};

/// The leader's state for request sources.
#[derive(Default)]
pub struct SourceRuntime {
    foreign: Mutex<BTreeMap<SourceKind, ForeignCache<Watched>>>,
    cluster_configs: Mutex<Option<ForeignCache>>,
    /// Shoots as requests, in the shoot namespace of the config in force, from the garden. The
    /// inventory keeps only what counting needs of a Shoot, so sources watch them on their own.
    shoots: Mutex<Option<(String, ForeignCache<Watched>)>>,
    statuses: Mutex<Vec<SourceStatus>>,
    /// What the last pass that found nothing to do saw; a tick that sees the same skips.
    done: Mutex<Option<Stamp>>,
}

/// Everything a pass reads that can move without the clock: the config in force, the source
/// claims (`Inventory::source_epoch`) and each foreign watch's events. Equal stamps, equal plan,
/// except for what waits on the clock, which the resync tick covers.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    config: (String, i64),
    claims: u64,
    foreign: Vec<(Option<SourceKind>, u64)>,
}

/// Whether a pass must run: always on the resync tick, otherwise unless the last pass saw the
/// same and found nothing to do.
fn must_run(done: Option<&Stamp>, now: &Stamp, resync: bool) -> bool {
    resync || done != Some(now)
}

impl SourceRuntime {
    /// The status of each configured source, as of the last pass.
    pub fn statuses(&self) -> Vec<SourceStatus> {
        self.statuses.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Objects each request-source watch holds, by kind (`hap_internal_entries`): Shoots,
    /// Runtimes, Clusters, and the ClusterConfigs of openmcp.
    pub fn watched_objects(&self) -> [(&'static str, usize); 4] {
        let mut counts = [
            ("source_shoots", 0),
            ("source_runtimes", 0),
            ("source_clusters", 0),
            ("source_cluster_configs", 0),
        ];
        if let Ok(foreign) = self.foreign.lock() {
            for (kind, cache) in foreign.iter() {
                let slot = match kind {
                    SourceKind::Shoot => 0,
                    SourceKind::Runtime => 1,
                    SourceKind::Cluster => 2,
                };
                counts[slot].1 += cache.len();
            }
        }
        if let Ok(shoots) = self.shoots.lock() {
            counts[0].1 += shoots.as_ref().map_or(0, |(_, c)| c.len());
        }
        if let Ok(configs) = self.cluster_configs.lock() {
            counts[3].1 = configs.as_ref().map_or(0, ForeignCache::len);
        }
        counts
    }
}

/// Runs passes until `stop`.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let ticks = super::coalesced_ticks(
        ctx.caches.feed.clone(),
        Duration::from_millis(250),
        stop.clone(),
    );
    futures::pin_mut!(ticks);
    let mut resync = tokio::time::interval(ctx.args.effective_source_grace());
    loop {
        let resynced = tokio::select! {
            _ = stop.cancelled() => return,
            t = futures::StreamExt::next(&mut ticks) => if t.is_none() { return } else { false },
            // Claims whose object never appeared are noticed without any event.
            _ = resync.tick() => true,
        };
        let planning = pass(&ctx, resynced).await;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(rest_after(planning)) => {}
        }
    }
}

/// How long the source controller rests after a pass that took `planning` to plan, beyond the
/// coalescing of its triggers: planning walks every watched object, so at a landscape's size
/// back-to-back passes would take a core of their own. Resting three times as long keeps them
/// to a quarter of one; the passes' work (adoptions, claims of objects gone) is not what an
/// admission waits on.
pub(super) fn rest_after(planning: Duration) -> Duration {
    planning * PASS_REST_FACTOR
}

const PASS_REST_FACTOR: u32 = 3;

fn ensure_caches(
    ctx: &Context,
    own: &Cluster,
    kinds: &BTreeSet<SourceKind>,
    shoot_namespace: &str,
) {
    let rt = &ctx.sources;
    if let Ok(mut shoots) = rt.shoots.lock() {
        if !kinds.contains(&SourceKind::Shoot) {
            *shoots = None;
        } else if shoots.as_ref().is_none_or(|(ns, _)| ns != shoot_namespace) {
            let cache = ForeignCache::start_in(
                ctx.writer.garden(),
                SourceKind::Shoot.resource(),
                Some(shoot_namespace),
                Box::new(|o| SourceKind::Shoot.watched(o)),
                ctx.caches.feed.clone(),
            );
            *shoots = Some((shoot_namespace.to_string(), cache));
        }
    }
    if let Ok(mut foreign) = rt.foreign.lock() {
        for k in [SourceKind::Runtime, SourceKind::Cluster] {
            if kinds.contains(&k) {
                foreign.entry(k).or_insert_with(|| {
                    let shape = Box::new(move |o| k.watched(o));
                    ForeignCache::start_in(own, k.resource(), None, shape, ctx.caches.feed.clone())
                });
            } else {
                foreign.remove(&k);
            }
        }
    }
    if let Ok(mut cfg) = rt.cluster_configs.lock() {
        if kinds.contains(&SourceKind::Cluster) {
            if cfg.is_none() {
                *cfg = Some(ForeignCache::start(
                    own,
                    cluster_config_resource(),
                    ctx.caches.feed.clone(),
                ));
            }
        } else {
            *cfg = None;
        }
    }
}

fn kind_view(cache: &ForeignCache<Watched>) -> KindView {
    KindView {
        ready: cache.is_ready(),
        error: cache.error(),
        objects: cache.values(),
    }
}

/// The stamp of what a pass would read now (`Stamp`).
fn stamp(ctx: &Context, active: &crate::k8s::active::ActiveConfig, claims: u64) -> Stamp {
    let mut foreign = Vec::new();
    if let Ok(shoots) = ctx.sources.shoots.lock()
        && let Some((_, cache)) = shoots.as_ref()
    {
        foreign.push((Some(SourceKind::Shoot), cache.events()));
    }
    if let Ok(f) = ctx.sources.foreign.lock() {
        foreign.extend(f.iter().map(|(k, c)| (Some(*k), c.events())));
    }
    if let Ok(c) = ctx.sources.cluster_configs.lock()
        && let Some(c) = c.as_ref()
    {
        foreign.push((None, c.events()));
    }
    Stamp {
        config: (active.uid.clone(), active.generation),
        claims,
        foreign,
    }
}

/// What the caches show for one pass: the source claims of the claim namespace, the view of
/// each watched kind, and the operator's ClusterConfigs once their watch is synced.
struct CachedInput {
    claims: Vec<ClaimRecord>,
    kinds: BTreeMap<SourceKind, KindView>,
    cluster_configs: Option<Vec<Arc<serde_json::Value>>>,
}

fn cached_input(ctx: &Context, claim_ns: &str) -> CachedInput {
    // Under the ledger's lock only the views' reference counts move; the records are built
    // after it is gone (about eight allocations each: at 100k source claims, 800k).
    let views = source_views(&ctx.ledger().inventory, claim_ns);
    let claims = source_records(&views, jiff::Timestamp::now());
    let mut kinds = BTreeMap::new();
    if let Ok(shoots) = ctx.sources.shoots.lock()
        && let Some((_, cache)) = shoots.as_ref()
    {
        // A Shoot can only use a binding of its own namespace: the config's shoot namespace.
        kinds.insert(SourceKind::Shoot, kind_view(cache));
    }
    if let Ok(foreign) = ctx.sources.foreign.lock() {
        for (k, cache) in foreign.iter() {
            kinds.insert(*k, kind_view(cache));
        }
    }
    let cluster_configs = ctx.sources.cluster_configs.lock().ok().and_then(|c| {
        c.as_ref()
            .filter(|c| c.is_ready())
            .map(ForeignCache::values)
    });
    CachedInput {
        claims,
        kinds,
        cluster_configs,
    }
}

/// Plans a pass on a thread of its own: the planner walks every object of every watched kind
/// (100 ms and more at a landscape's size), and on the runtime's thread that walk held up the
/// reconciles and webhook calls waiting behind it. `None` when the runtime is shutting down.
async fn plan_off_runtime(
    active: Arc<crate::k8s::active::ActiveConfig>,
    claim_ns: String,
    grace: Duration,
    input: CachedInput,
) -> Option<(Pass, Duration)> {
    let plan = move || {
        let started = std::time::Instant::now();
        let binding_kind = active
            .spec
            .binding_kind
            .unwrap_or(BindingKind::CredentialsBinding);
        let pass = plan_pass(&PassInput {
            sources: active.rules.sources(),
            binding_kind,
            claim_namespace: &claim_ns,
            kinds: input.kinds,
            claims: input.claims,
            cluster_configs: input.cluster_configs,
            grace,
        });
        (pass, started.elapsed())
    };
    match tokio::task::spawn_blocking(plan).await {
        Ok(planned) => Some(planned),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}

/// The views of the claims request sources created in `claim_ns`, from the index, which keeps
/// what the pass reads of each: the claim store need not hold them. Walks only those claims,
/// and copies none (the caller holds the ledger's lock for this walk).
fn source_views(inv: &Inventory, claim_ns: &str) -> Vec<Arc<ClaimView>> {
    inv.source_claims(claim_ns).cloned().collect()
}

/// The pass's records of `views`, their ages counted to `now`: one per name. The index keys
/// claims by uid, and may for a moment hold a claim deleted while its watch was away beside the
/// claim re-created under its name (until the re-list ends); the newer resourceVersion is the
/// one that exists.
fn source_records(views: &[Arc<ClaimView>], now: jiff::Timestamp) -> Vec<ClaimRecord> {
    let mut by_name: BTreeMap<&str, &Arc<ClaimView>> = BTreeMap::new();
    for v in views {
        let newer = |held: &&Arc<ClaimView>| {
            crate::pools::is_newer(
                v.resource_version.as_deref(),
                held.resource_version.as_deref(),
            )
        };
        match by_name.get(v.name.as_str()) {
            Some(held) if !newer(held) => {}
            _ => {
                by_name.insert(&v.name, v);
            }
        }
    }
    by_name
        .into_values()
        .filter_map(|c| {
            let facts = c.source.as_ref()?;
            let uid = (!c.uid.is_empty()).then(|| c.uid.clone());
            Some(ClaimRecord::from_facts(
                facts,
                c.name.clone(),
                uid,
                c.deleting,
                now,
            ))
        })
        .collect()
}

/// One pass: the plan over what the caches show, carried out (`pub(super)` for its tests).
/// Answers how long planning took (nothing when no plan was made).
#[tracing::instrument(name = "reconcile", skip_all, fields(controller = "sources", resynced))]
pub(super) async fn pass(ctx: &Context, resynced: bool) -> Duration {
    let ConfigState::Active { active, hold, .. } = ctx.resolver.resolve() else {
        return Duration::ZERO;
    };
    let claim_ns = ctx.args.source_claim_namespace();
    // The kinds come from the index, kept per claim event: no walk of the claim cache here.
    let (claimed_kinds, epoch) = {
        let l = ctx.ledger();
        (
            l.inventory.source_kinds(&claim_ns),
            l.inventory.source_epoch(),
        )
    };
    let mut kinds: BTreeSet<SourceKind> = active.rules.sources().iter().map(|s| s.kind).collect();
    kinds.extend(claimed_kinds);
    ensure_caches(ctx, ctx.writer.own(), &kinds, &active.shoot_namespace());
    // Until the claim list has ended the index shows only some source claims: an object
    // whose claim is not listed yet would look unclaimed. The caches above list meanwhile.
    if !ctx.claims_synced.load(std::sync::atomic::Ordering::SeqCst) {
        return Duration::ZERO;
    }
    if kinds.is_empty() {
        if let Ok(mut s) = ctx.sources.statuses.lock() {
            s.clear();
        }
        return Duration::ZERO;
    }
    let now = stamp(ctx, &active, epoch);
    let done = ctx.sources.done.lock().ok().and_then(|d| d.clone());
    if !must_run(done.as_ref(), &now, resynced) {
        return Duration::ZERO;
    }
    let input = cached_input(ctx, &claim_ns);
    let grace = ctx.args.effective_source_grace();
    let Some((plan, planning)) =
        plan_off_runtime(active.clone(), claim_ns.clone(), grace, input).await
    else {
        return Duration::ZERO;
    };
    tracing::debug!(
        ?planning,
        actions = plan.actions.len(),
        "planned a source pass"
    );
    if let Ok(mut s) = ctx.sources.statuses.lock() {
        *s = plan.statuses;
    }
    // A plan with actions is done again next time: their writes show as events, and a failed
    // one is retried.
    if let Ok(mut d) = ctx.sources.done.lock() {
        *d = plan.actions.is_empty().then_some(now);
    }
    let observing = hold.observing;
    let writes = SourceWrites::new(ctx.writer.clone());
    for action in plan.actions {
        if observing && !carried_out_while_observing(&action) {
            continue;
        }
        if let Err(e) = act(ctx, &writes, &claim_ns, action).await {
            tracing::warn!(error = %e, cause = ?std::error::Error::source(&e).map(ToString::to_string), "request source action failed; retrying on the next pass");
        }
    }
    planning
}

/// Observing, the plan is reported in the statuses and carried out only where it writes no
/// binding and takes on no request: the claim of an object that is gone is still deleted (its
/// release then waits for Enforce). Kept, such a claim was relabelled onto a new object of the
/// same name after the cutover, and held its binding for a cluster that was not there.
fn carried_out_while_observing(action: &Action) -> bool {
    matches!(action, Action::DeleteIfGone { .. })
}

async fn act(
    ctx: &Context,
    writes: &SourceWrites,
    claim_ns: &str,
    action: Action,
) -> Result<(), crate::k8s::K8sError> {
    let encode = |what: &str, source| crate::k8s::K8sError::Encode {
        what: what.to_string(),
        source,
    };
    match action {
        Action::CreateClaim { claim } => {
            let claim: AccountClaim =
                serde_json::from_value(claim).map_err(|e| encode("an AccountClaim", e))?;
            tracing::info!(claim = ?claim.metadata.name, adopt = ?claim.spec.adopt_binding, "creating the claim of a request object");
            writes.create_claim(claim_ns, &claim).await
        }
        Action::LabelClaim { name, labels } => writes.label_claim(claim_ns, &name, &labels).await,
        Action::PutClusterConfig { object, version } => {
            writes
                .put_cluster_config(&cluster_config_resource(), &object, version)
                .await
        }
        Action::DeleteClusterConfig(cfg) => {
            writes
                .delete_cluster_config(&cluster_config_resource(), &cfg)
                .await
        }
        Action::DeleteIfGone {
            claim,
            uid,
            source,
            cluster_configs,
        } => {
            let gone = Gone {
                claim: &claim,
                uid: uid.as_deref(),
                source: &source,
            };
            clean_up(ctx, writes, claim_ns, gone, &cluster_configs).await
        }
    }
}

/// A claim whose object the cache does not show.
struct Gone<'a> {
    claim: &'a str,
    uid: Option<&'a str>,
    source: &'a SourceRef,
}

/// Deletes the claim of a vanished object, in this order: the claim is read first (its version
/// and the webhook's stamp), it must be old enough by the API server's clock, the object must be
/// gone by a read, and the delete is conditioned on the uid and version read first — so a
/// webhook handing the claim out again at any point after the read makes the delete fail. Its
/// ClusterConfigs go only once the claim is deleted.
async fn clean_up(
    ctx: &Context,
    writes: &SourceWrites,
    claim_ns: &str,
    gone: Gone<'_>,
    configs: &[ConfigRef],
) -> Result<(), crate::k8s::K8sError> {
    let read = writes.read_claim(claim_ns, gone.claim).await?;
    let Some(live) = read.claim else {
        return Ok(());
    };
    // A server answer without a Date (a proxy that strips it) leaves the local clock.
    let now = read.server_now.unwrap_or_else(jiff::Timestamp::now);
    let grace = ctx.args.effective_source_grace();
    let (uid, version) =
        match clean_up_step(&LiveClaim::from_meta(&live.metadata), gone.uid, now, grace) {
            CleanUp::CheckObject {
                uid,
                resource_version,
            } => (uid, resource_version),
            CleanUp::Wait { left } => {
                tracing::debug!(
                    claim = gone.claim,
                    left_s = left.as_secs(),
                    "claim handed out recently; its clean-up waits"
                );
                return Ok(());
            }
            CleanUp::Leave => return Ok(()),
        };
    let Some(name) = object_name(gone.source, &live) else {
        return Ok(());
    };
    // Shoots live in the garden: read them through the client that watches them.
    let reader = if gone.source.kind == SourceKind::Shoot {
        ctx.writer.garden()
    } else {
        ctx.writer.own()
    };
    let resource: ApiResource = gone.source.kind.resource();
    if SourceWrites::object_exists(reader, &resource, &gone.source.namespace, &name).await? {
        return Ok(());
    }
    match writes
        .delete_claim(claim_ns, gone.claim, &uid, &version)
        .await
    {
        Err(crate::k8s::K8sError::Conflict { .. }) => {
            tracing::debug!(
                claim = gone.claim,
                "claim changed since it was read (handed out again?); left as it is"
            );
            return Ok(());
        }
        other => other?,
    }
    tracing::info!(claim = gone.claim, object = %gone.source.describe(), "request object is gone; deleted its claim (its finalizer releases the binding)");
    for cfg in configs {
        writes
            .delete_cluster_config(&cluster_config_resource(), cfg)
            .await?;
    }
    Ok(())
}

/// The object a claim serves: its name label, or (for names too long for a label) the source
/// annotation of the claim read live (the cache drops annotations).
fn object_name(source: &SourceRef, live: &AccountClaim) -> Option<String> {
    if let Some(n) = &source.name {
        return Some(n.clone());
    }
    live.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_SOURCE))
        .and_then(|d| d.rsplit_once('/'))
        .map(|(_, name)| name.to_string())
}

#[cfg(test)]
mod tests {
    use kube::Resource;

    use super::*;

    /// While observing only the clean-up of a claim whose object is gone runs: no claim is
    /// created or relabelled and no ClusterConfig written (it skipped every action before, so a
    /// stale claim outlived its object and was relabelled onto a new one after the cutover).
    #[test]
    fn observing_the_pass_only_deletes_claims_whose_object_is_gone() {
        let source = SourceRef {
            source_id: "id".into(),
            kind: SourceKind::Runtime,
            namespace: "kcp-system".into(),
            name: Some("rt".into()),
            uid: None,
        };
        let gone = Action::DeleteIfGone {
            claim: "c".into(),
            uid: None,
            source,
            cluster_configs: vec![],
        };
        assert!(carried_out_while_observing(&gone));
        let create = Action::CreateClaim {
            claim: serde_json::json!({}),
        };
        let label = Action::LabelClaim {
            name: "c".into(),
            labels: Default::default(),
        };
        assert!(!carried_out_while_observing(&create));
        assert!(!carried_out_while_observing(&label));
    }

    fn stamp(claims: u64, events: u64) -> Stamp {
        Stamp {
            config: ("uid".into(), 1),
            claims,
            foreign: vec![(Some(SourceKind::Runtime), events)],
        }
    }

    /// A claim `name` in `ns` at `rv`, made by a source when `kind` is given.
    fn stored(
        name: &str,
        ns: &str,
        kind: Option<&str>,
        edit: impl FnOnce(&mut AccountClaim),
    ) -> crate::k8s::lean::StoredClaim {
        use crate::labels;
        let mut c = AccountClaim::new(name, Default::default());
        c.metadata.namespace = Some(ns.into());
        c.metadata.uid = Some(format!("uid-{name}"));
        c.metadata.resource_version = Some("1".into());
        c.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-27T03:00:00Z".parse().expect("a timestamp"),
        ));
        if let Some(kind) = kind {
            c.metadata.labels = Some(BTreeMap::from([
                (crate::labels::SOURCE_ID.into(), format!("{kind}-source")),
                (crate::labels::SOURCE_KIND.into(), kind.into()),
                (crate::labels::SOURCE_NAMESPACE.into(), "objects".into()),
                (labels::SOURCE_NAME.into(), format!("object-{name}")),
                (labels::SOURCE_UID.into(), format!("object-uid-{name}")),
                ("team".into(), "x".into()),
            ]));
        }
        edit(&mut c);
        // Decoded from JSON as the claim watch decodes it (`k8s::lean`), not converted in memory.
        serde_json::from_value(serde_json::to_value(&c).expect("json")).expect("a stored claim")
    }

    /// Source claims of every shape the pass reads, in namespace kcp, plus a person's claim
    /// there and a source claim elsewhere.
    fn claims_of_every_shape() -> [crate::k8s::lean::StoredClaim; 9] {
        use crate::api::{AccountClaimStatus, ClaimPhase};
        use crate::labels;
        let status = |phase, binding: Option<&str>| {
            Some(AccountClaimStatus {
                observed_generation: Some(1),
                phase: Some(phase),
                credentials_binding_name: binding.map(Into::into),
                binding_namespace: binding.map(|_| "garden".into()),
                ..Default::default()
            })
        };
        [
            stored("new", "kcp", Some("Shoot"), |_| {}),
            stored("pending", "kcp", Some("Runtime"), |c| {
                c.status = status(ClaimPhase::Pending, None);
            }),
            stored("bound", "kcp", Some("Shoot"), |c| {
                c.status = status(ClaimPhase::Bound, Some("b1"));
            }),
            stored("failed", "kcp", Some("Cluster"), |c| {
                c.status = status(ClaimPhase::Failed, Some("b2"));
            }),
            stored("deleting", "kcp", Some("Shoot"), |c| {
                c.status = status(ClaimPhase::Bound, Some("b3"));
                c.metadata.deletion_timestamp = c.metadata.creation_timestamp.clone();
            }),
            // An openmcp Cluster named by the API server: no name label, no uid label yet.
            stored("unnamed", "kcp", Some("Cluster"), |c| {
                let l = c.metadata.labels.as_mut().expect("labels");
                l.remove(labels::SOURCE_NAME);
                l.remove(labels::SOURCE_UID);
            }),
            stored("undated", "kcp", Some("Shoot"), |c| {
                c.metadata.creation_timestamp = None;
            }),
            stored("person", "kcp", None, |c| {
                c.status = status(ClaimPhase::Bound, Some("b4"));
            }),
            stored("elsewhere", "other", Some("Shoot"), |_| {}),
        ]
    }

    #[test]
    fn the_index_gives_the_records_the_whole_claims_gave() {
        let claims = claims_of_every_shape();
        let now: jiff::Timestamp = "2026-11-27T04:00:00Z".parse().unwrap();
        let mut from_store: Vec<ClaimRecord> = claims
            .iter()
            .filter(|c| c.meta().namespace.as_deref() == Some("kcp"))
            .filter_map(|c| ClaimRecord::from_claim(c.meta(), c.status_fields(), now))
            .collect();
        let inv = crate::pools::fixtures::inventory(
            vec![],
            claims.iter().map(|c| c.view()).collect(),
            vec![],
        );
        let mut from_index = source_records(&source_views(&inv, "kcp"), now);
        from_store.sort_by(|a, b| a.name.cmp(&b.name));
        from_index.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(from_store.len(), 7, "every source claim of kcp");
        assert_eq!(from_index, from_store);
        // What each record must say, independently of how either path reads it, one line per
        // record: name, uid, kind/source id, namespace/object name, object uid, phase, binding,
        // deleting, age.
        let or_dash = |v: Option<&str>| v.unwrap_or("-").to_string();
        let seen: Vec<String> = from_index
            .iter()
            .map(|r| {
                let s = &r.source;
                let phase = r.phase.map(|p| format!("{p:?}"));
                let deleting = if r.deleting { "deleting" } else { "live" };
                format!(
                    "{} {} {}/{} {}/{} {} {} {} {deleting} {}s",
                    r.name,
                    or_dash(r.uid.as_deref()),
                    s.kind.as_str(),
                    s.source_id,
                    s.namespace,
                    or_dash(s.name.as_deref()),
                    or_dash(s.uid.as_deref()),
                    or_dash(phase.as_deref()),
                    or_dash(r.binding.as_deref()),
                    r.age.as_secs(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                "bound uid-bound Shoot/Shoot-source objects/object-bound object-uid-bound Bound b1 live 3600s",
                "deleting uid-deleting Shoot/Shoot-source objects/object-deleting object-uid-deleting Bound b3 deleting 3600s",
                "failed uid-failed Cluster/Cluster-source objects/object-failed object-uid-failed Failed b2 live 3600s",
                "new uid-new Shoot/Shoot-source objects/object-new object-uid-new - - live 3600s",
                "pending uid-pending Runtime/Runtime-source objects/object-pending object-uid-pending Pending - live 3600s",
                "undated uid-undated Shoot/Shoot-source objects/object-undated object-uid-undated - - live 0s",
                "unnamed uid-unnamed Cluster/Cluster-source objects/- - - - live 3600s",
            ]
        );
        // Under the ledger's lock the views are shared, not copied.
        let views = source_views(&inv, "kcp");
        assert!(
            views
                .iter()
                .zip(inv.source_claims("kcp"))
                .all(|(v, held)| Arc::ptr_eq(v, held))
        );
    }

    #[test]
    fn a_claim_re_created_under_its_name_gives_the_one_record_of_the_newer() {
        // The old claim was deleted while the claim watch was away; until the re-list ends the
        // index holds both (by uid). Whichever uid sorts first, the record is the newer claim's.
        use crate::api::{AccountClaimStatus, ClaimPhase};
        let bound = |binding: &str, uid: &str, rv: &str| {
            stored("c", "kcp", Some("Shoot"), |c| {
                c.metadata.uid = Some(uid.into());
                c.metadata.resource_version = Some(rv.into());
                c.status = Some(AccountClaimStatus {
                    observed_generation: Some(1),
                    phase: Some(ClaimPhase::Bound),
                    credentials_binding_name: Some(binding.into()),
                    binding_namespace: Some("garden".into()),
                    ..Default::default()
                });
            })
        };
        let now: jiff::Timestamp = "2026-11-27T04:00:00Z".parse().unwrap();
        for (old_uid, new_uid) in [("a-old", "b-new"), ("b-old", "a-new")] {
            let claims = [bound("b1", old_uid, "5"), bound("b2", new_uid, "9")];
            let inv = crate::pools::fixtures::inventory(
                vec![],
                claims.iter().map(|c| c.view()).collect(),
                vec![],
            );
            let records = source_records(&source_views(&inv, "kcp"), now);
            assert_eq!(records.len(), 1, "one record per name");
            assert_eq!(records[0].uid.as_deref(), Some(new_uid));
            assert_eq!(records[0].binding.as_deref(), Some("b2"));
        }
    }

    #[test]
    fn a_pass_runs_again_only_when_what_it_reads_moved_or_on_the_resync() {
        let done = stamp(3, 7);
        assert!(!must_run(Some(&done), &stamp(3, 7), false));
        assert!(must_run(Some(&done), &stamp(3, 7), true), "the resync");
        assert!(
            must_run(Some(&done), &stamp(4, 7), false),
            "a source claim moved"
        );
        assert!(
            must_run(Some(&done), &stamp(3, 8), false),
            "a request object moved"
        );
        assert!(
            must_run(None, &stamp(3, 7), false),
            "the last pass had actions"
        );
    }
}
