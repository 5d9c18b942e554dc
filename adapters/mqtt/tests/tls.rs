//! TLS: configuration errors with certificates minted by rcgen, and live `mqtts://` through a
//! TLS-terminating proxy (rustls, client certificates required) in front of rumqttd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{WAIT, event_doc, observer, settings, start_broker};
use flexgate_mqtt::tls::{PemError, TlsError, client_config};
use flexgate_mqtt::{ConnectionState, LinkError, MqttLink, MqttSettings, TlsFiles, Topics};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rumqttc::QoS;
use rumqttc::tokio_rustls::TlsAcceptor;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};

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

    fn files(&self, ca: &str, identity: Option<(&str, &str)>) -> TlsFiles {
        TlsFiles {
            ca_file: Some(self.path(ca)),
            cert_file: identity.map(|(c, _)| self.path(c)),
            key_file: identity.map(|(_, k)| self.path(k)),
        }
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

/// A CA, a broker certificate for `localhost`, a client certificate, an unrelated CA and an
/// unrelated key, written as PEM files (plus a few broken files).
fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let (ca_params, ca_key, ca_cert) = ca("test broker CA");
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client = CertificateParams::new(vec!["gw-1".to_string()])
        .unwrap()
        .signed_by(&client_key, &issuer)
        .unwrap();
    let (_, _, other_ca) = ca("someone else's CA");
    let other_key = KeyPair::generate().unwrap();
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.path().join(name), bytes).unwrap();
    write("ca.pem", ca_cert.pem().as_bytes());
    write("client.pem", client.pem().as_bytes());
    write("client-key.pem", client_key.serialize_pem().as_bytes());
    write("other-ca.pem", other_ca.pem().as_bytes());
    write("other-key.pem", other_key.serialize_pem().as_bytes());
    write("ca.der", ca_cert.der());
    write("empty.pem", b"");
    write(
        "encrypted-key.pem",
        b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n",
    );
    Pki {
        ca_der: ca_cert.der().to_vec(),
        server_cert_der: server.der().to_vec(),
        server_key_der: server_key.serialize_der(),
        dir,
    }
}

fn tls_error(files: &TlsFiles) -> TlsError {
    client_config(files).expect_err("the configuration is refused")
}

#[test]
fn good_files_build_a_config() {
    let pki = pki();
    assert!(client_config(&pki.files("ca.pem", None)).is_ok());
    assert!(client_config(&pki.files("ca.pem", Some(("client.pem", "client-key.pem")))).is_ok());
}

#[test]
fn swapped_certificate_and_key_are_recognized() {
    let pki = pki();
    let e = tls_error(&pki.files("ca.pem", Some(("client-key.pem", "client.pem"))));
    assert!(
        matches!(e, TlsError::Files(PemError::NoCertificate { what: "cert_file", .. })),
        "{e}"
    );
    assert!(e.to_string().contains("swapped"), "{e}");
    let e = tls_error(&pki.files("ca.pem", Some(("client.pem", "client.pem"))));
    assert!(
        matches!(e, TlsError::Files(PemError::NoKey { .. })) && e.to_string().contains("swapped"),
        "{e}"
    );
    let e = tls_error(&pki.files("client-key.pem", None));
    assert!(
        e.to_string().contains("ca_file") && e.to_string().contains("private key"),
        "{e}"
    );
}

#[test]
fn missing_empty_der_and_encrypted_files_are_explained() {
    let pki = pki();
    let e = tls_error(&pki.files("nope.pem", None));
    assert!(
        matches!(e, TlsError::Files(PemError::Read { what: "ca_file", .. })),
        "{e}"
    );
    assert!(e.to_string().contains("nope.pem"), "{e}");
    let e = tls_error(&pki.files("empty.pem", None));
    assert!(e.to_string().contains("empty"), "{e}");
    let e = tls_error(&pki.files("ca.der", None));
    assert!(e.to_string().contains("DER"), "{e}");
    let e = tls_error(&pki.files("ca.pem", Some(("client.pem", "encrypted-key.pem"))));
    assert!(e.to_string().contains("encrypted"), "{e}");
}

#[test]
fn a_key_of_another_certificate_and_half_identities_are_refused() {
    let pki = pki();
    let e = tls_error(&pki.files("ca.pem", Some(("client.pem", "other-key.pem"))));
    assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e}");
    let mut half = pki.files("ca.pem", None);
    half.cert_file = Some(pki.path("client.pem"));
    assert!(matches!(tls_error(&half), TlsError::HalfIdentity("cert_file")));
    let mut half = pki.files("ca.pem", None);
    half.key_file = Some(pki.path("client-key.pem"));
    assert!(matches!(tls_error(&half), TlsError::HalfIdentity("key_file")));
}

#[tokio::test]
async fn a_broken_tls_setup_fails_at_connect_not_in_the_reconnect_loop() {
    let pki = pki();
    let mut s = MqttSettings::new("mqtts://localhost:8883", "gw", Topics::for_site("s").unwrap()).unwrap();
    s.tls = Some(pki.files("client-key.pem", None));
    let e = MqttLink::connect(s).expect_err("refused");
    assert!(
        matches!(e, LinkError::Tls(TlsError::Files(PemError::NoCertificate { .. }))),
        "{e}"
    );
}

/// A TLS 1.2 endpoint with the `localhost` certificate that requires a client certificate from
/// the test CA, forwarding the decrypted stream to `broker`. Returns its port.
async fn tls_front(pki: &Pki, broker: u16) -> u16 {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(pki.ca_der.clone())).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from(pki.server_cert_der.clone())],
            PrivateKeyDer::Pkcs8(pki.server_key_der.clone().into()),
        )
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Ok(mut plain) = TcpStream::connect(("127.0.0.1", broker)).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                }
            });
        }
    });
    port
}

fn tls_settings(port: u16, id: &str, files: TlsFiles) -> MqttSettings {
    let mut s = settings(port, id, "site-t");
    s.broker = flexgate_mqtt::BrokerAddr::parse(&format!("mqtts://localhost:{port}")).unwrap();
    s.tls = Some(files);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtts_with_a_client_certificate_carries_events() {
    let pki = pki();
    let broker = start_broker(None);
    let front = tls_front(&pki, broker).await;
    let files = pki.files("ca.pem", Some(("client.pem", "client-key.pem")));
    let (link, mut incoming) = MqttLink::connect(tls_settings(front, "gw-tls", files)).unwrap();
    assert_eq!(link.wait_connected(WAIT).await, Some(false));
    let (utility, _rx) = observer(broker, "utility-tls", "nothing/here").await;
    utility
        .publish("dr/site-t/events/ev-1", QoS::AtLeastOnce, false, event_doc("ev-1", 1))
        .await
        .unwrap();
    let ev = tokio::time::timeout(WAIT, incoming.recv()).await.unwrap().unwrap();
    assert_eq!(ev.event_id, "ev-1");
    ev.ack.ack().await.unwrap();
    link.close(WAIT).await.unwrap();
}

async fn failure_reason(settings: MqttSettings) -> String {
    let (link, _incoming) = MqttLink::connect(settings).unwrap();
    let mut state = link.state();
    let s = tokio::time::timeout(
        WAIT,
        state.wait_for(|s| matches!(s, ConnectionState::Disconnected { .. })),
    )
    .await
    .expect("a failure in time")
    .unwrap()
    .clone();
    link.abort();
    match s {
        ConnectionState::Disconnected { reason, .. } => reason,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_handshake_failures_are_explained() {
    let pki = pki();
    let broker = start_broker(None);
    let front = tls_front(&pki, broker).await;

    let files = pki.files("other-ca.pem", Some(("client.pem", "client-key.pem")));
    let reason = failure_reason(tls_settings(front, "gw-tls-ca", files)).await;
    assert!(reason.contains("not signed by a CA in ca_file"), "{reason}");

    let files = pki.files("ca.pem", None);
    let reason = failure_reason(tls_settings(front, "gw-tls-nocert", files)).await;
    assert!(reason.contains("requires a client certificate"), "{reason}");

    // mqtts:// to a plain MQTT port.
    let files = pki.files("ca.pem", None);
    let reason = failure_reason(tls_settings(broker, "gw-tls-plain", files)).await;
    assert!(reason.contains("use mqtt://"), "{reason}");
}
