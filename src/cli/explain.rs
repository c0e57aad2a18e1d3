//! `hap explain`: which rule entry a request matches, the pools it reaches in order (or that it is
//! denied) and the selectors the operator uses for them — the operator's own evaluation, as a dry
//! run. With `--live`, also which preference and binding would serve the request now.

use std::process::ExitCode;

use serde::Serialize;

use super::serving::Serving;
use crate::labels::PoolKey;
use crate::rules::{CompiledRules, EvalError, Outcome, Request};

use super::validate::{Format, Source, load_spec, render, usage};

/// Explain which entry a request matches and which pool and selectors follow.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit codes: 0 matched, 1 no pool (NoMatchingRule, AmbiguousMatch, InvalidConfig,\n\
UnknownPlan, MissingProvider, Denied, TenantNotAllowed; invalid rules count as InvalidConfig),\n\
2 usage error (bad flags, unreadable file or cluster). --live uses the rules the operator keeps in force: the current\n\
generation, or the last valid one while the current one is invalid (said on stderr)."
)]
pub struct Args {
    #[command(flatten)]
    pub source: Source,
    /// The request's plan (e.g. aws, sap-converged-cloud, trial).
    #[arg(long, value_name = "P")]
    pub plan: String,
    /// The request's platform region (BTP subaccount region, e.g. cf-eu11).
    #[arg(long = "platform-region", value_name = "X")]
    pub platform_region: Option<String>,
    /// The request's cluster region (hyperscaler region, e.g. eu-de-1).
    #[arg(long = "cluster-region", value_name = "Y")]
    pub cluster_region: Option<String>,
    /// The request's provider type (needed by plans such as trial and free).
    #[arg(long, value_name = "T")]
    pub provider: Option<String>,
    /// Global account for the tenant selector (default `<tenant>`).
    #[arg(long = "global-account", value_name = "GA")]
    pub global_account: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// Check `spec.tenants` for a requester in this namespace (with --global-account).
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// The requester's kind for `spec.tenants`: AccountClaim (default), Shoot, Runtime, Cluster.
    #[arg(
        long = "requester",
        value_name = "KIND",
        default_value = "AccountClaim"
    )]
    pub requester: String,
    /// A label of the requester's namespace (`key=value`, repeatable).
    #[arg(long = "namespace-label", value_name = "K=V")]
    pub namespace_labels: Vec<String>,
    /// The admission request's user (sources only).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// A group of the admission request's user (repeatable).
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// The request names its binding (`spec.adoptBinding`).
    #[arg(long)]
    pub adopt: bool,
}

/// `spec.tenants` for the requester the flags describe: `Err` with the exit code when refused or
/// the flags are wrong; a note on stderr when the policy is set but no namespace was given.
fn check_tenants(args: &Args, spec: &crate::api::HapConfigSpec) -> Result<(), ExitCode> {
    let Some(ns) = &args.namespace else {
        if spec.tenants.is_some() {
            eprintln!(
                "hap: spec.tenants is set; pass --namespace and --global-account (and --requester, --user, --group) to see whether a requester may claim"
            );
        }
        return Ok(());
    };
    let kind: crate::api::RequesterKind = serde_json::from_value(serde_json::json!(args.requester))
        .map_err(|_| {
            usage(&format!(
                "--requester {}: one of AccountClaim, Shoot, Runtime, Cluster",
                args.requester
            ))
        })?;
    let mut labels = std::collections::BTreeMap::new();
    for kv in &args.namespace_labels {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| usage(&format!("--namespace-label {kv}: expected key=value")))?;
        labels.insert(k.to_string(), v.to_string());
    }
    let user = args.user.as_ref().map(|u| crate::tenancy::User {
        username: u.clone(),
        groups: args.groups.clone(),
    });
    let who = crate::tenancy::Requester {
        kind,
        namespace: ns,
        namespace_labels: Some(&labels),
        user: user.as_ref(),
        admitted_rule: None,
    };
    let ga = args.global_account.as_deref().unwrap_or_default();
    let ask = crate::tenancy::Ask {
        global_account: ga,
        adopt_binding: args.adopt,
    };
    match crate::tenancy::decide(spec.tenants.as_ref(), &who, &ask) {
        crate::tenancy::Decision::Allowed { rule } => {
            if args.output == Format::Text {
                match rule {
                    Some(r) => println!("tenants: allowed by rule `{r}`"),
                    None => println!("tenants: no policy; every requester may claim"),
                }
            }
            Ok(())
        }
        crate::tenancy::Decision::Denied { message } => {
            Err(failure(args.output, "TenantNotAllowed", &message))
        }
    }
}

/// The JSON contract of `hap explain -o json` (docs/design.md §6), in its documented key order; the
/// top-level pool fields are the first preference's, `preferences` lists every one in order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Explained<'a> {
    rule: &'a str,
    index: usize,
    hyperscaler_type: &'a str,
    eu_access: bool,
    shared: bool,
    selectors: Selectors,
    preferences: Vec<ExplainedPreference>,
    /// `--live` only: what the operator would do with the request now.
    #[serde(skip_serializing_if = "Option::is_none")]
    live: Option<Serving>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ExplainedPreference {
    index: usize,
    hyperscaler_type: String,
    eu_access: bool,
    shared: bool,
    selectors: Selectors,
}

#[derive(Serialize)]
struct Selectors {
    tenant: Option<String>,
    claim: Option<String>,
    any: String,
}

impl Selectors {
    fn of(rules: &CompiledRules, pool: &PoolKey, ga: &str) -> Self {
        let s = pool.selectors(rules.label_keys(), ga);
        Self {
            tenant: s.tenant.map(|x| x.to_string()),
            claim: s.claim.map(|x| x.to_string()),
            any: s.any.to_string(),
        }
    }
}

#[derive(Serialize)]
struct Failed<'a> {
    error: FailedError<'a>,
}

#[derive(Serialize)]
struct FailedError<'a> {
    reason: &'a str,
    message: &'a str,
    /// `Denied` only: the deny entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    entry: Option<&'a str>,
}

pub fn run(args: Args) -> ExitCode {
    // --live explains with the rules the operator has in force (last-known-good included), and
    // says which pool and binding would serve given the cluster's inventory.
    let mut live = None;
    let loaded = if args.source.live {
        crate::k8s::live::pools_input(args.source.config_name(), &args.source.target())
            .map(|input| {
                if let Some(note) = &input.note {
                    eprintln!("hap: {note}");
                }
                let spec = input.spec.clone();
                live = Some(input);
                spec
            })
            .map_err(|e| e.report())
    } else {
        load_spec(&args.source)
    };
    let spec = match loaded {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    if let Err(code) = check_tenants(&args, &spec) {
        return code;
    }
    let rules = match CompiledRules::from_spec(&spec) {
        Ok((rules, warnings)) => {
            for w in &warnings {
                eprintln!("{}", render("warning", w));
            }
            rules
        }
        Err(v) => {
            let message = format!("the rules are invalid:\n{}", v.summary());
            return failure(args.output, "InvalidConfig", &message);
        }
    };
    let req = Request {
        plan: &args.plan,
        platform_region: args.platform_region.as_deref(),
        cluster_region: args.cluster_region.as_deref(),
        provider: args.provider.as_deref(),
        global_account: args.global_account.as_deref(),
    };
    match rules.evaluate(&req) {
        Ok(o) => {
            let ga = args.global_account.as_deref().unwrap_or("<tenant>");
            let serving = live
                .as_ref()
                .map(|input| super::serving::serving(&rules, &o, input, &args.plan, ga));
            success(&rules, &o, ga, serving, args.output);
            ExitCode::SUCCESS
        }
        Err(EvalError::Denied {
            index,
            entry,
            message,
            ..
        }) => {
            let error = FailedError {
                reason: "Denied",
                message: &message,
                index: Some(index),
                entry: Some(&entry),
            };
            report_failure(args.output, error)
        }
        Err(e) => failure(args.output, e.reason(), &e.to_string()),
    }
}

fn success(rules: &CompiledRules, o: &Outcome, ga: &str, live: Option<Serving>, format: Format) {
    let preferences: Vec<ExplainedPreference> = o
        .preferences
        .iter()
        .map(|p| ExplainedPreference {
            index: p.index,
            hyperscaler_type: p.pool.hyperscaler_type.clone(),
            eu_access: p.pool.eu_access,
            shared: p.pool.shared,
            selectors: Selectors::of(rules, &p.pool, ga),
        })
        .collect();
    let selectors = Selectors::of(rules, &o.pool(), ga);
    if format != Format::Text {
        let out = Explained {
            rule: &o.entry,
            index: o.index,
            hyperscaler_type: &o.hyperscaler_type,
            eu_access: o.eu_access,
            shared: o.shared,
            selectors,
            preferences,
            live,
        };
        print!("{}", format.structured(&out));
        return;
    }
    println!("rule {} `{}` matches", o.index, o.entry);
    println!("  providerType:    {}", o.provider_type);
    println!("  hyperscalerType: {}", o.hyperscaler_type);
    println!("  euAccess:        {}", o.eu_access);
    println!("  shared:          {}", o.shared);
    print_selectors("selectors:", "  ", &selectors);
    if preferences.len() > 1 {
        println!(
            "ordered pools (a binding the tenant holds in any of them is reused first; else the first with a claimable binding serves):"
        );
        for p in &preferences {
            println!(
                "  {}. hyperscalerType={}, euAccess={}, shared={}{}",
                p.index,
                p.hyperscaler_type,
                p.eu_access,
                p.shared,
                if p.index == 1 {
                    " (primary)"
                } else {
                    " (fallback)"
                }
            );
            print_selectors("", "     ", &p.selectors);
        }
    }
    if let Some(s) = &live {
        println!("{}", super::serving::describe(s));
    }
}

fn print_selectors(title: &str, indent: &str, s: &Selectors) {
    if !title.is_empty() {
        println!("{title}");
    }
    let none = "(none: shared bindings are never claimed)";
    println!("{indent}tenant: {}", s.tenant.as_deref().unwrap_or(none));
    println!("{indent}claim:  {}", s.claim.as_deref().unwrap_or(none));
    println!("{indent}any:    {}", s.any);
}

fn failure(format: Format, reason: &str, message: &str) -> ExitCode {
    report_failure(
        format,
        FailedError {
            reason,
            message,
            index: None,
            entry: None,
        },
    )
}

fn report_failure(format: Format, error: FailedError<'_>) -> ExitCode {
    match format {
        Format::Json | Format::Yaml => {
            let out = Failed { error };
            print!("{}", format.structured(&out));
        }
        Format::Text => println!("error[{}]: {}", error.reason, error.message),
    }
    ExitCode::from(1)
}
