//! hap-testkit: a scripted API server for reconcile unit tests, a kube client whose service
//! takes each request in turn from a script, checks its method, path, query and body against the
//! next scripted call, and answers it. A request that matches no call, or one left unmade, fails
//! the test in [`Script::done`]. One request sequence per test, as in kube-rs/controller-rs;
//! everything beyond one reconcile's calls is tested against a real API server in `tests/`.
//! A request the code under test repeats on its own clock (a failing watch's list, retried after
//! its backoff) can be answered outside the sequence ([`Script::always`]).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use kube::client::Body;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use serde_json::{Value, json};

/// What a scripted call checks in a request's body.
#[derive(Clone)]
enum BodyCheck {
    /// No body, or one nobody reads (a GET, a DELETE without options).
    Any,
    /// Exactly this JSON.
    Exact(Value),
    /// At least this JSON: every key given, with this value (recursively); arrays element by
    /// element with the same length. For bodies with times and generated names.
    Includes(Value),
}

/// How a scripted call is answered.
#[derive(Clone)]
enum Answer {
    Json(u16, Value),
    /// Never: a watch that stays open.
    Hang,
}

/// One expected request and its answer.
#[derive(Clone)]
pub struct Call {
    method: http::Method,
    path: String,
    query: BTreeMap<String, String>,
    body: BodyCheck,
    answer: Answer,
}

impl Call {
    fn new(method: http::Method, path: &str) -> Self {
        Self {
            method,
            path: path.to_string(),
            query: BTreeMap::new(),
            body: BodyCheck::Any,
            answer: Answer::Json(200, json!({})),
        }
    }
    pub fn get(path: &str) -> Self {
        Self::new(http::Method::GET, path)
    }
    pub fn post(path: &str) -> Self {
        Self::new(http::Method::POST, path)
    }
    pub fn patch(path: &str) -> Self {
        Self::new(http::Method::PATCH, path)
    }
    /// The whole query, every parameter named (`fieldManager`, `force`, `watch`, …).
    pub fn query(mut self, pairs: &[(&str, &str)]) -> Self {
        self.query = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self
    }
    pub fn body(mut self, body: Value) -> Self {
        self.body = BodyCheck::Exact(body);
        self
    }
    pub fn body_includes(mut self, body: Value) -> Self {
        self.body = BodyCheck::Includes(body);
        self
    }
    /// Answers with `code` and `body` (200 and `{}` unless set).
    pub fn answer(mut self, code: u16, body: Value) -> Self {
        self.answer = Answer::Json(code, body);
        self
    }
    /// Answers a write with an object of this resourceVersion.
    pub fn answer_rv(self, rv: &str) -> Self {
        self.answer(200, json!({"metadata": {"resourceVersion": rv}}))
    }
    /// Answers with a Status of `code` and `reason` (409 Conflict, 404 NotFound, …).
    pub fn fail(self, code: u16, reason: &str) -> Self {
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("scripted {reason}"), "reason": reason, "code": code,
        });
        self.answer(code, status)
    }
    /// Never answers (a watch request that stays open).
    pub fn hang(mut self) -> Self {
        self.answer = Answer::Hang;
        self
    }
    fn describe(&self) -> String {
        format!("{} {} {:?}", self.method, self.path, self.query)
    }
}

/// A request as the mock received it.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: http::Method,
    pub path: String,
    pub query: BTreeMap<String, String>,
    pub body: Option<Value>,
}

impl Received {
    fn describe(&self) -> String {
        let body = self.body.as_ref().map(Value::to_string).unwrap_or_default();
        format!("{} {} {:?} {body}", self.method, self.path, self.query)
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Call>,
    /// Answered whenever a request matches, outside the sequence (`Script::always`).
    standing: Vec<Call>,
    received: Vec<Received>,
    /// What went wrong, in order; `done` fails with all of it.
    failures: Vec<String>,
}

/// The test's side of the mock: the script, and what was received.
#[derive(Clone, Default)]
pub struct Script(Arc<Mutex<State>>);

/// A client whose every request is checked against `script`.
pub fn client() -> (kube::Client, Script) {
    let script = Script::default();
    let client = kube::Client::new(Service(script.clone()), "default");
    (client, script)
}

impl Script {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends calls to the script, in the order they must be made.
    pub fn expect(&self, calls: impl IntoIterator<Item = Call>) {
        self.state().script.extend(calls);
    }

    /// Answers every request that matches `call` (method, path, query and body) with its
    /// answer, whenever it comes and however often, outside the scripted sequence: for a request
    /// that is not the reconcile's own but that of a watch retrying on its own clock (its list
    /// failing). It is not required to come; the test waits for its effect instead.
    pub fn always(&self, call: Call) {
        self.state().standing.push(call);
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.state().received.clone()
    }

    /// Calls still to come.
    pub fn left(&self) -> usize {
        self.state().script.len()
    }

    /// Fails the test when a request did not match its call, came unscripted, or a call was
    /// never made. Ends the script's part of a test; more calls can be scripted after it.
    #[track_caller]
    pub fn done(&self) {
        let mut s = self.state();
        let mut msg = String::new();
        for f in s.failures.drain(..) {
            let _ = writeln!(msg, "  {f}");
        }
        for c in s.script.drain(..) {
            let _ = writeln!(msg, "  never made: {}", c.describe());
        }
        if !msg.is_empty() {
            let got: Vec<String> = s.received.iter().map(Received::describe).collect();
            panic!(
                "the API calls differ from the script:\n{msg}received, in order:\n  {}",
                got.join("\n  ")
            );
        }
    }

    /// Waits until every scripted call was made, up to `limit`.
    pub async fn consumed_within(&self, limit: Duration) -> bool {
        let end = tokio::time::Instant::now() + limit;
        while self.left() > 0 {
            if tokio::time::Instant::now() > end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// Takes the next call for `got` and returns its answer.
    fn answer(&self, got: Received) -> Answer {
        let mut s = self.state();
        s.received.push(got.clone());
        if let Some(standing) = s.standing.iter().find(|c| mismatch(c, &got).is_none()) {
            return standing.answer.clone();
        }
        let Some(call) = s.script.pop_front() else {
            s.failures.push(format!("unexpected: {}", got.describe()));
            return Answer::Json(500, json!({"message": "unscripted request"}));
        };
        if let Some(why) = mismatch(&call, &got) {
            let failure = format!("{}\n    expected: {}", why, call.describe());
            s.failures.push(failure);
        }
        call.answer
    }
}

/// Why `got` is not `call`, if it is not.
fn mismatch(call: &Call, got: &Received) -> Option<String> {
    if call.method != got.method || call.path != got.path || call.query != got.query {
        return Some(format!("other request: {}", got.describe()));
    }
    let body = got.body.clone().unwrap_or(Value::Null);
    match &call.body {
        BodyCheck::Any => None,
        BodyCheck::Exact(want) if *want == body => None,
        BodyCheck::Exact(want) => Some(format!(
            "other body of {} {}:\n    want {want}\n    got  {body}",
            got.method, got.path
        )),
        BodyCheck::Includes(want) => includes(&body, want, "").map(|at| {
            format!(
                "body of {} {} differs at `{at}`:\n    want (at least) {want}\n    got {body}",
                got.method, got.path
            )
        }),
    }
}

/// The first place (a JSON pointer) where `got` lacks what `want` has.
fn includes(got: &Value, want: &Value, at: &str) -> Option<String> {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => w.iter().find_map(|(k, wv)| {
            let here = format!("{at}/{k}");
            match g.get(k) {
                Some(gv) => includes(gv, wv, &here),
                None => Some(here),
            }
        }),
        (Value::Array(g), Value::Array(w)) if g.len() == w.len() => g
            .iter()
            .zip(w)
            .enumerate()
            .find_map(|(i, (gv, wv))| includes(gv, wv, &format!("{at}/{i}"))),
        _ if got == want => None,
        _ => Some(at.to_string()),
    }
}

#[derive(Clone)]
struct Service(Script);

impl tower_service::Service<http::Request<Body>> for Service {
    type Response = http::Response<Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let script = self.0.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let body = (!bytes.is_empty()).then(|| {
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
            });
            let query = parts
                .uri
                .query()
                .unwrap_or_default()
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (k.to_string(), decode(v)),
                    None => (p.to_string(), String::new()),
                })
                .collect();
            let got = Received {
                method: parts.method,
                path: parts.uri.path().to_string(),
                query,
                body,
            };
            match script.answer(got) {
                Answer::Json(code, v) => {
                    let bytes = serde_json::to_vec(&v).unwrap_or_default();
                    let mut response = http::Response::new(Body::from(bytes));
                    *response.status_mut() =
                        http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::OK);
                    response.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/json"),
                    );
                    Ok(response)
                }
                Answer::Hang => futures::future::pending().await,
            }
        })
    }
}

/// A query value with its percent escapes decoded (label selectors, field managers).
fn decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(c) => out.push(c),
                    Err(_) => out.extend_from_slice(&b[i..i + 3]),
                }
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A reflector store that has listed, and its writer (to change it as its watch would).
pub struct Listed<K: kube::Resource + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    writer: reflector::store::Writer<K>,
}

impl<K> Listed<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    /// A store that has listed `objects`.
    pub fn new(objects: Vec<K>) -> Self {
        let (store, mut writer) = reflector::store::<K>();
        writer.apply_watcher_event(&watcher::Event::Init);
        for o in objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(o));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        Self { store, writer }
    }

    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Applies `obj` as a watch event would.
    pub fn apply(&mut self, obj: K) {
        self.writer.apply_watcher_event(&watcher::Event::Apply(obj));
    }

    /// Deletes `obj` as a watch event would.
    pub fn delete(&mut self, obj: K) {
        self.writer
            .apply_watcher_event(&watcher::Event::Delete(obj));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_includes_what_is_asked_and_says_where_it_differs() {
        let got = json!({"a": {"b": 1, "c": [1, {"d": 2, "e": 3}]}, "f": "x"});
        assert_eq!(
            includes(&got, &json!({"a": {"c": [1, {"d": 2}]}}), ""),
            None
        );
        assert_eq!(
            includes(&got, &json!({"a": {"c": [1, {"d": 3}]}}), ""),
            Some("/a/c/1/d".into())
        );
        assert_eq!(
            includes(&got, &json!({"a": {"c": [1]}}), ""),
            Some("/a/c".into())
        );
        assert_eq!(includes(&got, &json!({"g": 1}), ""), Some("/g".into()));
    }

    #[test]
    fn query_values_are_decoded() {
        assert_eq!(decode("hap%2Doperator"), "hap-operator");
        assert_eq!(decode("a%3Db+c"), "a=b c");
        assert_eq!(decode("%"), "%");
    }

    #[tokio::test]
    async fn a_request_off_the_script_fails_the_test() {
        let (client, script) = client();
        script.expect([Call::get("/api/v1/namespaces/x")]);
        let request = http::Request::get("/api/v1/namespaces/y")
            .body(Vec::new())
            .expect("request");
        let _ = client.request_text(request).await;
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| script.done()));
        assert!(failed.is_err(), "a wrong path passed");
        // A scripted call never made fails too.
        script.expect([Call::get("/api/v1/namespaces/x")]);
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| script.done())).is_err());
    }

    #[tokio::test]
    async fn a_standing_call_is_answered_every_time_outside_the_sequence() {
        let (client, script) = client();
        script.always(Call::get("/api/v1/namespaces/w").fail(403, "Forbidden"));
        script.expect([Call::get("/api/v1/namespaces/x")]);
        let get = |ns: &str| {
            let request = http::Request::get(format!("/api/v1/namespaces/{ns}"))
                .body(Vec::new())
                .expect("request");
            client.request_text(request)
        };
        assert!(get("w").await.is_err(), "the standing answer");
        assert!(get("x").await.is_ok(), "the sequence is untouched");
        assert!(get("w").await.is_err(), "answered again");
        script.done();
        // Only a request that matches it: any other still takes its place in the sequence.
        assert!(get("y").await.is_err());
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| script.done())).is_err());
    }
}
