//! The bare-LIST floor of a start: the paginated LISTs of every kind the operator caches, with
//! nothing else done, timed in the same run right before the operator starts.

use std::time::{Duration, Instant};

use kube::Client;
use serde::Deserialize;
use serde::de::IgnoredAny;

/// The operator's page size (`k8s::caches::LIST_PAGE`).
const PAGE: u32 = hap_operator::k8s::caches::LIST_PAGE;

/// One kind the operator lists at its start: a name for the output and its collection URL.
pub struct Kind {
    pub name: &'static str,
    pub url: String,
}

/// A page as far as the floor reads it: the item count and the continue token; the items are
/// skipped unparsed, so that the floor is the server's answer and the transfer, not decoding.
#[derive(Deserialize)]
struct Page {
    items: Vec<IgnoredAny>,
    metadata: PageMeta,
}

#[derive(Deserialize)]
struct PageMeta {
    #[serde(rename = "continue")]
    continue_: Option<String>,
}

/// The floor's figures: each kind listed alone one after the other, then all at once.
pub struct Floor {
    /// (kind, objects, time) of the sequential lists.
    pub sequential: Vec<(&'static str, usize, Duration)>,
    /// The three lists started together, as the operator's caches start: the slowest one.
    pub concurrent: Duration,
}

impl Floor {
    pub fn sequential_total(&self) -> Duration {
        self.sequential.iter().map(|(_, _, t)| *t).sum()
    }

    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .sequential
            .iter()
            .map(|(k, n, t)| format!("{k} {n} in {t:.2?}"))
            .collect();
        format!(
            "sequential {:.2?} ({}); concurrent {:.2?}",
            self.sequential_total(),
            parts.join(", "),
            self.concurrent
        )
    }
}

/// Lists every page of `url` (no resourceVersion: a consistent read, as the operator's watches
/// begin) and returns the number of objects and the time taken.
async fn list_all(client: &Client, url: &str) -> (usize, Duration) {
    let start = Instant::now();
    let (mut count, mut token) = (0, None::<String>);
    loop {
        let mut q = format!("{url}?limit={PAGE}");
        if let Some(t) = &token {
            q.push_str("&continue=");
            q.push_str(&urlencode(t));
        }
        let req = http::Request::get(&q)
            .body(Vec::new())
            .expect("list request");
        let text = client.request_text(req).await.expect("bare LIST");
        let page: Page = serde_json::from_str(&text).expect("list page");
        count += page.items.len();
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return (count, start.elapsed());
        }
    }
}

/// Continue tokens are base64 (`+`, `/`, `=`): enough escaping for a query value.
fn urlencode(s: &str) -> String {
    s.replace('%', "%25")
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}

/// One pass over `kinds`: sequential, then concurrent.
async fn pass(client: &Client, kinds: &[Kind]) -> Floor {
    let mut sequential = Vec::new();
    for k in kinds {
        let (n, t) = list_all(client, &k.url).await;
        sequential.push((k.name, n, t));
    }
    let start = Instant::now();
    futures::future::join_all(kinds.iter().map(|k| list_all(client, &k.url))).await;
    Floor {
        sequential,
        concurrent: start.elapsed(),
    }
}

/// The floor of `kinds`: `passes` passes (at least one), each figure the lowest. The first
/// LIST after the setup's writes may be the slower (kube-apiserver's and etcd's caches cold),
/// and the operator starts right after the last pass, on warm caches.
pub async fn measure(client: &Client, kinds: &[Kind], passes: usize) -> Floor {
    let mut best = pass(client, kinds).await;
    println!("bare-LIST floor, pass 1: {}", best.describe());
    for i in 2..=passes {
        let next = pass(client, kinds).await;
        println!("bare-LIST floor, pass {i}: {}", next.describe());
        for (a, b) in best.sequential.iter_mut().zip(&next.sequential) {
            a.2 = a.2.min(b.2);
        }
        best.concurrent = best.concurrent.min(next.concurrent);
    }
    best
}
