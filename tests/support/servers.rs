//! Real servers on loopback for the source tests, started by the tests themselves:
//!
//! - [`FileServer`]: HTTP or HTTPS (a self-signed CA made with rcgen) serving in-memory files
//!   with ETags and conditional GETs, optional required `Authorization`, request counters;
//!   also serves a hand-made (tampering) OCI registry for the digest tests;
//! - [`GitServer`]: Git's smart HTTP protocol through `git http-backend` (Debian's git) run as
//!   CGI per request, optionally behind basic auth;
//! - [`Registry`]: the CNCF distribution registry (built by `tests/testenv/build-registry.sh`),
//!   with [`push_artifact`] pushing a Flux-style OCI artifact through the distribution API.
//!
//! Used from a test file as `use support::servers;` after `mod support;`.
#![allow(dead_code)]

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, Method, Request, Response, StatusCode, Uri},
};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use sha2::Digest as _;
use tokio::{io::AsyncWriteExt, net::TcpListener, task::JoinHandle};

pub fn sha256_hex(data: &[u8]) -> String {
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// TLS

/// A CA and a server certificate for 127.0.0.1 / localhost signed by it.
pub struct Tls {
    pub ca_pem: String,
    pub acceptor: tokio_rustls::TlsAcceptor,
}

impl Tls {
    pub fn new() -> Tls {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
            SanType,
        };
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "applyset-operator test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).expect("CA cert");
        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])));
        params
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        let issuer = Issuer::from_params(&ca, &ca_key);
        let cert = params.signed_by(&key, &issuer).expect("server cert");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone(), ca_cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .expect("server config");
        Tls {
            ca_pem: ca_cert.pem(),
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        }
    }
}

/// Connections being served, so that stopping a server also drops its kept-alive connections.
type Connections = Arc<Mutex<Vec<tokio::task::AbortHandle>>>;

/// Serves `router` on `listener` (HTTP/1.1), through TLS when `tls` is given.
fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    connections: Connections,
) -> JoinHandle<()> {
    serve_counted(listener, router, tls, connections, Arc::default())
}

/// [`serve`], counting accepted connections in `accepted`.
fn serve_counted(
    listener: TcpListener,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    connections: Connections,
    accepted: Arc<AtomicU64>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            accepted.fetch_add(1, Ordering::SeqCst);
            let router = router.clone();
            let tls = tls.clone();
            let mut conns = connections.lock();
            conns.retain(|c| !c.is_finished());
            conns.push(
                tokio::spawn(async move {
                    let svc = hyper_util::service::TowerToHyperService::new(router);
                    let builder = hyper::server::conn::http1::Builder::new();
                    match tls {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(tcp).await {
                                let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                            }
                        }
                        None => {
                            let _ = builder.serve_connection(TokioIo::new(tcp), svc).await;
                        }
                    }
                })
                .abort_handle(),
            );
        }
    })
}

// ---------------------------------------------------------------------------------------------
// FileServer

#[derive(Clone)]
struct Served {
    body: Vec<u8>,
    content_type: String,
    headers: Vec<(String, String)>,
}

#[derive(Default)]
struct FileState {
    files: Mutex<HashMap<String, Served>>,
    /// (path prefix, required `Authorization` value, `WWW-Authenticate` challenge); the first
    /// rule whose prefix matches applies.
    auth: Mutex<Vec<(String, String, String)>>,
    full: AtomicU64,
    not_modified: AtomicU64,
    requests: AtomicU64,
    /// Connections accepted.
    accepted: Arc<AtomicU64>,
    /// (path prefix, target base URL): a request under the prefix is answered `302 Found`
    /// with `Location: <target base><path and query>`.
    redirects: Mutex<Vec<(String, String)>>,
    /// The `Authorization` header of every request (empty when absent), in order.
    authorizations: Mutex<Vec<String>>,
}

/// An HTTP(S) server of in-memory files (path → content), with ETag = sha256 of the content.
pub struct FileServer {
    pub addr: SocketAddr,
    pub tls: Option<Arc<Tls>>,
    state: Arc<FileState>,
    task: Mutex<Option<JoinHandle<()>>>,
    connections: Connections,
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn serve_file(
    State(state): State<Arc<FileState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response<Body> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    state.authorizations.lock().push(
        headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
    );
    let redirect = state
        .redirects
        .lock()
        .iter()
        .find(|(prefix, _)| uri.path().starts_with(prefix.as_str()))
        .map(|(_, base)| base.clone());
    if let Some(base) = redirect {
        let tail = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        return Response::builder()
            .status(StatusCode::FOUND)
            .header("location", format!("{base}{tail}"))
            .body(Body::empty())
            .expect("response");
    }
    let rule = state
        .auth
        .lock()
        .iter()
        .find(|(prefix, _, _)| uri.path().starts_with(prefix.as_str()))
        .cloned();
    if let Some((_, want, challenge)) = rule {
        let got = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if got != want {
            return Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header("www-authenticate", challenge)
                .body(Body::empty())
                .expect("response");
        }
    }
    let file = state.files.lock().get(uri.path()).cloned();
    let Some(file) = file else {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from("not found"))
            .expect("response");
    };
    let etag = format!("\"{}\"", sha256_hex(&file.body));
    if headers
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == etag)
    {
        state.not_modified.fetch_add(1, Ordering::SeqCst);
        return Response::builder()
            .status(StatusCode::NOT_MODIFIED)
            .header("etag", etag)
            .body(Body::empty())
            .expect("response");
    }
    let mut b = Response::builder()
        .status(StatusCode::OK)
        .header("etag", etag)
        .header("content-type", file.content_type.clone())
        .header("content-length", file.body.len());
    for (k, v) in &file.headers {
        b = b.header(k, v);
    }
    if method == Method::HEAD {
        return b.body(Body::empty()).expect("response");
    }
    state.full.fetch_add(1, Ordering::SeqCst);
    b.body(Body::from(file.body)).expect("response")
}

impl FileServer {
    /// Starts a plain HTTP server (or HTTPS with `tls`) on a free loopback port.
    pub async fn start(tls: Option<Arc<Tls>>) -> FileServer {
        FileServer::start_on("127.0.0.1", tls).await
    }

    /// Starts a plain HTTP server (or HTTPS with `tls`) on a free port of loopback address
    /// `ip` (127.0.0.0/8 or ::1 only: tests never listen or connect elsewhere).
    pub async fn start_on(ip: &str, tls: Option<Arc<Tls>>) -> FileServer {
        let addr: std::net::IpAddr = ip.parse().expect("an IP address");
        assert!(addr.is_loopback(), "test servers listen on loopback only");
        let listener = TcpListener::bind((addr, 0)).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = FileServer {
            addr,
            tls,
            state: Arc::new(FileState::default()),
            task: Mutex::new(None),
            connections: Connections::default(),
        };
        server.run(listener);
        server
    }

    fn run(&self, listener: TcpListener) {
        let router = Router::new()
            .fallback(serve_file)
            .with_state(self.state.clone());
        let task = serve_counted(
            listener,
            router,
            self.tls.as_ref().map(|t| t.acceptor.clone()),
            self.connections.clone(),
            self.state.accepted.clone(),
        );
        *self.task.lock() = Some(task);
    }

    /// Answers requests under `prefix` with `302 Found` to `target_base` followed by the
    /// request's path and query.
    pub fn redirect(&self, prefix: &str, target_base: &str) {
        self.state
            .redirects
            .lock()
            .push((prefix.to_string(), target_base.to_string()));
    }

    /// Connections accepted so far.
    pub fn connections_accepted(&self) -> u64 {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// The `Authorization` header of every request so far (empty when absent).
    pub fn authorizations(&self) -> Vec<String> {
        self.state.authorizations.lock().clone()
    }

    /// Stops listening (connections are refused) until [`FileServer::restart`].
    pub fn stop(&self) {
        if let Some(t) = self.task.lock().take() {
            t.abort();
        }
        for c in self.connections.lock().drain(..) {
            c.abort();
        }
    }

    /// Listens again on the same port.
    pub async fn restart(&self) {
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        self.run(listener);
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    pub fn put(&self, path: &str, body: impl Into<Vec<u8>>) {
        self.put_with(path, body, "application/octet-stream", &[]);
    }

    pub fn put_with(
        &self,
        path: &str,
        body: impl Into<Vec<u8>>,
        content_type: &str,
        headers: &[(&str, &str)],
    ) {
        self.state.files.lock().insert(
            path.to_string(),
            Served {
                body: body.into(),
                content_type: content_type.to_string(),
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
        );
    }

    /// Requires this exact `Authorization` header value for every path (None: no auth).
    pub fn require_auth(&self, value: Option<String>) {
        let mut rules = self.state.auth.lock();
        rules.clear();
        if let Some(v) = value {
            rules.push((String::new(), v, "Basic realm=\"test\"".into()));
        }
    }

    /// Requires `value` for paths under `prefix`, answering others with `challenge`.
    pub fn require_auth_for(&self, prefix: &str, value: &str, challenge: &str) {
        self.state
            .auth
            .lock()
            .push((prefix.to_string(), value.to_string(), challenge.to_string()));
    }

    /// Responses with a body (200).
    pub fn full_responses(&self) -> u64 {
        self.state.full.load(Ordering::SeqCst)
    }

    /// 304 Not Modified responses.
    pub fn not_modified(&self) -> u64 {
        self.state.not_modified.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------------------------------------
// Archives

/// One entry of a test archive.
pub enum Entry<'a> {
    File(&'a str, &'a [u8]),
    Dir(&'a str),
    Symlink(&'a str, &'a str),
    HardLink(&'a str, &'a str),
}

/// A tar.gz with names written raw into GNU headers (so hostile names are possible).
pub fn tar_gz(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for e in entries {
        let mut header = tar::Header::new_gnu();
        let (name, kind, data, link): (&str, tar::EntryType, &[u8], Option<&str>) = match e {
            Entry::File(n, d) => (n, tar::EntryType::Regular, d, None),
            Entry::Dir(n) => (n, tar::EntryType::Directory, b"", None),
            Entry::Symlink(n, t) => (n, tar::EntryType::Symlink, b"", Some(t)),
            Entry::HardLink(n, t) => (n, tar::EntryType::Link, b"", Some(t)),
        };
        header.set_entry_type(kind);
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        {
            let gnu = header.as_gnu_mut().expect("gnu header");
            gnu.name[..name.len()].copy_from_slice(name.as_bytes());
            if let Some(l) = link {
                gnu.linkname[..l.len()].copy_from_slice(l.as_bytes());
            }
        }
        header.set_cksum();
        builder.append(&header, data).expect("append");
    }
    let tar = builder.into_inner().expect("tar");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &tar).expect("gzip");
    gz.finish().expect("gzip")
}

// ---------------------------------------------------------------------------------------------
// Git

/// Runs git in `dir`, panicking with its output on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A work tree whose commits are pushed to a bare repository served by [`GitServer`].
pub struct GitRepo {
    pub work: PathBuf,
    pub bare: PathBuf,
}

impl GitRepo {
    /// Writes `files` (path → content; `None` deletes), commits and pushes to `main`.
    /// Returns the commit id.
    pub fn commit(&self, files: &[(&str, Option<&str>)], message: &str) -> String {
        for (path, content) in files {
            let p = self.work.join(path);
            match content {
                Some(c) => {
                    if let Some(parent) = p.parent() {
                        std::fs::create_dir_all(parent).expect("mkdir");
                    }
                    std::fs::write(&p, c).expect("write");
                }
                None => {
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
        git(&self.work, &["add", "-A"]);
        git(
            &self.work,
            &["commit", "-q", "--allow-empty", "-m", message],
        );
        git(
            &self.work,
            &["push", "-q", "origin", "HEAD:refs/heads/main"],
        );
        git(&self.work, &["rev-parse", "HEAD"])
    }

    /// Creates an annotated tag at HEAD and pushes it.
    pub fn tag(&self, name: &str) {
        git(&self.work, &["tag", "-a", name, "-m", name]);
        git(&self.work, &["push", "-q", "origin", name]);
    }
}

#[derive(Clone)]
struct GitState {
    root: PathBuf,
    auth: Option<String>,
}

/// `git http-backend` behind an HTTP server: smart HTTP (protocol v2) for the repositories
/// under its root.
pub struct GitServer {
    pub addr: SocketAddr,
    pub root: tempfile::TempDir,
    pub tls: Option<Arc<Tls>>,
    task: JoinHandle<()>,
}

impl Drop for GitServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn git_cgi(State(state): State<GitState>, req: Request<Body>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    if let Some(want) = &state.auth {
        let got = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if got != want {
            return Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header("www-authenticate", "Basic realm=\"git\"")
                .body(Body::empty())
                .expect("response");
        }
    }
    let body: Bytes = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(_) => {
            return Response::builder()
                .status(StatusCode::BAD_REQUEST)
                .body(Body::empty())
                .expect("response");
        }
    };
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", &state.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", &state.root)
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", parts.uri.path())
        .env("QUERY_STRING", parts.uri.query().unwrap_or_default())
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("GIT_PROTOCOL", header("git-protocol"))
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REMOTE_USER", "test")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let Ok(mut child) = cmd.spawn() else {
        return Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from("cannot run git http-backend"))
            .expect("response");
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&body).await;
        drop(stdin);
    }
    let Ok(out) = child.wait_with_output().await else {
        return Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::empty())
            .expect("response");
    };
    // CGI output: headers, a blank line, the body.
    let raw = out.stdout;
    let (head, rest) = match raw.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => (&raw[..i], &raw[i + 4..]),
        None => match raw.windows(2).position(|w| w == b"\n\n") {
            Some(i) => (&raw[..i], &raw[i + 2..]),
            None => (&raw[..], &[][..]),
        },
    };
    let mut b = Response::builder().status(StatusCode::OK);
    for line in String::from_utf8_lossy(head).lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("status") {
            let code = v
                .split_whitespace()
                .next()
                .and_then(|c| c.parse::<u16>().ok())
                .unwrap_or(500);
            b = b.status(code);
        } else {
            b = b.header(k, v);
        }
    }
    b.body(Body::from(rest.to_vec())).expect("response")
}

impl GitServer {
    /// Serves the bare repositories created with [`GitServer::repo`] (over HTTPS with `tls`);
    /// with `auth`, requires that exact `Authorization` header.
    pub async fn start(auth: Option<String>, tls: Option<Arc<Tls>>) -> GitServer {
        let root = tempfile::tempdir().expect("tempdir");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = GitState {
            root: root.path().to_path_buf(),
            auth,
        };
        let router = Router::new().fallback(git_cgi).with_state(state);
        let task = serve(
            listener,
            router,
            tls.as_ref().map(|t| t.acceptor.clone()),
            Connections::default(),
        );
        GitServer {
            addr,
            root,
            tls,
            task,
        }
    }

    /// A new repository `name` (bare, served as `/<name>.git`) with a work tree to commit from.
    pub fn repo(&self, name: &str) -> GitRepo {
        let bare = self.root.path().join(format!("{name}.git"));
        let work = self.root.path().join(format!("{name}-work"));
        std::fs::create_dir_all(&bare).expect("mkdir");
        std::fs::create_dir_all(&work).expect("mkdir");
        git(&bare, &["init", "-q", "--bare"]);
        git(&bare, &["config", "uploadpack.allowAnySHA1InWant", "true"]);
        git(&bare, &["config", "http.receivepack", "true"]);
        git(&work, &["init", "-q"]);
        git(
            &work,
            &[
                "remote",
                "add",
                "origin",
                bare.to_str().expect("utf-8 path"),
            ],
        );
        GitRepo { work, bare }
    }

    pub fn url(&self, name: &str) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}/{name}.git", self.addr)
    }
}

// ---------------------------------------------------------------------------------------------
// OCI registry

/// The distribution registry binary: `$APPLYSET_REGISTRY`, else whatever
/// `tests/testenv/build-registry.sh` builds (or finds in its cache).
pub fn registry_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("APPLYSET_REGISTRY").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testenv/build-registry.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .expect("run build-registry.sh");
    assert!(out.status.success(), "build-registry.sh failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().unwrap_or_default().trim()).join("registry")
}

/// A CNCF distribution registry on a free loopback port (plain HTTP), storing in a temporary
/// directory. It runs under a small shell guard that stops it when this process's end of a
/// pipe closes, so it never outlives the test binary (even on SIGKILL).
pub struct Registry {
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
    guard: std::process::Child,
}

impl Drop for Registry {
    fn drop(&mut self) {
        // Closing stdin makes the guard stop the registry.
        drop(self.guard.stdin.take());
        let _ = self.guard.wait();
    }
}

impl Registry {
    pub async fn start() -> Registry {
        let bin = registry_binary();
        let dir = tempfile::tempdir().expect("tempdir");
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
                dir.path().join("data").display()
            ),
        )
        .expect("write config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("log");
        let guard = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#""$0" serve "$1" & pid=$!; cat >/dev/null; kill $pid 2>/dev/null; wait $pid 2>/dev/null"#)
            .arg(&bin)
            .arg(&config)
            .stdin(Stdio::piped())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start the registry");
        let r = Registry {
            addr,
            _dir: dir,
            guard,
        };
        let client = reqwest::Client::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(resp) = client.get(format!("http://{addr}/v2/")).send().await
                && resp.status().is_success()
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the registry did not answer on {addr} within 30s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        r
    }

    pub fn url(&self, repo: &str) -> String {
        format!("oci://{}/{repo}", self.addr)
    }
}

/// Serves an artifact (config `{}`, one layer) on a hand-made registry at `/v2/<repo>/`:
/// `served_layer` is what the blob URL of `layer`'s digest returns (the same bytes, or
/// tampered ones); `announced` overrides the Docker-Content-Digest header. Returns the
/// manifest digest.
pub fn serve_artifact(
    fake: &FileServer,
    repo: &str,
    tag: &str,
    layer: &[u8],
    served_layer: &[u8],
    announced: Option<&str>,
) -> String {
    let config = b"{}".to_vec();
    let dc = format!("sha256:{}", sha256_hex(&config));
    let dl = format!("sha256:{}", sha256_hex(layer));
    let manifest = artifact_manifest(&dc, config.len(), &dl, layer.len());
    let dm = format!("sha256:{}", sha256_hex(&manifest));
    let header = announced.map(str::to_string).unwrap_or_else(|| dm.clone());
    let mt = "application/vnd.oci.image.manifest.v1+json";
    fake.put(&format!("/v2/{repo}/blobs/{dc}"), config);
    fake.put(&format!("/v2/{repo}/blobs/{dl}"), served_layer.to_vec());
    for reference in [tag, dm.as_str()] {
        fake.put_with(
            &format!("/v2/{repo}/manifests/{reference}"),
            manifest.clone(),
            mt,
            &[("docker-content-digest", &header)],
        );
    }
    dm
}

/// Media types of a `flux push artifact` artifact.
pub const FLUX_CONFIG: &str = "application/vnd.cncf.flux.config.v1+json";
pub const FLUX_LAYER: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";

/// Uploads a blob (monolithic POST + PUT of the distribution API); returns its digest.
pub async fn push_blob(base: &str, repo: &str, data: &[u8]) -> String {
    let client = reqwest::Client::new();
    let digest = format!("sha256:{}", sha256_hex(data));
    let resp = client
        .post(format!("{base}/v2/{repo}/blobs/uploads/"))
        .send()
        .await
        .expect("start upload");
    assert_eq!(resp.status(), 202, "start upload");
    let location = resp
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .expect("upload location")
        .to_string();
    let location = if location.starts_with("http") {
        location
    } else {
        format!("{base}{location}")
    };
    let sep = if location.contains('?') { '&' } else { '?' };
    let resp = client
        .put(format!("{location}{sep}digest={digest}"))
        .header("content-type", "application/octet-stream")
        .body(data.to_vec())
        .send()
        .await
        .expect("upload");
    assert_eq!(resp.status(), 201, "upload blob");
    digest
}

/// The image manifest of a Flux-style artifact with one tar.gz layer.
pub fn artifact_manifest(
    config_digest: &str,
    config_len: usize,
    layer_digest: &str,
    layer_len: usize,
) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.cncf.flux.config.v1+json",
        "config": {"mediaType": FLUX_CONFIG, "digest": config_digest, "size": config_len},
        "layers": [{"mediaType": FLUX_LAYER, "digest": layer_digest, "size": layer_len}],
        "annotations": {"org.opencontainers.image.source": "https://example.com/test"}
    }))
    .expect("manifest")
}

/// Pushes an artifact whose layer is `layer` (a tar.gz) as `repo:tag`; returns the manifest
/// digest.
pub async fn push_artifact(registry: &Registry, repo: &str, tag: &str, layer: &[u8]) -> String {
    let base = format!("http://{}", registry.addr);
    let config = b"{}";
    let config_digest = push_blob(&base, repo, config).await;
    let layer_digest = push_blob(&base, repo, layer).await;
    let manifest = artifact_manifest(&config_digest, config.len(), &layer_digest, layer.len());
    let resp = reqwest::Client::new()
        .put(format!("{base}/v2/{repo}/manifests/{tag}"))
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body(manifest.clone())
        .send()
        .await
        .expect("push manifest");
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    assert_eq!(status, 201, "push manifest: {text}");
    format!("sha256:{}", sha256_hex(&manifest))
}

// ---------------------------------------------------------------------------------------------
// SSH

/// OpenSSH's sshd (Debian's openssh-server) on a loopback port, accepting one generated client
/// key for the current user, so that Git over ssh (`git-upload-pack`) works against the bare
/// repositories of a [`GitServer`]. Runs under the same pipe guard as [`Registry`].
pub struct SshServer {
    pub port: u16,
    pub user: String,
    /// `known_hosts` line for the server's host key.
    pub known_hosts: String,
    /// The client's private key (OpenSSH format).
    pub identity: String,
    _dir: tempfile::TempDir,
    guard: std::process::Child,
}

impl Drop for SshServer {
    fn drop(&mut self) {
        drop(self.guard.stdin.take());
        let _ = self.guard.wait();
    }
}

fn keygen(path: &Path) {
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "applyset-test", "-f"])
        .arg(path)
        .output()
        .expect("run ssh-keygen");
    assert!(out.status.success(), "ssh-keygen: {out:?}");
}

fn current_user() -> String {
    let out = std::process::Command::new("id")
        .arg("-un")
        .output()
        .expect("run id");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn is_root() -> bool {
    current_user() == "root"
}

impl SshServer {
    /// Starts sshd; needs root (sshd's privilege separation). The tests run as root (the
    /// machines and CI run as root); elsewhere the caller skips.
    pub async fn start() -> SshServer {
        let sshd = ["/usr/sbin/sshd", "/usr/bin/sshd"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("sshd is installed (make deps installs openssh-server)");
        let dir = tempfile::tempdir().expect("tempdir");
        let host_key = dir.path().join("host_key");
        let client_key = dir.path().join("client_key");
        keygen(&host_key);
        keygen(&client_key);
        std::fs::copy(
            dir.path().join("client_key.pub"),
            dir.path().join("authorized_keys"),
        )
        .expect("authorized_keys");
        std::fs::create_dir_all("/run/sshd").expect("privilege separation directory");
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let user = current_user();
        let config = dir.path().join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nAuthorizedKeysFile {dir}/authorized_keys\n\
                 StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 PermitRootLogin prohibit-password\nAllowUsers {user}\nPidFile {dir}/sshd.pid\n\
                 AcceptEnv GIT_PROTOCOL\nLogLevel ERROR\n",
                hk = host_key.display(),
                dir = dir.path().display(),
            ),
        )
        .expect("sshd_config");
        let log = std::fs::File::create(dir.path().join("sshd.log")).expect("log");
        let guard = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#""$0" -D -e -f "$1" & pid=$!; cat >/dev/null; kill $pid 2>/dev/null; wait $pid 2>/dev/null"#)
            .arg(sshd)
            .arg(&config)
            .stdin(Stdio::piped())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start sshd");
        let host_pub = std::fs::read_to_string(dir.path().join("host_key.pub")).expect("host key");
        let mut parts = host_pub.split_whitespace();
        let known_hosts = format!(
            "[127.0.0.1]:{port} {} {}\n",
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default()
        );
        let identity = std::fs::read_to_string(&client_key).expect("client key");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "sshd did not listen on {port} within 30s: {}",
                std::fs::read_to_string(dir.path().join("sshd.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        SshServer {
            port,
            user,
            known_hosts,
            identity,
            _dir: dir,
            guard,
        }
    }

    /// `ssh://user@127.0.0.1:port/<absolute path of the repository>`.
    pub fn url(&self, repo: &GitRepo) -> String {
        format!(
            "ssh://{}@127.0.0.1:{}{}",
            self.user,
            self.port,
            repo.bare.display()
        )
    }
}
