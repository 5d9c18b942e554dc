//! Connections have deadlines and their number is bounded (issue 12, item 6), and broken bodies
//! are answered for what they are (item 7), on the gateway's real listener with raw TCP clients
//! that stall where a careless or hostile client would.
#![allow(clippy::disallowed_methods, reason = "the server runs on the wall clock")]

use flexgate::clock::Clock;
use flexgate::config::Config;
use flexgate::serve::Server;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const TOKEN: &str = "limits-token-0123456789";

async fn server(dir: &std::path::Path) -> (Server, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut config = Config::default();
    config.gateway.data_dir = dir.to_path_buf();
    config.gateway.api_token = TOKEN.into();
    config.gateway.http_header_timeout_s = 1;
    config.gateway.http_body_timeout_s = 1;
    config.gateway.http_max_connections = 16;
    config.gateway.http_max_connections_per_peer = 4;
    let server = Server::start(config, Clock::real(), None, listener)
        .await
        .expect("gateway");
    (server, addr)
}

/// Reads until the server closes the connection (or 10 s pass); returns what came and how long
/// it took.
fn read_to_close(mut stream: TcpStream) -> (String, Duration) {
    let started = Instant::now();
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the server neither answered nor closed within 10 s: {e}"),
        }
    }
    (String::from_utf8_lossy(&text).into_owned(), started.elapsed())
}

fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).expect("connect")
}

fn sent(addr: SocketAddr, bytes: &str) -> TcpStream {
    let mut stream = connect(addr);
    stream.write_all(bytes.as_bytes()).expect("write");
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_idle_and_excess_connections_are_closed_or_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, addr) = server(dir.path()).await;

    let (silent, mid_header, mid_body, idle) = tokio::task::spawn_blocking(move || {
        // Connects and says nothing.
        let silent = read_to_close(connect(addr));
        // Stops in the middle of its headers.
        let mid_header = read_to_close(sent(addr, "POST /v1/events HTTP/1.1\r\nHost: gw\r\nContent-Ty"));
        // Declares 100 bytes of body and sends 10.
        let mid_body = read_to_close(sent(
            addr,
            &format!(
                "POST /v1/events HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {TOKEN}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"schema\":"
            ),
        ));
        // A complete request, then an idle keep-alive connection.
        let idle = read_to_close(sent(addr, "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"));
        (silent, mid_header, mid_body, idle)
    })
    .await
    .expect("clients");
    for (what, (_, took)) in [
        ("silent", &silent),
        ("mid-header", &mid_header),
        ("idle keep-alive", &idle),
    ] {
        assert!(
            *took < Duration::from_secs(4),
            "a {what} connection was closed after {took:?}, not after the 1 s header timeout"
        );
    }
    assert!(idle.0.starts_with("HTTP/1.1 200"), "{}", idle.0);
    assert!(mid_body.0.starts_with("HTTP/1.1 408"), "{}", mid_body.0);
    assert!(mid_body.0.contains("did not arrive within 1 s"), "{}", mid_body.0);
    assert!(mid_body.1 < Duration::from_secs(4), "{:?}", mid_body.1);

    // Four idle connections from this address hold its share; the fifth is answered 503 at
    // once, with the reason; requests work again once the idle ones are closed.
    let refused = tokio::task::spawn_blocking(move || {
        let held: Vec<TcpStream> = (0..4).map(|_| connect(addr)).collect();
        std::thread::sleep(Duration::from_millis(200));
        let refused = read_to_close(connect(addr));
        drop(held);
        refused
    })
    .await
    .expect("clients");
    assert!(refused.0.starts_with("HTTP/1.1 503"), "{}", refused.0);
    assert!(
        refused.0.contains("limit per peer") && refused.0.contains("retry-after"),
        "{}",
        refused.0
    );
    assert!(
        refused.1 < Duration::from_secs(1),
        "the refusal is immediate: {:?}",
        refused.1
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = flexgate::http_client::request(addr, "GET", "/healthz", None, None)
        .await
        .expect("GET");
    assert_eq!(after.status, 200);
    let metrics = flexgate::http_client::request(addr, "GET", "/metrics", None, None)
        .await
        .expect("GET");
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let refused_total = text
        .lines()
        .find_map(|l| l.strip_prefix("flexgate_http_connections_refused_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .expect("the refusal counter is exported");
    assert!(refused_total >= 1.0, "{text}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_chunked_bodies_are_answered_400_and_an_endless_chunk_408() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, addr) = server(dir.path()).await;
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let (malformed, endless) = tokio::task::spawn_blocking(move || {
        let malformed = read_to_close(sent(addr, &format!("{head}zz\r\n{{}}\r\n0\r\n\r\n")));
        let endless = read_to_close(sent(addr, &format!("{head}ffffffffffffffff\r\n{{\"schema\"")));
        (malformed, endless)
    })
    .await
    .expect("clients");
    assert!(malformed.0.starts_with("HTTP/1.1 400"), "{}", malformed.0);
    assert!(
        malformed.0.contains("cannot be read") && !malformed.0.contains("exceeds"),
        "a malformed chunked body is not a size problem: {}",
        malformed.0
    );
    assert!(endless.0.starts_with("HTTP/1.1 408"), "{}", endless.0);
    assert!(endless.1 < Duration::from_secs(4), "answered after {:?}", endless.1);
    server.shutdown().await;
}

/// Under a 256-handle limit, 374 idle connections from one address once starved every other
/// client. Now that address gets its 64 slots and a 503 beyond them, the rest of the world is
/// served at once, and the connection limit is lowered to fit the handle limit (real binary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_from_one_address_do_not_starve_others_under_a_small_handle_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = flexgate_etcd::testing::spare_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut child = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -n 256 && exec {} run --data {} --listen {addr}",
            env!("CARGO_BIN_EXE_flexgate"),
            dir.path().display()
        ))
        .env("FLEXGATE_API_TOKEN", TOKEN)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("flexgate run");
    let deadline = Instant::now() + Duration::from_secs(30);
    while flexgate::http_client::request(addr, "GET", "/healthz", None, None)
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the gateway did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held: Vec<tokio::net::TcpStream> = {
        let mut held = Vec::new();
        for _ in 0..374 {
            held.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
        }
        held
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Another client, from another loopback address: answered at once.
    let started = Instant::now();
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(([127, 0, 0, 2], 0).into()).expect("bind 127.0.0.2");
    let mut other = socket.connect(addr).await.expect("connect from 127.0.0.2");
    tokio::io::AsyncWriteExt::write_all(
        &mut other,
        b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n",
    )
    .await
    .expect("write");
    let mut answer = String::new();
    tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_to_string(&mut other, &mut answer),
    )
    .await
    .expect("answered within 5 s")
    .expect("read");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    drop(held);
    let _ = child.kill();
    let output = child.wait_with_output().expect("wait");
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        log.contains("file-handle limit allows"),
        "the lowered limit is logged: {log}"
    );
}
