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
use crate::rules::{CompiledRules, Diagnostic, Validation};

/// A compiled, valid generation of the config in force.
#[derive(Debug)]
pub struct ActiveConfig {
    pub uid: String,
    pub generation: i64,
    pub spec: HapConfigSpec,
    pub rules: CompiledRules,
    pub warnings: Vec<Diagnostic>,
    /// The request sources of this generation (validated with the rules).
    pub sources: crate::sources::CompiledSources,
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
    Active {
        active: Arc<ActiveConfig>,
        current_invalid: Option<Arc<Validation>>,
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
    invalid: Option<(String, i64, Arc<Validation>)>,
    /// The operator's record read at start; used only while no generation was valid in memory.
    recorded: Option<LastGood>,
}

/// Resolves and caches the config in force.
pub struct ConfigResolver {
    name: String,
    store: Store<HapConfig>,
    memo: Mutex<Memo>,
}

impl ConfigResolver {
    pub fn new(name: String, store: Store<HapConfig>) -> Self {
        Self {
            name,
            store,
            memo: Mutex::new(Memo::default()),
        }
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
        if let Some(v) = &memo.valid
            && v.generation == generation
        {
            return ConfigState::Active {
                active: v.clone(),
                current_invalid: None,
            };
        }
        if let Some((iuid, igen, validation)) = &memo.invalid
            && *iuid == uid
            && *igen == generation
        {
            return invalid_state(&memo, generation, validation.clone());
        }
        match CompiledRules::from_spec(&cfg.spec) {
            Ok((rules, warnings)) => {
                let active = Arc::new(ActiveConfig {
                    uid,
                    generation,
                    sources: compile_sources(&cfg.spec),
                    spec: cfg.spec.clone(),
                    rules,
                    warnings,
                });
                memo.valid = Some(active.clone());
                memo.invalid = None;
                ConfigState::Active {
                    active,
                    current_invalid: None,
                }
            }
            Err(validation) => {
                if memo.valid.is_none() {
                    memo.valid = recover(memo.recorded.as_ref(), &uid, generation);
                }
                let validation = Arc::new(validation);
                memo.invalid = Some((uid, generation, validation.clone()));
                invalid_state(&memo, generation, validation)
            }
        }
    }
}

/// After a restart the memo is empty; the operator's record remembers which spec was last valid.
/// It counts only for the same object (uid) and an older generation; `status.activeSpec` is not
/// read at all.
fn recover(recorded: Option<&LastGood>, uid: &str, generation: i64) -> Option<Arc<ActiveConfig>> {
    let good = recorded.filter(|g| g.uid == uid && g.generation < generation)?;
    let (rules, warnings) = CompiledRules::from_spec(&good.spec).ok()?;
    Some(Arc::new(ActiveConfig {
        uid: uid.to_string(),
        generation: good.generation,
        sources: compile_sources(&good.spec),
        spec: good.spec.clone(),
        rules,
        warnings,
    }))
}

/// The sources of a spec that passed validation (which checks them), so this cannot fail; an
/// empty set would only mean nothing is served.
fn compile_sources(spec: &HapConfigSpec) -> crate::sources::CompiledSources {
    crate::sources::CompiledSources::from_spec(spec).unwrap_or_default()
}

fn invalid_state(memo: &Memo, generation: i64, validation: Arc<Validation>) -> ConfigState {
    match &memo.valid {
        Some(active) => ConfigState::Active {
            active: active.clone(),
            current_invalid: Some(validation),
        },
        None => ConfigState::Invalid {
            generation,
            validation,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn only_the_same_objects_older_record_is_recovered() {
        let rec = good("u1", 2, &["aws"]);
        let got = recover(Some(&rec), "u1", 3).expect("recovered");
        assert_eq!((got.generation, &got.spec.rules), (2, &rec.spec.rules));
        assert!(recover(Some(&rec), "u2", 3).is_none(), "a recreated object");
        assert!(recover(Some(&rec), "u1", 2).is_none(), "not older");
        assert!(recover(None, "u1", 3).is_none());
        assert!(
            recover(Some(&good("u1", 1, &["azurre"])), "u1", 3).is_none(),
            "invalid record"
        );
    }
}
