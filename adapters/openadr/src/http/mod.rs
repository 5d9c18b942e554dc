//! HTTP transports (feature `http`): TLS set-up shared by every transport, and the OpenADR 2.0b
//! simple-HTTP client. The OpenADR 3.x REST client lives in [`crate::oadr3`].

pub mod oadr2b;
pub mod tls;

/// A `reqwest::Client` for a VTN: TLS from `tls` (CA and/or pin, client certificate) or, when
/// `None`, the system trust store; the ring provider throughout; `timeout` per request.
pub fn client(tls: Option<&tls::TlsSettings>, timeout: std::time::Duration) -> Result<reqwest::Client, tls::TlsError> {
    let config = match tls {
        Some(settings) => tls::client_config(settings)?,
        None => tls::platform_config()?,
    };
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(std::time::Duration::from_secs(10)))
        .user_agent(concat!("flexgate-openadr/", env!("CARGO_PKG_VERSION")))
        .tls_backend_preconfigured(config)
        .build()
        .map_err(|e| tls::TlsError::Rustls(format!("cannot build the HTTP client: {e}")))
}
