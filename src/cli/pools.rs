//! `hap pools` (`kubectl hap pools`): every pool in the live cluster with its figures, counted by
//! the operator's own `pools::Inventory` from one list of bindings, Shoots and AccountClaims.

use std::collections::BTreeMap;
use std::process::ExitCode;

use serde::Serialize;

use super::live::{self, DEFAULT_CONFIG};
use super::validate::{Format, usage};
use crate::api::{BindingKind, CredentialsKind, PoolFigures, PoolLifecycle};

/// Show every pool of the live cluster: bindings by hyperscaler type, EU access and sharing.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Reads the HapConfig (--config) for bindingNamespace, bindingKind, labelKeys and\n\
shootNamespace, then lists bindings, Shoots and AccountClaims once. Never reads Secrets or other\n\
credentials.\n\
FREE: unclaimed bindings a claim can take; CLAIMED: held by a tenant; DIRTY: waiting for the\n\
cleanup job; CLUSTERS: Shoots and bound claims on the pool's bindings. CREDENTIALS: what the\n\
bindings' credentialsRef names (Secret, WorkloadIdentity, InternalSecret), with counts when a\n\
pool mixes kinds. STATES: the bindings per lifecycle state (Free, Claimed, Dirty, CoolingDown,\n\
Cordoned, CleanupFailed, Suspect, InUseWithoutTenant, Internal; states with none left out;\n\
see docs/operating.md). Shared pools show only TOTAL and CLUSTERS (and CREDENTIALS).\n\
Exit codes: 0 shown, 2 the cluster could not be read."
)]
pub struct Args {
    /// The HapConfig to read (the operator's --config-name).
    #[arg(long = "config", value_name = "NAME", default_value = DEFAULT_CONFIG)]
    pub config: String,
    /// Kubeconfig of the garden holding the bindings and Shoots, when it is not the cluster of
    /// KUBECONFIG (as the operator's --garden-kubeconfig).
    #[arg(long, env = "HAP_GARDEN_KUBECONFIG", value_name = "PATH")]
    pub garden_kubeconfig: Option<std::path::PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    pub output: Format,
}

/// `hap pools -o json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    config: &'a str,
    binding_namespace: &'a str,
    binding_kind: BindingKind,
    shoot_namespace: &'a str,
    pools: &'a [PoolFigures],
    /// Per dedicated pool, bindings per lifecycle state.
    lifecycle: &'a [PoolLifecycle],
}

pub fn run(args: Args) -> ExitCode {
    let input = match live::pools_input(&args.config, args.garden_kubeconfig.as_deref()) {
        Ok(i) => i,
        Err(e) => return usage(&e.report()),
    };
    if let Some(note) = &input.note {
        eprintln!("hap: {note}");
    }
    let inventory = input.inventory();
    let figures = inventory.all_figures();
    // One list, no history: no first-seen-dirty time to report.
    let lifecycle = inventory.lifecycles();
    match args.output {
        Format::Json => {
            let report = Report {
                config: &input.config,
                binding_namespace: &input.binding_namespace,
                binding_kind: input.binding_kind,
                shoot_namespace: &input.shoot_namespace,
                pools: &figures,
                lifecycle: &lifecycle,
            };
            println!(
                "{}",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            );
        }
        Format::Text if figures.is_empty() => {
            println!(
                "No pools: no {} in namespace {} carries a {} label.",
                input.binding_kind.gvk().2,
                input.binding_namespace,
                inventory.keys().hyperscaler_type
            );
        }
        Format::Text => print!("{}", table(&figures, &lifecycle)),
    }
    ExitCode::SUCCESS
}

/// The pools as a kubectl-style table, columns padded to their widest cell.
fn table(figures: &[PoolFigures], lifecycle: &[PoolLifecycle]) -> String {
    const HEADER: [&str; 10] = [
        "HYPERSCALER-TYPE",
        "EU",
        "SHARED",
        "TOTAL",
        "FREE",
        "CLAIMED",
        "DIRTY",
        "CLUSTERS",
        "CREDENTIALS",
        "STATES",
    ];
    let rows: Vec<[String; 10]> = figures
        .iter()
        .map(|f| {
            // A shared pool is never claimed, so free/claimed/dirty do not apply to it.
            let dedicated = |n: i64| {
                if f.shared {
                    "-".to_string()
                } else {
                    n.to_string()
                }
            };
            [
                f.hyperscaler_type.clone(),
                f.eu_access.to_string(),
                f.shared.to_string(),
                f.total.to_string(),
                dedicated(f.free),
                dedicated(f.claimed),
                dedicated(f.dirty),
                f.clusters.to_string(),
                credentials_cell(&f.credentials),
                states(f, lifecycle),
            ]
        })
        .collect();
    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("{}\n", padded.join("   ").trim_end())
    };
    let mut out = line(&HEADER.map(String::from));
    for row in &rows {
        out.push_str(&line(row));
    }
    out
}

/// The kinds of credentials a pool's bindings reference: the kind alone when all share it (the
/// usual case), else each kind with its count; `-` for a pool without bindings.
fn credentials_cell(kinds: &BTreeMap<CredentialsKind, i64>) -> String {
    match kinds.len() {
        0 => "-".to_string(),
        1 => kinds.keys().map(|k| k.as_str()).collect(),
        _ => kinds
            .iter()
            .map(|(k, n)| format!("{}={n}", k.as_str()))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// `Free=3,Claimed=8,Cordoned=1`: the pool's non-zero states in the documented order; `-` for
/// a shared pool.
fn states(f: &PoolFigures, lifecycle: &[PoolLifecycle]) -> String {
    let Some(l) = lifecycle.iter().find(|l| {
        !f.shared && l.hyperscaler_type == f.hyperscaler_type && l.eu_access == f.eu_access
    }) else {
        return "-".into();
    };
    let parts: Vec<String> = crate::pools::lifecycle::BindingState::ALL
        .iter()
        .filter_map(|s| {
            let n = l.states.get(s.as_str()).copied().unwrap_or(0);
            (n > 0).then(|| format!("{}={n}", s.as_str()))
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_pads_columns_and_dashes_shared_figures() {
        let figures = vec![
            PoolFigures {
                hyperscaler_type: "aws".into(),
                total: 12,
                free: 3,
                claimed: 8,
                dirty: 1,
                clusters: 9,
                credentials: BTreeMap::from([
                    (CredentialsKind::Secret, 11),
                    (CredentialsKind::WorkloadIdentity, 1),
                ]),
                ..Default::default()
            },
            PoolFigures {
                hyperscaler_type: "openstack_eu-de-1".into(),
                shared: true,
                total: 2,
                clusters: 40,
                credentials: BTreeMap::from([(CredentialsKind::InternalSecret, 2)]),
                ..Default::default()
            },
            PoolFigures {
                hyperscaler_type: "gcp".into(),
                ..Default::default()
            },
        ];
        let lifecycle = vec![PoolLifecycle {
            hyperscaler_type: "aws".into(),
            states: [
                ("Free", 2),
                ("Claimed", 8),
                ("Dirty", 1),
                ("Cordoned", 1),
                ("Suspect", 0),
            ]
            .map(|(s, n)| (s.to_string(), n))
            .into(),
            ..Default::default()
        }];
        let expected = "\
HYPERSCALER-TYPE    EU      SHARED   TOTAL   FREE   CLAIMED   DIRTY   CLUSTERS   CREDENTIALS                    STATES
aws                 false   false    12      3      8         1       9          Secret=11,WorkloadIdentity=1   Free=2,Claimed=8,Dirty=1,Cordoned=1
openstack_eu-de-1   false   true     2       -      -         -       40         InternalSecret                 -
gcp                 false   false    0       0      0         0       0          -                              -
";
        assert_eq!(table(&figures, &lifecycle), expected);
    }
}
