//! TLS for talking to a VTN: rustls (ring), TLS 1.2 and 1.3 only, client certificates, a CA
//! bundle, and an optional pin on the VTN's certificate fingerprint.
//!
//! Certificate set-up is where OpenADR deployments fail most (openleadr issues #67, #71, #78,
//! #163, #171), so every error here says which file was wrong and what is usually the cause.
//! The files are read by the workspace's one PEM loader (`flexgate-tlsfiles`, [`PemError`]).

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use flexgate_tlsfiles::PemError;
use flexgate_tlsfiles::{load_certificates, load_private_key, load_root_store};

/// Where the certificates are. All paths are PEM files.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// CA certificates that sign the VTN's certificate. Without it (and without a pin) the VTN
    /// cannot be trusted and the configuration is refused.
    pub ca_file: Option<PathBuf>,
    /// This VEN's certificate chain (client certificate, leaf first).
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert_file` (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// The VTN certificate's fingerprint, openleadr style (last 10 bytes of the SHA-256 of the
    /// DER certificate, `aa:bb:…`). When set, a VTN presenting any other certificate is refused,
    /// even one the CA signed; without `ca_file` the pin alone establishes trust.
    pub vtn_fingerprint: Option<String>,
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
    KeyMismatch { cert: PathBuf, key: PathBuf },
    /// A fingerprint that is not 10 (or 32) hex bytes.
    #[error("vtn_fingerprint {0:?} is not a fingerprint: expected 10 hex bytes like aa:bb:cc:dd:ee:ff:00:11:22:33")]
    BadFingerprint(String),
    /// Neither a CA nor a pin: nothing establishes trust in the VTN.
    #[error("TLS needs ca_file (the CA that signed the VTN's certificate) or vtn_fingerprint (a pin), or both")]
    NoTrust,
    /// Anything else rustls refused.
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

/// The crypto provider used throughout (ring: small, no C toolchain surprises).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// openleadr's certificate fingerprint: the last 10 bytes of the SHA-256 of the DER
/// certificate, as lowercase hex pairs joined by `:`.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = Sha256::digest(der);
    digest[digest.len() - 10..]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Normalizes a configured fingerprint (case, separators) and checks its length. Accepts the
/// 10-byte openleadr form or a full 32-byte SHA-256 (of which the last 10 bytes are compared).
fn normalize_fingerprint(pin: &str) -> Result<String, TlsError> {
    let hex_digits: String = pin
        .chars()
        .filter(|c| !matches!(c, ':' | '-' | ' '))
        .collect::<String>()
        .to_ascii_lowercase();
    let bytes = hex::decode(&hex_digits).map_err(|_| TlsError::BadFingerprint(pin.to_string()))?;
    let tail = match bytes.len() {
        10 => &bytes[..],
        32 => &bytes[22..],
        _ => return Err(TlsError::BadFingerprint(pin.to_string())),
    };
    Ok(tail.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"))
}

/// A rustls client configuration for a VTN: TLS 1.2+, the CA and/or pin for the server, and the
/// client certificate when configured.
pub fn client_config(settings: &TlsSettings) -> Result<rustls::ClientConfig, TlsError> {
    let provider = provider();
    let pin = settings
        .vtn_fingerprint
        .as_deref()
        .map(normalize_fingerprint)
        .transpose()?;
    let roots = match &settings.ca_file {
        Some(path) => Some(Arc::new(load_root_store("ca_file", path)?)),
        None => None,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match (roots, pin) {
        (None, None) => return Err(TlsError::NoTrust),
        (roots, pin) => {
            let inner = roots
                .map(|roots| {
                    rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                        .build()
                        .map_err(|e| TlsError::Rustls(e.to_string()))
                })
                .transpose()?;
            Arc::new(PinningVerifier {
                inner,
                pin,
                provider: provider.clone(),
            })
        }
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match (&settings.cert_file, &settings.key_file) {
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

/// CA verification (when a CA is configured) followed by the fingerprint pin (when one is).
#[derive(Debug)]
struct PinningVerifier {
    inner: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    pin: Option<String>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinningVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(inner) = &self.inner {
            inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)?;
        }
        if let Some(pin) = &self.pin {
            let seen = fingerprint(end_entity);
            if &seen != pin {
                return Err(rustls::Error::General(format!(
                    "the VTN's certificate fingerprint {seen} does not match the pinned vtn_fingerprint {pin}"
                )));
            }
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// Turns a reqwest/rustls connection error into advice for the classic certificate mistakes.
pub fn explain_connect_error(error: &dyn std::error::Error) -> String {
    let mut chain = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        chain.push_str(": ");
        chain.push_str(&s.to_string());
        source = s.source();
    }
    let hint = if chain.contains("UnknownIssuer") {
        " (the VTN's certificate is not signed by a CA in ca_file: check ca_file, or pin vtn_fingerprint)"
    } else if chain.contains("NotValidForName") || chain.contains("not valid for name") {
        " (the VTN's certificate does not name the host in the URL: use the host name the certificate was issued \
         for)"
    } else if chain.contains("Expired") || chain.contains("expired") {
        " (the VTN's certificate has expired, or this machine's clock is wrong)"
    } else if chain.contains("does not match the pinned") {
        " (the VTN presented a different certificate than the pinned one)"
    } else if chain.contains("CertificateRequired") || chain.contains("certificate required") {
        " (the VTN requires a client certificate: set cert_file and key_file)"
    } else if chain.contains("UnknownCA") || chain.contains("BadCertificate") {
        " (the VTN rejected this VEN's client certificate: is it signed by the CA the VTN trusts?)"
    } else if chain.contains("Connection refused") {
        " (nothing listens at that address: is the VTN running, and is the URL's port right?)"
    } else {
        ""
    };
    format!("{chain}{hint}")
}

/// TLS with the platform's trust store, for `https://` VTNs with public certificates.
pub fn platform_config() -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = RootCertStore::empty();
    // A missing system bundle only matters for https:// URLs, where the handshake then fails
    // with an UnknownIssuer error that explain_connect_error turns into advice.
    for path in ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"] {
        if let Ok(certs) = load_certificates("system CA bundle", Path::new(path)) {
            let _ = roots.add_parsable_certificates(certs);
            break;
        }
    }
    rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .map_err(|e| TlsError::Rustls(e.to_string()))
}
