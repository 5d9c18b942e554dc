//! TLS for the agent's HTTP API: the certificate files ([`TlsFiles`]) and the rustls server
//! configuration built from them ([`server_config`]), served by
//! [`serve_tls`](crate::server::serve_tls).
//!
//! Bearer tokens authenticate every request, but over plain HTTP anyone on the path can read a
//! token and then change GPU caps. With TLS the token travels encrypted and the gateway can
//! check it talks to the right agent. With `client_ca_file` set (mutual TLS) the agent also
//! refuses every client whose certificate was not issued by that CA, before any HTTP is read;
//! the bearer token is still required on top, so a leaked client key alone cannot change caps
//! either (defense in depth).
//!
//! Certificate set-up is where deployments fail most, and it fails at start, not on the first
//! request: every [`TlsError`] names the file that is wrong and the usual cause (swapped files,
//! an encrypted key, a key from another certificate request, DER instead of PEM). Reading the
//! files is the workspace's one PEM loader (`flexgate-tlsfiles`, [`PemError`]); what is
//! particular to the agent (key/certificate match, the client CA verifier) is here.
//!
//! Only rustls with the ring provider is used (TLS 1.3 and 1.2, no aws-lc-rs), and the
//! configuration never logs or echoes key material: errors carry paths, not contents.

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use std::path::{Path, PathBuf};

pub use flexgate_tlsfiles::PemError;
use flexgate_tlsfiles::{load_certificates, load_private_key, load_root_store};
use std::sync::Arc;

/// Where the agent's TLS material is: the `[tls]` section of the config file, or
/// `--tls-cert`, `--tls-key` and `--tls-client-ca`. All files are PEM.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The agent's certificate chain, leaf first (intermediates after it), so that clients can
    /// build a path to their trusted CA without fetching anything.
    pub cert_file: PathBuf,
    /// The private key of the leaf certificate (PKCS#8, PKCS#1 or SEC1), unencrypted: the agent
    /// starts unattended and has nobody to ask for a passphrase. Keep it mode 0600.
    pub key_file: PathBuf,
    /// CA certificates for client certificates. When set, the agent requires every client to
    /// present a certificate that chains to one of them (mutual TLS) and drops any other
    /// connection during the handshake; the bearer token is still checked afterwards.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
}

/// A certificate or key problem, worded for the person editing the configuration: which file,
/// and what is usually the cause.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate, key or CA file that cannot be read or holds the wrong thing (the message
    /// names the setting, the file and the usual cause).
    #[error(transparent)]
    Files(#[from] PemError),
    /// The key parses as PEM but the crypto provider cannot use it.
    #[error(
        "key_file {path} holds a private key that cannot be used: {reason} (supported: RSA, ECDSA P-256/P-384, Ed25519)"
    )]
    UnusableKey {
        /// The file.
        path: PathBuf,
        /// rustls' reason.
        reason: String,
    },
    /// The first certificate of `cert_file` is not a valid X.509 certificate.
    #[error("cert_file {path}: the first certificate is not a valid X.509 certificate: {reason}")]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// rustls' reason.
        reason: String,
    },
    /// The key does not belong to the certificate.
    #[error(
        "key_file {key} does not belong to cert_file {cert} (the public keys differ): check that both come from \
         the same certificate request, and that cert_file starts with the agent's own certificate, not the CA's"
    )]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// Anything else rustls refused.
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

/// The crypto provider of the agent's TLS: ring, chosen explicitly so that nothing depends on a
/// process-wide default provider being installed.
#[must_use]
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn client_verifier(
    path: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let roots = load_root_store("client_ca_file", path)?;
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| {
            TlsError::Files(PemError::BadCa {
                what: "client_ca_file",
                path: path.to_path_buf(),
                index: 0,
                reason: e.to_string(),
            })
        })
}

/// The rustls server configuration for `files`: TLS 1.3 and 1.2 with ring, ALPN `http/1.1`,
/// the agent's certificate and key, and, with `client_ca_file`, mandatory client certificates
/// from that CA.
///
/// Called once at start so that a wrong file stops the agent with a clear [`TlsError`] instead
/// of failing every handshake later. The key is checked against the leaf certificate.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = provider();
    let chain = load_certificates("cert_file", &files.cert_file)?;
    let key = load_private_key("key_file", &files.key_file)?;
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::UnusableKey {
            path: files.key_file.clone(),
            reason: e.to_string(),
        })?;
    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        // `Unknown`: the key type cannot tell its public key; the handshake will still fail
        // loudly if it is wrong, so accept it rather than refuse a working setup.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(_)) => {
            return Err(TlsError::KeyMismatch {
                cert: files.cert_file.clone(),
                key: files.key_file.clone(),
            });
        }
        Err(e) => {
            return Err(TlsError::BadCertificate {
                path: files.cert_file.clone(),
                reason: e.to_string(),
            });
        }
    }
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match &files.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca) => builder.with_client_cert_verifier(client_verifier(ca, &provider)?),
    };
    let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_deserialize_with_an_optional_client_ca_and_refuse_unknown_fields() {
        let f: TlsFiles = toml::from_str("cert_file = \"/c.pem\"\nkey_file = \"/k.pem\"").expect("parses");
        assert_eq!(f.client_ca_file, None);
        assert_eq!(f.cert_file, Path::new("/c.pem"));
        assert!(toml::from_str::<TlsFiles>("cert_file = \"/c\"\nkey_file = \"/k\"\nca_file = \"/x\"").is_err());
        assert!(
            toml::from_str::<TlsFiles>("cert_file = \"/c\"").is_err(),
            "key_file is required"
        );
    }

    #[test]
    fn garbage_is_explained_not_panicked_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let der = dir.path().join("der");
        std::fs::write(&der, [0x30, 0x82, 0x01, 0x00, 0x01]).expect("write");
        let e = load_certificates("cert_file", &der).expect_err("refused");
        assert!(e.to_string().contains("DER"), "{e}");
        let e = load_private_key("key_file", &der).expect_err("refused");
        assert!(e.to_string().contains("DER"), "{e}");
        let text = dir.path().join("text");
        std::fs::write(&text, "hello").expect("write");
        let e = load_certificates("client_ca_file", &text).expect_err("refused");
        assert!(e.to_string().contains("BEGIN CERTIFICATE"), "{e}");
        let broken = dir.path().join("broken");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        let e = load_certificates("cert_file", &broken).expect_err("refused");
        assert!(
            e.to_string().contains("cert_file") && e.to_string().contains("broken"),
            "{e}"
        );
    }
}
