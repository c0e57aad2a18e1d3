//! Fuzz target for the Seed and KEB entry parsers: never panic, and whatever parses prints
//! canonically to text that parses back to the same rule.
//!
//! The parser modules are compiled in directly (they depend on nothing but each other), so the
//! fuzz build does not pull in the operator's Kubernetes dependencies.

#![no_main]

use libfuzzer_sys::fuzz_target;

// The parsers check a global account's label syntax; that leaf comes along, nothing else of `diag`.
#[allow(dead_code)]
#[path = "../../crates/hap-core/src/diag"]
mod diag {
    pub mod labelsyntax;
    pub use labelsyntax::label_value_problem;
}

#[allow(dead_code)]
#[path = "../../crates/hap-core/src/rules"]
mod rules {
    pub mod keb;
    pub mod lexer;
    pub mod model;
    pub mod parse;
    pub mod seed;
}

use rules::parse::ParseResult;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    check(
        rules::seed::parse(text),
        |r| r.to_seed(),
        rules::seed::parse,
    );
    check(rules::keb::parse(text), |r| r.to_keb(), rules::keb::parse);
});

fn check(
    parsed: ParseResult,
    print: impl Fn(&rules::model::Rule) -> Option<String>,
    parse: fn(&str) -> ParseResult,
) {
    let Ok(p) = parsed else { return };
    if let Some(canonical) = print(&p.rule) {
        match parse(&canonical) {
            Ok(again) => assert_eq!(
                again.rule, p.rule,
                "canonical text `{canonical}` re-parses differently"
            ),
            Err(e) => panic!("canonical text `{canonical}` does not parse: {e:?}"),
        }
    }
}
