//! `hap migrate`: turns upstream KEB Helm values or the legacy four properties into a HapConfig
//! manifest on stdout, or rewrites a HapConfig's entries in another form (`--hapconfig FILE --to
//! seed|keb|structured`); whatever is not exact is said in comments and on stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

use crate::api::LegacyRules;
use crate::rules::convert::{self, Form};
use crate::rules::migrate::{self, Migration, Target};
use crate::rules::migrate_keb::binding_namespace;

use super::validate::{read_yaml, render, usage};

/// The form `--to` writes entries in.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormArg {
    Seed,
    Keb,
    Structured,
}

/// Print a HapConfig manifest equivalent to KEB Helm values or the legacy properties.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit codes: 0 printed a valid manifest, 1 the input rules are wrong or the\n\
result does not validate (the manifest is still printed), 2 usage error (unreadable file)."
)]
pub struct Args {
    /// Upstream KEB Helm values (`hap.rule`, `hap.multiHyperscalerAccount`,
    /// `gardener.project`, `operationBlocklist`).
    #[arg(
        long = "keb-values",
        value_name = "FILE",
        required_unless_present_any = ["legacy", "hapconfig", "report"],
        conflicts_with_all = ["legacy", "hapconfig"]
    )]
    pub keb_values: Option<PathBuf>,
    /// YAML with platformRegionRule, clusterRegionRule, sharedRule and euAccessRule (top level
    /// or under `hap:`). Printed as Seed rules where exact, otherwise kept as legacyRules.
    #[arg(long, value_name = "FILE", conflicts_with = "hapconfig")]
    pub legacy: Option<PathBuf>,
    /// A HapConfig manifest whose entries (rules, structuredRules or legacyRules) are rewritten
    /// in the form of --to; the rest of its spec is kept.
    #[arg(long, value_name = "FILE", requires = "to")]
    pub hapconfig: Option<PathBuf>,
    /// With --hapconfig: `seed` or `keb` (entries the syntax cannot say stay in
    /// structuredRules), or `structured` (every entry in structuredRules).
    #[arg(long, value_enum, requires = "hapconfig")]
    pub to: Option<FormArg>,
    /// Namespace of the bindings (the Gardener project namespace). Default: with --keb-values
    /// `garden-<gardener.project>` of the values (KEB's default project is `kyma-dev`),
    /// otherwise `garden-kyma`.
    #[arg(long = "binding-namespace")]
    pub binding_namespace: Option<String>,
    /// Name of the HapConfig.
    #[arg(long, default_value = "default")]
    pub name: String,
    #[command(flatten)]
    pub report: super::report::ReportArgs,
}

pub fn run(args: Args) -> ExitCode {
    if args.report.report {
        return super::report::run(&args.report);
    }
    if let (Some(path), Some(to)) = (&args.hapconfig, args.to) {
        return rewrite(path, to);
    }
    let (path, keb) = match (&args.keb_values, &args.legacy) {
        (Some(p), _) => (p, true),
        (None, Some(p)) => (p, false),
        (None, None) => {
            return usage("one of --keb-values, --legacy or --hapconfig (with --to) is required");
        }
    };
    let doc = match read_yaml(path) {
        Ok(docs) => docs.into_iter().next().unwrap_or(Value::Null),
        Err(e) => return usage(&e),
    };
    let mut target = Target {
        name: args.name.clone(),
        binding_namespace: args
            .binding_namespace
            .clone()
            .unwrap_or_else(|| "garden-kyma".into()),
    };
    let result = if keb {
        let (ns, note) = binding_namespace(&doc, args.binding_namespace.as_deref());
        target.binding_namespace = ns;
        migrate::from_keb_values(&doc, &target).map(|mut m| {
            m.notes.splice(0..0, note);
            m
        })
    } else {
        match legacy_rules(&doc) {
            Ok(l) => migrate::from_legacy(&l, &target),
            Err(e) => return usage(&format!("{}: {e}", path.display())),
        }
    };
    match result {
        Ok(m) => report(&m),
        Err(e) => {
            eprintln!("hap migrate: {e}");
            ExitCode::from(1)
        }
    }
}

/// `--hapconfig FILE --to FORM`: the manifest with its entries rewritten.
fn rewrite(path: &std::path::Path, to: FormArg) -> ExitCode {
    let docs = match read_yaml(path) {
        Ok(d) => d,
        Err(e) => return usage(&e),
    };
    let Some(doc) = docs
        .iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some("HapConfig"))
    else {
        return usage(&format!(
            "{}: no document of kind HapConfig",
            path.display()
        ));
    };
    let spec: crate::api::HapConfigSpec =
        match serde_json::from_value(doc.get("spec").cloned().unwrap_or(Value::Null)) {
            Ok(s) => s,
            Err(e) => {
                return usage(&format!(
                    "{}: the HapConfig spec is malformed: {e}",
                    path.display()
                ));
            }
        };
    let form = match to {
        FormArg::Seed => Form::Seed,
        FormArg::Keb => Form::Keb,
        FormArg::Structured => Form::Structured,
    };
    let c = match convert::convert(&spec, form) {
        Ok(c) => c,
        Err(v) => {
            eprintln!(
                "hap migrate: the rules of {} are invalid; fix them first:",
                path.display()
            );
            for e in &v.errors {
                eprintln!("{}", render("error", e));
            }
            return ExitCode::from(1);
        }
    };
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let manifest = serde_json::json!({
        "apiVersion": "accountpool.io/v1alpha1",
        "kind": "HapConfig",
        "metadata": {"name": name},
        "spec": c.spec,
    });
    let yaml = match serde_saphyr::to_string(&manifest) {
        Ok(y) => y,
        Err(e) => {
            eprintln!("hap migrate: cannot write YAML: {e}");
            return ExitCode::from(1);
        }
    };
    println!(
        "# Generated by `hap migrate --hapconfig {} --to {}`. Check it with `hap validate -f FILE`.",
        path.display(),
        format!("{to:?}").to_lowercase()
    );
    print!("{yaml}");
    for n in &c.notes {
        eprintln!("note: {n}");
    }
    for w in &c.warnings {
        eprintln!("{}", render("warning", w));
    }
    ExitCode::SUCCESS
}

fn report(m: &Migration) -> ExitCode {
    print!("{}", m.manifest);
    for n in &m.notes {
        eprintln!("note: {n}");
    }
    for e in &m.errors {
        eprintln!("{}", render("error", e));
    }
    if m.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The four properties, at the top level or under `hap:`.
fn legacy_rules(doc: &Value) -> Result<LegacyRules, String> {
    let keys = [
        "platformRegionRule",
        "clusterRegionRule",
        "sharedRule",
        "euAccessRule",
    ];
    let holder = [doc.get("hap"), Some(doc)]
        .into_iter()
        .flatten()
        .find(|v| keys.iter().any(|k| v.get(k).is_some()))
        .ok_or("none of platformRegionRule, clusterRegionRule, sharedRule, euAccessRule found (top level or under `hap:`)")?;
    let get = |k: &str| -> Result<Option<String>, String> {
        match holder.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!("{k} must be a string, found `{other}`")),
        }
    };
    Ok(LegacyRules {
        platform_region_rule: get(keys[0])?,
        cluster_region_rule: get(keys[1])?,
        shared_rule: get(keys[2])?,
        eu_access_rule: get(keys[3])?,
    })
}
