//! Which configuration is in force. The HapConfig named by `--config-name` is compiled once per
//! generation; an invalid generation keeps the last valid one of the same object serving
//! (last-known-good), and a deleted or recreated object never inherits old rules. After a restart
//! the last-known-good comes only from the operator's own record ([`LastGood`], a ConfigMap only
//! its RBAC writes), never from `status.activeSpec`, which whoever may patch the status can write.

use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::BindingTarget;
pub use super::last_good::LastGood;
use crate::api::{BindingKind, HapConfig, HapConfigSpec};
use crate::diag::{Diagnostic, Validation};
use crate::rules::CompiledRules;

/// A compiled, valid generation of the config in force.
#[derive(Debug)]
pub struct ActiveConfig {
    pub uid: String,
    pub generation: i64,
    pub spec: HapConfigSpec,
    pub rules: CompiledRules,
    pub warnings: Vec<Diagnostic>,
}

impl ActiveConfig {
    pub fn binding_target(&self) -> BindingTarget {
        BindingTarget {
            namespace: self.spec.binding_namespace.clone(),
            kind: self
                .spec
                .binding_kind
                .unwrap_or(BindingKind::CredentialsBinding),
        }
    }
    /// Where the bindings of the other kind are read from (only their accounts: a Shoot Gardener
    /// moved onto one counts with its account).
    pub fn other_binding_target(&self) -> BindingTarget {
        let target = self.binding_target();
        BindingTarget {
            kind: match target.kind {
                BindingKind::CredentialsBinding => BindingKind::SecretBinding,
                BindingKind::SecretBinding => BindingKind::CredentialsBinding,
            },
            ..target
        }
    }
    pub fn shoot_namespace(&self) -> String {
        self.spec
            .shoot_namespace
            .clone()
            .unwrap_or_else(|| self.spec.binding_namespace.clone())
    }
}

/// Whether binding writes are held, and why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hold {
    /// `spec.paused: true`.
    pub paused: bool,
    /// `spec.mode: Observe`.
    pub observing: bool,
}

impl Hold {
    pub fn of(spec: &HapConfigSpec) -> Self {
        Self {
            paused: spec.is_paused(),
            observing: spec.is_observing(),
        }
    }

    /// Whether any binding write is held.
    pub fn writes(self) -> bool {
        self.paused || self.observing
    }
}

/// What the claim controller can act on.
#[derive(Clone, Debug)]
pub enum ConfigState {
    /// No HapConfig with the configured name.
    Missing,
    /// The config exists but no generation of it has ever been valid.
    Invalid {
        generation: i64,
        validation: Arc<Validation>,
    },
    /// Rules in force; `current_invalid` carries the errors of a newer, invalid generation.
    /// `hold` is held when the rules in force or the newest generation, valid or not, hold
    /// writes: a switch to Observe or a pause inside an otherwise invalid edit holds at once,
    /// while lifting a hold takes a valid generation.
    Active {
        active: Arc<ActiveConfig>,
        current_invalid: Option<Arc<Validation>>,
        hold: Hold,
    },
}

impl LastGood {
    pub fn of(active: &ActiveConfig) -> Self {
        Self {
            uid: active.uid.clone(),
            generation: active.generation,
            spec: active.spec.clone(),
        }
    }
}

#[derive(Default)]
struct Memo {
    valid: Option<Arc<ActiveConfig>>,
    /// The newest generation seen, if invalid: uid, generation, errors, and what it holds.
    invalid: Option<(String, i64, Arc<Validation>, Hold)>,
    /// The operator's record read at start; used only while no generation was valid in memory.
    recorded: Option<LastGood>,
}

/// Resolves and caches the config in force.
pub struct ConfigResolver {
    name: String,
    store: Store<HapConfig>,
    memo: Mutex<Memo>,
    /// Compiles made (`hap_config_compiles_total`): one per generation seen, for the whole
    /// replica, since the webhook and the controllers share this resolver.
    compiles: prometheus_client::metrics::counter::Counter,
}

/// The config in force of `name`, resolved from the one HapConfig watch of a replica: the
/// resolver, and the watch's events, which fill its store as they are polled (the config
/// controller's trigger; drive them in a task when nothing else reads them).
pub fn watch(
    cluster: &super::Cluster,
    name: String,
    feed: super::ChangeFeed,
) -> (
    ConfigResolver,
    impl futures::Stream<Item = Result<HapConfig, kube::runtime::watcher::Error>> + Send + use<>,
) {
    let (store, events) = super::startup::config_watch(cluster, feed);
    // Logged here, where every replica sees them: a standby drops the events themselves.
    let events = futures::TryStreamExt::inspect_err(events, |e| {
        tracing::warn!(error = %e, "HapConfig watch error; retrying");
    });
    (ConfigResolver::new(name, store), events)
}

impl ConfigResolver {
    pub fn new(name: String, store: Store<HapConfig>) -> Self {
        Self {
            name,
            store,
            memo: Mutex::new(Memo::default()),
            compiles: Default::default(),
        }
    }

    /// Counts its compiles in `counter` (the replica's metric) instead of a counter of its own.
    pub fn counting_compiles_in(
        mut self,
        counter: prometheus_client::metrics::counter::Counter,
    ) -> Self {
        self.compiles = counter;
        self
    }

    /// Compiles made so far.
    pub fn compiles(&self) -> u64 {
        self.compiles.get()
    }

    /// Seeds the last-known-good from the operator's own record (read once at start).
    pub fn with_last_good(self, recorded: Option<LastGood>) -> Self {
        if let Ok(mut memo) = self.memo.lock() {
            memo.recorded = recorded;
        }
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The HapConfig store it resolves from (the replica's one HapConfig watch).
    pub fn store(&self) -> &Store<HapConfig> {
        &self.store
    }

    /// The state for the config as the cache shows it now.
    pub fn resolve(&self) -> ConfigState {
        match self.store.get(&ObjectRef::new(&self.name)) {
            Some(cfg) => self.resolve_object(&cfg),
            None => ConfigState::Missing,
        }
    }

    /// The state for one HapConfig object (the one in force).
    pub fn resolve_object(&self, cfg: &HapConfig) -> ConfigState {
        let uid = cfg.uid().unwrap_or_default();
        let generation = cfg.metadata.generation.unwrap_or(0);
        let Ok(mut memo) = self.memo.lock() else {
            return ConfigState::Missing;
        };
        if memo.valid.as_ref().is_some_and(|v| v.uid != uid) {
            memo.valid = None;
        }
        if let Some(state) = known(&memo, &uid, generation) {
            return state;
        }
        let newest = Hold::of(&cfg.spec);
        self.compiles.inc();
        match CompiledRules::from_spec(&cfg.spec) {
            Ok((rules, warnings)) => {
                let active = Arc::new(ActiveConfig {
                    uid,
                    generation,
                    spec: cfg.spec.clone(),
                    rules,
                    warnings,
                });
                memo.valid = Some(active.clone());
                memo.invalid = None;
                ConfigState::Active {
                    active,
                    current_invalid: None,
                    hold: newest,
                }
            }
            Err(validation) => {
                if memo.valid.is_none() {
                    memo.valid = recover(memo.recorded.as_ref(), &uid, generation, &self.compiles);
                }
                let validation = Arc::new(validation);
                memo.invalid = Some((uid, generation, validation.clone(), newest));
                invalid_state(&memo, generation, validation, newest)
            }
        }
    }
}

/// The state of a generation the memo has decided, or of the newest it has when `generation` is
/// older: a reconcile of an object the store has since replaced must neither compile again nor
/// put an older generation back as the last valid one (the webhook answers by it too).
fn known(memo: &Memo, uid: &str, generation: i64) -> Option<ConfigState> {
    let invalid = memo.invalid.as_ref().filter(|(iuid, ..)| iuid == uid);
    let valid = memo.valid.as_ref();
    let newest = invalid
        .map(|(_, g, ..)| *g)
        .max(valid.map(|v| v.generation))?;
    if generation > newest {
        return None;
    }
    match invalid {
        Some((_, igen, validation, hold)) if *igen == newest && generation != valid_gen(valid) => {
            Some(invalid_state(memo, *igen, validation.clone(), *hold))
        }
        _ => valid.map(|v| ConfigState::Active {
            hold: Hold::of(&v.spec),
            active: v.clone(),
            current_invalid: None,
        }),
    }
}

fn valid_gen(valid: Option<&Arc<ActiveConfig>>) -> i64 {
    valid.map_or(i64::MIN, |v| v.generation)
}

/// After a restart the memo is empty; the operator's record remembers which spec was last valid.
/// It counts only for the same object (uid) and an older generation; `status.activeSpec` is not
/// read at all.
fn recover(
    recorded: Option<&LastGood>,
    uid: &str,
    generation: i64,
    compiles: &prometheus_client::metrics::counter::Counter,
) -> Option<Arc<ActiveConfig>> {
    let good = recorded.filter(|g| g.uid == uid && g.generation < generation)?;
    compiles.inc();
    let (rules, warnings) = CompiledRules::from_spec(&good.spec).ok()?;
    Some(Arc::new(ActiveConfig {
        uid: uid.to_string(),
        generation: good.generation,
        spec: good.spec.clone(),
        rules,
        warnings,
    }))
}

impl ConfigState {
    /// Whether binding writes are held; nothing is held without rules in force (nothing is
    /// written then either).
    pub fn hold(&self) -> Hold {
        match self {
            ConfigState::Active { hold, .. } => *hold,
            _ => Hold::default(),
        }
    }
}

/// An invalid newest generation: the last valid one serves, held if either holds.
fn invalid_state(
    memo: &Memo,
    generation: i64,
    validation: Arc<Validation>,
    newest: Hold,
) -> ConfigState {
    match &memo.valid {
        Some(active) => {
            let valid = Hold::of(&active.spec);
            ConfigState::Active {
                active: active.clone(),
                current_invalid: Some(validation),
                hold: Hold {
                    paused: valid.paused || newest.paused,
                    observing: valid.observing || newest.observing,
                },
            }
        }
        None => ConfigState::Invalid {
            generation,
            validation,
        },
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    /// The webhook and the controllers of a replica hold one `Arc<ConfigResolver>`: however
    /// often either resolves, each generation is compiled once, an invalid one too, and the
    /// replica's metric counts those compiles.
    #[test]
    fn a_shared_resolver_compiles_each_generation_once() {
        let (store, _writer) = kube::runtime::reflector::store::<HapConfig>();
        let metric = Counter::default();
        let shared =
            Arc::new(ConfigResolver::new("hap".into(), store).counting_compiles_in(metric.clone()));
        let (webhook, controllers) = (shared.clone(), shared.clone());
        let valid = good("u1", 1, &["aws"]).spec;
        let invalid = good("u1", 1, &["azurre"]).spec;
        for _ in 0..3 {
            assert!(matches!(
                webhook.resolve_object(&config(1, valid.clone())),
                ConfigState::Active { .. }
            ));
            assert!(matches!(
                controllers.resolve_object(&config(1, valid.clone())),
                ConfigState::Active { .. }
            ));
        }
        assert_eq!(metric.get(), 1, "generation 1 once");
        for _ in 0..3 {
            webhook.resolve_object(&config(2, invalid.clone()));
            controllers.resolve_object(&config(2, invalid.clone()));
        }
        assert_eq!(shared.compiles(), 2, "the invalid generation 2 once");
        controllers.resolve_object(&config(3, valid.clone()));
        webhook.resolve_object(&config(3, valid));
        assert_eq!(metric.get(), 3);
    }

    fn good(uid: &str, generation: i64, rules: &[&str]) -> LastGood {
        LastGood {
            uid: uid.into(),
            generation,
            spec: HapConfigSpec {
                binding_namespace: "garden".into(),
                rules: Some(rules.iter().map(ToString::to_string).collect()),
                ..Default::default()
            },
        }
    }

    fn config(generation: i64, spec: HapConfigSpec) -> HapConfig {
        let mut cfg = HapConfig::new("hap", spec);
        cfg.metadata.uid = Some("u1".into());
        cfg.metadata.generation = Some(generation);
        cfg
    }

    /// An edit that switches to Observe (or pauses) holds binding writes even when the same
    /// edit is invalid otherwise: the last valid rules stay in force, the hold comes at once.
    #[test]
    fn a_hold_in_an_invalid_edit_holds_at_once_and_only_a_valid_edit_lifts_it() {
        let resolver = ConfigResolver::new(
            "hap".into(),
            kube::runtime::reflector::store::Writer::default().as_reader(),
        );
        let valid = good("u1", 1, &["aws"]).spec;
        let invalid = |f: &dyn Fn(&mut HapConfigSpec)| {
            let mut spec = good("u1", 1, &["azurre"]).spec;
            f(&mut spec);
            spec
        };
        assert_eq!(
            resolver.resolve_object(&config(1, valid.clone())).hold(),
            Hold::default()
        );
        let observe = invalid(&|s| s.mode = Some(crate::api::OperatingMode::Observe));
        let state = resolver.resolve_object(&config(2, observe));
        assert!(
            matches!(&state, ConfigState::Active { active, current_invalid: Some(_), .. } if active.generation == 1),
            "{state:?}"
        );
        assert_eq!(
            state.hold(),
            Hold {
                paused: false,
                observing: true
            }
        );
        let pause = invalid(&|s| s.paused = Some(true));
        let state = resolver.resolve_object(&config(3, pause));
        assert_eq!(
            state.hold(),
            Hold {
                paused: true,
                observing: false
            }
        );
        // The newest spec drops the hold but is invalid: the last valid spec decides (no hold).
        let state = resolver.resolve_object(&config(4, invalid(&|_| {})));
        assert_eq!(state.hold(), Hold::default());
        // A valid spec that observes, then an invalid edit that drops Observe: still held.
        let mut observing = valid;
        observing.mode = Some(crate::api::OperatingMode::Observe);
        assert!(
            resolver
                .resolve_object(&config(5, observing))
                .hold()
                .observing
        );
        let state = resolver.resolve_object(&config(6, invalid(&|_| {})));
        assert!(state.hold().observing, "{:?}", state.hold());
    }

    /// A config reconcile may still hold an object the store has since replaced: resolving it
    /// neither compiles that generation again nor makes it the last valid one, which an invalid
    /// edit would then fall back to.
    #[test]
    fn an_older_generation_resolved_late_neither_compiles_nor_rolls_back() {
        let (store, _writer) = kube::runtime::reflector::store::<HapConfig>();
        let resolver = ConfigResolver::new("hap".into(), store);
        let aws = good("u1", 1, &["aws"]).spec;
        let azure = good("u1", 1, &["azure"]).spec;
        resolver.resolve_object(&config(3, aws.clone()));
        resolver.resolve_object(&config(4, azure));
        let late = resolver.resolve_object(&config(3, aws));
        assert!(
            matches!(&late, ConfigState::Active { active, .. } if active.generation == 4),
            "{late:?}"
        );
        let state = resolver.resolve_object(&config(5, good("u1", 1, &["azurre"]).spec));
        assert!(
            matches!(&state, ConfigState::Active { active, current_invalid: Some(_), .. } if active.generation == 4),
            "{state:?}"
        );
        assert_eq!(resolver.compiles(), 3, "generations 3, 4 and 5, once each");
        let older = resolver.resolve_object(&config(2, good("u1", 1, &["aws"]).spec));
        assert!(
            matches!(&older, ConfigState::Active { active, current_invalid: Some(_), .. } if active.generation == 4),
            "the newest (invalid) generation decides for an older one: {older:?}"
        );
        assert_eq!(resolver.compiles(), 3);
    }

    #[test]
    fn only_the_same_objects_older_record_is_recovered() {
        let rec = good("u1", 2, &["aws"]);
        let got = recover(Some(&rec), "u1", 3, &Counter::default()).expect("recovered");
        assert_eq!((got.generation, &got.spec.rules), (2, &rec.spec.rules));
        assert!(
            recover(Some(&rec), "u2", 3, &Counter::default()).is_none(),
            "a recreated object"
        );
        assert!(
            recover(Some(&rec), "u1", 2, &Counter::default()).is_none(),
            "not older"
        );
        assert!(recover(None, "u1", 3, &Counter::default()).is_none());
        assert!(
            recover(
                Some(&good("u1", 1, &["azurre"])),
                "u1",
                3,
                &Counter::default()
            )
            .is_none(),
            "invalid record"
        );
    }
}
