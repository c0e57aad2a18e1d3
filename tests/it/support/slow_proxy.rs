//! A TCP proxy in front of an API server that delays what clients send by a fixed time (the
//! server's answers flow at once): every request, read or write, arrives that much later, as
//! over a slow network or at an overloaded API server. Bytes keep their order and are not
//! throttled, only shifted in time.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub struct SlowProxy {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl SlowProxy {
    /// Listens on a free loopback port and forwards every connection to `target`, each chunk a
    /// client sends `delay` after it arrived.
    pub async fn start(target: SocketAddr, delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy port");
        let addr = listener.local_addr().expect("proxy address");
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if let Ok(server) = TcpStream::connect(target).await {
                    tokio::spawn(pump(client, server, delay));
                }
            }
        });
        Self { addr, task }
    }

    /// A copy of `kubeconfig` (one cluster at `https://127.0.0.1:<port>`) pointing at this
    /// proxy, written to `path`.
    pub fn kubeconfig(&self, kubeconfig: &Path, path: PathBuf) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
        let server = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .expect("a server in the kubeconfig")
            .trim_matches('"')
            .to_string();
        let via = text.replace(&server, &format!("https://{}", self.addr));
        std::fs::write(&path, via).expect("proxied kubeconfig");
        path
    }

    /// The `host:port` of the API server a kubeconfig points at.
    pub fn target_of(kubeconfig: &Path) -> SocketAddr {
        let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
        text.lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .expect("a server in the kubeconfig")
            .trim_matches('"')
            .trim_start_matches("https://")
            .parse()
            .expect("the server as 127.0.0.1:port")
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(client: TcpStream, server: TcpStream, delay: Duration) {
    let (mut client_rd, mut client_wr) = client.into_split();
    let (mut server_rd, mut server_wr) = server.into_split();
    let down = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_rd, &mut client_wr).await;
        let _ = client_wr.shutdown().await;
    });
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let up = tokio::spawn(async move {
        while let Some((arrived, bytes)) = rx.recv().await {
            tokio::time::sleep_until(arrived + delay).await;
            if server_wr.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = server_wr.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match client_rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        }
    }
    drop(tx);
    let _ = up.await;
    down.abort();
}
