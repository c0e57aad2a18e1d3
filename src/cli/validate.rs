//! `hap validate`: checks a rule set (a HapConfig manifest or `--rule` entries) and, with
//! `--bindings`, that every entry without `*` has a pool. Also the input loading `explain` shares.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use serde_json::Value;

use crate::api::{HapConfigSpec, RuleSyntax};
use crate::diag::{Diagnostic, Validation};
use crate::rules::CompiledRules;

/// Exit codes of `validate` and `explain` (docs/design.md §6).
pub(crate) const USAGE: u8 = 2;

/// Output format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
    Yaml,
}

impl Format {
    /// `value` as this structured format asks (JSON pretty-printed, or YAML); JSON for `Text`,
    /// which callers print their own way.
    pub fn structured(self, value: &impl serde::Serialize) -> String {
        match self {
            Format::Yaml => serde_json::to_value(value)
                .ok()
                .and_then(|v| serde_saphyr::to_string(&v).ok())
                .unwrap_or_default(),
            Format::Json | Format::Text => {
                format!(
                    "{}\n",
                    serde_json::to_string_pretty(value).unwrap_or_default()
                )
            }
        }
    }
}

/// Syntax of `--rule` entries.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyntaxArg {
    Seed,
    Keb,
}

/// Where the rules come from: a manifest, or entries on the command line.
#[derive(clap::Args, Debug, Clone)]
pub struct Source {
    /// HapConfig manifest (YAML, may hold several documents; the `kind: HapConfig` one is used).
    #[arg(short = 'f', long = "file", value_name = "FILE", required_unless_present_any = ["rules", "live"], conflicts_with_all = ["rules", "syntax", "live"])]
    pub file: Option<PathBuf>,
    /// A rule entry; repeat for several (instead of -f). An entry may start with `-`: it is
    /// then validated (and reported) like any other, not taken for a flag.
    #[arg(long = "rule", value_name = "R", allow_hyphen_values = true)]
    pub rules: Vec<String>,
    /// Syntax of the --rule entries.
    #[arg(long, value_enum, requires = "rules")]
    pub syntax: Option<SyntaxArg>,
    /// Read the HapConfig from the cluster of KUBECONFIG instead (see --config).
    #[arg(long, conflicts_with = "rules")]
    pub live: bool,
    /// With --live: the HapConfig to read (the operator's --config-name) [default: default].
    #[arg(long = "config", value_name = "NAME", conflicts_with_all = ["file", "rules"])]
    pub config: Option<String>,
    /// With --live: kubeconfig of the garden holding the bindings and Shoots, when it is not the
    /// cluster of KUBECONFIG (as the operator's --garden-kubeconfig).
    #[arg(long, env = "HAP_GARDEN_KUBECONFIG", value_name = "PATH")]
    pub garden_kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub kube: super::KubeFlags,
}

impl Source {
    /// The clusters `--live` reads.
    pub fn target(&self) -> crate::k8s::live::Target {
        self.kube.target(self.garden_kubeconfig.as_deref())
    }

    /// The HapConfig `--live` reads.
    pub fn config_name(&self) -> &str {
        self.config
            .as_deref()
            .unwrap_or(crate::k8s::live::DEFAULT_CONFIG)
    }
}

/// Check a rule set: every error at once, each with its entry, index and column.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit codes: 0 valid, 1 invalid, 2 usage error (bad flags, unreadable file or cluster).\n\
With --bindings, a rule entry without `*` whose pool has no usable binding is an error (MissingPool):\n\
you asked for the check. The operator only reports missing pools in the PoolsAvailable condition."
)]
pub struct Args {
    #[command(flatten)]
    pub source: Source,
    /// A plan at least one rule must cover (repeatable; added to the file's requiredPlans).
    #[arg(long = "required-plan", value_name = "P")]
    pub required_plans: Vec<String>,
    /// Bindings as YAML (a `kind: List` with `items`, or one object per document); their
    /// `metadata.labels` decide which pools exist. Missing pools are errors (exit 1).
    /// With --live, the cluster's bindings are used instead.
    #[arg(long, value_name = "FILE", conflicts_with = "live")]
    pub bindings: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// The webhook runs with this `--webhook-client-ca` (the same env as `hap run`, so inside
    /// the operator's pod it is set): its callers are authenticated. Unset, tenant rules that
    /// name users or groups are warned about, since any caller could claim to be them. The
    /// file is not read here.
    #[arg(long, env = "HAP_WEBHOOK_CLIENT_CA", value_name = "PATH")]
    pub webhook_client_ca: Option<PathBuf>,
}

/// The JSON contract of `hap validate -o json`; a struct keeps the documented key order.
#[derive(Serialize)]
struct Report<'a> {
    valid: bool,
    errors: &'a [Diagnostic],
    warnings: &'a [Diagnostic],
}

pub fn run(args: Args) -> ExitCode {
    // --live: the applied spec and the cluster's bindings, so missing pools are checked too.
    let loaded = if args.source.live {
        crate::k8s::live::validate_input(args.source.config_name(), &args.source.target())
            .map(|(spec, bindings)| (spec, Some(bindings)))
            .map_err(|e| e.report())
    } else {
        load_spec(&args.source).map(|spec| (spec, None))
    };
    let (mut spec, live_bindings) = match loaded {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    if !args.required_plans.is_empty() {
        spec.required_plans
            .get_or_insert_with(Vec::new)
            .extend(args.required_plans.iter().cloned());
    }
    let bindings = match args.bindings.as_deref().map(load_bindings).transpose() {
        Ok(b) => b.or(live_bindings),
        Err(e) => return usage(&e),
    };
    let (v, count) = match CompiledRules::from_spec(&spec) {
        Ok((rules, warnings)) => {
            let errors = bindings
                .map(|b| rules.missing_pools(b.iter()))
                .unwrap_or_default();
            (Validation { errors, warnings }, rules.entries().len())
        }
        Err(v) => (v, 0),
    };
    let mut v = v;
    if args.webhook_client_ca.is_none() {
        v.warnings.extend(unauthenticated_callers(&spec));
    }
    match args.output {
        Format::Json | Format::Yaml => {
            let out = Report {
                valid: v.errors.is_empty(),
                errors: &v.errors,
                warnings: &v.warnings,
            };
            print!("{}", args.output.structured(&out));
        }
        Format::Text => {
            print_text(&v, count);
            for line in crate::tenancy::describe(spec.tenants.as_ref()) {
                println!("{line}");
            }
        }
    }
    if v.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// One warning per tenant rule that names users or groups: only an authenticated caller (the
/// API server, with its client certificate) can vouch for who made a request.
fn unauthenticated_callers(spec: &HapConfigSpec) -> Vec<Diagnostic> {
    let rules = spec.tenants.iter().flat_map(|t| t.rules.iter());
    rules
        .enumerate()
        .filter(|(_, r)| r.users.is_some() || r.groups.is_some())
        .map(|(i, r)| {
            Diagnostic::field(
                format!("tenants.rules[{i}]"),
                crate::diag::Reason::UnauthenticatedCallers,
                format!(
                    "rule `{}` names users or groups, which hold only if the webhook serves \
                     authenticated callers: run it with --webhook-client-ca (and pass the same \
                     flag here to say so); with --webhook-allow-unauthenticated anyone who \
                     reaches its port can send a review as any user",
                    r.name
                ),
            )
        })
        .collect()
}

fn print_text(v: &Validation, count: usize) {
    for e in &v.errors {
        println!("{}", render("error", e));
    }
    for w in &v.warnings {
        println!("{}", render("warning", w));
    }
    let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
    if v.errors.is_empty() {
        println!(
            "valid: {}, {}",
            plural(count, "rule"),
            plural(v.warnings.len(), "warning")
        );
    } else {
        println!(
            "invalid: {}, {}",
            plural(v.errors.len(), "error"),
            plural(v.warnings.len(), "warning")
        );
    }
}

/// `error[ParseError]: rule 3: column 8: PR is empty`, then the entry with a caret under the
/// column. Structured entries and pins say their field (`structuredRules[0].oneOf[1]`).
pub(crate) fn render(level: &str, d: &Diagnostic) -> String {
    let mut out = format!("{level}[{}]: ", d.reason);
    let field = d.field.as_deref().filter(|f| !f.starts_with("rules["));
    match (d.index, field) {
        (Some(i), Some(f)) => out.push_str(&format!("rule {i} ({f}): ")),
        (Some(i), None) => out.push_str(&format!("rule {i}: ")),
        (None, Some(f)) => out.push_str(&format!("{f}: ")),
        (None, None) => {}
    }
    if let Some(c) = d.column {
        out.push_str(&format!("column {c}: "));
    }
    out.push_str(&d.message);
    if let Some(entry) = &d.entry {
        out.push_str(&format!("\n    {entry}"));
        if let Some(c) = d.column {
            out.push_str(&format!("\n    {}^", " ".repeat(c.saturating_sub(1))));
        }
    }
    out
}

pub(crate) fn usage(message: &str) -> ExitCode {
    eprintln!("hap: {message}");
    ExitCode::from(USAGE)
}

/// The spec from `-f FILE` or from `--rule` entries (with a placeholder binding namespace).
pub(crate) fn load_spec(source: &Source) -> Result<HapConfigSpec, String> {
    let Some(path) = &source.file else {
        let rule_syntax = match source.syntax {
            Some(SyntaxArg::Keb) => Some(RuleSyntax::Keb),
            Some(SyntaxArg::Seed) | None => None,
        };
        return Ok(HapConfigSpec {
            rule_syntax,
            rules: Some(source.rules.clone()),
            binding_namespace: "garden-kyma".into(),
            ..Default::default()
        });
    };
    let docs = read_yaml(path)?;
    let mut configs = docs
        .into_iter()
        .filter(|d| d.get("kind").and_then(Value::as_str) == Some("HapConfig"));
    let doc = configs
        .next()
        .ok_or_else(|| format!("{}: no document of kind HapConfig", path.display()))?;
    if configs.next().is_some() {
        eprintln!(
            "hap: {}: several HapConfig documents; using the first",
            path.display()
        );
    }
    let spec = doc.get("spec").cloned().unwrap_or(Value::Null);
    serde_json::from_value(spec)
        .map_err(|e| format!("{}: the HapConfig spec is malformed: {e}", path.display()))
}

/// Every YAML document of a file, as JSON values; empty documents are dropped.
pub(crate) fn read_yaml(path: &Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .map_err(|e| format!("{} is not valid YAML: {e}", path.display()))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The `metadata.labels` of every binding in a `kind: List` or a multi-document file.
fn load_bindings(path: &Path) -> Result<Vec<BTreeMap<String, String>>, String> {
    let mut out = Vec::new();
    for doc in read_yaml(path)? {
        let objects = match doc.get("items").and_then(Value::as_array) {
            Some(items) => items.clone(),
            None => vec![doc],
        };
        for o in objects {
            let labels = o.pointer("/metadata/labels").and_then(Value::as_object);
            let map = labels
                .into_iter()
                .flatten()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str().map_or_else(|| v.to_string(), str::to_string),
                    )
                })
                .collect();
            out.push(map);
        }
    }
    Ok(out)
}
