//! Which claims to look at again when the inventory moves, coalescing bursts of watch events:
//! claims waiting for a pool whose bindings or clusters changed, claims whose recorded binding
//! changed and which need a visit (`selection::needs_visit`: the verdict, Bound or lost, no
//! longer matches their phase, or they claimed a stray binding), the claimant of a stray binding
//! (`selection::stray_claimant`), and every unbound
//! claim when the config in force changes. Nothing else: a refill of one pool must not make
//! every waiting claim of every pool decide (and write its status) again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::reflector::ObjectRef;
use tokio_util::sync::CancellationToken;

use super::{ClaimRef, Context, coalesced_ticks};
use crate::k8s::active::{ConfigState, Hold};
use crate::ledger::Ledger;
use crate::pools::ClaimView;
use crate::selection::{needs_visit, stray_claimant};

/// Which config generation the last pass saw, and its hold of binding writes (which an invalid
/// newer generation can set without changing the generation in force).
type Seen = Option<(String, i64, Hold)>;

pub(super) fn claims_to_revisit(
    ctx: Arc<Context>,
    stop: CancellationToken,
) -> impl futures::Stream<Item = ClaimRef> + Send {
    let (mut seen, mut was_judging): (Seen, bool) = (None, false);
    coalesced_ticks(ctx.caches.feed.clone(), Duration::from_millis(250), stop).flat_map(move |()| {
        let config = match ctx.resolver.resolve() {
            ConfigState::Active { active, hold, .. } => {
                Some((active.uid.clone(), active.generation, hold))
            }
            ConfigState::Invalid { generation, .. } => {
                Some((String::new(), generation, Hold::default()))
            }
            ConfigState::Missing => None,
        };
        // Once the index can judge, every claim is looked at as after a config change: the
        // settled claims that need a visit are judged only from then on (`visits`).
        let judging = super::can_judge(&ctx);
        let moved = config != seen || (judging && !was_judging);
        seen = config;
        was_judging = judging;
        let mut ledger = ctx.ledger();
        let refs = due(&mut ledger, moved, Instant::now());
        futures::stream::iter(refs)
    })
}

/// The claims to look at again after the changes the index collected since the last pass.
fn due(ledger: &mut Ledger, config_moved: bool, now: Instant) -> Vec<ClaimRef> {
    let changes = ledger.inventory.take_changes();
    let (inv, inflight) = (&ledger.inventory, &ledger.inflight);
    let visit = |c: &ClaimView| needs_visit(c, inv, inflight, now);
    let mut uids: BTreeSet<&str> = BTreeSet::new();
    if config_moved || changes.all {
        // A denial is final: nothing in the inventory or the config can change it.
        for c in inv.claims().filter(|c| !c.denied) {
            if c.bound_binding.is_none() || c.deleting || visit(c) {
                uids.insert(&c.uid);
            }
        }
    } else {
        for pool in &changes.pools {
            uids.extend(inv.waiting_in(pool).iter().map(String::as_str));
        }
        for b in &changes.bindings {
            // A stray is given back by its claimant's reconcile (`selection::stray_claimant`).
            uids.extend(stray_claimant(inv, inflight, b, now).map(|c| c.uid.as_str()));
            for uid in inv.recorded_on(b) {
                if inv.claim(uid).is_some_and(visit) {
                    uids.insert(uid);
                }
            }
        }
    }
    uids.into_iter()
        .filter_map(|uid| inv.claim(uid))
        .map(claim_ref)
        .collect()
}

/// A claim's ref for the controller's queue, with its uid: the claim store may not hold a
/// settled claim, and the stage that fetches it (`visits`) finds it in the index by uid.
pub(super) fn claim_ref(c: &ClaimView) -> ClaimRef {
    let mut r = ObjectRef::new(&c.name).within(&c.namespace);
    r.extra.uid = Some(c.uid.clone());
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::PoolKey;
    use crate::pools::{BindingView, ClaimView};

    fn pool(t: &str) -> PoolKey {
        PoolKey {
            hyperscaler_type: t.into(),
            eu_access: false,
            shared: false,
        }
    }

    fn waiting(name: &str, t: &str) -> ClaimView {
        ClaimView {
            namespace: "kcp".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            global_account: "ga".into(),
            waiting_in: Some(pool(t)),
            resource_version: Some("1".into()),
            ..Default::default()
        }
    }

    fn binding(name: &str, t: &str, rv: &str) -> BindingView {
        BindingView {
            name: name.into(),
            resource_version: Some(rv.into()),
            labels: [("hyperscalerType".to_string(), t.to_string())].into(),
            ..Default::default()
        }
    }

    fn names(refs: Vec<ClaimRef>) -> Vec<String> {
        refs.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn a_change_of_one_pool_brings_back_only_the_claims_waiting_for_it() {
        // Every cache change re-enqueued every claim that was not Bound.
        let mut l = Ledger::default();
        let now = Instant::now();
        l.apply_claim(waiting("a", "aws"));
        l.apply_claim(waiting("g", "gcp"));
        l.apply_claim(ClaimView {
            waiting_in: None,
            ..waiting("new", "aws")
        });
        // The first pass after the config appeared looks at every claim without a record.
        assert_eq!(names(due(&mut l, true, now)), ["a", "g", "new"]);
        l.apply_binding(binding("g1", "gcp", "2"));
        assert_eq!(names(due(&mut l, false, now)), ["g"]);
        assert!(due(&mut l, false, now).is_empty(), "nothing moved since");
        l.apply_binding(binding("a1", "aws", "3"));
        l.apply_binding(binding("a1", "aws", "2"));
        assert_eq!(names(due(&mut l, false, now)), ["a"]);
    }

    #[test]
    fn a_bound_claim_comes_back_only_when_its_binding_no_longer_agrees_with_its_phase() {
        let mut l = Ledger::default();
        let now = Instant::now();
        let mut owned = binding("b", "aws", "2");
        owned.labels.insert("tenantName".into(), "ga".into());
        l.apply_binding(owned.clone());
        let bound = ClaimView {
            bound_binding: Some("b".into()),
            waiting_in: None,
            ..waiting("c", "aws")
        };
        l.apply_claim(bound);
        due(&mut l, true, now);
        owned.resource_version = Some("3".into());
        owned.labels.insert("example.com/other".into(), "x".into());
        l.apply_binding(owned.clone());
        assert!(due(&mut l, false, now).is_empty(), "still the tenant's");
        owned.resource_version = Some("4".into());
        owned.labels.remove("tenantName");
        l.apply_binding(owned);
        assert_eq!(names(due(&mut l, false, now)), ["c"], "lost: report it");
    }
}
