//! The 2.0b HTTP transport over real TLS on loopback: a rustls server that requires a client
//! certificate, certificates minted per test with rcgen, and the classic configuration mistakes.

// Test fixtures (certificate minting, the toy server) panic on set-up failure by design.
#![allow(clippy::unwrap_used)]

use flexgate_openadr::http::oadr2b::{Oadr2bHttp, TransportError};
use flexgate_openadr::http::tls::{TlsError, TlsSettings, client_config, fingerprint};
use flexgate_openadr::oadr2b::Message;
use flexgate_openadr::oadr2b::outgoing::Outgoing;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const REPLY: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<oadr:oadrPayload xmlns:oadr="http://openadr.org/oadr-2.0b/2012/07"><oadr:oadrSignedObject>
<oadr:oadrResponse xmlns:ei="http://docs.oasis-open.org/ns/energyinterop/201110" xmlns:pyld="http://docs.oasis-open.org/ns/energyinterop/201110/payloads" ei:schemaVersion="2.0b">
<ei:eiResponse><ei:responseCode>200</ei:responseCode><ei:responseDescription>OK</ei:responseDescription><pyld:requestID/></ei:eiResponse>
<ei:venID>ven-1</ei:venID></oadr:oadrResponse></oadr:oadrSignedObject></oadr:oadrPayload>"#;

struct Pki {
    dir: tempfile::TempDir,
    ca_der: Vec<u8>,
    server_cert_der: Vec<u8>,
    server_key_der: Vec<u8>,
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn ca(name: &str) -> (CertificateParams, KeyPair, rcgen::Certificate) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (params, key, cert)
}

/// A CA, a server certificate for `localhost`, a client certificate, a second unrelated CA, and
/// an unrelated key, all written as PEM files.
fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let (ca_params, ca_key, ca_cert) = ca("test utility CA");
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client = CertificateParams::new(vec!["ven-1".to_string()])
        .unwrap()
        .signed_by(&client_key, &issuer)
        .unwrap();
    let (_, _, other_ca) = ca("someone else's CA");
    let other_key = KeyPair::generate().unwrap();
    let write = |name: &str, text: String| std::fs::write(dir.path().join(name), text).unwrap();
    write("ca.pem", ca_cert.pem());
    write("client.pem", client.pem());
    write("client-key.pem", client_key.serialize_pem());
    write("other-ca.pem", other_ca.pem());
    write("other-key.pem", other_key.serialize_pem());
    Pki {
        ca_der: ca_cert.der().to_vec(),
        server_cert_der: server.der().to_vec(),
        server_key_der: server_key.serialize_der(),
        dir,
    }
}

/// A one-route HTTPS server that requires a client certificate from `pki`'s CA and answers
/// every POST with an `oadrResponse`. Returns its port.
async fn serve(pki: &Pki) -> u16 {
    use tokio_rustls::rustls;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(pki.ca_der.clone()))
        .unwrap();
    let client_verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(
            vec![rustls::pki_types::CertificateDer::from(pki.server_cert_der.clone())],
            rustls::pki_types::PrivateKeyDer::Pkcs8(pki.server_key_der.clone().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = tls.read(&mut chunk).await else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len: usize = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{REPLY}",
                    REPLY.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

fn poll() -> Outgoing {
    Outgoing::Poll {
        ven_id: "ven-1".to_string(),
    }
}

fn settings(pki: &Pki, ca: Option<&str>, pin: Option<String>) -> TlsSettings {
    TlsSettings {
        ca_file: ca.map(|c| pki.path(c)),
        cert_file: Some(pki.path("client.pem")),
        key_file: Some(pki.path("client-key.pem")),
        vtn_fingerprint: pin,
    }
}

async fn send(port: u16, tls: &TlsSettings) -> Result<flexgate_openadr::http::oadr2b::Exchange, TransportError> {
    let http = Oadr2bHttp::new(&format!("https://localhost:{port}"), Some(tls), Duration::from_secs(5))?;
    http.send(&poll()).await
}

#[tokio::test]
async fn mutual_tls_with_the_right_ca_and_client_certificate() {
    let pki = pki();
    let port = serve(&pki).await;
    let exchange = send(port, &settings(&pki, Some("ca.pem"), None)).await.unwrap();
    assert!(exchange.sent.contains("oadrPoll"));
    match exchange.reply.unwrap() {
        Some(Message::Response(r)) => assert_eq!(r.response.code, "200"),
        other => panic!("expected oadrResponse, got {other:?}"),
    }
}

#[tokio::test]
async fn a_matching_pin_alone_establishes_trust_and_a_wrong_pin_is_refused() {
    let pki = pki();
    let port = serve(&pki).await;
    let good = fingerprint(&pki.server_cert_der);
    assert_eq!(good.len(), 29, "10 bytes as aa:bb:…: {good}");
    send(port, &settings(&pki, None, Some(good.to_uppercase())))
        .await
        .unwrap();
    // A pin also applies on top of a CA: a CA-signed certificate with another fingerprint fails.
    let wrong = "00:11:22:33:44:55:66:77:88:99".to_string();
    let err = send(port, &settings(&pki, Some("ca.pem"), Some(wrong)))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not match the pinned"), "{err}");
}

#[tokio::test]
async fn a_vtn_signed_by_another_ca_is_refused_with_advice() {
    let pki = pki();
    let port = serve(&pki).await;
    let err = send(port, &settings(&pki, Some("other-ca.pem"), None))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not signed by a CA in ca_file"), "{err}");
}

#[tokio::test]
async fn a_wrong_host_name_is_explained() {
    let pki = pki();
    let port = serve(&pki).await;
    let http = Oadr2bHttp::new(
        &format!("https://127.0.0.1:{port}"),
        Some(&settings(&pki, Some("ca.pem"), None)),
        Duration::from_secs(5),
    )
    .unwrap();
    let err = http.send(&poll()).await.unwrap_err().to_string();
    assert!(err.contains("does not name the host"), "{err}");
}

#[tokio::test]
async fn a_vtn_that_requires_a_client_certificate_refuses_a_ven_without_one() {
    let pki = pki();
    let port = serve(&pki).await;
    let tls = TlsSettings {
        ca_file: Some(pki.path("ca.pem")),
        ..TlsSettings::default()
    };
    assert!(send(port, &tls).await.is_err());
}

fn config_error(tls: TlsSettings) -> String {
    match client_config(&tls) {
        Ok(_) => panic!("accepted {tls:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn classic_certificate_mistakes_get_clear_errors() {
    let pki = pki();
    let p = |n: &str| Some(pki.path(n));
    let swapped = config_error(TlsSettings {
        ca_file: p("ca.pem"),
        cert_file: p("client-key.pem"),
        key_file: p("client.pem"),
        vtn_fingerprint: None,
    });
    assert!(swapped.contains("swapped"), "{swapped}");
    let mismatch = client_config(&TlsSettings {
        ca_file: p("ca.pem"),
        cert_file: p("client.pem"),
        key_file: p("other-key.pem"),
        vtn_fingerprint: None,
    });
    assert!(matches!(mismatch, Err(TlsError::KeyMismatch { .. })), "{mismatch:?}");
    let missing = config_error(TlsSettings {
        ca_file: Some(PathBuf::from("/nonexistent/ca.pem")),
        ..TlsSettings::default()
    });
    assert!(missing.contains("cannot read ca_file /nonexistent/ca.pem"), "{missing}");
    let half = config_error(TlsSettings {
        ca_file: p("ca.pem"),
        cert_file: p("client.pem"),
        ..TlsSettings::default()
    });
    assert!(half.contains("cert_file and key_file go together"), "{half}");
    let no_trust = config_error(TlsSettings::default());
    assert!(
        no_trust.contains("ca_file") && no_trust.contains("vtn_fingerprint"),
        "{no_trust}"
    );
    let bad_pin = config_error(TlsSettings {
        vtn_fingerprint: Some("not-hex".into()),
        ..TlsSettings::default()
    });
    assert!(bad_pin.contains("not a fingerprint"), "{bad_pin}");
    let empty: &Path = &pki.path("empty.pem");
    std::fs::write(empty, "").unwrap();
    let no_cert = config_error(TlsSettings {
        ca_file: Some(empty.to_path_buf()),
        ..TlsSettings::default()
    });
    assert!(no_cert.contains("contains no PEM certificate"), "{no_cert}");
}

#[tokio::test]
async fn plain_http_connection_refused_names_the_url() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let http = Oadr2bHttp::new(&format!("http://127.0.0.1:{port}/"), None, Duration::from_secs(2)).unwrap();
    let err = http.send(&poll()).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("http://127.0.0.1:{port}/OpenADR2/Simple/2.0b/OadrPoll")),
        "{err}"
    );
    assert!(Oadr2bHttp::new("ftp://x", None, Duration::from_secs(1)).is_err());
}
