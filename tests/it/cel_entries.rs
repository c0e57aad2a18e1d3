//! The CRD's apply-time checks of entry strings (regular expressions in CEL rules, see
//! api::policy) against the operator's validation: for every entry the printers can write, in
//! any spacing, both find the same fallback mistakes at the same column. The API server runs the
//! expressions for real in tests/it/e2e_policy.rs; the `regex` crate has RE2's syntax and
//! leftmost-first matching, so the columns agree there too.

use std::sync::OnceLock;

use hap_operator::api::policy::{EntryCheck, entry_checks};
use hap_operator::api::{HapConfigSpec, RuleSyntax};
use hap_operator::diag::Reason;
use hap_operator::rules::{CompiledRules, Cond, EuAccess, PoolResult, Rule, TenantCond};
use proptest::prelude::*;

/// What a check found: the kind (EU or shared) and the column.
type Finding = (&'static str, usize);

fn kind(message: &str) -> &'static str {
    if message.contains("EU-access") {
        "eu"
    } else {
        "shared"
    }
}

/// The CRD's view, computed as the CEL rules and messages do; per kind the smallest column (two
/// checks of one kind may both fire; the first mistake is the one the operator reports).
fn by_cel(entry: &str) -> Vec<Finding> {
    // The CRD's checks with their expressions, and the head test, compiled once.
    type Compiled = (Vec<(EntryCheck, regex::Regex)>, regex::Regex);
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    let (checks, head) = COMPILED.get_or_init(|| {
        let checks = entry_checks()
            .into_iter()
            .map(|c| {
                let re = regex::Regex::new(&c.violation).expect("pattern compiles");
                (c, re)
            })
            .collect();
        let head = regex::Regex::new("[(,]shared(?:=true|=fallback)?[,)]").expect("pattern");
        (checks, head)
    });
    let keb = entry.contains("->");
    let normalized = entry.replace(' ', "");
    let head_shared = head.is_match(&entry.split('|').next().unwrap_or_default().replace(' ', ""));
    let mut out: Vec<Finding> = Vec::new();
    for (check, re) in checks {
        if check.keb != keb || entry.contains('"') || (check.head_dedicated && head_shared) {
            continue;
        }
        let Some(m) = re.find(&normalized) else {
            continue;
        };
        let m = m.as_str();
        let bars = m.matches('|').count() - usize::from(m.ends_with('|'));
        // The column of the bars-th `|` of the entry as written.
        let col = entry
            .char_indices()
            .filter(|(_, c)| *c == '|')
            .nth(bars - 1)
            .map(|(i, _)| entry[..i].chars().count() + 1)
            .expect("the match has a `|`");
        let k = kind(check.what);
        match out.iter_mut().find(|(kk, _)| *kk == k) {
            Some(f) => f.1 = f.1.min(col),
            None => out.push((k, col)),
        }
    }
    out.sort();
    out
}

/// The operator's view: InvalidFallback errors about EU access or sharing.
fn by_operator(entry: &str, syntax: RuleSyntax) -> Vec<Finding> {
    let spec = HapConfigSpec {
        rule_syntax: Some(syntax),
        rules: Some(vec![entry.to_string()]),
        binding_namespace: "ns".into(),
        ..Default::default()
    };
    let Err(v) = CompiledRules::from_spec(&spec) else {
        return Vec::new();
    };
    let mut out: Vec<Finding> = v
        .errors
        .iter()
        .filter(|d| d.reason == Reason::InvalidFallback && d.message.contains("falls back"))
        .map(|d| (kind(&d.message), d.column.unwrap_or(0)))
        .collect();
    out.sort();
    out
}

fn pool() -> impl Strategy<Value = PoolResult> {
    (
        any::<[bool; 4]>(),
        prop::sample::select(vec![
            EuAccess::Never,
            EuAccess::Always,
            EuAccess::FromRequest,
        ]),
    )
        .prop_map(
            |([pr_suffix, cr_suffix, shared, consent], eu_access)| PoolResult {
                pr_suffix,
                cr_suffix,
                shared,
                eu_access,
                shared_fallback: shared && consent,
            },
        )
}

fn rule() -> impl Strategy<Value = Rule> {
    let cond = prop_oneof![
        Just(Cond::Absent),
        Just(Cond::Any),
        Just(Cond::Exact("cf-eu11".into()))
    ];
    (
        prop::sample::select(vec!["aws", "gcp", "sap-converged-cloud"]),
        cond.clone(),
        cond,
        prop::collection::vec(pool(), 1..5),
    )
        .prop_map(|(plan, pr, cr, pools)| Rule {
            plan: plan.to_string(),
            pr,
            cr,
            ga: TenantCond::Absent,
            pools,
            deny_message: None,
        })
}

/// The same entry with its spaces removed, or every space doubled.
fn spacings(text: &str) -> [String; 3] {
    [
        text.to_string(),
        text.replace(' ', ""),
        text.replace(' ', "  "),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn the_crd_and_the_operator_find_the_same_fallback_mistakes(r in rule()) {
        for (syntax, text) in [(RuleSyntax::Seed, r.to_seed()), (RuleSyntax::Keb, r.to_keb())] {
            let Some(text) = text else { continue };
            for entry in spacings(&text) {
                prop_assert_eq!(by_cel(&entry), by_operator(&entry, syntax), "{}", entry);
            }
        }
    }
}

#[test]
fn known_entries() {
    for (entry, syntax, want) in [
        ("aws(euAccess) | ()", RuleSyntax::Seed, vec![("eu", 15)]),
        (
            "aws(PR=cf-eu11, euAccess=*) | (euAccess) | (PR)",
            RuleSyntax::Seed,
            vec![("eu", 42)],
        ),
        (
            "aws(euAccess) | (euAccess=*)",
            RuleSyntax::Seed,
            vec![("eu", 15)],
        ),
        (
            "gcp(PR=a) | () | (shared)",
            RuleSyntax::Seed,
            vec![("shared", 16)],
        ),
        (
            "gcp(PR=a) | (shared=fallback) | (shared)",
            RuleSyntax::Seed,
            vec![("shared", 31)],
        ),
        (
            "gcp(shared) | () | (shared=fallback)",
            RuleSyntax::Seed,
            vec![],
        ),
        (
            "gcp(PR=a) -> PR | - | S",
            RuleSyntax::Keb,
            vec![("shared", 21)],
        ),
        (
            "aws -> EU | EU,S | PR",
            RuleSyntax::Keb,
            vec![("eu", 18), ("shared", 11)],
        ),
        ("aws->EU|-", RuleSyntax::Keb, vec![("eu", 8)]),
        (r#"aws deny "a | b""#, RuleSyntax::Seed, vec![]),
        // `|` between global accounts is no fallback.
        ("aws(GA=shared|euaccess) deny", RuleSyntax::Seed, vec![]),
        ("aws(PR=*, GA!=a|b|s) deny", RuleSyntax::Seed, vec![]),
        ("aws(GA=eu|s|sf) -> DENY", RuleSyntax::Keb, vec![]),
    ] {
        let mut want = want;
        want.sort();
        assert_eq!(by_cel(entry), want, "CEL: {entry}");
        assert_eq!(by_operator(entry, syntax), want, "operator: {entry}");
    }
}
