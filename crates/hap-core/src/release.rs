//! What to do with a claim's binding when the AccountClaim is deleted (docs/design.md §4, release).
//!
//! Order of the checks, and why:
//! 1. Which binding: the one the claim's status records; for a claim deleted before its status
//!    was written, the binding its own claim write won (or its status write named, once that is
//!    known to have committed). While such a write has no outcome the index shows, wait: it may
//!    own the binding, and the index's view of the binding predates it. Nothing to release when
//!    there is none, or when the binding is gone.
//! 2. Not here: the binding lives in another namespace than the one in force (the config's
//!    `bindingNamespace` changed since). The index has no view of it, and a binding of the same
//!    name here is not the claim's.
//! 3. Never written: shared bindings, `internal=true` bindings, and every binding in `Retain` mode.
//! 4. Already released: the binding carries the dirty label (any value, as `!dirty` reads it) or a
//!    release of it was written. A release whose outcome is unknown is sent again, conditioned on
//!    the same version, which settles it (step 9 picks clean or dirty again, on the same facts).
//! 5. Not the tenant's: the binding no longer carries the claim's global account (and no claim of
//!    it for this tenant is in flight). Releasing it would take another tenant's account away.
//! 6. The claim's own Shoot still exists and uses this binding: wait for it. This comes before the
//!    "other clusters" check so that two claims deleted together, each seeing the other's live
//!    Shoot, do not both step aside and leave the binding claimed by nobody; the last one to lose
//!    its Shoot releases. A Shoot of that name on another binding is another cluster's business.
//!    The same when the claim's own Shoot is on another binding of the same credential
//!    (Gardener's forced migration moves Shoots off a SecretBinding onto a CredentialsBinding,
//!    perhaps a new unlabelled `force-migrated-<name>` one): wait for it (`WaitForSibling`).
//! 7. Any other cluster uses the binding's account — a Shoot on it or on another binding of its
//!    credential, or a non-deleting claim bound to one of them (even one for a cluster of the
//!    same name, about to be created again): keep. The account is one; marking it dirty, or
//!    freeing it, would hand it to the cleanup job or a new tenant under a live cluster.
//!    Else, while this replica assigns another claim to it, or the binding's records
//!    (`CLAIMED_BY`, `FILLING`) name another claim of the tenant whose status does not show yet
//!    (`selection::claimant::recorded_claims`), wait: its use was recorded with a
//!    compare-and-swap and its status write, perhaps a previous leader's, may still land Bound
//!    there. Every recorded claim counts, whatever this replica plans for it (it may be assigning
//!    it elsewhere): a held write is not bound by that plan. Once it shows, that claim keeps the
//!    binding (and its own release decides); once it is deleted or denied, or the assignment
//!    failed, no status of it can land (its version moved) and the release goes on. A wait, not
//!    a keep: a use that never lands (its claim deleted meanwhile, whose own release then finds
//!    no binding) must not leave the binding claimed by nobody.
//! 8. Never released under a live object: for a claim a request source made, the object it serves
//!    (a Runtime, Cluster or Shoot) is read live first; while it exists (again), wait. A re-created
//!    object may have been admitted onto this very binding, and for a Runtime or Cluster its Shoot
//!    does not exist yet, so step 6 cannot see it. The read is the caller's (`Origin`): the
//!    decision asks for it (`ReadSource`) and is taken again with its answer.
//! 9. Dirty only what a cluster may have touched. Clean needs all of: a source claim whose object
//!    never existed (it never carried the object's UID: refused by a later admission step, or a
//!    request the API server gave up on); no Shoot in the index names the binding; and the
//!    binding's `accountpool.io/claimed-by` label (`labels::CLAIMED_BY`) names this claim's uid.
//!    That label is written with the tenant label, in the same compare-and-swap, by the claim
//!    write of the claim that claimed the binding, and removed (compare-and-swap) before any
//!    other claim is recorded Bound to it (`selection::claimant`): a binding two claims shared
//!    may have run the other one's cluster, whichever of them goes last. A clean release removes
//!    the tenant and claimed-by labels in one compare-and-swap on the indexed resourceVersion,
//!    and the account goes back to the pool without the cleanup job. Everything else — every
//!    AccountClaim a user created (nobody can know what the tenant did with the account), every
//!    binding without the record — gets the dirty label, conditioned on the same version.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::api::ReleaseMode;
use crate::labels::{CLAIMED_BY, ResolvedLabelKeys};
use crate::pools::{BindingEntry, ClaimView, Inventory};
use crate::selection::claimant::recorded_claims;
use crate::selection::{InFlight, WriteState};

/// Why a binding stays as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeepReason {
    NotBound,
    BindingGone,
    /// The claim's binding lives in a namespace the operator no longer serves.
    OtherNamespace {
        namespace: String,
    },
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
    /// The claim's Shoot (`clusters`) still exists on another binding of the same credential,
    /// `sibling`; keep the finalizer and look again later.
    WaitForSibling {
        binding: String,
        sibling: String,
        clusters: Vec<String>,
    },
    /// A write of this claim on `binding` has no outcome the index shows yet; look again later.
    WaitForWrite { binding: String },
    /// Nothing else uses `binding`, but this replica assigns claims to it, or its records name
    /// claims of the tenant, whose status does not show yet (a use whose status write, perhaps
    /// a previous leader's, may still land Bound there): look again once they show it or are
    /// gone.
    /// `claims`: their names (the uid of one the index does not know), for the people who
    /// wait.
    WaitForUse {
        binding: String,
        claims: Vec<String>,
    },
    /// This claim's own claim write of `binding` has an unknown outcome: send it again (the
    /// same compare-and-swap) to learn it — it either succeeds now or proves the binding moved.
    Resolve {
        binding: String,
        expected_resource_version: Option<String>,
    },
    /// Add the dirty label (`tenantName` stays for the cleanup job), conditioned on this version.
    MarkDirty {
        binding: String,
        expected_resource_version: Option<String>,
    },
    /// Remove the tenant and claimed-by labels, conditioned on this version: no cluster ever
    /// used the account.
    ReleaseClean {
        binding: String,
        expected_resource_version: Option<String>,
    },
    /// `binding` is to be released, but the object the source claim serves was not read: read
    /// it live (`Presence`) and decide again.
    ReadSource { binding: String },
    /// The object the source claim serves exists (again); look again later.
    WaitForSource { binding: String },
}

/// Who asked for the claim, as far as its release must know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// An AccountClaim a user created: what the tenant did with the account is unknown.
    User,
    /// The claim a request source made for an object (`claim_state::SourceRef`).
    Source {
        /// The claim carries the object's UID, so the object existed and a cluster may have
        /// used the account.
        existed: bool,
        /// What a live read of the object found, if the caller made one.
        now: Presence,
    },
}

/// A live read of the object a source claim serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    Unread,
    Exists,
    Gone,
}

/// Decides the release of `claim`'s binding. Pure; the caller records a `MarkDirty` or
/// `ReleaseClean` with `InFlight::release_started` under the same lock, before writing it.
pub fn decide_release(
    claim: &ClaimView,
    inv: &Inventory,
    inflight: &InFlight,
    mode: ReleaseMode,
    origin: Origin,
    now: Instant,
) -> Release {
    let keep = Release::Keep;
    // `unseen`: the binding is the claim's only through its own claim write, and no status of
    // the claim ever named it.
    let (name, unseen) = match claim.bound_binding.as_deref() {
        Some(name) => (name, false),
        None => match written_for(claim, inv, inflight, now) {
            Ok(Some(written)) => written,
            Ok(None) => return keep(KeepReason::NotBound),
            Err(wait) => return wait,
        },
    };
    if !inv.holds_namespace(claim.binding_namespace.as_deref()) {
        let namespace = claim.binding_namespace.clone().unwrap_or_default();
        return keep(KeepReason::OtherNamespace { namespace });
    }
    let Some(entry) = inv.binding(name) else {
        return keep(KeepReason::BindingGone);
    };
    let keys = inv.keys();
    let labels = &entry.view.labels;
    let alone = labels.get(CLAIMED_BY) == Some(&claim.uid);
    // Unseen and alone: no cluster of the claim can have been told the binding, and no other
    // claim used it since its claim write, so the account holds nothing of the tenant.
    let unused = unseen && alone;
    if let Some(reason) = kept_by_kind(entry, keys, mode) {
        return keep(reason);
    }
    match inflight.release_of(name, now) {
        Some(p) if p.state == WriteState::Written => return keep(KeepReason::AlreadyDirty),
        // Another claim's release of it is being sent: its answer decides.
        Some(p) if p.state == WriteState::Writing => {
            return Release::WaitForWrite {
                binding: name.to_string(),
            };
        }
        // An earlier release with no known outcome: the same compare-and-swap again settles it.
        Some(p) => {
            let base = p.base_resource_version.clone();
            return release(name, inv, origin, (alone, unused), base);
        }
        None => {}
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
        && inv
            .shoot(shoot)
            .is_some_and(|s| s.binding.as_deref() == Some(name))
    {
        return Release::WaitForShoot {
            shoot: shoot.clone(),
        };
    }
    if let Some(wait) = shoot_on_sibling(claim, inv, name) {
        return wait;
    }
    let clusters = other_users(claim, inv, name);
    if clusters > 0 {
        return keep(KeepReason::InUse { clusters });
    }
    let assigned = inflight.assigned(now);
    let waiting: BTreeSet<&str> = recorded_claims(inv, name)
        .map(|c| c.uid.as_str())
        .chain(
            assigned
                .get(name)
                .into_iter()
                .flat_map(|m| m.keys().copied()),
        )
        .filter(|uid| *uid != claim.uid)
        .collect();
    if !waiting.is_empty() {
        let named = |uid: &str| {
            inv.claim(uid)
                .map_or_else(|| uid.to_string(), |c| c.name.clone())
        };
        return Release::WaitForUse {
            binding: name.to_string(),
            claims: waiting.into_iter().map(named).collect(),
        };
    }
    let base = entry.view.resource_version.clone();
    release(name, inv, origin, (alone, unused), base)
}

/// What keeps a binding whatever its users: shared, internal, `Retain`, or already dirty.
fn kept_by_kind(
    entry: &BindingEntry,
    keys: &ResolvedLabelKeys,
    mode: ReleaseMode,
) -> Option<KeepReason> {
    let labels = &entry.view.labels;
    if labels.get(&keys.shared).map(String::as_str) == Some("true") {
        return Some(KeepReason::Shared);
    }
    if entry.internal {
        return Some(KeepReason::Internal);
    }
    if mode == ReleaseMode::Retain {
        return Some(KeepReason::Retain);
    }
    if labels.contains_key(&keys.dirty) {
        return Some(KeepReason::AlreadyDirty);
    }
    None
}

/// The clusters other than the releasing claim's own that use `binding` as the index shows it:
/// Shoots and bound claims, counted once by name.
fn other_users(claim: &ClaimView, inv: &Inventory, binding: &str) -> usize {
    let own = claim.cluster_name();
    let mut users: BTreeSet<String> = inv
        .clusters_on(binding)
        .iter()
        .filter(|c| **c != own)
        .map(|c| c.to_string())
        .collect();
    // A claim for a cluster of the claim's own name (re-created, not started yet) is another
    // user; so is a claim bound to another binding of the same credential.
    for b in std::iter::once(binding).chain(inv.siblings(binding)) {
        for (uid, cluster) in inv.claims_on(b) {
            if *uid != claim.uid {
                users.insert(cluster.to_string());
            }
        }
    }
    users.len()
}

/// The claim's own Shoot on another binding of `binding`'s credential (Gardener moved it), as
/// the wait it causes, like `WaitForShoot`. Other clusters on the account's other bindings only
/// keep the binding (`other_users`): waiting on them would hold every claim of a tenant with
/// several clusters until its last one is gone.
fn shoot_on_sibling(claim: &ClaimView, inv: &Inventory, binding: &str) -> Option<Release> {
    let shoot = claim.shoot_name.as_deref()?;
    let on = inv.shoot(shoot)?.binding.as_deref()?;
    inv.siblings(binding)
        .any(|s| s == on)
        .then(|| Release::WaitForSibling {
            binding: binding.to_string(),
            sibling: on.to_string(),
            clusters: vec![shoot.to_string()],
        })
}

/// Steps 8 and 9: how `binding`, which nothing keeps any more, is released. `alone`: its
/// claimed-by label names the releasing claim.
fn release(
    binding: &str,
    inv: &Inventory,
    origin: Origin,
    (alone, unused): (bool, bool),
    base: Option<String>,
) -> Release {
    let binding = binding.to_string();
    let dirty = |binding| Release::MarkDirty {
        binding,
        expected_resource_version: base.clone(),
    };
    // A claim write no status ever named and nothing used: marking it dirty would have the
    // cleanup job wipe an account no cluster of the tenant ran in, perhaps the one a claim of
    // another tenant on another binding of it is about to run on.
    if unused && !shoot_on(inv, &binding) {
        return Release::ReleaseClean {
            binding,
            expected_resource_version: base.clone(),
        };
    }
    let Origin::Source { existed, now } = origin else {
        return dirty(binding);
    };
    match now {
        Presence::Unread => Release::ReadSource { binding },
        Presence::Exists => Release::WaitForSource { binding },
        Presence::Gone if existed || !alone || shoot_on(inv, &binding) => dirty(binding),
        Presence::Gone => Release::ReleaseClean {
            binding,
            expected_resource_version: base.clone(),
        },
    }
}

/// Whether a Shoot in the index names `binding` or another binding of its credential. On the
/// first pass steps 6 and 7 have ruled that out already; a repeated release (step 4) skips them.
fn shoot_on(inv: &Inventory, binding: &str) -> bool {
    let names =
        |b: Option<&str>| b.is_some_and(|b| b == binding || inv.siblings(binding).any(|s| s == b));
    inv.clusters_on(binding)
        .iter()
        .any(|c| inv.shoot(c).is_some_and(|s| names(s.binding.as_deref())))
}

/// For a claim without a recorded binding: the binding its own claim write won (`Ok(Some)`,
/// with `true` while no status write of the claim named it), none (`Ok(None)`), or what to do
/// while a write of it has no outcome the index shows yet — the index's view of that binding
/// predates the write, so no release can be based on it.
fn written_for<'a>(
    claim: &'a ClaimView,
    inv: &Inventory,
    inflight: &'a InFlight,
    now: Instant,
) -> Result<Option<(&'a str, bool)>, Release> {
    if let Some((binding, p)) = inflight.claim_made_by(&claim.uid, now) {
        return Err(match p.state {
            WriteState::Written => Release::WaitForWrite {
                binding: binding.to_string(),
            },
            // Nobody else will settle it: the claim is going, and its reconcile is this one.
            WriteState::Writing | WriteState::Unknown => Release::Resolve {
                binding: binding.to_string(),
                expected_resource_version: p.base_resource_version.clone(),
            },
        });
    }
    let assignment = inflight.assignment_of(&claim.uid, now);
    if let Some(binding) = inflight.won_by(&claim.uid, now) {
        // A status write naming it, in whatever state, may have landed and been read.
        let named = assignment.is_some_and(|a| a.binding == binding);
        return Ok(Some((binding, !named)));
    }
    match assignment {
        Some(a) if a.state == WriteState::Written => Ok(Some((a.binding.as_str(), false))),
        Some(a) if a.state == WriteState::Unknown => Err(Release::WaitForWrite {
            binding: a.binding.clone(),
        }),
        // A claim write its status records (perhaps a previous leader's) that the index shows
        // landed: no status named its binding, or the claim would be recorded there.
        _ => Ok(claim
            .claim_write
            .as_deref()
            .filter(|w| inv.holds_write(w))
            .filter(|w| claimed_by(inv, &w.binding) == Some(claim.uid.as_str()))
            .map(|w| (w.binding.as_str(), true))),
    }
}

/// The claim the binding's claimed-by record names, as the index has it.
fn claimed_by<'a>(inv: &'a Inventory, binding: &str) -> Option<&'a str> {
    let entry = inv.binding(binding)?;
    entry.view.labels.get(CLAIMED_BY).map(String::as_str)
}

/// What a claim write recorded in a claim's status (`status.claimWrite`) can still do, judged
/// on the binding as the API server has it now (`live`: its resourceVersion and claimed-by
/// label, `None` when it is gone). A read, not the index: a paused leader's write may land at
/// any time, and the index may predate the write's base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimWriteNow {
    /// It landed: the binding is claimed for this claim.
    Landed,
    /// The binding still has the version the write was conditioned on, so it may land yet:
    /// moving that version first (the fence) makes the API server refuse it whenever it comes.
    MayLand,
    /// The binding moved on, or is gone: the compare-and-swap can never succeed.
    Void,
}

/// Judges `write` of claim `uid` on the index alone, where it can: `Landed` when the index
/// shows the binding claimed for the claim, `Void` when the index saw a version later than the
/// write's base (a compare-and-swap lands only at its base); `None` when only a read can tell
/// (and for a write to a binding the index does not hold: another namespace or kind).
pub fn claim_write_indexed(
    inv: &Inventory,
    write: &crate::api::PendingClaimWrite,
    uid: &str,
) -> Option<ClaimWriteNow> {
    if !inv.holds_write(write) {
        return None;
    }
    let entry = inv.binding(&write.binding)?;
    if entry.view.labels.get(CLAIMED_BY).map(String::as_str) == Some(uid) {
        return Some(ClaimWriteNow::Landed);
    }
    let seen = entry.view.resource_version.as_deref();
    let moved = crate::pools::is_newer(seen, Some(&write.resource_version));
    moved.then_some(ClaimWriteNow::Void)
}

/// Judges `write` of claim `uid` on the binding's state now. Pure.
pub fn claim_write_now(
    write: &crate::api::PendingClaimWrite,
    uid: &str,
    live: Option<(&str, Option<&str>)>,
) -> ClaimWriteNow {
    match live {
        Some((_, Some(by))) if by == uid => ClaimWriteNow::Landed,
        Some((rv, _)) if rv == write.resource_version => ClaimWriteNow::MayLand,
        _ => ClaimWriteNow::Void,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::labels::CLAIMED_BY;
    use crate::pools::fixtures::{binding, claim, inventory, pool, shoot};
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
        decide_release(
            c,
            inv,
            &InFlight::default(),
            mode,
            Origin::User,
            Instant::now(),
        )
    }

    fn dirty(b: &str) -> Release {
        Release::MarkDirty {
            binding: b.into(),
            expected_resource_version: Some(format!("rv-{b}")),
        }
    }

    #[test]
    fn a_release_waits_for_its_own_shoot_on_another_binding_of_the_credential_only() {
        use crate::pools::fixtures::on_secret;
        let c = deleting("c", "ga", Some("s"), "aws-01");
        let pool_binding = on_secret(owned("aws-01", "ga", &[]), "aws-01");
        let migrated = on_secret(binding("force-migrated-aws-01", &[]), "aws-01");
        let bindings = vec![pool_binding, migrated];
        // The claim's own Shoot, moved by Gardener's forced migration: wait for it.
        let inv = inventory(
            bindings.clone(),
            vec![c.clone()],
            vec![shoot("s", Some("force-migrated-aws-01"))],
        );
        assert_eq!(
            decide(&c, &inv, ReleaseMode::MarkDirty),
            Release::WaitForSibling {
                binding: "aws-01".into(),
                sibling: "force-migrated-aws-01".into(),
                clusters: vec!["s".into()],
            }
        );
        // Its Shoot gone, the tenant's other cluster on the other binding keeps the account,
        // and the claim goes (waiting would hold every claim of the tenant until its last).
        let inv = inventory(
            bindings.clone(),
            vec![c.clone()],
            vec![shoot("t", Some("force-migrated-aws-01"))],
        );
        assert_eq!(
            decide(&c, &inv, ReleaseMode::MarkDirty),
            Release::Keep(KeepReason::InUse { clusters: 1 })
        );
        // A claim bound to the other binding keeps it too.
        let other = claim("d", "ga", Some("u"), Some("force-migrated-aws-01"));
        let inv = inventory(bindings.clone(), vec![c.clone(), other], vec![]);
        assert_eq!(
            decide(&c, &inv, ReleaseMode::MarkDirty),
            Release::Keep(KeepReason::InUse { clusters: 1 })
        );
        // Gone: released as before.
        let inv = inventory(bindings, vec![c.clone()], vec![]);
        assert_eq!(decide(&c, &inv, ReleaseMode::MarkDirty), dirty("aws-01"));
    }

    #[test]
    fn on_secret_bindings_a_release_waits_for_its_shoot_on_a_credentials_binding_of_the_secret() {
        use crate::api::BindingKind;
        use crate::pools::fixtures::on_secret;
        use crate::pools::{Account, OtherBinding};
        let c = deleting("c", "ga", Some("s"), "aws-01");
        let build = |other_secret: &str| {
            let mut inv = Inventory::new(Default::default());
            inv.set_binding_kind(BindingKind::SecretBinding);
            inv.apply_binding(on_secret(owned("aws-01", "ga", &[]), "aws-01"));
            inv.apply_claim(c.clone());
            // A CredentialsBinding (of the pool binding's own name: the kinds never meet).
            let other = OtherBinding {
                resource_version: Some("1".into()),
                account: Account::of_secret(Some("garden"), None, other_secret),
            };
            inv.apply_other_binding("aws-01", other);
            inv.apply_shoot(shoot("s", Some("aws-01")));
            inv
        };
        assert_eq!(
            decide(&c, &build("aws-01"), ReleaseMode::MarkDirty),
            Release::WaitForSibling {
                binding: "aws-01".into(),
                sibling: "CredentialsBinding/aws-01".into(),
                clusters: vec!["s".into()],
            }
        );
        // On another Secret it is another account: the Shoot is not on this one.
        assert_eq!(
            decide(&c, &build("other"), ReleaseMode::MarkDirty),
            dirty("aws-01")
        );
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

    /// While the binding's records name claims whose status does not show yet, the release waits:
    /// a reuse or fill that recorded itself there may have its status write in flight (a
    /// previous leader's too), and it would land Bound on a dirty binding. Records of claims
    /// whose status can no longer land Bound there do not hold it.
    #[test]
    fn a_claim_recorded_on_the_binding_and_still_pending_holds_the_release() {
        use crate::labels::FILLING;
        let c = deleting("c", "ga", None, "b");
        let with_record = |by: Option<&str>, fills: Option<&str>| {
            let mut labels = vec![("hyperscalerType", "aws"), ("tenantName", "ga")];
            labels.extend(by.map(|by| (CLAIMED_BY, by)));
            let mut b = binding("b", &labels);
            if let Some(f) = fills {
                b.annotations.insert(FILLING.into(), f.into());
            }
            b
        };
        let pending = claim("next", "ga", None, None);
        let in_use = Release::WaitForUse {
            binding: "b".into(),
            claims: vec!["next".into()],
        };
        let cases = [
            (
                "recorded by a use",
                None,
                Some("uid-next"),
                pending.clone(),
                in_use.clone(),
            ),
            (
                "among several records",
                None,
                Some("uid-gone, uid-next"),
                pending.clone(),
                in_use.clone(),
            ),
            (
                "the claim that claimed it",
                Some("uid-next"),
                None,
                pending.clone(),
                in_use.clone(),
            ),
            (
                "its own record only",
                None,
                Some("uid-c"),
                pending.clone(),
                dirty("b"),
            ),
            (
                "a deleting claim's",
                None,
                Some("uid-next"),
                ClaimView {
                    deleting: true,
                    ..pending.clone()
                },
                dirty("b"),
            ),
            (
                "a denied claim's",
                None,
                Some("uid-next"),
                ClaimView {
                    denied: true,
                    ..pending.clone()
                },
                dirty("b"),
            ),
            (
                "another tenant's",
                None,
                Some("uid-next"),
                claim("next", "gb", None, None),
                dirty("b"),
            ),
            (
                "a claim bound elsewhere",
                None,
                Some("uid-next"),
                claim("next", "ga", None, Some("b2")),
                dirty("b"),
            ),
        ];
        for (what, by, fills, other, want) in cases {
            let inv = inventory(vec![with_record(by, fills)], vec![c.clone(), other], vec![]);
            assert_eq!(decide(&c, &inv, ReleaseMode::MarkDirty), want, "{what}");
        }
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

    /// A claim recorded on the binding by a use (a previous leader's, its status write held on
    /// the claim's version) holds the release even while this replica assigns the claim to
    /// another binding: that assignment is this replica's plan, and the held status write is not
    /// bound by it. Whichever status lands first wins; the release waits for it to show.
    #[test]
    fn a_recorded_use_holds_the_release_while_this_replica_assigns_the_claim_elsewhere() {
        use crate::labels::FILLING;
        let c0 = deleting("c0", "ga", None, "b");
        let mut b = owned("b", "ga", &[]);
        b.annotations.insert(FILLING.into(), "uid-c".into());
        let c = claim("c", "ga", Some("c"), None);
        let inv = inventory(
            vec![b, owned("b2", "ga", &[])],
            vec![c0.clone(), c.clone()],
            vec![],
        );
        let now = Instant::now();
        let mut fl = InFlight::new(Duration::from_secs(60));
        let onto_b2 = Choice::Use {
            binding: "b2".into(),
            decision: crate::selection::UseReason::Reused,
        };
        fl.record(&c, &pool("aws", false, false), &onto_b2, now);
        assert_eq!(
            decide_release(&c0, &inv, &fl, ReleaseMode::MarkDirty, Origin::User, now),
            Release::WaitForUse {
                binding: "b".into(),
                claims: vec!["c".into()],
            }
        );
    }

    /// A use being assigned by this replica holds the release as a wait, not a keep: if its
    /// status write fails (the claim was deleted meanwhile, and its own release finds no
    /// binding), the binding must still be released once the assignment is gone.
    #[test]
    fn an_assignment_in_flight_holds_the_release_as_a_wait() {
        let c0 = deleting("c0", "ga", None, "b");
        let inv = inventory(vec![owned("b", "ga", &[])], vec![c0.clone()], vec![]);
        let now = Instant::now();
        let mut fl = InFlight::new(Duration::from_secs(60));
        let newcomer = claim("n", "ga", Some("n"), None);
        let onto_b = Choice::Use {
            binding: "b".into(),
            decision: crate::selection::UseReason::Reused,
        };
        fl.record(&newcomer, &pool("aws", false, false), &onto_b, now);
        assert_eq!(
            decide_release(&c0, &inv, &fl, ReleaseMode::MarkDirty, Origin::User, now),
            Release::WaitForUse {
                binding: "b".into(),
                claims: vec!["uid-n".into()],
            }
        );
        fl.assignment_failed("uid-n");
        assert_eq!(
            decide_release(&c0, &inv, &fl, ReleaseMode::MarkDirty, Origin::User, now),
            dirty("b")
        );
    }

    #[test]
    fn in_flight_writes_count() {
        let c = deleting("c", "ga", None, "b");
        let inv = inventory(vec![owned("b", "ga", &[])], vec![c.clone()], vec![]);
        let now = Instant::now();
        let mut fl = InFlight::new(Duration::from_secs(60));
        // A cluster assigned a moment ago holds the release until its status shows or fails.
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
        let got = decide_release(&c, &inv, &fl, ReleaseMode::MarkDirty, Origin::User, now);
        let held = Release::WaitForUse {
            binding: "b".into(),
            claims: vec!["uid-n".into()],
        };
        assert_eq!(got, held);
        fl.assignment_failed("uid-n");
        assert_eq!(
            decide_release(&c, &inv, &fl, ReleaseMode::MarkDirty, Origin::User, now),
            dirty("b")
        );
        // A written release is not repeated; one without a known outcome is, on the same base.
        fl.release_started("b", Some("rv-b".into()), now);
        fl.release_unknown("b", now);
        assert_eq!(
            decide_release(&c, &inv, &fl, ReleaseMode::MarkDirty, Origin::User, now),
            dirty("b")
        );
        fl.release_written("b", now);
        let got = decide_release(&c, &inv, &fl, ReleaseMode::MarkDirty, Origin::User, now);
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
        let before = decide_release(
            &gone,
            &fresh,
            &fl,
            ReleaseMode::MarkDirty,
            Origin::User,
            now,
        );
        assert_eq!(
            before,
            Release::Keep(KeepReason::NotTenants { tenant: None })
        );
        fl.claim_written("f", now);
        assert_eq!(
            decide_release(
                &gone,
                &fresh,
                &fl,
                ReleaseMode::MarkDirty,
                Origin::User,
                now
            ),
            dirty("f")
        );
    }

    #[test]
    fn a_claim_write_no_status_named_and_nothing_used_goes_back_clean() {
        // The claim write on x committed, the fresh read of x's sibling never answered, and the
        // claim was deleted. Another tenant's claim on the sibling y is bound there, but its
        // status is not in the index yet, so nothing counts on the account: marking x dirty
        // would have the cleanup job wipe the account that tenant is about to run on, for a
        // claim write no cluster ever used.
        let now = Instant::now();
        let p = pool("aws", false, false);
        let gone = ClaimView {
            deleting: true,
            ..claim("c", "ga", None, None)
        };
        let mut fl = InFlight::default();
        let claim_x = Choice::Claim {
            binding: "x".into(),
            expected_resource_version: Some("rv-1".into()),
        };
        fl.record(&gone, &p, &claim_x, now);
        fl.claim_written("x", now);
        // The read failed: no Bound status is sent in that visit.
        fl.drop_assignment("uid-c");
        let written = [
            ("hyperscalerType", "aws"),
            ("tenantName", "ga"),
            (CLAIMED_BY, "uid-c"),
        ];
        let theirs = [
            ("hyperscalerType", "aws"),
            ("tenantName", "gb"),
            (CLAIMED_BY, "uid-d"),
        ];
        let secret = |b| crate::pools::fixtures::on_secret(b, "s");
        let inv = inventory(
            vec![
                secret(binding("x", &written)),
                secret(binding("y", &theirs)),
            ],
            vec![],
            vec![],
        );
        fl.observe_binding("x", inv.binding("x"));
        assert_eq!(fl.won_by("uid-c", now), Some("x"));
        let decide = |fl: &InFlight| {
            decide_release(&gone, &inv, fl, ReleaseMode::MarkDirty, Origin::User, now)
        };
        assert_eq!(
            decide(&fl),
            Release::ReleaseClean {
                binding: "x".into(),
                expected_resource_version: Some("rv-x".into())
            }
        );
        // A Bound status of it was sent: it may have been read, so the account is wiped.
        let use_x = Choice::Use {
            binding: "x".into(),
            decision: crate::selection::UseReason::Reused,
        };
        fl.record(&gone, &p, &use_x, now);
        assert!(
            matches!(decide(&fl), Release::MarkDirty { .. }),
            "{:?}",
            decide(&fl)
        );
    }

    #[test]
    fn a_claim_deleted_before_its_status_releases_what_its_claim_write_won() {
        // A claim whose tenantName write committed but whose Bound status never did (it was
        // deleted meanwhile) must not leave that binding claimed by nobody (a leak).
        let now = Instant::now();
        let p = pool("aws", false, false);
        let free = binding("f", &[("hyperscalerType", "aws")]);
        let gone = ClaimView {
            deleting: true,
            ..claim("c", "ga", None, None)
        };
        let claim_f = Choice::Claim {
            binding: "f".into(),
            expected_resource_version: Some("rv-f".into()),
        };
        let mut fl = InFlight::default();
        fl.record(&gone, &p, &claim_f, now);
        let inv = inventory(vec![free.clone()], vec![], vec![]);
        // Unknown outcome: send the same compare-and-swap again.
        fl.claim_unknown("f", now);
        let resolve = Release::Resolve {
            binding: "f".into(),
            expected_resource_version: Some("rv-f".into()),
        };
        assert_eq!(
            decide(&gone, &inv, ReleaseMode::MarkDirty),
            Release::Keep(KeepReason::NotBound)
        );
        assert_eq!(
            decide_release(&gone, &inv, &fl, ReleaseMode::MarkDirty, Origin::User, now),
            resolve
        );
        // Written, but the index still shows the binding as it was: wait for it.
        fl.claim_written("f", now);
        assert_eq!(
            decide_release(&gone, &inv, &fl, ReleaseMode::MarkDirty, Origin::User, now),
            Release::WaitForWrite {
                binding: "f".into()
            }
        );
        // The index shows it: the record ends, and the binding the claim won is released.
        let won = crate::pools::BindingView {
            resource_version: Some("rv-g".into()),
            ..binding("f", &[("hyperscalerType", "aws"), ("tenantName", "ga")])
        };
        let inv = inventory(vec![won.clone()], vec![], vec![]);
        fl.observe_binding("f", inv.binding("f"));
        assert!(fl.claim_of("f", now).is_none());
        assert_eq!(
            decide_release(&gone, &inv, &fl, ReleaseMode::MarkDirty, Origin::User, now),
            Release::MarkDirty {
                binding: "f".into(),
                expected_resource_version: Some("rv-g".into())
            }
        );
        fl.forget_claim("uid-c", now);
        assert_eq!(
            decide_release(&gone, &inv, &fl, ReleaseMode::MarkDirty, Origin::User, now),
            Release::Keep(KeepReason::NotBound)
        );
    }

    #[test]
    fn the_claims_own_shoot_holds_the_release_only_while_it_uses_the_binding() {
        // Any Shoot of the claim's shootName held the release, whichever
        // binding it used.
        let c = deleting("c", "ga", Some("s"), "b");
        let elsewhere = inventory(
            vec![owned("b", "ga", &[])],
            vec![c.clone()],
            vec![shoot("s", Some("other"))],
        );
        assert_eq!(decide(&c, &elsewhere, ReleaseMode::MarkDirty), dirty("b"));
    }

    #[test]
    fn a_binding_in_another_namespace_is_never_released_here() {
        // After a bindingNamespace change, a same-named binding in the new
        // namespace was marked dirty for a claim that never used it.
        let mut inv = inventory(vec![], vec![], vec![]);
        inv.set_namespace(Some("garden-new".into()));
        inv.apply_binding(owned("b", "ga", &[]));
        let mut c = deleting("c", "ga", None, "b");
        c.binding_namespace = Some("garden-old".into());
        assert_eq!(
            decide(&c, &inv, ReleaseMode::MarkDirty),
            Release::Keep(KeepReason::OtherNamespace {
                namespace: "garden-old".into()
            })
        );
        c.binding_namespace = Some("garden-new".into());
        assert_eq!(decide(&c, &inv, ReleaseMode::MarkDirty), dirty("b"));
    }

    fn source(existed: bool, now: Presence) -> Origin {
        Origin::Source { existed, now }
    }

    fn with(c: &ClaimView, inv: &Inventory, origin: Origin) -> Release {
        let now = Instant::now();
        decide_release(
            c,
            inv,
            &InFlight::default(),
            ReleaseMode::MarkDirty,
            origin,
            now,
        )
    }

    #[test]
    fn a_source_claim_whose_object_never_existed_is_released_clean() {
        // A Runtime refused after the webhook served it left its binding
        // dirty for a tenant that never had a cluster.
        let c = deleting("c", "ga", Some("s"), "b");
        let inv = inventory(
            vec![owned("b", "ga", &[(CLAIMED_BY, "uid-c")])],
            vec![c.clone()],
            vec![],
        );
        assert_eq!(
            with(&c, &inv, source(false, Presence::Gone)),
            Release::ReleaseClean {
                binding: "b".into(),
                expected_resource_version: Some("rv-b".into())
            }
        );
        // Its object existed: a cluster may have used the account.
        assert_eq!(with(&c, &inv, source(true, Presence::Gone)), dirty("b"));
        // An AccountClaim a user created: what the tenant did with it is unknown.
        assert_eq!(with(&c, &inv, Origin::User), dirty("b"));
    }

    #[test]
    fn only_the_claim_that_claimed_the_binding_alone_releases_it_clean() {
        // R0 Claimed b and ran; r1 of the same tenant Reused b and was refused. r0
        // went first (kept for r1), r1 goes last: clean would hand the next tenant an account r0
        // ran in. A Reuse removes claimed-by (selection::claimant), so r1 never finds its own.
        let c = deleting("c", "ga", Some("s"), "b");
        let gone = source(false, Presence::Gone);
        let clean = Release::ReleaseClean {
            binding: "b".into(),
            expected_resource_version: Some("rv-b".into()),
        };
        let mine = inventory(
            vec![owned("b", "ga", &[(CLAIMED_BY, "uid-c")])],
            vec![c.clone()],
            vec![],
        );
        assert_eq!(with(&c, &mine, gone), clean);
        let other = inventory(
            vec![owned("b", "ga", &[(CLAIMED_BY, "uid-r0")])],
            vec![c.clone()],
            vec![],
        );
        assert_eq!(with(&c, &other, gone), dirty("b"));
        // No record: claimed before the record existed, or another claim was bound to it since.
        let none = inventory(vec![owned("b", "ga", &[])], vec![c.clone()], vec![]);
        assert_eq!(with(&c, &none, gone), dirty("b"));
        // A repeated release reads the record too.
        let now = Instant::now();
        let mut fl = InFlight::default();
        fl.release_started("b", Some("rv-old".into()), now);
        fl.release_unknown("b", now);
        let again = decide_release(&c, &other, &fl, ReleaseMode::MarkDirty, gone, now);
        assert_eq!(
            again,
            Release::MarkDirty {
                binding: "b".into(),
                expected_resource_version: Some("rv-old".into())
            }
        );
    }

    #[test]
    fn a_source_claim_is_never_released_while_its_object_exists() {
        // The object re-created under the same name may run on this binding,
        // and for a Runtime or Cluster its Shoot is not in the index yet.
        let c = deleting("c", "ga", Some("s"), "b");
        let inv = inventory(vec![owned("b", "ga", &[])], vec![c.clone()], vec![]);
        for existed in [false, true] {
            assert_eq!(
                with(&c, &inv, source(existed, Presence::Unread)),
                Release::ReadSource {
                    binding: "b".into()
                }
            );
            assert_eq!(
                with(&c, &inv, source(existed, Presence::Exists)),
                Release::WaitForSource {
                    binding: "b".into()
                }
            );
        }
    }

    #[test]
    fn what_keeps_a_binding_comes_before_the_read_of_the_object() {
        let c = deleting("c", "ga", Some("s"), "b");
        let unread = source(false, Presence::Unread);
        let retain = decide_release(
            &c,
            &inventory(vec![owned("b", "ga", &[])], vec![], vec![]),
            &InFlight::default(),
            ReleaseMode::Retain,
            unread,
            Instant::now(),
        );
        assert_eq!(retain, Release::Keep(KeepReason::Retain));
        let own_shoot = inventory(
            vec![owned("b", "ga", &[])],
            vec![c.clone()],
            vec![shoot("s", Some("b"))],
        );
        assert_eq!(
            with(&c, &own_shoot, unread),
            Release::WaitForShoot { shoot: "s".into() }
        );
        let other = inventory(
            vec![owned("b", "ga", &[])],
            vec![c.clone()],
            vec![shoot("t", Some("b"))],
        );
        assert_eq!(
            with(&c, &other, source(false, Presence::Gone)),
            Release::Keep(KeepReason::InUse { clusters: 1 })
        );
        let shared = inventory(
            vec![binding(
                "b",
                &[("hyperscalerType", "aws"), ("shared", "true")],
            )],
            vec![],
            vec![],
        );
        assert_eq!(with(&c, &shared, unread), Release::Keep(KeepReason::Shared));
    }

    #[test]
    fn a_repeated_clean_release_stays_clean_unless_a_shoot_now_names_the_binding() {
        let c = deleting("c", "ga", None, "b");
        let now = Instant::now();
        let mut fl = InFlight::default();
        fl.release_started("b", Some("rv-old".into()), now);
        fl.release_unknown("b", now);
        let gone = source(false, Presence::Gone);
        let quiet = inventory(
            vec![owned("b", "ga", &[(CLAIMED_BY, "uid-c")])],
            vec![c.clone()],
            vec![],
        );
        assert_eq!(
            decide_release(&c, &quiet, &fl, ReleaseMode::MarkDirty, gone, now),
            Release::ReleaseClean {
                binding: "b".into(),
                expected_resource_version: Some("rv-old".into())
            }
        );
        let used = inventory(
            vec![owned("b", "ga", &[(CLAIMED_BY, "uid-c")])],
            vec![c.clone()],
            vec![shoot("t", Some("b"))],
        );
        assert_eq!(
            decide_release(&c, &used, &fl, ReleaseMode::MarkDirty, gone, now),
            Release::MarkDirty {
                binding: "b".into(),
                expected_resource_version: Some("rv-old".into())
            }
        );
        let unread = source(false, Presence::Unread);
        assert_eq!(
            decide_release(&c, &quiet, &fl, ReleaseMode::MarkDirty, unread, now),
            Release::ReadSource {
                binding: "b".into()
            }
        );
    }

    /// A claim write its status records (perhaps a previous leader's): released as the claim's
    /// own once the index shows it landed (clean: no status named it, nothing used it); before
    /// that, and for a write the index shows no trace of, nothing to release.
    #[test]
    fn a_recorded_claim_write_the_index_shows_landed_is_the_claims_to_release() {
        let recorded = |c: ClaimView| ClaimView {
            claim_write: Some(Box::new(crate::api::PendingClaimWrite {
                binding: "x".into(),
                resource_version: "rv-0".into(),
                ..Default::default()
            })),
            ..c
        };
        let gone = recorded(ClaimView {
            deleting: true,
            ..claim("c", "ga", None, None)
        });
        let free = inventory(
            vec![binding("x", &[("hyperscalerType", "aws")])],
            vec![],
            vec![],
        );
        assert_eq!(
            decide(&gone, &free, ReleaseMode::MarkDirty),
            Release::Keep(KeepReason::NotBound)
        );
        let landed = [
            ("hyperscalerType", "aws"),
            ("tenantName", "ga"),
            (CLAIMED_BY, "uid-c"),
        ];
        let inv = inventory(vec![binding("x", &landed)], vec![], vec![]);
        assert_eq!(
            decide(&gone, &inv, ReleaseMode::MarkDirty),
            Release::ReleaseClean {
                binding: "x".into(),
                expected_resource_version: Some("rv-x".into())
            }
        );
    }

    #[test]
    fn a_recorded_claim_write_is_judged_on_the_binding_as_it_is_now() {
        let w = crate::api::PendingClaimWrite {
            binding: "x".into(),
            resource_version: "5".into(),
            ..Default::default()
        };
        let now = |live| claim_write_now(&w, "uid-c", live);
        assert_eq!(now(Some(("6", Some("uid-c")))), ClaimWriteNow::Landed);
        assert_eq!(now(Some(("5", None))), ClaimWriteNow::MayLand);
        assert_eq!(now(Some(("5", Some("uid-d")))), ClaimWriteNow::MayLand);
        assert_eq!(now(Some(("6", Some("uid-d")))), ClaimWriteNow::Void);
        assert_eq!(now(Some(("6", None))), ClaimWriteNow::Void);
        assert_eq!(now(None), ClaimWriteNow::Void);
    }
}
