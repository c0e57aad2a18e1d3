//! `crds/` is generated from the Rust types by `hap crd`; this fails when the committed copy
//! drifts, with the command that fixes it. The published licensing metadata and the changelog are
//! held to `Cargo.toml` here too, since a compliance check reads them before anything else, and
//! the README's performance table to the record in BENCHMARKS.md it is copied from.

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

fn repo_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {name}: {e}"))
}

#[test]
fn licensing_metadata_names_the_license_cargo_declares() {
    let cargo = repo_file("Cargo.toml");
    assert!(
        cargo.contains("license = \"Apache-2.0\""),
        "Cargo.toml declares another license"
    );
    let license = repo_file("LICENSE");
    assert!(
        license.contains("Apache License") && license.contains("Version 2.0, January 2004"),
        "LICENSE is not the Apache-2.0 text"
    );
    assert_eq!(
        license,
        repo_file("LICENSES/Apache-2.0.txt"),
        "LICENSE and LICENSES/Apache-2.0.txt differ"
    );
    let reuse = repo_file("REUSE.toml");
    assert!(
        reuse.contains("SPDX-License-Identifier = \"Apache-2.0\"")
            && reuse.contains("path = \"**\""),
        "REUSE.toml must cover every file with Apache-2.0"
    );
}

#[test]
fn the_changelog_has_a_section_for_the_crate_version() {
    let version = env!("CARGO_PKG_VERSION");
    let changelog = repo_file("CHANGELOG.md");
    assert!(
        changelog.contains(&format!("## [{version}]")),
        "CHANGELOG.md has no section `## [{version}]` for the version in Cargo.toml"
    );
    assert!(
        changelog.contains("## [Unreleased]"),
        "CHANGELOG.md has no Unreleased section"
    );
}

/// The lines from `<!-- headline:begin -->` to `<!-- headline:end -->`, or `None`.
fn headline_block(text: &str) -> Option<String> {
    let start = text.find("<!-- headline:begin -->\n")?;
    let end = text[start..].find("<!-- headline:end -->\n")? + start;
    Some(text[start..end].to_string())
}

#[test]
fn readme_performance_table_is_the_benchmarks_headline_table() {
    let record = headline_block(&repo_file("BENCHMARKS.md"))
        .expect("BENCHMARKS.md has no <!-- headline:begin --> … <!-- headline:end --> block");
    assert!(record.lines().filter(|l| l.starts_with('|')).count() > 2);
    let readme = headline_block(&repo_file("README.md"))
        .expect("README.md has no <!-- headline:begin --> … <!-- headline:end --> block");
    assert!(
        readme == record,
        "README.md's performance table differs from BENCHMARKS.md's headline table: run `scripts/bench.sh report` and commit both"
    );
}

/// `scripts/bench.sh summary`: one row per table and size; each number the median of the runs,
/// with its range where they differ; a cell whose form differs between runs is named so. A phase
/// a run measures at several rates keeps a row per rate (they were merged into one before).
#[test]
fn the_bench_summary_gives_medians_and_ranges_per_table_and_size() {
    let dir = std::env::temp_dir().join(format!("hap-bench-summary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let runs = [
        "BENCH-ROW scale | 10k | 1.20 s | 59 / 61 MiB | 3 ms |\nBENCH-ROW churn | 10k | 80.1 MiB | - |\nBENCH-ROW admission | shared | 20/s | 77 ms |\nBENCH-ROW admission | shared | 50/s | 1789 ms |\n",
        "noise\nBENCH-ROW scale | 10k | 1.00 s | 59 / 65 MiB | 3 ms |\nBENCH-ROW scale | 100k | 30.0 s | 230 / 231 MiB | 4 ms |\nBENCH-ROW admission | shared | 20/s | 140 ms |\nBENCH-ROW admission | shared | 50/s | 2087 ms |\n",
        "BENCH-ROW scale | 10k | 1.60 s | 59 / 62 MiB | 3 ms |\nBENCH-ROW churn | 10k | 82.3 MiB | 7 % |\nBENCH-ROW admission | shared | 20/s | 90 ms |\nBENCH-ROW admission | shared | 50/s | 1900 ms |\n",
    ];
    let logs: Vec<_> = runs
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let p = dir.join(format!("run{i}.log"));
            std::fs::write(&p, text).expect("log");
            p
        })
        .collect();
    let out = std::process::Command::new("bash")
        .arg(format!(
            "{}/scripts/bench-summary.sh",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args(&logs)
        .output()
        .expect("run scripts/bench-summary.sh");
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "BENCH-ROW scale | 10k, median of 3 runs | 1.20 [1.00–1.60] s | 59 / 62 [61–65] MiB | 3 ms |",
            "BENCH-ROW churn | 10k, median of 2 runs | 81.2 [80.1–82.3] MiB | (the runs differ in form) |",
            "BENCH-ROW admission | shared, median of 3 runs | 20/s | 90 [77–140] ms |",
            "BENCH-ROW admission | shared, median of 3 runs | 50/s | 1900 [1789–2087] ms |",
            "BENCH-ROW scale | 100k, median of 1 run | 30.0 s | 230 / 231 MiB | 4 ms |",
        ]
    );
}
