//! The index kept by events equals the index built from the final state, whatever order,
//! repetition or staleness the events came in; a view never goes backwards.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::super::fixtures::{binding, claim, shoot};
use super::*;
use crate::pools::Inventory;

fn at<T>(mut v: T, rv: u64, set: impl FnOnce(&mut T, Option<String>)) -> T {
    set(&mut v, Some(rv.to_string()));
    v
}

fn b(name: &str, rv: u64, tenant: Option<&str>) -> BindingView {
    let mut labels = vec![("hyperscalerType", "aws")];
    if let Some(t) = tenant {
        labels.push(("tenantName", t));
    }
    at(binding(name, &labels), rv, |v, r| v.resource_version = r)
}

#[test]
fn an_older_version_never_replaces_a_newer_one() {
    let mut inv = Inventory::default();
    assert!(inv.apply_binding(b("x", 5, Some("ga"))));
    assert!(!inv.apply_binding(b("x", 4, None)), "a stale event");
    assert!(
        !inv.apply_binding(b("x", 5, None)),
        "the same version again"
    );
    let p = crate::pools::fixtures::pool("aws", false, false);
    assert_eq!(inv.owned_by(&p, "ga").len(), 1);
    assert!(inv.apply_binding(b("x", 6, None)));
    assert!(inv.owned_by(&p, "ga").is_empty());
    // A deletion leaves a tombstone: an older copy of the object cannot come back.
    assert!(inv.delete_binding("x", Some("7")));
    assert!(!inv.apply_binding(b("x", 6, None)));
    assert!(inv.binding("x").is_none());
    // A new object of the same name, created later, is taken.
    assert!(inv.apply_binding(b("x", 8, None)));
}

#[test]
fn a_stale_relist_keeps_newer_objects_until_the_watch_passes_them() {
    let mut inv = Inventory::default();
    let c = |n: &str, rv: u64| {
        at(claim(n, "ga", Some(n), Some("x")), rv, |v, r| {
            v.resource_version = r
        })
    };
    inv.apply_binding(b("x", 1, Some("ga")));
    inv.apply_claim(c("old", 2));
    inv.apply_claim(c("new", 9));
    // A re-list from a watch cache at version 5 lacks "new" (created at 9) and "old" (deleted
    // since, at some version up to 5).
    let r = inv.begin_relist(Kind::Claim);
    inv.end_relist(Kind::Claim, r, Some("5"));
    assert!(
        inv.claim("uid-old").is_none(),
        "gone by the list's own version"
    );
    assert!(inv.claim("uid-new").is_some(), "newer than the list: kept");
    assert_eq!(inv.take_gone(), [(Kind::Claim, "uid-old".to_string())]);
    assert_eq!(inv.clusters_on("x").len(), 1);
    // The watch continues from 5; an event at 10 proves "new" would have been seen by now.
    inv.apply_claim(c("other", 10));
    assert!(inv.claim("uid-new").is_none());
    assert_eq!(inv.take_gone(), [(Kind::Claim, "uid-new".to_string())]);
    // Its own event, replayed by the watch, confirms it.
    inv.apply_claim(c("again", 11));
    let r = inv.begin_relist(Kind::Claim);
    inv.apply_claim(c("other", 10));
    inv.end_relist(Kind::Claim, r, Some("10"));
    assert!(inv.claim("uid-again").is_some() && inv.claim("uid-other").is_some());
    inv.apply_claim(c("again", 11));
    inv.advance(Kind::Claim, Some("20"));
    assert!(
        inv.claim("uid-again").is_some(),
        "its own event arrived: confirmed"
    );
    // Without a list version, the newest listed object bounds what the list has seen.
    inv.apply_claim(c("late", 21));
    let r = inv.begin_relist(Kind::Claim);
    inv.apply_claim(c("other", 10));
    inv.end_relist(Kind::Claim, r, None);
    assert!(inv.claim("uid-other").is_some());
    assert!(
        inv.claim("uid-again").is_some() && inv.claim("uid-late").is_some(),
        "unconfirmed"
    );
    inv.advance(Kind::Claim, Some("15"));
    assert!(inv.claim("uid-again").is_none() && inv.claim("uid-late").is_some());
    inv.advance(Kind::Claim, Some("22"));
    assert!(inv.claim("uid-late").is_none());
}

#[test]
fn claims_count_only_in_the_binding_namespace_in_force() {
    let mut inv = Inventory::default();
    inv.set_namespace(Some("garden".into()));
    let mut here = claim("a", "ga", None, Some("x"));
    here.binding_namespace = Some("garden".into());
    let mut there = claim("b", "ga", None, Some("x"));
    there.binding_namespace = Some("garden-old".into());
    let unset = claim("c", "ga", None, Some("x"));
    for c in [here, there, unset] {
        inv.apply_claim(c);
    }
    assert_eq!(
        inv.clusters_on("x").iter().collect::<Vec<_>>(),
        ["kcp/a", "kcp/c"]
    );
    inv.set_namespace(Some("garden-old".into()));
    assert_eq!(
        inv.clusters_on("x").iter().collect::<Vec<_>>(),
        ["kcp/b", "kcp/c"]
    );
}

#[test]
fn changes_name_the_bindings_and_pools_that_moved() {
    let mut inv = Inventory::default();
    inv.apply_binding(b("x", 1, None));
    inv.take_changes();
    let mut waiting = claim("w", "ga", None, None);
    let p = crate::pools::fixtures::pool("aws", false, false);
    waiting.waiting_in = Some(p.clone());
    inv.apply_claim(waiting);
    assert_eq!(inv.waiting_in(&p).iter().collect::<Vec<_>>(), ["uid-w"]);
    inv.apply_shoot(at(shoot("s", Some("x")), 3, |v, r| v.resource_version = r));
    let ch = inv.take_changes();
    assert!(ch.bindings.contains("x") && ch.pools.contains(&p) && !ch.all);
    assert!(inv.take_changes().is_empty());
}

/// One step of the true history: an object of a kind (by index) changed or deleted.
#[derive(Clone, Debug)]
enum Op {
    Binding(usize, Option<usize>),
    Claim(usize, Option<(usize, usize, bool)>),
    Shoot(usize, Option<usize>),
}

fn op() -> impl Strategy<Value = Op> {
    let tenant = prop::option::of(0..3usize);
    prop_oneof![
        (0..5usize, prop::option::weighted(0.8, 0..4usize)).prop_map(|(i, t)| Op::Binding(i, t)),
        (
            0..6usize,
            prop::option::weighted(0.8, (0..5usize, 0..3usize, any::<bool>()))
        )
            .prop_map(|(i, c)| Op::Claim(i, c)),
        (0..4usize, prop::option::weighted(0.8, 0..5usize)).prop_map(|(i, b)| Op::Shoot(i, b)),
        tenant.prop_map(|t| Op::Binding(0, t.map(|t| t + 1))),
    ]
}

/// A change as a watch delivers it: (kind, key, version, the new view or a deletion).
#[derive(Clone, Debug)]
enum Ev {
    B(String, u64, Option<BindingView>),
    C(String, u64, Option<ClaimView>),
    S(String, u64, Option<ShootView>),
}

fn history(ops: &[Op]) -> Vec<Ev> {
    let mut out = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        let rv = n as u64 + 1;
        out.push(match op {
            Op::Binding(i, t) => {
                let name = format!("b{i}");
                let tenant = t.and_then(|t| t.checked_sub(1)).map(|t| format!("t{t}"));
                let v = t.map(|_| b(&name, rv, tenant.as_deref()));
                Ev::B(name, rv, v)
            }
            Op::Claim(i, c) => {
                let name = format!("c{i}");
                let v = c.map(|(bi, t, deleting)| {
                    let mut v = claim(
                        &name,
                        &format!("t{t}"),
                        (i % 2 == 0).then_some("s0"),
                        Some(&format!("b{bi}")),
                    );
                    v.resource_version = Some(rv.to_string());
                    v.deleting = deleting;
                    v
                });
                Ev::C(format!("uid-{name}"), rv, v)
            }
            Op::Shoot(i, bi) => {
                let name = format!("s{i}");
                let v = bi.map(|bi| {
                    at(shoot(&name, Some(&format!("b{bi}"))), rv, |v, r| {
                        v.resource_version = r
                    })
                });
                Ev::S(name, rv, v)
            }
        });
    }
    out
}

fn deliver(inv: &mut Inventory, ev: &Ev) {
    let rv = |v: &u64| Some(v.to_string());
    match ev {
        Ev::B(_, _, Some(v)) => drop(inv.apply_binding(v.clone())),
        Ev::B(k, v, None) => drop(inv.delete_binding(k, rv(v).as_deref())),
        Ev::C(_, _, Some(v)) => drop(inv.apply_claim(v.clone())),
        Ev::C(k, v, None) => drop(inv.delete_claim(k, rv(v).as_deref())),
        Ev::S(_, _, Some(v)) => drop(inv.apply_shoot(v.clone())),
        Ev::S(k, v, None) => drop(inv.delete_shoot(k, rv(v).as_deref())),
    }
}

/// Everything a decision reads, in a comparable form.
fn summary(inv: &Inventory) -> String {
    let mut out = String::new();
    for e in inv.bindings() {
        let mut on: Vec<&str> = inv.clusters_on(&e.view.name).iter().collect();
        on.sort_unstable();
        out += &format!(
            "{} {:?} {:?} {on:?} {:?}\n",
            e.view.name,
            e.view.resource_version,
            e.pool,
            inv.claims_on(&e.view.name)
        );
    }
    for (k, m) in inv.pools() {
        out += &format!("{k:?} {m:?}\n");
    }
    let mut all: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for n in ["b0", "b1", "b2", "b3", "b4"] {
        all.insert(n.into(), inv.clusters_on(n).iter().collect());
    }
    out += &format!("{all:?}\n");
    let mut claims: Vec<_> = inv
        .claims()
        .map(|c| (c.uid.clone(), c.resource_version.clone()))
        .collect();
    claims.sort();
    out += &format!("{claims:?}\n");
    for s in ["s0", "s1", "s2", "s3"] {
        out += &format!("{s}:{:?} ", inv.shoot(s).map(|s| &s.binding));
    }
    out
}

fn rebuild(events: &[Ev]) -> Inventory {
    let mut state: BTreeMap<String, Ev> = BTreeMap::new();
    for ev in events {
        let key = match ev {
            Ev::B(k, ..) => format!("b/{k}"),
            Ev::C(k, ..) => format!("c/{k}"),
            Ev::S(k, ..) => format!("s/{k}"),
        };
        state.insert(key, ev.clone());
    }
    let mut inv = Inventory::default();
    for ev in state.values() {
        match ev {
            Ev::B(_, _, Some(v)) => drop(inv.apply_binding(v.clone())),
            Ev::C(_, _, Some(v)) => drop(inv.apply_claim(v.clone())),
            Ev::S(_, _, Some(v)) => drop(inv.apply_shoot(v.clone())),
            _ => {}
        }
    }
    inv
}

proptest! {
    #[test]
    fn events_in_any_staleness_end_where_a_fresh_build_of_the_final_state_is(
        ops in prop::collection::vec(op(), 1..60),
        replays in prop::collection::vec((0..60usize, 0..60usize), 0..20),
        relist_at in prop::option::of(0..60usize),
    ) {
        let events = history(&ops);
        let mut inv = Inventory::default();
        for (i, ev) in events.iter().enumerate() {
            deliver(&mut inv, ev);
            // Old events delivered again (a watch restarted from an older version).
            for (when, which) in &replays {
                if *when == i && *which <= i {
                    deliver(&mut inv, &events[*which]);
                }
            }
            // A re-list from a lagging watch cache, then the watch replays from there.
            if relist_at == Some(i) {
                let from = i / 2;
                let stale = rebuild(&events[..from]);
                let relists: Vec<_> = [Kind::Binding, Kind::Claim, Kind::Shoot]
                    .into_iter()
                    .map(|kind| (kind, inv.begin_relist(kind)))
                    .collect();
                for e in stale.bindings() { inv.apply_binding(e.view.clone()); }
                for c in stale.claims() { inv.apply_claim(c.clone()); }
                for s in ["s0", "s1", "s2", "s3"] {
                    if let Some(v) = stale.shoot(s) { inv.apply_shoot(v.clone()); }
                }
                let list_rv = from.to_string();
                for (kind, r) in relists {
                    inv.end_relist(kind, r, Some(&list_rv));
                }
                for ev in &events[from..=i] {
                    deliver(&mut inv, ev);
                }
            }
        }
        // A last event of every kind proves the watches passed every version.
        let end = (events.len() + 10).to_string();
        for kind in [Kind::Binding, Kind::Claim, Kind::Shoot] {
            inv.advance(kind, Some(&end));
        }
        prop_assert_eq!(summary(&inv), summary(&rebuild(&events)));
    }
}

#[test]
fn overlapping_relists_each_drop_only_what_they_did_not_list() {
    // Found by the chaos test: a takeover's re-read and the watch's own re-list overlapped; the
    // one that began last replaced the other's record, and objects the first had listed were
    // dropped at its end.
    let mut inv = Inventory::default();
    inv.apply_binding(b("x", 3, None));
    inv.apply_binding(b("y", 4, None));
    let watch = inv.begin_relist(Kind::Binding);
    inv.apply_binding(b("x", 3, None));
    let reread = inv.begin_relist(Kind::Binding);
    inv.apply_binding(b("y", 4, None));
    inv.end_relist(Kind::Binding, watch, None);
    inv.apply_binding(b("x", 3, None));
    inv.end_relist(Kind::Binding, reread, Some("9"));
    assert!(inv.binding("x").is_some() && inv.binding("y").is_some());
    // What neither listed is gone.
    inv.apply_binding(b("z", 5, None));
    let r = inv.begin_relist(Kind::Binding);
    inv.apply_binding(b("x", 3, None));
    inv.apply_binding(b("y", 4, None));
    inv.end_relist(Kind::Binding, r, Some("9"));
    assert!(inv.binding("z").is_none());
}

/// One step of several re-lists of Shoots overlapping with watch events.
#[derive(Clone, Debug)]
enum Step {
    /// The watch delivers a new version of the Shoot.
    Change(u8),
    Delete(u8),
    /// Every open re-list's reader names the Shoot as the index holds it.
    List(u8),
    Begin,
    /// The n-th open re-list (modulo) ends, at the newest version so far.
    End(usize),
    Abandon(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..6u8).prop_map(Step::Change),
        (0..6u8).prop_map(Step::Delete),
        (0..6u8).prop_map(Step::List),
        Just(Step::Begin),
        (0..4usize).prop_map(Step::End),
        (0..4usize).prop_map(Step::Abandon),
    ]
}

proptest! {
    /// The rule the index keeps with one mark per object, checked against the rule written out
    /// with sets: a re-list ending drops exactly the objects held when it began that no event
    /// and no list item named since, whatever other re-lists began or ended meanwhile.
    #[test]
    fn a_relist_drops_what_was_held_at_its_start_and_not_named_since(
        steps in prop::collection::vec(step(), 1..80),
    ) {
        use std::collections::{BTreeMap, BTreeSet};
        let mut inv = Inventory::default();
        let mut rv = 0u64;
        let mut held: BTreeMap<String, u64> = BTreeMap::new();
        // Per open re-list: its token, the keys held at its start not named since.
        let mut open: Vec<(Relist, BTreeSet<String>)> = Vec::new();
        for st in steps {
            match st {
                Step::Change(k) => {
                    let key = format!("s{k}");
                    rv += 1;
                    prop_assert!(inv.apply_shoot(at(shoot(&key, Some("b")), rv, |v, r| v.resource_version = r)));
                    held.insert(key.clone(), rv);
                    open.iter_mut().for_each(|(_, left)| { left.remove(&key); });
                }
                Step::Delete(k) => {
                    let key = format!("s{k}");
                    rv += 1;
                    inv.delete_shoot(&key, Some(&rv.to_string()));
                    held.remove(&key);
                }
                Step::List(k) => {
                    let key = format!("s{k}");
                    if let Some(v) = held.get(&key) {
                        inv.apply_shoot(at(shoot(&key, Some("b")), *v, |v, r| v.resource_version = r));
                        open.iter_mut().for_each(|(_, left)| { left.remove(&key); });
                    }
                }
                Step::Begin => {
                    open.push((inv.begin_relist(Kind::Shoot), held.keys().cloned().collect()));
                }
                Step::End(i) if !open.is_empty() => {
                    let (r, left) = open.remove(i % open.len());
                    inv.end_relist(Kind::Shoot, r, Some(&rv.to_string()));
                    for key in left {
                        held.remove(&key);
                    }
                }
                Step::Abandon(i) if !open.is_empty() => {
                    let (r, _) = open.remove(i % open.len());
                    inv.abandon_relist(Kind::Shoot, r);
                }
                Step::End(_) | Step::Abandon(_) => {}
            }
            prop_assert_eq!(inv.open_relists(Kind::Shoot), open.len());
            for k in 0..6 {
                let key = format!("s{k}");
                prop_assert_eq!(inv.shoot(&key).is_some(), held.contains_key(&key), "{}", key);
            }
        }
    }
}

#[test]
fn classifying_again_during_a_relist_does_not_count_as_naming_an_object() {
    // New label keys and a new binding kind re-insert every binding and Shoot; a re-list open
    // meanwhile must still drop those it did not name.
    let mut inv = Inventory::default();
    inv.apply_binding(b("x", 3, None));
    inv.apply_shoot(at(shoot("s", Some("x")), 4, |v, r| v.resource_version = r));
    let bindings = inv.begin_relist(Kind::Binding);
    let shoots = inv.begin_relist(Kind::Shoot);
    inv.set_keys(crate::pools::random_events::keys(true));
    inv.set_binding_kind(crate::pools::BindingKind::SecretBinding);
    inv.end_relist(Kind::Binding, bindings, Some("9"));
    inv.end_relist(Kind::Shoot, shoots, Some("9"));
    assert!(inv.binding("x").is_none());
    assert!(inv.shoot("s").is_none());
}

/// A claim `name` in `ns` at `rv`, through the same view the claim watch builds; made by the
/// Shoot source when `from_source`.
fn source_claim(
    name: &str,
    ns: &str,
    rv: u64,
    from_source: bool,
    edit: impl FnOnce(&mut crate::api::AccountClaim),
) -> ClaimView {
    use crate::labels::{SOURCE_NAME, SOURCE_UID};
    let mut c = crate::api::AccountClaim::new(name, Default::default());
    c.metadata.namespace = Some(ns.into());
    c.metadata.uid = Some(format!("uid-{name}"));
    c.metadata.resource_version = Some(rv.to_string());
    c.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-11-27T03:00:00Z".parse().expect("a timestamp"),
    ));
    if from_source {
        c.metadata.labels = Some(BTreeMap::from([
            (crate::labels::SOURCE_ID.into(), "shoots".into()),
            (crate::labels::SOURCE_KIND.into(), "Shoot".into()),
            (crate::labels::SOURCE_NAMESPACE.into(), "garden".into()),
            (SOURCE_NAME.into(), format!("shoot-{name}")),
            (SOURCE_UID.into(), format!("shoot-uid-{name}")),
        ]));
    }
    edit(&mut c);
    crate::pools::claim_view(&c)
}

fn facts_of<'a>(inv: &'a Inventory, uid: &str) -> Option<&'a crate::claim_state::SourceFacts> {
    inv.claim(uid).and_then(|c| c.source.as_deref())
}

fn source_uids(inv: &Inventory, ns: &str) -> Vec<String> {
    inv.source_claims(ns).map(|c| c.uid.clone()).collect()
}

#[test]
fn source_facts_follow_each_event_of_the_claim_and_go_with_its_deletion() {
    use crate::api::{AccountClaimStatus, ClaimPhase};
    let mut inv = Inventory::default();
    inv.apply_claim(source_claim("a", "kcp", 1, true, |c| {
        c.status = Some(AccountClaimStatus {
            phase: Some(ClaimPhase::Pending),
            ..Default::default()
        });
    }));
    let f = facts_of(&inv, "uid-a").expect("a source claim carries its facts");
    assert_eq!(f.source.kind, crate::api::SourceKind::Shoot);
    assert_eq!(f.source.name.as_deref(), Some("shoot-a"));
    assert_eq!(f.source.uid.as_deref(), Some("shoot-uid-a"));
    assert_eq!(f.phase, Some(ClaimPhase::Pending));
    assert_eq!(f.binding, None);
    assert_eq!(f.created, Some("2026-11-27T03:00:00Z".parse().unwrap()));

    inv.apply_claim(source_claim("a", "kcp", 2, true, |c| {
        c.status = Some(AccountClaimStatus {
            phase: Some(ClaimPhase::Bound),
            credentials_binding_name: Some("b1".into()),
            ..Default::default()
        });
    }));
    let f = facts_of(&inv, "uid-a").expect("still a source claim");
    assert_eq!(f.phase, Some(ClaimPhase::Bound));
    assert_eq!(f.binding.as_deref(), Some("b1"));
    assert!(!inv.claim("uid-a").unwrap().deleting);

    inv.apply_claim(source_claim("a", "kcp", 3, true, |c| {
        c.metadata.deletion_timestamp = c.metadata.creation_timestamp.clone();
    }));
    assert!(inv.claim("uid-a").unwrap().deleting);
    assert_eq!(source_uids(&inv, "kcp"), ["uid-a"]);

    inv.delete_claim("uid-a", Some("4"));
    assert!(facts_of(&inv, "uid-a").is_none());
    assert!(source_uids(&inv, "kcp").is_empty());
    assert!(inv.source_kinds("kcp").is_empty());
}

#[test]
fn source_facts_are_none_for_a_claim_no_source_made() {
    let mut inv = Inventory::default();
    inv.apply_claim(source_claim("p", "kcp", 1, false, |_| {}));
    assert!(inv.claim("uid-p").is_some());
    assert!(facts_of(&inv, "uid-p").is_none());
    assert!(source_uids(&inv, "kcp").is_empty());
    // Incomplete source labels are no source's either.
    inv.apply_claim(source_claim("p", "kcp", 2, true, |c| {
        if let Some(l) = c.metadata.labels.as_mut() {
            l.remove(crate::labels::SOURCE_NAMESPACE);
        }
    }));
    assert!(facts_of(&inv, "uid-p").is_none());
    assert!(source_uids(&inv, "kcp").is_empty());
}

#[test]
fn source_facts_set_per_namespace_follows_namespace_and_label_changes() {
    let mut inv = Inventory::default();
    inv.apply_claim(source_claim("a", "kcp", 1, true, |_| {}));
    inv.apply_claim(source_claim("b", "kcp", 2, true, |_| {}));
    inv.apply_claim(source_claim("c", "other", 3, true, |_| {}));
    inv.apply_claim(source_claim("p", "kcp", 4, false, |_| {}));
    assert_eq!(source_uids(&inv, "kcp"), ["uid-a", "uid-b"]);
    assert_eq!(source_uids(&inv, "other"), ["uid-c"]);

    // A claim that loses its source labels leaves the set; one that gains them joins it.
    inv.apply_claim(source_claim("a", "kcp", 5, false, |_| {}));
    inv.apply_claim(source_claim("p", "kcp", 6, true, |_| {}));
    assert_eq!(source_uids(&inv, "kcp"), ["uid-b", "uid-p"]);

    // The same uid seen in another namespace (the index keys claims by uid) moves with it.
    inv.apply_claim(source_claim("c", "kcp", 7, true, |_| {}));
    assert_eq!(source_uids(&inv, "kcp"), ["uid-b", "uid-c", "uid-p"]);
    assert!(source_uids(&inv, "other").is_empty());
    assert!(inv.source_kinds("other").is_empty());

    // A re-list that no longer contains a claim takes it out of the set too.
    let r = inv.begin_relist(Kind::Claim);
    for (n, rv) in [("c", 7), ("p", 6)] {
        inv.apply_claim(source_claim(n, "kcp", rv, true, |_| {}));
    }
    inv.end_relist(Kind::Claim, r, Some("8"));
    assert_eq!(source_uids(&inv, "kcp"), ["uid-c", "uid-p"]);
}

#[test]
fn an_older_view_of_a_source_claim_changes_nothing() {
    // The index refuses a view older than the one it holds (`admit`): its labels must not
    // move the claim between the sets either.
    let mut inv = Inventory::default();
    inv.apply_claim(source_claim("a", "kcp", 5, true, |_| {}));
    assert!(!inv.apply_claim(source_claim("a", "kcp", 4, false, |_| {})));
    assert_eq!(source_uids(&inv, "kcp"), ["uid-a"]);
    assert!(facts_of(&inv, "uid-a").is_some());
    assert!(!inv.apply_claim(source_claim("a", "other", 3, true, |_| {})));
    assert_eq!(source_uids(&inv, "kcp"), ["uid-a"]);
    assert!(source_uids(&inv, "other").is_empty());
}

/// A Runtime created naming a free binding: its adoption is refused (the binding carries no
/// tenant), yet its Shoot will be created on that binding, so the binding is in use from the
/// moment the claim exists, and counts once when the Shoot comes.
#[test]
fn a_binding_a_source_object_names_is_in_use_whatever_its_adoption_says() {
    use crate::api::{AccountClaimStatus, ClaimPhase};
    let mut inv = Inventory::default();
    inv.set_source_claim_namespace(Some("kcp".into()));
    inv.apply_binding(b("free", 1, None));
    let p = crate::pools::fixtures::pool("aws", false, false);
    assert_eq!(names(&inv.pool(&p).expect("pool").claimable), ["free"]);
    let adopting = |rv, deleting: bool| {
        source_claim("rt", "kcp", rv, true, |c| {
            c.spec.adopt_binding = Some("free".into());
            c.spec.shoot_name = Some("s-rt".into());
            c.status = Some(AccountClaimStatus {
                phase: Some(ClaimPhase::Pending),
                ..Default::default()
            });
            if deleting {
                c.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        "2026-11-27T04:00:00Z".parse().expect("a timestamp"),
                    ));
            }
        })
    };
    inv.apply_claim(adopting(2, false));
    assert_eq!(
        inv.clusters_on("free").iter().collect::<Vec<_>>(),
        ["s-rt"],
        "the named binding is used before the Shoot exists"
    );
    assert_eq!(
        inv.claims_on("free")
            .iter()
            .map(|(u, _)| u.as_str())
            .collect::<Vec<_>>(),
        ["uid-rt"]
    );
    inv.apply_shoot(shoot("s-rt", Some("free")));
    assert_eq!(
        inv.clusters_on("free").len(),
        1,
        "claim and Shoot are one cluster"
    );
    inv.delete_shoot("s-rt", Some("3"));
    // The object is going: its claim no longer holds the binding by itself.
    inv.apply_claim(adopting(4, true));
    assert!(inv.clusters_on("free").is_empty());
    assert!(inv.claims_on("free").is_empty());
}

/// Only the operator writes claims in the source claim namespace; a claim elsewhere that carries
/// source labels and names a binding is anyone's AccountClaim, and must not hold the binding
/// (it would keep another tenant's release from ever freeing it, or starve a pool).
#[test]
fn a_named_binding_counts_only_for_claims_in_the_source_claim_namespace() {
    let mut inv = Inventory::default();
    inv.set_source_claim_namespace(Some("kcp".into()));
    inv.apply_binding(b("victim", 1, None));
    let forged = source_claim("fake", "team-a", 2, true, |c| {
        c.spec.adopt_binding = Some("victim".into());
        c.spec.shoot_name = Some("s-fake".into());
    });
    inv.apply_claim(forged);
    assert!(
        inv.clusters_on("victim").is_empty(),
        "a claim outside the source claim namespace holds a binding it names"
    );
    let p = crate::pools::fixtures::pool("aws", false, false);
    assert_eq!(names(&inv.pool(&p).expect("pool").claimable), ["victim"]);
    // The same claim where the operator keeps source claims does hold it.
    inv.apply_claim(source_claim("real", "kcp", 3, true, |c| {
        c.spec.adopt_binding = Some("victim".into());
        c.spec.shoot_name = Some("s-real".into());
    }));
    assert_eq!(inv.clusters_on("victim").len(), 1);
}

fn names(set: &std::collections::BTreeSet<String>) -> Vec<&str> {
    set.iter().map(String::as_str).collect()
}
