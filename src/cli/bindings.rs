//! `hap bindings` (`kubectl hap bindings`): one line per binding with its pool, its lifecycle
//! state (judged by the function behind `hap pools`, `status.pools[].states` and the metrics),
//! its tenant, clusters, credentials, since when and why, filtered by tenant, state, pool and
//! label selector. The full lists of cordoned and suspect bindings, which the status names only
//! the first ten of per pool.

use std::io::Write;
use std::process::ExitCode;

use jiff::Timestamp;
use serde::Serialize;

use super::validate::{Format, usage};
use crate::k8s::live::{self, BindingsInput, DEFAULT_CONFIG};
use crate::labels::PoolKey;
use crate::pools::lifecycle::{
    BindingState, CLEANUP_FAILED_REASON, CORDON_REASON, dirty_since, released,
};

/// Output format of `hap bindings`: kubectl's four.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Output {
    #[default]
    Text,
    Wide,
    Json,
    Yaml,
}

/// One line per binding: pool, state, tenant, clusters, credentials, since, reason.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Reads the HapConfig (--config) for bindingNamespace, bindingKind, \
labelKeys, shootNamespace, the\n\
release cooldown and the suspect settings, then lists bindings, Shoots and AccountClaims once\n\
(never Secrets). STATE is the lifecycle state as `hap pools`, status.pools[].states and the\n\
metrics count it (`-` for bindings of shared pools and bindings in no pool). POOL is the\n\
hyperscalerType, with +eu for EU-access pools and +shared for shared ones. CREDENTIALS: the\n\
binding's kind and the kind its credentials reference names. SINCE: for Dirty, CoolingDown and\n\
a once-released Free binding the release the operator recorded (accountpool.io/released-at);\n\
for Claimed the creation of the oldest claim bound to it; for Internal, a never-released Free,\n\
shared and poolless binding its creation; `-` for Cordoned, Suspect and InUseWithoutTenant,\n\
which no object dates. REASON: the cordon reason, the suspect Shoots' error codes, the tenant\n\
that released a dirty or cooling-down binding (and when its cooldown ends), the clusters on a\n\
binding without tenant. -o wide adds the creation time and the clusters' names.\n\
Exit codes: 0 shown, 2 bad flags or the cluster could not be read."
)]
pub struct Args {
    /// The HapConfig to read (the operator's --config-name).
    #[arg(long = "config", value_name = "NAME", default_value = DEFAULT_CONFIG)]
    pub config: String,
    /// Only the bindings this tenant (global account) holds.
    #[arg(long, value_name = "GLOBAL-ACCOUNT")]
    pub tenant: Option<String>,
    /// Only bindings in these states (comma-separated or repeated; e.g. Cordoned,Suspect).
    #[arg(long, value_name = "STATE", value_delimiter = ',', value_parser = parse_state)]
    pub state: Vec<BindingState>,
    /// Only the bindings of this pool: a hyperscalerType (every pool of it), or a POOL cell as
    /// printed (aws+eu, azure+shared).
    #[arg(long, value_name = "POOL")]
    pub pool: Option<String>,
    /// Label selector on the bindings, as kubectl's (`-l tenantName=ga-1`, `-l '!dirty'`).
    #[arg(short = 'l', long = "selector", value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// After the listing, list again every --watch-interval and print the listing again
    /// whenever it changed (until interrupted).
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// How often --watch lists again.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = super::interval)]
    pub watch_interval: std::time::Duration,
    /// Kubeconfig of the garden holding the bindings and Shoots, when it is not the cluster of
    /// KUBECONFIG (as the operator's --garden-kubeconfig).
    #[arg(long, env = "HAP_GARDEN_KUBECONFIG", value_name = "PATH")]
    pub garden_kubeconfig: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub kube: super::KubeFlags,
}

/// A state name as status and metrics write it, in any case.
fn parse_state(text: &str) -> Result<BindingState, String> {
    BindingState::ALL
        .into_iter()
        .find(|s| s.as_str().eq_ignore_ascii_case(text.trim()))
        .ok_or_else(|| {
            let names: Vec<&str> = BindingState::ALL.iter().map(|s| s.as_str()).collect();
            format!("no state `{text}`; the states are {}", names.join(", "))
        })
}

/// One binding in the listing (`-o json` and `-o yaml` are lists of these).
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub name: String,
    /// `aws`, `aws+eu`, `azure+shared`; `None` for a binding in no pool.
    pub pool: Option<String>,
    pub hyperscaler_type: Option<String>,
    pub eu_access: bool,
    pub shared: bool,
    /// `None` for shared and poolless bindings, which have no lifecycle.
    pub state: Option<BindingState>,
    pub tenant: Option<String>,
    pub clusters: usize,
    pub cluster_names: Vec<String>,
    /// `CredentialsBinding` or `SecretBinding`.
    pub binding_kind: String,
    /// What the credentials reference names: `Secret`, `WorkloadIdentity`, `InternalSecret`.
    pub credentials: String,
    /// The other bindings that reference the same credential: one account, counted as one
    /// (Gardener's forced migration leaves such pairs).
    pub account_shared_with: Vec<String>,
    pub since: Option<Timestamp>,
    pub created: Option<Timestamp>,
    pub reason: Option<String>,
}

/// The filters of the command line; empty ones pass every row.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub tenant: Option<String>,
    pub states: Vec<BindingState>,
    pub pool: Option<String>,
}

impl Filter {
    pub fn keeps(&self, r: &Row) -> bool {
        let tenant = self
            .tenant
            .as_ref()
            .is_none_or(|t| r.tenant.as_ref() == Some(t));
        let state = self.states.is_empty() || r.state.is_some_and(|s| self.states.contains(&s));
        let pool = self
            .pool
            .as_ref()
            .is_none_or(|p| r.pool.as_ref() == Some(p) || r.hyperscaler_type.as_ref() == Some(p));
        tenant && state && pool
    }
}

fn pool_cell(k: &PoolKey) -> String {
    let mut cell = k.hyperscaler_type.clone();
    if k.eu_access {
        cell.push_str("+eu");
    }
    if k.shared {
        cell.push_str("+shared");
    }
    cell
}

/// Every binding read, judged at `now` with the config in force, sorted by name.
pub fn rows(input: &BindingsInput, now: Timestamp) -> Vec<Row> {
    let spec = &input.pools.spec;
    let mut inv = input.pools.inventory();
    // The same call status and metrics make: it sets the rules and the time on the index.
    crate::status::pool_states(spec, &mut inv, now);
    let cooldown = crate::status::lifecycle_rules(spec, now).cooldown;
    let mut out: Vec<Row> = input
        .pools
        .bindings
        .iter()
        .map(|b| {
            let entry = inv.binding(&b.name);
            let key = entry.and_then(|e| e.pool.as_ref()).map(|(k, _)| k.clone());
            let state = inv.binding_state(&b.name).map(|(_, s)| s);
            let created = input.created.get(&b.name).copied();
            let clusters: Vec<String> = inv.clusters_on(&b.name).iter().map(String::from).collect();
            let release = released(&b.annotations);
            let since = match state {
                Some(BindingState::Claimed) => input.claimed_at.get(&b.name).copied(),
                // The status' rule: a release record older than the last claim dates nothing.
                Some(BindingState::Dirty) => dirty_since(&b.annotations),
                Some(BindingState::CoolingDown | BindingState::CleanupFailed) => {
                    release.map(|r| r.0)
                }
                Some(BindingState::Free | BindingState::Quarantined) => {
                    release.map(|r| r.0).or(created)
                }
                Some(
                    BindingState::Cordoned
                    | BindingState::Suspect
                    | BindingState::InUseWithoutTenant,
                ) => None,
                Some(BindingState::Internal) | None => created,
            };
            let codes = inv.binding_error_codes(&b.name);
            let why = Why {
                state,
                pooled: key.is_some(),
                cordon_reason: b.annotations.get(CORDON_REASON).map(String::as_str),
                cleanup_reason: b.annotations.get(CLEANUP_FAILED_REASON).map(String::as_str),
                released: release,
                cooldown,
                codes,
                clusters: &clusters,
            };
            Row {
                name: b.name.clone(),
                pool: key.as_ref().map(pool_cell),
                hyperscaler_type: key.as_ref().map(|k| k.hyperscaler_type.clone()),
                eu_access: key.as_ref().is_some_and(|k| k.eu_access),
                shared: key.as_ref().is_some_and(|k| k.shared),
                state,
                tenant: b.labels.get(&inv.keys().tenant_name).cloned(),
                clusters: clusters.len(),
                binding_kind: input.pools.binding_kind.gvk().2.to_string(),
                credentials: b.credentials.as_str().to_string(),
                account_shared_with: inv.siblings(&b.name).map(String::from).collect(),
                since,
                created,
                reason: why.text(),
                cluster_names: clusters,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// What the REASON cell is made of.
struct Why<'a> {
    state: Option<BindingState>,
    pooled: bool,
    cordon_reason: Option<&'a str>,
    cleanup_reason: Option<&'a str>,
    released: Option<(Timestamp, Option<&'a str>)>,
    cooldown: Option<std::time::Duration>,
    codes: Option<(Vec<String>, usize)>,
    clusters: &'a [String],
}

impl Why<'_> {
    fn text(&self) -> Option<String> {
        let by = self.released.and_then(|(_, by)| by);
        Some(match self.state {
            None if !self.pooled => {
                "in no pool: no hyperscalerType label, or labels no pool takes".into()
            }
            None => "shared pool: no lifecycle".into(),
            Some(BindingState::Cordoned) => match self.cordon_reason {
                Some(r) if !r.trim().is_empty() => r.to_string(),
                _ => format!("cordoned, no {CORDON_REASON} given"),
            },
            Some(BindingState::CleanupFailed) => match self.cleanup_reason {
                Some(r) if !r.trim().is_empty() => format!("cleanup failed: {r}"),
                _ => format!("cleanup failed, no {CLEANUP_FAILED_REASON} given"),
            },
            Some(BindingState::Suspect) => match &self.codes {
                Some((codes, n)) => format!("{n} Shoot(s) report {}", codes.join(",")),
                None => "its Shoots report the configured error codes".into(),
            },
            Some(BindingState::InUseWithoutTenant) => {
                format!("used by {} without a tenant label", self.clusters.join(","))
            }
            Some(BindingState::Dirty) => match by {
                Some(t) => format!("released by {t}; waits for the cleanup job"),
                None => "waits for the cleanup job".into(),
            },
            Some(BindingState::CoolingDown) => {
                let end = self.released.zip(self.cooldown).and_then(|((at, _), p)| {
                    at.checked_add(jiff::SignedDuration::try_from(p).ok()?).ok()
                });
                match end {
                    Some(end) => format!("released by {}; cooldown until {end}", by.unwrap_or("?")),
                    None => format!("released by {}; cooling down", by.unwrap_or("?")),
                }
            }
            Some(BindingState::Internal) => "internal=true: never handed out".into(),
            Some(BindingState::Quarantined) => format!(
                "new account: only the requests spec.quarantine names get it until a Shoot on it \
                 succeeds (or {}={})",
                crate::pools::quarantine::QUARANTINE,
                crate::pools::quarantine::RELEASED
            ),
            Some(BindingState::Free | BindingState::Claimed) => return None,
        })
    }
}

/// The listing in `output`.
pub fn render(rows: &[Row], output: Output) -> String {
    match output {
        Output::Json => Format::Json.structured(&rows),
        Output::Yaml => Format::Yaml.structured(&rows),
        Output::Text | Output::Wide if rows.is_empty() => "No bindings found.\n".into(),
        Output::Text => table(rows, false),
        Output::Wide => table(rows, true),
    }
}

fn table(rows: &[Row], wide: bool) -> String {
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let time = |t: Option<Timestamp>| dash(t.map(|t| t.to_string()));
    let mut header = vec![
        "NAME",
        "POOL",
        "STATE",
        "TENANT",
        "CLUSTERS",
        "CREDENTIALS",
        "SINCE",
    ];
    if wide {
        header.extend(["CREATED", "CLUSTER-NAMES", "ACCOUNT-SHARED-WITH"]);
    }
    header.push("REASON");
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut c = vec![
                r.name.clone(),
                dash(r.pool.clone()),
                dash(r.state.map(|s| s.as_str().to_string())),
                dash(r.tenant.clone()),
                r.clusters.to_string(),
                format!("{}/{}", r.binding_kind, r.credentials),
                time(r.since),
            ];
            if wide {
                c.push(time(r.created));
                c.push(dash(
                    (!r.cluster_names.is_empty()).then(|| r.cluster_names.join(",")),
                ));
                c.push(dash(
                    (!r.account_shared_with.is_empty()).then(|| r.account_shared_with.join(",")),
                ));
            }
            c.push(dash(r.reason.clone()));
            c
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("{}\n", padded.join("   ").trim_end())
    };
    let mut out = line(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for row in &cells {
        out.push_str(&line(row));
    }
    out
}

/// Prints `text` when it differs from the last listing printed (`--watch` prints only changes;
/// a listing after the first is set off by a blank line). False when stdout is gone.
pub(crate) fn print_changed(last: &mut Option<String>, text: String) -> bool {
    if last.as_ref() == Some(&text) {
        return true;
    }
    let mut out = std::io::stdout().lock();
    let gap = if last.is_some() { "\n" } else { "" };
    let ok = write!(out, "{gap}{text}")
        .and_then(|()| out.flush())
        .is_ok();
    *last = Some(text);
    ok
}

pub fn run(args: Args) -> ExitCode {
    let target = args.kube.target(args.garden_kubeconfig.as_deref());
    let filter = Filter {
        tenant: args.tenant.clone(),
        states: args.state.clone(),
        pool: args.pool.clone(),
    };
    let every = args.watch.then_some(args.watch_interval);
    let mut last = None;
    let mut noted = false;
    let shown = live::bindings(
        &args.config,
        args.selector.as_deref(),
        &target,
        every,
        |input| {
            if let (Some(note), false) = (&input.pools.note, noted) {
                eprintln!("hap: {note}");
                noted = true;
            }
            let mut rows = rows(&input, Timestamp::now());
            rows.retain(|r| filter.keeps(r));
            print_changed(&mut last, render(&rows, args.output))
        },
    );
    match shown {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => usage(&e.report()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::pools::fixtures::binding;

    /// The every-state landscape of `hap pools`' tests, with a cordon reason, a shared and a
    /// poolless binding, and the times only `hap bindings` reads.
    fn input(now: Timestamp) -> BindingsInput {
        let mut pools = super::super::pools::tests::landscape(now);
        for b in &mut pools.bindings {
            if b.name == "aws-cord" {
                b.annotations
                    .insert(CORDON_REASON.into(), "quota ticket 4711".into());
            }
        }
        pools.bindings.push(binding(
            "azure-shared",
            &[("hyperscalerType", "azure"), ("shared", "true")],
        ));
        pools.bindings.push(binding("stray", &[]));
        let created = now - jiff::SignedDuration::from_hours(48);
        let claimed = now - jiff::SignedDuration::from_hours(3);
        BindingsInput {
            created: pools
                .bindings
                .iter()
                .map(|b| (b.name.clone(), created))
                .collect(),
            claimed_at: [("aws-claimed".to_string(), claimed)].into(),
            pools,
        }
    }

    fn by_name(rows: &[Row]) -> BTreeMap<&str, &Row> {
        rows.iter().map(|r| (r.name.as_str(), r)).collect()
    }

    #[test]
    fn each_binding_has_the_state_the_pool_counts_count() {
        let now = Timestamp::now();
        let input = input(now);
        let rows = rows(&input, now);
        let mut inv = input.pools.inventory();
        let status = crate::status::pool_states(&input.pools.spec, &mut inv, now);
        let mut counted: BTreeMap<String, i64> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.pool.as_deref() == Some("aws")) {
            *counted
                .entry(r.state.expect("aws bindings have a state").as_str().into())
                .or_default() += 1;
        }
        assert_eq!(counted, status[0].states);
        let r = by_name(&rows);
        let state = |n: &str| r[n].state.map(|s| s.as_str());
        assert_eq!(state("aws-free"), Some("Free"));
        assert_eq!(state("aws-failed"), Some("CleanupFailed"));
        assert_eq!(state("aws-cool"), Some("CoolingDown"));
        assert_eq!(state("aws-suspect"), Some("Suspect"));
        assert_eq!(state("aws-new"), Some("Quarantined"));
        assert!(
            r["aws-new"]
                .reason
                .as_deref()
                .is_some_and(|w| w.contains("spec.quarantine")),
            "{:?}",
            r["aws-new"].reason
        );
        assert_eq!(state("azure-shared"), None);
        assert_eq!(r["azure-shared"].pool.as_deref(), Some("azure+shared"));
        assert_eq!(state("stray"), None);
        assert_eq!(r["stray"].pool, None);
    }

    #[test]
    fn bindings_of_one_credential_name_each_other_and_count_the_accounts_clusters() {
        use crate::pools::fixtures::{binding, on_secret};
        let now = Timestamp::now();
        let mut input = input(now);
        for b in &mut input.pools.bindings {
            if b.name == "aws-claimed" {
                *b = on_secret(b.clone(), "s");
            }
        }
        let migrated = on_secret(binding("force-migrated-aws-claimed", &[]), "s");
        input.pools.bindings.push(migrated);
        let rows = rows(&input, now);
        let r = by_name(&rows);
        assert_eq!(
            r["aws-claimed"].account_shared_with,
            ["force-migrated-aws-claimed"]
        );
        assert_eq!(
            r["force-migrated-aws-claimed"].account_shared_with,
            ["aws-claimed"]
        );
        assert_eq!(r["force-migrated-aws-claimed"].cluster_names, ["s1"]);
        assert!(r["aws-free"].account_shared_with.is_empty());
    }

    #[test]
    fn on_secret_bindings_a_credentials_binding_of_the_secret_is_named_and_its_shoot_counted() {
        use crate::api::BindingKind;
        use crate::pools::fixtures::{on_secret, shoot};
        use crate::pools::{Account, OtherBinding};
        let now = Timestamp::now();
        let mut input = input(now);
        input.pools.binding_kind = BindingKind::SecretBinding;
        for b in &mut input.pools.bindings {
            if b.name == "aws-free" {
                *b = on_secret(b.clone(), "s");
            }
        }
        let migrated = OtherBinding {
            resource_version: Some("1".into()),
            account: Account::of_secret(Some("garden"), None, "s"),
        };
        input
            .pools
            .others
            .push(("force-migrated-aws-free".into(), migrated));
        // Gardener's maintenance set `spec.credentialsBindingName` (the default kind of a view).
        input
            .pools
            .shoots
            .push(shoot("moved", Some("force-migrated-aws-free")));
        let rows = rows(&input, now);
        let r = by_name(&rows);
        assert_eq!(
            r["aws-free"].account_shared_with,
            ["CredentialsBinding/force-migrated-aws-free"]
        );
        assert_eq!(r["aws-free"].cluster_names, ["moved"]);
        assert_eq!(r["aws-free"].state, Some(BindingState::InUseWithoutTenant));
    }

    #[test]
    fn since_and_reason_come_from_the_objects() {
        // Whole seconds, as the records on the objects are written: a record of `now - 20 min`
        // then reads back as exactly that.
        let now = Timestamp::now().round(jiff::Unit::Second).expect("round");
        let input = input(now);
        let rows = rows(&input, now);
        let r = by_name(&rows);
        let released = released(&input.pools.bindings[3].annotations)
            .expect("aws-cool carries a release")
            .0;
        let created = input.created["aws-free"];
        assert_eq!(r["aws-cool"].since, Some(released));
        let end = released + jiff::SignedDuration::from_hours(1);
        assert_eq!(
            r["aws-cool"].reason.as_deref(),
            Some(format!("released by ga-old; cooldown until {end}").as_str())
        );
        assert_eq!(
            r["aws-claimed"].since,
            input.claimed_at.get("aws-claimed").copied()
        );
        assert_eq!(r["aws-claimed"].tenant.as_deref(), Some("ga-1"));
        assert_eq!(r["aws-claimed"].cluster_names, ["s1"]);
        assert_eq!(r["aws-claimed"].reason, None);
        assert_eq!(r["aws-free"].since, Some(created));
        assert_eq!(r["aws-int"].since, Some(created));
        assert_eq!(r["aws-cord"].since, None, "no object dates a cordon");
        assert_eq!(r["aws-cord"].reason.as_deref(), Some("quota ticket 4711"));
        assert_eq!(
            r["aws-suspect"].reason.as_deref(),
            Some("1 Shoot(s) report ERR_INFRA_UNAUTHORIZED")
        );
        assert_eq!(
            r["aws-used"].reason.as_deref(),
            Some("used by foreign without a tenant label")
        );
        assert_eq!(
            r["aws-dirty"].reason.as_deref(),
            Some("waits for the cleanup job")
        );
        assert_eq!(r["aws-free"].binding_kind, "CredentialsBinding");
        // A dirty binding is dirty since its release record, unless a later claim outdates it.
        let mut input = input;
        let at = |m: i64| now - jiff::SignedDuration::from_mins(m);
        let dirty = input
            .pools
            .bindings
            .iter_mut()
            .find(|b| b.name == "aws-dirty")
            .expect("aws-dirty");
        let record = |k: &str, t| (k.to_string(), crate::pools::lifecycle::release_time(t));
        dirty.annotations.extend([
            record(crate::pools::lifecycle::CLAIMED_AT, at(30)),
            record(crate::pools::lifecycle::RELEASED_AT, at(20)),
        ]);
        let since = |input: &BindingsInput| {
            by_name(&super::rows(input, now))["aws-dirty"]
                .since
                .map(|t| t.as_second())
        };
        assert_eq!(since(&input), Some(at(20).as_second()));
        let dirty = input
            .pools
            .bindings
            .iter_mut()
            .find(|b| b.name == "aws-dirty");
        if let Some(d) = dirty {
            d.annotations
                .extend([record(crate::pools::lifecycle::CLAIMED_AT, at(10))]);
        }
        assert_eq!(since(&input), None, "a record older than the last claim");
        assert_eq!(r["aws-free"].credentials, "Secret");
    }

    #[test]
    fn filters_keep_what_they_name_and_only_that() {
        let now = Timestamp::now();
        let rows = rows(&input(now), now);
        let names = |f: Filter| -> Vec<String> {
            rows.iter()
                .filter(|r| f.keeps(r))
                .map(|r| r.name.clone())
                .collect()
        };
        let tenant = Filter {
            tenant: Some("ga-1".into()),
            ..Filter::default()
        };
        assert_eq!(names(tenant), ["aws-claimed"]);
        let states = Filter {
            states: vec![BindingState::Cordoned, BindingState::Suspect],
            ..Filter::default()
        };
        assert_eq!(names(states), ["aws-cord", "aws-suspect"]);
        let shared = Filter {
            pool: Some("azure+shared".into()),
            ..Filter::default()
        };
        assert_eq!(names(shared.clone()), ["azure-shared"]);
        let by_type = Filter {
            pool: Some("azure".into()),
            ..Filter::default()
        };
        assert_eq!(names(by_type), names(shared));
        let both = Filter {
            pool: Some("aws".into()),
            states: vec![BindingState::Free],
            tenant: None,
        };
        assert_eq!(names(both), ["aws-free"]);
        assert_eq!(names(Filter::default()).len(), rows.len());
    }

    #[test]
    fn states_parse_in_any_case_and_unknown_ones_are_named() {
        assert_eq!(parse_state("cordoned"), Ok(BindingState::Cordoned));
        assert_eq!(
            parse_state("InUseWithoutTenant"),
            Ok(BindingState::InUseWithoutTenant)
        );
        let err = parse_state("Broken").expect_err("no such state");
        assert!(
            err.contains("`Broken`") && err.contains("CoolingDown"),
            "{err}"
        );
    }

    #[test]
    fn table_wide_and_structured_outputs() {
        let now: Timestamp = "2026-12-05T20:00:00Z".parse().expect("time");
        let mut rows = rows(&input(now), now);
        rows.retain(|r| r.name == "aws-claimed" || r.name == "stray");
        let text = render(&rows, Output::Text);
        assert_eq!(
            text,
            "\
NAME          POOL   STATE     TENANT   CLUSTERS   CREDENTIALS                 SINCE                  REASON
aws-claimed   aws    Claimed   ga-1     1          CredentialsBinding/Secret   2026-12-05T17:00:00Z   -
stray         -      -         -        0          CredentialsBinding/Secret   2026-12-03T20:00:00Z   in no pool: no hyperscalerType label, or labels no pool takes
"
        );
        let wide = render(&rows, Output::Wide);
        let header: Vec<&str> = wide
            .lines()
            .next()
            .expect("header")
            .split_whitespace()
            .collect();
        assert_eq!(
            header[7..],
            ["CREATED", "CLUSTER-NAMES", "ACCOUNT-SHARED-WITH", "REASON"]
        );
        assert!(
            wide.lines()
                .nth(1)
                .expect("row")
                .contains("2026-12-03T20:00:00Z   s1"),
            "{wide}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(&rows, Output::Json)).expect("JSON");
        assert_eq!(json[0]["state"], "Claimed");
        assert_eq!(json[0]["since"], "2026-12-05T17:00:00Z");
        assert_eq!(json[1]["state"], serde_json::Value::Null);
        let yaml = render(&rows, Output::Yaml);
        assert!(
            yaml.contains("state: Claimed") && yaml.contains("name: stray"),
            "{yaml}"
        );
        assert_eq!(render(&[], Output::Text), "No bindings found.\n");
    }
}
