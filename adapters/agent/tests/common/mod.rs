//! Shared test helpers: a blocking HTTP/1.1 client, an in-process server on its own runtime,
//! and fixtures.
#![allow(dead_code)]

use chrono::{DateTime, Utc};
use flexgate_agent::api::GpuStatus;
use flexgate_agent::auth::Auth;
use flexgate_agent::clock::ManualClock;
use flexgate_agent::gpu::sim::{SimGpus, SimOptions};
use flexgate_agent::{Agent, AgentConfig};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const CONTROL: &str = "test-control-token-0123456789";
pub const READ: &str = "test-read-token-0123456789";

pub fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-07-01T12:00:00Z")
        .expect("valid time")
        .to_utc()
}

/// A response: status, and body text.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn decode_chunked(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(pos) = body.windows(2).position(|w| w == b"\r\n") {
        let size_text = std::str::from_utf8(&body[..pos]).expect("chunk size is ASCII");
        let size = usize::from_str_radix(size_text.split(';').next().expect("size").trim(), 16).expect("hex size");
        body = &body[pos + 2..];
        if size == 0 {
            break;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
    out
}

/// One request per connection (`Connection: close`).
pub fn request(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> Resp {
    request_raw(addr, method, path, token, body.map(str::as_bytes))
}

pub fn request_raw(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: Option<&[u8]>) -> Resp {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    exchange(&mut stream, addr, method, path, token, body).expect("HTTP exchange")
}

/// The request head (and body) of one `Connection: close` request.
pub fn request_bytes(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: Option<&[u8]>) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    bytes
}

/// One request with extra header lines (`name: value`), over plain TCP.
pub fn request_with_headers(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Resp {
    let mut bytes = request_bytes(addr, method, path, token, body.map(str::as_bytes));
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").expect("a request head") + 2;
    let extra: String = headers.iter().map(|(n, v)| format!("{n}: {v}\r\n")).collect();
    bytes.splice(end..end, extra.into_bytes());
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    stream.write_all(&bytes).expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read");
    parse_response(&raw).expect("an HTTP answer")
}

/// One `Connection: close` request over any stream (plain TCP or TLS); any I/O error, or an
/// answer that is not HTTP, is an `Err` with the reason.
pub fn exchange(
    stream: &mut (impl Read + Write),
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Result<Resp, String> {
    stream
        .write_all(&request_bytes(addr, method, path, token, body))
        .map_err(|e| format!("write: {e}"))?;
    stream.flush().map_err(|e| format!("flush: {e}"))?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(|e| format!("read: {e}"))?;
    parse_response(&raw)
}

/// Status, headers and (de-chunked) body of a complete HTTP/1.1 response.
pub fn parse_response(raw: &[u8]) -> Result<Resp, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no HTTP header end in {} bytes", raw.len()))?;
    let headers = String::from_utf8_lossy(&raw[..split]).into_owned();
    if !headers.starts_with("HTTP/1.1 ") {
        return Err(format!("not an HTTP response: {headers:?}"));
    }
    let status: u16 = headers
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {headers:?}"))?;
    let mut body = raw[split + 4..].to_vec();
    if headers.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = decode_chunked(&body);
    }
    Ok(Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// An agent served on 127.0.0.1:0 by a runtime on its own thread; stopped on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    pub agent: Agent,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    /// Plain HTTP (`serve`).
    pub fn start(agent: Agent) -> Self {
        Self::start_with(agent, None)
    }

    /// HTTPS (`serve_tls`) with `tls` from `flexgate_agent::tls::server_config`.
    pub fn start_tls(agent: Agent, tls: Arc<rustls::ServerConfig>) -> Self {
        Self::start_with(agent, Some(tls))
    }

    fn start_with(agent: Agent, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let served = agent.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
                addr_tx.send(listener.local_addr().expect("addr")).expect("send addr");
                let stop = async move {
                    let _ = stop_rx.await;
                };
                match tls {
                    Some(tls) => served.serve_tls(listener, tls, stop).await.expect("serve_tls"),
                    None => served.serve(listener, stop).await.expect("serve"),
                }
            });
        });
        let addr = addr_rx.recv().expect("server started");
        Self {
            addr,
            agent,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn get(&self, path: &str, token: Option<&str>) -> Resp {
        request(self.addr, "GET", path, token, None)
    }

    pub fn send(&self, method: &str, path: &str, token: Option<&str>, body: &str) -> Resp {
        request(self.addr, method, path, token, Some(body))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Simulated GPUs on a manual clock, with a handle kept for the test.
pub fn sim(host: &str, gpus: u32, tweak: impl FnOnce(&mut SimOptions)) -> (SimGpus, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(t0()));
    let mut opts = SimOptions::h200(host, gpus);
    tweak(&mut opts);
    let sim = SimGpus::new(&opts, clock.clone()).expect("valid sim options");
    (sim, clock)
}

/// An in-memory agent on simulated GPUs and a manual clock.
pub fn agent(gpus: u32, metrics_open: bool, tweak: impl FnOnce(&mut SimOptions)) -> (Agent, SimGpus, Arc<ManualClock>) {
    let (sim, clock) = sim("node-t", gpus, tweak);
    let auth = Auth::from_secrets(CONTROL, Some(READ)).expect("tokens");
    let mut config = AgentConfig::new("node-t", auth);
    config.metrics_open = metrics_open;
    let agent = Agent::with_clock(config, Box::new(sim.clone()), clock.clone()).expect("agent starts");
    (agent, sim, clock)
}

// === the real binary ===

pub const BIN: &str = env!("CARGO_BIN_EXE_flexgate-agent");

pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("FLEXGATE_AGENT_TOKEN")
        .env_remove("FLEXGATE_AGENT_TOKEN_FILE")
        .env_remove("FLEXGATE_AGENT_READ_TOKEN")
        .env("RUST_LOG", "info");
    cmd
}

pub struct Running {
    pub child: Child,
    pub addr: SocketAddr,
    /// The agent announced `https://` (TLS) rather than `http://`.
    pub https: bool,
    pub stderr: Arc<Mutex<String>>,
}

impl Running {
    pub fn start(args: &[&str]) -> Self {
        Self::start_env(args, &[])
    }

    /// [`Running::start`] with extra environment variables (e.g. the NVML double's library
    /// path).
    pub fn start_env(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Self {
        let mut cmd = command(args);
        for (name, value) in env {
            cmd.env(name, value);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agent");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let mut err_pipe = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().expect("lock").push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("flexgate-agent listening on http://") {
                    let _ = tx.send((false, addr.to_owned()));
                } else if let Some(addr) = line.strip_prefix("flexgate-agent listening on https://") {
                    let _ = tx.send((true, addr.to_owned()));
                }
            }
        });
        let Ok((https, addr)) = rx.recv_timeout(Duration::from_secs(20)) else {
            let _ = child.kill();
            panic!("agent did not start: {}", stderr.lock().expect("lock"));
        };
        Self {
            child,
            addr: addr.parse().expect("socket address"),
            https,
            stderr,
        }
    }

    pub fn gpus(&self) -> Vec<GpuStatus> {
        let r = request(self.addr, "GET", "/v1/gpus", Some(CONTROL), None);
        assert_eq!(r.status, 200, "{}", r.body);
        serde_json::from_str(&r.body).expect("gpu list")
    }

    pub fn limits(&self) -> Vec<f64> {
        self.gpus().iter().map(|g| g.limit_w.expect("readable")).collect()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn write_token(dir: &Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("agent.token");
    std::fs::write(&path, format!("{CONTROL}\n")).expect("token file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path.to_string_lossy().into_owned()
}
