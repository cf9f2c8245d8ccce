//! `kubectl applyset ui` as a process, for the ui's tests: started on port 0 against the test
//! cluster (or with a kubeconfig of its own, e.g. one impersonating a ServiceAccount), the URL
//! it prints read from its first stdout line within a deadline, killed on drop; raw HTTP/1.1
//! requests whose every header the test sets exactly (`Host`, `Origin`, `Sec-Fetch-Site`,
//! `Cookie`: an HTTP client library would normalise `Host`); the session cookie from `/login`;
//! the live stream (server-sent events) read event by event; and small readers of the pages'
//! markup (the opening tag of an element by id, an attribute).
#![allow(dead_code)]

use std::{
    path::Path,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use parking_lot::Mutex;
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::TcpStream,
    process::{Child, Command},
};

use super::{cli::PLUGIN, cluster, wait_for};

/// How long the ui may take to print its URL.
pub const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long one request may take.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(20);

/// A running `kubectl applyset ui`, killed on drop.
pub struct UiProcess {
    child: Child,
    pub port: u16,
    pub token: String,
    /// The printed URL, `http://127.0.0.1:PORT/login?token=TOKEN`.
    pub url: String,
    /// Everything it printed after the first line (stdout and stderr), for failure messages.
    output: Arc<Mutex<String>>,
}

impl UiProcess {
    /// `kubectl applyset --kubeconfig <the test cluster's> ui --port 0 <args>`.
    pub async fn start(args: &[&str]) -> UiProcess {
        UiProcess::start_with(cluster().kubeconfig(), args).await
    }

    /// `kubectl applyset --kubeconfig <kubeconfig> ui --port 0 <args>`; waits for the first
    /// stdout line and checks it is exactly the contract's.
    pub async fn start_with(kubeconfig: &Path, args: &[&str]) -> UiProcess {
        UiProcess::start_env(kubeconfig, args, &[]).await
    }

    /// Like [`UiProcess::start_with`], with environment variables `env` set for the process.
    pub async fn start_env(kubeconfig: &Path, args: &[&str], env: &[(&str, &str)]) -> UiProcess {
        let mut child = Command::new(PLUGIN)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(["ui", "--port", "0"])
            .args(args)
            .env_remove("KUBECONFIG")
            .env_remove("BROWSER")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start kubectl-applyset ui");
        let output = Arc::new(Mutex::new(String::new()));
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
        drain(stderr, output.clone());
        let first = tokio::time::timeout(START_DEADLINE, stdout.next_line()).await;
        let line = match first {
            Ok(Ok(Some(line))) => line,
            other => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                panic!(
                    "kubectl applyset ui printed no URL within {START_DEADLINE:?} ({other:?}); it printed:\n{}",
                    output.lock()
                )
            }
        };
        drain(stdout, output.clone());
        let (port, token) = parse_url_line(&line)
            .unwrap_or_else(|| panic!("the first stdout line is not the contract's URL: {line:?}"));
        UiProcess {
            child,
            port,
            token,
            url: line
                .strip_prefix("kubectl applyset ui: ")
                .unwrap_or_default()
                .to_string(),
            output,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// What it printed after the URL (stdout and stderr interleaved by line).
    pub fn output(&self) -> String {
        self.output.lock().clone()
    }

    /// `Host: 127.0.0.1:PORT`, the host the ui serves.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT`, the ui's own origin.
    pub fn origin(&self) -> String {
        format!("http://{}", self.host())
    }

    /// A request to the ui with its own `Host` and nothing else.
    pub fn req(&self, method: &str, path: &str) -> Req {
        Req::new(self.port, method, path).header("Host", &self.host())
    }

    pub fn get(&self, path: &str) -> Req {
        self.req("GET", path)
    }

    /// Exchanges the printed token for the session cookie (`name=value`), checking the answer
    /// is 200 with a `Set-Cookie`.
    pub async fn login(&self) -> String {
        let r = self
            .get(&format!("/login?token={}", self.token))
            .send()
            .await;
        assert_eq!(r.status, 200, "login with the printed token: {}", r.show());
        r.session_cookie()
            .unwrap_or_else(|| panic!("login set no cookie: {}", r.show()))
    }

    /// Waits until `/readyz` answers 200 (the cache has listed).
    pub async fn wait_ready(&self, cookie: &str) {
        wait_for("the ui's /readyz to answer 200", START_DEADLINE, || async {
            let r = self.get("/readyz").cookie(cookie).try_send().await?;
            (r.status == 200).then_some(())
        })
        .await
    }

    /// Waits until `GET path` (with `cookie`) answers 200 and `check` accepts its body;
    /// returns the body. Panics with the last answer and the ui's output on timeout.
    pub async fn wait_page(
        &self,
        what: &str,
        path: &str,
        cookie: &str,
        timeout: Duration,
        check: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let r = self.get(path).cookie(cookie).try_send().await;
            if let Some(r) = &r
                && r.status == 200
                && check(&r.body)
            {
                return r.body.clone();
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what} on {path}; the last answer:\n{}\n--- the ui printed:\n{}",
                    r.map(|r| r.show()).unwrap_or_else(|| "<none>".into()),
                    self.output()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Opens the live stream `path` with `cookie` and the ui's own Host, nothing else.
    pub async fn live(&self, path: &str, cookie: &str) -> LiveStream {
        LiveStream::open(self.get(path).cookie(cookie)).await
    }
}

/// Copies the lines of `lines` into `out` until it ends.
fn drain<R>(mut lines: tokio::io::Lines<R>, out: Arc<Mutex<String>>)
where
    R: tokio::io::AsyncBufRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok(Some(l)) = lines.next_line().await {
            let mut o = out.lock();
            o.push_str(&l);
            o.push('\n');
        }
    });
}

/// `(port, token)` of `kubectl applyset ui: http://127.0.0.1:PORT/login?token=TOKEN`, the
/// token 43 characters of URL-safe base64 (32 bytes, unpadded).
pub fn parse_url_line(line: &str) -> Option<(u16, String)> {
    let rest = line.strip_prefix("kubectl applyset ui: http://127.0.0.1:")?;
    let (port, token) = rest.split_once("/login?token=")?;
    let port: u16 = port.parse().ok()?;
    let url_safe = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    (port != 0 && token.len() == 43 && token.chars().all(url_safe)).then(|| (port, token.into()))
}

impl Drop for UiProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP/1.1

/// A request whose every header is the test's: nothing is added but `Content-Length` (with a
/// body) and `Connection: close`.
#[derive(Clone, Debug)]
pub struct Req {
    port: u16,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Req {
    pub fn new(port: u16, method: &str, path: &str) -> Req {
        Req {
            port,
            method: method.into(),
            path: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Sets header `name` (replacing one of the same name).
    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Leaves header `name` out.
    pub fn without(mut self, name: &str) -> Req {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    pub fn cookie(self, cookie: &str) -> Req {
        self.header("Cookie", cookie)
    }

    /// A form body (`application/x-www-form-urlencoded`).
    pub fn form(mut self, body: &str) -> Req {
        self.body = body.as_bytes().to_vec();
        self.header("Content-Type", "application/x-www-form-urlencoded")
    }

    fn head(&self) -> String {
        let mut head = format!("{} {} HTTP/1.1\r\n", self.method, self.path);
        for (n, v) in &self.headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        if !self.body.is_empty() || self.method == "POST" {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        head.push_str("Connection: close\r\n\r\n");
        head
    }

    async fn connect(&self) -> Option<TcpStream> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).await.ok()?;
        s.write_all(self.head().as_bytes()).await.ok()?;
        s.write_all(&self.body).await.ok()?;
        Some(s)
    }

    /// Sends the request and reads the whole answer (to its length, its last chunk, or the
    /// end of the connection); None when nothing answers in time.
    pub async fn try_send(&self) -> Option<Resp> {
        let read = async {
            let mut s = self.connect().await?;
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            while !complete(&buf) {
                let n = s.read(&mut chunk).await.ok()?;
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            Resp::parse(&buf)
        };
        tokio::time::timeout(REQUEST_DEADLINE, read).await.ok()?
    }

    /// Sends the request; panics when there is no answer.
    pub async fn send(&self) -> Resp {
        match self.try_send().await {
            Some(r) => r,
            None => panic!(
                "no HTTP answer from 127.0.0.1:{} to {} {} within {REQUEST_DEADLINE:?}",
                self.port, self.method, self.path
            ),
        }
    }
}

/// An answer: status, headers (in order, names as sent), body (de-chunked, UTF-8 lossy).
#[derive(Clone, Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    fn parse(raw: &[u8]) -> Option<Resp> {
        let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
        let (status, headers) = parse_head(&String::from_utf8_lossy(&raw[..end]))?;
        let rest = &raw[end + 4..];
        let chunked = headers.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
        });
        let body = if chunked {
            dechunk(rest).0
        } else {
            rest.to_vec()
        };
        Some(Resp {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }

    /// The first header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every header `name`.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// `name=value` of the first `Set-Cookie`.
    pub fn session_cookie(&self) -> Option<String> {
        let c = self.header("set-cookie")?;
        Some(c.split(';').next()?.trim().to_string())
    }

    /// Status, headers and the body's start, for assertion messages.
    pub fn show(&self) -> String {
        let mut s = format!("HTTP {}\n", self.status);
        for (n, v) in &self.headers {
            s.push_str(&format!("{n}: {v}\n"));
        }
        let body: String = self.body.chars().take(3000).collect();
        s.push_str(&format!("\n{body}"));
        s
    }
}

/// Whether `raw` holds a whole answer: its head and `Content-Length` bytes, or its last chunk.
fn complete(raw: &[u8]) -> bool {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let Some((_, headers)) = parse_head(&String::from_utf8_lossy(&raw[..end])) else {
        return false;
    };
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let body = &raw[end + 4..];
    if let Some(len) = header("content-length").and_then(|l| l.parse::<usize>().ok()) {
        return body.len() >= len;
    }
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        return body.starts_with(b"0\r\n\r\n") || body.windows(7).any(|w| w == b"\r\n0\r\n\r\n");
    }
    false
}

fn parse_head(head: &str) -> Option<(u16, Vec<(String, String)>)> {
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Some((status, headers))
}

/// The data of the complete chunks at the start of `raw` and how many bytes they took.
fn dechunk(raw: &[u8]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(eol) = raw[at..].windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[at..at + eol]).to_string();
        let Ok(size) = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
        else {
            break;
        };
        let start = at + eol + 2;
        if size == 0 || raw.len() < start + size + 2 {
            break;
        }
        out.extend_from_slice(&raw[start..start + size]);
        at = start + size + 2;
    }
    (out, at)
}

// ---------------------------------------------------------------------------------------------
// The live stream

/// An open `/live` stream: its answer's head, then its events as they come.
pub struct LiveStream {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    stream: Option<TcpStream>,
    chunked: bool,
    raw: Vec<u8>,
    text: String,
}

/// One server-sent event: its `event:` (default `message`) and `data:` lines joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveEvent {
    pub event: String,
    pub data: String,
}

impl LiveStream {
    /// Sends `req` and reads the answer's head (the body, when not a stream, stays in `text`).
    pub async fn open(req: Req) -> LiveStream {
        let opened = async {
            let mut s = req.connect().await?;
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            let end = loop {
                if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    break end;
                }
                let n = s.read(&mut buf).await.ok()?;
                if n == 0 {
                    return None;
                }
                raw.extend_from_slice(&buf[..n]);
            };
            let (status, headers) = parse_head(&String::from_utf8_lossy(&raw[..end]))?;
            let rest = raw[end + 4..].to_vec();
            Some((s, status, headers, rest))
        };
        let (s, status, headers, rest) = tokio::time::timeout(REQUEST_DEADLINE, opened)
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no answer to the live stream request {req:?}"));
        let chunked = headers.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
        });
        let mut live = LiveStream {
            status,
            headers,
            stream: Some(s),
            chunked,
            raw: rest,
            text: String::new(),
        };
        live.decode();
        live
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// What has been read of the body so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    fn decode(&mut self) {
        if self.chunked {
            let (data, used) = dechunk(&self.raw);
            self.text.push_str(&String::from_utf8_lossy(&data));
            self.raw.drain(..used);
        } else {
            self.text.push_str(&String::from_utf8_lossy(&self.raw));
            self.raw.clear();
        }
    }

    /// The next event (comments such as keep-alives skipped), or None when the stream ends
    /// or `timeout` passes first.
    pub async fn next_event(&mut self, timeout: Duration) -> Option<LiveEvent> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            while let Some(end) = self.text.find("\n\n") {
                let block: String = self.text.drain(..end + 2).collect();
                if let Some(e) = parse_event(&block) {
                    return Some(e);
                }
            }
            let s = self.stream.as_mut()?;
            let mut buf = [0u8; 4096];
            let n = match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
                Ok(Ok(n)) => n,
                Ok(Err(_)) | Err(_) => return None,
            };
            if n == 0 {
                self.stream = None;
                return None;
            }
            self.raw.extend_from_slice(&buf[..n]);
            self.decode();
            self.text = self.text.replace("\r\n", "\n");
        }
    }

    /// Waits for an event `event` whose data is `data`, skipping others; None on timeout.
    pub async fn wait_for(&mut self, event: &str, data: &str, timeout: Duration) -> Option<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let e = self.next_event(left).await?;
            if e.event == event && e.data == data {
                return Some(());
            }
        }
    }
}

fn parse_event(block: &str) -> Option<LiveEvent> {
    let mut event = None;
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            event = Some(v.trim_start().to_string());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    if event.is_none() && data.is_empty() {
        return None;
    }
    Some(LiveEvent {
        event: event.unwrap_or_else(|| "message".into()),
        data: data.join("\n"),
    })
}

// ---------------------------------------------------------------------------------------------
// Reading the pages' markup

/// The opening tag (`<tr id="…" …>`) of the element whose `id` is `id`.
pub fn tag_by_id<'a>(body: &'a str, id: &str) -> Option<&'a str> {
    let at = body.find(&format!("id=\"{id}\""))?;
    let start = body[..at].rfind('<')?;
    let end = at + body[at..].find('>')?;
    Some(&body[start..=end])
}

/// The element whose `id` is `id`, from its opening tag to the first closing tag of its name
/// (enough for elements that do not nest their own kind: rows, sections, spans).
pub fn element_by_id<'a>(body: &'a str, id: &str) -> Option<&'a str> {
    let tag = tag_by_id(body, id)?;
    let start = body.find(tag)?;
    let name: String = tag[1..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    let close = format!("</{name}>");
    let end = start + body[start..].find(&close)? + close.len();
    Some(&body[start..end])
}

/// The text inside an element (as [`element_by_id`] gives it) without its tags.
pub fn inner_text(element: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in element.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text
}

/// The value of attribute `name` in an opening tag.
pub fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = at + tag[at..].find('"')?;
    Some(&tag[at..end])
}

/// Whether the opening tag's `class` has `class`.
pub fn has_class(tag: &str, class: &str) -> bool {
    attr(tag, "class").is_some_and(|c| c.split_whitespace().any(|c| c == class))
}

/// The id of a set's row on the sets page: `row-` + KEY with `/` as `--`.
pub fn row_id(key: &str) -> String {
    format!("row-{}", key.replace('/', "--"))
}

/// A kubeconfig for the test cluster whose user impersonates ServiceAccount `namespace/name`
/// (the admin's token, `as:` and `as-groups:` as a ServiceAccount's), its context namespace
/// `namespace`; written under `dir`, returned.
pub fn service_account_kubeconfig(dir: &Path, namespace: &str, name: &str) -> std::path::PathBuf {
    let cp = cluster().control_plane();
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testenv\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\n    as: system:serviceaccount:{namespace}:{name}\n    as-groups:\n    - system:serviceaccounts\n    - system:serviceaccounts:{namespace}\n    - system:authenticated\ncontexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: {name}\n    namespace: {namespace}\ncurrent-context: testenv\n",
        server = cp.server(),
        ca = cp.ca_file().display(),
        token = cp.token(),
    );
    let path = dir.join(format!("kubeconfig-{namespace}-{name}"));
    std::fs::write(&path, yaml).expect("write the kubeconfig");
    path
}
