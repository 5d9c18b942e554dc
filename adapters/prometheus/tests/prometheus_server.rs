//! Against a real Prometheus (the Debian package, installed by `tests/peers/setup.sh`) on
//! 127.0.0.1, scraping every second an exporter in this test whose two feeds' power rises at
//! every scrape. Fails loudly, never skips, when Prometheus is missing.

use flexgate_prometheus::{AnswerError, InstantQuery, QueryError};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Scrapes served so far; feed a draws 400 kW + 1 kW per scrape, feed b 100 kW.
struct Exporter {
    addr: SocketAddr,
    scrapes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Exporter {
    async fn start() -> Exporter {
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
struct Prometheus {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

async fn prometheus(target: SocketAddr) -> Prometheus {
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
    let http = reqwest::Client::new();
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

fn query(prom: &Prometheus, promql: &str) -> InstantQuery {
    InstantQuery::new(reqwest::Client::new(), &prom.url, promql, Duration::from_secs(2)).expect("a valid query")
}

/// Reads until `done` holds for the result, within `within`.
async fn eventually<T: std::fmt::Debug>(
    q: &InstantQuery,
    within: Duration,
    mut map: impl FnMut(Result<flexgate_prometheus::Sample, QueryError>) -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let answer = q.read().await;
        let shown = format!("{answer:?}");
        if let Some(v) = map(answer) {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {within:?}; last answer {shown}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_meter_from_a_real_prometheus_fresh_then_gone() {
    let exporter = Exporter::start().await;
    let prom = prometheus(exporter.addr).await;
    let site = query(&prom, "sum(site_feed_power_watts) / 1000");

    // Fresh: the sum of the two feeds in kW, rising with every scrape.
    let first = eventually(&site, Duration::from_secs(15), |a| a.ok()).await;
    let served = exporter.scrapes.load(Ordering::SeqCst) as f64;
    assert!(
        first.value >= 500.0 && first.value <= 500.0 + served,
        "{first:?} after {served} scrapes"
    );
    assert_eq!(first.value.fract(), 0.0, "a sum of served values: {first:?}");
    assert!((chrono::Utc::now() - first.at).num_seconds().abs() <= 2, "{first:?}");
    let later = eventually(&site, Duration::from_secs(10), |a| {
        a.ok().filter(|s| s.value >= first.value + 2.0)
    })
    .await;
    assert!(later.at > first.at);

    // A query that returns both feeds is a configuration mistake, named as such.
    let both = query(&prom, "site_feed_power_watts").read().await;
    assert!(
        matches!(
            both,
            Err(QueryError::Answer {
                source: AnswerError::Several(2),
                ..
            })
        ),
        "{both:?}"
    );
    // Bad PromQL: Prometheus's own words.
    let bad = query(&prom, "sum(site_feed_power_watts").read().await;
    match bad {
        Err(QueryError::Answer {
            source: AnswerError::Refused { kind, message },
            ..
        }) => {
            assert_eq!(kind, "bad_data");
            assert!(message.contains("parse error"), "{message}");
        }
        other => panic!("expected Prometheus's refusal, got {other:?}"),
    }

    // The exporter stops: Prometheus marks the series stale at the failed scrape, and the
    // source says the series is gone instead of repeating the last figure.
    exporter.task.abort();
    let _ = exporter.task.await;
    eventually(&site, Duration::from_secs(10), |a| {
        matches!(
            a,
            Err(QueryError::Answer {
                source: AnswerError::Empty,
                ..
            })
        )
        .then_some(())
    })
    .await;

    // Prometheus itself gone: unreachable, with the cause.
    let url = prom.url.clone();
    drop(prom);
    let gone = InstantQuery::new(reqwest::Client::new(), &url, "up", Duration::from_secs(1))
        .expect("valid")
        .read()
        .await;
    match gone {
        Err(QueryError::Unreachable { detail, .. }) => assert!(detail.to_lowercase().contains("refused"), "{detail}"),
        other => panic!("expected unreachable, got {other:?}"),
    }
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_at_the_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let _hold = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            open.push(tcp); // accepted, never answered
        }
    });
    let q = InstantQuery::new(
        reqwest::Client::new(),
        &format!("http://{addr}"),
        "up",
        Duration::from_millis(300),
    )
    .expect("valid");
    let started = Instant::now();
    let answer = q.read().await;
    assert!(matches!(answer, Err(QueryError::Timeout { .. })), "{answer:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}
