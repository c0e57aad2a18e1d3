//! The shipped alerting rules (deploy/kustomize/components/prometheus-rules) are valid for
//! promtool, every alert has a `promtool test rules` case in tests/alerts/ that makes it fire,
//! every case passes, and the Helm chart ships the same rule text and dashboard.

use crate::support::prometheus;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

/// The promtool unit-test files, parsed: (file name, text, document).
fn unit_tests() -> Vec<(String, String, Value)> {
    let dir = prometheus::root().join("tests/alerts");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/alerts")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read test file");
            let doc: Value = serde_saphyr::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into(), text, doc)
        })
        .collect()
}

/// Alerts some case expects to fire (a non-empty `exp_alerts`).
fn alerts_made_to_fire(doc: &Value) -> BTreeSet<String> {
    doc["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["alert_rule_test"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
        .filter_map(|c| c["alertname"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn every_shipped_alert_has_a_promtool_test_that_makes_it_fire() {
    let covered: BTreeSet<String> = unit_tests()
        .iter()
        .flat_map(|(_, _, d)| alerts_made_to_fire(d))
        .collect();
    let missing: Vec<String> = prometheus::alert_names()
        .into_iter()
        .filter(|a| !covered.contains(a))
        .collect();
    assert!(
        missing.is_empty(),
        "alerts in {} without a case in tests/alerts/*.yaml that expects them to fire: {missing:?}",
        prometheus::RULE
    );
}

#[test]
fn promtool_checks_the_rules_and_every_unit_test_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = prometheus::write_rule_file(dir.path(), None);
    let promtool = prometheus::bin_dir().join("promtool");
    let out = Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .output()
        .expect("run promtool check rules");
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let tests = unit_tests();
    assert!(!tests.is_empty(), "no promtool tests in tests/alerts/");
    // Next to the rule file, which every test names as `rule_files: [hap-operator.rules.yaml]`.
    let mut paths = Vec::new();
    for (name, text, doc) in &tests {
        assert_eq!(
            doc["rule_files"],
            serde_json::json!(["hap-operator.rules.yaml"]),
            "{name}: rule_files must name only the shipped rules"
        );
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("write test file");
        paths.push(p);
    }
    let out = Command::new(&promtool)
        .args(["test", "rules"])
        .args(&paths)
        .output()
        .expect("run promtool test rules");
    assert!(
        out.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_helm_chart_ships_the_same_rule_and_dashboard() {
    for (source, copy) in [
        (prometheus::RULE, prometheus::HELM_RULE),
        (prometheus::DASHBOARD, prometheus::HELM_DASHBOARD),
    ] {
        let read = |p: &str| std::fs::read(prometheus::root().join(p)).ok();
        assert!(
            read(source).is_some() && read(source) == read(copy),
            "{copy} differs from {source}: run `make monitoring` and commit the copy"
        );
    }
}

/// `helm template` with both options on renders the source's rule spec and dashboard unchanged;
/// by default neither is rendered.
#[test]
fn helm_renders_the_rule_and_dashboard_only_when_enabled() {
    let helm = std::env::var_os("HAP_HELM")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let out = Command::new(prometheus::root().join("e2e/build-helm.sh"))
                .output()
                .expect("run e2e/build-helm.sh");
            assert!(out.status.success(), "e2e/build-helm.sh failed");
            String::from_utf8_lossy(&out.stdout).trim().into()
        });
    let render = |args: &[&str]| -> Vec<Value> {
        let out = Command::new(&helm)
            .args(["template", "r"])
            .arg(prometheus::root().join("deploy/helm/hap-operator"))
            .args(["--namespace", "mon"])
            .args(args)
            .output()
            .expect("run helm template");
        assert!(
            out.status.success(),
            "helm template {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).expect("YAML");
        docs.into_iter().filter(|d| !d.is_null()).collect()
    };
    let kind = |docs: &[Value], k: &str| -> Vec<Value> {
        docs.iter().filter(|d| d["kind"] == k).cloned().collect()
    };
    let plain = render(&[]);
    assert!(kind(&plain, "PrometheusRule").is_empty());
    assert!(
        !kind(&plain, "ConfigMap")
            .iter()
            .any(|c| c["data"]["hap-operator.json"].is_string())
    );
    let on = render(&[
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "grafanaDashboard.enabled=true",
    ]);
    let rules = kind(&on, "PrometheusRule");
    assert_eq!(rules.len(), 1, "one PrometheusRule");
    assert_eq!(rules[0]["spec"], prometheus::prometheus_rule()["spec"]);
    assert_eq!(rules[0]["metadata"]["namespace"], "mon");
    let dashboards: Vec<Value> = kind(&on, "ConfigMap")
        .into_iter()
        .filter(|c| c["data"]["hap-operator.json"].is_string())
        .collect();
    assert_eq!(dashboards.len(), 1, "one dashboard ConfigMap");
    assert_eq!(
        dashboards[0]["metadata"]["labels"]["grafana_dashboard"],
        "1"
    );
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(prometheus::root().join(prometheus::DASHBOARD)).unwrap(),
    )
    .unwrap();
    let rendered: Value =
        serde_json::from_str(dashboards[0]["data"]["hap-operator.json"].as_str().unwrap()).unwrap();
    assert_eq!(rendered, shipped);
}
