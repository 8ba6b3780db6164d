//! Certificates for TLS test servers and clients, made fresh for every test: [`TestCa`] and the
//! [`TestIdentity`]s it issues.
//!
//! Everything is generated in memory with rcgen (ECDSA P-256 keys, PKCS#8 PEM), then written to
//! a temporary directory too, for programs that want files (a ZooKeeper server's PEM key and
//! trust stores, a Java client's system properties, a client's `*_file` configuration).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;
use time::OffsetDateTime;

use super::error::TestingError;

/// A throw-away certificate authority: its certificate goes into trust stores, and it issues
/// server and client certificates for loopback.
///
/// ```no_run
/// use zklock_testing::{TestCa, ZkServer};
///
/// let ca = TestCa::new("shop test CA")?;
/// let server = ZkServer::builder().tls(&ca).start()?;
/// let client = ca.issue("orders-api")?; // for mutual TLS
/// println!("TLS on {}, trust {}", server.secure_connect_string().unwrap(), ca.cert_file().display());
/// # let _ = client;
/// # Ok::<(), zklock_testing::TestingError>(())
/// ```
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_file: PathBuf,
    dir: Arc<TempDir>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa")
            .field("cert_file", &self.cert_file)
            .finish_non_exhaustive()
    }
}

/// A certificate and its private key, issued by a [`TestCa`], for both server and client
/// authentication: by [`TestCa::issue`] valid for `127.0.0.1`, `::1` and `localhost`, by
/// [`TestCa::issue_with`] for the names and the time its [`IssueOptions`] say.
#[derive(Debug, Clone)]
pub struct TestIdentity {
    cert_pem: String,
    key_pem: String,
    cert_file: PathBuf,
    key_file: PathBuf,
    // Keeps the files alive as long as the identity.
    _dir: Arc<TempDir>,
}

fn cert_error(what: &str, err: rcgen::Error) -> TestingError {
    TestingError::InvalidArgument(format!("cannot generate {what}: {err}"))
}

fn write(dir: &Path, name: &str, contents: &str) -> Result<PathBuf, TestingError> {
    let path = dir.join(name);
    fs::write(&path, contents).map_err(|e| TestingError::io(format!("write {}", path.display()), e))?;
    Ok(path)
}

/// A file name made of the letters and digits of `name`.
fn file_stem(name: &str) -> String {
    let stem: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    if stem.is_empty() {
        "identity".into()
    } else {
        stem
    }
}

impl TestCa {
    /// A new authority whose certificate's common name is `name`.
    pub fn new(name: &str) -> Result<TestCa, TestingError> {
        let key = KeyPair::generate().map_err(|e| cert_error("a CA key", e))?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| cert_error("CA parameters", e))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params
            .self_signed(&key)
            .map_err(|e| cert_error("a CA certificate", e))?;
        let dir = tempfile::Builder::new()
            .prefix("zklock-ca-")
            .tempdir()
            .map_err(|e| TestingError::io("create a temporary certificate directory", e))?;
        let cert_pem = cert.pem();
        let cert_file = write(dir.path(), "ca.pem", &cert_pem)?;
        Ok(TestCa {
            issuer: Issuer::new(params, key),
            cert_pem,
            cert_file,
            dir: Arc::new(dir),
        })
    }

    /// The authority's certificate, PEM-encoded: what a trust store holds.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A file holding [`cert_pem`](Self::cert_pem); removed with the authority.
    pub fn cert_file(&self) -> &Path {
        &self.cert_file
    }

    /// Issues a certificate with common name `name` for `127.0.0.1`, `::1` and `localhost`,
    /// valid from long ago until far in the future.
    pub fn issue(&self, name: &str) -> Result<TestIdentity, TestingError> {
        self.issue_with(name, &IssueOptions::default())
    }

    /// Issues a certificate with common name `name`, valid for the names and the time `options`
    /// give: e.g. one for another host, an expired one, or one not valid yet, to see a client
    /// refuse it.
    ///
    /// ```no_run
    /// use std::time::{Duration, SystemTime};
    /// use zklock_testing::{IssueOptions, TestCa, ZkServer};
    ///
    /// let ca = TestCa::new("shop test CA")?;
    /// let day = Duration::from_secs(24 * 60 * 60);
    /// let expired = IssueOptions::new()
    ///     .valid_from(SystemTime::now() - 2 * day)
    ///     .valid_until(SystemTime::now() - day);
    /// let identity = ca.issue_with("zookeeper-server", &expired)?;
    /// let server = ZkServer::builder().tls_with(&identity, ca.cert_pem()).start()?;
    /// # let _ = server;
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    ///
    /// Errors: [`TestingError::InvalidArgument`] when a name is neither an IP address nor
    /// ASCII text.
    pub fn issue_with(&self, name: &str, options: &IssueOptions) -> Result<TestIdentity, TestingError> {
        let key = KeyPair::generate().map_err(|e| cert_error("a key", e))?;
        let mut params =
            CertificateParams::new(options.names.clone()).map_err(|e| cert_error("certificate parameters", e))?;
        params.distinguished_name.push(DnType::CommonName, name);
        if let Some(from) = options.not_before {
            params.not_before = OffsetDateTime::from(from);
        }
        if let Some(until) = options.not_after {
            params.not_after = OffsetDateTime::from(until);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| cert_error("a certificate", e))?;
        let stem = file_stem(name);
        let cert_pem = cert.pem();
        let key_pem = key.serialize_pem();
        Ok(TestIdentity {
            cert_file: write(self.dir.path(), &format!("{stem}.crt.pem"), &cert_pem)?,
            key_file: write(self.dir.path(), &format!("{stem}.key.pem"), &key_pem)?,
            cert_pem,
            key_pem,
            _dir: self.dir.clone(),
        })
    }
}

/// What goes into a certificate that [`TestCa::issue_with`] issues: the names it is valid for
/// and when it is valid. The defaults are [`TestCa::issue`]'s: `localhost`, `127.0.0.1` and `::1`,
/// from 1975 until the year 4096.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use zklock_testing::IssueOptions;
///
/// let elsewhere = IssueOptions::new().names(["zk1.example.com", "192.0.2.7"]);
/// let not_yet = IssueOptions::new().valid_from(SystemTime::now() + Duration::from_secs(86_400));
/// # let _ = (elsewhere, not_yet);
/// ```
#[derive(Debug, Clone)]
pub struct IssueOptions {
    names: Vec<String>,
    not_before: Option<SystemTime>,
    not_after: Option<SystemTime>,
}

impl Default for IssueOptions {
    fn default() -> Self {
        IssueOptions {
            names: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            not_before: None,
            not_after: None,
        }
    }
}

impl IssueOptions {
    /// The defaults: valid for loopback, from long ago until far in the future.
    pub fn new() -> IssueOptions {
        IssueOptions::default()
    }

    /// The host names and IP addresses the certificate is valid for (its subject alternative
    /// names), instead of the loopback ones. A name that parses as an IP address is written as
    /// one, any other as a DNS name. An empty list gives a certificate valid for no host.
    #[must_use]
    pub fn names<I, S>(mut self, names: I) -> IssueOptions
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.names = names.into_iter().map(Into::into).collect();
        self
    }

    /// The first moment the certificate is valid (its `notBefore`, to the second); a time in
    /// the future gives a certificate that is not valid yet.
    #[must_use]
    pub fn valid_from(mut self, from: SystemTime) -> IssueOptions {
        self.not_before = Some(from);
        self
    }

    /// The last moment the certificate is valid (its `notAfter`, to the second); a time in the
    /// past gives an expired certificate.
    #[must_use]
    pub fn valid_until(mut self, until: SystemTime) -> IssueOptions {
        self.not_after = Some(until);
        self
    }
}

impl TestIdentity {
    /// The certificate, PEM-encoded.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The private key, as unencrypted PKCS#8 PEM.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A file holding [`cert_pem`](Self::cert_pem).
    pub fn cert_file(&self) -> &Path {
        &self.cert_file
    }

    /// A file holding [`key_pem`](Self::key_pem).
    pub fn key_file(&self) -> &Path {
        &self.key_file
    }

    /// Certificate and key in one PEM file, as ZooKeeper's `PEM` key store reads them.
    pub(crate) fn key_store_pem(&self) -> String {
        format!("{}{}", self.cert_pem, self.key_pem)
    }
}
