//! HTTPS and mutual TLS over real sockets on 127.0.0.1, with certificates minted by rcgen at
//! test time: tokens and leases through TLS, client certificates, handshakes that fail without
//! harming the server, prompt shutdown, `server_config`'s errors, and the binary's TLS flags.

mod common;

use chrono::{TimeDelta, Utc};
use common::{CONTROL, READ, Resp, Running, TestServer, agent, command, exchange, parse_response, t0, write_token};
use flexgate_agent::GpuControl;
use flexgate_agent::gpu::sim::SimGpus;
use flexgate_agent::tls::{PemError, TlsError, TlsFiles, server_config};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A client identity: certificate chain and key, in memory.
struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key_der: Vec<u8>,
}

/// A CA with a server certificate for `localhost`/127.0.0.1 and a client certificate; another
/// CA with its own client certificate; an unrelated key. All written as PEM files, plus broken
/// ones.
struct Pki {
    dir: tempfile::TempDir,
    ca: CertificateDer<'static>,
    client: Identity,
    stranger: Identity,
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).to_str().expect("utf-8 path").to_owned()
    }

    fn files(&self, cert: &str, key: &str, client_ca: Option<&str>) -> TlsFiles {
        TlsFiles {
            cert_file: self.path(cert),
            key_file: self.path(key),
            client_ca_file: client_ca.map(|c| self.path(c)),
        }
    }

    fn server(&self, client_ca: Option<&str>) -> Arc<rustls::ServerConfig> {
        server_config(&self.files("server.pem", "server-key.pem", client_ca)).expect("valid TLS files")
    }

    /// A client trusting our CA, presenting `identity`, limited to `versions`.
    fn client_with(
        &self,
        identity: Option<&Identity>,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).expect("CA");
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)
            .expect("versions")
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some(id) => builder
                .with_client_auth_cert(id.chain.clone(), PrivateKeyDer::Pkcs8(id.key_der.clone().into()))
                .expect("client identity"),
        };
        Arc::new(config)
    }

    fn client(&self, identity: Option<&Identity>) -> Arc<rustls::ClientConfig> {
        self.client_with(identity, rustls::DEFAULT_VERSIONS)
    }
}

fn ca(name: &str) -> (CertificateParams, KeyPair, rcgen::Certificate) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-signed");
    (params, key, cert)
}

fn leaf(names: &[&str], issuer: &Issuer<'_, KeyPair>) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().expect("key");
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let cert = CertificateParams::new(names)
        .expect("params")
        .signed_by(&key, issuer)
        .expect("signed");
    (cert, key)
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca_params, ca_key, ca_cert) = ca("flexgate test CA");
    let issuer = Issuer::new(ca_params, ca_key);
    let (server, server_key) = leaf(&["localhost", "127.0.0.1"], &issuer);
    let (client, client_key) = leaf(&["gateway-1"], &issuer);
    let (other_params, other_ca_key, other_ca) = ca("someone else's CA");
    let other_issuer = Issuer::new(other_params, other_ca_key);
    let (stranger, stranger_key) = leaf(&["gateway-1"], &other_issuer);
    let other_key = KeyPair::generate().expect("key");
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.path().join(name), bytes).expect("write");
    write("ca.pem", ca_cert.pem().as_bytes());
    // The chain file: leaf first, then the CA (clients must cope with a full chain).
    write("server.pem", format!("{}{}", server.pem(), ca_cert.pem()).as_bytes());
    write("server-key.pem", server_key.serialize_pem().as_bytes());
    write("client.pem", client.pem().as_bytes());
    write("client-key.pem", client_key.serialize_pem().as_bytes());
    write("other-ca.pem", other_ca.pem().as_bytes());
    write("other-key.pem", other_key.serialize_pem().as_bytes());
    write("empty.pem", b"");
    write(
        "encrypted-key.pem",
        b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n",
    );
    Pki {
        ca: ca_cert.der().clone(),
        client: Identity {
            chain: vec![client.der().clone()],
            key_der: client_key.serialize_der(),
        },
        stranger: Identity {
            chain: vec![stranger.der().clone()],
            key_der: stranger_key.serialize_der(),
        },
        dir,
    }
}

/// One `Connection: close` request over TLS; `Err` carries the TLS or I/O failure.
fn tls_request(
    addr: SocketAddr,
    client: &Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Result<Resp, String> {
    let tcp = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let name = ServerName::try_from("localhost").expect("server name");
    let conn = rustls::ClientConnection::new(client.clone(), name).map_err(|e| format!("client: {e}"))?;
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    exchange(&mut stream, addr, method, path, token, body.map(str::as_bytes))
}

fn get(addr: SocketAddr, client: &Arc<rustls::ClientConfig>, path: &str, token: Option<&str>) -> Resp {
    tls_request(addr, client, "GET", path, token, None).expect("HTTPS request")
}

fn requested_w(sim: &SimGpus) -> Vec<f64> {
    (0..2)
        .map(|i| f64::from(sim.limits(i).expect("readable").requested_mw) / 1000.0)
        .collect()
}

fn lease_body(cap_w: f64) -> String {
    json!({
        "generation": 1,
        "expires_at": (t0() + TimeDelta::minutes(10)).to_rfc3339(),
        "gpus": [{"uuid": "GPU-sim-node-t-0", "cap_w": cap_w}],
        "restore": "pre_event",
    })
    .to_string()
}

#[test]
fn https_serves_the_api_with_the_same_token_rules_as_http() {
    let pki = pki();
    let (agent, sim, _clock) = agent(2, false, |_| {});
    let server = TestServer::start_tls(agent, pki.server(None));
    let client = pki.client(None);

    let health = get(server.addr, &client, "/v1/health", Some(CONTROL));
    assert_eq!(health.status, 200, "{}", health.body);
    assert_eq!(health.json()["gpu_backend"], "simulated");
    let gpus = get(server.addr, &client, "/v1/gpus", Some(READ));
    assert_eq!(gpus.status, 200, "{}", gpus.body);
    assert_eq!(gpus.json().as_array().map(Vec::len), Some(2));

    for token in [None, Some("wrong-token-but-long-enough")] {
        let r = get(server.addr, &client, "/v1/gpus", token);
        assert_eq!(r.status, 401, "{}", r.body);
        assert_eq!(r.json()["error"], "unauthorized");
        let r = tls_request(
            server.addr,
            &client,
            "PUT",
            "/v1/leases/evt",
            token,
            Some(&lease_body(300.0)),
        )
        .expect("HTTPS request");
        assert_eq!(r.status, 401, "{}", r.body);
    }
    let r = tls_request(
        server.addr,
        &client,
        "PUT",
        "/v1/leases/evt",
        Some(READ),
        Some(&lease_body(300.0)),
    )
    .expect("HTTPS request");
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(requested_w(&sim), vec![700.0, 700.0], "refused requests change nothing");

    let r = tls_request(
        server.addr,
        &client,
        "PUT",
        "/v1/leases/evt",
        Some(CONTROL),
        Some(&lease_body(300.0)),
    )
    .expect("HTTPS request");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["applied"][0]["status"], "ok");
    assert_eq!(requested_w(&sim), vec![300.0, 700.0]);

    // TLS 1.2 clients are served too.
    let tls12 = pki.client_with(None, &[&rustls::version::TLS12]);
    assert_eq!(get(server.addr, &tls12, "/v1/health", Some(CONTROL)).status, 200);
    // A client that does not trust the agent's CA refuses the agent.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.stranger.chain[0].clone()).expect("root");
    let distrusting = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let e = tls_request(server.addr, &distrusting, "GET", "/v1/health", Some(CONTROL), None)
        .expect_err("the agent's certificate is not trusted");
    assert!(e.contains("certificate"), "{e}");
}

#[test]
fn mutual_tls_admits_only_clients_with_a_certificate_from_the_ca() {
    let pki = pki();
    let (agent, sim, _clock) = agent(2, false, |_| {});
    let server = TestServer::start_tls(agent, pki.server(Some("ca.pem")));
    let member = pki.client(Some(&pki.client));

    let r = get(server.addr, &member, "/v1/health", Some(CONTROL));
    assert_eq!(r.status, 200, "{}", r.body);
    // The certificate does not replace the token.
    assert_eq!(get(server.addr, &member, "/v1/gpus", None).status, 401);

    let tls12: &[&'static rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
    for (who, identity) in [
        ("no certificate", None),
        ("another CA's certificate", Some(&pki.stranger)),
    ] {
        for versions in [rustls::DEFAULT_VERSIONS, tls12] {
            let client = pki.client_with(identity, versions);
            let e = tls_request(
                server.addr,
                &client,
                "PUT",
                "/v1/leases/evt",
                Some(CONTROL),
                Some(&lease_body(250.0)),
            )
            .expect_err(who);
            assert!(e.contains("alert"), "{who}, {versions:?}: {e}");
        }
    }
    assert_eq!(requested_w(&sim), vec![700.0, 700.0], "refused clients change nothing");

    // The server keeps serving the legitimate client.
    let r = tls_request(
        server.addr,
        &member,
        "PUT",
        "/v1/leases/evt",
        Some(CONTROL),
        Some(&lease_body(250.0)),
    )
    .expect("HTTPS request");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(requested_w(&sim), vec![250.0, 700.0]);
}

#[test]
fn plain_http_to_the_tls_port_fails_and_the_server_keeps_serving() {
    let pki = pki();
    let (agent, _sim, _clock) = agent(2, false, |_| {});
    let server = TestServer::start_tls(agent, pki.server(None));
    let mut tcp = TcpStream::connect(server.addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let answer = exchange(&mut tcp, server.addr, "GET", "/v1/health", Some(CONTROL), None);
    assert!(answer.is_err(), "plain HTTP must not be answered: {answer:?}");
    assert_eq!(
        get(server.addr, &pki.client(None), "/v1/health", Some(CONTROL)).status,
        200
    );
}

/// Sends one keep-alive request and reads exactly its response; the connection stays open.
fn keep_alive_get(
    addr: SocketAddr,
    client: &Arc<rustls::ClientConfig>,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let conn = rustls::ClientConnection::new(client.clone(), ServerName::try_from("localhost").expect("name"))
        .expect("client");
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    write!(
        stream,
        "GET /v1/health HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {CONTROL}\r\n\r\n"
    )
    .expect("write");
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).expect("read");
        assert!(n > 0, "closed before the response was complete");
        raw.extend_from_slice(&buf[..n]);
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .expect("content-length");
            if raw.len() >= end + 4 + length {
                let resp = parse_response(&raw).expect("HTTP");
                assert_eq!(resp.status, 200, "{}", resp.body);
                return stream;
            }
        }
    }
}

#[test]
fn silent_clients_block_nobody_and_shutdown_is_prompt() {
    let pki = pki();
    let (agent, _sim, _clock) = agent(2, false, |_| {});
    let server = TestServer::start_tls(agent, pki.server(None));
    let client = pki.client(None);
    // A client that connects and never says a word: its handshake waits in its own task.
    let silent = TcpStream::connect(server.addr).expect("connect");
    assert_eq!(get(server.addr, &client, "/v1/health", Some(CONTROL)).status, 200);
    // An idle keep-alive connection after a complete request.
    let mut idle = keep_alive_get(server.addr, &client);

    let started = Instant::now();
    let addr = server.addr;
    drop(server); // signals shutdown and waits for serve_tls to return
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "shutdown waited {took:?} for a silent handshake or an idle connection"
    );
    let mut rest = Vec::new();
    let closed = idle.read_to_end(&mut rest);
    assert!(
        closed.is_err() || rest.is_empty(),
        "idle connection closed: {closed:?} {rest:?}"
    );
    assert!(TcpStream::connect(addr).is_err(), "the listener is closed");
    drop(silent);
}

/// Virtual time: the runtime jumps to the next timer whenever every task waits, so the 10 s
/// handshake timeout is observed without waiting 10 s.
#[tokio::test(start_paused = true)]
async fn a_client_that_never_completes_the_handshake_is_dropped_after_the_timeout() {
    use tokio::io::AsyncReadExt;
    let pki = pki();
    let (agent, _sim, _clock) = agent(2, false, |_| {});
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(agent.serve_tls(listener, pki.server(None), async move {
        let _ = stop_rx.await;
    }));
    let started = tokio::time::Instant::now();
    let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(120), silent.read(&mut buf))
        .await
        .expect("the agent closes the connection")
        .unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    let waited = started.elapsed();
    assert!(
        waited >= flexgate_agent::server::TLS_HANDSHAKE_TIMEOUT && waited < Duration::from_secs(60),
        "closed after {waited:?}"
    );
    stop_tx.send(()).expect("server running");
    served.await.expect("joins").expect("serve_tls");
}

fn config_error(files: &TlsFiles) -> String {
    match server_config(files) {
        Ok(_) => panic!("{files:?} must be refused"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn good_files_build_a_config_that_speaks_http_1_1() {
    let pki = pki();
    for ca in [None, Some("ca.pem")] {
        let config = server_config(&pki.files("server.pem", "server-key.pem", ca)).expect("valid");
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}

#[test]
fn swapped_certificate_and_key_files_are_named_with_a_hint() {
    let pki = pki();
    let e = server_config(&pki.files("server-key.pem", "server.pem", None)).expect_err("refused");
    assert!(
        matches!(e, TlsError::Files(PemError::NoCertificate { what: "cert_file", .. })),
        "{e}"
    );
    let e = e.to_string();
    assert!(
        e.contains("cert_file") && e.contains("server-key.pem") && e.contains("swapped"),
        "{e}"
    );
    let e = config_error(&pki.files("server.pem", "server.pem", None));
    assert!(
        e.contains("key_file") && e.contains("server.pem") && e.contains("swapped"),
        "{e}"
    );
    let e = config_error(&pki.files("server.pem", "server-key.pem", Some("client-key.pem")));
    assert!(
        e.contains("client_ca_file") && e.contains("client-key.pem") && e.contains("private key"),
        "{e}"
    );
}

#[test]
fn a_key_of_another_certificate_is_a_mismatch() {
    let pki = pki();
    let e = server_config(&pki.files("server.pem", "other-key.pem", None)).expect_err("refused");
    assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("other-key.pem") && e.contains("server.pem") && e.contains("does not belong"),
        "{e}"
    );
    // A chain file that starts with the CA instead of the agent's certificate: same diagnosis.
    let e = config_error(&pki.files("ca.pem", "server-key.pem", None));
    assert!(e.contains("does not belong") && e.contains("not the CA's"), "{e}");
}

#[test]
fn missing_empty_and_encrypted_files_are_explained() {
    let pki = pki();
    let e = server_config(&pki.files("nope.pem", "server-key.pem", None)).expect_err("refused");
    assert!(
        matches!(e, TlsError::Files(PemError::Read { what: "cert_file", .. })),
        "{e}"
    );
    assert!(e.to_string().contains("nope.pem"), "{e}");
    let e = config_error(&pki.files("server.pem", "missing-key.pem", None));
    assert!(
        e.contains("cannot read key_file") && e.contains("missing-key.pem"),
        "{e}"
    );
    let e = config_error(&pki.files("server.pem", "server-key.pem", Some("no-ca.pem")));
    assert!(
        e.contains("cannot read client_ca_file") && e.contains("no-ca.pem"),
        "{e}"
    );

    let e = config_error(&pki.files("empty.pem", "server-key.pem", None));
    assert!(
        e.contains("cert_file") && e.contains("empty.pem") && e.contains("empty"),
        "{e}"
    );
    let e = config_error(&pki.files("server.pem", "empty.pem", None));
    assert!(
        e.contains("key_file") && e.contains("empty.pem") && e.contains("empty"),
        "{e}"
    );
    let e = config_error(&pki.files("server.pem", "server-key.pem", Some("empty.pem")));
    assert!(e.contains("client_ca_file") && e.contains("empty"), "{e}");

    let e = config_error(&pki.files("server.pem", "encrypted-key.pem", None));
    assert!(e.contains("encrypted-key.pem") && e.contains("decrypt"), "{e}");
}

// === the binary ===

fn binary_tls_request(
    agent: &Running,
    client: &Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<Resp, String> {
    tls_request(agent.addr, client, method, path, Some(CONTROL), body)
}

#[test]
fn the_binary_serves_https_with_mutual_tls_from_config_and_flags() {
    let pki = pki();
    let dir = tempfile::tempdir().expect("tempdir");
    let token = write_token(dir.path());
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[tls]\ncert_file = {:?}\nkey_file = {:?}\n",
            pki.arg("server.pem"),
            pki.arg("server-key.pem")
        ),
    )
    .expect("config");
    let state = dir.path().join("state");
    let agent = Running::start(&[
        "--config",
        config.to_str().expect("utf-8"),
        "--simulate",
        "--gpus",
        "2",
        "--hostname",
        "node-x",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        &token,
        "--state-dir",
        state.to_str().expect("utf-8"),
        "--tls-client-ca",
        &pki.arg("ca.pem"),
    ]);
    assert!(agent.https, "announces https://");
    let member = pki.client(Some(&pki.client));
    let health = binary_tls_request(&agent, &member, "GET", "/v1/health", None).expect("HTTPS");
    assert_eq!(health.status, 200, "{}", health.body);
    assert_eq!(health.json()["gpus"], 2);

    let e = binary_tls_request(&agent, &pki.client(None), "PUT", "/v1/leases/evt-b", None)
        .expect_err("no client certificate");
    assert!(!e.is_empty());
    let body = json!({
        "generation": 1,
        "expires_at": (Utc::now() + TimeDelta::minutes(10)).to_rfc3339(),
        "gpus": [{"uuid": "GPU-sim-node-x-1", "cap_w": 420}],
    })
    .to_string();
    let r = binary_tls_request(&agent, &member, "PUT", "/v1/leases/evt-b", Some(&body)).expect("HTTPS");
    assert_eq!(r.status, 200, "{}", r.body);
    let gpus = binary_tls_request(&agent, &member, "GET", "/v1/gpus", None).expect("HTTPS");
    let limits: Vec<f64> = gpus
        .json()
        .as_array()
        .expect("list")
        .iter()
        .map(|g| g["limit_w"].as_f64().expect("limit"))
        .collect();
    assert_eq!(limits, vec![700.0, 420.0]);

    // Plain HTTP is not served on the HTTPS port.
    let mut tcp = TcpStream::connect(agent.addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    assert!(exchange(&mut tcp, agent.addr, "GET", "/v1/health", Some(CONTROL), None).is_err());

    let stderr = wait_for_stderr(&agent, "client certificate refused");
    assert!(
        stderr.contains("serving HTTPS") && stderr.contains("mutual_tls=true"),
        "{stderr}"
    );
    assert!(!stderr.contains(CONTROL), "the token is never logged");
    assert!(!stderr.contains("PRIVATE KEY"), "key material is never logged");
}

fn refusal(args: &[&str]) -> String {
    let out = command(args).output().expect("runs");
    assert!(!out.status.success(), "{args:?} must fail: {out:?}");
    assert!(out.stdout.is_empty(), "must not claim to listen: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_binary_refuses_bad_tls_settings_before_serving() {
    let pki = pki();
    let dir = tempfile::tempdir().expect("tempdir");
    let token = write_token(dir.path());
    let state = dir.path().join("state");
    let base = [
        "--simulate",
        "--gpus",
        "2",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        &token,
        "--state-dir",
        state.to_str().expect("utf-8"),
    ];
    let with = |extra: &[&str]| -> String {
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        refusal(&args)
    };

    let e = with(&["--tls-client-ca", &pki.arg("ca.pem")]);
    assert!(
        e.contains("--tls-client-ca requires TLS") && e.contains("--tls-cert"),
        "{e}"
    );
    let e = with(&["--tls-cert", &pki.arg("server.pem")]);
    assert!(e.contains("--tls-cert needs --tls-key"), "{e}");
    let e = with(&["--tls-key", &pki.arg("server-key.pem")]);
    assert!(e.contains("--tls-key needs --tls-cert"), "{e}");
    let e = with(&[
        "--tls-cert",
        &pki.arg("server-key.pem"),
        "--tls-key",
        &pki.arg("server.pem"),
    ]);
    assert!(e.contains("server-key.pem") && e.contains("swapped"), "{e}");
    let e = with(&[
        "--tls-cert",
        &pki.arg("server.pem"),
        "--tls-key",
        &pki.arg("other-key.pem"),
    ]);
    assert!(e.contains("other-key.pem") && e.contains("does not belong"), "{e}");
    assert!(!e.contains(CONTROL), "{e}");

    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[tls]\ncert_file = {:?}\nkey_file = {:?}\n",
            pki.arg("empty.pem"),
            pki.arg("server-key.pem")
        ),
    )
    .expect("config");
    let e = with(&["--config", config.to_str().expect("utf-8")]);
    assert!(
        e.contains("cert_file") && e.contains("empty.pem") && e.contains("empty"),
        "{e}"
    );
    assert!(!state.exists(), "nothing was started");
}

#[test]
fn plain_http_beyond_loopback_warns_that_tokens_travel_in_clear_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = write_token(dir.path());
    let state = dir.path().join("state");
    let agent = Running::start(&[
        "--simulate",
        "--gpus",
        "1",
        "--listen",
        "0.0.0.0:0",
        "--token-file",
        &token,
        "--state-dir",
        state.to_str().expect("utf-8"),
    ]);
    assert!(!agent.https);
    let stderr = wait_for_stderr(&agent, "tokens travel in clear text");
    assert!(stderr.contains("--tls-cert"), "{stderr}");
}

/// The agent's log once it contains `needle` (the log is read by another thread).
fn wait_for_stderr(agent: &Running, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stderr = agent.stderr.lock().expect("lock").clone();
        if stderr.contains(needle) {
            return stderr;
        }
        assert!(Instant::now() < deadline, "log lacks {needle:?}: {stderr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
