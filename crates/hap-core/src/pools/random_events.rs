//! Random inventory events for the property tests of what the index keeps per event (`tallies`,
//! `states`): bindings with labels, annotations and credentials drawn from flags, claims, Shoots
//! with error codes, re-keyed label keys and dropped watches, applied as the watches apply them.

use jiff::{SignedDuration, Timestamp};

use crate::api::CredentialsKind;
use crate::labels::ResolvedLabelKeys;
use crate::pools::fixtures::{binding, claim, shoot};
use crate::pools::lifecycle::{
    CLEANUP_FAILED, CLEANUP_FAILED_REASON, CORDON_REASON, CORDONED, RELEASED_AT, RELEASED_BY,
};
use crate::pools::{BindingView, Inventory};

/// The Shoot error codes a mask picks from.
const CODES: [&str; 3] = ["ERR_A", "ERR_B", "ERR_C"];

#[derive(Clone, Debug)]
pub enum Event {
    /// Binding `i` with labels and annotations from the flags, or deleted.
    Binding(usize, Option<Flags>),
    /// Claim `i` bound to binding `b` (deleting or not), or deleted.
    Claim(usize, Option<(usize, bool)>),
    /// Shoot `i` on binding `b` with the codes picked by the mask, or deleted.
    Shoot(usize, Option<(usize, u8)>),
    /// Another tenant label key (`owner`): every binding classified again.
    Rekey(bool),
    /// The binding watch moved: every binding dropped.
    ClearBindings,
    /// The Shoot watch moved: every Shoot dropped.
    ClearShoots,
}

/// What a binding's labels, annotations and credentials say.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    pub hyperscaler: Option<&'static str>,
    pub tenant: Option<usize>,
    pub dirty: bool,
    pub shared: bool,
    pub internal: bool,
    pub cordoned: bool,
    /// The cleanup job's failure mark, with a reason.
    pub cleanup_failed: bool,
    pub eu: bool,
    /// Secret, WorkloadIdentity or another kind; also which credential (0, 1: shared by every
    /// binding with that flag; 2: none).
    pub credentials: usize,
    /// Released this many minutes after the start, by tenant `t0` or `t1`.
    pub released: Option<(i64, usize)>,
}

pub fn start() -> Timestamp {
    "2026-11-27T00:00:00Z".parse().expect("time")
}

pub fn minutes(m: i64) -> Timestamp {
    start() + SignedDuration::from_mins(m)
}

/// The default keys, or with the tenant under `owner`.
pub fn keys(alt: bool) -> ResolvedLabelKeys {
    let mut k = ResolvedLabelKeys::default();
    if alt {
        k.tenant_name = "owner".into();
    }
    k
}

pub fn codes(mask: u8) -> Vec<String> {
    CODES
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, c)| c.to_string())
        .collect()
}

pub fn view(i: usize, f: &Flags, rv: u64) -> BindingView {
    let tenant = f.tenant.map(|t| format!("t{t}"));
    let mut labels: Vec<(&str, &str)> = Vec::new();
    if let Some(h) = f.hyperscaler {
        labels.push(("hyperscalerType", h));
    }
    if let Some(t) = &tenant {
        // Both keys, so that a re-keyed index sees the tenant under either.
        labels.push(("tenantName", t));
        if i.is_multiple_of(2) {
            labels.push(("owner", t));
        }
    }
    for (on, key) in [
        (f.dirty, "dirty"),
        (f.shared, "shared"),
        (f.internal, "internal"),
        (f.cordoned, CORDONED),
        (f.cleanup_failed, CLEANUP_FAILED),
        (f.eu, "euAccess"),
    ] {
        if on {
            labels.push((key, "true"));
        }
    }
    let mut v = binding(&format!("b{i}"), &labels);
    v.resource_version = Some(rv.to_string());
    v.credentials = [
        CredentialsKind::Secret,
        CredentialsKind::WorkloadIdentity,
        CredentialsKind::Other,
    ][f.credentials % 3];
    // Bindings with the same flag share a credential (Gardener's forced migration leaves two
    // bindings on one Secret); the third kind's have no account of their own.
    v.account = (f.credentials % 3 < 2)
        .then(|| {
            crate::pools::Account::of_secret(
                Some("garden"),
                None,
                &format!("acct-{}", f.credentials),
            )
        })
        .flatten();
    if f.cordoned {
        v.annotations
            .insert(CORDON_REASON.into(), format!("reason {i}"));
    }
    if f.cleanup_failed {
        v.annotations
            .insert(CLEANUP_FAILED_REASON.into(), format!("failed {i}"));
    }
    if let Some((at, by)) = f.released {
        v.annotations
            .insert(RELEASED_AT.into(), minutes(at).to_string());
        v.annotations.insert(RELEASED_BY.into(), format!("t{by}"));
    }
    v
}

/// Applies one event with resourceVersion `rv`, as the watches would.
pub fn apply(inv: &mut Inventory, ev: &Event, rv: u64) {
    let at = Some(rv.to_string());
    match ev {
        Event::Binding(i, Some(f)) => drop(inv.apply_binding(view(*i, f, rv))),
        Event::Binding(i, None) => drop(inv.delete_binding(&format!("b{i}"), at.as_deref())),
        Event::Claim(i, Some((b, deleting))) => {
            let name = format!("c{i}");
            let mut c = claim(
                &name,
                "ga",
                i.is_multiple_of(2).then_some("s0"),
                Some(&format!("b{b}")),
            );
            c.resource_version = at;
            c.deleting = *deleting;
            inv.apply_claim(c);
        }
        Event::Claim(i, None) => drop(inv.delete_claim(&format!("uid-c{i}"), at.as_deref())),
        Event::Shoot(i, Some((b, mask))) => {
            let mut s = shoot(&format!("s{i}"), Some(&format!("b{b}")));
            s.resource_version = at;
            s.error_codes = codes(*mask);
            inv.apply_shoot(s);
        }
        Event::Shoot(i, None) => drop(inv.delete_shoot(&format!("s{i}"), at.as_deref())),
        Event::Rekey(to) => inv.set_keys(keys(*to)),
        Event::ClearBindings => inv.clear_bindings(),
        Event::ClearShoots => inv.clear_shoots(),
    }
}
