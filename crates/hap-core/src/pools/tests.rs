//! The tests of `pools`.

use std::collections::BTreeSet;

use super::fixtures::*;
use super::*;

fn names<'a>(set: impl IntoIterator<Item = &'a String>) -> Vec<&'a str> {
    set.into_iter().map(String::as_str).collect()
}

fn clusters<'a>(c: Clusters<'a>) -> Vec<&'a str> {
    c.iter().collect()
}

#[test]
fn classification_follows_the_pool_selectors() {
    let inv = inventory(
        vec![
            binding("free", &[("hyperscalerType", "aws")]),
            binding("own", &[("hyperscalerType", "aws"), ("tenantName", "ga")]),
            binding(
                "dirty",
                &[
                    ("hyperscalerType", "aws"),
                    ("tenantName", "ga"),
                    ("dirty", "true"),
                ],
            ),
            binding("int", &[("hyperscalerType", "aws"), ("internal", "true")]),
            binding("eu", &[("hyperscalerType", "aws"), ("euAccess", "true")]),
            binding(
                "eu-false",
                &[("hyperscalerType", "aws"), ("euAccess", "false")],
            ),
            binding(
                "sh",
                &[
                    ("hyperscalerType", "aws"),
                    ("shared", "true"),
                    ("tenantName", "x"),
                ],
            ),
            binding("nolabel", &[]),
        ],
        vec![],
        vec![],
    );
    let m = inv.pool(&pool("aws", false, false)).unwrap();
    assert_eq!(names(&m.claimable), ["free"]);
    assert_eq!(
        names(inv.owned_by(&pool("aws", false, false), "ga")),
        ["own"]
    );
    assert_eq!(names(&m.dirty), ["dirty"]);
    assert_eq!(names(&m.internal_free), ["int"]);
    assert_eq!(
        names(&inv.pool(&pool("aws", true, false)).unwrap().claimable),
        ["eu"]
    );
    assert_eq!(
        names(&inv.pool(&pool("aws", false, true)).unwrap().shared),
        ["sh"]
    );
    assert_eq!(inv.binding("eu-false").unwrap().pool, None);
    assert_eq!(inv.binding("nolabel").unwrap().pool, None);
    assert!(inv.binding("int").unwrap().internal);
    assert_eq!(inv.pools().count(), 3);
}

#[test]
fn custom_label_keys_drive_classification() {
    let keys = ResolvedLabelKeys {
        tenant_name: "example.com/tenant".into(),
        ..Default::default()
    };
    let b = vec![binding(
        "a",
        &[("hyperscalerType", "gcp"), ("example.com/tenant", "ga")],
    )];
    let inv = Inventory::build(keys, b, vec![], vec![]);
    assert_eq!(names(inv.owned_by(&pool("gcp", false, false), "ga")), ["a"]);
}

#[test]
fn clusters_are_the_union_of_bound_claims_and_shoots_by_name() {
    let mut gone = claim("c4", "ga", Some("s4"), Some("b"));
    gone.deleting = true;
    let inv = inventory(
        vec![binding(
            "b",
            &[("hyperscalerType", "aws"), ("tenantName", "ga")],
        )],
        vec![
            claim("c1", "ga", Some("s1"), Some("b")),
            claim("c2", "ga", None, Some("b")),
            claim("c3", "ga", Some("s3"), None),
            gone,
        ],
        vec![
            shoot("s1", Some("b")),
            shoot("s2", Some("b")),
            shoot("s5", None),
        ],
    );
    assert_eq!(clusters(inv.clusters_on("b")), ["kcp/c2", "s1", "s2"]);
    assert_eq!(inv.bindings_of_cluster("s1"), ["b"]);
    let on: Vec<_> = inv
        .claims_on("b")
        .iter()
        .map(|(u, c)| (u.as_str(), c.as_str()))
        .collect();
    assert_eq!(on, [("uid-c1", "s1"), ("uid-c2", "kcp/c2")]);
    assert!(inv.clusters_on("nope").is_empty());
    assert!(inv.shoot("s5").is_some() && inv.shoot("s4").is_none());
    assert_eq!(inv.claim("uid-c4").map(|c| c.deleting), Some(true));
}

#[test]
fn figures_count_the_credential_kinds_of_each_pool() {
    let with = |name: &str, labels: &[(&str, &str)], credentials| BindingView {
        credentials,
        ..binding(name, labels)
    };
    let aws = [("hyperscalerType", "aws")];
    let inv = inventory(
        vec![
            with("s1", &aws, CredentialsKind::Secret),
            with("s2", &aws, CredentialsKind::Secret),
            with("w1", &aws, CredentialsKind::WorkloadIdentity),
            with(
                "d1",
                &[("hyperscalerType", "aws"), ("dirty", "true")],
                CredentialsKind::InternalSecret,
            ),
            with(
                "g1",
                &[("hyperscalerType", "gcp")],
                CredentialsKind::WorkloadIdentity,
            ),
            // In no pool: counted nowhere.
            with("x1", &[], CredentialsKind::InternalSecret),
        ],
        vec![],
        vec![],
    );
    let f = inv.figures(&pool("aws", false, false));
    assert_eq!(
        f.credentials,
        BTreeMap::from([
            (CredentialsKind::Secret, 2),
            (CredentialsKind::WorkloadIdentity, 1),
            (CredentialsKind::InternalSecret, 1),
        ])
    );
    assert_eq!(f.credentials.values().sum::<i64>(), f.total);
    let g = inv.figures(&pool("gcp", false, false));
    assert_eq!(
        g.credentials,
        BTreeMap::from([(CredentialsKind::WorkloadIdentity, 1)])
    );
    assert!(
        inv.figures(&pool("azure", false, false))
            .credentials
            .is_empty()
    );
    // In status the counts are keyed by kind name, and left out for a pool without bindings.
    let json = serde_json::to_value(&f).expect("serializes");
    assert_eq!(
        json["credentials"],
        serde_json::json!({"Secret": 2, "WorkloadIdentity": 1, "InternalSecret": 1})
    );
    let empty = serde_json::to_value(inv.figures(&pool("azure", false, false))).expect("json");
    assert!(empty.get("credentials").is_none(), "{empty}");
}

#[test]
fn figures_count_each_role() {
    let inv = inventory(
        vec![
            binding("f1", &[("hyperscalerType", "aws")]),
            binding("f2", &[("hyperscalerType", "aws")]),
            binding("o1", &[("hyperscalerType", "aws"), ("tenantName", "ga")]),
            binding(
                "d1",
                &[
                    ("hyperscalerType", "aws"),
                    ("tenantName", "gb"),
                    ("dirty", "true"),
                ],
            ),
            binding("i1", &[("hyperscalerType", "aws"), ("internal", "true")]),
            binding("s1", &[("hyperscalerType", "aws"), ("shared", "true")]),
        ],
        vec![claim("c1", "ga", Some("x"), Some("o1"))],
        vec![
            shoot("x", Some("o1")),
            shoot("y", Some("d1")),
            shoot("z", Some("s1")),
        ],
    );
    let f = inv.figures(&pool("aws", false, false));
    assert_eq!(
        (f.total, f.free, f.claimed, f.dirty, f.shared, f.clusters),
        (5, 2, 1, 1, false, 2)
    );
    let s = inv.figures(&pool("aws", false, true));
    assert_eq!(
        (s.total, s.free, s.claimed, s.shared, s.clusters),
        (1, 0, 0, true, 1)
    );
    let none = inv.figures(&pool("gcp", false, false));
    assert_eq!((none.hyperscaler_type.as_str(), none.total), ("gcp", 0));
    assert_eq!(inv.all_figures().len(), 2);
}

#[test]
fn orphans_skip_used_shared_internal_dirty_and_in_flight_bindings() {
    let inv = inventory(
        vec![
            binding("lost", &[("hyperscalerType", "aws"), ("tenantName", "ga")]),
            binding("used", &[("hyperscalerType", "aws"), ("tenantName", "ga")]),
            binding(
                "by-shoot",
                &[("hyperscalerType", "aws"), ("tenantName", "gb")],
            ),
            binding(
                "dirty",
                &[
                    ("hyperscalerType", "aws"),
                    ("tenantName", "gc"),
                    ("dirty", "true"),
                ],
            ),
            binding(
                "int",
                &[
                    ("hyperscalerType", "aws"),
                    ("tenantName", "gd"),
                    ("internal", "true"),
                ],
            ),
            binding(
                "sh",
                &[
                    ("hyperscalerType", "aws"),
                    ("tenantName", "ge"),
                    ("shared", "true"),
                ],
            ),
            binding("new", &[("hyperscalerType", "aws"), ("tenantName", "gf")]),
            binding("nopool", &[("tenantName", "gg")]),
            binding("free", &[("hyperscalerType", "aws")]),
        ],
        vec![claim("c", "ga", None, Some("used"))],
        vec![shoot("s", Some("by-shoot"))],
    );
    let in_flight = BTreeSet::from(["new".to_string()]);
    let o = inv.orphans(&in_flight);
    let got: Vec<_> = o
        .iter()
        .map(|o| {
            (
                o.binding.as_str(),
                o.tenant.as_str(),
                o.hyperscaler_type.as_str(),
            )
        })
        .collect();
    assert_eq!(got, [("lost", "ga", "aws"), ("nopool", "gg", "")]);
}

#[test]
fn a_deleting_claim_with_a_live_shoot_is_still_counted_through_the_shoot() {
    let mut c = claim("c", "ga", Some("s"), Some("b"));
    c.deleting = true;
    let inv = inventory(
        vec![binding("b", &[("hyperscalerType", "aws")])],
        vec![c],
        vec![shoot("s", Some("b"))],
    );
    assert_eq!(clusters(inv.clusters_on("b")), ["s"]);
}

#[test]
fn of_two_views_of_one_binding_the_later_version_wins_in_any_order() {
    let older = BindingView {
        resource_version: Some("41".into()),
        ..binding("b", &[("hyperscalerType", "aws")])
    };
    let newer = BindingView {
        resource_version: Some("42".into()),
        ..binding("b", &[("hyperscalerType", "aws"), ("tenantName", "ga")])
    };
    for views in [vec![older.clone(), newer.clone()], vec![newer, older]] {
        let inv = inventory(views, vec![], vec![]);
        let m = inv.pool(&pool("aws", false, false)).unwrap();
        assert!(m.claimable.is_empty());
        assert_eq!(names(inv.owned_by(&pool("aws", false, false), "ga")), ["b"]);
    }
}

#[test]
fn bindings_clusters_use_without_a_tenant_or_while_dirty_are_reported_and_not_free() {
    let aws = [("hyperscalerType", "aws")];
    let dirty = [
        ("hyperscalerType", "aws"),
        ("tenantName", "gb"),
        ("dirty", "true"),
    ];
    let mut bindings = vec![
        binding("d-idle", &dirty),
        binding("d-used", &dirty),
        binding("free", &aws),
    ];
    let mut shoots = vec![shoot("on-dirty", Some("d-used"))];
    for i in 0..12 {
        let name = format!("u{i:02}");
        bindings.push(binding(&name, &aws));
        shoots.push(shoot(&format!("s{i}"), Some(&name)));
    }
    let inv = inventory(bindings, vec![], shoots);
    let got = inv.bindings_in_use();
    let summary: Vec<(&str, i64, usize, Option<&String>)> = got
        .iter()
        .map(|b| {
            (
                b.reason.as_str(),
                b.count,
                b.bindings.len(),
                b.bindings.first(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                super::figures::IN_USE_WITHOUT_TENANT,
                12,
                super::figures::IN_USE_NAMED,
                Some(&"u00".to_string())
            ),
            (
                super::figures::DIRTY_IN_USE,
                1,
                1,
                Some(&"d-used".to_string())
            ),
        ]
    );
    let f = inv.figures(&pool("aws", false, false));
    assert_eq!((f.total, f.free, f.dirty), (15, 1, 2));
}

#[test]
fn a_shoot_on_a_force_migrated_binding_counts_on_the_pool_bindings_account() {
    let held = [("hyperscalerType", "aws"), ("tenantName", "ga")];
    let pool_binding = on_secret(binding("aws-01", &held), "aws-01");
    // Gardener's forced migration: a new, unlabelled CredentialsBinding on the same Secret.
    let migrated = on_secret(binding("force-migrated-aws-01", &[]), "aws-01");
    let other = on_secret(binding("aws-02", &[("hyperscalerType", "aws")]), "aws-02");
    let mut inv = inventory(
        vec![pool_binding, migrated, other],
        vec![],
        vec![shoot("s1", Some("force-migrated-aws-01"))],
    );
    assert_eq!(inv.clusters_on("aws-01").iter().collect::<Vec<_>>(), ["s1"]);
    assert!(inv.clusters_on_binding("aws-01").is_empty());
    assert!(inv.clusters_on("aws-02").is_empty());
    assert_eq!(
        inv.siblings("aws-01").collect::<Vec<_>>(),
        ["force-migrated-aws-01"]
    );
    let p = pool("aws", false, false);
    assert_eq!(inv.figures(&p).clusters, 1);
    // Reported under the pool binding's pool.
    let shared: Vec<_> = inv
        .bindings_in_use()
        .into_iter()
        .filter(|u| u.reason == crate::pools::figures::SHARED_ACCOUNT)
        .collect();
    assert_eq!(shared.len(), 1);
    assert_eq!(
        (shared[0].count, shared[0].bindings.clone()),
        (1, vec!["force-migrated-aws-01".to_string()])
    );
    // Held and used: not an orphan.
    assert!(inv.orphans(&Default::default()).is_empty());
    // The Shoot goes: the account is free of clusters again.
    inv.delete_shoot("s1", None);
    assert!(inv.clusters_on("aws-01").is_empty());
    assert_eq!(inv.figures(&p).clusters, 0);
}

#[test]
fn pool_figures_count_an_account_once_and_a_held_accounts_sibling_is_not_free() {
    let held = [("hyperscalerType", "aws"), ("tenantName", "ga")];
    // Both bindings of one Secret in the pool: one account, one cluster.
    let bindings = vec![
        on_secret(binding("aws-01", &held), "s"),
        on_secret(binding("aws-01-cb", &[("hyperscalerType", "aws")]), "s"),
    ];
    let p = pool("aws", false, false);
    let inv = inventory(bindings.clone(), vec![], vec![shoot("s1", Some("aws-01"))]);
    assert_eq!(inv.figures(&p).clusters, 1);
    assert_eq!(
        crate::pools::figures::scan::figures(&inv, &p),
        inv.figures(&p)
    );
    // Without clusters: the sibling of a held binding is not free (selection never takes it).
    let inv = inventory(bindings, vec![], vec![]);
    assert_eq!(inv.figures(&p).free, 0);
    assert_eq!(
        crate::pools::figures::scan::figures(&inv, &p),
        inv.figures(&p)
    );
}

#[test]
fn a_binding_whose_sibling_a_tenant_holds_is_held_by_that_tenant() {
    let inv = inventory(
        vec![
            on_secret(
                binding(
                    "aws-01",
                    &[("hyperscalerType", "aws"), ("tenantName", "ga")],
                ),
                "s",
            ),
            on_secret(binding("aws-01-cb", &[("hyperscalerType", "aws")]), "s"),
            on_secret(binding("aws-02", &[("hyperscalerType", "aws")]), "t"),
        ],
        vec![],
        vec![],
    );
    assert_eq!(
        inv.account_held_by_sibling("aws-01-cb"),
        Some(("aws-01", "tenantName=ga".to_string()))
    );
    assert_eq!(inv.account_held_by_sibling("aws-01"), None);
    assert_eq!(inv.account_held_by_sibling("aws-02"), None);
}

#[test]
fn a_shared_internal_withheld_or_unpooled_labelled_sibling_holds_the_account() {
    let held = [
        (
            vec![("hyperscalerType", "aws"), ("shared", "true")],
            "shared=true",
        ),
        (
            vec![("hyperscalerType", "aws"), ("internal", "true")],
            "internal=true",
        ),
        (
            vec![
                ("hyperscalerType", "aws"),
                ("accountpool.io/cordoned", "true"),
            ],
            "accountpool.io/cordoned=true",
        ),
        (
            vec![
                ("hyperscalerType", "aws"),
                ("accountpool.io/cleanup-failed", "true"),
            ],
            "accountpool.io/cleanup-failed=true",
        ),
        // In no pool (no hyperscalerType): its labels still say the account is taken.
        (vec![("tenantName", "gb")], "tenantName=gb"),
        (vec![("dirty", "true")], "dirty=true"),
    ];
    for (labels, why) in held {
        let inv = inventory(
            vec![
                on_secret(binding("aws-01", &labels), "s"),
                on_secret(binding("aws-01-cb", &[("hyperscalerType", "aws")]), "s"),
            ],
            vec![],
            vec![],
        );
        let got = inv.account_held_by_sibling("aws-01-cb");
        assert_eq!(got.as_ref().map(|(s, _)| *s), Some("aws-01"), "{labels:?}");
        assert!(format!("{got:?}").contains(why), "{got:?}, not {why}");
    }
    // An unlabelled force-migrated sibling does not hold it.
    let inv = inventory(
        vec![
            on_secret(binding("force-migrated-aws-01", &[]), "s"),
            on_secret(binding("aws-01", &[("hyperscalerType", "aws")]), "s"),
        ],
        vec![],
        vec![],
    );
    assert_eq!(inv.account_held_by_sibling("aws-01"), None);
}

#[test]
fn a_binding_view_keeps_its_account_in_eight_bytes() {
    // 112 bytes without the account: it adds 8, and no heap.
    assert_eq!(std::mem::size_of::<Option<crate::pools::Account>>(), 8);
    assert!(
        std::mem::size_of::<BindingView>() <= 120,
        "{}",
        std::mem::size_of::<BindingView>()
    );
}

/// A Shoot naming a SecretBinding (`spec.secretBindingName`).
fn shoot_on_sb(name: &str, binding: &str) -> ShootView {
    ShootView {
        binding_kind: BindingKind::SecretBinding,
        ..shoot(name, Some(binding))
    }
}

/// A binding of the other kind on the Secret `secret` of the garden namespace.
fn other_on(secret: &str, rv: &str) -> OtherBinding {
    OtherBinding {
        resource_version: Some(rv.into()),
        account: Account::of_secret(Some("garden"), None, secret),
    }
}

#[test]
fn on_secret_bindings_a_shoot_on_a_credentials_binding_counts_with_its_account() {
    let aws = ("hyperscalerType", "aws");
    let mut inv = Inventory::new(Default::default());
    inv.set_binding_kind(BindingKind::SecretBinding);
    inv.apply_binding(on_secret(binding("aws-01", &[aws]), "aws-01"));
    // A SecretBinding and a CredentialsBinding of one name, on different Secrets.
    inv.apply_binding(on_secret(binding("aws-02", &[aws]), "aws-02"));
    // The Shoot first: Gardener moved it before the binding was listed.
    inv.apply_shoot(shoot("s1", Some("force-migrated-aws-01")));
    assert!(inv.clusters_on("aws-01").is_empty());
    assert!(inv.apply_other_binding("force-migrated-aws-01", other_on("aws-01", "5")));
    inv.apply_other_binding("aws-02", other_on("elsewhere", "6"));
    inv.apply_shoot(shoot("s2", Some("aws-02")));
    assert_eq!(inv.clusters_on("aws-01").iter().collect::<Vec<_>>(), ["s1"]);
    assert!(inv.clusters_on("aws-02").is_empty(), "another Secret");
    assert_eq!(
        inv.siblings("aws-01").collect::<Vec<_>>(),
        ["CredentialsBinding/force-migrated-aws-01"]
    );
    assert_eq!(inv.figures(&pool("aws", false, false)).clusters, 1);
    let shared: Vec<_> = inv
        .bindings_in_use()
        .into_iter()
        .filter(|u| u.reason == crate::pools::figures::SHARED_ACCOUNT)
        .collect();
    assert_eq!(
        shared[0].bindings,
        ["CredentialsBinding/force-migrated-aws-01"]
    );
    // An older event of the other binding changes nothing; its deletion ends the count.
    assert!(!inv.apply_other_binding("force-migrated-aws-01", other_on("aws-02", "4")));
    assert!(inv.delete_other_binding("force-migrated-aws-01", Some("7")));
    assert!(inv.clusters_on("aws-01").is_empty());
    assert_eq!(inv.siblings("aws-01").count(), 0);
}

#[test]
fn on_credentials_bindings_a_shoot_still_on_a_secret_binding_counts_with_its_account() {
    let aws = ("hyperscalerType", "aws");
    let mut inv = Inventory::new(Default::default());
    inv.apply_binding(on_secret(binding("aws-1a", &[aws]), "acct-1"));
    inv.apply_binding(on_secret(binding("acct-1", &[aws]), "acct-9"));
    inv.apply_other_binding("acct-1", other_on("acct-1", "3"));
    inv.apply_shoot(shoot_on_sb("s1", "acct-1"));
    assert_eq!(inv.clusters_on("aws-1a").iter().collect::<Vec<_>>(), ["s1"]);
    // Not the CredentialsBinding of the same name: it references another Secret.
    assert!(inv.clusters_on("acct-1").is_empty());
    assert_eq!(
        inv.shoot("s1").and_then(|s| s.binding.as_deref()),
        Some("SecretBinding/acct-1")
    );
    // Label keys change: every binding is classified again, the other kind stays counted.
    let keys = crate::labels::ResolvedLabelKeys::from_spec(Some(&crate::api::LabelKeys {
        tenant_name: Some("tenant".into()),
        ..Default::default()
    }));
    inv.set_keys(keys);
    assert_eq!(inv.clusters_on("aws-1a").iter().collect::<Vec<_>>(), ["s1"]);
    inv.clear_bindings();
    inv.apply_binding(on_secret(binding("aws-1a", &[aws]), "acct-1"));
    assert_eq!(inv.clusters_on("aws-1a").iter().collect::<Vec<_>>(), ["s1"]);
}

#[test]
fn a_change_of_binding_kind_counts_every_shoot_again_under_its_new_key() {
    let aws = ("hyperscalerType", "aws");
    let mut inv = Inventory::new(Default::default());
    inv.apply_other_binding("acct-1", other_on("acct-1", "3"));
    inv.apply_shoot(shoot_on_sb("s1", "acct-1"));
    inv.apply_shoot(shoot("s2", Some("cb-1")));
    inv.set_binding_kind(BindingKind::SecretBinding);
    // The other kind's bindings went with the switch; its watch lists them again.
    assert_eq!(inv.other_bindings().count(), 0);
    assert_eq!(
        inv.shoot("s1").and_then(|s| s.binding.as_deref()),
        Some("acct-1")
    );
    assert_eq!(
        inv.shoot("s2").and_then(|s| s.binding.as_deref()),
        Some("CredentialsBinding/cb-1")
    );
    inv.apply_binding(on_secret(binding("acct-1", &[aws]), "acct-1"));
    assert_eq!(inv.clusters_on("acct-1").iter().collect::<Vec<_>>(), ["s1"]);
    inv.apply_other_binding("cb-1", other_on("acct-1", "4"));
    assert_eq!(inv.clusters_on("acct-1").len(), 2);
}

#[test]
fn a_relist_of_the_other_kind_drops_what_it_did_not_name() {
    let mut inv = Inventory::new(Default::default());
    inv.apply_binding(on_secret(
        binding("aws-1a", &[("hyperscalerType", "aws")]),
        "acct-1",
    ));
    inv.apply_other_binding("acct-1", other_on("acct-1", "3"));
    inv.apply_shoot(shoot_on_sb("s1", "acct-1"));
    assert_eq!(inv.clusters_on("aws-1a").len(), 1);
    let r = inv.begin_relist(Kind::Other);
    inv.end_relist(Kind::Other, r, Some("10"));
    assert_eq!(inv.other_bindings().count(), 0);
    assert!(inv.clusters_on("aws-1a").is_empty());
}

#[test]
fn on_secret_bindings_shoots_failing_on_a_credentials_binding_make_the_account_suspect() {
    let aws = ("hyperscalerType", "aws");
    let mut inv = Inventory::new(Default::default());
    inv.set_binding_kind(BindingKind::SecretBinding);
    inv.set_lifecycle_rules(LifecycleRules {
        codes: vec!["ERR_INFRA_UNAUTHORIZED".into()],
        threshold: 1,
        cooldown: None,
        ..Default::default()
    });
    let held = [aws, ("tenantName", "ga")];
    inv.apply_binding(on_secret(binding("aws-01", &held), "aws-01"));
    inv.apply_other_binding("force-migrated-aws-01", other_on("aws-01", "3"));
    inv.apply_shoot(ShootView {
        error_codes: vec!["ERR_INFRA_UNAUTHORIZED".into()],
        ..shoot("s1", Some("force-migrated-aws-01"))
    });
    assert_eq!(
        inv.binding_state("aws-01").map(|(_, s)| s),
        Some(lifecycle::BindingState::Suspect)
    );
    inv.delete_other_binding("force-migrated-aws-01", Some("4"));
    assert_eq!(
        inv.binding_state("aws-01").map(|(_, s)| s),
        Some(lifecycle::BindingState::Claimed)
    );
}

#[test]
fn releases_under_way_are_the_deleting_claims_that_still_record_a_binding() {
    let bound = |name: &str, deleting: bool, lost: bool| ClaimView {
        deleting,
        lost,
        resource_version: Some("1".into()),
        ..claim(name, "ga", None, Some("b"))
    };
    let newer = |c: ClaimView| ClaimView {
        resource_version: Some("2".into()),
        ..c
    };
    let mut inv = inventory(
        vec![binding(
            "b",
            &[("hyperscalerType", "aws"), ("tenantName", "ga")],
        )],
        vec![
            bound("c1", true, false),
            bound("c2", false, false),
            bound("c3", true, true),
            ClaimView {
                deleting: true,
                ..claim("c4", "ga", None, None)
            },
        ],
        vec![],
    );
    assert_eq!(inv.releasing(), 1, "only c1");
    assert!(inv.apply_claim(newer(bound("c2", true, false))));
    assert_eq!(inv.releasing(), 2);
    assert!(inv.apply_claim(newer(ClaimView {
        deleting: true,
        ..claim("c1", "ga", None, None)
    })));
    assert_eq!(
        inv.releasing(),
        1,
        "c1's status no longer records the binding"
    );
    inv.delete_claim("uid-c2", Some("3"));
    assert_eq!(inv.releasing(), 0);
}

#[test]
fn a_cleanup_failed_sibling_closes_the_account_to_new_clusters() {
    // The cleanup job's mark is the account's: the account may still hold what the job could
    // not remove, whichever binding of it carries the mark. No new cluster goes in through the
    // other binding either (a reuse, an adoption); one counted on the account already stays.
    use crate::pools::lifecycle::{CLEANUP_FAILED, closed_to};
    let held = [("hyperscalerType", "aws"), ("tenantName", "ga")];
    let inv = inventory(
        vec![
            on_secret(binding("x", &held), "s"),
            on_secret(binding("y", &[(CLEANUP_FAILED, "true")]), "s"),
            binding("alone", &held),
        ],
        vec![],
        vec![shoot("s1", Some("x"))],
    );
    assert!(closed_to(&inv, "x", "s2"), "a new cluster through x");
    assert!(
        !closed_to(&inv, "x", "s1"),
        "a cluster on the account stays"
    );
    assert!(!closed_to(&inv, "alone", "s2"));
}
