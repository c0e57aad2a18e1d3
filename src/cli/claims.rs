//! `hap claims` (`kubectl hap claims`): AccountClaims with their state and, for the ones a
//! request source made, the object they serve (`Runtime kcp-system/…`, `Shoot garden-x/…`).

use std::process::ExitCode;

use serde::Serialize;

use super::validate::{Format, usage};
use crate::api::AccountClaim;
use crate::api::conditions::types;
use crate::claim_state::SourceRef;
use crate::k8s::live;
use crate::labels;
use crate::sources::naming::ANNOTATION_SOURCE;

/// List AccountClaims: phase, tenant, binding, why not bound, and the request source behind
/// each claim the operator created.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "SOURCE is `-` for claims a provisioner created itself, else the request source's id\n\
and the object it serves (HapConfig spec.requestSources). Exit codes: 0 shown, 2 the cluster\n\
could not be read."
)]
pub struct Args {
    /// Namespace of the claims (default: the current context's, as kubectl).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Claims of every namespace.
    #[arg(short = 'A', long = "all-namespaces")]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// After the listing, list again every --watch-interval and print the listing again
    /// whenever it changed (until interrupted).
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// How often --watch lists again.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = super::interval)]
    pub watch_interval: std::time::Duration,
    #[command(flatten)]
    pub kube: super::KubeFlags,
}

/// One claim in the listing (`-o json` is a list of these).
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub namespace: String,
    pub name: String,
    pub phase: String,
    pub global_account: String,
    pub binding: Option<String>,
    /// The Ready condition's reason.
    pub reason: Option<String>,
    /// The request source's id, for claims a source created.
    pub source: Option<String>,
    /// `Kind namespace/name` of the object the claim serves.
    pub source_object: Option<String>,
}

/// The row of one claim.
pub fn row(c: &AccountClaim) -> Row {
    let labels = c.metadata.labels.clone().unwrap_or_default();
    let status = c.status.as_ref();
    let source_object = c
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_SOURCE).cloned())
        .or_else(|| SourceRef::from_labels(&labels).map(|r| r.describe()));
    Row {
        namespace: c.metadata.namespace.clone().unwrap_or_default(),
        name: c.metadata.name.clone().unwrap_or_default(),
        phase: status
            .and_then(|s| s.phase)
            .map_or_else(|| "-".into(), |p| format!("{p:?}")),
        global_account: c.spec.global_account.clone(),
        binding: status.and_then(|s| s.credentials_binding_name.clone()),
        reason: status.and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == types::READY)
                .map(|c| c.reason.clone())
        }),
        source: labels.get(labels::SOURCE_ID).cloned(),
        source_object,
    }
}

pub fn run(args: Args) -> ExitCode {
    let target = args.kube.target(None);
    let namespace = if args.all_namespaces {
        None
    } else {
        Some(
            args.namespace
                .clone()
                .unwrap_or_else(|| target.namespace().unwrap_or_else(|| "default".into())),
        )
    };
    let every = args.watch.then_some(args.watch_interval);
    let mut last = None;
    let shown = live::claims(namespace.as_deref(), &target, every, |claims| {
        let mut rows: Vec<Row> = claims.iter().map(row).collect();
        rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let text = render(&rows, args.output, namespace.is_none());
        super::bindings::print_changed(&mut last, text)
    });
    match shown {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => usage(&e.report()),
    }
}

/// The listing in `output`.
fn render(rows: &[Row], output: Format, with_namespace: bool) -> String {
    match output {
        Format::Json | Format::Yaml => output.structured(&rows),
        Format::Text if rows.is_empty() => "No AccountClaims found.\n".into(),
        Format::Text => table(rows, with_namespace),
    }
}

/// A kubectl-style table, columns padded to their widest cell.
pub fn table(rows: &[Row], with_namespace: bool) -> String {
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let mut header = vec![
        "NAME",
        "PHASE",
        "GLOBAL-ACCOUNT",
        "BINDING",
        "REASON",
        "SOURCE",
    ];
    if with_namespace {
        header.insert(0, "NAMESPACE");
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let source = match (&r.source, &r.source_object) {
                (Some(id), Some(obj)) => format!("{id}: {obj}"),
                (Some(id), None) => id.clone(),
                _ => "-".into(),
            };
            let mut v = vec![
                r.name.clone(),
                r.phase.clone(),
                r.global_account.clone(),
                dash(&r.binding),
                dash(&r.reason),
                source,
            ];
            if with_namespace {
                v.insert(0, r.namespace.clone());
            }
            v
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}", w = *w))
            .collect();
        format!("{}\n", padded.join("   ").trim_end())
    };
    let mut out = line(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for row in &cells {
        out.push_str(&line(row));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_claim_shows_its_object_and_a_plain_claim_a_dash() {
        let mine: AccountClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
            "metadata": {"name": "runtime.kcp.rt-1", "namespace": "hap-system",
                "labels": {"accountpool.io/source-id": "kyma", "accountpool.io/source-kind": "Runtime",
                    "accountpool.io/source-namespace": "kcp", "accountpool.io/source-name": "rt-1"}},
            "spec": {"globalAccount": "ga-1", "plan": "aws"},
            "status": {"phase": "Bound", "credentialsBindingName": "aws-01",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Bound", "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .expect("claim");
        let plain: AccountClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "accountpool.io/v1alpha1", "kind": "AccountClaim",
            "metadata": {"name": "shoot-a", "namespace": "provisioning"},
            "spec": {"globalAccount": "ga-2", "plan": "gcp"},
        }))
        .expect("claim");
        let rows = vec![row(&mine), row(&plain)];
        assert_eq!(rows[0].source_object.as_deref(), Some("Runtime kcp/rt-1"));
        let text = table(&rows, true);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "NAMESPACE      NAME               PHASE   GLOBAL-ACCOUNT   BINDING   REASON   SOURCE"
        );
        assert!(lines[1].ends_with("kyma: Runtime kcp/rt-1"), "{}", lines[1]);
        assert!(
            lines[2].contains("shoot-a") && lines[2].ends_with('-'),
            "{}",
            lines[2]
        );
    }
}
