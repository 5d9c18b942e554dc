//! Certificates for TLS tests, minted with rcgen at test time and written as PEM files:
//! - `ca.pem`: the CA that signs the agents' and the gateway's certificates;
//! - `agent.pem` / `agent-key.pem`: an agent server certificate for 127.0.0.1 and localhost;
//! - `gateway.pem` / `gateway-key.pem`: the gateway's client certificate (mutual TLS);
//! - `other-ca.pem`, `intruder.pem` / `intruder-key.pem`: another CA and a client it signed.
//!
//! Every certificate has its own subject: OpenSSL (curl) takes a leaf whose subject equals its
//! issuer's for a self-signed certificate.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use std::path::Path;

/// Writes the files listed in the module documentation into `dir`.
pub fn mint(dir: &Path) {
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).expect("PEM file");
    let mut issuers = Vec::new();
    for (name, file) in [("flexgate test CA", "ca"), ("someone else's CA", "other-ca")] {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("CA key");
        write(&format!("{file}.pem"), params.self_signed(&key).expect("CA").pem());
        issuers.push(Issuer::new(params, key));
    }
    let leaves: [(&str, &[&str], usize); 3] = [
        ("agent", &["127.0.0.1", "localhost"], 0),
        ("gateway", &["flexgate-gateway"], 0),
        ("intruder", &["intruder"], 1),
    ];
    for (file, names, issuer) in leaves {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_string()).collect::<Vec<_>>()).expect("params");
        params.distinguished_name.push(DnType::CommonName, file);
        let cert = params.signed_by(&key, &issuers[issuer]).expect("certificate");
        write(&format!("{file}.pem"), cert.pem());
        write(&format!("{file}-key.pem"), key.serialize_pem());
    }
}
