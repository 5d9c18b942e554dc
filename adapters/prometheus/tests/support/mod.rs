//! A real Prometheus for tests (the Debian package, `tests/peers/setup.sh --only prometheus`)
//! and an exporter whose values change at every scrape. Shared by this crate's tests and the
//! gateway's (`tests/meter_sources.rs` includes this file by path).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Scrapes served so far; feed a draws 400 kW + 1 kW per scrape, feed b 100 kW.
/// An HTTP client for tests. In the workspace reqwest's `rustls-no-provider` is on (another
/// crate asks for it), so a process-wide provider must be installed before any client is built.
pub fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub struct Exporter {
    pub addr: SocketAddr,
    pub scrapes: Arc<AtomicU64>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Exporter {
    pub async fn start() -> Exporter {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let scrapes = Arc::new(AtomicU64::new(0));
        let counter = scrapes.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut request = vec![0u8; 4096];
                    let _ = tcp.read(&mut request).await;
                    let n = counter.fetch_add(1, Ordering::SeqCst);
                    let a = (400.0 + n as f64) * 1000.0;
                    let body = format!(
                        "# TYPE site_feed_power_watts gauge\nsite_feed_power_watts{{feed=\"a\"}} {a}\nsite_feed_power_watts{{feed=\"b\"}} 100000\n"
                    );
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tcp.write_all(answer.as_bytes()).await;
                });
            }
        });
        Exporter { addr, scrapes, task }
    }
}

/// Prometheus, killed when dropped.
pub struct Prometheus {
    pub child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub async fn prometheus(target: SocketAddr) -> Prometheus {
    let binary = std::env::var("FLEXGATE_PROMETHEUS").unwrap_or_else(|_| "/usr/bin/prometheus".into());
    assert!(
        std::path::Path::new(&binary).exists(),
        "Prometheus is not installed at {binary}: run `bash tests/peers/setup.sh --only prometheus` (apt-get install prometheus)"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\nscrape_configs:\n  - job_name: site\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .expect("write config");
    let port = free_port();
    let child = Command::new(&binary)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus starts");
    let url = format!("http://127.0.0.1:{port}");
    let http = http();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = http.get(format!("{url}/-/ready")).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(Instant::now() < deadline, "Prometheus not ready within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Prometheus { child, url, _dir: dir }
}
