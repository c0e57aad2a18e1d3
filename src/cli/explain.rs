//! `hap explain`: which rule entry a request matches, the pool it reaches and the selectors the
//! operator uses for it — the operator's own evaluation, as a dry run.

use std::process::ExitCode;

use serde::Serialize;

use crate::rules::{CompiledRules, Outcome, Request};

use super::validate::{Format, Source, load_spec, render, usage};

/// Explain which entry a request matches and which pool and selectors follow.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit codes: 0 matched, 1 no pool (NoMatchingRule, AmbiguousMatch, InvalidConfig,\n\
UnknownPlan, MissingProvider; invalid rules count as InvalidConfig), 2 usage error (bad flags,\n\
unreadable file or cluster). --live uses the rules the operator keeps in force: the current\n\
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
}

/// The JSON contract of `hap explain -o json` (DESIGN §6), in its documented key order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Explained<'a> {
    rule: &'a str,
    index: usize,
    hyperscaler_type: &'a str,
    eu_access: bool,
    shared: bool,
    selectors: Selectors<'a>,
}

#[derive(Serialize)]
struct Selectors<'a> {
    tenant: Option<&'a str>,
    claim: Option<&'a str>,
    any: &'a str,
}

#[derive(Serialize)]
struct Failed<'a> {
    error: FailedError<'a>,
}

#[derive(Serialize)]
struct FailedError<'a> {
    reason: &'a str,
    message: &'a str,
}

pub fn run(args: Args) -> ExitCode {
    // --live explains with the rules the operator has in force (last-known-good included).
    let loaded = if args.source.live {
        super::live::explain_input(args.source.config_name())
            .map(|f| {
                if let Some(note) = f.note {
                    eprintln!("hap: {note}");
                }
                f.spec
            })
            .map_err(|e| e.report())
    } else {
        load_spec(&args.source)
    };
    let spec = match loaded {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
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
    };
    match rules.evaluate(&req) {
        Ok(o) => {
            success(
                &rules,
                &o,
                args.global_account.as_deref().unwrap_or("<tenant>"),
                args.output,
            );
            ExitCode::SUCCESS
        }
        Err(e) => failure(args.output, e.reason(), &e.to_string()),
    }
}

fn success(rules: &CompiledRules, o: &Outcome, ga: &str, format: Format) {
    let s = o.pool().selectors(rules.label_keys(), ga);
    let (tenant, claim, any) = (
        s.tenant.map(|x| x.to_string()),
        s.claim.map(|x| x.to_string()),
        s.any.to_string(),
    );
    if format == Format::Json {
        let out = Explained {
            rule: &o.entry,
            index: o.index,
            hyperscaler_type: &o.hyperscaler_type,
            eu_access: o.eu_access,
            shared: o.shared,
            selectors: Selectors {
                tenant: tenant.as_deref(),
                claim: claim.as_deref(),
                any: &any,
            },
        };
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return;
    }
    println!("rule {} `{}` matches", o.index, o.entry);
    println!("  providerType:    {}", o.provider_type);
    println!("  hyperscalerType: {}", o.hyperscaler_type);
    println!("  euAccess:        {}", o.eu_access);
    println!("  shared:          {}", o.shared);
    println!("selectors:");
    let none = "(none: shared bindings are never claimed)";
    println!("  tenant: {}", tenant.as_deref().unwrap_or(none));
    println!("  claim:  {}", claim.as_deref().unwrap_or(none));
    println!("  any:    {any}");
}

fn failure(format: Format, reason: &str, message: &str) -> ExitCode {
    match format {
        Format::Json => {
            let out = Failed {
                error: FailedError { reason, message },
            };
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        }
        Format::Text => println!("error[{reason}]: {message}"),
    }
    ExitCode::from(1)
}
