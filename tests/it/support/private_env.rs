//! A control plane of one's own, for tests and benchmarks that must not share the one `make test`
//! starts: the chaos test restarts kube-apiserver and gardener-apiserver, the load benchmark reads
//! the apiserver's own request counters. Started and stopped through the launcher (`testenv
//! up|down|restart-apiserver|restart-gardener-apiserver --dir DIR`, optionally with a separate
//! garden); `hap run` replicas run as child processes with that control plane's kubeconfig.
//!
//! Self-contained (no `super::` items) so that `examples/load/main.rs` can include it by path.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::{Client, Config};

#[path = "crd_wait.rs"]
pub mod crd_wait;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory of the control-plane binaries and the launcher: `HAP_K8S_BIN`, else whatever
/// `e2e/build-control-plane.sh` prints (building them on first use).
pub fn k8s_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("HAP_K8S_BIN") {
        return PathBuf::from(bin);
    }
    let out = Command::new(repo_root().join("e2e/build-control-plane.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run e2e/build-control-plane.sh");
    assert!(out.status.success(), "e2e/build-control-plane.sh failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// gardener-apiserver: `HAP_GARDENER_APISERVER`, else whatever `e2e/build-gardener.sh` prints
/// (building it on first use).
pub fn gardener_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("HAP_GARDENER_APISERVER") {
        return PathBuf::from(bin);
    }
    let out = Command::new(repo_root().join("e2e/build-gardener.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run e2e/build-gardener.sh");
    assert!(out.status.success(), "e2e/build-gardener.sh failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// One control plane in its own state directory, serving the real Gardener API (the launcher
/// bootstraps CloudProfiles, ControllerRegistrations and the project `kyma`). Dropping the value
/// `up` returned stops it (`testenv down`); handles from `handle()` and `garden()` do not.
pub struct PrivateEnv {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    bin: PathBuf,
    gardener: PathBuf,
    owner: bool,
}

impl PrivateEnv {
    /// Starts etcd, kube-apiserver, kube-controller-manager and gardener-apiserver in `dir` and
    /// installs the product's CRDs.
    pub fn up(dir: &Path) -> Self {
        Self::start(dir, &[])
    }

    /// Two clusters, as in a real landscape: the operator's (the product's CRDs, no Gardener
    /// API) in `dir` and a separate garden in `dir/garden` (see [`PrivateEnv::garden`]).
    pub fn up_with_garden(dir: &Path) -> Self {
        Self::start(dir, &["--garden"])
    }

    fn start(dir: &Path, flags: &[&str]) -> Self {
        let env = Self {
            dir: dir.to_path_buf(),
            kubeconfig: dir.join("kubeconfig"),
            bin: k8s_bin(),
            gardener: gardener_bin(),
            owner: true,
        };
        let mut args = vec!["up"];
        args.extend_from_slice(flags);
        let out = env.launcher(&args);
        assert!(out.0, "testenv up --dir {}: {}", dir.display(), out.1);
        let path = repo_root().join("crds");
        let (ok, _, err) = env.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            path.to_str().expect("utf-8 path"),
        ]);
        assert!(ok, "installing crds/: {err}");
        crd_wait::wait_established(
            |args| env.kubectl(args),
            crd_wait::PRODUCT_CRDS,
            Duration::from_secs(60),
        );
        env
    }

    /// The separate garden started by [`PrivateEnv::up_with_garden`]: a handle (stopped with
    /// the outer control plane).
    pub fn garden(&self) -> Self {
        let dir = self.dir.join("garden");
        assert!(
            dir.join("kubeconfig").exists(),
            "no separate garden in {}: start with PrivateEnv::up_with_garden",
            self.dir.display()
        );
        Self {
            kubeconfig: dir.join("kubeconfig"),
            dir,
            bin: self.bin.clone(),
            gardener: self.gardener.clone(),
            owner: false,
        }
    }

    fn launcher(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(self.bin.join("testenv"))
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .arg("--bin")
            .arg(&self.bin)
            .arg("--gardener-bin")
            .arg(&self.gardener)
            .output()
            .expect("run the testenv launcher");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// Stops only kube-apiserver, keeps it down for `down_for`, starts it again with the same
    /// flags and waits for /readyz. Returns how long the API was unavailable.
    pub fn restart_apiserver(&self, down_for: Duration) -> Duration {
        let started = Instant::now();
        let down = format!("{}ms", down_for.as_millis());
        let (ok, out) = self.launcher(&["restart-apiserver", "--down-for", &down]);
        assert!(ok, "testenv restart-apiserver: {out}");
        started.elapsed()
    }

    /// Stops only gardener-apiserver, keeps it down for `down_for`, starts it again and waits
    /// until its APIServices are Available. Returns how long the Gardener API was unavailable.
    pub fn restart_gardener_apiserver(&self, down_for: Duration) -> Duration {
        let started = Instant::now();
        let down = format!("{}ms", down_for.as_millis());
        let (ok, out) = self.launcher(&["restart-gardener-apiserver", "--down-for", &down]);
        assert!(ok, "testenv restart-gardener-apiserver: {out}");
        started.elapsed()
    }

    /// Starts gardener-apiserver again with the admission `plugins` (comma-separated) off until
    /// its next restart — for a benchmark that must measure the operator, not
    /// ResourceReferenceManager's rate-limited Secret checks (see BENCHMARKS.md).
    pub fn disable_gardener_admission(&self, plugins: &str) {
        let (ok, out) = self.launcher(&[
            "restart-gardener-apiserver",
            "--down-for",
            "0ms",
            "--disable-admission",
            plugins,
        ]);
        assert!(
            ok,
            "testenv restart-gardener-apiserver --disable-admission: {out}"
        );
    }

    /// `restart_gardener_apiserver` off the async runtime's worker threads.
    pub async fn restart_gardener_apiserver_async(&self, down_for: Duration) -> Duration {
        let env = self.handle();
        tokio::task::spawn_blocking(move || env.restart_gardener_apiserver(down_for))
            .await
            .expect("restart task")
    }

    /// A handle on the same control plane that does not stop it when dropped.
    pub fn handle(&self) -> Self {
        Self {
            dir: self.dir.clone(),
            kubeconfig: self.kubeconfig.clone(),
            bin: self.bin.clone(),
            gardener: self.gardener.clone(),
            owner: false,
        }
    }

    /// kube-apiserver's audit log (every request not made with the admin token).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("logs").join("audit.log")
    }

    /// `restart_apiserver` off the async runtime's worker threads.
    pub async fn restart_apiserver_async(&self, down_for: Duration) -> Duration {
        let env = self.handle();
        tokio::task::spawn_blocking(move || env.restart_apiserver(down_for))
            .await
            .expect("restart task")
    }

    /// Stops the control plane and removes its state directory (logs included).
    pub fn down(&self) {
        let _ = self.launcher(&["down"]);
    }

    /// Copies the control plane's logs to `to` (before `down` removes them).
    pub fn save_logs(&self, to: &Path) {
        let _ = std::fs::create_dir_all(to);
        if let Ok(entries) = std::fs::read_dir(self.dir.join("logs")) {
            for e in entries.flatten() {
                let _ = std::fs::copy(e.path(), to.join(e.file_name()));
            }
        }
        if self.dir.join("garden/logs").exists() {
            self.garden().save_logs(&to.join("garden"));
        }
    }

    /// A client with the admin token of this control plane.
    pub async fn client(&self) -> Client {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("read kubeconfig");
        let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("kubeconfig");
        Client::try_from(config).expect("client")
    }

    /// Runs kubectl against this control plane; returns (success, stdout, stderr).
    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(self.bin.join("kubectl"))
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .output()
            .expect("run kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into(),
            String::from_utf8_lossy(&out.stderr).into(),
        )
    }

    /// kube-apiserver's own Prometheus metrics (`GET /metrics` as the admin).
    pub fn apiserver_metrics(&self) -> String {
        let (ok, out, err) = self.kubectl(&["get", "--raw", "/metrics"]);
        assert!(ok, "GET /metrics: {err}");
        out
    }

    /// gardener-apiserver's own Prometheus metrics, straight from its port (requests to the
    /// Gardener API are counted there; kube-apiserver only proxies them).
    pub fn gardener_metrics(&self) -> String {
        let port = std::fs::read_to_string(self.dir.join("run/gardener-port"))
            .expect("gardener-apiserver port (is the Gardener API served here?)");
        let server = format!("--server=https://127.0.0.1:{}", port.trim());
        let (ok, out, err) = self.kubectl(&[&server, "get", "--raw", "/metrics"]);
        assert!(ok, "GET gardener-apiserver /metrics: {err}");
        out
    }
}

impl Drop for PrivateEnv {
    fn drop(&mut self) {
        if self.owner {
            self.down();
        }
    }
}

/// `apiserver_request_total` summed by (verb, resource, subresource), ignoring code, scope and
/// the rest.
pub fn request_counts(metrics: &str) -> std::collections::BTreeMap<(String, String, String), f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split("\",")
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let value: f64 = value.trim().parse().unwrap_or(0.0);
        *out.entry((label("verb"), label("resource"), label("subresource")))
            .or_insert(0.0) += value;
    }
    out
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The environment the image sets: every `KEY=value` of the Containerfile's `ENV` instructions,
/// in order. What this cannot read (`ENV KEY value`, quotes, a line continued with `\`) is a
/// panic, not a variable quietly dropped; e2e_dist compares the result with buildah's config.
pub fn containerfile_env() -> Vec<(String, String)> {
    let path = repo_root().join("Containerfile");
    let file = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    file.lines()
        .filter_map(|l| {
            let (word, rest) = l.trim_start().split_once(char::is_whitespace)?;
            word.eq_ignore_ascii_case("ENV").then_some(rest)
        })
        .flat_map(str::split_whitespace)
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() && !v.contains(['"', '\'', '\\']) => {
                (k.to_string(), v.to_string())
            }
            _ => panic!("Containerfile: cannot read `ENV {kv}` (write KEY=value, unquoted)"),
        })
        .collect()
}

/// What the operator runs with of the image's environment, so that a benchmark of the image's
/// binary runs it as a pod would: the Containerfile's variables that the caller's environment
/// does not set (the caller's win). The glibc build ignores the allocator's.
pub fn image_env() -> Vec<(String, String)> {
    containerfile_env()
        .into_iter()
        .filter(|(k, _)| std::env::var_os(k).is_none())
        .collect()
}

/// `hap run` as a child process, its stdout and stderr in `log`.
pub struct OperatorProcess {
    pub child: Child,
    pub port: u16,
    pub identity: String,
    pub log: PathBuf,
    pub started: Instant,
}

impl OperatorProcess {
    /// Spawns `hap` (the binary at `hap`) with `run` and `args` plus `--http-addr` and
    /// `--identity`.
    pub fn spawn(
        hap: &Path,
        kubeconfig: &Path,
        identity: &str,
        args: &[String],
        log: &Path,
    ) -> Self {
        let port = free_port();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("operator log file");
        let child = Command::new(hap)
            .arg("run")
            .args(args)
            .args(["--identity", identity])
            .args(["--http-addr", &format!("127.0.0.1:{port}")])
            // Benchmarks and chaos read the plain /metrics (tests/it/e2e_metrics_auth.rs covers
            // the HTTPS one).
            .arg("--metrics-secure=false")
            .env("KUBECONFIG", kubeconfig)
            .envs(image_env())
            // The topology is the caller's choice (`--garden-kubeconfig` in `args`), never
            // inherited.
            .env_remove("HAP_GARDEN_KUBECONFIG")
            .env_remove("RUST_LOG")
            // HAP_OPERATOR_LOG=<filter> (e.g. hap_operator=debug) reaches the operator's RUST_LOG.
            .envs(std::env::var("HAP_OPERATOR_LOG").map(|f| ("RUST_LOG", f)))
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("spawn hap run");
        Self {
            child,
            port,
            identity: identity.to_string(),
            log: log.to_path_buf(),
            started: Instant::now(),
        }
    }

    /// `GET path` on the operator's HTTP port: (status code, whole response).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.port, path)
    }

    /// Whether the process has exited (reaps it), with its status.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends a signal by name (`STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, name: &str) -> bool {
        Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// (VmRSS, VmHWM) in KiB from /proc.
    pub fn memory_kib(&self) -> Option<(u64, u64)> {
        memory_kib(self.child.id())
    }

    /// (RssAnon, RssFile) in KiB from /proc: heap and stacks, and the mapped binary.
    pub fn rss_split_kib(&self) -> Option<(u64, u64)> {
        status_kib(self.child.id(), "RssAnon:", "RssFile:")
    }
}

/// (VmRSS, VmHWM) in KiB of process `pid`; `None` once it has exited (a zombie has neither).
pub fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    status_kib(pid, "VmRSS:", "VmHWM:")
}

fn status_kib(pid: u32, a: &str, b: &str) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field(a)?, field(b)?))
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A minimal HTTP/1.1 GET, enough for the operator's probes and metrics.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, buf))
}

/// A numeric setting of a benchmark from the environment, else `default`.
pub fn env_num(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `hap` binary a benchmark runs: `HAP_BIN`, else the one cargo built next to the example
/// (target/<profile>/examples/X -> target/<profile>/hap).
pub fn hap_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("HAP_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .map(|d| d.join("hap"))
        .filter(|p| p.exists())
        .expect("no hap binary next to this example: build it (cargo build --release --bin hap) or set HAP_BIN")
}
