//! The `hap validate|explain|migrate` binary: exit codes 0/1/2 and the exact JSON contract of
//! docs/design.md §6, for the Seed, KEB and legacy examples.

use std::io::Write;
use std::process::{Command, Output};

use serde_json::{Value, json};

const HAP: &str = env!("CARGO_BIN_EXE_hap");
const SEED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/hapconfig-seed.yaml");
const KEB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/hapconfig-keb.yaml");
const LEGACY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/hapconfig-legacy.yaml"
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

fn path(f: &tempfile::NamedTempFile) -> &str {
    f.path().to_str().unwrap()
}

#[test]
fn validate_accepts_the_three_examples() {
    for example in [SEED, KEB, LEGACY] {
        let o = hap(&["validate", "-f", example, "-o", "json"]);
        assert_eq!(code(&o), 0, "{example}");
        assert_eq!(
            json_out(&o),
            json!({"valid": true, "errors": [], "warnings": []})
        );
        let text = hap(&["validate", "-f", example]);
        assert!(String::from_utf8_lossy(&text.stdout).starts_with("valid: "));
    }
}

#[test]
fn validate_reports_every_error_with_position() {
    let o = hap(&[
        "validate",
        "--rule",
        "aws(PR=)",
        "--rule",
        "openstack(CR=*, shared)",
        "--rule",
        "aws",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 1);
    let v = json_out(&o);
    assert_eq!(v["valid"], json!(false));
    assert_eq!(
        v["errors"][0],
        json!({
            "index": 1, "entry": "aws(PR=)", "reason": "ParseError",
            "message": "PR is empty: write `PR=<region>` or `PR=*`", "column": 8, "field": "rules[0]"
        })
    );
    assert_eq!(v["errors"][1]["reason"], "UnknownPlan");
    assert_eq!(v["errors"][1]["column"], 1);
    assert_eq!(v["errors"].as_array().unwrap().len(), 2);
    assert_eq!(
        v.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["errors", "valid", "warnings"]
    );
    let text =
        String::from_utf8_lossy(&hap(&["validate", "--rule", "aws(PR=)"]).stdout).to_string();
    assert!(text.contains("    aws(PR=)\n           ^"), "{text}");
}

#[test]
fn validate_keb_syntax_warns_about_star_and_required_plans() {
    let o = hap(&[
        "validate",
        "--syntax",
        "keb",
        "--rule",
        "sap-converged-cloud(HR=*)->S",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 0);
    let w = &json_out(&o)["warnings"][0];
    assert_eq!(
        (w["index"].clone(), w["column"].clone(), w["reason"].clone()),
        (json!(1), json!(24), json!("ParseError"))
    );
    let o = hap(&[
        "validate",
        "-f",
        KEB,
        "--required-plan",
        "gdch",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 1);
    assert_eq!(
        json_out(&o)["errors"][0],
        json!({
            "index": null, "entry": null, "reason": "UncoveredPlan",
            "message": "required plan `gdch` is not covered by any rule: add an entry for it, e.g. `gdch`", "column": null, "field": null
        })
    );
}

#[test]
fn validate_with_bindings_reports_missing_pools() {
    let list = file(
        "apiVersion: v1\nkind: List\nitems:\n\
         - metadata: {name: a, labels: {hyperscalerType: azure}}\n\
         - metadata: {name: b, labels: {hyperscalerType: gcp}}\n",
    );
    let o = hap(&[
        "validate",
        "--rule",
        "azure",
        "--rule",
        "gcp",
        "--rule",
        "gcp(PR=cf-sa30)",
        "--bindings",
        path(&list),
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 1);
    let v = json_out(&o);
    assert_eq!(
        v["errors"],
        json!([{
            "index": 3, "entry": "gcp(PR=cf-sa30)", "reason": "MissingPool",
            "message": "no usable binding in the pool `hyperscalerType=gcp_cf-sa30,!euAccess,shared!=true,!dirty`", "column": null,
            "field": "rules[2]"
        }])
    );
    let docs = file(
        "metadata: {labels: {hyperscalerType: azure}}\n---\nmetadata: {labels: {hyperscalerType: gcp}}\n",
    );
    let o = hap(&[
        "validate",
        "--rule",
        "azure",
        "--rule",
        "gcp",
        "--bindings",
        path(&docs),
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(code(&hap(&["validate"])), 2);
    assert_eq!(code(&hap(&["validate", "-f", SEED, "--rule", "aws"])), 2);
    assert_eq!(code(&hap(&["validate", "--syntax", "keb", "-f", SEED])), 2);
    assert_eq!(code(&hap(&["validate", "-f", "/nonexistent.yaml"])), 2);
    let not_a_config = file("apiVersion: v1\nkind: ConfigMap\n");
    assert_eq!(code(&hap(&["validate", "-f", path(&not_a_config)])), 2);
    assert_eq!(code(&hap(&["explain", "-f", SEED])), 2);
    assert_eq!(code(&hap(&["migrate"])), 2);
    assert_eq!(code(&hap(&["migrate", "--legacy", "/nonexistent.yaml"])), 2);
}

#[test]
fn explain_json_shape_in_all_three_syntaxes() {
    for example in [SEED, KEB, LEGACY] {
        let o = hap(&[
            "explain",
            "-f",
            example,
            "--plan",
            "gcp",
            "--platform-region",
            "cf-sa30",
            "--global-account",
            "ga-1",
            "-o",
            "json",
        ]);
        assert_eq!(code(&o), 0, "{example}");
        let v = json_out(&o);
        let rule = v["rule"].as_str().unwrap().to_string();
        assert!(rule.starts_with("gcp(PR=cf-sa30)"), "{rule}");
        let selectors = json!({
            "tenant": "hyperscalerType=gcp_cf-sa30,!euAccess,shared!=true,!dirty,tenantName=ga-1",
            "claim": "hyperscalerType=gcp_cf-sa30,!euAccess,shared!=true,!dirty,!tenantName",
            "any": "hyperscalerType=gcp_cf-sa30,!euAccess,shared!=true,!dirty"
        });
        assert_eq!(
            v,
            json!({
                "rule": rule, "index": v["index"], "hyperscalerType": "gcp_cf-sa30", "euAccess": false, "shared": false,
                "selectors": selectors,
                "preferences": [{"index": 1, "hyperscalerType": "gcp_cf-sa30", "euAccess": false, "shared": false, "selectors": selectors}]
            })
        );
        // The documented keys come first, in their order; `preferences` was added after them.
        let text = String::from_utf8_lossy(&o.stdout);
        let at = |k: &str| text.find(&format!("\"{k}\"")).unwrap();
        assert!(at("rule") < at("index") && at("selectors") < at("preferences"));
        assert!(v["index"].as_u64().unwrap() >= 1);
    }
}

#[test]
fn explain_shared_result_has_null_tenant_and_claim() {
    let o = hap(&[
        "explain",
        "-f",
        SEED,
        "--plan",
        "sap-converged-cloud",
        "--cluster-region",
        "eu-de-1",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 0);
    let selectors = json!({"tenant": null, "claim": null, "any": "hyperscalerType=openstack_eu-de-1,!euAccess,shared=true"});
    assert_eq!(
        json_out(&o),
        json!({
            "rule": "sap-converged-cloud(CR=*, shared)", "index": 6, "hyperscalerType": "openstack_eu-de-1",
            "euAccess": false, "shared": true,
            "selectors": selectors,
            "preferences": [{"index": 1, "hyperscalerType": "openstack_eu-de-1", "euAccess": false, "shared": true, "selectors": selectors}]
        })
    );
    let o = hap(&[
        "explain",
        "-f",
        SEED,
        "--plan",
        "azure",
        "--platform-region",
        "cf-ch20",
        "-o",
        "json",
    ]);
    assert_eq!(
        json_out(&o)["selectors"]["tenant"],
        "hyperscalerType=azure,euAccess=true,shared!=true,!dirty,tenantName=<tenant>"
    );
}

#[test]
fn explain_errors_exit_1_with_reason() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["--plan", "gcp", "--platform-region", "cf-sa30"],
            "NoMatchingRule",
        ),
        (&["--plan", "trial"], "MissingProvider"),
        (&["--plan", "openstack"], "UnknownPlan"),
        (&["--plan", "sap-converged-cloud"], "NoMatchingRule"),
        (
            &[
                "--plan",
                "aws",
                "--platform-region",
                "cf-eu11",
                "--cluster-region",
                "x",
            ],
            "AmbiguousMatch",
        ),
    ];
    let rules = [
        "--rule",
        "azure",
        "--rule",
        "trial(shared)",
        "--rule",
        "sap-converged-cloud(CR=*)",
    ];
    for (args, reason) in &cases[..4] {
        let all: Vec<&str> = ["explain"]
            .into_iter()
            .chain(rules)
            .chain(args.iter().copied())
            .chain(["-o", "json"])
            .collect();
        let o = hap(&all);
        assert_eq!(code(&o), 1, "{args:?}");
        let v = json_out(&o);
        assert_eq!(v["error"]["reason"], *reason, "{v}");
        assert_eq!(v.as_object().unwrap().len(), 1);
        assert_eq!(
            v["error"].as_object().unwrap().keys().collect::<Vec<_>>(),
            ["message", "reason"]
        );
    }
    // Invalid rules cannot be evaluated: InvalidConfig with every error in the message.
    let o = hap(&[
        "explain",
        "--rule",
        "aws(PR=x)",
        "--rule",
        "aws(CR=y)",
        "--plan",
        "aws",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 1);
    let v = json_out(&o);
    assert_eq!(v["error"]["reason"], "InvalidConfig");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ambiguous")
    );
}

#[test]
fn migrate_keb_values_prints_a_valid_manifest_with_comments() {
    let values = file(
        "hap:\n  rule:\n    - aws\n    - aws(PR=cf-eu11)->EU\n    - trial->S\n    - sap-converged-cloud(HR=*)->S\n  \
         multiHyperscalerAccount:\n    allowedGlobalAccounts: [ga-1]\n    limits: {default: 3, sapconvergedcloud: 2, aws: 0}\n",
    );
    let o = hap(&[
        "migrate",
        "--keb-values",
        path(&values),
        "--name",
        "hap",
        "--binding-namespace",
        "garden-x",
    ]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let manifest = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(manifest.contains("ruleSyntax: KEB"));
    assert!(manifest.contains("# Not exact: upstream KEB reads `*`"));
    assert!(manifest.contains("\"openstack\": 2") && !manifest.contains("\"aws\": 0"));
    assert!(String::from_utf8_lossy(&o.stderr).contains("limits.aws: 0"));
    let out = file(&manifest);
    let v = hap(&["validate", "-f", path(&out), "-o", "json"]);
    assert_eq!(code(&v), 0);
    assert_eq!(json_out(&v)["warnings"].as_array().unwrap().len(), 1);
    let parsed: Value = serde_saphyr::from_str(&manifest).unwrap();
    assert_eq!(parsed["metadata"]["name"], "hap");
    assert_eq!(parsed["spec"]["bindingNamespace"], "garden-x");
    assert_eq!(
        parsed["spec"]["multiHyperscalerAccount"]["allowedGlobalAccounts"],
        json!(["ga-1"])
    );
}

#[test]
fn migrate_keb_values_carries_the_project_and_the_operation_blocklist() {
    let values = "tests/data/keb/values.yaml";
    let o = hap(&["migrate", "--keb-values", values]);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(code(&o), 0, "{stderr}");
    let manifest = String::from_utf8_lossy(&o.stdout).to_string();
    let parsed: Value = serde_saphyr::from_str(&manifest).unwrap();
    assert_eq!(parsed["spec"]["bindingNamespace"], "garden-kyma-mig");
    assert_eq!(
        parsed["spec"]["rules"],
        json!([
            "aws",
            "aws(PR=cf-eu11)->EU",
            "azure",
            "trial->S",
            "aws(GA=ga-offboarded) -> DENY \"Global account {globalAccount} is being offboarded\"",
            "azure(GA=ga-offboarded) -> DENY \"Global account {globalAccount} is being offboarded\"",
            "gcp -> DENY \"The {plan} plan is closed\""
        ]),
        "{manifest}"
    );
    assert!(manifest.contains("# Left out, as operationBlocklist blocks every provisioning of their plan: `gcp(PR=cf-sa30)->PR`"), "{manifest}");
    assert!(
        stderr.contains("bindingNamespace garden-kyma-mig from gardener.project"),
        "{stderr}"
    );
    assert!(
        stderr.contains("operationBlocklist.update (1 rule(s)) has no equivalent"),
        "{stderr}"
    );
    let out = file(&manifest);
    let explain = |args: &[&str]| {
        let mut a = vec!["explain", "-f", path(&out), "-o", "json"];
        a.extend_from_slice(args);
        hap(&a)
    };
    let denied = explain(&[
        "--plan",
        "aws",
        "--platform-region",
        "cf-eu11",
        "--global-account",
        "GA-Offboarded",
    ]);
    assert_eq!(json_out(&denied)["error"]["reason"], "Denied");
    assert!(
        json_out(&denied)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Global account GA-Offboarded is being offboarded")
    );
    let allowed = explain(&[
        "--plan",
        "aws",
        "--platform-region",
        "cf-eu11",
        "--global-account",
        "ga-other",
    ]);
    assert_eq!(json_out(&allowed)["euAccess"], true);
    let gcp = explain(&[
        "--plan",
        "gcp",
        "--platform-region",
        "cf-sa30",
        "--global-account",
        "ga-other",
    ]);
    assert!(
        json_out(&gcp)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("The gcp plan is closed")
    );
    let flag = hap(&[
        "migrate",
        "--keb-values",
        values,
        "--binding-namespace",
        "garden-other",
    ]);
    let parsed: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&flag.stdout)).unwrap();
    assert_eq!(parsed["spec"]["bindingNamespace"], "garden-other");
    assert!(String::from_utf8_lossy(&flag.stderr).contains("gardener.project is `kyma-mig`"));
}

#[test]
fn migrate_keb_values_uses_seed_where_exact() {
    let values =
        file("hap:\n  rule: [aws, gcp(PR=cf-sa30)->PR, trial->S, sap-converged-cloud(HR=x)->HR]\n");
    let o = hap(&["migrate", "--keb-values", path(&values)]);
    assert_eq!(code(&o), 0);
    let parsed: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&o.stdout)).unwrap();
    assert_eq!(
        parsed["spec"]["rules"],
        json!([
            "aws",
            "gcp(PR=cf-sa30)",
            "trial(shared)",
            "sap-converged-cloud(CR=x)"
        ])
    );
    assert!(parsed["spec"].get("ruleSyntax").is_none());
}

#[test]
fn migrate_legacy_keeps_what_seed_cannot_say() {
    let legacy = file(
        "hap:\n  platformRegionRule: \"gcp:cf-sa30\"\n  clusterRegionRule: \"sap-converged-cloud\"\n  \
         sharedRule: \"trial;sap-converged-cloud\"\n  euAccessRule: \"azure:cf-ch20;aws:cf-eu11\"\n",
    );
    let o = hap(&["migrate", "--legacy", path(&legacy)]);
    assert_eq!(code(&o), 0);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("kept legacyRules") && stderr.contains("euAccessPlatformRegions"),
        "{stderr}"
    );
    let parsed: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&o.stdout)).unwrap();
    assert_eq!(
        parsed["spec"]["legacyRules"]["euAccessRule"],
        "azure:cf-ch20;aws:cf-eu11"
    );
    assert_eq!(parsed["metadata"]["name"], "default");
    assert_eq!(parsed["spec"]["bindingNamespace"], "garden-kyma");
}

#[test]
fn migrate_legacy_prints_seed_rules_when_exact() {
    let legacy = file(
        "platformRegionRule: \"gcp:cf-sa30\"\nclusterRegionRule: \"sap-converged-cloud\"\n\
         sharedRule: \"trial;sap-converged-cloud\"\neuAccessRule: \"azure:cf-ch20;aws:cf-ch20\"\n",
    );
    let o = hap(&["migrate", "--legacy", path(&legacy)]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let manifest = String::from_utf8_lossy(&o.stdout).to_string();
    let parsed: Value = serde_saphyr::from_str(&manifest).unwrap();
    let rules: Vec<&str> = parsed["spec"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for want in [
        "azure(euAccess=*)",
        "aws(euAccess=*)",
        "gcp(PR=cf-sa30)",
        "gcp",
        "sap-converged-cloud(CR=*, shared)",
        "trial(shared)",
    ] {
        assert!(rules.contains(&want), "{want} in {rules:?}");
    }
    assert_eq!(
        parsed["spec"]["euAccessPlatformRegions"],
        json!(["cf-ch20"])
    );
    let out = file(&manifest);
    let e = hap(&[
        "explain",
        "-f",
        path(&out),
        "--plan",
        "aws",
        "--platform-region",
        "cf-ch20",
        "-o",
        "json",
    ]);
    assert_eq!(json_out(&e)["euAccess"], true);
}

#[test]
fn migrate_legacy_rejects_invalid_items() {
    let legacy = file("sharedRule: \"trial;eu:*\"\n");
    let o = hap(&["migrate", "--legacy", path(&legacy)]);
    assert_eq!(code(&o), 1);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("column 7"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_rule_that_starts_with_a_dash_is_validated_not_a_usage_error() {
    // Issue 11, defect 10: `--rule -aws` was taken for an unknown flag (exit 2, clap usage text)
    // instead of a rule entry whose error names it.
    for args in [
        &["validate", "--rule", "-aws", "-o", "json"][..],
        &["validate", "--rule", "aws", "--rule", "--gcp", "-o", "json"][..],
    ] {
        let o = hap(args);
        assert_eq!(
            code(&o),
            1,
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v = json_out(&o);
        assert_eq!(v["valid"], json!(false), "{v}");
        // Reported like any other entry: named, with its index and column (`-aws` lexes as a
        // plan name no table knows).
        let bad = v["errors"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["entry"].as_str().unwrap_or_default().starts_with('-'));
        let bad = bad.unwrap_or_else(|| panic!("no error names the entry: {v}"));
        assert!(bad["index"].is_number() && bad["column"].is_number(), "{v}");
        let reason = bad["reason"].as_str();
        assert!(matches!(reason, Some("ParseError" | "UnknownPlan")), "{v}");
    }
    let o = hap(&["explain", "--rule", "-aws", "--plan", "aws", "-o", "json"]);
    assert_eq!(code(&o), 1, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(json_out(&o)["error"]["reason"], json!("InvalidConfig"));
}

#[test]
fn validate_and_explain_show_the_tenant_policy() {
    let f = file(
        "apiVersion: accountpool.io/v1alpha1\nkind: HapConfig\nmetadata: {name: default}\nspec:\n  bindingNamespace: garden-kyma\n  rules: [aws]\n  tenants:\n    rules:\n      - {name: keb, kinds: [Runtime], namespaces: [kcp-system]}\n      - {name: own, kinds: [AccountClaim], globalAccountFromNamespaceLabel: accountpool.io/global-account}\n",
    );
    let o = hap(&["validate", "-f", path(&f)]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(code(&o), 0, "{out}");
    assert!(
        out.contains("tenants: 2 allow rule(s)")
            && out.contains("rule `keb`: Runtime: namespace in [kcp-system]"),
        "{out}"
    );
    let refused = hap(&[
        "explain",
        "-f",
        path(&f),
        "--plan",
        "aws",
        "--global-account",
        "ga-1",
        "--namespace",
        "team-a",
        "--namespace-label",
        "accountpool.io/global-account=ga-2",
        "-o",
        "json",
    ]);
    assert_eq!(code(&refused), 1);
    let error = &json_out(&refused)["error"];
    assert_eq!(error["reason"], "TenantNotAllowed");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("rule `own`"),
        "{error}"
    );
    let allowed = hap(&[
        "explain",
        "-f",
        path(&f),
        "--plan",
        "aws",
        "--global-account",
        "ga-1",
        "--namespace",
        "kcp-system",
        "--requester",
        "Runtime",
    ]);
    let out = String::from_utf8_lossy(&allowed.stdout);
    assert_eq!(code(&allowed), 0, "{out}");
    assert!(out.contains("tenants: allowed by rule `keb`"), "{out}");
}

/// Deny entries by global account (issue 20): validate points at upstream's comma list and
/// accepts the `|` list; explain shows which tenant an entry denies, with the message filled in.
#[test]
fn validate_and_explain_show_deny_entries_by_global_account() {
    let o = hap(&[
        "validate",
        "--rule",
        "trial",
        "--rule",
        "trial(GA=a,b) deny",
    ]);
    assert_eq!(code(&o), 1);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("rule 2: column 11: global accounts are separated by `|`"),
        "{out}"
    );
    let spec = file(
        "apiVersion: accountpool.io/v1alpha1\nkind: HapConfig\nmetadata: {name: default}\nspec:\n  bindingNamespace: garden-kyma\n  plans: {trial: {providerFromRequest: true}}\n  rules:\n    - trial(shared)\n    - 'trial(GA!=GA-Partner) deny \"{plan} is paused for {globalAccount}\"'\n",
    );
    assert_eq!(code(&hap(&["validate", "-f", path(&spec)])), 0);
    let explain = |ga: &str| {
        json_out(&hap(&[
            "explain",
            "-f",
            path(&spec),
            "--plan",
            "trial",
            "--provider",
            "aws",
            "--global-account",
            ga,
            "-o",
            "json",
        ]))
    };
    let denied = explain("ga-other");
    assert_eq!(denied["error"]["reason"], json!("Denied"), "{denied}");
    assert_eq!(
        denied["error"]["message"],
        json!(
            "rule 2 `trial(GA!=GA-Partner) deny \"{plan} is paused for {globalAccount}\"` denies plan `trial` with no platform region and no cluster region for global account `ga-other`: trial is paused for ga-other"
        )
    );
    let served = explain("ga-partner");
    assert_eq!(served["shared"], json!(true), "{served}");
}

/// Found by review: `hap run` with a webhook address and no client CA served forged admission
/// reviews. Now it refuses to start, naming both ways out, before it talks to any API server.
#[test]
fn run_refuses_a_webhook_without_a_client_ca_unless_told_to_serve_anyone() {
    let kubeconfig = file(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
    );
    let o = Command::new(HAP)
        .args([
            "run",
            "--webhook-addr=127.0.0.1:0",
            "--http-addr=127.0.0.1:0",
            "--metrics-addr=127.0.0.1:0",
            "--leader-elect=false",
        ])
        .env("KUBECONFIG", path(&kubeconfig))
        .env_remove("HAP_WEBHOOK_CLIENT_CA")
        .env_remove("HAP_WEBHOOK_ALLOW_UNAUTHENTICATED")
        .env_remove("HAP_GARDEN_KUBECONFIG")
        .output()
        .expect("run hap");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(code(&o), 1, "{out}");
    assert!(
        out.contains("--webhook-client-ca") && out.contains("--webhook-allow-unauthenticated"),
        "{out}"
    );
}

/// Found by review: tenant rules naming users or groups mean nothing when the webhook serves
/// callers without a client certificate (anyone reaching the port can claim any user). validate
/// cannot see the Deployment; it warns unless told the webhook runs with `--webhook-client-ca`
/// (the same flag and env as `hap run`, so inside the operator's pod it knows).
#[test]
fn validate_warns_when_tenant_rules_name_users_and_callers_are_not_authenticated() {
    let f = file(
        "apiVersion: accountpool.io/v1alpha1\nkind: HapConfig\nmetadata: {name: default}\nspec:\n  bindingNamespace: garden-kyma\n  rules: [aws]\n  tenants:\n    rules:\n      - {name: keb, kinds: [Runtime], groups: ['system:serviceaccounts:kcp-system']}\n      - {name: own, kinds: [AccountClaim], namespaces: [team-a]}\n",
    );
    let validate = |extra: &[&str]| {
        Command::new(HAP)
            .args(["validate", "-f", path(&f)])
            .args(extra)
            .env_remove("HAP_WEBHOOK_CLIENT_CA")
            .output()
            .expect("run hap")
    };
    let open = validate(&["-o", "json"]);
    assert_eq!(code(&open), 0, "a warning, not an error");
    let warnings = json_out(&open)["warnings"].clone();
    assert_eq!(warnings.as_array().map(Vec::len), Some(1), "{warnings}");
    assert_eq!(warnings[0]["reason"], "UnauthenticatedCallers");
    assert_eq!(warnings[0]["field"], "tenants.rules[0]");
    let message = warnings[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("rule `keb`") && message.contains("--webhook-client-ca"),
        "{message}"
    );
    let text = validate(&[]);
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(out.contains("warning[UnauthenticatedCallers]"), "{out}");
    let signed = validate(&[
        "-o",
        "json",
        "--webhook-client-ca",
        "/etc/hap-operator/webhook-client-ca/ca.crt",
    ]);
    assert_eq!(code(&signed), 0);
    assert_eq!(json_out(&signed)["warnings"], json!([]));
}

#[test]
fn yaml_output_holds_what_json_output_holds() {
    let explain = |format: &str| {
        hap(&[
            "explain",
            "-f",
            SEED,
            "--plan",
            "gcp",
            "--platform-region",
            "cf-sa30",
            "--global-account",
            "ga-1",
            "-o",
            format,
        ])
    };
    let validate = |format: &str| hap(&["validate", "--rule", "aws(PR=)", "-o", format]);
    for (what, json, yaml) in [
        ("explain", explain("json"), explain("yaml")),
        ("validate", validate("json"), validate("yaml")),
    ] {
        assert_eq!(code(&json), code(&yaml), "{what}");
        let from_yaml: Value = serde_saphyr::from_slice(&yaml.stdout)
            .unwrap_or_else(|e| panic!("{what}: {e}: {}", String::from_utf8_lossy(&yaml.stdout)));
        assert_eq!(from_yaml, json_out(&json), "{what}");
    }
}
