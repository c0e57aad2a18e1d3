//! Observe mode in the HapConfig status: the observe report (`status::observe`) in short —
//! counts per verdict and the first disagreements — the `Observing` condition, and the events
//! for disagreements not reported before. Pure: the report in, status and events out.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::conditions::{reasons, types};
use crate::api::{Disagreement, ObservationStatus};
use crate::status::observe::Report;

/// At most this many disagreements are listed in the status (and so told by events per resync).
pub const MAX_DISAGREEMENTS: usize = 20;

/// Whether the landscape is to be read again: never read, read for another generation (a new
/// rule or mode decides from now on), or read `resync` ago or longer. Between, the status keeps
/// the last observation, so that a burst of events reads nothing.
pub fn observation_due(
    last: Option<&ObservationStatus>,
    generation: Option<i64>,
    now: &Time,
    resync: std::time::Duration,
) -> bool {
    let Some(last) = last else { return true };
    let Some(at) = &last.time else { return true };
    let age = now.0.duration_since(at.0);
    last.observed_generation != generation || age.is_negative() || age.unsigned_abs() >= resync
}

/// The status block of a report; `notes` say which requests could not be read.
pub fn observation(
    report: &Report,
    notes: &[String],
    generation: Option<i64>,
    now: &Time,
) -> ObservationStatus {
    let verdicts: BTreeMap<String, i64> = report
        .verdicts
        .iter()
        .map(|(k, n)| (k.clone(), i64::try_from(*n).unwrap_or(i64::MAX)))
        .collect();
    let disagreements = report
        .disagreements(MAX_DISAGREEMENTS)
        .into_iter()
        .map(|r| Disagreement {
            kind: r.kind.clone(),
            request: r.object.clone(),
            tenant: r.tenant.clone(),
            binding_in_use: r.in_use.clone(),
            would_choose: r.would_use.clone(),
            verdict: format!("{:?}", r.verdict),
            message: r.message.clone(),
        })
        .collect();
    ObservationStatus {
        time: Some(now.clone()),
        observed_generation: generation,
        requests: i64::try_from(report.requests.len()).unwrap_or(i64::MAX),
        verdicts,
        disagreements,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    }
}

/// `Observing=True` with the counts while observing; absent otherwise (also while the first
/// observation is not made yet, so that the condition never claims counts it has not seen).
pub fn set_observing_condition(
    conditions: &mut Vec<Condition>,
    observation: Option<&ObservationStatus>,
    generation: Option<i64>,
    now: &Time,
) {
    let Some(o) = observation else {
        super::remove_condition(conditions, types::OBSERVING);
        return;
    };
    let counts: Vec<String> = o.verdicts.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let counts = if counts.is_empty() {
        "none".to_string()
    } else {
        counts.join(", ")
    };
    let message = format!(
        "spec.mode is Observe: no binding is written; {} request(s) compared with the binding in \
         use ({counts}); status.observation lists the disagreements",
        o.requests
    );
    super::set_condition(
        conditions,
        types::OBSERVING,
        super::CondStatus::True,
        reasons::OBSERVING,
        message,
        generation,
        now,
    );
}

/// The events for disagreements not in the status before: `(warning, reason, note)`. Each
/// request and verdict is told once while it stays listed; at most [`MAX_DISAGREEMENTS`].
pub fn disagreement_events(
    old: Option<&ObservationStatus>,
    new: Option<&ObservationStatus>,
) -> Vec<(bool, &'static str, String)> {
    let Some(new) = new else {
        return Vec::new();
    };
    let seen = |d: &Disagreement| {
        old.is_some_and(|o| {
            o.disagreements
                .iter()
                .any(|p| p.request == d.request && p.kind == d.kind && p.verdict == d.verdict)
        })
    };
    new.disagreements
        .iter()
        .filter(|d| !seen(d))
        .take(MAX_DISAGREEMENTS)
        .map(|d| {
            let in_use = d.binding_in_use.as_deref().unwrap_or("none");
            let would = if d.would_choose.is_empty() {
                "no pool".to_string()
            } else {
                d.would_choose.join(", then ")
            };
            let note = format!(
                "{} {} of tenant `{}` uses binding {in_use}; hap-operator would choose {would} \
                 ({}): {}",
                d.kind, d.request, d.tenant, d.verdict, d.message
            );
            (false, "ObservedDisagreement", note)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::observe::{Row, Verdict};
    use crate::status::tests::at;

    fn row(object: &str, verdict: Verdict) -> Row {
        Row {
            kind: "Runtime".into(),
            object: object.into(),
            tenant: "ga-1".into(),
            in_use: Some("aws-1".into()),
            in_use_pool: None,
            would_use: vec!["hyperscalerType=aws, euAccess".into()],
            verdict,
            message: "m".into(),
            request: None,
        }
    }

    fn report(rows: Vec<Row>) -> Report {
        let mut verdicts = BTreeMap::new();
        for r in &rows {
            *verdicts.entry(format!("{:?}", r.verdict)).or_insert(0) += 1;
        }
        Report {
            verdicts,
            requests: rows,
            ..Default::default()
        }
    }

    #[test]
    fn the_status_counts_every_verdict_and_lists_at_most_twenty_disagreements() {
        let mut rows: Vec<Row> = (0..30)
            .map(|i| row(&format!("kcp/rt-{i:02}"), Verdict::OtherPool))
            .collect();
        rows.push(row("kcp/ok", Verdict::Agrees));
        rows.push(row("kcp/new", Verdict::WouldServe));
        let o = observation(&report(rows), &["no Runtimes read".into()], Some(1), &at(5));
        assert_eq!(o.requests, 32);
        assert_eq!(o.verdicts["OtherPool"], 30);
        assert_eq!(o.verdicts["Agrees"], 1);
        assert_eq!(o.disagreements.len(), MAX_DISAGREEMENTS);
        let d = &o.disagreements[0];
        assert_eq!(
            (d.request.as_str(), d.tenant.as_str(), d.verdict.as_str()),
            ("kcp/rt-00", "ga-1", "OtherPool")
        );
        assert_eq!(d.binding_in_use.as_deref(), Some("aws-1"));
        assert_eq!(d.would_choose, ["hyperscalerType=aws, euAccess"]);
        assert_eq!(o.note.as_deref(), Some("no Runtimes read"));
    }

    #[test]
    fn agreeing_and_waiting_requests_are_counted_but_not_listed() {
        let o = observation(
            &report(vec![
                row("a", Verdict::Agrees),
                row("b", Verdict::WouldServe),
                row("c", Verdict::TenancyOnly),
            ]),
            &[],
            Some(1),
            &at(5),
        );
        assert!(o.disagreements.is_empty());
        assert_eq!(o.note, None);
    }

    #[test]
    fn the_condition_carries_the_counts_and_goes_with_the_observation() {
        let now = at(10);
        let o = observation(
            &report(vec![
                row("a", Verdict::Agrees),
                row("b", Verdict::NotAdoptable),
            ]),
            &[],
            Some(1),
            &at(5),
        );
        let mut conds = Vec::new();
        set_observing_condition(&mut conds, Some(&o), Some(3), &now);
        let c = conds
            .iter()
            .find(|c| c.type_ == types::OBSERVING)
            .expect("Observing");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "Observing")
        );
        assert!(
            c.message.contains("2 request(s)") && c.message.contains("Agrees 1, NotAdoptable 1"),
            "{}",
            c.message
        );
        assert_eq!(c.observed_generation, Some(3));
        set_observing_condition(&mut conds, None, Some(4), &now);
        assert!(conds.iter().all(|c| c.type_ != types::OBSERVING));
    }

    #[test]
    fn a_disagreement_is_told_once_while_it_stays_and_again_when_its_verdict_changes() {
        let first = observation(
            &report(vec![row("a", Verdict::OtherPool)]),
            &[],
            Some(1),
            &at(5),
        );
        let events = disagreement_events(None, Some(&first));
        assert_eq!(events.len(), 1);
        let (warning, reason, note) = &events[0];
        assert!(!warning);
        assert_eq!(*reason, "ObservedDisagreement");
        assert!(
            note.contains("Runtime a of tenant `ga-1` uses binding aws-1")
                && note.contains("would choose hyperscalerType=aws, euAccess (OtherPool)"),
            "{note}"
        );
        assert!(disagreement_events(Some(&first), Some(&first)).is_empty());
        let changed = observation(
            &report(vec![row("a", Verdict::NotAdoptable)]),
            &[],
            Some(1),
            &at(5),
        );
        assert_eq!(disagreement_events(Some(&first), Some(&changed)).len(), 1);
        assert!(disagreement_events(Some(&first), None).is_empty());
    }

    #[test]
    fn the_landscape_is_read_again_after_the_resync_or_for_a_new_generation_only() {
        let resync = std::time::Duration::from_secs(300);
        let last = observation(&report(vec![]), &[], Some(2), &at(1000));
        assert!(observation_due(None, Some(2), &at(1000), resync));
        assert!(!observation_due(Some(&last), Some(2), &at(1299), resync));
        assert!(observation_due(Some(&last), Some(2), &at(1300), resync));
        assert!(observation_due(Some(&last), Some(3), &at(1001), resync));
        // A clock that went back reads again rather than trusting a time from the future.
        assert!(observation_due(Some(&last), Some(2), &at(999), resync));
    }

    #[test]
    fn a_storm_of_new_disagreements_is_told_in_at_most_twenty_events() {
        let rows = (0..50)
            .map(|i| row(&format!("r{i}"), Verdict::Refused))
            .collect();
        let o = observation(&report(rows), &[], Some(1), &at(5));
        assert_eq!(disagreement_events(None, Some(&o)).len(), MAX_DISAGREEMENTS);
    }
}
