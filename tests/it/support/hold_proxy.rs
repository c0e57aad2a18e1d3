//! A TCP proxy in front of an API server that can hold what clients send: while held, bytes
//! from every client connection are kept (the server's answers and watch events still flow),
//! and on release they are sent on — even for a client that has gone away meanwhile, so a
//! request written just before its process stopped still reaches the server afterwards, as a
//! write stuck in a slow network would. The proxy sees TLS records only: "a write is held" means
//! a client sent something while held (the caller arranges that this is the write it wants).
//!
//! Self-contained (no `super::` items) so that `tests/it/chaos.rs` can include it by path.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct HoldProxy {
    pub addr: SocketAddr,
    held: watch::Sender<bool>,
    /// Bytes clients sent while held, not yet passed on.
    pending: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl HoldProxy {
    /// Listens on a free loopback port and forwards every connection to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy port");
        let addr = listener.local_addr().expect("proxy address");
        let (held, _) = watch::channel(false);
        let pending = Arc::new(AtomicUsize::new(0));
        let task = {
            let (held, pending) = (held.clone(), pending.clone());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(target).await else {
                        continue;
                    };
                    tokio::spawn(pump(client, server, held.subscribe(), pending.clone()));
                }
            })
        };
        Self {
            addr,
            held,
            pending,
            task,
        }
    }

    pub fn hold(&self) {
        self.held.send_replace(true);
    }

    pub fn release(&self) {
        self.held.send_replace(false);
    }

    /// Bytes sent by clients while held and not yet passed on.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }
}

impl Drop for HoldProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    client: TcpStream,
    server: TcpStream,
    mut held: watch::Receiver<bool>,
    pending: Arc<AtomicUsize>,
) {
    let (mut client_rd, mut client_wr) = client.into_split();
    let (mut server_rd, mut server_wr) = server.into_split();
    // Answers and watch events are never held.
    let down = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_rd, &mut client_wr).await;
        let _ = client_wr.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    let mut kept: Vec<u8> = Vec::new();
    let mut client_open = true;
    loop {
        if !*held.borrow() && !kept.is_empty() {
            if server_wr.write_all(&kept).await.is_err() {
                break;
            }
            pending.fetch_sub(kept.len(), Ordering::Relaxed);
            kept.clear();
        }
        if !client_open {
            if kept.is_empty() {
                break;
            }
            // The client is gone: its last bytes still go out once released.
            if held.changed().await.is_err() {
                break;
            }
            continue;
        }
        tokio::select! {
            n = client_rd.read(&mut buf) => match n {
                Ok(0) | Err(_) => client_open = false,
                Ok(n) if *held.borrow() => {
                    kept.extend_from_slice(&buf[..n]);
                    pending.fetch_add(n, Ordering::Relaxed);
                }
                Ok(n) => {
                    if server_wr.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            },
            changed = held.changed() => if changed.is_err() { break },
        }
    }
    pending.fetch_sub(kept.len(), Ordering::Relaxed);
    let _ = server_wr.shutdown().await;
    let _ = down.await;
}
