//! The simulated API server: the true objects, one resourceVersion counter for all of them (as
//! etcd has), the log of every committed change per kind (what a watch replays), and the checks
//! of docs/design.md §5 made when a write commits, where the cause of a violation is still known.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use hap_operator::labels::{CLAIMED_BY, FILLING, PoolKey};
use hap_operator::ledger::Ledger;
use hap_operator::pools::{BindingView, ClaimView, Kind, ShootView};
use hap_operator::selection::MultiAccountPolicy;

thread_local! {
    /// The trace of the run in progress, while it is recorded: a run that found a violation is
    /// run again so, and its failure shows the interleaving step by step.
    pub static RECORDED: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// A line of the trace: printed when `HAP_SIM_TRACE` is set, kept while the run is recorded.
pub fn trace(line: impl FnOnce() -> String) {
    static PRINT: OnceLock<bool> = OnceLock::new();
    let print = *PRINT.get_or_init(|| std::env::var("HAP_SIM_TRACE").is_ok());
    RECORDED.with_borrow_mut(|kept| {
        if !print && kept.is_none() {
            return;
        }
        let line = line();
        if print {
            eprintln!("{line}");
        }
        if let Some(kept) = kept {
            kept.push(line);
        }
    });
}

pub const TENANTS: [&str; 4] = ["t0", "t1", "t2", "t3"];

/// The pools a claim can ask for: aws dedicated, aws euAccess dedicated, aws shared.
pub fn pools() -> [PoolKey; 3] {
    let p = |eu, shared| PoolKey {
        hyperscaler_type: "aws".into(),
        eu_access: eu,
        shared,
    };
    [p(false, false), p(true, false), p(false, true)]
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The operator's `accountpool.io/` annotations (the fill record).
    pub annotations: BTreeMap<String, String>,
    pub rv: u64,
}

impl Binding {
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels.get(k).map(String::as_str)
    }
    fn is(&self, k: &str) -> bool {
        self.label(k) == Some("true")
    }
    /// The dedicated pool the binding is in (not shared, not dirty), as the selectors read it.
    pub fn dedicated_pool(&self) -> Option<usize> {
        if self.labels.contains_key("shared") || self.labels.contains_key("dirty") {
            return None;
        }
        match self.label("euAccess") {
            None => Some(0),
            Some("true") => Some(1),
            Some(_) => None,
        }
    }
}

/// What a claim's status says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Never written.
    New,
    Pending(String),
    Bound(String),
    Failed(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub uid: String,
    pub name: String,
    pub tenant: String,
    pub pool: usize,
    pub shoot: Option<String>,
    pub phase: Phase,
    pub deleting: bool,
    pub rv: u64,
    /// The claim write its status records as sent (`status.claimWrite`): binding and base.
    pub intent: Option<(String, u64)>,
}

impl Claim {
    pub fn cluster(&self) -> String {
        self.shoot
            .clone()
            .unwrap_or_else(|| format!("kcp/{}", self.name))
    }
    pub fn bound(&self) -> Option<&str> {
        match &self.phase {
            Phase::Bound(b) => Some(b),
            _ => None,
        }
    }
    /// The binding the status records, Bound or Failed.
    pub fn recorded(&self) -> Option<&str> {
        match &self.phase {
            Phase::Bound(b) | Phase::Failed(b) => Some(b),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shoot {
    pub name: String,
    pub binding: Option<String>,
    pub rv: u64,
}

#[derive(Clone, Debug)]
pub enum Obj {
    Binding(Binding),
    Claim(Claim),
    Shoot(Shoot),
}

/// One committed change; `obj: None` is a deletion (`rv` is the deletion's revision).
#[derive(Clone, Debug)]
pub struct Change {
    pub rv: u64,
    pub key: String,
    pub obj: Option<Obj>,
}

pub const BINDINGS: usize = 0;
pub const CLAIMS: usize = 1;
pub const SHOOTS: usize = 2;

/// Why the server refused a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    Conflict,
    NotFound,
}

/// Who asked for a write, for the checks.
#[derive(Clone, Debug)]
pub struct Writer {
    pub replica: usize,
    pub claim: String,
}

pub struct Api {
    pub rv: u64,
    pub bindings: BTreeMap<String, Binding>,
    pub claims: BTreeMap<String, Claim>,
    pub shoots: BTreeMap<String, Shoot>,
    pub logs: [Vec<Change>; 3],
    pub policy: MultiAccountPolicy,
    pub limit: Option<u32>,
    /// The first binding each claim's status recorded (§5.5).
    first: BTreeMap<String, String>,
    /// Claims whose finalizer was removed, as they were last.
    gone: BTreeMap<String, Claim>,
    /// Bindings the operator must never write (§5.4), with their labels at the start.
    untouchable: BTreeMap<String, BTreeMap<String, String>>,
    pub violations: Vec<String>,
    pub step: usize,
    /// The write being sent is a paused leader's, landing after the next leader listed.
    pub late: bool,
    /// Bindings a late claim write labelled.
    late_claimed: BTreeSet<String>,
}

impl Api {
    pub fn new(
        bindings: Vec<Binding>,
        shoots: Vec<Shoot>,
        policy: MultiAccountPolicy,
        limit: Option<u32>,
    ) -> Self {
        let mut api = Api {
            rv: 0,
            bindings: BTreeMap::new(),
            claims: BTreeMap::new(),
            shoots: BTreeMap::new(),
            logs: Default::default(),
            policy,
            limit,
            first: BTreeMap::new(),
            gone: BTreeMap::new(),
            untouchable: BTreeMap::new(),
            violations: Vec::new(),
            step: 0,
            late: false,
            late_claimed: BTreeSet::new(),
        };
        for b in bindings {
            if b.is("shared") || b.is("internal") {
                api.untouchable.insert(b.name.clone(), b.labels.clone());
            }
            api.put_binding(b);
        }
        for s in shoots {
            api.put_shoot(s);
        }
        api
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn violation(&mut self, what: String) {
        self.violations.push(format!("step {}: {what}", self.step));
    }

    fn put_binding(&mut self, mut b: Binding) {
        b.rv = self.next_rv();
        trace(|| {
            format!(
                "  commit {} rv {} {:?} {:?}",
                b.name, b.rv, b.labels, b.annotations
            )
        });
        let change = Change {
            rv: b.rv,
            key: b.name.clone(),
            obj: Some(Obj::Binding(b.clone())),
        };
        self.logs[BINDINGS].push(change);
        self.bindings.insert(b.name.clone(), b);
    }

    fn put_claim(&mut self, mut c: Claim) {
        c.rv = self.next_rv();
        trace(|| {
            format!(
                "  commit {} rv {} {:?} deleting {}",
                c.uid, c.rv, c.phase, c.deleting
            )
        });
        let change = Change {
            rv: c.rv,
            key: c.uid.clone(),
            obj: Some(Obj::Claim(c.clone())),
        };
        self.logs[CLAIMS].push(change);
        self.claims.insert(c.uid.clone(), c);
    }

    pub fn put_shoot(&mut self, mut s: Shoot) {
        s.rv = self.next_rv();
        let change = Change {
            rv: s.rv,
            key: s.name.clone(),
            obj: Some(Obj::Shoot(s.clone())),
        };
        self.logs[SHOOTS].push(change);
        self.shoots.insert(s.name.clone(), s);
    }

    pub fn delete_shoot(&mut self, name: &str) {
        if self.shoots.remove(name).is_some() {
            let rv = self.next_rv();
            self.logs[SHOOTS].push(Change {
                rv,
                key: name.to_string(),
                obj: None,
            });
        }
    }

    /// A user creates a claim (with the release finalizer already in place).
    pub fn create_claim(&mut self, n: usize, tenant: usize, pool: usize) -> String {
        let c = Claim {
            uid: format!("u{n}"),
            name: format!("c{n}"),
            tenant: TENANTS[tenant].into(),
            pool,
            shoot: n.is_multiple_of(2).then(|| format!("s{n}")),
            phase: Phase::New,
            deleting: false,
            rv: 0,
            intent: None,
        };
        let uid = c.uid.clone();
        self.put_claim(c);
        uid
    }

    /// A user deletes a claim: its Shoot goes first, then the claim is marked deleting.
    pub fn delete_claim(&mut self, uid: &str) {
        let Some(c) = self.claims.get(uid).cloned() else {
            return;
        };
        if c.deleting {
            return;
        }
        if let Some(s) = &c.shoot {
            self.delete_shoot(s);
        }
        self.put_claim(Claim {
            deleting: true,
            ..c
        });
    }

    /// The clusters on a binding: live Shoots and non-deleting Bound claims, by name.
    pub fn clusters_on(&self, b: &str) -> BTreeSet<String> {
        let shoots = self
            .shoots
            .values()
            .filter(|s| s.binding.as_deref() == Some(b))
            .map(|s| s.name.clone());
        let claims = self
            .claims
            .values()
            .filter(|c| !c.deleting && c.bound() == Some(b))
            .map(Claim::cluster);
        shoots.chain(claims).collect()
    }

    /// Non-dirty dedicated bindings a tenant holds in a pool.
    pub fn held(&self, tenant: &str, pool: usize) -> Vec<String> {
        self.bindings
            .values()
            .filter(|b| b.label("tenantName") == Some(tenant) && b.dedicated_pool() == Some(pool))
            .map(|b| b.name.clone())
            .collect()
    }

    /// Compare-and-swap of one binding label.
    pub fn set_label(
        &mut self,
        name: &str,
        base: u64,
        key: &str,
        value: &str,
        by: &Writer,
    ) -> Result<u64, Refused> {
        let Some(b) = self.bindings.get(name).cloned() else {
            return Err(Refused::NotFound);
        };
        if b.rv != base {
            return Err(Refused::Conflict);
        }
        let claim = self.claims.get(&by.claim).cloned();
        if let Some(labels) = self.untouchable.get(name) {
            let _ = labels;
            self.violation(format!(
                "§5.4 replica {} wrote {key} on shared/internal {name}",
                by.replica
            ));
        }
        match key {
            "tenantName" => self.check_claim_write(&b, value, claim.as_ref(), by),
            "dirty" => self.check_release(&b, claim.as_ref(), by),
            _ => self.violation(format!("wrote unexpected label {key} on {name}")),
        }
        let mut b = b;
        b.labels.insert(key.into(), value.into());
        self.put_binding(b);
        Ok(self.rv)
    }

    fn check_claim_write(&mut self, b: &Binding, tenant: &str, claim: Option<&Claim>, by: &Writer) {
        let name = &b.name;
        if let Some(old) = b.label("tenantName") {
            self.violation(format!(
                "§5.1 {name} relabelled from {old} to {tenant} (replica {})",
                by.replica
            ));
        }
        if b.labels.contains_key("dirty") {
            self.violation(format!("§5.4 claimed dirty {name}"));
        }
        let Some(c) = claim else {
            return self.violation(format!("§5.1 {name} claimed for {tenant} without a claim"));
        };
        let Some(pool) = b.dedicated_pool() else {
            return self.violation(format!("claimed {name}, which is in no dedicated pool"));
        };
        if c.tenant != tenant || c.pool != pool {
            self.violation(format!(
                "§5.1 {name} claimed for {tenant} by claim {} of {} in pool {}",
                c.uid, c.tenant, c.pool
            ));
        }
        let held = self.held(tenant, pool);
        // A paused leader's claim write that lands after the next leader claimed for the tenant
        // (or the next leader's claim after such a write) cannot be stopped: the two writes go to
        // two bindings. It leaves a stray that no cluster uses and the claimant gives back; the
        // settled state must hold one binding per tenant and pool (`World::check_settled`).
        let late = self.late || held.iter().all(|h| self.late_claimed.contains(h));
        if self.late {
            self.late_claimed.insert(name.clone());
        }
        if !self.policy.allows(tenant) && !held.is_empty() && !late {
            self.violation(format!(
                "§5.2 replica {} claimed {name} for {tenant} (claim {}), which already holds {held:?} in pool {pool}",
                by.replica, c.uid
            ));
        }
    }

    fn check_release(&mut self, b: &Binding, claim: Option<&Claim>, by: &Writer) {
        let name = &b.name;
        // A claim whose finalizer went (its answer lost) may release again from a store that
        // still shows it: the release the last user's leaving calls for, if the checks below hold.
        let Some(c) = claim.or_else(|| self.gone.get(&by.claim)).cloned() else {
            return self.violation(format!("released {name} without a claim"));
        };
        let c = &c;
        if b.label("tenantName") != Some(c.tenant.as_str()) {
            self.violation(format!(
                "released {name} of {:?} for claim {} of {}",
                b.label("tenantName"),
                c.uid,
                c.tenant
            ));
        }
        if b.labels.contains_key("dirty") {
            self.violation(format!("released {name} twice"));
        }
        let users: BTreeSet<String> = self.clusters_on(name);
        if !users.is_empty() {
            self.violation(format!(
                "released {name} (claim {}, replica {}) while {users:?} use it",
                c.uid, by.replica
            ));
        }
    }

    /// Applies a claim's status, conditioned on its resourceVersion.
    pub fn set_status(
        &mut self,
        uid: &str,
        base: u64,
        phase: Phase,
        by: &Writer,
    ) -> Result<u64, Refused> {
        let Some(c) = self.claims.get(uid).cloned() else {
            return Err(Refused::NotFound);
        };
        if c.rv != base {
            return Err(Refused::Conflict);
        }
        if let Phase::Bound(b) | Phase::Failed(b) = &phase {
            match self.first.get(uid) {
                Some(first) if first != b => self.violation(format!(
                    "§5.5 claim {uid} moved from {first} to {b} (replica {})",
                    by.replica
                )),
                Some(_) => {}
                None => {
                    self.first.insert(uid.into(), b.clone());
                }
            }
        } else if let Some(first) = self.first.get(uid).cloned() {
            self.violation(format!(
                "§5.5 claim {uid} bound to {first} went back to {phase:?}"
            ));
        }
        if let (Phase::Bound(b), false) = (&phase, c.bound().is_some()) {
            self.check_new_cluster(&c, b, by);
        }
        // As `status::desired_claim_status`: the record goes once a status records its binding.
        let intent = c
            .intent
            .clone()
            .filter(|(b, _)| !matches!(&phase, Phase::Bound(p) | Phase::Failed(p) if p == b));
        self.put_claim(Claim { phase, intent, ..c });
        Ok(self.rv)
    }

    /// The record of a claim write in the claim's status, before the write; conditioned on the
    /// claim's resourceVersion (a status write).
    pub fn record_claim_write(
        &mut self,
        uid: &str,
        base: u64,
        binding: &str,
        binding_base: u64,
    ) -> Result<u64, Refused> {
        let c = self.claims.get(uid).cloned().ok_or(Refused::NotFound)?;
        if c.rv != base {
            return Err(Refused::Conflict);
        }
        let intent = Some((binding.to_string(), binding_base));
        self.put_claim(Claim { intent, ..c });
        Ok(self.rv)
    }

    /// The fence of an earlier claim write: one annotation of the binding, conditioned on the
    /// write's base version, which it moves.
    pub fn fence(&mut self, name: &str, base: u64, writer: &str) -> Result<u64, Refused> {
        let mut b = self.bindings.get(name).cloned().ok_or(Refused::NotFound)?;
        if b.rv != base {
            return Err(Refused::Conflict);
        }
        b.annotations.insert(
            hap_operator::labels::CLAIM_WRITE_FENCED.into(),
            writer.to_string(),
        );
        self.put_binding(b);
        Ok(self.rv)
    }

    fn check_new_cluster(&mut self, c: &Claim, name: &str, by: &Writer) {
        let Some(b) = self.bindings.get(name).cloned() else {
            return self.violation(format!("claim {} bound to missing {name}", c.uid));
        };
        if b.labels.contains_key("dirty") {
            self.violation(format!(
                "claim {} bound to dirty {name} (replica {})",
                c.uid, by.replica
            ));
        }
        let shared_pool = pools()[c.pool].shared;
        if shared_pool != b.is("shared") {
            self.violation(format!(
                "claim {} of pool {} bound to {name} of another pool",
                c.uid, c.pool
            ));
        }
        if !shared_pool && b.label("tenantName") != Some(c.tenant.as_str()) {
            self.violation(format!(
                "claim {} of {} bound to {name} of {:?} (replica {})",
                c.uid,
                c.tenant,
                b.label("tenantName"),
                by.replica
            ));
        }
        let on = self.clusters_on(name);
        let limit = self
            .limit
            .filter(|_| !shared_pool && self.policy.allows(&c.tenant));
        if let Some(l) = limit
            && !on.contains(&c.cluster())
            && on.len() >= l as usize
        {
            self.violation(format!(
                "§5.3 new cluster {} on {name} which has {} clusters, limit {l} (replica {})",
                c.cluster(),
                on.len(),
                by.replica
            ));
        }
    }

    /// Removes the release finalizer: the claim is gone.
    pub fn remove_finalizer(&mut self, uid: &str) -> Result<(), Refused> {
        match self.claims.get(uid) {
            Some(c) if c.deleting => {
                if let Some(c) = self.claims.remove(uid) {
                    self.gone.insert(uid.to_string(), c);
                }
                let rv = self.next_rv();
                self.logs[CLAIMS].push(Change {
                    rv,
                    key: uid.into(),
                    obj: None,
                });
                Ok(())
            }
            Some(_) => Err(Refused::Conflict),
            None => Err(Refused::NotFound),
        }
    }

    /// The whole-state checks after every step: the §5.4 bindings are unchanged and specs are
    /// never written (the model has no way to write a spec; the check keeps it honest).
    pub fn check_state(&mut self) {
        let changed: Vec<String> = self
            .untouchable
            .iter()
            .filter(|(n, l)| self.bindings.get(*n).is_none_or(|b| &b.labels != *l))
            .map(|(n, _)| n.clone())
            .collect();
        for n in changed {
            self.violation(format!("§5.4 {n} changed"));
        }
    }
}

/// The request-source path (tests/it/simulation_sources.rs, issue 19); `tests/it/simulation.rs` does
/// not use these.
#[allow(dead_code)]
impl Api {
    /// The webhook creates a claim named after a request object (`<kind>.<ns>.<name>`, issue 19);
    /// names are unique, as the API server's are, deleting claims included.
    pub fn create_named_claim(
        &mut self,
        uid: String,
        name: &str,
        tenant: usize,
        shoot: Option<String>,
    ) -> Result<u64, Refused> {
        if self.claims.values().any(|c| c.name == name) {
            return Err(Refused::Conflict);
        }
        self.put_claim(Claim {
            uid,
            name: name.to_string(),
            tenant: TENANTS[tenant].into(),
            pool: 0,
            shoot,
            phase: Phase::New,
            deleting: false,
            rv: 0,
            intent: None,
        });
        Ok(self.rv)
    }

    /// A change of the claim's metadata only (an annotation), conditioned on its resourceVersion:
    /// the new version is what a reader that took the old one conflicts with.
    pub fn touch_claim(&mut self, uid: &str, base: u64) -> Result<u64, Refused> {
        let c = self.claims.get(uid).cloned().ok_or(Refused::NotFound)?;
        if c.rv != base {
            return Err(Refused::Conflict);
        }
        self.put_claim(c);
        Ok(self.rv)
    }

    /// A DELETE with a uid and, when given, a resourceVersion precondition: the finalizer keeps
    /// the claim, marked deleting, until its release. Unlike `delete_claim`, nothing else goes.
    pub fn delete_claim_if(&mut self, uid: &str, rv: Option<u64>) -> Result<(), Refused> {
        let c = self.claims.get(uid).cloned().ok_or(Refused::NotFound)?;
        if rv.is_some_and(|rv| rv != c.rv) {
            return Err(Refused::Conflict);
        }
        if !c.deleting {
            self.put_claim(Claim {
                deleting: true,
                ..c
            });
        }
        Ok(())
    }

    /// A claim write: the tenant label and the claiming claim's `CLAIMED_BY` record in one
    /// compare-and-swap, with the checks of `set_label`.
    pub fn claim_binding(
        &mut self,
        name: &str,
        base: u64,
        tenant: &str,
        by: &Writer,
    ) -> Result<u64, Refused> {
        let b = self.bindings.get(name).cloned().ok_or(Refused::NotFound)?;
        if b.rv != base {
            return Err(Refused::Conflict);
        }
        if self.untouchable.contains_key(name) {
            self.violation(format!("§5.4 replica {} claimed {name}", by.replica));
        }
        let claim = self.claims.get(&by.claim).cloned();
        self.check_claim_write(&b, tenant, claim.as_ref(), by);
        let mut b = b;
        b.labels.insert("tenantName".into(), tenant.into());
        b.labels.insert(CLAIMED_BY.into(), by.claim.clone());
        self.put_binding(b);
        Ok(self.rv)
    }

    /// The record of a use: `FILLING` set to the claims being bound there and the `CLAIMED_BY`
    /// record removed (compare-and-swap), before the claim's status.
    pub fn record_use(
        &mut self,
        name: &str,
        base: u64,
        claims: &str,
        by: &Writer,
    ) -> Result<u64, Refused> {
        let mut b = self.bindings.get(name).cloned().ok_or(Refused::NotFound)?;
        if b.rv != base {
            return Err(Refused::Conflict);
        }
        if b.label(CLAIMED_BY) == Some(by.claim.as_str()) {
            self.violation(format!(
                "claim {} removed its own record from {name}",
                by.claim
            ));
        }
        if self.untouchable.contains_key(name) {
            self.violation(format!(
                "§5.4 replica {} recorded a use on {name}",
                by.replica
            ));
        }
        b.labels.remove(CLAIMED_BY);
        b.annotations.insert(FILLING.into(), claims.into());
        self.put_binding(b);
        Ok(self.rv)
    }

    /// A clean release: the tenant label and the `CLAIMED_BY` record go (compare-and-swap), the
    /// binding is free again and the cleanup job never sees it. The same checks as a release
    /// marking it dirty.
    pub fn release_clean(&mut self, name: &str, base: u64, by: &Writer) -> Result<u64, Refused> {
        let b = self.bindings.get(name).cloned().ok_or(Refused::NotFound)?;
        if b.rv != base {
            return Err(Refused::Conflict);
        }
        if self.untouchable.contains_key(name) {
            self.violation(format!("released {name} clean"));
        }
        let claim = self.claims.get(&by.claim).cloned();
        self.check_release(&b, claim.as_ref(), by);
        let mut b = b;
        b.labels.remove("tenantName");
        b.labels.remove(CLAIMED_BY);
        self.put_binding(b);
        Ok(self.rv)
    }
}

/// The view of a claim the operator's index keeps (both simulations read the API the same way).
pub fn claim_view(c: &Claim) -> ClaimView {
    ClaimView {
        namespace: "kcp".into(),
        name: c.name.clone(),
        uid: c.uid.clone(),
        resource_version: Some(c.rv.to_string()),
        global_account: c.tenant.clone(),
        shoot_name: c.shoot.clone(),
        bound_binding: c.recorded().map(str::to_string),
        lost: matches!(c.phase, Phase::Failed(_)),
        deleting: c.deleting,
        claim_write: c.intent.as_ref().map(|(b, rv)| {
            Box::new(hap_operator::api::PendingClaimWrite {
                binding: b.clone(),
                resource_version: rv.to_string(),
                ..Default::default()
            })
        }),
        ..Default::default()
    }
}

/// One object of a watch event into the replica's ledger.
pub fn apply(ledger: &mut Ledger, obj: &Obj) {
    match obj {
        Obj::Binding(b) => ledger.apply_binding(BindingView {
            name: b.name.clone(),
            resource_version: Some(b.rv.to_string()),
            labels: b.labels.clone().into(),
            annotations: b.annotations.clone(),
            ..Default::default()
        }),
        Obj::Claim(c) => ledger.apply_claim(claim_view(c)),
        Obj::Shoot(s) => ledger.apply_shoot(ShootView {
            error_codes: Vec::new(),
            name: s.name.clone(),
            resource_version: Some(s.rv.to_string()),
            binding: s.binding.clone(),
            ..Default::default()
        }),
    }
}

/// The index's kind of a watch by its number in this API.
pub fn kind_of(k: usize) -> Kind {
    match k {
        BINDINGS => Kind::Binding,
        CLAIMS => Kind::Claim,
        _ => Kind::Shoot,
    }
}
