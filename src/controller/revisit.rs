//! Which claims to look at again when the inventory moves, coalescing bursts of watch events:
//! claims waiting for a pool whose bindings or clusters changed, claims whose recorded binding
//! changed and whose verdict (Bound or lost) no longer matches their phase, and every unbound
//! claim when the config in force changes. Nothing else: a refill of one pool must not make
//! every waiting claim of every pool decide (and write its status) again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::reflector::ObjectRef;
use tokio_util::sync::CancellationToken;

use super::active::ConfigState;
use super::{Context, coalesced_ticks};
use crate::api::AccountClaim;
use crate::ledger::Ledger;
use crate::pools::ClaimView;
use crate::selection::{Choice, check_bound};

/// Which config generation the last pass saw.
type Seen = Option<(String, i64)>;

pub(super) fn claims_to_revisit(
    ctx: Arc<Context>,
    stop: CancellationToken,
) -> impl futures::Stream<Item = ObjectRef<AccountClaim>> + Send {
    let mut seen: Seen = None;
    coalesced_ticks(ctx.caches.feed.clone(), Duration::from_millis(250), stop).flat_map(move |()| {
        let config = match ctx.resolver.resolve() {
            ConfigState::Active { active, .. } => Some((active.uid.clone(), active.generation)),
            ConfigState::Invalid { generation, .. } => Some((String::new(), generation)),
            ConfigState::Missing => None,
        };
        let moved = config != seen;
        seen = config;
        let mut ledger = ctx.ledger();
        let refs = due(&mut ledger, moved, Instant::now());
        futures::stream::iter(refs)
    })
}

/// The claims to look at again after the changes the index collected since the last pass.
fn due(ledger: &mut Ledger, config_moved: bool, now: Instant) -> Vec<ObjectRef<AccountClaim>> {
    let changes = ledger.inventory.take_changes();
    let (inv, inflight) = (&ledger.inventory, &ledger.inflight);
    let disagrees = |c: &ClaimView| {
        c.bound_binding.is_some()
            && inv.holds_namespace(c.binding_namespace.as_deref())
            && matches!(
                check_bound(inv, inflight, c, now),
                Some(Choice::Lost { .. })
            ) != c.lost
    };
    let mut uids: BTreeSet<&str> = BTreeSet::new();
    if config_moved || changes.all {
        // A denial is final: nothing in the inventory or the config can change it.
        for c in inv.claims().filter(|c| !c.denied) {
            if c.bound_binding.is_none() || c.deleting || disagrees(c) {
                uids.insert(&c.uid);
            }
        }
    } else {
        for pool in &changes.pools {
            uids.extend(inv.waiting_in(pool).iter().map(String::as_str));
        }
        for b in &changes.bindings {
            for uid in inv.recorded_on(b) {
                if inv.claim(uid).is_some_and(|c| !c.deleting && disagrees(c)) {
                    uids.insert(uid);
                }
            }
        }
    }
    uids.into_iter()
        .filter_map(|uid| inv.claim(uid))
        .map(|c| ObjectRef::new(&c.name).within(&c.namespace))
        .collect()
}
