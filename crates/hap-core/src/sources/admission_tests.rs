//! Unit tests of the admission decision: every patch is applied to the object it was made for,
//! so a wrong pointer fails here rather than in the API server.

use serde_json::{Value, json};

use super::CompiledSources;
use super::admission::*;
use crate::api::{
    AccountClaim, AccountClaimStatus, BindingKind, ClaimPhase, HapConfigSpec, RequestSource,
    SourceKind,
};

fn sources(yaml: &str) -> CompiledSources {
    let list: Vec<RequestSource> = serde_saphyr::from_str(yaml).expect("sources yaml");
    let spec = HapConfigSpec {
        binding_namespace: "garden-kyma".into(),
        rules: Some(vec!["aws".into()]),
        request_sources: Some(list),
        ..Default::default()
    };
    CompiledSources::from_spec(&spec).expect("valid sources")
}

const SOURCES: &str = r#"
- id: shoots
  kind: Shoot
  matchLabels: {accountpool.io/request: "true"}
- id: kyma
  kind: Runtime
- id: mcp
  kind: Cluster
  matchPurposes: [{operator: ContainsAny, values: [mcp, workload]}]
  request:
    plan: {constant: gcp}
"#;

fn serving(s: &CompiledSources) -> Serving<'_> {
    Serving {
        sources: s,
        binding_kind: BindingKind::CredentialsBinding,
        binding_namespace: "garden-kyma",
        claim_namespace: "hap-system",
        random: "x7k2m9qa",
    }
}

fn create<'a>(kind: SourceKind, ns: &'a str, obj: &'a Value) -> Request<'a> {
    Request {
        operation: Operation::Create,
        dry_run: false,
        kind,
        namespace: ns,
        object: obj,
        old_object: None,
    }
}

fn shoot(labels: Value) -> Value {
    json!({
        "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
        "metadata": {"name": "s1", "namespace": "garden-kyma", "labels": labels},
        "spec": {"region": "eu-central-1", "provider": {"type": "aws"}},
    })
}

fn shoot_labels() -> Value {
    json!({"accountpool.io/request": "true", "accountpool.io/global-account": "ga-1", "accountpool.io/plan": "aws"})
}

fn apply(obj: &Value, ops: &[Value]) -> Value {
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops.to_vec())).expect("patch");
    let mut out = obj.clone();
    json_patch::patch(&mut out, &patch).expect("the patch applies");
    out
}

fn claim_plan(p: Plan) -> ClaimPlan {
    match p {
        Plan::Claim(c) => *c,
        other => panic!("expected a claim plan, got {other:?}"),
    }
}

fn bound(b: &str) -> ClaimState {
    ClaimState::Bound { binding: b.into() }
}

#[test]
fn an_opted_in_shoot_is_served_through_its_claim_and_gets_the_binding() {
    let s = sources(SOURCES);
    let obj = shoot(shoot_labels());
    let plan = claim_plan(plan(
        &create(SourceKind::Shoot, "garden-kyma", &obj),
        &serving(&s),
    ));
    assert_eq!(plan.claim_ref(), "hap-system/shoot.garden-kyma.s1");
    assert_eq!(plan.spec.global_account, "ga-1");
    assert_eq!(plan.spec.plan, "aws");
    assert_eq!(plan.spec.cluster_region.as_deref(), Some("eu-central-1"));
    assert_eq!(plan.spec.provider.as_deref(), Some("aws"));
    assert_eq!(plan.spec.shoot_name.as_deref(), Some("s1"));
    let claim = plan.claim_object();
    assert_eq!(
        claim["metadata"]["finalizers"],
        json!(["accountpool.io/release"])
    );
    assert_eq!(
        claim["metadata"]["labels"]["accountpool.io/source-id"],
        "shoots"
    );
    assert_eq!(
        claim["metadata"]["labels"]["accountpool.io/source-name"],
        "s1"
    );
    let Verdict::Allow { ops, warnings } = finish(&plan, &bound("aws-01")) else {
        panic!("allowed")
    };
    assert!(warnings.is_empty());
    let out = apply(&obj, &ops);
    assert_eq!(out["spec"]["credentialsBindingName"], "aws-01");
    assert_eq!(
        out["metadata"]["annotations"]["accountpool.io/account-claim"],
        "hap-system/shoot.garden-kyma.s1"
    );
}

#[test]
fn a_secret_binding_config_writes_secret_binding_name() {
    let s = sources(SOURCES);
    let obj = shoot(shoot_labels());
    let serving = Serving {
        binding_kind: BindingKind::SecretBinding,
        ..serving(&s)
    };
    let plan = claim_plan(plan(
        &create(SourceKind::Shoot, "garden-kyma", &obj),
        &serving,
    ));
    let Verdict::Allow { ops, .. } = finish(&plan, &bound("sb-1")) else {
        panic!("allowed")
    };
    let out = apply(&obj, &ops);
    assert_eq!(out["spec"]["secretBindingName"], "sb-1");
    assert!(out["spec"].get("credentialsBindingName").is_none());
}

#[test]
fn shoots_that_are_not_requests_are_untouched() {
    let s = sources(SOURCES);
    let other_ns = shoot(shoot_labels());
    assert_eq!(
        plan(
            &create(SourceKind::Shoot, "garden-other", &other_ns),
            &serving(&s)
        ),
        Plan::Untouched
    );
    let not_opted_in = shoot(json!({"accountpool.io/global-account": "ga-1"}));
    assert_eq!(
        plan(
            &create(SourceKind::Shoot, "garden-kyma", &not_opted_in),
            &serving(&s)
        ),
        Plan::Untouched
    );
    let mut has_binding = shoot(shoot_labels());
    has_binding["spec"]["credentialsBindingName"] = json!("mine");
    assert_eq!(
        plan(
            &create(SourceKind::Shoot, "garden-kyma", &has_binding),
            &serving(&s)
        ),
        Plan::Untouched
    );
}

#[test]
fn a_bad_request_is_denied_naming_the_field_and_nothing_is_planned() {
    let s = sources(SOURCES);
    let obj = shoot(json!({"accountpool.io/request": "true", "accountpool.io/plan": "aws"}));
    let Plan::Deny(msg) = plan(
        &create(SourceKind::Shoot, "garden-kyma", &obj),
        &serving(&s),
    ) else {
        panic!("denied")
    };
    assert!(msg.contains("Shoot garden-kyma/s1"), "{msg}");
    assert!(
        msg.contains("metadata.labels['accountpool.io/global-account']: is missing"),
        "{msg}"
    );
    assert!(msg.contains("globalAccount"), "{msg}");
    let mut unnamed = shoot(shoot_labels());
    unnamed["metadata"]
        .as_object_mut()
        .expect("meta")
        .remove("name");
    unnamed["metadata"]["generateName"] = json!("s-");
    let Plan::Deny(msg) = plan(
        &create(SourceKind::Shoot, "garden-kyma", &unnamed),
        &serving(&s),
    ) else {
        panic!("denied")
    };
    assert!(msg.contains("metadata.name"), "{msg}");
}

fn runtime(binding: &str) -> Value {
    json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1", "kind": "Runtime",
        "metadata": {"name": "rt-1", "namespace": "kcp-system", "annotations": {"a": "b"}, "labels": {
            "kyma-project.io/global-account-id": "ga-2", "kyma-project.io/subaccount-id": "sa-2",
            "kyma-project.io/broker-plan-name": "azure", "kyma-project.io/platform-region": "cf-eu20"}},
        "spec": {"shoot": {"name": "c-1a2b", "region": "westeurope", "provider": {"type": "azure"}, "secretBindingName": binding}},
    })
}

#[test]
fn a_kyma_runtime_gets_its_empty_binding_filled() {
    let s = sources(SOURCES);
    let obj = runtime("");
    let plan = claim_plan(plan(
        &create(SourceKind::Runtime, "kcp-system", &obj),
        &serving(&s),
    ));
    assert_eq!(plan.claim_name, "runtime.kcp-system.rt-1");
    assert_eq!(plan.spec.subaccount.as_deref(), Some("sa-2"));
    assert_eq!(plan.spec.platform_region.as_deref(), Some("cf-eu20"));
    assert_eq!(plan.spec.shoot_name.as_deref(), Some("c-1a2b"));
    let Verdict::Allow { ops, .. } = finish(&plan, &bound("az-7")) else {
        panic!("allowed")
    };
    let out = apply(&obj, &ops);
    assert_eq!(out["spec"]["shoot"]["secretBindingName"], "az-7");
    assert_eq!(out["metadata"]["annotations"]["a"], "b");
    assert_eq!(
        out["metadata"]["annotations"]["accountpool.io/account-claim"],
        "hap-system/runtime.kcp-system.rt-1"
    );
    // A Runtime that names its binding is adopted by the operator, not changed here.
    let named = runtime("az-1");
    assert_eq!(
        plan_for(&s, SourceKind::Runtime, "kcp-system", &named),
        Plan::Untouched
    );
}

fn plan_for(s: &CompiledSources, kind: SourceKind, ns: &str, obj: &Value) -> Plan {
    plan(&create(kind, ns, obj), &serving(s))
}

fn cluster(name: Option<&str>, purposes: Value, configs: Option<Value>) -> Value {
    let mut c = json!({
        "apiVersion": "clusters.openmcp.cloud/v1alpha1", "kind": "Cluster",
        "metadata": {"namespace": "platform", "labels": {"metadata.open-control-plane.io/project": "acme"}},
        "spec": {"profile": "gcp", "purposes": purposes, "tenancy": "Exclusive"},
    });
    match name {
        Some(n) => c["metadata"]["name"] = json!(n),
        None => c["metadata"]["generateName"] = json!("workload-"),
    }
    if let Some(cfg) = configs {
        c["spec"]["clusterConfigs"] = cfg;
    }
    c
}

#[test]
fn a_named_cluster_gets_a_clusterconfig_reference_once_bound() {
    let s = sources(SOURCES);
    let obj = cluster(
        Some("c1"),
        json!(["workload"]),
        Some(json!([{"name": "ipam"}])),
    );
    let plan = claim_plan(plan_for(&s, SourceKind::Cluster, "platform", &obj));
    assert_eq!(plan.claim_name, "cluster.platform.c1");
    assert_eq!(plan.cluster_config.as_deref(), Some("c1--hap"));
    assert_eq!(plan.spec.plan, "gcp");
    assert_eq!(plan.spec.global_account, "acme");
    assert!(
        plan.spec
            .shoot_name
            .as_deref()
            .is_some_and(|n| n.starts_with("s-"))
    );
    let Verdict::Allow { ops, .. } = finish(&plan, &bound("gcp-3")) else {
        panic!("allowed")
    };
    let out = apply(&obj, &ops);
    assert_eq!(
        out["spec"]["clusterConfigs"],
        json!([{"name": "ipam"}, {"name": "c1--hap"}])
    );
    assert_eq!(
        out["metadata"]["annotations"]["accountpool.io/cluster-config"],
        "c1--hap"
    );
    // Without earlier references the list is created.
    let bare = cluster(Some("c2"), json!(["mcp"]), None);
    let plan = claim_plan(plan_for(&s, SourceKind::Cluster, "platform", &bare));
    let Verdict::Allow { ops, .. } = finish(&plan, &bound("gcp-3")) else {
        panic!("allowed")
    };
    assert_eq!(
        apply(&bare, &ops)["spec"]["clusterConfigs"],
        json!([{"name": "c2--hap"}])
    );
    // Purposes and tenancy select.
    let platform = cluster(Some("c3"), json!(["platform"]), None);
    assert_eq!(
        plan_for(&s, SourceKind::Cluster, "platform", &platform),
        Plan::Untouched
    );
    let mut shared = cluster(Some("c4"), json!(["mcp"]), None);
    shared["spec"]["tenancy"] = json!("Shared");
    assert_eq!(
        plan_for(&s, SourceKind::Cluster, "platform", &shared),
        Plan::Untouched
    );
}

#[test]
fn a_cluster_with_a_generated_name_is_referenced_now_and_claimed_later() {
    let s = sources(SOURCES);
    let obj = cluster(None, json!(["workload"]), None);
    let Plan::Patch { ops, warnings } = plan_for(&s, SourceKind::Cluster, "platform", &obj) else {
        panic!("patch")
    };
    let out = apply(&obj, &ops);
    assert_eq!(
        out["spec"]["clusterConfigs"],
        json!([{"name": "workload-hap-x7k2m9qa"}])
    );
    assert_eq!(
        out["metadata"]["annotations"]["accountpool.io/cluster-config"],
        "workload-hap-x7k2m9qa"
    );
    assert_eq!(warnings.len(), 1);
    // A bad request is still denied at once.
    let mut bad = cluster(None, json!(["workload"]), None);
    bad["metadata"]["labels"] = json!({});
    assert!(
        matches!(plan_for(&s, SourceKind::Cluster, "platform", &bad), Plan::Deny(m) if m.contains("metadata.open-control-plane.io/project"))
    );
}

fn update<'a>(kind: SourceKind, ns: &'a str, old: &'a Value, new: &'a Value) -> Request<'a> {
    Request {
        operation: Operation::Update,
        dry_run: false,
        kind,
        namespace: ns,
        object: new,
        old_object: Some(old),
    }
}

#[test]
fn an_update_that_moves_a_set_binding_is_denied_if_the_object_is_served() {
    let s = sources(SOURCES);
    let mut old = shoot(shoot_labels());
    old["spec"]["credentialsBindingName"] = json!("aws-01");
    let mut moved = old.clone();
    moved["spec"]["credentialsBindingName"] = json!("aws-02");
    let Plan::DenyIfServed { claim, message } = plan(
        &update(SourceKind::Shoot, "garden-kyma", &old, &moved),
        &serving(&s),
    ) else {
        panic!("deny if served")
    };
    assert_eq!(claim, "hap-system/shoot.garden-kyma.s1");
    assert!(
        message.contains("spec.credentialsBindingName cannot change from `aws-01` to `aws-02`"),
        "{message}"
    );
    let mut cleared = old.clone();
    cleared["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("credentialsBindingName");
    assert!(matches!(
        plan(
            &update(SourceKind::Shoot, "garden-kyma", &old, &cleared),
            &serving(&s)
        ),
        Plan::DenyIfServed { .. }
    ));
    let mut relabelled = old.clone();
    relabelled["metadata"]["labels"]["x"] = json!("y");
    assert_eq!(
        plan(
            &update(SourceKind::Shoot, "garden-kyma", &old, &relabelled),
            &serving(&s)
        ),
        Plan::Untouched
    );
    let rt_old = runtime("az-1");
    let rt_new = runtime("az-2");
    assert!(matches!(
        plan(&update(SourceKind::Runtime, "kcp-system", &rt_old, &rt_new), &serving(&s)),
        Plan::DenyIfServed { message, .. } if message.contains("spec.shoot.secretBindingName")
    ));
    let mut c_old = cluster(
        Some("c1"),
        json!(["mcp"]),
        Some(json!([{"name": "c1--hap"}])),
    );
    c_old["metadata"]["annotations"] = json!({"accountpool.io/cluster-config": "c1--hap"});
    let mut c_new = c_old.clone();
    c_new["spec"]["clusterConfigs"] = json!([]);
    assert!(matches!(
        plan(&update(SourceKind::Cluster, "platform", &c_old, &c_new), &serving(&s)),
        Plan::DenyIfServed { claim, .. } if claim == "hap-system/cluster.platform.c1"
    ));
}

#[test]
fn the_claim_state_decides_the_answer() {
    let s = sources(SOURCES);
    let obj = shoot(shoot_labels());
    let p = claim_plan(plan(
        &create(SourceKind::Shoot, "garden-kyma", &obj),
        &serving(&s),
    ));
    let refused = ClaimState::Refused {
        reason: "PoolExhausted".into(),
        message: "no claimable binding in pool hyperscalerType=aws".into(),
    };
    let Verdict::Deny(msg) = finish(&p, &refused) else {
        panic!("deny")
    };
    assert!(msg.contains("PoolExhausted: no claimable binding"), "{msg}");
    assert!(msg.contains("nothing was claimed"), "{msg}");
    let undecided = ClaimState::Undecided {
        reason: None,
        message: None,
    };
    assert!(matches!(finish(&p, &undecided), Verdict::Deny(m) if m.contains("in time")));
    let dry = ClaimPlan {
        dry_run: true,
        ..p.clone()
    };
    let Verdict::Allow { ops, warnings } = finish(&dry, &undecided) else {
        panic!("allow")
    };
    assert!(ops.is_empty());
    assert!(warnings[0].contains("dry run"), "{warnings:?}");

    let mut claim: AccountClaim = serde_json::from_value(p.claim_object()).expect("claim");
    assert_eq!(
        claim_state(&claim),
        ClaimState::Undecided {
            reason: None,
            message: None
        }
    );
    let pending = |reason: &str| AccountClaimStatus {
        phase: Some(ClaimPhase::Pending),
        conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: reason.into(),
            message: "m".into(),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::UNIX_EPOCH,
            ),
        }],
        ..Default::default()
    };
    claim.status = Some(pending("Progressing"));
    assert!(matches!(claim_state(&claim), ClaimState::Undecided { .. }));
    for reason in [
        "PoolExhausted",
        "NoMatchingRule",
        "Denied",
        "MissingProvider",
    ] {
        claim.status = Some(pending(reason));
        assert!(
            matches!(claim_state(&claim), ClaimState::Refused { .. }),
            "{reason}"
        );
    }
    claim.status = Some(AccountClaimStatus {
        phase: Some(ClaimPhase::Bound),
        credentials_binding_name: Some("aws-01".into()),
        ..Default::default()
    });
    assert_eq!(claim_state(&claim), bound("aws-01"));
}

fn bound_claim(p: &ClaimPlan, uid: &str, rv: &str, binding: &str) -> AccountClaim {
    let mut claim: AccountClaim = serde_json::from_value(p.claim_object()).expect("claim");
    claim.metadata.uid = Some(uid.into());
    claim.metadata.resource_version = Some(rv.into());
    claim.status = Some(AccountClaimStatus {
        phase: Some(ClaimPhase::Bound),
        credentials_binding_name: Some(binding.into()),
        ..Default::default()
    });
    claim
}

fn shoot_plan(s: &CompiledSources) -> ClaimPlan {
    let obj = shoot(shoot_labels());
    claim_plan(plan(
        &create(SourceKind::Shoot, "garden-kyma", &obj),
        &serving(s),
    ))
}

#[test]
fn a_deleting_claim_is_never_answered_bound() {
    // The clean-up may delete a claim the moment the same request comes
    // again; a claim already being deleted must not hand its binding to the new object.
    let s = sources(SOURCES);
    let p = shoot_plan(&s);
    let mut claim = bound_claim(&p, "u1", "7", "aws-01");
    assert_eq!(claim_state(&claim), bound("aws-01"));
    claim.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::UNIX_EPOCH,
    ));
    assert!(
        matches!(claim_state(&claim), ClaimState::Conflict { .. }),
        "{:?}",
        claim_state(&claim)
    );
}

#[test]
fn a_claim_read_again_counts_only_if_it_is_the_same_claim_for_the_same_request() {
    // After a failed delete the call read the claim of that name again and
    // answered with whatever binding it held, another request's included.
    let s = sources(SOURCES);
    let p = shoot_plan(&s);
    let ours = bound_claim(&p, "u1", "9", "aws-01");
    assert_eq!(retake(Some(&ours), Some("u1"), &p.spec), Retake::Bound);
    let mut other_uid = ours.clone();
    other_uid.metadata.uid = Some("u2".into());
    assert_eq!(retake(Some(&other_uid), Some("u1"), &p.spec), Retake::Stop);
    let mut other_request = ours.clone();
    other_request.spec.global_account = "ga-2".into();
    assert_eq!(
        retake(Some(&other_request), Some("u1"), &p.spec),
        Retake::Stop
    );
    assert_eq!(retake(None, Some("u1"), &p.spec), Retake::Stop);
    assert_eq!(retake(Some(&ours), None, &p.spec), Retake::Stop);
    let mut pending = ours.clone();
    pending.status = None;
    assert_eq!(
        retake(Some(&pending), Some("u1"), &p.spec),
        Retake::Retry {
            resource_version: Some("9".into())
        }
    );
    let mut deleting = ours.clone();
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
    );
    assert_eq!(retake(Some(&deleting), Some("u1"), &p.spec), Retake::Stop);
}

#[test]
fn a_cluster_update_cannot_move_or_drop_its_cluster_config_annotation() {
    // The annotation names the ClusterConfig the operator writes; pointing
    // it at another ClusterConfig made the operator rewrite one it does not own.
    let s = sources(SOURCES);
    let mut old = cluster(
        Some("c1"),
        json!(["mcp"]),
        Some(json!([{"name": "c1--hap"}])),
    );
    old["metadata"]["annotations"] = json!({"accountpool.io/cluster-config": "c1--hap"});
    let mut moved = old.clone();
    moved["metadata"]["annotations"]["accountpool.io/cluster-config"] = json!("shared-defaults");
    moved["spec"]["clusterConfigs"] = json!([{"name": "c1--hap"}, {"name": "shared-defaults"}]);
    let Plan::DenyIfServed { claim, message } = plan(
        &update(SourceKind::Cluster, "platform", &old, &moved),
        &serving(&s),
    ) else {
        panic!("deny if served")
    };
    assert_eq!(claim, "hap-system/cluster.platform.c1");
    assert!(
        message.contains("accountpool.io/cluster-config"),
        "{message}"
    );
    let mut dropped = old.clone();
    dropped["metadata"]["annotations"] = json!({});
    assert!(matches!(
        plan(
            &update(SourceKind::Cluster, "platform", &old, &dropped),
            &serving(&s)
        ),
        Plan::DenyIfServed { .. }
    ));
    let mut added = old.clone();
    added["metadata"]["annotations"] = json!({});
    assert!(matches!(
        plan(
            &update(SourceKind::Cluster, "platform", &added, &old),
            &serving(&s)
        ),
        Plan::DenyIfServed { .. }
    ));
    let mut relabelled = old.clone();
    relabelled["metadata"]["labels"]["x"] = json!("y");
    assert_eq!(
        plan(
            &update(SourceKind::Cluster, "platform", &old, &relabelled),
            &serving(&s)
        ),
        Plan::Untouched
    );
}

/// The Cluster paths whose claim the source pass creates never reach `Plan::Claim`: each one
/// asks the tenant policy at admission; requests the webhook serves itself, and updates that
/// change nothing the pass would claim, do not.
#[test]
fn every_cluster_path_the_pass_claims_for_asks_the_tenant_policy_at_admission() {
    let s = sources(SOURCES);
    let sv = serving(&s);
    let ask = |req: &Request<'_>| tenant_ask(req, &sv);
    let generated = cluster(None, json!(["workload"]), None);
    let a = ask(&create(SourceKind::Cluster, "platform", &generated)).expect("generateName");
    assert_eq!(
        (
            a.source_id.as_str(),
            a.namespace.as_str(),
            a.global_account.as_str()
        ),
        ("mcp", "platform", "acme")
    );
    let pre = cluster(
        Some("c1"),
        json!(["mcp"]),
        Some(json!([{"name": "c1--hap"}])),
    );
    assert_eq!(
        plan_for(&s, SourceKind::Cluster, "platform", &pre),
        Plan::Untouched
    );
    let a = ask(&create(SourceKind::Cluster, "platform", &pre)).expect("reference listed");
    assert_eq!(a.cluster_config.as_deref(), Some("c1--hap"));
    // Served through its own claim (`Plan::Claim`), which asks the policy there.
    let named = cluster(Some("c1"), json!(["mcp"]), None);
    assert_eq!(ask(&create(SourceKind::Cluster, "platform", &named)), None);
    // An UPDATE that adds the reference, one that makes a referenced Cluster served, and one
    // that changes the global account of a referenced Cluster.
    assert!(ask(&update(SourceKind::Cluster, "platform", &named, &pre)).is_some());
    let unserved = cluster(
        Some("c1"),
        json!(["platform"]),
        Some(json!([{"name": "c1--hap"}])),
    );
    assert_eq!(
        ask(&create(SourceKind::Cluster, "platform", &unserved)),
        None
    );
    assert!(ask(&update(SourceKind::Cluster, "platform", &unserved, &pre)).is_some());
    let mut other_ga = pre.clone();
    other_ga["metadata"]["labels"]["metadata.open-control-plane.io/project"] = json!("globex");
    assert!(ask(&update(SourceKind::Cluster, "platform", &pre, &other_ga)).is_some());
    // Nothing the pass would claim changes: no new decision (the old record stands).
    let mut relabelled = pre.clone();
    relabelled["metadata"]["labels"]["x"] = json!("y");
    assert_eq!(
        ask(&update(SourceKind::Cluster, "platform", &pre, &relabelled)),
        None
    );
    let shoot = shoot(shoot_labels());
    assert_eq!(ask(&create(SourceKind::Shoot, "garden-kyma", &shoot)), None);
}

/// The record of the tenant decision is the webhook's alone: a CREATE carries the decided rule
/// or nothing, an UPDATE the decided rule or the old object's record, whatever the request
/// wrote.
#[test]
fn a_record_the_requester_writes_never_stands() {
    const KEY: &str = "accountpool.io/tenant-rule";
    let bare = cluster(None, json!(["workload"]), None);
    let mut forged = bare.clone();
    forged["metadata"]["annotations"] = json!({KEY: "openmcp", "other": "kept"});
    let req = create(SourceKind::Cluster, "platform", &forged);
    let out = apply(&forged, &record_ops(&req, &[], None));
    assert_eq!(out["metadata"]["annotations"], json!({"other": "kept"}));
    let out = apply(&forged, &record_ops(&req, &[], Some(None)));
    assert_eq!(out["metadata"]["annotations"], json!({"other": "kept"}));
    // Decided: written, with or without an annotations map, or after ops that create it.
    let req = create(SourceKind::Cluster, "platform", &bare);
    let out = apply(&bare, &record_ops(&req, &[], Some(Some("openmcp"))));
    assert_eq!(out["metadata"]["annotations"][KEY], "openmcp");
    let s = sources(SOURCES);
    let Plan::Patch { mut ops, .. } = plan_for(&s, SourceKind::Cluster, "platform", &bare) else {
        panic!("patch")
    };
    let record = record_ops(&req, &ops, Some(Some("openmcp")));
    ops.extend(record);
    let out = apply(&bare, &ops);
    assert_eq!(out["metadata"]["annotations"][KEY], "openmcp");
    assert_eq!(
        out["metadata"]["annotations"]["accountpool.io/cluster-config"],
        "workload-hap-x7k2m9qa"
    );
    let req = create(SourceKind::Cluster, "platform", &forged);
    let out = apply(&forged, &record_ops(&req, &[], Some(Some("real"))));
    assert_eq!(out["metadata"]["annotations"][KEY], "real");
    // An UPDATE keeps the old record: neither changed, dropped nor added by the requester.
    let mut old = cluster(Some("c1"), json!(["mcp"]), None);
    old["metadata"]["annotations"] = json!({KEY: "openmcp"});
    let mut changed = old.clone();
    changed["metadata"]["annotations"][KEY] = json!("other");
    let req = update(SourceKind::Cluster, "platform", &old, &changed);
    assert_eq!(apply(&changed, &record_ops(&req, &[], None)), old);
    let mut dropped = old.clone();
    dropped["metadata"]
        .as_object_mut()
        .expect("meta")
        .remove("annotations");
    let req = update(SourceKind::Cluster, "platform", &old, &dropped);
    assert_eq!(apply(&dropped, &record_ops(&req, &[], None)), old);
    let plain = cluster(Some("c1"), json!(["mcp"]), None);
    let req = update(SourceKind::Cluster, "platform", &plain, &old);
    let mut without = plain.clone();
    without["metadata"]["annotations"] = json!({});
    assert_eq!(apply(&old, &record_ops(&req, &[], None)), without);
}

/// A conflicting claim may hold another requester's request: the denial names the claim only.
#[test]
fn a_conflict_does_not_disclose_the_earlier_request() {
    let s = sources(SOURCES);
    let p = shoot_plan(&s);
    let mut existing = p.spec.clone();
    existing.global_account = "ga-secret".into();
    existing.plan = "secret-plan".into();
    let Verdict::Deny(message) = finish(
        &p,
        &ClaimState::Conflict {
            existing: Box::new(existing),
        },
    ) else {
        panic!("allowed")
    };
    assert!(message.contains(&p.claim_ref()), "{message}");
    assert!(
        !message.contains("ga-secret") && !message.contains("secret-plan"),
        "{message}"
    );
}
