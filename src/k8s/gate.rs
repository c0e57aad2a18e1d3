//! The last step of a cluster's request stack before a request leaves the process: the
//! leadership fence, checked on each mutating request when it is actually sent — after the
//! request budget's queue, not before it — and the deadline of a write that waited in that queue.
//!
//! A check made before the queue holds only for the instant it is made: with `--kube-api-qps`
//! a write checked while leading could wait behind a backlog and be sent after the lease moved
//! to another replica, whose decisions it then overwrites. Checked here, a write is sent only
//! while this replica still leads by its own clock. Reads are never fenced: a standby keeps its
//! caches warm through the same client.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Method, Request};
use tower::BoxError;
use tower::buffer::Buffer;

use crate::leadership::{Fence, Fenced};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Why a request was not sent. It never reached the API server, so it certainly did not commit.
#[derive(Debug, thiserror::Error)]
pub enum NotSent {
    #[error(transparent)]
    Fenced(#[from] Fenced),
    /// Decided on state this old, a write is more likely to lose its compare-and-swap than to
    /// win it, and the reconcile that waits for it holds its slot: it is refused unsent and
    /// decided again on what the caches show then.
    #[error("waited {waited:?} in the client's request queue, longer than {limit:?}: not sent")]
    Late { waited: Duration, limit: Duration },
}

impl NotSent {
    /// The reason a kube error carries, when the request was refused by this gate.
    pub fn of(e: &kube::Error) -> Option<&NotSent> {
        let kube::Error::Service(inner) = e else {
            return None;
        };
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(inner.as_ref());
        while let Some(c) = cause {
            if let Some(n) = c.downcast_ref::<NotSent>() {
                return Some(n);
            }
            cause = c.source();
        }
        None
    }
}

/// Whether a request changes something: only those are fenced.
fn mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// When a request entered the client's queue (set by [`Stamp`]).
#[derive(Clone, Copy, Debug)]
struct Queued(Instant);

/// The fence and the queue deadline, as a layer placed below the request budget.
#[derive(Clone)]
pub struct FenceLayer {
    fence: Fence,
    limit: Duration,
}

impl FenceLayer {
    pub fn new(fence: Fence, limit: Duration) -> Self {
        Self { fence, limit }
    }
}

impl<S> tower_layer::Layer<S> for FenceLayer {
    type Service = FenceGate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FenceGate {
            inner,
            fence: self.fence.clone(),
            limit: self.limit,
        }
    }
}

pub struct FenceGate<S> {
    inner: S,
    fence: Fence,
    limit: Duration,
}

impl<S> FenceGate<S> {
    fn refusal<B>(&self, request: &Request<B>, now: Instant) -> Option<NotSent> {
        if !mutating(request.method()) {
            return None;
        }
        if let Err(fenced) = self.fence.check(now) {
            return Some(NotSent::Fenced(fenced));
        }
        let waited = request
            .extensions()
            .get::<Queued>()
            .map(|q| now.saturating_duration_since(q.0))?;
        (waited > self.limit).then_some(NotSent::Late {
            waited,
            limit: self.limit,
        })
    }
}

impl<S, B> tower_service::Service<Request<B>> for FenceGate<S>
where
    S: tower_service::Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if let Some(refused) = self.refusal(&request, Instant::now()) {
            return Box::pin(std::future::ready(Err(refused.into())));
        }
        let sent = self.inner.call(request);
        Box::pin(async move { sent.await.map_err(Into::into) })
    }
}

/// Notes when each request entered the queue below it.
#[derive(Clone)]
pub struct Stamp<S> {
    inner: S,
}

impl<S> Stamp<S> {
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S, B> tower_service::Service<Request<B>> for Stamp<S>
where
    S: tower_service::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        request
            .extensions_mut()
            .insert(Queued(tokio::time::Instant::now().into_std()));
        self.inner.call(request)
    }
}

/// A kube client as the innermost service of another client's stack: every client of one
/// cluster shares its connections, and a client built from one (tests, the CLI) gets the same
/// layers as one built from a kubeconfig.
#[derive(Clone)]
pub struct Base(pub kube::Client);

impl tower_service::Service<Request<kube::client::Body>> for Base {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = BoxFuture<Result<Self::Response, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let client = self.0.clone();
        Box::pin(async move { client.send(request).await })
    }
}

/// The queue a request budget holds requests in, with each request's time of entry noted: a
/// kube client's own queue hands requests on at once when this one has room, so the time noted
/// is when the caller made the request.
pub fn queued<S>(service: S) -> Stamp<Buffer<Request<kube::client::Body>, S::Future>>
where
    S: tower_service::Service<Request<kube::client::Body>> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError> + Send + Sync,
{
    // Room for every request the callers can have outstanding; the kube client's queue in front
    // of it holds 1024 more.
    Stamp::new(Buffer::new(service, 1 << 16))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower_layer::Layer;
    use tower_service::Service;

    /// Counts the requests that got through.
    #[derive(Clone, Default)]
    struct Count(Arc<AtomicUsize>);

    impl Service<Request<()>> for Count {
        type Response = ();
        type Error = BoxError;
        type Future = std::future::Ready<Result<(), BoxError>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            self.0.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(()))
        }
    }

    fn request(method: Method, queued: Option<Instant>) -> Request<()> {
        let mut r = Request::builder()
            .method(method)
            .uri("/api")
            .body(())
            .expect("request");
        if let Some(at) = queued {
            r.extensions_mut().insert(Queued(at));
        }
        r
    }

    async fn refusal(gate: &mut FenceGate<Count>, r: Request<()>) -> Option<String> {
        let e = gate.call(r).await.err()?;
        Some(match e.downcast_ref::<NotSent>() {
            Some(NotSent::Fenced(_)) => "fenced".into(),
            Some(NotSent::Late { .. }) => "late".into(),
            None => e.to_string(),
        })
    }

    #[tokio::test]
    async fn a_closed_fence_stops_writes_and_lets_reads_pass() {
        let count = Count::default();
        let mut gate =
            FenceLayer::new(Fence::closed(), Duration::from_secs(60)).layer(count.clone());
        for m in [Method::GET, Method::HEAD] {
            assert_eq!(refusal(&mut gate, request(m, None)).await, None);
        }
        for m in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            let got = refusal(&mut gate, request(m.clone(), None)).await;
            assert_eq!(got.as_deref(), Some("fenced"), "{m}");
        }
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            2,
            "only the reads were sent"
        );
    }

    #[tokio::test]
    async fn a_write_that_waited_past_its_deadline_is_not_sent() {
        let count = Count::default();
        let limit = Duration::from_secs(60);
        let mut gate = FenceLayer::new(Fence::open(), limit).layer(count.clone());
        let now = Instant::now();
        let fresh = now.checked_sub(Duration::from_secs(1)).unwrap_or(now);
        assert_eq!(
            refusal(&mut gate, request(Method::PATCH, Some(fresh))).await,
            None
        );
        let Some(old) = now.checked_sub(Duration::from_secs(61)) else {
            return;
        };
        let got = refusal(&mut gate, request(Method::PATCH, Some(old))).await;
        assert_eq!(got.as_deref(), Some("late"));
        // A read waits as long as it must: a watch's relist is never refused.
        assert_eq!(
            refusal(&mut gate, request(Method::GET, Some(old))).await,
            None
        );
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }
}
