//! A TCP proxy on loopback between the operator and kube-apiserver (TLS passes through
//! untouched: the API server's certificate is for 127.0.0.1, whatever the port). The walk
//! cuts every connection through it — the operator's watches drop, its requests in flight
//! fail — and refuses new ones for a while: a network blip, without touching the server. It
//! can also delay every byte by a latency (a slow network), which widens the moments between
//! what the operator reads and what it writes.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{mpsc, watch},
    task::JoinHandle,
    time::Instant,
};

pub struct Proxy {
    pub port: u16,
    /// Bumped to cut every open connection.
    cuts: watch::Sender<u64>,
    /// While set, new connections are closed at once.
    refusing: Arc<AtomicBool>,
    /// Milliseconds every chunk waits before it is passed on.
    latency_ms: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("the proxy binds a loopback port");
        let port = listener.local_addr().expect("the proxy's address").port();
        let (cuts, cut_rx) = watch::channel(0u64);
        let refusing = Arc::new(AtomicBool::new(false));
        let latency_ms = Arc::new(AtomicU64::new(0));
        let (refuse, latency) = (refusing.clone(), latency_ms.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    continue;
                };
                if refuse.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let mut cut = cut_rx.clone();
                cut.mark_unchanged();
                tokio::spawn(forward(inbound, upstream, cut, latency.clone()));
            }
        });
        Proxy {
            port,
            cuts,
            refusing,
            latency_ms,
            task,
        }
    }

    /// Closes every connection open now.
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Refuses (closes at once) new connections while `on`.
    pub fn refuse(&self, on: bool) {
        self.refusing.store(on, Ordering::SeqCst);
    }

    /// Delays every byte, both ways, by `latency` from now on.
    pub fn set_latency(&self, latency: Duration) {
        let ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        self.latency_ms.store(ms, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Passes bytes both ways until either side closes or the connection is cut.
async fn forward(
    inbound: TcpStream,
    upstream: SocketAddr,
    mut cut: watch::Receiver<u64>,
    latency: Arc<AtomicU64>,
) {
    let Ok(outbound) = TcpStream::connect(upstream).await else {
        return;
    };
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    let up = pump(in_read, out_write, latency.clone());
    let down = pump(out_read, in_write, latency);
    tokio::select! {
        _ = futures::future::join(up, down) => {}
        _ = cut.changed() => {}
    }
}

/// Copies one direction: each chunk is written `latency` after it was read (chunks keep
/// their order and the throughput stays; only their delivery is late).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    latency: Arc<AtomicU64>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let due = Instant::now() + Duration::from_millis(latency.load(Ordering::SeqCst));
            if tx.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let write = async move {
        while let Some((due, bytes)) = rx.recv().await {
            // The chunk's delivery time: the latency being simulated, not a wait for
            // anything.
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    futures::future::join(read, write).await;
}
