//! Per-object exponential backoff with jitter for failed reconciles (kube-runtime's error policy
//! is flat) and for passes that wait on something outside the object (no valid config, no
//! inventory). Conflicts retry fast: the next pass re-reads the cache and decides again. The
//! caller resets an object's delay only once it settled (controller::claim).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;

pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
    base: Duration,
    cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            failures: Mutex::new(HashMap::new()),
            base: Duration::from_millis(200),
            cap: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// Objects with a failure on record (`hap_internal_entries`).
    pub fn entries(&self) -> usize {
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// The delay before retrying `key` after one more failure.
    pub fn next(&self, key: &str) -> Duration {
        let n = match self.failures.lock() {
            Ok(mut map) => {
                let n = map.entry(key.to_string()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        let exp = self
            .base
            .saturating_mul(1u32 << (n.saturating_sub(1)).min(16));
        let delay = exp.min(self.cap);
        // Up to +50% jitter so that replicas and siblings do not retry in lockstep.
        let jitter_ms = rand::rng().random_range(0..=delay.as_millis().max(1) as u64 / 2);
        delay + Duration::from_millis(jitter_ms)
    }

    /// A short jittered delay after a lost compare-and-swap.
    pub fn conflict(&self) -> Duration {
        Duration::from_millis(rand::rng().random_range(20..200))
    }

    /// Forgets the failures of `key` after a success.
    pub fn reset(&self, key: &str) {
        if let Ok(mut map) = self.failures.lock() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_then_caps_and_resets() {
        let b = Backoff::default();
        let first = b.next("a");
        assert!(first >= Duration::from_millis(200) && first <= Duration::from_millis(300));
        for _ in 0..20 {
            b.next("a");
        }
        let capped = b.next("a");
        assert!(capped >= Duration::from_secs(60) && capped <= Duration::from_secs(90));
        b.reset("a");
        assert!(b.next("a") <= Duration::from_millis(300));
        assert!(b.next("other") <= Duration::from_millis(300));
    }
}
