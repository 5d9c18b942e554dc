//! Against a real Prometheus (the Debian package, installed by `tests/peers/setup.sh`) on
//! 127.0.0.1, scraping every second an exporter in this test whose two feeds' power rises at
//! every scrape. Fails loudly, never skips, when Prometheus is missing.

mod support;

use flexgate_prometheus::{AnswerError, InstantQuery, QueryError};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use support::{Exporter, Prometheus, prometheus};
use tokio::net::TcpListener;

fn query(prom: &Prometheus, promql: &str) -> InstantQuery {
    InstantQuery::new(support::http(), &prom.url, promql, Duration::from_secs(2)).expect("a valid query")
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
    let gone = InstantQuery::new(support::http(), &url, "up", Duration::from_secs(1))
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
        support::http(),
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
