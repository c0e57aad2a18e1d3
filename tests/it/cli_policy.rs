//! The `hap` binary on ordered fallback pools, deny and pins (issue 13): validate names the
//! entry, index and column (or field), explain prints the ordered pools and the denial, and
//! `migrate --hapconfig --to` rewrites the entries without changing any result.

use std::io::Write;
use std::process::{Command, Output};

use serde_json::{Value, json};

const HAP: &str = env!("CARGO_BIN_EXE_hap");
const POLICY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/hapconfig-policy.yaml"
);

fn hap(args: &[&str]) -> Output {
    Command::new(HAP).args(args).output().expect("run hap")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

fn json_out(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

fn file(content: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    f.write_all(content.as_bytes()).unwrap();
    f
}

fn manifest(spec: &str) -> tempfile::NamedTempFile {
    file(&format!(
        "apiVersion: accountpool.io/v1alpha1\nkind: HapConfig\nmetadata: {{name: default}}\nspec:\n  bindingNamespace: garden-kyma\n{spec}"
    ))
}

fn path(f: &tempfile::NamedTempFile) -> &str {
    f.path().to_str().unwrap()
}

#[test]
fn the_policy_example_is_valid_and_warns_about_its_overflow_pools() {
    let o = hap(&["validate", "-f", POLICY, "-o", "json"]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stdout));
    let v = json_out(&o);
    let warnings = v["warnings"].as_array().unwrap();
    let found: Vec<(Value, Value, Value, Value)> = warnings
        .iter()
        .map(|w| {
            (
                w["reason"].clone(),
                w["index"].clone(),
                w["column"].clone(),
                w["field"].clone(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            (
                json!("FallbackOverlap"),
                json!(6),
                json!(17),
                json!("rules[5]")
            ),
            (
                json!("FallbackOverlap"),
                json!(6),
                json!(22),
                json!("rules[5]")
            ),
            (
                json!("FallbackOverlap"),
                json!(8),
                json!(null),
                json!("structuredRules[0].oneOf[1]")
            ),
        ]
    );
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap()
            .contains("first pool of rule 4 `gcp`")
    );
}

#[test]
fn fallback_constraints_name_entry_index_and_column() {
    let o = hap(&[
        "validate",
        "--rule",
        "aws",
        "--rule",
        "aws(PR=cf-eu11, euAccess) | ()",
        "--rule",
        "gcp(PR=cf-sa30) | () | (shared)",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 1);
    let v = json_out(&o);
    assert_eq!(
        v["errors"],
        json!([
            {"index": 2, "entry": "aws(PR=cf-eu11, euAccess) | ()", "reason": "InvalidFallback",
             "message": "preference 2 falls back from an EU-access pool to a pool without EU access: every preference after an EU-access one (euAccess, euAccess=*; KEB: EU) must be EU-access too",
             "column": 27, "field": "rules[1]"},
            {"index": 3, "entry": "gcp(PR=cf-sa30) | () | (shared)", "reason": "InvalidFallback",
             "message": "preference 3 falls back from a dedicated pool to a shared one: say so explicitly with shared=fallback (KEB: SF)",
             "column": 22, "field": "rules[2]"},
        ])
    );
    let text = String::from_utf8_lossy(
        &hap(&["validate", "--rule", "aws(PR=cf-eu11, euAccess) | ()"]).stdout,
    )
    .to_string();
    assert!(
        text.contains("rule 1: column 27: preference 2 falls back")
            && text.contains("    aws(PR=cf-eu11, euAccess) | ()\n                              ^"),
        "{text}"
    );
}

#[test]
fn structured_entries_and_pins_name_their_field() {
    let f = manifest(
        "  rules: [aws]\n  structuredRules:\n    - plan: azure\n      oneOf: [{euAccess: Required}, {}]\n  pins:\n    - {globalAccount: ga-1, binding: cb-1}\n    - {globalAccount: ga-2, binding: cb-1}\n",
    );
    let o = hap(&["validate", "-f", path(&f), "-o", "json"]);
    assert_eq!(code(&o), 1);
    let errors = json_out(&o)["errors"].clone();
    assert_eq!(errors[0]["index"], 2);
    assert_eq!(errors[0]["field"], "structuredRules[0].oneOf[1]");
    assert_eq!(errors[0]["entry"], "azure(euAccess) | ()");
    assert_eq!(errors[0]["column"], Value::Null);
    assert_eq!(errors[1]["reason"], "PinConflict");
    assert_eq!(errors[1]["field"], "pins[1]");
    assert!(
        errors[1]["message"]
            .as_str()
            .unwrap()
            .contains("binding cb-1 is pinned to global account ga-2 and, in pins[0], to ga-1")
    );
    let text = String::from_utf8_lossy(&hap(&["validate", "-f", path(&f)]).stdout).to_string();
    assert!(
        text.contains("error[InvalidFallback]: rule 2 (structuredRules[0].oneOf[1]): preference 2")
            && text.contains("error[PinConflict]: pins[1]: binding cb-1"),
        "{text}"
    );
}

#[test]
fn explain_prints_the_ordered_pools() {
    let o = hap(&[
        "explain",
        "-f",
        POLICY,
        "--plan",
        "gcp",
        "--platform-region",
        "cf-sa30",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 0);
    let v = json_out(&o);
    assert_eq!(v["index"], 6);
    assert_eq!(v["hyperscalerType"], "gcp_cf-sa30");
    let prefs: Vec<(Value, Value, Value)> = v["preferences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["index"].clone(),
                p["hyperscalerType"].clone(),
                p["shared"].clone(),
            )
        })
        .collect();
    assert_eq!(
        prefs,
        [
            (json!(1), json!("gcp_cf-sa30"), json!(false)),
            (json!(2), json!("gcp"), json!(false)),
            (json!(3), json!("gcp"), json!(true)),
        ]
    );
    assert_eq!(v["preferences"][2]["selectors"]["claim"], Value::Null);
    let text = String::from_utf8_lossy(
        &hap(&[
            "explain",
            "-f",
            POLICY,
            "--plan",
            "gcp",
            "--platform-region",
            "cf-sa30",
        ])
        .stdout,
    )
    .to_string();
    assert!(
        text.contains("  2. hyperscalerType=gcp, euAccess=false, shared=false (fallback)"),
        "{text}"
    );
}

#[test]
fn explain_reports_a_denial_with_the_entry_and_its_message() {
    let o = hap(&[
        "explain",
        "-f",
        POLICY,
        "--plan",
        "gcp",
        "--platform-region",
        "cf-me20",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 1);
    let e = &json_out(&o)["error"];
    assert_eq!(e["reason"], "Denied");
    assert_eq!(e["index"], 7);
    assert!(
        e["entry"]
            .as_str()
            .unwrap()
            .starts_with("gcp(PR=cf-me20) deny")
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .ends_with("denies plan `gcp` with platform region `cf-me20` and no cluster region: cf-me20 opens when its account pool is set up; ask #sre-kyma")
    );
    // A deny ties with an allow of the same conditions: an error, not a silent winner.
    let o = hap(&[
        "validate",
        "--rule",
        "gcp(PR=x)",
        "--rule",
        "gcp(PR=x) deny",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 1);
    assert_eq!(json_out(&o)["errors"][0]["reason"], "DuplicateRule");
}

#[test]
fn migrate_rewrites_entries_in_every_form_without_changing_a_result() {
    let requests: &[&[&str]] = &[
        &["--plan", "gcp", "--platform-region", "cf-sa30"],
        &["--plan", "gcp", "--platform-region", "cf-me20"],
        &["--plan", "aws", "--platform-region", "cf-us21"],
        &["--plan", "aws", "--platform-region", "cf-eu11"],
        &["--plan", "azure", "--platform-region", "cf-ch20"],
        &["--plan", "trial", "--provider", "gcp"],
    ];
    let explain = |file: &str, req: &[&str]| {
        let mut args = vec!["explain", "-f", file, "-o", "json"];
        args.extend_from_slice(req);
        let o = hap(&args);
        let mut v = json_out(&o);
        // Indices and entry texts move with the form; pools and reasons must not.
        for k in ["rule", "index"] {
            v.as_object_mut().unwrap().remove(k);
        }
        if let Some(e) = v.get_mut("error").and_then(Value::as_object_mut) {
            for k in ["entry", "index", "message"] {
                e.remove(k);
            }
        }
        v
    };
    for to in ["seed", "keb", "structured"] {
        let o = hap(&["migrate", "--hapconfig", POLICY, "--to", to]);
        assert_eq!(code(&o), 0, "{to}: {}", String::from_utf8_lossy(&o.stderr));
        let out = file(&String::from_utf8_lossy(&o.stdout));
        let v = hap(&["validate", "-f", path(&out), "-o", "json"]);
        assert_eq!(json_out(&v)["valid"], true, "{to}");
        for req in requests {
            assert_eq!(
                explain(path(&out), req),
                explain(POLICY, req),
                "{to} {req:?}"
            );
        }
        let yaml = String::from_utf8_lossy(&o.stdout);
        assert!(
            yaml.contains("globalAccount: ga-bank"),
            "pins are kept: {yaml}"
        );
        if to == "structured" {
            assert!(!yaml.contains("\n  rules:"), "{yaml}");
        }
    }
    assert_eq!(code(&hap(&["migrate", "--hapconfig", POLICY])), 2);
}
