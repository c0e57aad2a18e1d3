//! `hap migrate --report`: reads a live landscape (the HapConfig, bindings, Shoots, Runtimes,
//! AccountClaims) and prints, per request and per tenant, what hap-operator would choose against
//! the binding in use. It only reads, so a team can run it beside KEB for as long as it likes.

use std::path::PathBuf;
use std::process::ExitCode;

use super::validate::{Format, usage};
use crate::rules::CompiledRules;
use crate::status::observe::{Report, Verdict, report};

/// What `--report` reads.
#[derive(clap::Args, Debug, Default)]
pub struct ReportArgs {
    /// Print the observe report of the live landscape (reads only; writes nothing).
    #[arg(long, conflicts_with_all = ["keb_values", "legacy", "hapconfig"])]
    pub report: bool,
    /// With --report: the HapConfig whose rules decide [default: default].
    #[arg(long, value_name = "NAME", requires = "report")]
    pub config: Option<String>,
    /// With --report: kubeconfig of the garden holding bindings and Shoots, when not KUBECONFIG's.
    #[arg(long, value_name = "FILE", requires = "report")]
    pub garden_kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub kube: super::KubeFlags,
    /// With --report: the namespace of KEB's Runtimes.
    #[arg(long, default_value = "kcp-system", requires = "report")]
    pub runtime_namespace: String,
    /// With --report: read AccountClaims in this namespace only, as an operator run with
    /// `--claim-namespace` does [default: every namespace].
    #[arg(long, value_name = "NAMESPACE", requires = "report")]
    pub claim_namespace: Option<String>,
    /// With --report: text table or the JSON report.
    #[arg(
        short = 'o',
        long,
        value_enum,
        default_value = "text",
        requires = "report"
    )]
    pub output: Format,
}

pub fn run(args: &ReportArgs) -> ExitCode {
    let config = args
        .config
        .as_deref()
        .unwrap_or(crate::k8s::live::DEFAULT_CONFIG);
    let target = args.kube.target(args.garden_kubeconfig.as_deref());
    let read = crate::k8s::live::report_input(
        config,
        &target,
        &args.runtime_namespace,
        args.claim_namespace.as_deref(),
    );
    let (input, requests, note) = match read {
        Ok(r) => r,
        Err(e) => return usage(&e.report()),
    };
    for n in input.note.iter().chain(note.iter()) {
        eprintln!("hap: {n}");
    }
    let rules = match CompiledRules::from_spec(&input.spec) {
        Ok((r, _)) => r,
        Err(v) => {
            eprintln!(
                "hap migrate: the rules of HapConfig {config} are invalid:\n{}",
                v.summary()
            );
            return ExitCode::from(1);
        }
    };
    let mut rep = report(&rules, &input.inventory(), &requests);
    serve_waiting(&rules, &input, &mut rep);
    if args.output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&rep).unwrap_or_default());
    } else {
        print_text(&rep);
    }
    ExitCode::SUCCESS
}

/// Names the binding the operator would take now for requests not served yet (a dry run of
/// its own selection; nothing is claimed).
fn serve_waiting(rules: &CompiledRules, input: &crate::k8s::live::PoolsInput, rep: &mut Report) {
    for row in rep
        .requests
        .iter_mut()
        .filter(|r| r.verdict == Verdict::WouldServe)
    {
        let Some(req) = row.request.as_ref().and_then(|r| r.as_request()) else {
            continue;
        };
        if let Ok(o) = rules.evaluate(&req) {
            let s = super::serving::serving(rules, &o, input, req.plan, &row.tenant);
            row.message = format!("not served yet; {}", super::serving::describe(&s));
        }
    }
}

fn print_text(rep: &Report) {
    let b = &rep.bindings;
    println!(
        "bindings: {} (free {}, claimed {}, dirty {}, shared {})",
        b.total, b.free, b.claimed, b.dirty, b.shared
    );
    let verdicts: Vec<String> = rep
        .verdicts
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!("requests: {} ({})", rep.requests.len(), verdicts.join(", "));
    println!();
    let mut rows = vec![[
        "TENANT".to_string(),
        "KIND".into(),
        "OBJECT".into(),
        "IN USE".into(),
        "VERDICT".into(),
        "MESSAGE".into(),
    ]];
    for r in &rep.requests {
        rows.push([
            or_dash(&r.tenant),
            r.kind.clone(),
            r.object.clone(),
            r.in_use.clone().unwrap_or_else(|| "-".into()),
            format!("{:?}", r.verdict),
            r.message.clone(),
        ]);
    }
    table(&rows);
    println!();
    let mut rows = vec![[
        "TENANT".to_string(),
        "BINDINGS".into(),
        "DIRTY".into(),
        "REQUESTS".into(),
        "DISAGREEMENTS".into(),
    ]];
    for t in &rep.tenants {
        rows.push([
            t.tenant.clone(),
            or_dash(&t.bindings.join(",")),
            or_dash(&t.dirty.join(",")),
            t.requests.to_string(),
            t.disagreements.to_string(),
        ]);
    }
    table(&rows);
}

fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// Left-aligned columns; the last one is not padded.
fn table<const N: usize>(rows: &[[String; N]]) {
    let mut width = [0usize; N];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == N {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        println!("{}", line.trim_end());
    }
}
