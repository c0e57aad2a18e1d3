//! Unit tests of one source-controller pass.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::CompiledSources;
use super::kinds::Watched;
use super::sync::*;
use crate::api::{AccountClaim, BindingKind, ClaimPhase, HapConfigSpec, RequestSource, SourceKind};
use crate::claim_state::SourceRef;

fn sources() -> CompiledSources {
    let list: Vec<RequestSource> = serde_saphyr::from_str(
        r#"
- {id: kyma, kind: Runtime}
- {id: mcp, kind: Cluster, request: {plan: {constant: gcp}}}
"#,
    )
    .expect("yaml");
    CompiledSources::from_spec(&HapConfigSpec {
        binding_namespace: "garden".into(),
        rules: Some(vec!["aws".into()]),
        request_sources: Some(list),
        ..Default::default()
    })
    .expect("valid")
}

fn runtime(name: &str, binding: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "kcp", "uid": format!("uid-{name}"), "labels": {
            "kyma-project.io/global-account-id": "ga", "kyma-project.io/subaccount-id": "sa",
            "kyma-project.io/broker-plan-name": "aws", "kyma-project.io/platform-region": "cf-eu10"}},
        "spec": {"shoot": {"name": name, "region": "eu-1", "provider": {"type": "aws"}, "secretBindingName": binding}},
    })
}

fn cluster(name: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "p", "uid": format!("uid-{name}"),
            "labels": {"metadata.open-control-plane.io/project": "acme"},
            "annotations": {"accountpool.io/cluster-config": format!("{name}--hap")}},
        "spec": {"clusterConfigs": [{"name": format!("{name}--hap")}], "purposes": ["mcp"], "tenancy": "Exclusive"},
    })
}

fn record(
    kind: SourceKind,
    ns: &str,
    name: &str,
    phase: Option<ClaimPhase>,
    binding: Option<&str>,
) -> ClaimRecord {
    ClaimRecord {
        name: super::naming::claim_name(kind, ns, name),
        uid: Some(format!("claim-uid-{name}")),
        source: SourceRef {
            source_id: if kind == SourceKind::Cluster {
                "mcp"
            } else {
                "kyma"
            }
            .into(),
            kind,
            namespace: ns.into(),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
        },
        phase,
        binding: binding.map(String::from),
        age: Duration::from_secs(600),
        deleting: false,
    }
}

/// The Bound claim of Cluster `p/<name>` on `binding`.
fn bound_cluster(name: &str, binding: &str) -> ClaimRecord {
    record(
        SourceKind::Cluster,
        "p",
        name,
        Some(ClaimPhase::Bound),
        Some(binding),
    )
}

fn input<'a>(
    s: &'a CompiledSources,
    runtimes: Vec<Value>,
    clusters: Vec<Value>,
    claims: Vec<ClaimRecord>,
    configs: Vec<Value>,
) -> PassInput<'a> {
    let view = |kind: SourceKind, objects: Vec<Value>| KindView {
        ready: true,
        error: None,
        objects: objects
            .into_iter()
            .map(|o| Arc::new(kind.watched(o)))
            .collect(),
    };
    PassInput {
        sources: s,
        binding_kind: BindingKind::CredentialsBinding,
        claim_namespace: "hap",
        kinds: BTreeMap::from([
            (SourceKind::Runtime, view(SourceKind::Runtime, runtimes)),
            (SourceKind::Cluster, view(SourceKind::Cluster, clusters)),
        ]),
        claims,
        cluster_configs: Some(configs.into_iter().map(Arc::new).collect()),
        grace: Duration::from_secs(60),
    }
}

#[test]
fn a_runtime_with_a_binding_is_adopted_and_one_without_is_counted_unserved() {
    let s = sources();
    let pass = plan_pass(&input(
        &s,
        vec![runtime("r1", "aws-7"), runtime("r2", "")],
        vec![],
        vec![],
        vec![],
    ));
    assert_eq!(pass.actions.len(), 1);
    let Action::CreateClaim { claim } = &pass.actions[0] else {
        panic!("create")
    };
    let claim: AccountClaim = serde_json::from_value(claim.clone()).expect("claim");
    assert_eq!(claim.metadata.name.as_deref(), Some("runtime.kcp.r1"));
    assert_eq!(claim.spec.adopt_binding.as_deref(), Some("aws-7"));
    assert_eq!(claim.spec.global_account, "ga");
    let kyma = pass
        .statuses
        .iter()
        .find(|s| s.id == "kyma")
        .expect("status");
    assert_eq!((kyma.matching, kyma.unserved, kyma.claims), (2, 1, 0));
}

#[test]
fn a_bound_cluster_gets_its_clusterconfig_and_it_is_kept_as_it_should_be() {
    let s = sources();
    let claim = bound_cluster("c1", "gcp-1");
    let pass = plan_pass(&input(
        &s,
        vec![],
        vec![cluster("c1")],
        vec![claim.clone()],
        vec![],
    ));
    let [
        Action::PutClusterConfig {
            object,
            version: None,
        },
    ] = pass.actions.as_slice()
    else {
        panic!("{:?}", pass.actions)
    };
    assert_eq!(object["metadata"]["name"], "c1--hap");
    assert_eq!(
        object["metadata"]["annotations"]["accountpool.io/account-claim"],
        "hap/cluster.p.c1"
    );
    // Applied: nothing more to do. Edited: put back.
    let again = plan_pass(&input(
        &s,
        vec![],
        vec![cluster("c1")],
        vec![claim.clone()],
        vec![object.clone()],
    ));
    assert!(again.actions.is_empty(), "{:?}", again.actions);
    let mut edited = object.clone();
    edited["spec"]["patches"] = json!([]);
    edited["metadata"]["resourceVersion"] = json!("12");
    let fix = plan_pass(&input(
        &s,
        vec![],
        vec![cluster("c1")],
        vec![claim.clone()],
        vec![edited],
    ));
    assert!(matches!(
        fix.actions.as_slice(),
        [Action::PutClusterConfig { version: Some(v), .. }] if v == "12"
    ));
    // Pending: nothing yet.
    let pending = ClaimRecord {
        phase: Some(ClaimPhase::Pending),
        binding: None,
        ..claim
    };
    assert!(
        plan_pass(&input(
            &s,
            vec![],
            vec![cluster("c1")],
            vec![pending],
            vec![]
        ))
        .actions
        .is_empty()
    );
}

#[test]
fn a_cluster_referencing_its_config_without_a_claim_gets_one() {
    let s = sources();
    let pass = plan_pass(&input(
        &s,
        vec![],
        vec![cluster("workload-x1")],
        vec![],
        vec![],
    ));
    let [Action::CreateClaim { claim }] = pass.actions.as_slice() else {
        panic!("{:?}", pass.actions)
    };
    assert_eq!(claim["metadata"]["name"], "cluster.p.workload-x1");
    assert_eq!(claim["spec"]["plan"], "gcp");
    assert!(
        claim["spec"]["shootName"]
            .as_str()
            .is_some_and(|n| n.starts_with("s-"))
    );
    assert!(
        claim["metadata"]["annotations"]
            .get("accountpool.io/tenant-rule")
            .is_none(),
        "no admission record on the Cluster, none on its claim"
    );
}

/// The webhook's record of the rule the user was allowed under travels from the Cluster onto
/// the claim the pass creates; an adoption is checked without it.
#[test]
fn the_admission_record_travels_from_the_cluster_to_its_claim_but_not_to_an_adoption() {
    let s = sources();
    let mut c = cluster("workload-x1");
    c["metadata"]["annotations"]["accountpool.io/tenant-rule"] = json!("openmcp");
    let mut r = runtime("r1", "aws-7");
    r["metadata"]["annotations"] = json!({"accountpool.io/tenant-rule": "keb"});
    let pass = plan_pass(&input(&s, vec![r], vec![c], vec![], vec![]));
    let by_name = |n: &str| {
        pass.actions
            .iter()
            .find_map(|a| match a {
                Action::CreateClaim { claim } if claim["metadata"]["name"] == n => Some(claim),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no claim {n}: {:?}", pass.actions))
    };
    assert_eq!(
        by_name("cluster.p.workload-x1")["metadata"]["annotations"]["accountpool.io/tenant-rule"],
        "openmcp"
    );
    assert!(
        by_name("runtime.kcp.r1")["metadata"]["annotations"]
            .get("accountpool.io/tenant-rule")
            .is_none()
    );
}

#[test]
fn claims_of_vanished_objects_are_deleted_only_after_the_grace_and_with_a_synced_cache() {
    let s = sources();
    let gone = record(
        SourceKind::Runtime,
        "kcp",
        "old",
        Some(ClaimPhase::Bound),
        Some("aws-1"),
    );
    let young = ClaimRecord {
        age: Duration::from_secs(5),
        ..record(SourceKind::Runtime, "kcp", "new", None, None)
    };
    let cfg = json!({"metadata": {"namespace": "p", "name": "c9--hap", "uid": "u9", "resourceVersion": "5",
        "labels": {"openmcp.cloud/managed-by": "hap-operator"},
        "annotations": {"accountpool.io/account-claim": "hap/cluster.p.c9"}}});
    let c9 = bound_cluster("c9", "gcp-1");
    let pass = plan_pass(&input(&s, vec![], vec![], vec![gone, young, c9], vec![cfg]));
    let deletes: Vec<(&str, &Vec<ConfigRef>)> = pass
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeleteIfGone {
                claim,
                cluster_configs,
                ..
            } => Some((claim.as_str(), cluster_configs)),
            _ => None,
        })
        .collect();
    assert_eq!(
        deletes,
        vec![
            ("runtime.kcp.old", &vec![]),
            (
                "cluster.p.c9",
                &vec![ConfigRef {
                    namespace: "p".into(),
                    name: "c9--hap".into(),
                    uid: Some("u9".into()),
                    resource_version: Some("5".into()),
                }]
            ),
        ]
    );
    let mut unsynced = input(
        &s,
        vec![],
        vec![],
        vec![record(SourceKind::Runtime, "kcp", "old", None, None)],
        vec![],
    );
    unsynced
        .kinds
        .get_mut(&SourceKind::Runtime)
        .expect("runtime")
        .ready = false;
    assert!(plan_pass(&unsynced).actions.is_empty());
}

#[test]
fn labels_follow_the_object_and_orphan_clusterconfigs_go() {
    let s = sources();
    let stale = ClaimRecord {
        source: SourceRef {
            uid: Some("old-uid".into()),
            ..record(SourceKind::Runtime, "kcp", "r1", None, None).source
        },
        ..record(
            SourceKind::Runtime,
            "kcp",
            "r1",
            Some(ClaimPhase::Bound),
            Some("aws-1"),
        )
    };
    let orphan = json!({"metadata": {"namespace": "p", "name": "x--hap", "labels": {"openmcp.cloud/managed-by": "hap-operator"},
        "annotations": {"accountpool.io/account-claim": "hap/cluster.p.x"}}});
    // Another instance's (its claims live elsewhere) is not this one's to delete.
    let other = json!({"metadata": {"namespace": "p", "name": "y--hap", "labels": {"openmcp.cloud/managed-by": "hap-operator"},
        "annotations": {"accountpool.io/account-claim": "elsewhere/cluster.p.y"}}});
    let foreign = json!({"metadata": {"namespace": "p", "name": "ipam", "labels": {"openmcp.cloud/managed-by": "gardener-ipam"}}});
    let pass = plan_pass(&input(
        &s,
        vec![runtime("r1", "aws-1")],
        vec![],
        vec![stale],
        vec![orphan, other, foreign],
    ));
    assert_eq!(pass.actions.len(), 2, "{:?}", pass.actions);
    assert!(
        matches!(&pass.actions[0], Action::LabelClaim { name, labels }
        if name == "runtime.kcp.r1" && labels.get("accountpool.io/source-uid").map(String::as_str) == Some("uid-r1"))
    );
    assert!(matches!(&pass.actions[1], Action::DeleteClusterConfig(r) if r.name == "x--hap"));
}

#[test]
fn a_source_that_cannot_watch_says_why() {
    let s = sources();
    let mut i = input(&s, vec![], vec![], vec![], vec![]);
    i.kinds.insert(
        SourceKind::Cluster,
        KindView {
            ready: false,
            error: Some("404 Not Found".into()),
            objects: vec![],
        },
    );
    let pass = plan_pass(&i);
    let mcp = pass
        .statuses
        .iter()
        .find(|s| s.id == "mcp")
        .expect("status");
    assert!(!mcp.watching);
    assert!(
        mcp.message
            .contains("cannot watch clusters (clusters.openmcp.cloud/v1alpha1): 404"),
        "{}",
        mcp.message
    );
}

#[test]
fn a_cluster_pointing_at_a_foreign_clusterconfig_gets_no_write_on_it() {
    let s = sources();
    let claim = bound_cluster("c1", "gcp-1");
    // The Cluster's annotation (its owner may change it) names a config of someone else's.
    let mut c1 = cluster("c1");
    c1["metadata"]["annotations"]["accountpool.io/cluster-config"] = json!("shared-defaults");
    c1["spec"]["clusterConfigs"] = json!([{"name": "c1--hap"}, {"name": "shared-defaults"}]);
    let shared = json!({"metadata": {"namespace": "p", "name": "shared-defaults", "uid": "u-shared",
        "resourceVersion": "7"}, "spec": {"patches": []}});
    // Labelled as the operator's, but made for another claim: not this claim's either.
    let mut other = cluster("c2");
    other["metadata"]["annotations"]["accountpool.io/cluster-config"] = json!("c3--hap");
    other["spec"]["clusterConfigs"] = json!([{"name": "c3--hap"}]);
    let c2 = bound_cluster("c2", "gcp-2");
    let c3_config = json!({"metadata": {"namespace": "p", "name": "c3--hap", "uid": "u-c3",
        "resourceVersion": "8",
        "labels": {"openmcp.cloud/managed-by": "hap-operator"},
        "annotations": {"accountpool.io/account-claim": "hap/cluster.p.c3"}},
        "spec": {"patches": []}});
    let pass = plan_pass(&input(
        &s,
        vec![],
        vec![c1, other],
        vec![claim, c2],
        vec![shared, c3_config],
    ));
    assert!(
        !pass
            .actions
            .iter()
            .any(|a| matches!(a, Action::PutClusterConfig { .. })),
        "{:?}",
        pass.actions
    );
    let mcp = pass
        .statuses
        .iter()
        .find(|s| s.id == "mcp")
        .expect("status");
    assert!(
        mcp.message.contains("p/c1 → p/shared-defaults")
            && mcp.message.contains("p/c2 → p/c3--hap"),
        "{}",
        mcp.message
    );
}

#[test]
fn a_vanished_clusters_clean_up_takes_only_the_operators_own_clusterconfigs() {
    let s = sources();
    let c9 = bound_cluster("c9", "gcp-1");
    // Annotated with the claim by whoever wrote it, but not labelled as the operator's.
    let unlabelled = json!({"metadata": {"namespace": "p", "name": "shared",
        "annotations": {"accountpool.io/account-claim": "hap/cluster.p.c9"}}});
    let pass = plan_pass(&input(&s, vec![], vec![], vec![c9], vec![unlabelled]));
    assert_eq!(pass.actions.len(), 1, "{:?}", pass.actions);
    assert!(
        matches!(&pass.actions[0], Action::DeleteIfGone { cluster_configs, .. } if cluster_configs.is_empty()),
        "{:?}",
        pass.actions
    );
}

fn at(s: &str) -> jiff::Timestamp {
    s.parse().expect("timestamp")
}

fn live(created: &str, admitted_at: Option<&str>) -> LiveClaim {
    LiveClaim {
        uid: Some("claim-uid".into()),
        resource_version: Some("41".into()),
        created: Some(at(created)),
        admitted_at: admitted_at.map(String::from),
        deleting: false,
    }
}

const GRACE: Duration = Duration::from_secs(60);

#[test]
fn the_clean_up_waits_a_grace_from_the_last_hand_out_not_from_creation() {
    let now = at("2026-11-26T10:00:00Z");
    let check = CleanUp::CheckObject {
        uid: "claim-uid".into(),
        resource_version: "41".into(),
    };
    // Created long ago, never handed out again: old enough, deleted only at the version read.
    let old = live("2026-11-26T09:00:00Z", None);
    assert_eq!(clean_up(&old, Some("claim-uid"), now, GRACE), check);
    // The same claim handed back by the webhook 20 s ago (a request re-created under the same
    // name): it waits the rest of the grace, whatever its creation says.
    let reused = live("2026-11-26T09:00:00Z", Some("2026-11-26T09:59:40Z"));
    assert_eq!(
        clean_up(&reused, Some("claim-uid"), now, GRACE),
        CleanUp::Wait {
            left: Duration::from_secs(40)
        }
    );
    let stamped_long_ago = live("2026-11-26T09:00:00Z", Some("2026-11-26T09:30:00+00:00"));
    assert_eq!(
        clean_up(&stamped_long_ago, Some("claim-uid"), now, GRACE),
        check
    );
    // Young by creation.
    let young = live("2026-11-26T09:59:55Z", None);
    assert_eq!(
        clean_up(&young, None, now, GRACE),
        CleanUp::Wait {
            left: Duration::from_secs(55)
        }
    );
    // A stamp ahead of the API server's clock counts as just now.
    let ahead = live("2026-11-26T09:00:00Z", Some("2026-11-26T10:00:03Z"));
    assert_eq!(
        clean_up(&ahead, None, now, GRACE),
        CleanUp::Wait { left: GRACE }
    );
    // A stamp that is not a time is not the webhook's: creation decides.
    let garbage = live("2026-11-26T09:00:00Z", Some("yesterday"));
    assert_eq!(clean_up(&garbage, None, now, GRACE), check);
}

#[test]
fn the_clean_up_leaves_another_claim_a_deleting_one_and_one_it_cannot_condition() {
    let now = at("2026-11-26T10:00:00Z");
    let old = live("2026-11-26T09:00:00Z", None);
    assert_eq!(
        clean_up(&old, Some("an-older-claim"), now, GRACE),
        CleanUp::Leave,
        "re-created under the same name since the pass"
    );
    let deleting = LiveClaim {
        deleting: true,
        ..old.clone()
    };
    assert_eq!(clean_up(&deleting, None, now, GRACE), CleanUp::Leave);
    let no_version = LiveClaim {
        resource_version: None,
        ..old.clone()
    };
    assert_eq!(clean_up(&no_version, None, now, GRACE), CleanUp::Leave);
}

#[test]
fn a_live_claim_is_read_with_its_stamp() {
    let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
        serde_json::from_value(json!({
            "name": "runtime.kcp.r1", "uid": "u", "resourceVersion": "9",
            "creationTimestamp": "2026-11-26T09:00:00Z",
            "annotations": {"accountpool.io/admitted-at": "2026-11-26T09:10:00Z"},
        }))
        .expect("meta");
    let l = LiveClaim::from_meta(&meta);
    assert_eq!(l.resource_version.as_deref(), Some("9"));
    assert_eq!(l.last_admitted(), Some(at("2026-11-26T09:10:00Z")));
}

fn shoot_sources() -> CompiledSources {
    let list: Vec<RequestSource> = serde_saphyr::from_str(
        r#"- {id: shoots, kind: Shoot, matchLabels: {accountpool.io/request: "true"}}"#,
    )
    .expect("yaml");
    CompiledSources::from_spec(&HapConfigSpec {
        binding_namespace: "garden-p".into(),
        shoot_namespace: Some("garden-p".into()),
        rules: Some(vec!["aws".into()]),
        request_sources: Some(list),
        ..Default::default()
    })
    .expect("valid")
}

fn shoot(name: &str, requested: bool, binding: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "garden-p", "uid": format!("uid-{name}"),
            "labels": {"accountpool.io/request": requested.to_string()}},
        "spec": {"credentialsBindingName": binding},
    })
}

/// A Shoot as a landscape has it (beside what the pass reads): provider, workers, maintenance,
/// more labels, and a status.
fn dressed(mut shoot: Value) -> Value {
    shoot["metadata"]["labels"]["kyma-project.io/runtime-id"] = json!("r-1");
    shoot["metadata"]["resourceVersion"] = json!("4711");
    shoot["spec"]["region"] = json!("eu-west-1");
    shoot["spec"]["provider"] = json!({"type": "aws", "workers": [{"name": "w", "minimum": 1,
        "maximum": 3, "machine": {"type": "m6i.large"}, "zones": ["eu-west-1a"]}]});
    shoot["spec"]["maintenance"] =
        json!({"timeWindow": {"begin": "030000+0000", "end": "040000+0000"}});
    shoot["status"] = json!({"lastOperation": {"type": "Reconcile", "state": "Succeeded"},
        "conditions": [{"type": "APIServerAvailable", "status": "True"}]});
    shoot
}

fn shoot_claim(name: &str, uid: &str) -> ClaimRecord {
    ClaimRecord {
        name: super::naming::claim_name(SourceKind::Shoot, "garden-p", name),
        uid: Some(format!("claim-uid-{name}")),
        source: SourceRef {
            source_id: "shoots".into(),
            kind: SourceKind::Shoot,
            namespace: "garden-p".into(),
            name: Some(name.into()),
            uid: Some(uid.into()),
        },
        phase: Some(ClaimPhase::Bound),
        binding: Some("aws-1".into()),
        age: Duration::from_secs(600),
        deleting: false,
    }
}

fn shoot_pass(s: &CompiledSources, shoots: Vec<Watched>, claims: Vec<ClaimRecord>) -> Pass {
    plan_pass(&PassInput {
        sources: s,
        binding_kind: BindingKind::CredentialsBinding,
        claim_namespace: "hap",
        kinds: BTreeMap::from([(
            SourceKind::Shoot,
            KindView {
                ready: true,
                error: None,
                objects: shoots.into_iter().map(Arc::new).collect(),
            },
        )]),
        claims,
        cluster_configs: None,
        grace: Duration::from_secs(60),
    })
}

/// The source controller keeps of a Shoot only what a pass reads (`SourceKind::watched`): a
/// Shoot as a landscape has it plans exactly as it did when the cache kept the whole object. The
/// pass follows a re-created Shoot's UID, counts a requested Shoot without a binding or claim as
/// unserved, and looks up the claim of a Shoot that is gone.
#[test]
fn a_shoot_is_planned_from_what_the_cache_keeps_of_it() {
    let s = shoot_sources();
    let shoots = || {
        vec![
            shoot("recreated", true, "aws-1"),
            shoot("unserved", true, ""),
            shoot("not-requested", false, ""),
            shoot("bound-elsewhere", true, "aws-9"),
        ]
    };
    let claims = || {
        vec![
            shoot_claim("recreated", "uid-of-the-first"),
            shoot_claim("gone", "uid-gone"),
        ]
    };
    let kept = shoots()
        .into_iter()
        .map(|o| SourceKind::Shoot.watched(dressed(o)))
        .collect();
    let whole = shoots()
        .into_iter()
        .map(|o| Watched {
            object: Some(dressed(o.clone()).to_string().into_boxed_str()),
            ..SourceKind::Shoot.watched(dressed(o))
        })
        .collect();
    let bare = shoot_pass(&s, kept, claims());
    assert_eq!(bare, shoot_pass(&s, whole, claims()));
    let [
        Action::LabelClaim { name, labels },
        Action::DeleteIfGone { claim, .. },
    ] = bare.actions.as_slice()
    else {
        panic!("a label and a delete: {:?}", bare.actions)
    };
    assert_eq!(
        name,
        &super::naming::claim_name(SourceKind::Shoot, "garden-p", "recreated")
    );
    assert!(labels.values().any(|v| v == "uid-recreated"), "{labels:?}");
    assert_eq!(
        claim,
        &super::naming::claim_name(SourceKind::Shoot, "garden-p", "gone")
    );
    let status = &bare.statuses[0];
    assert_eq!((status.matching, status.unserved), (3, 1), "{status:?}");
}

/// A claimed object's text is never read: a bound Cluster whose kept object would not even parse
/// plans as it does with its object, from the ClusterConfig reference read when it was watched.
#[test]
fn a_claimed_object_is_planned_without_reading_its_text() {
    let s = sources();
    let claim = bound_cluster("c1", "gcp-1");
    let whole = input(&s, vec![], vec![cluster("c1")], vec![claim.clone()], vec![]);
    let mut unread = input(&s, vec![], vec![cluster("c1")], vec![claim], vec![]);
    let view = unread
        .kinds
        .get_mut(&SourceKind::Cluster)
        .expect("clusters");
    let w = Arc::make_mut(&mut view.objects[0]);
    w.object = Some("not JSON".into());
    assert_eq!(w.cluster_config.as_deref(), Some("c1--hap"));
    let plan = plan_pass(&whole);
    assert!(
        matches!(plan.actions.as_slice(), [Action::PutClusterConfig { .. }]),
        "{:?}",
        plan.actions
    );
    assert_eq!(plan, plan_pass(&unread));
}
