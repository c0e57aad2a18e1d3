//! A phase's window as the machine saw it: each process's CPU, how busy the machine was, and
//! kube-apiserver's requests. The admission benchmark prints them per phase, so that what a call
//! costs, API servers included, comes from its command and not from a profiler run beside it.

use std::collections::BTreeMap;
use std::time::Instant;

/// The counters at one instant.
pub struct Sample {
    at: Instant,
    /// CPU ticks (1/100 s) by process name.
    ticks: BTreeMap<String, u64>,
    /// The machine's (busy, idle) ticks over all CPUs.
    machine: (u64, u64),
    /// kube-apiserver's `apiserver_request_total` by (verb, resource, subresource).
    requests: BTreeMap<(String, String, String), f64>,
}

/// Reads the counters: the processes whose command line names `dir` (the benchmark's control
/// plane and operator, all started under it) and this one, as `client`.
pub async fn sample(client: &kube::Client, dir: &str) -> Sample {
    let at = Instant::now();
    let ticks = process_ticks(dir);
    let machine = machine_ticks().unwrap_or_default();
    let metrics = match http::Request::get("/metrics").body(Vec::new()) {
        Ok(req) => client.request_text(req).await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    Sample {
        at,
        ticks,
        machine,
        requests: crate::private_env::request_counts(&metrics),
    }
}

/// Prints the window between two samples, per call.
pub fn report(label: &str, rate: usize, calls: usize, before: &Sample, after: &Sample) {
    let per_call = calls.max(1) as f64;
    let secs = after.at.duration_since(before.at).as_secs_f64();
    let busy = after.machine.0.saturating_sub(before.machine.0) as f64;
    let idle = after.machine.1.saturating_sub(before.machine.1) as f64;
    let mut cpu = Vec::new();
    let mut all = 0.0;
    for (name, t) in &after.ticks {
        let ms = t.saturating_sub(before.ticks.get(name).copied().unwrap_or(*t)) as f64 * 10.0;
        all += ms;
        cpu.push(format!("{name} {:.1}", ms / per_call));
    }
    println!(
        "window | {label} | {rate}/s | {calls} calls in {secs:.1} s | machine {:.0} % busy | CPU ms a call: {}, all {:.1} |",
        100.0 * busy / (busy + idle).max(1.0),
        cpu.join(", "),
        all / per_call
    );
    let requests: Vec<String> = after
        .requests
        .iter()
        .filter_map(|((verb, resource, sub), n)| {
            let d = (n - before
                .requests
                .get(&(verb.clone(), resource.clone(), sub.clone()))
                .unwrap_or(&0.0))
                / per_call;
            let name = if sub.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{sub}")
            };
            (d >= 0.05).then(|| format!("{verb} {name} {d:.2}"))
        })
        .collect();
    println!(
        "window | {label} | {rate}/s | kube-apiserver requests a call: {} |",
        requests.join(", ")
    );
}

fn process_ticks(dir: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(dir) {
            continue;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if let Some(t) = ticks(&format!("/proc/{pid}/stat")) {
            *out.entry(comm.trim().to_string()).or_insert(0) += t;
        }
    }
    if let Some(t) = ticks("/proc/self/stat") {
        out.insert("client".into(), t);
    }
    out
}

/// utime + stime of a `/proc/PID/stat`: fields 14 and 15, counted after the command name's
/// closing parenthesis (the name may hold spaces).
fn ticks(stat: &str) -> Option<u64> {
    let text = std::fs::read_to_string(stat).ok()?;
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The first line of `/proc/stat`: (busy, idle + iowait) ticks over all CPUs.
fn machine_ticks() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<u64> = text
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    let idle = f.get(3)? + f.get(4)?;
    Some((f.iter().sum::<u64>() - idle, idle))
}
