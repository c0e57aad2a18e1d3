//! `perf record -g` on the operator over one phase, when HAP_BENCH_PERF is set (off by
//! default): HAP_BENCH_PERF=<dir> keeps perf.data there, any other value in the run's log
//! directory (removed at the end).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// How many entries of `perf report` the benchmark prints.
const TOP: usize = 8;

pub struct Perf {
    child: Child,
    data: PathBuf,
}

impl Perf {
    /// Starts `perf record` on `pid` if HAP_BENCH_PERF asks for it and perf can start.
    pub fn start_if_asked(pid: u32, logs: &Path) -> Option<Self> {
        let dir = std::env::var_os("HAP_BENCH_PERF").filter(|v| !v.is_empty())?;
        let dir = Path::new(&dir);
        let dir = if dir.is_dir() { dir } else { logs };
        let data = dir.join(format!("perf-{pid}.data"));
        let perf = std::env::var_os("PERF").unwrap_or_else(|| "perf".into());
        let child = Command::new(perf)
            .args(["record", "-g", "-o"])
            .arg(&data)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(child) => {
                // perf attaches within a moment; the phase starts right after.
                std::thread::sleep(std::time::Duration::from_millis(500));
                Some(Self { child, data })
            }
            Err(e) => {
                println!("perf record did not start: {e}");
                None
            }
        }
    }

    /// Stops the recording (SIGINT, so that perf writes its data) and returns the top entries
    /// of `perf report --no-children` (self time).
    pub fn finish(mut self) -> Vec<String> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let _ = self.child.wait();
        let perf = std::env::var_os("PERF").unwrap_or_else(|| "perf".into());
        let out = Command::new(perf)
            .args(["report", "--stdio", "--no-children", "-g", "none", "-i"])
            .arg(&self.data)
            .output();
        let text = match out {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(e) => return vec![format!("perf report failed: {e}")],
        };
        println!("perf data: {}", self.data.display());
        top_entries(&text, TOP)
    }
}

/// The first `n` entries of a `perf report --stdio` text: lines that open with a percentage.
fn top_entries(report: &str, n: usize) -> Vec<String> {
    report
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.starts_with('#')
                && t.split_whitespace()
                    .next()
                    .is_some_and(|w| w.ends_with('%'))
        })
        .take(n)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}
