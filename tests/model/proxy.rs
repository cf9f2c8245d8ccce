//! A TCP proxy on loopback between the operator and kube-apiserver (TLS passes through
//! untouched: the API server's certificate is for 127.0.0.1, whatever the port). The walk
//! cuts every connection through it — the operator's watches drop, its requests in flight
//! fail — and refuses new ones for a while: a network blip, without touching the server.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

pub struct Proxy {
    pub port: u16,
    /// Bumped to cut every open connection.
    cuts: watch::Sender<u64>,
    /// While set, new connections are closed at once.
    refusing: Arc<AtomicBool>,
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
        let refuse = refusing.clone();
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
                tokio::spawn(forward(inbound, upstream, cut));
            }
        });
        Proxy {
            port,
            cuts,
            refusing,
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
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies bytes both ways until either side closes or the connection is cut.
async fn forward(mut inbound: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<u64>) {
    let Ok(mut outbound) = TcpStream::connect(upstream).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
        _ = cut.changed() => {}
    }
}
