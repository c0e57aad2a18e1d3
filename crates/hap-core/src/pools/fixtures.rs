//! Views, pools and inventories for tests: the core's unit tests and, with the `fixtures`
//! feature, the operator's.

use super::*;

pub fn binding(name: &str, labels: &[(&str, &str)]) -> BindingView {
    BindingView {
        name: name.into(),
        resource_version: Some(format!("rv-{name}")),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

pub fn claim(name: &str, ga: &str, shoot: Option<&str>, bound: Option<&str>) -> ClaimView {
    ClaimView {
        namespace: "kcp".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        global_account: ga.into(),
        shoot_name: shoot.map(Into::into),
        bound_binding: bound.map(Into::into),
        ..Default::default()
    }
}

pub fn shoot(name: &str, binding: Option<&str>) -> ShootView {
    ShootView {
        name: name.into(),
        binding: binding.map(Into::into),
        ..Default::default()
    }
}

pub fn pool(t: &str, eu: bool, shared: bool) -> PoolKey {
    PoolKey {
        hyperscaler_type: t.into(),
        eu_access: eu,
        shared,
    }
}

pub fn inventory(b: Vec<BindingView>, c: Vec<ClaimView>, s: Vec<ShootView>) -> Inventory {
    Inventory::build(ResolvedLabelKeys::default(), b, c, s)
}

/// `view` referencing the Secret `secret` of the garden namespace.
pub fn on_secret(mut view: BindingView, secret: &str) -> BindingView {
    view.account = Account::of_secret(Some("garden"), None, secret);
    view
}
