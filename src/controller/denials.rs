//! Binding writes the garden refuses (403: RBAC, or gardener-apiserver's admission demanding that
//! the caller may read the Secret a binding references, or that Secret being gone). A refused
//! binding is not retried by every waiting claim at once: it pauses with a growing delay
//! (capped), selection tries other bindings first, claims that can only get a refused one say
//! why in their status, and the HapConfig lists the refusals, until a write goes through again.
//!
//! Kept per binding, not per process: a missing Secret or a Secret that RBAC grants by name
//! concerns one binding, and must not stop claims that other bindings can serve.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const FIRST_PAUSE: Duration = Duration::from_secs(2);
const MAX_PAUSE: Duration = Duration::from_secs(60);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Refusal {
    message: String,
    failures: u32,
    retry_at: Instant,
}

/// Refused binding writes of this process, by binding name.
#[derive(Default)]
pub struct Denials {
    refused: Mutex<BTreeMap<String, Refusal>>,
}

/// Writes of a binding are paused: why, and when the next attempt may be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paused {
    pub message: String,
    pub retry_at: Instant,
}

impl Denials {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Refusal>> {
        self.refused.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bindings with a refusal on record (`hap_internal_entries`).
    pub fn entries(&self) -> usize {
        self.lock().len()
    }

    /// `Some` while writes of `binding` should not be attempted.
    pub fn paused(&self, binding: &str, now: Instant) -> Option<Paused> {
        self.lock()
            .get(binding)
            .filter(|r| now < r.retry_at)
            .map(|r| Paused {
                message: r.message.clone(),
                retry_at: r.retry_at,
            })
    }

    /// The bindings whose writes are paused now (selection tries them last).
    pub fn paused_bindings(&self, now: Instant) -> BTreeSet<String> {
        self.lock()
            .iter()
            .filter(|(_, r)| now < r.retry_at)
            .map(|(b, _)| b.clone())
            .collect()
    }

    /// Every refusal not yet followed by a successful write, as binding → message (for the
    /// HapConfig status).
    pub fn refusals(&self) -> BTreeMap<String, String> {
        self.lock()
            .iter()
            .map(|(b, r)| (b.clone(), r.message.clone()))
            .collect()
    }

    /// Records a refusal of a write of `binding`; returns when the next attempt may be made, and
    /// whether this is news (a binding not refused before, or another message).
    pub fn refused(&self, binding: &str, message: String, now: Instant) -> (Instant, bool) {
        let mut map = self.lock();
        let old = map.get(binding);
        let failures = old.map_or(0, |r| r.failures).saturating_add(1);
        let pause = FIRST_PAUSE
            .saturating_mul(1u32 << failures.saturating_sub(1).min(8))
            .min(MAX_PAUSE);
        let news = old.is_none_or(|r| r.message != message);
        let retry_at = now + pause;
        map.insert(
            binding.to_string(),
            Refusal {
                message,
                failures,
                retry_at,
            },
        );
        (retry_at, news)
    }

    /// A write of `binding` went through. Returns whether it had been refused before.
    pub fn allowed(&self, binding: &str) -> bool {
        self.lock().remove(binding).is_some()
    }

    /// Forgets the refusals of bindings `exists` no longer knows, once their pause has been over
    /// for [`MAX_PAUSE`]: a deleted binding's refusal would otherwise stall the config until a
    /// restart. Not at once, since a refused write may concern a binding the index does not
    /// hold (a record of another target kind or namespace), which is retried when its pause
    /// ends; forgetting it then would restart its backoff and report each refusal as news.
    /// Returns whether any was forgotten.
    pub fn forget_missing(&self, exists: impl Fn(&str) -> bool, now: Instant) -> bool {
        let mut map = self.lock();
        let before = map.len();
        map.retain(|b, r| exists(b) || now < r.retry_at + MAX_PAUSE);
        map.len() != before
    }

    /// Forgets every refusal (the bindings target changed: other namespace, other kind).
    pub fn clear(&self) -> bool {
        let mut map = self.lock();
        let had = !map.is_empty();
        map.clear();
        had
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_pauses_the_binding_with_a_growing_capped_delay_until_a_write_goes_through() {
        let d = Denials::default();
        let t0 = Instant::now();
        assert_eq!(d.paused("b1", t0), None);
        let (retry, news) = d.refused("b1", "no".into(), t0);
        assert!(news);
        assert_eq!(retry, t0 + FIRST_PAUSE);
        assert_eq!(d.paused("b1", t0).map(|p| p.message), Some("no".into()));
        assert_eq!(d.paused("b2", t0), None, "other bindings stay writable");
        assert_eq!(d.paused_bindings(t0), BTreeSet::from(["b1".to_string()]));
        // The probe time has come: one attempt may be made; the refusal stays on record.
        assert_eq!(d.paused("b1", retry), None);
        assert_eq!(d.refusals().get("b1").map(String::as_str), Some("no"));
        let (retry2, news) = d.refused("b1", "no".into(), retry);
        assert!(!news, "the same refusal again is no news");
        assert_eq!(retry2, retry + FIRST_PAUSE * 2);
        let mut at = retry2;
        for _ in 0..20 {
            at = d.refused("b1", "no".into(), at).0;
        }
        assert_eq!(d.paused("b1", at - MAX_PAUSE).map(|p| p.retry_at), Some(at));
        assert!(d.allowed("b1"));
        assert_eq!(d.paused("b1", t0), None);
        assert!(d.refusals().is_empty());
        assert!(!d.allowed("b1"));
    }

    #[test]
    fn another_message_is_news_and_a_target_change_forgets_everything() {
        let d = Denials::default();
        let now = Instant::now();
        d.refused("b1", "rbac".into(), now);
        assert!(d.refused("b1", "admission".into(), now).1);
        assert!(d.clear());
        assert!(d.refusals().is_empty());
        assert!(!d.clear());
    }

    #[test]
    fn the_refusals_of_bindings_that_are_gone_are_forgotten() {
        let d = Denials::default();
        let now = Instant::now();
        d.refused("kept", "no".into(), now);
        let (retry_at, _) = d.refused("gone", "no".into(), now);
        let known = |b: &str| b == "kept";
        assert!(
            !d.forget_missing(known, retry_at),
            "a binding the index lacks may be another target's, retried when its pause ends"
        );
        assert!(!d.forget_missing(known, retry_at + MAX_PAUSE - Duration::from_millis(1)));
        assert!(d.forget_missing(known, retry_at + MAX_PAUSE));
        assert_eq!(d.refusals().keys().collect::<Vec<_>>(), ["kept"]);
        assert!(
            !d.forget_missing(known, retry_at + MAX_PAUSE * 10),
            "nothing more to forget"
        );
    }
}
