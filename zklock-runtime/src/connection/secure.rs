//! Secured connections: TLS settings ([`TlsConfig`], feature `tls`), SASL credentials (feature
//! `sasl`), and the diagnosis that tells a misconfigured connection from an unreachable server.
//!
//! The client library does the TLS and SASL work. What it cannot do is say *why* a TLS
//! connection failed: it retries every failed handshake like a dropped connection until the
//! connect timeout. So while a session is slow to open, [`misconfiguration`] makes its own
//! handshake with the same settings and reports what the server's answer proves: a certificate
//! the CA does not vouch for, a server that wants a client certificate, a plain port, a TLS port.

use std::time::Duration;

use zookeeper_client as zk;

use crate::connection::connect_string::Server;
use crate::error::LockError;

/// When the first diagnostic handshake is made, if no session has opened by then: long enough
/// for a healthy connect, short enough to answer a misconfiguration at once.
const FIRST_DIAGNOSIS_AFTER: Duration = Duration::from_millis(500);
/// How often it is repeated while the session still does not open (servers may be starting).
const DIAGNOSIS_EVERY: Duration = Duration::from_secs(1);

/// The security settings of one client, as the builder collected them; [`Security::prepare`]
/// checks them into a [`Secured`].
#[derive(Clone, Default)]
pub(crate) struct Security {
    #[cfg(feature = "tls")]
    pub tls: Option<TlsConfig>,
    #[cfg(feature = "sasl")]
    pub sasl: Option<Sasl>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("Security");
        #[cfg(feature = "tls")]
        s.field("tls", &self.tls);
        #[cfg(feature = "sasl")]
        s.field("sasl", &self.sasl.as_ref().map(|sasl| &sasl.who));
        s.finish()
    }
}

/// SASL options and who they authenticate as, for error messages.
#[cfg(feature = "sasl")]
#[derive(Clone)]
pub(crate) struct Sasl {
    pub options: zk::SaslOptions,
    pub who: String,
}

impl Security {
    /// Whether the client authenticates by SASL, so its nodes may default to `creator_all`.
    pub fn authenticates(&self) -> bool {
        #[cfg(feature = "sasl")]
        if self.sasl.is_some() {
            return true;
        }
        false
    }

    /// Whether TLS settings were given.
    fn has_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            return true;
        }
        false
    }

    /// Checks the settings before any network traffic, parsing the PEM once for every session
    /// to come: PEM that does not parse, or a `tcp+tls://` server without TLS settings, is a
    /// configuration error now, not a handshake failure later.
    pub fn prepare(self, servers: &[Server]) -> Result<Secured, LockError> {
        if let Some(server) = servers.iter().find(|s| s.tls == Some(true)) {
            if !self.has_tls() {
                let missing = if cfg!(feature = "tls") {
                    "the client has no `tls(...)` settings"
                } else {
                    "this build lacks the `tls` feature"
                };
                return Err(LockError::invalid_config(format!(
                    "the connect string asks for TLS to {}:{} (tcp+tls://), but {missing}",
                    server.host, server.port
                )));
            }
        }
        Ok(Secured {
            #[cfg(feature = "tls")]
            tls: self.tls.as_ref().map(TlsConfig::prepare).transpose()?,
            #[cfg(feature = "sasl")]
            sasl: self.sasl,
        })
    }
}

/// Checked security settings, as every session of a client uses them.
pub(crate) struct Secured {
    #[cfg(feature = "tls")]
    tls: Option<tls::PreparedTls>,
    #[cfg(feature = "sasl")]
    sasl: Option<Sasl>,
}

impl Secured {
    /// Hands the settings to the client library.
    pub fn apply(&self, connector: zk::Connector) -> zk::Connector {
        #[cfg(feature = "tls")]
        let connector = match &self.tls {
            Some(tls) => connector.with_tls(tls.options.clone()),
            None => connector,
        };
        #[cfg(feature = "sasl")]
        let connector = match &self.sasl {
            Some(sasl) => connector.with_sasl(sasl.options.clone()),
            None => connector,
        };
        connector
    }

    /// Opens the session: over TLS for every server without a scheme when TLS is configured.
    pub async fn connect(&self, connector: zk::Connector, connect: &str) -> Result<zk::Client, zk::Error> {
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            return connector.secure_connect(connect).await;
        }
        connector.connect(connect).await
    }

    /// Checks that a session opened with SASL options was authenticated by SASL. A server
    /// without SASL (no JAAS `Server` section, no SASL provider) lets the client in anyway, as
    /// nobody in particular; its lock nodes would then fail with `InvalidACL`, or be open to
    /// all. Servers before 3.7 cannot say who a session is (`whoami`); the check is skipped then.
    pub async fn check_authenticated(&self, zk: &zk::Client) -> Result<(), LockError> {
        #[cfg(feature = "sasl")]
        if let Some(sasl) = &self.sasl {
            match zk.list_auth_users().await {
                Ok(users) if users.iter().any(|u| u.scheme() == "sasl") => {}
                Ok(_) => {
                    return Err(LockError::auth_failed(format!(
                        "the server let {} in without SASL authentication: is SASL enabled on it \
                         (authProvider SASLAuthenticationProvider and a JAAS `Server` section)?",
                        sasl.who
                    )))
                }
                Err(zk::Error::Unimplemented) => {}
                Err(e) => return Err(LockError::zk("whoami", e)),
            }
        }
        #[cfg(not(feature = "sasl"))]
        let _ = zk;
        Ok(())
    }

    /// The error for a server refusing this client's credentials.
    pub fn auth_failed(&self) -> LockError {
        #[cfg(feature = "sasl")]
        if let Some(sasl) = &self.sasl {
            return LockError::auth_failed(format!(
                "the server refused the SASL credentials of {} (wrong password, or a user the \
                 server's JAAS configuration does not list)",
                sasl.who
            ));
        }
        LockError::auth_failed("the server refused this client's credentials")
    }
}

/// Resolves once a diagnostic handshake proves that the connection cannot work as configured,
/// with the reason; stays pending otherwise (and always without the `tls` feature). Meant to be
/// raced against the session's connect.
pub(crate) async fn misconfiguration(security: &Secured, servers: &[Server]) -> LockError {
    tokio::time::sleep(FIRST_DIAGNOSIS_AFTER).await;
    #[cfg(feature = "tls")]
    let detecting = tls::detector();
    loop {
        #[cfg(feature = "tls")]
        if let Some(why) = tls::diagnose(security.tls.as_ref(), detecting.as_ref(), servers).await {
            return LockError::tls(why);
        }
        #[cfg(not(feature = "tls"))]
        let _ = (security, servers);
        tokio::time::sleep(DIAGNOSIS_EVERY).await;
    }
}

#[cfg(feature = "tls")]
pub use tls::TlsConfig;

#[cfg(feature = "tls")]
mod tls {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
    use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
    use tokio::net::TcpStream;
    use tokio_rustls::TlsConnector;
    use zookeeper_client as zk;

    use crate::connection::connect_string::Server;
    use crate::error::LockError;

    /// How long a diagnostic TCP connect or handshake may take.
    const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

    /// TLS settings for connections to the ensemble: the certificate authority that vouches
    /// for the servers and, for servers that want one, this client's certificate and key.
    ///
    /// The server's certificate must be valid for the host name or address the connect string
    /// names (checked always; there is no switch to turn it off). Servers speak TLS on their
    /// `secureClientPort`; with TLS configured, every server of the connect string is reached
    /// over TLS.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// use zklock_runtime::{LockClient, TlsConfig};
    ///
    /// let tls = TlsConfig::ca_file("/etc/zookeeper/ca.pem")?
    ///     .identity_files("/etc/orders/client.pem", "/etc/orders/client.key")?;
    /// let client = LockClient::builder("zk1:2281,zk2:2281").tls(tls).connect().await?;
    /// # drop(client); Ok(()) }
    /// ```
    #[derive(Clone)]
    pub struct TlsConfig {
        ca_pem: String,
        identity: Option<(String, String)>,
    }

    impl std::fmt::Debug for TlsConfig {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("TlsConfig")
                .field("client_certificate", &self.identity.is_some())
                .finish_non_exhaustive()
        }
    }

    fn read(what: &str, path: &Path) -> Result<String, LockError> {
        std::fs::read_to_string(path)
            .map_err(|e| LockError::invalid_config_from(format!("cannot read the TLS {what} {}", path.display()), e))
    }

    /// The error for unusable TLS settings: `what` names the setting, and `e` (a parser's or
    /// rustls' error) says why.
    fn invalid(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> LockError {
        LockError::invalid_config_from(format!("TLS {what}"), e)
    }

    impl TlsConfig {
        /// Trusts the certificates of a PEM bundle (one or more `CERTIFICATE` blocks). Checked
        /// when the client is built.
        ///
        /// ```
        /// use zklock_runtime::{LockClient, LockError, TlsConfig};
        ///
        /// let not_pem = TlsConfig::ca_pem("hello");
        /// let err = LockClient::builder("zk1:2281").tls(not_pem).build().unwrap_err();
        /// assert!(matches!(err, LockError::InvalidConfig { .. }));
        /// ```
        pub fn ca_pem(pem: impl Into<String>) -> TlsConfig {
            TlsConfig {
                ca_pem: pem.into(),
                identity: None,
            }
        }

        /// Trusts the certificates of a PEM file.
        ///
        /// Errors: [`LockError::InvalidConfig`] naming the file when it cannot be read, with the
        /// io error as its source.
        pub fn ca_file(path: impl AsRef<Path>) -> Result<TlsConfig, LockError> {
            Ok(Self::ca_pem(read("CA file", path.as_ref())?))
        }

        /// Presents this certificate (PEM chain, leaf first) and private key (PEM: PKCS#8,
        /// PKCS#1 or SEC1) to servers that ask for one (ZooKeeper's `ssl.clientAuth`).
        ///
        /// ```no_run
        /// # fn demo(ca: String, cert: String, key: String) -> Result<(), zklock_runtime::LockError> {
        /// use zklock_runtime::{LockClient, TlsConfig};
        ///
        /// let tls = TlsConfig::ca_pem(ca).identity_pem(cert, key);
        /// let client = LockClient::builder("zk1:2281").tls(tls).build()?;
        /// # drop(client); Ok(()) }
        /// ```
        #[must_use]
        pub fn identity_pem(mut self, cert: impl Into<String>, key: impl Into<String>) -> TlsConfig {
            self.identity = Some((cert.into(), key.into()));
            self
        }

        /// [`identity_pem`](Self::identity_pem) from files.
        ///
        /// Errors: [`LockError::InvalidConfig`] naming the file that cannot be read, with the io
        /// error as its source.
        pub fn identity_files(self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<TlsConfig, LockError> {
            let cert = read("certificate file", cert.as_ref())?;
            let key = read("key file", key.as_ref())?;
            Ok(self.identity_pem(cert, key))
        }

        /// Parses the settings once, for every session and diagnosis to come.
        pub(crate) fn prepare(&self) -> Result<PreparedTls, LockError> {
            Ok(PreparedTls {
                options: self.options()?,
                verifying: TlsConnector::from(Arc::new(self.probe_config()?)),
            })
        }

        /// The client library's options.
        fn options(&self) -> Result<zk::TlsOptions, LockError> {
            let mut options = zk::TlsOptions::new()
                .with_pem_ca(&self.ca_pem)
                .map_err(|e| invalid("CA", e))?;
            if let Some((cert, key)) = &self.identity {
                options = options
                    .with_pem_identity(cert, key)
                    .map_err(|e| invalid("client certificate", e))?;
            }
            Ok(options)
        }

        /// The same trust and identity as a rustls configuration, for diagnostic handshakes;
        /// also the check that certificate and key are usable together.
        fn probe_config(&self) -> Result<ClientConfig, LockError> {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
                let cert = cert.map_err(|e| invalid("CA", e))?;
                roots.add(cert).map_err(|e| invalid("CA", e))?;
            }
            if roots.is_empty() {
                return Err(LockError::invalid_config("TLS CA: the PEM holds no CERTIFICATE block"));
            }
            let builder = ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(|e| invalid("versions", e))?
                .with_root_certificates(roots);
            match &self.identity {
                None => Ok(builder.with_no_client_auth()),
                Some((cert, key)) => {
                    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| invalid("client certificate", e))?;
                    if chain.is_empty() {
                        return Err(LockError::invalid_config(
                            "TLS client certificate: the PEM holds no CERTIFICATE block",
                        ));
                    }
                    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| invalid("client key", e))?;
                    builder
                        .with_client_auth_cert(chain, key)
                        .map_err(|e| invalid("client certificate and key", e))
                }
            }
        }
    }

    /// A [`TlsConfig`], parsed: the client library's options, and a connector with the same
    /// trust and identity for diagnostic handshakes.
    pub(crate) struct PreparedTls {
        pub options: zk::TlsOptions,
        verifying: TlsConnector,
    }

    /// The process's rustls provider if one was installed, else the one this build links.
    fn provider() -> Arc<CryptoProvider> {
        CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
    }

    /// What one diagnostic handshake with one server showed.
    enum Finding {
        /// The server cannot be used as configured, for this reason.
        Misconfigured(String),
        /// Nothing conclusive: the handshake worked, or the server was not reachable.
        Inconclusive,
    }

    /// Handshakes with every server; `Some(reason)` when every server that answered proved a
    /// misconfiguration (and at least one answered).
    ///
    /// `detecting` is [`detector`]'s connector, for servers the session reaches without TLS.
    pub(super) async fn diagnose(
        tls: Option<&PreparedTls>,
        detecting: Option<&TlsConnector>,
        servers: &[Server],
    ) -> Option<String> {
        let mut reasons = Vec::new();
        for server in servers {
            // The session speaks TLS to a server when its scheme says so, else when configured.
            let (secure, connector) = match (server.tls.unwrap_or(true), tls) {
                (true, Some(tls)) => (true, &tls.verifying),
                _ => (false, detecting?),
            };
            let address = format!("{}:{}", server.host, server.port);
            let Ok(Ok(tcp)) =
                tokio::time::timeout(PROBE_TIMEOUT, TcpStream::connect((server.host.as_str(), server.port))).await
            else {
                continue;
            };
            let Ok(name) = ServerName::try_from(server.host.clone()) else {
                continue;
            };
            let handshake = tokio::time::timeout(PROBE_TIMEOUT, connector.connect(name, tcp)).await;
            let finding = match handshake {
                Err(_) => Finding::Inconclusive,
                Ok(result) => judge(secure, &address, &server.host, result.map(drop)),
            };
            match finding {
                Finding::Misconfigured(reason) => reasons.push(reason),
                Finding::Inconclusive => return None,
            }
        }
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }

    /// What a handshake's outcome proves, with TLS configured (`secure`) or not.
    fn judge(secure: bool, address: &str, host: &str, outcome: std::io::Result<()>) -> Finding {
        // A handshake that worked proves the settings right (the detector never lets one work).
        let Err(error) = outcome else {
            return Finding::Inconclusive;
        };
        let tls_error = error.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>());
        if !secure {
            return match tls_error {
                Some(rustls::Error::General(marker)) if marker == SPEAKS_TLS => Finding::Misconfigured(format!(
                    "{address} speaks TLS (a secureClientPort?) but this client was built without \
                     `tls(...)`"
                )),
                _ => Finding::Inconclusive,
            };
        }
        let reason = match tls_error {
            Some(rustls::Error::InvalidCertificate(problem)) => certificate_problem(host, problem),
            Some(rustls::Error::AlertReceived(alert)) => format!(
                "the server ended the TLS handshake with the alert {alert:?}: it may require a \
                 client certificate (ssl.clientAuth=need) that this client lacks or that its trust \
                 store does not vouch for"
            ),
            Some(other) => format!("the TLS handshake failed: {other}"),
            None => match error.kind() {
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                    "the server closed the connection during the TLS handshake: the port does not \
                     seem to serve TLS (a plain clientPort? ZooKeeper serves TLS on its \
                     secureClientPort)"
                        .to_string()
                }
                _ => return Finding::Inconclusive,
            },
        };
        Finding::Misconfigured(format!("{address}: {reason}"))
    }

    fn certificate_problem(host: &str, problem: &CertificateError) -> String {
        match problem {
            CertificateError::UnknownIssuer => {
                "the server's certificate is not signed by the configured CA (UnknownIssuer)".into()
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => format!(
                "the server's certificate is not valid for `{host}`, the name the connect string \
                 uses (NotValidForName)"
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the server's certificate has expired (Expired)".into()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the server's certificate is not valid yet (NotValidYet)".into()
            }
            CertificateError::Revoked => "the server's certificate is revoked (Revoked)".into(),
            other => format!("the server's certificate was rejected ({other:?})"),
        }
    }

    const SPEAKS_TLS: &str = "zklock: the server presented a certificate";

    /// A configuration for telling whether a port speaks TLS: the handshake reaches the
    /// verifier only when the server presented a certificate, and the verifier then fails it
    /// with a marker, so nothing is ever trusted.
    pub(super) fn detector() -> Option<TlsConnector> {
        let provider = provider();
        let verifier = Arc::new(TlsDetector(provider.clone()));
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Some(TlsConnector::from(Arc::new(config)))
    }

    #[derive(Debug)]
    struct TlsDetector(Arc<CryptoProvider>);

    impl ServerCertVerifier for TlsDetector {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp_response: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Err(rustls::Error::General(SPEAKS_TLS.into()))
        }

        fn verify_tls12_signature(
            &self,
            _message: &[u8],
            _cert: &CertificateDer<'_>,
            _dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Err(rustls::Error::General(SPEAKS_TLS.into()))
        }

        fn verify_tls13_signature(
            &self,
            _message: &[u8],
            _cert: &CertificateDer<'_>,
            _dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Err(rustls::Error::General(SPEAKS_TLS.into()))
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
}
