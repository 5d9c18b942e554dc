use super::*;
use axum::routing::get;
use tokio::io::AsyncReadExt;

fn limits(max_connections: usize, max_per_peer: usize) -> Limits {
    Limits {
        header_timeout: Duration::from_millis(300),
        max_connections,
        max_per_peer,
    }
}

#[test]
fn the_connection_limit_stays_within_the_file_handle_limit() {
    let configured = limits(512, 64);
    let lowered = configured.within_handle_limit(Some(256), "http_max_connections");
    assert_eq!((lowered.max_connections, lowered.max_per_peer), (192, 64));
    let tight = limits(512, 512).within_handle_limit(Some(100), "x");
    assert_eq!((tight.max_connections, tight.max_per_peer), (36, 36));
    assert_eq!(configured.within_handle_limit(Some(20_000), "x"), configured);
    assert_eq!(configured.within_handle_limit(None, "x"), configured);
    assert_eq!(
        limits(8, 8).within_handle_limit(Some(10), "x").max_connections,
        1,
        "never zero"
    );
    let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                Max open files            256                  4096                 files\n";
    assert_eq!(parse_open_files_limit(text), Some(256));
    assert_eq!(
        parse_open_files_limit("Max open files  unlimited unlimited files"),
        None
    );
    assert_eq!(parse_open_files_limit(""), None);
}

#[test]
fn slots_are_bounded_in_total_and_per_peer_and_given_back() {
    let limits = limits(3, 2);
    let slots = Arc::new(Mutex::new(Slots::default()));
    let counters = Arc::new(Counters::default());
    let a: IpAddr = [10, 0, 0, 1].into();
    let b: IpAddr = [10, 0, 0, 2].into();
    let a1 = take_slot(&slots, &counters, a, &limits).expect("a1");
    let _a2 = take_slot(&slots, &counters, a, &limits).expect("a2");
    assert_eq!(take_slot(&slots, &counters, a, &limits).err(), Some(Full::Peer(2)));
    let _b1 = take_slot(&slots, &counters, b, &limits).expect("b1");
    assert_eq!(take_slot(&slots, &counters, b, &limits).err(), Some(Full::Total(3)));
    assert_eq!(counters.open(), 3);
    drop(a1);
    assert_eq!(counters.open(), 2);
    let _b2 = take_slot(&slots, &counters, b, &limits).expect("a slot came back");
    let guard = slots.lock().expect("lock");
    assert_eq!((guard.total, guard.per_peer.len()), (3, 2));
}

/// A server on loopback serving `GET /` with "ok"; returns its address, counters and the
/// sender that stops it.
async fn start(
    limits: Limits,
) -> (
    SocketAddr,
    Arc<Counters>,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = Server::new("test", limits);
    let counters = server.counters.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let router = Router::new().route("/", get(|| async { "ok" }));
    let task = tokio::spawn(server.serve(listener, router, async move {
        let _ = stopped.await;
    }));
    (addr, counters, stop, task)
}

async fn read_all(mut tcp: TcpStream, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    match tokio::time::timeout(within, tcp.read_to_end(&mut out)).await {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

#[tokio::test]
async fn a_silent_or_half_sent_request_is_closed_at_the_header_deadline() {
    let (addr, counters, stop, task) = start(limits(8, 8)).await;
    let silent = TcpStream::connect(addr).await.expect("connect");
    let mut half = TcpStream::connect(addr).await.expect("connect");
    half.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.expect("write");
    let started = std::time::Instant::now();
    assert!(
        read_all(silent, Duration::from_secs(5)).await.is_some(),
        "the silent connection is closed"
    );
    assert!(
        read_all(half, Duration::from_secs(5)).await.is_some(),
        "the half-sent one too"
    );
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    // A complete request is served.
    let mut fine = TcpStream::connect(addr).await.expect("connect");
    fine.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let answer = read_all(fine, Duration::from_secs(5)).await.expect("answer");
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"), "{answer}");
    let _ = stop.send(());
    task.await.expect("server stops");
    assert_eq!(counters.open(), 0);
}

#[tokio::test]
async fn a_connection_over_a_limit_gets_a_503_at_once_and_is_counted() {
    let (addr, counters, stop, task) = start(Limits {
        header_timeout: Duration::from_secs(30),
        ..limits(2, 2)
    })
    .await;
    let _held = [
        TcpStream::connect(addr).await.expect("1"),
        TcpStream::connect(addr).await.expect("2"),
    ];
    // Let the server take both slots.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while counters.open() < 2 {
        assert!(std::time::Instant::now() < deadline, "open {}", counters.open());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let third = TcpStream::connect(addr).await.expect("3");
    let answer = read_all(third, Duration::from_secs(2)).await.expect("answered at once");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("retry-after: 1") && answer.contains("2 connections open"),
        "{answer}"
    );
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
    assert!(json["error"]["message"].is_string(), "{json}");
    assert_eq!(counters.refused(), 1);
    let _ = stop.send(());
    task.await.expect("server stops");
}
