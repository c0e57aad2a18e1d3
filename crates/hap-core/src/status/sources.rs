//! The `SourcesAvailable` condition of a HapConfig: present only while request sources are
//! configured; False names each source the operator cannot watch and why. Like
//! `PoolsAvailable`, it does not make the config un-Ready: the other sources and AccountClaims
//! are served.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::{CondStatus, remove_condition, set_condition};
use crate::api::SourceStatus;
use crate::api::conditions::{reasons, types};

pub fn set_sources_condition(
    conds: &mut Vec<Condition>,
    sources: &[SourceStatus],
    generation: Option<i64>,
    now: &Time,
) {
    if sources.is_empty() {
        remove_condition(conds, types::SOURCES_AVAILABLE);
        return;
    }
    let down: Vec<String> = sources
        .iter()
        .filter(|s| !s.watching)
        .map(|s| format!("source `{}` ({}): {}", s.id, s.kind, s.message))
        .collect();
    let (status, reason, msg) = if down.is_empty() {
        let served: i64 = sources.iter().map(|s| s.claims).sum();
        let unserved: i64 = sources.iter().map(|s| s.unserved).sum();
        let tail = if unserved > 0 {
            format!(
                "; {unserved} matching object(s) without a binding or claim (see requestSources[].unserved)"
            )
        } else {
            String::new()
        };
        (
            CondStatus::True,
            reasons::SOURCES_WATCHED,
            format!(
                "{} request source(s) watched, {served} claim(s) created by them{tail}",
                sources.len()
            ),
        )
    } else {
        (
            CondStatus::False,
            reasons::SOURCE_UNAVAILABLE,
            down.join("; "),
        )
    };
    set_condition(
        conds,
        types::SOURCES_AVAILABLE,
        status,
        reason,
        msg,
        generation,
        now,
    );
}
