//! The admission decision for a request object, in two pure steps around the I/O:
//! [`plan`] reads the object and says what to do (leave it, deny it, or create/find its
//! AccountClaim), the webhook does that and waits for the leader's decision, and [`finish`]
//! turns the claim's state into the answer: a JSON patch that writes the binding where the
//! platform reads it, or a denial that names the field and the reason.
//!
//! Rules (docs/sources.md):
//! - An object no source matches, a Shoot outside the binding namespace, and a Shoot or Runtime
//!   that already names a binding are left as they are (a Runtime's binding is adopted by the
//!   operator afterwards, not here).
//! - A CREATE is served through the claim `<kind>.<namespace>.<name>`; an openmcp Cluster whose
//!   name the API server generates gets its ClusterConfig reference now and its claim once it
//!   exists (the claim needs the name: it derives the Shoot name from it).
//! - A dry run never creates a claim: it reports what would happen, and uses a decision that
//!   already exists.
//! - An UPDATE that changes or clears a binding name the operator set, drops the ClusterConfig
//!   reference of a served Cluster or changes its `accountpool.io/cluster-config` annotation, is
//!   denied: a second binding would move a running cluster to another account (Gardener itself
//!   allows that change), and the annotation names the only ClusterConfig the operator writes.
//! - A claim being deleted never answers `Bound`, and a claim read again counts only if it is the
//!   same claim (uid) for the same request.
//! - The tenant policy is decided here for every request that leads to a claim, because only
//!   admission knows the user: a claim the webhook creates, and a Cluster the source pass will
//!   claim for ([`tenant_ask`]). The allowing rule is recorded on the claim or the object, and on
//!   every CREATE and UPDATE the record is the webhook's ([`record_ops`]), never the requester's.

use serde_json::{Value, json};

use super::naming::{
    ANNOTATION_ACCOUNT_CLAIM, ANNOTATION_CLUSTER_CONFIG, ANNOTATION_TENANT_RULE, claim_name,
    cluster_config_name, generated_cluster_config_name,
};
use super::{CompiledSource, CompiledSources};
use crate::api::conditions::{reasons, types};
use crate::api::{AccountClaim, AccountClaimSpec, BindingKind, ClaimPhase, SourceKind};
use crate::claim_state::SourceRef;

/// The admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Other,
}

/// One admission request, as plain data.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub operation: Operation,
    pub dry_run: bool,
    pub kind: SourceKind,
    pub namespace: &'a str,
    pub object: &'a Value,
    pub old_object: Option<&'a Value>,
}

/// What the config in force says about serving requests.
#[derive(Clone, Copy, Debug)]
pub struct Serving<'a> {
    pub sources: &'a CompiledSources,
    pub binding_kind: BindingKind,
    pub binding_namespace: &'a str,
    /// Where the operator creates the AccountClaims of served objects.
    pub claim_namespace: &'a str,
    /// A random suffix (lowercase letters and digits) for the ClusterConfig of a Cluster whose
    /// name is generated; drawn by the caller so that this stays pure.
    pub random: &'a str,
}

/// Step one: what to do with the request.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Not a request of any source: admit unchanged.
    Untouched,
    /// Refuse, with this message.
    Deny(String),
    /// Admit with these JSON-patch operations and warnings; nothing to claim now.
    Patch {
        ops: Vec<Value>,
        warnings: Vec<String>,
    },
    /// Serve through an AccountClaim: find or create it, wait for its decision, then [`finish`].
    Claim(Box<ClaimPlan>),
    /// Refuse with `message` if `claim` exists (the object is served), else admit unchanged.
    DenyIfServed { claim: String, message: String },
}

/// The claim a CREATE is served through, and how to write its result into the object.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimPlan {
    pub source: SourceRef,
    pub claim_namespace: String,
    pub claim_name: String,
    pub spec: AccountClaimSpec,
    pub dry_run: bool,
    /// Where the binding name goes in the object (`None` for Clusters).
    pub binding_path: Option<&'static str>,
    /// The ClusterConfig to reference (Clusters only).
    pub cluster_config: Option<String>,
    /// Whether the object has these maps: a JSON patch adds to a map that exists and creates
    /// one that does not.
    pub has_annotations: bool,
    pub has_cluster_configs: bool,
    /// The `spec.tenants` rule the webhook allowed the user under (set by the webhook, which
    /// knows the user); recorded on the claim for the operator's own check.
    pub tenant_rule: Option<String>,
}

impl ClaimPlan {
    /// `<namespace>/<name>` of the claim.
    pub fn claim_ref(&self) -> String {
        format!("{}/{}", self.claim_namespace, self.claim_name)
    }

    /// The AccountClaim to create.
    pub fn claim_object(&self) -> Value {
        super::naming::claim_object(
            &self.source,
            &self.claim_namespace,
            &self.claim_name,
            &self.spec,
            self.tenant_rule.as_deref(),
        )
    }
}

/// What the webhook learnt about the claim.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimState {
    Bound {
        binding: String,
    },
    /// The operator decided it cannot serve the request (Ready=False with a final reason).
    Refused {
        reason: String,
        message: String,
    },
    /// No decision (yet): the wait ended, or, in a dry run, there is no claim.
    Undecided {
        reason: Option<String>,
        message: Option<String>,
    },
    /// A claim of this name exists for a different request (an earlier object of the same name
    /// whose claim is still being released).
    Conflict {
        existing: Box<AccountClaimSpec>,
    },
}

/// The answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Allow {
        ops: Vec<Value>,
        warnings: Vec<String>,
    },
    Deny(String),
}

/// Reasons under which the leader is still working on a claim: keep waiting.
const UNDECIDED_REASONS: [&str; 2] = [reasons::PROGRESSING, reasons::CONFIG_MISSING];

/// Where a claim stands, for the webhook. A claim being deleted is on its way out with its
/// binding: it holds the name (Conflict) and never answers `Bound`.
pub fn claim_state(claim: &AccountClaim) -> ClaimState {
    if claim.metadata.deletion_timestamp.is_some() {
        return ClaimState::Conflict {
            existing: Box::new(claim.spec.clone()),
        };
    }
    let status = claim.status.as_ref();
    if let Some(s) = status
        && s.phase == Some(ClaimPhase::Bound)
        && let Some(b) = &s.credentials_binding_name
    {
        return ClaimState::Bound { binding: b.clone() };
    }
    let ready = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == types::READY));
    match ready {
        Some(c) if c.status == "False" && !UNDECIDED_REASONS.contains(&c.reason.as_str()) => {
            ClaimState::Refused {
                reason: c.reason.clone(),
                message: c.message.clone(),
            }
        }
        Some(c) => ClaimState::Undecided {
            reason: Some(c.reason.clone()),
            message: Some(c.message.clone()),
        },
        None => ClaimState::Undecided {
            reason: None,
            message: None,
        },
    }
}

fn describe(kind: SourceKind, ns: &str, name: Option<&str>) -> String {
    format!(
        "{} {ns}/{}",
        kind.as_str(),
        name.unwrap_or("(name to be generated)")
    )
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn annotation_ops(has_annotations: bool, entries: &[(&str, String)]) -> Vec<Value> {
    if has_annotations {
        entries
            .iter()
            .map(|(k, v)| json!({"op": "add", "path": format!("/metadata/annotations/{}", escape(k)), "value": v}))
            .collect()
    } else {
        let map: serde_json::Map<String, Value> = entries
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        vec![json!({"op": "add", "path": "/metadata/annotations", "value": map})]
    }
}

fn cluster_config_ops(has_cluster_configs: bool, name: &str) -> Value {
    if has_cluster_configs {
        json!({"op": "add", "path": "/spec/clusterConfigs/-", "value": {"name": name}})
    } else {
        json!({"op": "add", "path": "/spec/clusterConfigs", "value": [{"name": name}]})
    }
}

fn references(obj: &Value, config: &str) -> bool {
    obj.pointer("/spec/clusterConfigs")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            a.iter()
                .any(|r| r.get("name").and_then(Value::as_str) == Some(config))
        })
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// Step one.
pub fn plan(req: &Request<'_>, serving: &Serving<'_>) -> Plan {
    match req.operation {
        Operation::Create => plan_create(req, serving),
        Operation::Update => plan_update(req, serving),
        Operation::Other => Plan::Untouched,
    }
}

fn plan_create(req: &Request<'_>, serving: &Serving<'_>) -> Plan {
    let obj = req.object;
    if req.kind == SourceKind::Shoot && req.namespace != serving.binding_namespace {
        return Plan::Untouched;
    }
    let mut facts = req.kind.facts(obj);
    if facts.namespace.is_empty() {
        facts.namespace = req.namespace.to_string();
    }
    let Some(source) = serving.sources.serving(req.kind, &facts) else {
        return Plan::Untouched;
    };
    if req.kind.existing_binding(obj).is_some() {
        return Plan::Untouched;
    }
    let what = describe(req.kind, &facts.namespace, facts.name.as_deref());
    let spec = match source.derive(obj) {
        Ok(spec) => spec,
        Err(problems) => {
            let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
            return Plan::Deny(format!(
                "hap-operator cannot serve {what} (request source `{}`): {}",
                source.id,
                list.join("; ")
            ));
        }
    };
    let (has_annotations, has_cluster_configs) = present_maps(obj);
    let Some(name) = facts.name.clone() else {
        return plan_unnamed(req, serving, source, &facts.namespace, &what);
    };
    let cluster_config = (req.kind == SourceKind::Cluster).then(|| cluster_config_name(&name));
    if let Some(c) = &cluster_config
        && references(obj, c)
    {
        return Plan::Untouched;
    }
    Plan::Claim(Box::new(ClaimPlan {
        claim_name: claim_name(req.kind, &facts.namespace, &name),
        source: SourceRef {
            source_id: source.id.clone(),
            kind: req.kind,
            namespace: facts.namespace.clone(),
            name: Some(name),
            uid: None,
        },
        claim_namespace: serving.claim_namespace.to_string(),
        spec,
        dry_run: req.dry_run,
        binding_path: req.kind.binding_path(serving.binding_kind),
        cluster_config,
        has_annotations,
        has_cluster_configs,
        tenant_rule: None,
    }))
}

/// Whether the object has `metadata.annotations` and `spec.clusterConfigs` already: a JSON
/// patch adds to a map or list that exists, and creates one that does not.
fn present_maps(obj: &Value) -> (bool, bool) {
    (
        obj.pointer("/metadata/annotations")
            .is_some_and(Value::is_object),
        obj.pointer("/spec/clusterConfigs")
            .is_some_and(Value::is_array),
    )
}

/// A create with `generateName` only: the claim's name would be unknown, so only a Cluster is
/// served, and later (its ClusterConfig named and referenced now, the claim made by the pass
/// once the Cluster exists); anything else is refused with the field to set.
fn plan_unnamed(
    req: &Request<'_>,
    serving: &Serving<'_>,
    source: &CompiledSource,
    namespace: &str,
    what: &str,
) -> Plan {
    if req.kind != SourceKind::Cluster {
        return Plan::Deny(format!(
            "hap-operator cannot serve {what} (request source `{}`): metadata.name: set a name; generateName is not supported for a {} that needs a binding at creation",
            source.id,
            req.kind.as_str()
        ));
    }
    let obj = req.object;
    let (has_annotations, has_cluster_configs) = present_maps(obj);
    let generate = obj
        .pointer("/metadata/generateName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let config = generated_cluster_config_name(generate, serving.random);
    let mut ops = vec![cluster_config_ops(has_cluster_configs, &config)];
    ops.extend(annotation_ops(
        has_annotations,
        &[(ANNOTATION_CLUSTER_CONFIG, config.clone())],
    ));
    Plan::Patch {
        ops,
        warnings: vec![format!(
            "hap-operator: ClusterConfig {namespace}/{config} will carry this Cluster's binding once the Cluster exists and its AccountClaim is bound (request source `{}`)",
            source.id
        )],
    }
}

fn plan_update(req: &Request<'_>, serving: &Serving<'_>) -> Plan {
    let Some(old) = req.old_object else {
        return Plan::Untouched;
    };
    let facts = req.kind.facts(old);
    let Some(name) = facts.name.as_deref() else {
        return Plan::Untouched;
    };
    let ns = if facts.namespace.is_empty() {
        req.namespace
    } else {
        &facts.namespace
    };
    let claim = claim_name(req.kind, ns, name);
    let what = describe(req.kind, ns, Some(name));
    if req.kind == SourceKind::Cluster {
        let before = annotation(old, ANNOTATION_CLUSTER_CONFIG);
        let after = annotation(req.object, ANNOTATION_CLUSTER_CONFIG);
        if before != after {
            let show =
                |v: Option<&str>| v.map_or_else(|| "nothing".to_string(), |v| format!("`{v}`"));
            return Plan::DenyIfServed {
                claim: format!("{}/{claim}", serving.claim_namespace),
                message: format!(
                    "{what}: annotation {ANNOTATION_CLUSTER_CONFIG} cannot change from {} to {}: it names the ClusterConfig hap-operator writes the binding into (AccountClaim {}/{claim}). Delete the Cluster to release it",
                    show(before),
                    show(after),
                    serving.claim_namespace
                ),
            };
        }
        let Some(config) = before else {
            return Plan::Untouched;
        };
        if references(old, config) && !references(req.object, config) {
            return Plan::DenyIfServed {
                claim: format!("{}/{claim}", serving.claim_namespace),
                message: format!(
                    "{what}: spec.clusterConfigs must keep `{config}`: that ClusterConfig carries the binding hap-operator assigned (AccountClaim {}/{claim}); without it the Shoot would move to another account. Delete the Cluster to release it",
                    serving.claim_namespace
                ),
            };
        }
        return Plan::Untouched;
    }
    let before = req.kind.existing_binding(old);
    let after = req.kind.existing_binding(req.object);
    match before {
        Some(b) if after.as_deref() != Some(b.as_str()) => {
            let field = req
                .kind
                .binding_path(serving.binding_kind)
                .map(|p| p.trim_start_matches('/').replace('/', "."))
                .unwrap_or_default();
            let to = after.map_or_else(|| "nothing".to_string(), |a| format!("`{a}`"));
            Plan::DenyIfServed {
                claim: format!("{}/{claim}", serving.claim_namespace),
                message: format!(
                    "{what}: {field} cannot change from `{b}` to {to}: hap-operator assigned it (AccountClaim {}/{claim}) and a second binding would move the running cluster to another account. Delete the {} to release it",
                    serving.claim_namespace,
                    req.kind.as_str()
                ),
            }
        }
        _ => Plan::Untouched,
    }
}

/// Whether an existing claim was made for this same request (an object re-created under the same
/// name with the same request may reuse its claim; any other difference must wait for release).
pub fn same_request(existing: &AccountClaimSpec, wanted: &AccountClaimSpec) -> bool {
    existing == wanted
}

/// Whether `claim` is the very claim a call created or used (`uid`) and still carries its
/// request: only such a claim may answer that call.
pub fn is_same_claim(claim: &AccountClaim, uid: Option<&str>, spec: &AccountClaimSpec) -> bool {
    uid.is_some() && claim.metadata.uid.as_deref() == uid && same_request(&claim.spec, spec)
}

/// What a call does after its delete of a refused or undecided claim lost its precondition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Retake {
    /// Nothing left to take back: the claim is gone, being deleted, or another one.
    Stop,
    /// The leader bound it meanwhile: it may answer `Bound` once stamped.
    Bound,
    /// Still ours and not bound: delete again, conditioned on this version.
    Retry { resource_version: Option<String> },
}

/// Step four, for a claim read again after a failed delete (`uid`: the one the call used).
pub fn retake(now: Option<&AccountClaim>, uid: Option<&str>, spec: &AccountClaimSpec) -> Retake {
    let Some(claim) = now.filter(|c| is_same_claim(c, uid, spec)) else {
        return Retake::Stop;
    };
    match claim_state(claim) {
        ClaimState::Bound { .. } => Retake::Bound,
        ClaimState::Conflict { .. } => Retake::Stop,
        ClaimState::Refused { .. } | ClaimState::Undecided { .. } => Retake::Retry {
            resource_version: claim.metadata.resource_version.clone(),
        },
    }
}

/// Step three: the answer for a CREATE, given what became of its claim.
pub fn finish(plan: &ClaimPlan, state: &ClaimState) -> Verdict {
    let what = plan.source.describe();
    let via = format!("request source `{}`", plan.source.source_id);
    match state {
        ClaimState::Bound { binding } => {
            let mut ops = Vec::new();
            if let Some(path) = plan.binding_path {
                ops.push(json!({"op": "add", "path": path, "value": binding}));
            }
            let mut notes = vec![(ANNOTATION_ACCOUNT_CLAIM, plan.claim_ref())];
            if let Some(c) = &plan.cluster_config {
                ops.push(cluster_config_ops(plan.has_cluster_configs, c));
                notes.push((ANNOTATION_CLUSTER_CONFIG, c.clone()));
            }
            ops.extend(annotation_ops(plan.has_annotations, &notes));
            let warnings = if plan.dry_run {
                vec![format!(
                    "hap-operator (dry run): AccountClaim {} is bound to {binding}; nothing was claimed",
                    plan.claim_ref()
                )]
            } else {
                Vec::new()
            };
            Verdict::Allow { ops, warnings }
        }
        ClaimState::Refused { reason, message } => Verdict::Deny(format!(
            "hap-operator cannot serve {what} ({via}): {reason}: {message}; nothing was claimed"
        )),
        ClaimState::Undecided { reason, message } if plan.dry_run => {
            let _ = (reason, message);
            Verdict::Allow {
                ops: Vec::new(),
                warnings: vec![format!(
                    "hap-operator (dry run): no binding assigned; a real request would create AccountClaim {} for globalAccount={}, plan={} ({via})",
                    plan.claim_ref(),
                    plan.spec.global_account,
                    plan.spec.plan
                )],
            }
        }
        ClaimState::Undecided { reason, message } => {
            let why = match (reason, message) {
                (Some(r), Some(m)) => format!(" (last state: {r}: {m})"),
                _ => " (the leader has not picked it up; is an operator replica leading?)".into(),
            };
            Verdict::Deny(format!(
                "hap-operator could not decide a binding for {what} in time ({via}){why}; AccountClaim {} is kept for a retry of this request (deleted if no such object appears within the source grace period), retry",
                plan.claim_ref()
            ))
        }
        // The earlier request may be another requester's: its global account and plan are not
        // this requester's to read.
        ClaimState::Conflict { .. } => Verdict::Deny(format!(
            "hap-operator cannot serve {what} ({via}) yet: AccountClaim {} still holds the request of an earlier object of this name; it goes once that object is released. Retry",
            plan.claim_ref(),
        )),
    }
}

/// What the tenant policy is asked for a request the source pass will create a claim for (an
/// openmcp Cluster), decided by the webhook because only it knows the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantAsk {
    pub source_id: String,
    pub namespace: String,
    pub global_account: String,
    /// The ClusterConfig the Cluster references (`None` while its name is to be generated).
    pub cluster_config: Option<String>,
}

/// The tenant decision a request needs at admission besides a [`Plan::Claim`]'s: a Cluster the
/// source pass will claim for — created with a generated name, created with its ClusterConfig
/// reference listed, or updated so that it becomes served and referenced or asks for something
/// else. `None` for every other request.
pub fn tenant_ask(req: &Request<'_>, serving: &Serving<'_>) -> Option<TenantAsk> {
    if req.kind != SourceKind::Cluster {
        return None;
    }
    match req.operation {
        Operation::Create => pass_claims(req, req.object, serving),
        Operation::Update => {
            let after = pass_claims(req, req.object, serving)?;
            let before = req.old_object.and_then(|o| pass_claims(req, o, serving));
            (before.as_ref() != Some(&after)).then_some(after)
        }
        Operation::Other => None,
    }
}

/// What the pass would claim for this Cluster: it is served, its request derives, and it is
/// referenced (or its name is still to be generated, which a CREATE references now).
fn pass_claims(req: &Request<'_>, obj: &Value, serving: &Serving<'_>) -> Option<TenantAsk> {
    let mut facts = req.kind.facts(obj);
    if facts.namespace.is_empty() {
        facts.namespace = req.namespace.to_string();
    }
    let source = serving.sources.serving(req.kind, &facts)?;
    let cluster_config = match &facts.name {
        Some(name) => Some(super::kinds::referenced_config(obj, name)?),
        None if req.operation == Operation::Create => None,
        None => return None,
    };
    let spec = source.derive(obj).ok()?;
    Some(TenantAsk {
        source_id: source.id.clone(),
        namespace: facts.namespace,
        global_account: spec.global_account,
        cluster_config,
    })
}

/// The operations that leave the object's [`ANNOTATION_TENANT_RULE`] as the webhook decided it:
/// `decided` is `Some(rule)` when the webhook decided the policy on this request (the allowing
/// rule, `None` without a policy), else the old object's record stands (nothing on a CREATE).
/// A record the requester wrote never stands. `ops` are the operations already planned, which
/// may create the annotations map.
pub fn record_ops(req: &Request<'_>, ops: &[Value], decided: Option<Option<&str>>) -> Vec<Value> {
    let want = match decided {
        Some(rule) => rule,
        None => req
            .old_object
            .filter(|_| req.operation == Operation::Update)
            .and_then(|o| annotation(o, ANNOTATION_TENANT_RULE)),
    };
    if annotation(req.object, ANNOTATION_TENANT_RULE) == want {
        return Vec::new();
    }
    let path = format!("/metadata/annotations/{}", escape(ANNOTATION_TENANT_RULE));
    let Some(rule) = want else {
        return vec![json!({"op": "remove", "path": path})];
    };
    let has_map = req
        .object
        .pointer("/metadata/annotations")
        .is_some_and(Value::is_object)
        || ops
            .iter()
            .any(|o| o.get("path").and_then(Value::as_str) == Some("/metadata/annotations"));
    if has_map {
        vec![json!({"op": "add", "path": path, "value": rule})]
    } else {
        vec![
            json!({"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION_TENANT_RULE: rule}}),
        ]
    }
}
