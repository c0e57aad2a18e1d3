//! The request-source examples stay true: each HapConfig in examples/sources validates, and its
//! sample object is served by the source the example says, with the request the docs describe.

use hap_operator::api::{BindingKind, HapConfig, SourceKind};
use hap_operator::rules::CompiledRules;
use hap_operator::sources::CompiledSources;
use hap_operator::sources::admission::{Operation, Plan, Request, Serving, plan};
use serde_json::Value;

fn read<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let path = format!("{}/examples/sources/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_saphyr::from_str(&std::fs::read_to_string(&path).expect(&path)).expect(&path)
}

fn served(config: &str, object: &str, kind: SourceKind) -> hap_operator::api::AccountClaimSpec {
    let cfg: HapConfig = read(config);
    CompiledRules::from_spec(&cfg.spec).unwrap_or_else(|v| panic!("{config}: {v}"));
    let sources = CompiledSources::from_spec(&cfg.spec).expect("sources");
    let obj: Value = read(object);
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .expect("namespace")
        .to_string();
    let serving = Serving {
        sources: &sources,
        binding_kind: cfg
            .spec
            .binding_kind
            .unwrap_or(BindingKind::CredentialsBinding),
        binding_namespace: &cfg.spec.binding_namespace,
        claim_namespace: "hap-system",
        random: "abcd1234",
    };
    let req = Request {
        operation: Operation::Create,
        dry_run: false,
        kind,
        namespace: &ns,
        object: &obj,
        old_object: None,
    };
    match plan(&req, &serving) {
        Plan::Claim(p) => p.spec,
        other => panic!("{object} under {config}: {other:?}"),
    }
}

#[test]
fn the_examples_are_served_as_documented() {
    let rt = served("hapconfig-kyma.yaml", "runtime.yaml", SourceKind::Runtime);
    assert_eq!(
        (
            rt.global_account.as_str(),
            rt.plan.as_str(),
            rt.platform_region.as_deref(),
            rt.cluster_region.as_deref()
        ),
        ("ga-acme", "aws", Some("cf-eu10"), Some("eu-central-1"))
    );
    let c = served(
        "hapconfig-openmcp.yaml",
        "cluster.yaml",
        SourceKind::Cluster,
    );
    assert_eq!(
        (c.global_account.as_str(), c.plan.as_str()),
        ("acme", "gcp")
    );
    let s = served("hapconfig-shoots.yaml", "shoot.yaml", SourceKind::Shoot);
    assert_eq!(
        (
            s.global_account.as_str(),
            s.plan.as_str(),
            s.platform_region.as_deref(),
            s.shoot_name.as_deref()
        ),
        ("ga-acme", "aws", Some("cf-eu11"), Some("dev-1"))
    );
}
