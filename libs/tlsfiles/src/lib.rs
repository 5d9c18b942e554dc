//! Reading the PEM files of a TLS set-up: certificate chains, private keys and CA bundles.
//!
//! Every TLS endpoint of flexgate (the OpenADR VEN's client, the MQTT link, the node agent's
//! server and its clients) reads the same three kinds of file, and certificate set-up is where
//! deployments fail most. So the reading, and the advice when a file is wrong, is written once
//! here: every [`PemError`] names the setting, the file and the usual cause (swapped files, an
//! encrypted key, DER instead of PEM, an empty file). It is a leaf crate because adapters may not
//! depend on each other, and each adapter must stay usable on its own.
//!
//! Errors carry paths, never file contents, so they are safe to log: a key file's bytes never
//! reach a message.

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};

/// A certificate, key or CA file that cannot be used, worded for the person editing the
/// configuration: which setting, which file, and what is usually the cause.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// A file could not be read (missing, permissions, a directory).
    #[error("cannot read {what} {path}: {error}")]
    Read {
        /// Which setting names the file (`cert_file`, `key_file`, `ca_file`, ...).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's reason (part of the message, not a separate `source()`, so
        /// that `{:#}` chains do not print it twice).
        error: std::io::Error,
    },
    /// A PEM section could not be decoded (broken base64, a missing END line).
    #[error("{what} {path} is not valid PEM: {reason}")]
    Malformed {
        /// Which setting names the file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The decoder's message.
        reason: String,
    },
    /// A certificate file holds no certificate.
    #[error("{what} {path} contains no PEM certificate{hint}")]
    NoCertificate {
        /// Which setting names the file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The likely cause, starting with `": "`, or empty.
        hint: &'static str,
    },
    /// A key file holds no private key.
    #[error("{what} {path} contains no PEM private key{hint}")]
    NoKey {
        /// Which setting names the file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The likely cause, starting with `": "`, or empty.
        hint: &'static str,
    },
    /// A certificate of a CA file cannot be a trust anchor.
    #[error("{what} {path}: certificate {index} is not a usable CA certificate: {reason}")]
    BadCa {
        /// Which setting names the file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Position of the certificate in the file, from 0.
        index: usize,
        /// rustls' reason.
        reason: String,
    },
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, PemError> {
    std::fs::read(path).map_err(|error| PemError::Read {
        what,
        path: path.to_path_buf(),
        error,
    })
}

fn is_blank(pem: &[u8]) -> bool {
    pem.iter().all(u8::is_ascii_whitespace)
}

/// DER starts with an ASN.1 SEQUENCE tag; PEM is text.
fn looks_like_der(pem: &[u8]) -> bool {
    pem.first() == Some(&0x30)
}

/// Every certificate of the PEM file `path`, in file order (for a chain: leaf first). `what` is
/// the setting that names the file; a file with no certificate is an error with a hint when it
/// is empty, holds a private key instead, or looks like DER.
pub fn load_certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PemError::Malformed {
            what,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        let holds_key = PrivateKeyDer::from_pem_slice(&pem).is_ok();
        let hint = if is_blank(&pem) {
            ": the file is empty"
        } else if holds_key && what == "cert_file" {
            ": it holds a private key (are cert_file and key_file swapped?)"
        } else if holds_key {
            ": it holds a private key, not CA certificates"
        } else if looks_like_der(&pem) {
            ": it looks like DER; convert it with `openssl x509 -inform der -in FILE -out FILE.pem`"
        } else {
            ": expected -----BEGIN CERTIFICATE----- sections"
        };
        return Err(PemError::NoCertificate {
            what,
            path: path.to_path_buf(),
            hint,
        });
    }
    Ok(certs)
}

/// The private key of the PEM file `path` (the first one: PKCS#8, PKCS#1 or SEC1), with a hint
/// when the file is empty, holds a certificate instead, holds an encrypted key (nobody is there
/// to type a passphrase for an unattended service), or looks like DER.
pub fn load_private_key(what: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    let pem = read(what, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| {
        let hint = if is_blank(&pem) {
            ": the file is empty"
        } else if CertificateDer::pem_slice_iter(&pem).any(|c| c.is_ok()) {
            ": it holds a certificate (are cert_file and key_file swapped?)"
        } else if String::from_utf8_lossy(&pem).contains("ENCRYPTED") {
            ": the key is encrypted; decrypt it with `openssl pkey -in KEY -out KEY.plain` (mode 0600)"
        } else if looks_like_der(&pem) {
            ": it looks like DER; convert it with `openssl pkey -inform der -in FILE -out FILE.pem`"
        } else {
            ": expected a -----BEGIN PRIVATE KEY----- (or RSA / EC PRIVATE KEY) section"
        };
        PemError::NoKey {
            what,
            path: path.to_path_buf(),
            hint,
        }
    })
}

/// A root store of every certificate in the CA file `path`. A certificate that cannot be a trust
/// anchor is an error naming its position, rather than being skipped: a CA file that silently
/// trusts fewer CAs than its owner thinks fails later, at a handshake, far from the cause.
pub fn load_root_store(what: &'static str, path: &Path) -> Result<RootCertStore, PemError> {
    let mut roots = RootCertStore::empty();
    for (index, cert) in load_certificates(what, path)?.into_iter().enumerate() {
        roots.add(cert).map_err(|e| PemError::BadCa {
            what,
            path: path.to_path_buf(),
            index,
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Writes a file into the test directory and returns its path.
    type Writer = Box<dyn Fn(&str, &[u8]) -> PathBuf>;

    struct Files {
        _dir: tempfile::TempDir,
        cert: PathBuf,
        key: PathBuf,
        write: Writer,
    }

    fn files() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let issued = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let write = move |name: &str, bytes: &[u8]| {
            let path = root.join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        let cert = write("cert.pem", issued.cert.pem().as_bytes());
        let key = write("key.pem", issued.signing_key.serialize_pem().as_bytes());
        Files {
            _dir: dir,
            cert,
            key,
            write: Box::new(write),
        }
    }

    fn hint(e: &PemError) -> String {
        e.to_string()
    }

    #[test]
    fn good_files_load() {
        let f = files();
        assert_eq!(load_certificates("cert_file", &f.cert).unwrap().len(), 1);
        load_private_key("key_file", &f.key).unwrap();
        assert_eq!(load_root_store("ca_file", &f.cert).unwrap().len(), 1);
    }

    #[test]
    fn swapped_files_say_so() {
        let f = files();
        let e = load_certificates("cert_file", &f.key).unwrap_err();
        assert!(matches!(e, PemError::NoCertificate { what: "cert_file", .. }), "{e}");
        assert!(hint(&e).contains("swapped"), "{e}");
        let e = load_certificates("ca_file", &f.key).unwrap_err();
        assert!(hint(&e).contains("not CA certificates"), "{e}");
        let e = load_private_key("key_file", &f.cert).unwrap_err();
        assert!(matches!(e, PemError::NoKey { what: "key_file", .. }), "{e}");
        assert!(hint(&e).contains("swapped"), "{e}");
    }

    #[test]
    fn empty_der_encrypted_and_missing_files_have_hints() {
        let f = files();
        let empty = (f.write)("empty.pem", b"\n");
        assert!(hint(&load_certificates("cert_file", &empty).unwrap_err()).contains("empty"));
        assert!(hint(&load_private_key("key_file", &empty).unwrap_err()).contains("empty"));
        let der = (f.write)("cert.der", &[0x30, 0x82, 0x01, 0x0a, 0x02]);
        assert!(hint(&load_certificates("cert_file", &der).unwrap_err()).contains("DER"));
        assert!(hint(&load_private_key("key_file", &der).unwrap_err()).contains("DER"));
        let encrypted = (f.write)(
            "enc.pem",
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n",
        );
        assert!(hint(&load_private_key("key_file", &encrypted).unwrap_err()).contains("encrypted"));
        let missing = f.cert.with_file_name("nope.pem");
        let e = load_certificates("ca_file", &missing).unwrap_err();
        assert!(matches!(e, PemError::Read { what: "ca_file", .. }), "{e}");
        let broken = (f.write)(
            "broken.pem",
            b"-----BEGIN CERTIFICATE-----\n!!!! not base64 !!!!\n-----END CERTIFICATE-----\n",
        );
        assert!(matches!(
            load_certificates("cert_file", &broken).unwrap_err(),
            PemError::Malformed { .. }
        ));
    }

    #[test]
    fn messages_never_carry_key_material() {
        let f = files();
        let key_text = std::fs::read_to_string(&f.key).unwrap();
        let body_line = key_text.lines().nth(1).unwrap();
        let e = load_certificates("cert_file", &f.key).unwrap_err();
        assert!(!format!("{e} {e:?}").contains(body_line));
    }
}
