//! Reconcile of HapConfig: decide which generation is in force, point the binding and Shoot
//! watches at it, compute pool figures, orphans and bindings in use without a tenant or while
//! dirty (with an Event when that set changes), run the internal-state refresh cycle, and apply
//! the status.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::Context;
use crate::api::{HapConfig, PoolFigures, PreferenceStatus, RuleStatus};
use crate::diag::Diagnostic;
use crate::k8s::K8sError;
use crate::k8s::active::{ActiveConfig, ConfigState, Hold, LastGood};
use crate::k8s::last_good::LastGoodApi;
use crate::pools::Inventory;
use crate::selection::InFlight;
use crate::status::{
    ConfigInputs, MissingPool, bindings_in_use_event, cleanup_failed_events, config_status_changed,
    cordon_event, desired_config_status, pool_low_event, set_accounts_condition,
    set_pool_low_condition, suspect_event,
};

/// Records each newly valid generation in the operator's own ConfigMap, once per generation.
pub struct LastGoodWriter {
    api: LastGoodApi,
    written: std::sync::Mutex<Option<(String, i64)>>,
}

impl LastGoodWriter {
    pub fn new(api: LastGoodApi, recorded: Option<&LastGood>) -> Self {
        Self {
            api,
            written: std::sync::Mutex::new(recorded.map(|g| (g.uid.clone(), g.generation))),
        }
    }

    /// Writes the record when `active` is not the one written last. A failed write is reported
    /// and tried again on the next reconcile; serving does not depend on it.
    async fn record(&self, writer: &crate::k8s::writes::Writer, active: &ActiveConfig) {
        let key = (active.uid.clone(), active.generation);
        if self
            .written
            .lock()
            .ok()
            .is_some_and(|w| w.as_ref() == Some(&key))
        {
            return;
        }
        match writer.put_last_good(&self.api, &LastGood::of(active)).await {
            Ok(()) => {
                if let Ok(mut w) = self.written.lock() {
                    *w = Some(key);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot record the last valid HapConfig generation; a restart while the spec is invalid would hold claims")
            }
        }
    }
}

/// When the internal state was last rebuilt, per config object.
#[derive(Default)]
pub struct RefreshClock {
    last: Option<(String, Instant, Timestamp)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("writing the status of HapConfig {name}")]
    Write {
        name: String,
        #[source]
        source: K8sError,
    },
}

#[tracing::instrument(name = "reconcile", skip_all, fields(
    controller = "hapconfig",
    config = %cfg.name_any(),
    generation = cfg.metadata.generation,
))]
pub async fn reconcile(cfg: Arc<HapConfig>, ctx: Arc<Context>) -> Result<Action, ConfigError> {
    let started = Instant::now();
    let name = cfg.name_any();
    let now = Time(Timestamp::now());
    let result = if name != ctx.args.config_name
        && (!ctx.args.mark_ignored_configs || served_elsewhere(&cfg))
    {
        Ok(Action::await_change())
    } else if name != ctx.args.config_name {
        let input = ConfigInputs {
            generation: cfg.metadata.generation,
            ignored_in_favour_of: Some(ctx.args.config_name.clone()),
            ..Default::default()
        };
        write(
            &ctx,
            &cfg,
            desired_config_status(cfg.status.as_ref(), &input, &now),
        )
        .await
        .map(|_| Action::await_change())
    } else {
        reconcile_in_force(&cfg, &ctx, &now).await
    };
    ctx.metrics
        .reconcile_seconds
        .get_or_create(&crate::metrics::ControllerLabels {
            controller: "hapconfig".into(),
        })
        .observe(started.elapsed().as_secs_f64());
    match result {
        // The status moved since the copy this reconcile read (usually the operator's own last
        // write, not yet back through the watch): expected, not worth a warning; compute again.
        Err(ConfigError::Write {
            name,
            source: K8sError::Conflict { .. },
        }) => {
            tracing::debug!(config = %name, "HapConfig status changed meanwhile; computing it again");
            Ok(Action::requeue(ctx.backoff.conflict()))
        }
        other => {
            // A pass that succeeded ends the run of failures: the next failure waits the base
            // delay again, not the cap the last run reached.
            if other.is_ok() {
                ctx.backoff.reset(&backoff_key(&name));
            }
            other
        }
    }
}

/// The config's key in the per-object backoff.
fn backoff_key(name: &str) -> String {
    format!("hapconfig/{name}")
}

async fn reconcile_in_force(
    cfg: &HapConfig,
    ctx: &Context,
    now: &Time,
) -> Result<Action, ConfigError> {
    let generation = cfg.metadata.generation;
    let state = ctx.resolver.resolve_object(cfg);
    let hold = state.hold();
    let mut input = ConfigInputs {
        generation,
        ..Default::default()
    };
    let active = match validity(&state, &mut input) {
        Validity::Missing => return Ok(Action::await_change()),
        Validity::Invalid => None,
        Validity::Active { active, current } => {
            if current {
                ctx.last_good.record(&ctx.writer, active).await;
            }
            Some(active.clone())
        }
    };
    if !input.errors.is_empty() && was_valid_before(cfg) {
        let note = format!(
            "generation {} is invalid: {}",
            generation.unwrap_or(0),
            input.errors.join("; ")
        );
        ctx.writer
            .event(
                &cfg.object_ref(&()),
                true,
                "ConfigInvalid",
                "Validate",
                note,
            )
            .await;
    }
    let mut requeue = ctx.args.resync;
    if let Some(active) = &active {
        requeue = gather(cfg, ctx, (active, hold), &mut input).await;
    }
    let settled = active.is_some() && input.progressing.is_none();
    let mut desired = desired_config_status(cfg.status.as_ref(), &input, now);
    let paused = active.as_ref().map(|_| hold.paused);
    super::lifecycle::pause(ctx, cfg, paused, &mut desired, now);
    if settled {
        set_accounts_condition(&mut desired, generation, now);
        set_pool_low_condition(&mut desired, generation, now);
    }
    let events = [
        bindings_in_use_event(cfg.status.as_ref(), &desired),
        cordon_event(cfg.status.as_ref(), &desired),
        suspect_event(cfg.status.as_ref(), &desired),
        pool_low_event(cfg.status.as_ref(), &desired),
    ];
    let failed = cleanup_failed_events(cfg.status.as_ref(), &desired);
    let observed = cfg.status.as_ref().and_then(|s| s.observation.as_ref());
    let disagreements = crate::status::disagreement_events(observed, desired.observation.as_ref());
    write(ctx, cfg, desired).await?;
    // After the write: a status write that conflicts is computed again, and only the one that
    // lands reports the change.
    let events = events
        .into_iter()
        .flatten()
        .chain(failed)
        .chain(disagreements);
    for (warning, reason, note) in events.filter(|_| settled) {
        ctx.writer
            .event(&cfg.object_ref(&()), warning, reason, "Select", note)
            .await;
    }
    Ok(Action::requeue(requeue))
}

/// What the config's state says for its status.
enum Validity<'a> {
    Missing,
    Invalid,
    /// Rules in force; `current`: the current generation is the one in force.
    Active {
        active: &'a Arc<ActiveConfig>,
        current: bool,
    },
}

/// Reads the config's validation into `input` (errors, warnings, the generation in force).
fn validity<'a>(state: &'a ConfigState, input: &mut ConfigInputs) -> Validity<'a> {
    let strings = |v: &[_]| -> Vec<String> { v.iter().map(ToString::to_string).collect() };
    match state {
        ConfigState::Missing => Validity::Missing,
        ConfigState::Invalid { validation, .. } => {
            input.errors = strings(&validation.errors);
            input.warnings = strings(&validation.warnings);
            Validity::Invalid
        }
        ConfigState::Active {
            active,
            current_invalid,
            ..
        } => {
            match current_invalid {
                Some(v) => {
                    input.errors = strings(&v.errors);
                    input.warnings = strings(&v.warnings);
                }
                None => input.warnings = strings(&active.warnings),
            }
            input.active_generation = Some(active.generation);
            input.active_spec = Some(Box::new(active.spec.clone()));
            Validity::Active {
                active,
                current: current_invalid.is_none(),
            }
        }
    }
}

/// The figures of a config in force: pools, orphans, refused writes, lifecycle and sources,
/// from the index once the caches have listed (until then what was reported stays, so that no
/// Event says it was resolved). Returns when to come back.
async fn gather(
    cfg: &HapConfig,
    ctx: &Context,
    (active, hold): (&Arc<ActiveConfig>, Hold),
    input: &mut ConfigInputs,
) -> Duration {
    let mut requeue = ctx.args.resync;
    super::point_caches(ctx);
    if !super::caches_ready(ctx) {
        input.progressing = Some(progress_message(ctx));
        let reported = cfg.status.as_ref();
        input.bindings_in_use = reported
            .map(|s| s.bindings_in_use.clone())
            .unwrap_or_default();
        input.pools = reported.map(|s| s.pools.clone()).unwrap_or_default();
        // The source pass waits for the claim list (`sources::pass`): what it reported last
        // stays until it runs, instead of an empty list and a dropped SourcesAvailable.
        input.sources = reported
            .map(|s| s.request_sources.clone())
            .unwrap_or_default();
        input.observation = reported
            .and_then(|s| s.observation.clone())
            .filter(|_| hold.observing);
        requeue = Duration::from_millis(500);
    } else {
        if let Some(next) = refresh_if_due(cfg, active, ctx).await {
            requeue = requeue.min(next);
        }
        input.observation = observe(cfg, ctx, active, hold.observing).await;
        let mut ledger = ctx.ledger();
        let releasing = ledger.inventory.releasing();
        super::lifecycle::releases_held(ctx, &cfg.name_any(), hold, releasing);
        fill_pools(input, active, &ledger.inventory, &ledger.inflight);
        // The caches are in sync here: a binding they lack was deleted, or is another target's.
        ctx.denials
            .forget_missing(|b| ledger.inventory.binding(b).is_some(), Instant::now());
        input.refused_writes = ctx.denials.refusals();
        export_metrics(ctx, &mut ledger.inventory, &input.orphans);
        input.pools = super::lifecycle::pools(ctx, &active.spec, &mut ledger.inventory);
        input.sources = ctx.sources.statuses();
    }
    input.last_refresh_time = ctx.refresh.lock().ok().and_then(|c| {
        c.last
            .as_ref()
            .filter(|(uid, _, _)| *uid == active.uid)
            .map(|(_, _, t)| Time(*t))
    });
    requeue
}

/// In `spec.mode: Observe`: the landscape's requests against the bindings in use, read again
/// when due (`status::observation_due`), else the observation reported last.
async fn observe(
    cfg: &HapConfig,
    ctx: &Context,
    active: &ActiveConfig,
    observing: bool,
) -> Option<crate::api::ObservationStatus> {
    if !observing {
        return None;
    }
    let last = cfg.status.as_ref().and_then(|s| s.observation.as_ref());
    let now = Time(Timestamp::now());
    let generation = Some(active.generation);
    if !crate::status::observation_due(last, generation, &now, ctx.args.resync) {
        return last.cloned();
    }
    let shoot_namespace = active.shoot_namespace();
    let at = crate::k8s::observe::Where {
        shoot_namespace: &shoot_namespace,
        runtime_namespace: active
            .spec
            .observe_runtime_namespace
            .as_deref()
            .unwrap_or(DEFAULT_RUNTIME_NAMESPACE),
        binding_namespace: &active.spec.binding_namespace,
        claim_namespace: ctx.args.claim_namespace.as_deref(),
    };
    let read = crate::k8s::observe::observed_requests(&ctx.writer, &at).await;
    let snapshot = crate::status::observe::BindingSnapshot::of(&ctx.ledger().inventory);
    let report = snapshot.report(&active.rules, &read.requests);
    let o = crate::status::observation(&report, &read.notes, generation, &now);
    tracing::info!(config = %cfg.name_any(), requests = o.requests, verdicts = ?o.verdicts, "observed the landscape (spec.mode: Observe)");
    Some(o)
}

/// Where KEB keeps its Runtimes, as `hap migrate --report` assumes too.
const DEFAULT_RUNTIME_NAMESPACE: &str = "kcp-system";

/// Whether another operator instance serves this config (it is that instance's `--config-name`):
/// its status has been evaluated as a config in force (`RulesValid` is only written for one). Such
/// a config is left alone, so that two instances sharing a cluster never overwrite each other's
/// status, whatever `--mark-ignored-configs` says.
pub(crate) fn served_elsewhere(cfg: &HapConfig) -> bool {
    cfg.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == crate::api::conditions::types::RULES_VALID)
    })
}

fn was_valid_before(cfg: &HapConfig) -> bool {
    cfg.status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == crate::api::conditions::types::RULES_VALID)
        })
        .is_some_and(|c| c.status == "True")
}

/// What `Reconciling` says while the binding and Shoot caches have not listed.
fn progress_message(ctx: &Context) -> String {
    let errors: Vec<String> = [
        ctx.caches.bindings.error(),
        ctx.caches.others.error(),
        ctx.caches.shoots.error(),
    ]
    .into_iter()
    .flatten()
    .collect();
    if errors.is_empty() {
        "listing bindings and Shoots".into()
    } else {
        format!("listing bindings and Shoots: {}", errors.join("; "))
    }
}

async fn write(
    ctx: &Context,
    cfg: &HapConfig,
    desired: crate::api::HapConfigStatus,
) -> Result<(), ConfigError> {
    if !config_status_changed(cfg.status.as_ref(), &desired) {
        return Ok(());
    }
    let name = cfg.name_any();
    ctx.writer
        .apply_config_status(&name, cfg.metadata.resource_version.as_deref(), &desired)
        .await
        .map_err(|source| ConfigError::Write { name, source })
}

/// Per-rule pool figures, missing pools and orphans.
fn fill_pools(
    input: &mut ConfigInputs,
    active: &ActiveConfig,
    inv: &Inventory,
    inflight: &InFlight,
) {
    input.missing_pools = missing_pools(&active.rules, inv)
        .into_iter()
        .map(|d| MissingPool {
            index: d.index.and_then(|i| i64::try_from(i).ok()).unwrap_or(0),
            entry: d.entry.clone().unwrap_or_default(),
            selector: between_backticks(&d.message)
                .unwrap_or(&d.message)
                .to_string(),
        })
        .collect();
    let reaching = |p: &crate::rules::PreferenceInfo| -> Vec<PoolFigures> {
        inv.pools()
            .filter(|(key, _)| p.reaches(key))
            .map(|(key, _)| inv.figures(key))
            .collect()
    };
    input.rules = active
        .rules
        .entries()
        .iter()
        .map(|e| {
            let pools = e.preferences.first().map(&reaching).unwrap_or_default();
            // Per preference only for entries with fallbacks; the top level is the first one.
            let preferences = if e.preferences.len() > 1 {
                e.preferences
                    .iter()
                    .map(|p| PreferenceStatus {
                        index: i64::try_from(p.index).unwrap_or(i64::MAX),
                        hyperscaler_type: p.hyperscaler_type.clone(),
                        eu_access: p.eu_access.clone(),
                        shared: p.shared,
                        pools: reaching(p),
                    })
                    .collect()
            } else {
                Vec::new()
            };
            RuleStatus {
                index: i64::try_from(e.index).unwrap_or(i64::MAX),
                entry: e.entry.clone(),
                hyperscaler_type: e.hyperscaler_type.clone(),
                eu_access: e.eu_access.clone(),
                shared: e.shared,
                pools,
                preferences,
                deny: e.deny.then_some(true),
                message: e.message.clone(),
            }
        })
        .collect();
    input.pins = crate::selection::pinned::states(active.rules.pins(), inv);
    input.orphans = inv.orphans(&inflight.bindings_in_use(Instant::now()));
    input.bindings_in_use = inv.bindings_in_use();
}

/// MissingPool diagnostics from the index's pools, kept per event: walking every binding's labels
/// here cost O(bindings) each second while anything moved (the 100k trickle). The walk remains
/// for the moment the index still classifies with other label keys than the config in force.
fn missing_pools(rules: &crate::rules::CompiledRules, inv: &Inventory) -> Vec<Diagnostic> {
    if inv.keys() == rules.label_keys() {
        rules.missing_pools_in(inv.usable_pools())
    } else {
        rules.missing_pools(inv.bindings().map(|b| &b.view.labels))
    }
}

/// The first `quoted` part of a message (the selector of a MissingPool diagnostic).
fn between_backticks(s: &str) -> Option<&str> {
    let start = s.find('`')? + 1;
    let len = s[start..].find('`')?;
    Some(&s[start..start + len])
}

/// The pool-level families are redone (one series per pool); the per-binding and per-tenant
/// ones change only for what the index says moved since the last export (`take_touched`), so
/// that a second with one new claim costs a few series, not one per binding.
fn export_metrics(ctx: &Context, inv: &mut Inventory, orphans: &[crate::api::OrphanStatus]) {
    use crate::metrics::TypeLabels;
    let m = &ctx.metrics;
    let figures = inv.all_figures();
    export_orphans(m, &figures, orphans);
    m.available_bindings.clear();
    m.claimed_bindings.clear();
    m.dirty_bindings.clear();
    m.shared_bindings.clear();
    m.claims_waiting.clear();
    for (pool, n) in inv.waiting() {
        let l = TypeLabels {
            hyperscaler_type: pool.hyperscaler_type.clone(),
        };
        m.claims_waiting
            .get_or_create(&l)
            .inc_by(i64::try_from(n).unwrap_or(i64::MAX));
    }
    for f in &figures {
        let l = TypeLabels {
            hyperscaler_type: f.hyperscaler_type.clone(),
        };
        m.available_bindings.get_or_create(&l).inc_by(f.free);
        m.claimed_bindings.get_or_create(&l).inc_by(f.claimed);
        m.dirty_bindings.get_or_create(&l).inc_by(f.dirty);
        // Bindings, not pools: every binding of a shared pool is shared.
        let shared = if f.shared { f.total } else { 0 };
        m.shared_bindings.get_or_create(&l).inc_by(shared);
    }
    // KEB's names are derived from the same inventory, under their flag only.
    if let Some(keb) = &m.keb {
        keb.export(inv);
    }
    let touched = inv.take_touched();
    if touched.all {
        export_all_series(m, inv);
        return;
    }
    for name in &touched.bindings {
        set_binding_series(m, inv, name);
    }
    for tenant in &touched.tenants {
        set_tenant_series(m, inv, tenant);
    }
}

/// One series per hyperscaler type of the pools, 0 included: an alert or panel on orphans then
/// has data while there are none, and a type whose last orphan was cleaned goes back to 0.
fn export_orphans(
    m: &crate::metrics::Metrics,
    figures: &[PoolFigures],
    orphans: &[crate::api::OrphanStatus],
) {
    let mut counts: std::collections::BTreeMap<String, i64> = figures
        .iter()
        .map(|f| (f.hyperscaler_type.clone(), 0))
        .collect();
    for o in orphans {
        *counts.entry(o.hyperscaler_type.clone()).or_default() += 1;
    }
    m.set_orphans(&counts);
}

/// Every per-binding and per-tenant series from scratch (the first export, a re-classification).
fn export_all_series(m: &crate::metrics::Metrics, inv: &Inventory) {
    m.shoots_per_binding.clear();
    m.bindings_per_global_account.clear();
    for b in inv.bindings() {
        set_binding_series(m, inv, &b.view.name);
    }
    let tenants: Vec<String> = inv.owned_per_tenant().map(|(t, _)| t.to_string()).collect();
    for t in &tenants {
        set_tenant_series(m, inv, t);
    }
}

fn set_binding_series(m: &crate::metrics::Metrics, inv: &Inventory, name: &str) {
    let l = crate::metrics::BindingLabels {
        credentials_binding: name.to_string(),
    };
    if inv.binding(name).is_none() {
        m.shoots_per_binding.remove(&l);
        return;
    }
    let n = inv.clusters_on(name).len();
    m.shoots_per_binding
        .get_or_create(&l)
        .set(i64::try_from(n).unwrap_or(i64::MAX));
}

/// Claimed accounts only: a dirty binding still names its last tenant for the cleanup job.
fn set_tenant_series(m: &crate::metrics::Metrics, inv: &Inventory, tenant: &str) {
    let l = crate::metrics::TenantLabels {
        global_account: tenant.to_string(),
    };
    match inv.owned_count(tenant) {
        0 => drop(m.bindings_per_global_account.remove(&l)),
        n => drop(
            m.bindings_per_global_account
                .get_or_create(&l)
                .set(i64::try_from(n).unwrap_or(i64::MAX)),
        ),
    };
}

/// Runs the internal-state refresh when its cycle has elapsed (docs/design.md §1, `internalStateRefreshCycleDuration`): list bindings and
/// Shoots again and reconcile every claim. Returns the time until the next refresh.
async fn refresh_if_due(cfg: &HapConfig, active: &ActiveConfig, ctx: &Context) -> Option<Duration> {
    let cycle = active
        .spec
        .internal_state_refresh_cycle_duration
        .as_deref()
        .and_then(|d| crate::duration::parse(d).ok())
        .filter(|d| !d.is_zero())?;
    let due = {
        let mut clock = ctx.refresh.lock().ok()?;
        match &clock.last {
            Some((uid, at, _)) if *uid == active.uid && at.elapsed() < cycle => {
                return Some(cycle - at.elapsed());
            }
            Some((uid, _, _)) if *uid == active.uid => true,
            // The first sight of this config starts the clock: the caches were just listed.
            _ => {
                clock.last = Some((active.uid.clone(), Instant::now(), Timestamp::now()));
                false
            }
        }
    };
    if due {
        refresh(cfg, ctx).await;
    }
    Some(cycle)
}

/// The refresh: the watches list again, which the index merges as a possibly stale view (it
/// keeps what is newer, and drops only what the lists show gone), and every claim is reconciled.
/// Nothing waits for the lists inside this reconcile, and no in-flight record is forgotten: each
/// ends when the index shows its write, whatever a list says. A kind whose list from the last
/// refresh still runs is not listed again (the cycle is shorter than one list): that list is
/// left to finish, and the current watch keeps the index current meanwhile.
async fn refresh(cfg: &HapConfig, ctx: &Context) {
    tracing::info!(config = %cfg.name_any(), "refreshing internal state from the cluster");
    // The other kind's list is left to its refresh too; whether it ran adds nothing to the log.
    let bindings = ctx.caches.bindings.restart() & ctx.caches.others.restart();
    let shoots = ctx.caches.shoots.restart();
    if !bindings || !shoots {
        tracing::info!(
            config = %cfg.name_any(),
            bindings_listed_again = bindings,
            shoots_listed_again = shoots,
            "a list is still running (refresh cycle shorter than one list); it is left to finish"
        );
    }
    if let Ok(mut clock) = ctx.refresh.lock()
        && let Some((_, at, t)) = clock.last.as_mut()
    {
        *at = Instant::now();
        *t = Timestamp::now();
    }
    // Every claim, paced by the sweep: the controller's queue keeps its longest backlog.
    ctx.sweep_now.notify_one();
    let (orphans, tenant_key) = {
        let l = ctx.ledger();
        let in_use = l.inflight.bindings_in_use(Instant::now());
        (
            l.inventory.orphans(&in_use),
            l.inventory.keys().tenant_name.clone(),
        )
    };
    if !orphans.is_empty() {
        let list: Vec<String> = orphans
            .iter()
            .map(|o| format!("{} ({tenant_key}={})", o.binding, o.tenant))
            .collect();
        let note = format!(
            "refresh found {} binding(s) labelled for a tenant that no claim or Shoot uses: {}",
            orphans.len(),
            list.join(", ")
        );
        ctx.writer
            .event(
                &cfg.object_ref(&()),
                true,
                "OrphanBindings",
                "Refresh",
                note,
            )
            .await;
    }
}

pub fn error_policy(cfg: Arc<HapConfig>, err: &ConfigError, ctx: Arc<Context>) -> Action {
    tracing::warn!(config = %cfg.name_any(), error = %err, source = ?std::error::Error::source(err), "HapConfig reconcile failed");
    ctx.metrics
        .reconcile_errors
        .get_or_create(&crate::metrics::OutcomeLabels {
            outcome: "hapconfig".into(),
        })
        .inc();
    if matches!(
        err,
        ConfigError::Write {
            source: K8sError::Conflict { .. },
            ..
        }
    ) {
        // Someone wrote the status meanwhile: compute it again from the newer object.
        return Action::requeue(ctx.backoff.conflict());
    }
    Action::requeue(ctx.backoff.next(&backoff_key(&cfg.name_any())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HapConfigSpec, LabelKeys};
    use crate::labels::ResolvedLabelKeys;
    use crate::pools::BindingView;
    use crate::rules::CompiledRules;

    fn rules(hyperscaler_key: Option<&str>) -> CompiledRules {
        let spec = HapConfigSpec {
            rules: Some(vec!["aws".into(), "gcp".into()]),
            binding_namespace: "garden".into(),
            label_keys: hyperscaler_key.map(|k| LabelKeys {
                hyperscaler_type: Some(k.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        match CompiledRules::from_spec(&spec) {
            Ok((rules, _)) => rules,
            Err(v) => panic!("test rules are invalid:\n{}", v.summary()),
        }
    }

    fn index(keys: ResolvedLabelKeys, hyperscaler_key: &str) -> Inventory {
        let binding = BindingView {
            name: "b-1".into(),
            labels: [(hyperscaler_key.to_string(), "aws".to_string())].into(),
            ..Default::default()
        };
        Inventory::build(keys, [binding], [], [])
    }

    fn missing_entries(d: &[Diagnostic]) -> Vec<String> {
        d.iter()
            .map(|d| d.entry.clone().unwrap_or_default())
            .collect()
    }

    /// The index answers while it classifies with the config's keys; while it still uses
    /// others (a config that renamed a label key, before the index is re-keyed), the labels do.
    #[test]
    fn missing_pools_come_from_the_index_only_while_it_uses_the_configs_keys() {
        let defaults = ResolvedLabelKeys::default();
        let same = rules(None);
        let from_index = missing_pools(&same, &index(defaults.clone(), &defaults.hyperscaler_type));
        assert_eq!(missing_entries(&from_index), ["gcp"], "aws has a binding");
        // The config names another key; the index still classifies with the default one, so its
        // pools (aws under the default key) say nothing about the config's pools.
        let renamed = rules(Some("example.com/type"));
        let stale = index(defaults.clone(), "example.com/type");
        assert_eq!(
            missing_entries(&missing_pools(&renamed, &stale)),
            ["gcp"],
            "the binding's labels under the config's key"
        );
        let stale_without = index(defaults.clone(), &defaults.hyperscaler_type);
        assert_eq!(
            missing_entries(&missing_pools(&renamed, &stale_without)),
            ["aws", "gcp"],
            "the index's aws pool is under a key the config does not use"
        );
    }
}
