//! `crds/` is generated from the Rust types by `hap crd`; this fails when the committed copy
//! drifts, with the command that fixes it.

use std::path::Path;

#[test]
fn committed_crds_match_the_rust_types() {
    let generated = hap_operator::crd::render_yaml().expect("render CRDs");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/accountpool.io.yaml");
    let committed = std::fs::read_to_string(&path).expect("read crds/accountpool.io.yaml");
    assert!(
        generated == committed,
        "crds/accountpool.io.yaml is stale: run `make crds` (hap crd > crds/accountpool.io.yaml) and commit it"
    );
}

#[test]
fn hap_crd_prints_exactly_the_committed_file() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hap"))
        .arg("crd")
        .output()
        .expect("run hap crd");
    assert!(out.status.success());
    let committed =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/accountpool.io.yaml"))
            .expect("read");
    assert_eq!(out.stdout, committed);
}

#[test]
fn crds_carry_the_kinds_columns_and_validation_users_rely_on() {
    let yaml = hap_operator::crd::render_yaml().expect("render CRDs");
    for needle in [
        "scope: Cluster",
        "scope: Namespaced",
        "- hapcfg",
        "- aclaim",
        "- hap",
        "x-kubernetes-list-type: map",
        "rules and legacyRules are mutually exclusive",
        "spec is immutable",
        "jsonPath: .status.conditions[?(@.type==\"Ready\")].status",
        "jsonPath: .spec.globalAccount",
        "status: {}",
    ] {
        assert!(yaml.contains(needle), "CRDs lack {needle:?}");
    }
}
