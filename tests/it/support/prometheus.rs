//! The shipped Prometheus artefacts in tests: promtool and the Prometheus server from Debian's
//! package (e2e/build-prometheus.sh, cached), the rule groups taken from the shipped
//! PrometheusRule (never a copy of the rule text), and the dashboard's queries.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

/// The one source of the alerting rules.
pub const RULE: &str = "deploy/kustomize/components/prometheus-rules/prometheusrule.yaml";
/// The Helm chart's copy of it (`make monitoring`).
pub const HELM_RULE: &str = "deploy/helm/hap-operator/files/prometheusrule.yaml";
/// The one source of the Grafana dashboard.
pub const DASHBOARD: &str = "deploy/kustomize/components/grafana-dashboard/hap-operator.json";
/// The Helm chart's copy of it.
pub const HELM_DASHBOARD: &str = "deploy/helm/hap-operator/files/hap-operator.json";

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding `promtool` and `prometheus`: `HAP_PROMETHEUS_DIR`, else the cache that
/// e2e/build-prometheus.sh fills on first use.
pub fn bin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(p) = std::env::var_os("HAP_PROMETHEUS_DIR") {
            return PathBuf::from(p);
        }
        let out = Command::new(root().join("e2e/build-prometheus.sh"))
            .output()
            .expect("run e2e/build-prometheus.sh");
        assert!(
            out.status.success(),
            "e2e/build-prometheus.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// The shipped PrometheusRule, parsed.
pub fn prometheus_rule() -> Value {
    let text = std::fs::read_to_string(root().join(RULE)).expect("read the PrometheusRule");
    serde_saphyr::from_str(&text).expect("parse the PrometheusRule")
}

/// Writes the PrometheusRule's `spec` (a Prometheus rule file: `groups:`) into `dir` as JSON
/// (YAML's subset), with every `for:` replaced by `for_override` when given — the e2e knob that
/// keeps the expressions and shortens only the waiting. Returns the file's path.
pub fn write_rule_file(dir: &Path, for_override: Option<&str>) -> PathBuf {
    let mut spec = prometheus_rule()["spec"].clone();
    if let Some(d) = for_override {
        for group in spec["groups"].as_array_mut().expect("groups") {
            for rule in group["rules"].as_array_mut().expect("rules") {
                if rule.get("alert").is_some() {
                    rule["for"] = Value::String(d.to_string());
                }
            }
        }
    }
    let path = dir.join("hap-operator.rules.yaml");
    std::fs::write(&path, serde_json::to_string_pretty(&spec).unwrap()).expect("write rules");
    path
}

/// The names of every alert in the shipped rules.
pub fn alert_names() -> Vec<String> {
    let rule = prometheus_rule();
    rule["spec"]["groups"]
        .as_array()
        .expect("spec.groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect()
}

/// Every panel's PromQL of the shipped dashboard: (panel title, expression), rows' nested
/// panels included.
pub fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join(DASHBOARD)).expect("read the dashboard");
    let dash: Value = serde_json::from_str(&text).expect("parse the dashboard");
    let mut out = Vec::new();
    collect_queries(&dash["panels"], &mut out);
    out
}

fn collect_queries(panels: &Value, out: &mut Vec<(String, String)>) {
    for p in panels.as_array().into_iter().flatten() {
        let title = p["title"].as_str().unwrap_or_default().to_string();
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                out.push((title.clone(), e.to_string()));
            }
        }
        collect_queries(&p["panels"], out);
    }
}
