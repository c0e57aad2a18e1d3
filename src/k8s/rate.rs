//! The client-side request budget of one cluster (`--kube-api-qps`, `--kube-api-burst`): a
//! token bucket, and the layer in the kube client's stack that holds each request until the
//! bucket has a token for it. Requests wait in the client's queue meanwhile, in the order they
//! were made; none is dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How many requests a client may send: `qps` a second on average, `burst` at once after a
/// quiet moment. A `qps` of 0 means no limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ApiLimits {
    pub qps: f64,
    pub burst: u32,
}

impl ApiLimits {
    /// No limit: what kube clients do by default.
    pub const UNLIMITED: Self = Self { qps: 0.0, burst: 0 };

    /// The bucket these limits describe; `None` when there is no limit. A burst of 0 is one
    /// second's worth of requests (at least one).
    pub fn bucket(&self) -> Option<TokenBucket> {
        (self.qps.is_finite() && self.qps > 0.0).then(|| {
            let burst = if self.burst == 0 {
                self.qps.ceil().max(1.0)
            } else {
                f64::from(self.burst)
            };
            TokenBucket::new(self.qps, burst)
        })
    }
}

/// A token bucket over a clock the caller passes in (so that it is tested without time passing):
/// it starts full, refills at `qps` tokens a second up to `burst`, and each request takes one.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    pub fn new(qps: f64, burst: f64) -> Self {
        Self {
            qps,
            burst,
            tokens: burst,
            last: None,
        }
    }

    /// Takes a token at `now`: `None` when one was there, else how long until one will be (and
    /// nothing is taken).
    pub fn take(&mut self, now: Instant) -> Option<Duration> {
        let last = *self.last.get_or_insert(now);
        let elapsed = now.saturating_duration_since(last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = Some(now.max(last));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return None;
        }
        // Rounded up, so that the token is there when the wait is over.
        let wait = (1.0 - self.tokens) / self.qps;
        // A budget too small to express as a Duration waits a day rather than panicking inside
        // the client's queue (args reject such budgets; this keeps the bucket total on its own).
        let wait = Duration::try_from_secs_f64(wait).unwrap_or(Duration::from_secs(86_400));
        Some(wait.min(Duration::from_secs(86_400)) + Duration::from_micros(1))
    }
}

/// The layer that puts a [`TokenBucket`] in front of a client's service. Every service it
/// makes takes from the one bucket: the clients of one cluster share one budget.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl RateLimitLayer {
    pub fn new(bucket: TokenBucket) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(bucket)),
        }
    }
}

impl<S> tower_layer::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            admitted: false,
        }
    }
}

/// A service that is ready only when its bucket has a token. The kube client's queue asks it
/// whether it is ready before it hands each request on, so a request waits there, in order.
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A token was taken for the next request.
    admitted: bool,
}

impl<S, R> tower_service::Service<R> for RateLimited<S>
where
    S: tower_service::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.admitted {
            if let Some(wait) = self.wait.as_mut() {
                if wait.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            let now = tokio::time::Instant::now().into_std();
            let taken = self
                .bucket
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(now);
            match taken {
                None => self.admitted = true,
                Some(delay) => self.wait = Some(Box::pin(tokio::time::sleep(delay))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.admitted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_budget_too_small_for_a_duration_waits_a_day_instead_of_panicking() {
        // Found by review: 1/qps beyond Duration's range panicked inside the client's queue.
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1e-30, 1.0);
        assert_eq!(b.take(t0), None);
        let wait = b.take(t0).expect("the burst is spent");
        assert!(wait <= Duration::from_secs(86_401), "{wait:?}");
    }

    #[test]
    fn a_full_bucket_lets_a_burst_through_then_paces_at_qps() {
        // 8 a second: every figure below is exact in binary.
        let t0 = Instant::now();
        let mut b = TokenBucket::new(8.0, 3.0);
        assert_eq!(b.take(t0), None);
        assert_eq!(b.take(t0), None);
        assert_eq!(b.take(t0), None);
        let wait = b.take(t0).expect("the burst is spent");
        assert!(wait > ms(125) && wait < ms(126), "{wait:?}");
        // Half a token later, half the wait is left.
        let half = Duration::from_micros(62_500);
        let wait = b.take(t0 + half).expect("half a token");
        assert!(wait > half && wait < ms(63), "{wait:?}");
        assert_eq!(b.take(t0 + ms(125)), None, "one token after 1/qps");
        assert!(b.take(t0 + ms(125)).is_some());
    }

    #[test]
    fn a_quiet_bucket_fills_up_to_its_burst_and_no_more() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(100.0, 5.0);
        for _ in 0..5 {
            assert_eq!(b.take(t0), None);
        }
        assert!(b.take(t0).is_some());
        // An hour idle refills five tokens, not 360 000.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..5 {
            assert_eq!(b.take(later), None);
        }
        assert!(b.take(later).is_some());
    }

    #[test]
    fn a_clock_read_out_of_order_takes_nothing_extra() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, 1.0);
        assert_eq!(b.take(t0 + ms(500)), None);
        // An earlier reading (two tasks racing to the clock) neither refills nor panics.
        assert!(b.take(t0).is_some());
        assert!(b.take(t0 + ms(1000)).is_some(), "half a token only");
        assert_eq!(b.take(t0 + ms(1501)), None);
    }

    #[test]
    fn limits_of_zero_qps_are_no_limit_and_a_burst_of_zero_is_one_seconds_worth() {
        assert!(ApiLimits::UNLIMITED.bucket().is_none());
        assert!(
            ApiLimits {
                qps: 0.0,
                burst: 50
            }
            .bucket()
            .is_none()
        );
        assert!(
            ApiLimits {
                qps: f64::NAN,
                burst: 1
            }
            .bucket()
            .is_none()
        );
        let t0 = Instant::now();
        let mut b = ApiLimits { qps: 2.5, burst: 0 }.bucket().expect("a bucket");
        for _ in 0..3 {
            assert_eq!(b.take(t0), None);
        }
        assert!(b.take(t0).is_some());
        let mut b = ApiLimits { qps: 0.2, burst: 0 }.bucket().expect("a bucket");
        assert_eq!(b.take(t0), None);
        assert!(b.take(t0).is_some());
    }
}
