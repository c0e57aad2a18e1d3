//! What to do with a claim's binding when the AccountClaim is deleted (DESIGN §4, release).
//!
//! Order of the checks, and why:
//! 1. Nothing to release: the claim was never bound, or the binding is gone.
//! 2. Never written: shared bindings, `internal=true` bindings, and every binding in `Retain` mode.
//! 3. Already released: the binding carries the dirty label (any value, as `!dirty` reads it) or a
//!    release of it is in flight.
//! 4. Not the tenant's: the binding no longer carries the claim's global account (and no claim of
//!    it for this tenant is in flight). Releasing it would take another tenant's account away.
//! 5. The claim's own Shoot still exists: wait for it. This comes before the "other clusters"
//!    check so that two claims deleted together, each seeing the other's live Shoot, do not both
//!    step aside and leave the binding claimed by nobody; the last one to lose its Shoot releases.
//! 6. Any other cluster uses the binding — a Shoot, a non-deleting bound claim (even one for a
//!    cluster of the same name, about to be created again), or a cluster assigned in flight: keep.
//! 7. Otherwise mark it dirty, conditioned on the cached resourceVersion.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::api::ReleaseMode;
use crate::pools::{ClaimView, Inventory};
use crate::selection::{InFlight, WriteState};

/// Why a binding stays as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeepReason {
    NotBound,
    BindingGone,
    Shared,
    Internal,
    Retain,
    AlreadyDirty,
    /// The binding's tenant label names someone else, or nobody.
    NotTenants {
        tenant: Option<String>,
    },
    /// Other clusters still use it (count of distinct users).
    InUse {
        clusters: usize,
    },
}

/// The release decision for one deleted claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release {
    /// Leave the binding alone; the claim's finalizer can go.
    Keep(KeepReason),
    /// The claim's Shoot still exists; keep the finalizer and look again later.
    WaitForShoot { shoot: String },
    /// Add the dirty label (`tenantName` stays for the cleanup job), conditioned on this version.
    MarkDirty {
        binding: String,
        expected_resource_version: Option<String>,
    },
}

/// Decides the release of `claim`'s binding. Pure; the caller records a `MarkDirty` with
/// `InFlight::release_started` before writing it.
pub fn decide_release(
    claim: &ClaimView,
    inv: &Inventory,
    inflight: &InFlight,
    mode: ReleaseMode,
    now: Instant,
) -> Release {
    let keep = Release::Keep;
    let Some(name) = claim.bound_binding.as_deref() else {
        return keep(KeepReason::NotBound);
    };
    let Some(entry) = inv.binding(name) else {
        return keep(KeepReason::BindingGone);
    };
    let keys = inv.keys();
    let labels = &entry.view.labels;
    if labels.get(&keys.shared).map(String::as_str) == Some("true") {
        return keep(KeepReason::Shared);
    }
    if entry.internal {
        return keep(KeepReason::Internal);
    }
    if mode == ReleaseMode::Retain {
        return keep(KeepReason::Retain);
    }
    if labels.contains_key(&keys.dirty) || inflight.is_releasing(name, now) {
        return keep(KeepReason::AlreadyDirty);
    }
    let ga = &claim.global_account;
    let tenant = labels.get(&keys.tenant_name);
    let claimed_in_flight = inflight
        .claim_of(name, now)
        .is_some_and(|p| p.tenant == *ga && p.state == WriteState::Written);
    if tenant != Some(ga) && !claimed_in_flight {
        return keep(KeepReason::NotTenants {
            tenant: tenant.cloned(),
        });
    }
    if let Some(shoot) = &claim.shoot_name
        && inv.shoot_exists(shoot)
    {
        return Release::WaitForShoot {
            shoot: shoot.clone(),
        };
    }
    let own = claim.cluster_name();
    let mut users: BTreeSet<&str> = inv
        .clusters_on(name)
        .iter()
        .map(String::as_str)
        .filter(|c| *c != own)
        .collect();
    // A claim for a cluster of the claim's own name (re-created, not started yet) is another user.
    for (uid, cluster) in inv.claims_on(name) {
        if *uid != claim.uid {
            users.insert(cluster);
        }
    }
    let assigned = inflight.assigned(now);
    for (uid, cluster) in assigned.get(name).into_iter().flatten() {
        if *uid != claim.uid {
            users.insert(cluster);
        }
    }
    if !users.is_empty() {
        return keep(KeepReason::InUse {
            clusters: users.len(),
        });
    }
    Release::MarkDirty {
        binding: name.to_string(),
        expected_resource_version: entry.view.resource_version.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::pools::tests::{binding, claim, inventory, pool, shoot};
    use crate::selection::Choice;

    fn deleting(name: &str, ga: &str, shoot: Option<&str>, bound: &str) -> ClaimView {
        ClaimView {
            deleting: true,
            ..claim(name, ga, shoot, Some(bound))
        }
    }

    fn owned(name: &str, ga: &str, extra: &[(&str, &str)]) -> crate::pools::BindingView {
        let mut labels = vec![("hyperscalerType", "aws"), ("tenantName", ga)];
        labels.extend_from_slice(extra);
        binding(name, &labels)
    }

    fn decide(c: &ClaimView, inv: &Inventory, mode: ReleaseMode) -> Release {
        decide_release(c, inv, &InFlight::default(), mode, Instant::now())
    }

    fn dirty(b: &str) -> Release {
        Release::MarkDirty {
            binding: b.into(),
            expected_resource_version: Some(format!("rv-{b}")),
        }
    }

    #[test]
    fn the_last_cluster_leaving_marks_the_binding_dirty() {
        let c = deleting("c", "ga", Some("s"), "b");
        let inv = inventory(vec![owned("b", "ga", &[])], vec![c.clone()], vec![]);
        assert_eq!(decide(&c, &inv, ReleaseMode::MarkDirty), dirty("b"));
        assert_eq!(
            decide(&c, &inv, ReleaseMode::Retain),
            Release::Keep(KeepReason::Retain)
        );
    }

    #[test]
    fn shared_internal_dirty_unbound_and_missing_bindings_are_never_touched() {
        let bs = vec![
            binding("sh", &[("hyperscalerType", "aws"), ("shared", "true")]),
            owned("int", "ga", &[("internal", "true")]),
            owned("d", "ga", &[("dirty", "true")]),
        ];
        let inv = inventory(bs, vec![], vec![]);
        let cases = [
            ("sh", KeepReason::Shared),
            ("int", KeepReason::Internal),
            ("d", KeepReason::AlreadyDirty),
            ("gone", KeepReason::BindingGone),
        ];
        for (b, why) in cases {
            assert_eq!(
                decide(&deleting("c", "ga", None, b), &inv, ReleaseMode::MarkDirty),
                Release::Keep(why)
            );
        }
        let unbound = ClaimView {
            deleting: true,
            ..claim("c", "ga", None, None)
        };
        assert_eq!(
            decide(&unbound, &inv, ReleaseMode::MarkDirty),
            Release::Keep(KeepReason::NotBound)
        );
    }

    #[test]
    fn another_tenants_binding_is_never_released() {
        let inv = inventory(
            vec![
                owned("b", "gb", &[]),
                binding("bare", &[("hyperscalerType", "aws")]),
            ],
            vec![],
            vec![],
        );
        let got = decide(
            &deleting("c", "ga", None, "b"),
            &inv,
            ReleaseMode::MarkDirty,
        );
        assert_eq!(
            got,
            Release::Keep(KeepReason::NotTenants {
                tenant: Some("gb".into())
            })
        );
        let got = decide(
            &deleting("c", "ga", None, "bare"),
            &inv,
            ReleaseMode::MarkDirty,
        );
        assert_eq!(got, Release::Keep(KeepReason::NotTenants { tenant: None }));
    }

    #[test]
    fn the_claim_waits_for_its_own_shoot_before_looking_at_others() {
        let c = deleting("c", "ga", Some("s"), "b");
        let inv = inventory(
            vec![owned("b", "ga", &[])],
            vec![c.clone()],
            vec![shoot("s", Some("b")), shoot("t", Some("b"))],
        );
        assert_eq!(
            decide(&c, &inv, ReleaseMode::MarkDirty),
            Release::WaitForShoot { shoot: "s".into() }
        );
    }

    #[test]
    fn other_clusters_keep_the_binding() {
        let c = deleting("c", "ga", Some("s"), "b");
        let other_shoot = inventory(
            vec![owned("b", "ga", &[])],
            vec![c.clone()],
            vec![shoot("t", Some("b"))],
        );
        assert_eq!(
            decide(&c, &other_shoot, ReleaseMode::MarkDirty),
            Release::Keep(KeepReason::InUse { clusters: 1 })
        );
        let pending = claim("p", "ga", None, Some("b"));
        let other_claim = inventory(
            vec![owned("b", "ga", &[])],
            vec![c.clone(), pending],
            vec![],
        );
        assert_eq!(
            decide(&c, &other_claim, ReleaseMode::MarkDirty),
            Release::Keep(KeepReason::InUse { clusters: 1 })
        );
        // A new claim for a cluster of the same name, not yet created, still holds the binding.
        let again = claim("again", "ga", Some("s"), Some("b"));
        let same_name = inventory(vec![owned("b", "ga", &[])], vec![c.clone(), again], vec![]);
        assert!(matches!(
            decide(&c, &same_name, ReleaseMode::MarkDirty),
            Release::Keep(KeepReason::InUse { .. })
        ));
    }

    #[test]
    fn two_claims_deleted_together_still_release_the_binding() {
        let a = deleting("a", "ga", Some("sa"), "b");
        let b = deleting("b", "ga", Some("sb"), "b");
        let inv = inventory(
            vec![owned("b", "ga", &[])],
            vec![a.clone(), b.clone()],
            vec![],
        );
        assert_eq!(decide(&a, &inv, ReleaseMode::MarkDirty), dirty("b"));
        assert_eq!(decide(&b, &inv, ReleaseMode::MarkDirty), dirty("b"));
    }

    #[test]
    fn in_flight_writes_count() {
        let c = deleting("c", "ga", None, "b");
        let inv = inventory(vec![owned("b", "ga", &[])], vec![c.clone()], vec![]);
        let now = Instant::now();
        let mut fl = InFlight::new(Duration::from_secs(60));
        // A cluster assigned a moment ago keeps the binding.
        let newcomer = claim("n", "ga", Some("n"), None);
        fl.record(
            &newcomer,
            &pool("aws", false, false),
            &Choice::Use {
                binding: "b".into(),
                decision: crate::selection::UseReason::Reused,
            },
            now,
        );
        let got = decide_release(&c, &inv, &fl, ReleaseMode::MarkDirty, now);
        assert_eq!(got, Release::Keep(KeepReason::InUse { clusters: 1 }));
        fl.assignment_failed("uid-n");
        assert_eq!(
            decide_release(&c, &inv, &fl, ReleaseMode::MarkDirty, now),
            dirty("b")
        );
        // A release already in flight is not repeated.
        fl.release_started("b", Some("rv-b".into()), now);
        let got = decide_release(&c, &inv, &fl, ReleaseMode::MarkDirty, now);
        assert_eq!(got, Release::Keep(KeepReason::AlreadyDirty));
        // A claim written for this tenant but not yet cached counts as the tenant's.
        let fresh = inventory(
            vec![binding("f", &[("hyperscalerType", "aws")])],
            vec![],
            vec![],
        );
        let mut fl = InFlight::default();
        let first = claim("first", "ga", None, None);
        fl.record(
            &first,
            &pool("aws", false, false),
            &Choice::Claim {
                binding: "f".into(),
                expected_resource_version: Some("rv-f".into()),
            },
            now,
        );
        fl.assignment_failed("uid-first");
        let gone = deleting("first", "ga", None, "f");
        let before = decide_release(&gone, &fresh, &fl, ReleaseMode::MarkDirty, now);
        assert_eq!(
            before,
            Release::Keep(KeepReason::NotTenants { tenant: None })
        );
        fl.claim_written("f", now);
        assert_eq!(
            decide_release(&gone, &fresh, &fl, ReleaseMode::MarkDirty, now),
            dirty("f")
        );
    }
}
