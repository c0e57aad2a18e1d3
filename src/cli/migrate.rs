//! `hap migrate`: turns upstream KEB Helm values or the legacy four properties into a HapConfig
//! manifest on stdout; whatever is not exact is said in comments and on stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

use crate::api::LegacyRules;
use crate::rules::migrate::{self, Migration, Target};

use super::validate::{read_yaml, render, usage};

/// Print a HapConfig manifest equivalent to KEB Helm values or the legacy properties.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit codes: 0 printed a valid manifest, 1 the input rules are wrong or the\n\
result does not validate (the manifest is still printed), 2 usage error (unreadable file)."
)]
pub struct Args {
    /// Upstream KEB Helm values (`hap.rule`, `hap.multiHyperscalerAccount`).
    #[arg(
        long = "keb-values",
        value_name = "FILE",
        required_unless_present = "legacy",
        conflicts_with = "legacy"
    )]
    pub keb_values: Option<PathBuf>,
    /// YAML with platformRegionRule, clusterRegionRule, sharedRule and euAccessRule (top level
    /// or under `hap:`). Printed as Seed rules where exact, otherwise kept as legacyRules.
    #[arg(long, value_name = "FILE")]
    pub legacy: Option<PathBuf>,
    /// Namespace of the bindings (the Gardener project namespace).
    #[arg(long = "binding-namespace", default_value = "garden-kyma")]
    pub binding_namespace: String,
    /// Name of the HapConfig.
    #[arg(long, default_value = "default")]
    pub name: String,
}

pub fn run(args: Args) -> ExitCode {
    let target = Target {
        name: args.name.clone(),
        binding_namespace: args.binding_namespace.clone(),
    };
    let (path, keb) = match (&args.keb_values, &args.legacy) {
        (Some(p), _) => (p, true),
        (None, Some(p)) => (p, false),
        (None, None) => return usage("one of --keb-values or --legacy is required"),
    };
    let doc = match read_yaml(path) {
        Ok(docs) => docs.into_iter().next().unwrap_or(Value::Null),
        Err(e) => return usage(&e),
    };
    let result = if keb {
        migrate::from_keb_values(&doc, &target)
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
