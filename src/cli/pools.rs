//! `hap pools` (`kubectl hap pools`): every pool in the live cluster with its figures, counted by
//! the operator's own `pools::Inventory` from one list of bindings, Shoots and AccountClaims.

use std::collections::BTreeMap;
use std::process::ExitCode;

use serde::Serialize;

use super::validate::{Format, usage};
use crate::api::{BindingKind, CredentialsKind, PoolFigures, PoolLifecycle};
use crate::k8s::live::{self, DEFAULT_CONFIG};

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
Cordoned, CleanupFailed, Suspect, InUseWithoutTenant, Internal, Quarantined; states with none\n\
left out; see docs/operating.md), counted as status.pools[].states and the metrics count them:\n\
with the config's cooldown, suspect and quarantine settings and the current time. Shared pools show only TOTAL and CLUSTERS (and CREDENTIALS).\n\
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
    #[command(flatten)]
    pub kube: super::KubeFlags,
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
    let input = match live::pools_input(
        &args.config,
        &args.kube.target(args.garden_kubeconfig.as_deref()),
    ) {
        Ok(i) => i,
        Err(e) => return usage(&e.report()),
    };
    if let Some(note) = &input.note {
        eprintln!("hap: {note}");
    }
    print!("{}", render(&input, args.output, jiff::Timestamp::now()));
    ExitCode::SUCCESS
}

/// What `hap pools` prints for what was read, judged at `now`: the figures, and the states
/// counted by the function behind `status.pools[].states` and the metrics, with the config in
/// force (its cooldown and suspect settings).
fn render(input: &live::PoolsInput, output: Format, now: jiff::Timestamp) -> String {
    let mut inventory = input.inventory();
    let figures = inventory.all_figures();
    let mut lifecycle = crate::status::pool_states(&input.spec, &mut inventory, now);
    for l in &mut lifecycle {
        // One list, no history: a dirty binding without a release record is first seen now,
        // which says nothing; the oldest is shown only when the records date every one.
        let key = crate::labels::PoolKey {
            hyperscaler_type: l.hyperscaler_type.clone(),
            eu_access: l.eu_access,
            shared: false,
        };
        if !inventory.dirty_all_dated(&key) {
            l.oldest_dirty_since = None;
        }
    }
    match output {
        Format::Json | Format::Yaml => {
            let report = Report {
                config: &input.config,
                binding_namespace: &input.binding_namespace,
                binding_kind: input.binding_kind,
                shoot_namespace: &input.shoot_namespace,
                pools: &figures,
                lifecycle: &lifecycle,
            };
            output.structured(&report)
        }
        Format::Text if figures.is_empty() => format!(
            "No pools: no {} in namespace {} carries a {} label.\n",
            input.binding_kind.gvk().2,
            input.binding_namespace,
            inventory.keys().hyperscaler_type
        ),
        Format::Text => table(&figures, &lifecycle),
    }
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
pub(crate) mod tests {
    use super::*;
    use crate::api::HapConfigSpec;
    use crate::labels::ResolvedLabelKeys;
    use crate::pools::fixtures::{binding, claim, shoot};

    /// One aws pool with a binding in every state, as read by one list; the spec sets a cooldown
    /// and a quarantine, and the default suspect codes apply.
    pub(crate) fn landscape(now: jiff::Timestamp) -> live::PoolsInput {
        let spec: HapConfigSpec = serde_json::from_value(serde_json::json!({
            "bindingNamespace": "garden", "rules": ["aws"], "release": {"cooldown": "1h"},
            "quarantine": [{"pool": {"hyperscalerType": "aws"}, "since": "2026-01-01T00:00:00Z", "plans": ["trial"]}]
        }))
        .expect("spec");
        let aws = ("hyperscalerType", "aws");
        let mut cool = binding("aws-cool", &[aws]);
        let released =
            crate::pools::lifecycle::release_time(now - jiff::SignedDuration::from_mins(5));
        cool.annotations = [
            (crate::pools::lifecycle::RELEASED_AT.to_string(), released),
            (
                crate::pools::lifecycle::RELEASED_BY.to_string(),
                "ga-old".into(),
            ),
        ]
        .into();
        // The pool is quarantined: a Shoot proved aws-free, aws-new never served anyone.
        let mut proven = binding("aws-free", &[aws]);
        proven.annotations = [(
            crate::pools::quarantine::QUARANTINE.to_string(),
            crate::pools::quarantine::PASSED.to_string(),
        )]
        .into();
        let mut failing = shoot("s-suspect", Some("aws-suspect"));
        failing.error_codes = vec!["ERR_INFRA_UNAUTHORIZED".into()];
        live::PoolsInput {
            config: "default".into(),
            note: None,
            binding_namespace: "garden".into(),
            binding_kind: BindingKind::default(),
            shoot_namespace: "garden".into(),
            keys: ResolvedLabelKeys::from_spec(None),
            bindings: vec![
                proven,
                binding("aws-claimed", &[aws, ("tenantName", "ga-1")]),
                binding("aws-suspect", &[aws, ("tenantName", "ga-2")]),
                cool,
                binding(
                    "aws-dirty",
                    &[aws, ("tenantName", "ga-3"), ("dirty", "true")],
                ),
                binding(
                    "aws-cord",
                    &[aws, (crate::pools::lifecycle::CORDONED, "true")],
                ),
                binding(
                    "aws-failed",
                    &[
                        aws,
                        ("tenantName", "ga-4"),
                        ("dirty", "true"),
                        (crate::pools::lifecycle::CLEANUP_FAILED, "true"),
                    ],
                ),
                binding("aws-used", &[aws]),
                binding("aws-int", &[aws, ("internal", "true")]),
                crate::pools::BindingView {
                    created: crate::pools::quarantine::creation_second(1_767_225_660),
                    ..binding("aws-new", &[aws])
                },
            ],
            others: Vec::new(),
            claims: vec![claim("c1", "ga-1", Some("s1"), Some("aws-claimed"))],
            shoots: vec![failing, shoot("foreign", Some("aws-used"))],
            spec,
        }
    }

    #[test]
    fn pools_counts_every_state_as_the_status_and_the_metrics_do() {
        let now = jiff::Timestamp::now();
        let input = landscape(now);
        // What the operator's reconcile hands the status and the metrics for the same objects.
        let mut inv = input.inventory();
        let status = crate::status::pool_states(&input.spec, &mut inv, now);
        let [aws] = status.as_slice() else {
            panic!("one pool: {status:?}")
        };
        let every_state: BTreeMap<String, i64> = crate::pools::lifecycle::BindingState::ALL
            .iter()
            .map(|s| (s.as_str().to_string(), 1))
            .collect();
        assert_eq!(
            aws.states, every_state,
            "the landscape has every state once"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(&input, Format::Json, now)).expect("JSON");
        assert_eq!(
            json["lifecycle"][0]["states"],
            serde_json::to_value(&aws.states).expect("states"),
            "{json:#}"
        );
        let text = render(&input, Format::Text, now);
        let row = text.lines().nth(1).expect("a row");
        assert!(
            row.ends_with(
                "Free=1,Claimed=1,Dirty=1,CoolingDown=1,Cordoned=1,CleanupFailed=1,Suspect=1,InUseWithoutTenant=1,Internal=1,Quarantined=1"
            ),
            "{text}"
        );
    }

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
