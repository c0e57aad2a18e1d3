//! One pass of the source controller over everything it watches, as a pure plan: which claims
//! to create (adoptions, Clusters named by the API server), label or delete (their object is
//! gone), which ClusterConfigs to write or delete, and the status of each source.
//!
//! Level-based: the pass is computed from the caches as they are, and repeating it after its
//! actions finished plans nothing. A claim is deleted only when its kind's cache is synced, the
//! claim read live is older than the grace period counted from its creation or from the
//! webhook's last hand-out, whichever is later (`clean_up`: the webhook creates or hands back a
//! claim before the API server stores its object, and the object may be refused by a later
//! admission step), and the caller has then confirmed with a read that the object is gone.
//!
//! Only ClusterConfigs the operator created (its managed-by label and the annotation naming this
//! claim) are rewritten or deleted; a Cluster that points at any other gets no write, and its
//! source's status says so.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::clusterconfig::{ClusterConfigFor, cluster_config, sets_binding};
use super::kinds::Watched;
use super::naming::{
    ANNOTATION_ACCOUNT_CLAIM, ANNOTATION_ADMITTED_AT, ANNOTATION_TENANT_RULE, LABEL_MANAGED_BY,
    MANAGED_BY, claim_name, claim_object,
};
use super::{CompiledSource, CompiledSources};
use crate::claim_state::SourceRef;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{AccountClaimStatus, BindingKind, ClaimPhase, SourceKind, SourceStatus};
use crate::claim_state::SourceFacts;

/// A source-created claim, as the pass sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimRecord {
    pub name: String,
    pub uid: Option<String>,
    pub source: SourceRef,
    pub phase: Option<ClaimPhase>,
    pub binding: Option<String>,
    pub age: Duration,
    pub deleting: bool,
}

impl ClaimRecord {
    /// `None` for claims no source created.
    pub fn from_claim(
        meta: &ObjectMeta,
        status: Option<&AccountClaimStatus>,
        now: jiff::Timestamp,
    ) -> Option<Self> {
        let facts = SourceFacts::of(meta, status)?;
        Some(Self::from_facts(
            &facts,
            meta.name.clone()?,
            meta.uid.clone(),
            meta.deletion_timestamp.is_some(),
            now,
        ))
    }

    /// The record of a claim with `facts` (the index keeps them), its age counted to `now`.
    pub fn from_facts(
        facts: &SourceFacts,
        name: String,
        uid: Option<String>,
        deleting: bool,
        now: jiff::Timestamp,
    ) -> Self {
        Self {
            name,
            uid,
            source: facts.source.clone(),
            phase: facts.phase,
            binding: facts.binding.clone(),
            age: age(facts.created, now),
            deleting,
        }
    }
}

/// A claim's age for the plan's first sort only, by the local clock: the clean-up decides on the
/// claim read live, by the API server's clock (`clean_up`).
fn age(created: Option<jiff::Timestamp>, now: jiff::Timestamp) -> Duration {
    created
        .and_then(|t| now.duration_since(t).try_into().ok())
        .unwrap_or_default()
}

/// A claim as the clean-up reads it from the API server, before it looks for the object: the
/// watch cache drops annotations, and the resourceVersion read here conditions the delete.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveClaim {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// `creationTimestamp`, set by the API server.
    pub created: Option<jiff::Timestamp>,
    /// The webhook's last hand-out stamp (`ANNOTATION_ADMITTED_AT`), as written.
    pub admitted_at: Option<String>,
    pub deleting: bool,
}

impl LiveClaim {
    pub fn from_meta(meta: &ObjectMeta) -> Self {
        Self {
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            admitted_at: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_ADMITTED_AT))
                .cloned(),
            deleting: meta.deletion_timestamp.is_some(),
        }
    }

    /// When the claim last served an admission: its creation or the webhook's last stamp,
    /// whichever is later. A stamp that does not parse is not the webhook's and is ignored.
    pub fn last_admitted(&self) -> Option<jiff::Timestamp> {
        let stamp = self
            .admitted_at
            .as_deref()
            .and_then(|s| s.parse::<jiff::Timestamp>().ok());
        match (self.created, stamp) {
            (Some(c), Some(s)) => Some(c.max(s)),
            (c, s) => c.or(s),
        }
    }
}

/// What the clean-up does with a claim whose object the cache does not show, once read live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanUp {
    /// Old enough: confirm with a read that the object is gone, then delete the claim only if it
    /// is still this uid at this resourceVersion (a webhook stamping it meanwhile wins).
    CheckObject {
        uid: String,
        resource_version: String,
    },
    /// Handed out too recently: an admission may still be storing its object.
    Wait { left: Duration },
    /// Not the claim the pass saw (another uid), already being deleted, or without the
    /// preconditions a delete needs.
    Leave,
}

/// Decides the clean-up of one claim read live at `now`, the API server's clock (the `Date` of
/// that read's answer), so that its age is measured between the API server's timestamps.
///
/// The grace covers what is left of one admission after the webhook answered: milliseconds
/// normally, but later mutating and validating webhooks may hold the request until the API
/// server's request timeout, hence the grace is never less than that timeout plus an allowance
/// for clock skew (`RunArgs::effective_source_grace`). The stamp comes from the clock of the
/// webhook replica that wrote it; a skew between that clock and the API server's moves the end
/// of the wait by as much, which the allowance covers. A stamp written after this read needs
/// no clock at all: it changes the resourceVersion, so the delete fails.
pub fn clean_up(
    live: &LiveClaim,
    planned_uid: Option<&str>,
    now: jiff::Timestamp,
    grace: Duration,
) -> CleanUp {
    let (Some(uid), Some(rv), Some(last)) = (
        live.uid.as_deref(),
        live.resource_version.as_deref(),
        live.last_admitted(),
    ) else {
        return CleanUp::Leave;
    };
    if live.deleting || planned_uid.is_some_and(|p| p != uid) {
        return CleanUp::Leave;
    }
    let age: Duration = now
        .duration_since(last)
        .try_into()
        .unwrap_or(Duration::ZERO);
    if age < grace {
        return CleanUp::Wait { left: grace - age };
    }
    CleanUp::CheckObject {
        uid: uid.to_string(),
        resource_version: rv.to_string(),
    }
}

/// What a kind's watch shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KindView {
    /// Synced once; otherwise nothing of this kind is decided.
    pub ready: bool,
    /// Why it cannot watch, if it cannot.
    pub error: Option<String>,
    /// Shared with the cache that read them, which reads each object version once.
    pub objects: Vec<Arc<Watched>>,
}

/// Everything one pass reads.
#[derive(Clone, Debug)]
pub struct PassInput<'a> {
    pub sources: &'a CompiledSources,
    pub binding_kind: BindingKind,
    pub claim_namespace: &'a str,
    pub kinds: BTreeMap<SourceKind, KindView>,
    pub claims: Vec<ClaimRecord>,
    /// ClusterConfigs the operator manages; `None` while their watch is not synced.
    pub cluster_configs: Option<Vec<Arc<Value>>>,
    pub grace: Duration,
}

/// One thing to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create this AccountClaim (an adoption, or the claim of a Cluster named by the server).
    CreateClaim { claim: Value },
    /// Merge these labels into the claim (the object's UID).
    LabelClaim {
        name: String,
        labels: BTreeMap<String, String>,
    },
    /// The claim's object is missing from the cache: read the claim live, and if it is old
    /// enough (`clean_up`) and a read confirms the object is gone, delete the claim, then these
    /// ClusterConfigs of its own.
    DeleteIfGone {
        claim: String,
        uid: Option<String>,
        source: SourceRef,
        cluster_configs: Vec<ConfigRef>,
    },
    /// Create this ClusterConfig (`version: None`), or rewrite one of the operator's own,
    /// conditioned on the resourceVersion its ownership was checked at.
    PutClusterConfig {
        object: Value,
        version: Option<String>,
    },
    /// A ClusterConfig the operator made whose claim and Cluster are both gone.
    DeleteClusterConfig(ConfigRef),
}

/// A ClusterConfig of the operator's, as the pass saw it: deleted only if it is still that
/// object at that version (uid and resourceVersion preconditions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigRef {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl ConfigRef {
    fn of(cfg: &Value) -> Option<Self> {
        Some(Self {
            namespace: str_at(cfg, "/metadata/namespace")?.to_string(),
            name: str_at(cfg, "/metadata/name")?.to_string(),
            uid: str_at(cfg, "/metadata/uid").map(str::to_string),
            resource_version: str_at(cfg, "/metadata/resourceVersion").map(str::to_string),
        })
    }
}

/// Whether a ClusterConfig is the one the operator created for `claim` (`<namespace>/<name>`):
/// its managed-by label and the claim annotation. Anything else is foreign: never written.
pub fn owned_by(cfg: &Value, claim: &str) -> bool {
    str_at(cfg, &pointer("labels", LABEL_MANAGED_BY)) == Some(MANAGED_BY)
        && str_at(cfg, &pointer("annotations", ANNOTATION_ACCOUNT_CLAIM)) == Some(claim)
}

/// The plan of one pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pass {
    pub actions: Vec<Action>,
    pub statuses: Vec<SourceStatus>,
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The JSON pointer of a metadata label or annotation.
fn pointer(map: &str, key: &str) -> String {
    format!(
        "/metadata/{map}/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

fn key(ns: &str, name: &str) -> (String, String) {
    (ns.to_string(), name.to_string())
}

#[derive(Default)]
struct Counts {
    matching: i64,
    unserved: i64,
    /// Served Clusters pointing at a ClusterConfig the operator does not own (`cluster → config`).
    foreign: Vec<String>,
}

/// The running state of one pass: what it has planned so far and what it has seen.
struct Planner<'i, 'a> {
    input: &'i PassInput<'a>,
    actions: Vec<Action>,
    counts: BTreeMap<&'i str, Counts>,
    by_name: BTreeMap<&'i str, &'i ClaimRecord>,
    /// Claims whose object a synced cache shows.
    seen: BTreeSet<&'i str>,
    /// The operator's ClusterConfigs by `(namespace, name)`.
    configs: BTreeMap<(String, String), &'i Value>,
    /// ClusterConfigs a served Cluster references: never strays.
    referenced_configs: BTreeSet<(String, String)>,
}

/// One watched object, with what the pass derived from it.
struct Seen<'i> {
    kind: SourceKind,
    obj: &'i Watched,
    ns: String,
    name: String,
    cname: String,
    /// The ClusterConfig a Cluster references, if it is a Cluster that references one.
    config: Option<String>,
    uid: Option<String>,
}

/// Plans one pass.
pub fn plan_pass(input: &PassInput<'_>) -> Pass {
    let mut p = Planner::new(input);
    for (kind, view) in &input.kinds {
        if view.ready {
            for obj in &view.objects {
                p.plan_object(*kind, obj);
            }
        }
    }
    p.plan_missing_objects();
    p.plan_stray_configs();
    let statuses = input
        .sources
        .iter()
        .map(|s| source_status(input, s, p.counts.get(s.id.as_str())))
        .collect();
    Pass {
        actions: p.actions,
        statuses,
    }
}

impl<'i, 'a> Planner<'i, 'a> {
    /// Indexes the claims and the ClusterConfigs once, so each object is a lookup.
    fn new(input: &'i PassInput<'a>) -> Self {
        let configs = input
            .cluster_configs
            .iter()
            .flatten()
            .map(|c| &**c)
            .filter_map(|c| {
                Some((
                    key(
                        str_at(c, "/metadata/namespace")?,
                        str_at(c, "/metadata/name")?,
                    ),
                    c,
                ))
            })
            .collect();
        Self {
            input,
            actions: Vec::new(),
            counts: BTreeMap::new(),
            by_name: input.claims.iter().map(|c| (c.name.as_str(), c)).collect(),
            seen: BTreeSet::new(),
            configs,
            referenced_configs: BTreeSet::new(),
        }
    }

    /// One object of a synced kind: counted for its source, and its claim (if any) kept in step
    /// or created.
    fn plan_object(&mut self, kind: SourceKind, obj: &'i Watched) {
        let facts = &obj.facts;
        let Some(name) = facts.name.clone() else {
            return;
        };
        let ns = facts.namespace.clone();
        let cname = claim_name(kind, &ns, &name);
        let claim = self.by_name.get(cname.as_str()).copied();
        if let Some(c) = claim {
            self.seen.insert(c.name.as_str());
        }
        let config = obj.cluster_config.clone();
        if let Some(c) = &config {
            self.referenced_configs.insert(key(&ns, c));
        }
        let source = self.input.sources.serving(kind, facts);
        if let Some(s) = source {
            self.counts.entry(s.id.as_str()).or_default().matching += 1;
        }
        let seen = Seen {
            kind,
            obj,
            ns,
            name,
            cname,
            config,
            uid: obj.uid.clone(),
        };
        match claim {
            Some(c) => self.plan_existing_claim(&seen, c),
            None => {
                if let Some(s) = source {
                    self.plan_new_claim(seen, s);
                }
            }
        }
    }

    /// A claim the object already has: its UID label follows the object, and a bound Cluster's
    /// ClusterConfig is written.
    fn plan_existing_claim(&mut self, o: &Seen<'i>, c: &'i ClaimRecord) {
        if o.uid.is_some() && c.source.uid != o.uid && !c.deleting {
            let mut r = c.source.clone();
            r.uid = o.uid.clone();
            r.name = Some(o.name.clone());
            self.actions.push(Action::LabelClaim {
                name: c.name.clone(),
                labels: r.labels(),
            });
        }
        if let (Some(cfg), Some(ClaimPhase::Bound), Some(binding)) =
            (&o.config, c.phase, &c.binding)
            && self.input.cluster_configs.is_some()
        {
            self.plan_cluster_config(o, c, cfg, binding);
        }
    }

    /// The ClusterConfig of a bound Cluster's claim: created, rewritten if it names another
    /// binding, or left alone (and reported) if it is not the operator's.
    fn plan_cluster_config(&mut self, o: &Seen<'i>, c: &'i ClaimRecord, cfg: &str, binding: &str) {
        let input = self.input;
        let (ns, name) = (&o.ns, &o.name);
        let claim_ref = format!("{}/{}", input.claim_namespace, c.name);
        let want = cluster_config(&ClusterConfigFor {
            name: cfg,
            namespace: ns,
            binding,
            binding_kind: input.binding_kind,
            source_id: &c.source.source_id,
            claim: &claim_ref,
        });
        match self.configs.get(&key(ns, cfg)).copied() {
            None => self.actions.push(Action::PutClusterConfig {
                object: want,
                version: None,
            }),
            // The annotation is the Cluster's to set: it may name a config of
            // someone else's, which is never written (docs/design.md §5, invariant 6).
            Some(have) if !owned_by(have, &claim_ref) => self
                .counts
                .entry(c.source.source_id.as_str())
                .or_default()
                .foreign
                .push(format!("{ns}/{name} → {ns}/{cfg}")),
            Some(have) if !sets_binding(have, binding, input.binding_kind) => {
                // Conditioned on the version whose ownership was checked: a
                // config changed since is looked at again by the next pass.
                if let Some(v) = str_at(have, "/metadata/resourceVersion") {
                    self.actions.push(Action::PutClusterConfig {
                        object: want,
                        version: Some(v.to_string()),
                    })
                }
            }
            Some(_) => {}
        }
    }

    /// An object without a claim that a source serves: a Runtime with a binding is adopted and
    /// a Cluster that references a ClusterConfig gets a claim; anything else waits for the
    /// webhook and counts as unserved.
    fn plan_new_claim(&mut self, o: Seen<'i>, s: &'i CompiledSource) {
        let existing_binding = o.obj.existing_binding.clone();
        let adopt = o.kind == SourceKind::Runtime && existing_binding.is_some();
        let cluster_needs_claim = o.config.is_some();
        if !(adopt || cluster_needs_claim) {
            if existing_binding.is_none() && o.kind != SourceKind::Cluster {
                self.counts.entry(s.id.as_str()).or_default().unserved += 1;
            }
            return;
        }
        // Only the kinds a pass derives claims for are kept whole (`SourceKind::watched`), as
        // text: read here, for an object that has no claim yet.
        let object = o.obj.object();
        let Some(Ok(mut spec)) = object.as_ref().map(|obj| s.derive(obj)) else {
            self.counts.entry(s.id.as_str()).or_default().unserved += 1;
            return;
        };
        // The webhook's record of the user's rule stands for the user, whom only admission knows;
        // an adoption is checked without it (by the object's kind and namespace).
        let tenant_rule = if adopt {
            spec.adopt_binding = existing_binding;
            None
        } else {
            object
                .as_ref()
                .and_then(|obj| str_at(obj, &pointer("annotations", ANNOTATION_TENANT_RULE)))
        };
        let r = SourceRef {
            source_id: s.id.clone(),
            kind: o.kind,
            namespace: o.ns,
            name: Some(o.name),
            uid: o.uid,
        };
        self.actions.push(Action::CreateClaim {
            claim: claim_object(&r, self.input.claim_namespace, &o.cname, &spec, tenant_rule),
        });
    }

    /// Claims whose object the synced cache does not show: deleted once a live read confirms.
    fn plan_missing_objects(&mut self) {
        let input = self.input;
        for c in &input.claims {
            let ready = input.kinds.get(&c.source.kind).is_some_and(|v| v.ready);
            if self.seen.contains(c.name.as_str()) || c.deleting || !ready || c.age < input.grace {
                continue;
            }
            let claim_ref = format!("{}/{}", input.claim_namespace, c.name);
            let cluster_configs = input
                .cluster_configs
                .iter()
                .flatten()
                .map(|cfg| &**cfg)
                .filter(|cfg| owned_by(cfg, &claim_ref))
                .filter_map(ConfigRef::of)
                .collect();
            self.actions.push(Action::DeleteIfGone {
                claim: c.name.clone(),
                uid: c.uid.clone(),
                source: c.source.clone(),
                cluster_configs,
            });
        }
    }

    /// ClusterConfigs of ours that neither a Cluster references nor a claim explains; decided
    /// only once the Cluster cache is synced, so a config is never taken for a stray early.
    fn plan_stray_configs(&mut self) {
        let input = self.input;
        let clusters_ready = input
            .kinds
            .get(&SourceKind::Cluster)
            .is_some_and(|v| v.ready);
        if !clusters_ready {
            return;
        }
        let claim_refs: BTreeSet<String> = input
            .claims
            .iter()
            .map(|c| format!("{}/{}", input.claim_namespace, c.name))
            .collect();
        let prefix = format!("{}/", input.claim_namespace);
        for cfg in input.cluster_configs.iter().flatten() {
            let (Some(ns), Some(name)) = (
                str_at(cfg, "/metadata/namespace"),
                str_at(cfg, "/metadata/name"),
            ) else {
                continue;
            };
            let managed = str_at(cfg, &pointer("labels", LABEL_MANAGED_BY)) == Some(MANAGED_BY);
            // Another operator instance (its own claim namespace) may manage ClusterConfigs in
            // the same cluster: only those whose claim would live here are this one's.
            let claim = str_at(cfg, &pointer("annotations", ANNOTATION_ACCOUNT_CLAIM))
                .filter(|r| r.starts_with(&prefix));
            let Some(claim) = claim.filter(|_| managed) else {
                continue;
            };
            if !claim_refs.contains(claim)
                && !self.referenced_configs.contains(&key(ns, name))
                && let Some(r) = ConfigRef::of(cfg)
            {
                self.actions.push(Action::DeleteClusterConfig(r));
            }
        }
    }
}

/// The status of one source: what its watch shows, its counts and its claims by phase.
fn source_status(input: &PassInput<'_>, s: &CompiledSource, c: Option<&Counts>) -> SourceStatus {
    let view = input.kinds.get(&s.kind);
    let mine: Vec<&ClaimRecord> = input
        .claims
        .iter()
        .filter(|c| c.source.source_id == s.id)
        .collect();
    let phase = |p| mine.iter().filter(|c| c.phase == Some(p)).count() as i64;
    let watching = view.is_some_and(|v| v.ready && v.error.is_none());
    SourceStatus {
        id: s.id.clone(),
        kind: s.kind.as_str().into(),
        watching,
        message: source_message(s, view, c, mine.len()),
        matching: c.map_or(0, |c| c.matching),
        claims: mine.len() as i64,
        bound: phase(ClaimPhase::Bound),
        pending: phase(ClaimPhase::Pending)
            + mine.iter().filter(|c| c.phase.is_none()).count() as i64,
        failed: phase(ClaimPhase::Failed),
        unserved: c.map_or(0, |c| c.unserved),
    }
}

/// The status message of one source, in the words a person reads in `kubectl describe`.
fn source_message(
    s: &CompiledSource,
    view: Option<&KindView>,
    c: Option<&Counts>,
    claims: usize,
) -> String {
    let message = match view {
        None => "not watched yet".to_string(),
        Some(v) if v.error.is_some() => format!(
            "cannot watch {} ({}): {}",
            s.kind.resource().plural,
            s.kind.resource().api_version,
            v.error.clone().unwrap_or_default()
        ),
        Some(v) if !v.ready => "listing objects".to_string(),
        Some(_) => format!(
            "{} matching object(s), {} claim(s)",
            c.map_or(0, |c| c.matching),
            claims
        ),
    };
    match c.map(|c| &c.foreign).filter(|f| !f.is_empty()) {
        Some(f) => format!(
            "{message}; not written, ClusterConfig not the operator's: {}",
            f.join(", ")
        ),
        None => message,
    }
}
