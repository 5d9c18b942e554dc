//! TLS to the broker: rustls with the ring provider, TLS 1.2 and 1.3, a CA bundle from a PEM
//! file (or the system bundle), and an optional client certificate.
//!
//! Certificate set-up is where broker connections fail most, so every error names the file
//! and the usual cause (swapped certificate and key, a DER file, an encrypted key, a key that
//! belongs to another certificate). The files are read by the workspace's one PEM loader
//! (`flexgate-tlsfiles`, [`PemError`]).

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use std::path::{Path, PathBuf};

pub use flexgate_tlsfiles::PemError;
use flexgate_tlsfiles::{load_certificates, load_private_key, load_root_store};
use std::sync::Arc;

/// Where the certificates are. All files are PEM.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// CA certificates that sign the broker's certificate. `None`: the system bundle
    /// (`/etc/ssl/certs/ca-certificates.crt` or `/etc/pki/tls/certs/ca-bundle.crt`).
    pub ca_file: Option<PathBuf>,
    /// This client's certificate chain, leaf first (brokers that authenticate by certificate).
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert_file` (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
}

/// A certificate or key problem, worded for the person editing the configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate, key or CA file that cannot be read or holds the wrong thing (the message
    /// names the setting, the file and the usual cause).
    #[error(transparent)]
    Files(#[from] PemError),
    /// Only one of cert_file / key_file is set.
    #[error("cert_file and key_file go together: {0} is set, the other is not")]
    HalfIdentity(&'static str),
    /// The key does not belong to the certificate.
    #[error(
        "key_file {key} does not belong to cert_file {cert} (the public keys differ): check that both come from \
         the same certificate request"
    )]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// No CA file and no system bundle: nothing could establish trust in the broker.
    #[error(
        "no ca_file is configured and no system CA bundle was found: set ca_file to the CA that signed the broker's certificate"
    )]
    NoTrust,
    /// Anything else rustls refused.
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

/// The crypto provider used throughout (ring: small, no C toolchain surprises, no aws-lc-rs).
#[must_use]
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(files: &TlsFiles) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    match &files.ca_file {
        Some(path) => roots = load_root_store("ca_file", path)?,
        None => {
            for path in ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"] {
                if let Ok(certs) = load_certificates("system CA bundle", Path::new(path)) {
                    let _ = roots.add_parsable_certificates(certs);
                    break;
                }
            }
            if roots.is_empty() {
                return Err(TlsError::NoTrust);
            }
        }
    }
    Ok(roots)
}

/// A rustls client configuration for the broker: TLS 1.2+, the CA bundle, and the client
/// certificate when configured.
pub fn client_config(files: &TlsFiles) -> Result<rustls::ClientConfig, TlsError> {
    let roots = roots(files)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_root_certificates(roots);
    match (&files.cert_file, &files.key_file) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(_), None) => Err(TlsError::HalfIdentity("cert_file")),
        (None, Some(_)) => Err(TlsError::HalfIdentity("key_file")),
        (Some(cert), Some(key)) => {
            let chain = load_certificates("cert_file", cert)?;
            let private = load_private_key("key_file", key)?;
            builder.with_client_auth_cert(chain, private).map_err(|e| match e {
                rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
                    cert: cert.clone(),
                    key: key.clone(),
                },
                other => TlsError::Rustls(other.to_string()),
            })
        }
    }
}

/// Adds advice to a TLS handshake failure's text (as rumqttc reports it) for the classic
/// certificate mistakes; returns an empty string when nothing is recognized.
#[must_use]
pub fn handshake_hint(text: &str) -> &'static str {
    if text.contains("UnknownIssuer") {
        " (the broker's certificate is not signed by a CA in ca_file)"
    } else if text.contains("NotValidForName") || text.contains("not valid for name") {
        " (the broker's certificate does not name the host in the URL: use the host name it was issued for)"
    } else if text.contains("Expired") || text.contains("expired") {
        " (the broker's certificate has expired, or this machine's clock is wrong)"
    } else if text.contains("CertificateRequired") || text.contains("certificate required") {
        " (the broker requires a client certificate: set cert_file and key_file)"
    } else if text.contains("UnknownCA") || text.contains("BadCertificate") {
        " (the broker rejected the client certificate: is it signed by a CA the broker trusts?)"
    } else if text.contains("InvalidContentType") || text.contains("CorruptMessage") || text.contains("handshake eof") {
        " (the broker did not answer with TLS: is this port plain MQTT? use mqtt:// instead of mqtts://)"
    } else {
        ""
    }
}
