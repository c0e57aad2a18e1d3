//! The sizes of the operator's maps, queues and records as a gauge (`hap_internal_entries`),
//! sampled by the background task: over a churn at a steady rate every one stays level, so one
//! that keeps growing is a leak an operator can see before memory runs out.

use std::time::{Duration, Instant};

use super::Context;
use crate::metrics::StructureLabels;

/// How often the sizes are sampled. Each count is read under its lock; the index's maps of sets
/// are summed, a walk over their values (about a millisecond at 100k objects).
pub const EVERY: Duration = Duration::from_secs(15);

/// Every structure's size now, by the name the gauge carries.
pub fn entry_counts(ctx: &Context) -> Vec<(&'static str, usize)> {
    let mut counts: Vec<(&'static str, usize)> = {
        let l = ctx.ledger();
        let mut c = l.inventory.entry_counts().to_vec();
        c.extend(l.inflight.entry_counts());
        c
    };
    counts.push(("lane_kept", ctx.lanes.kept()));
    counts.push(("claim_store", ctx.caches.claims.len()));
    counts.push(("backoff", ctx.backoff.entries()));
    counts.push(("denials", ctx.denials.entries()));
    counts.extend(ctx.sources.watched_objects());
    counts
}

/// Sets the gauge when `EVERY` has passed since `last`; returns when it was last set.
pub fn sample(ctx: &Context, last: Option<Instant>, now: Instant) -> Option<Instant> {
    if last.is_some_and(|at| now.duration_since(at) < EVERY) {
        return last;
    }
    for (structure, n) in entry_counts(ctx) {
        ctx.metrics
            .internal_entries
            .get_or_create(&StructureLabels {
                structure: structure.to_string(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    Some(now)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    fn gauge(text: &str, structure: &str) -> Option<i64> {
        let series = format!("hap_internal_entries{{structure=\"{structure}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .and_then(|v| v.trim().parse().ok())
    }

    #[tokio::test]
    async fn the_gauge_shows_each_structure_and_is_set_again_only_after_its_period() {
        let (c1, c2) = (claim("c1"), claim("c2"));
        let bindings = [binding("b1", "5", &[]), binding("b2", "6", &[])];
        let h = Harness::new(hap_config(aws_spec()), &[&c1, &c2], &bindings);
        let t0 = Instant::now();

        assert_eq!(sample(&h.ctx, None, t0), Some(t0));
        let text = h.ctx.metrics.encode();
        assert_eq!(gauge(&text, "index_bindings"), Some(2), "{text}");
        assert_eq!(gauge(&text, "index_claims"), Some(2));
        assert_eq!(gauge(&text, "claim_store"), Some(2));
        assert_eq!(gauge(&text, "inflight_claims"), Some(0));
        assert_eq!(gauge(&text, "lane_kept"), Some(0));
        assert_eq!(gauge(&text, "source_shoots"), Some(0));

        h.forget_stored(&c2);
        let soon = t0 + EVERY - Duration::from_millis(1);
        assert_eq!(sample(&h.ctx, Some(t0), soon), Some(t0), "not yet due");
        assert_eq!(gauge(&h.ctx.metrics.encode(), "claim_store"), Some(2));
        let due = t0 + EVERY;
        assert_eq!(sample(&h.ctx, Some(t0), due), Some(due));
        assert_eq!(gauge(&h.ctx.metrics.encode(), "claim_store"), Some(1));
    }

    /// Every structure the gauge carries is named in the metric's row of docs/operating.md,
    /// and the row names no other.
    #[tokio::test]
    async fn the_operating_guide_names_every_structure_and_no_other() {
        let h = Harness::new(hap_config(aws_spec()), &[], &[]);
        let exported: std::collections::BTreeSet<&str> = entry_counts(&h.ctx)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        let guide = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operating.md"));
        let row = guide
            .lines()
            .find(|l| l.starts_with("| `hap_internal_entries` |"))
            .expect("docs/operating.md has a row for hap_internal_entries");
        let named: std::collections::BTreeSet<&str> = row
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .filter(|w| !w.starts_with("hap_") && !w.starts_with("container_") && *w != "structure")
            .collect();
        assert_eq!(named, exported);
    }
}
