//! The webhook's serving certificate, read from PEM files and read again when they change (a
//! mounted Secret is swapped atomically by the kubelet; cert-manager renews it), so a renewal
//! never needs a restart. A file that cannot be read or parsed keeps the previous certificate
//! serving and is logged; at start it is an error: the webhook serves TLS only. With a client CA
//! the handshake also demands a client certificate signed by it (the API servers' webhook client
//! certificate), so only they can make the operator act on a review; that CA file is read again
//! when it changes, in the same way.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::pki_types::UnixTime;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{DigitallySignedStruct, SignatureScheme};

/// How often, at most, a handshake looks at the files.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Why the certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    NoKey { path: PathBuf },
    #[error("the key in {path} cannot sign")]
    Key {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("cannot build the TLS configuration")]
    Config(#[source] rustls::Error),
    #[error("{path} holds no PEM CA certificate usable as a client CA")]
    NoClientCa { path: PathBuf },
    #[error("cannot verify client certificates against {path}")]
    ClientVerifier {
        path: PathBuf,
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
}

/// The stamp of a file: modification time, length and inode. The inode too: a file replaced
/// by a rename (as kubelet and cert-manager swap mounted Secrets) within one tick of the
/// kernel's coarse clock, with a same-size PEM, has the same time and length, and the rotation
/// went unseen for good (the rotation test failed about one run in three).
type Stamp = Option<(SystemTime, u64, u64)>;

fn stamp(p: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

fn read(p: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(p).map_err(|source| TlsError::Read {
        path: p.to_path_buf(),
        source,
    })
}

/// Loads a certificate chain and its key.
pub fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_path_buf(),
        });
    }
    let der = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|_| TlsError::NoKey {
        path: key.to_path_buf(),
    })?;
    let signer =
        rustls::crypto::ring::sign::any_supported_type(&der).map_err(|source| TlsError::Key {
            path: key.to_path_buf(),
            source,
        })?;
    Ok(Arc::new(CertifiedKey::new(chain, signer)))
}

struct Loaded {
    key: Arc<CertifiedKey>,
    stamps: (Stamp, Stamp),
    checked: Instant,
}

/// Serves the certificate of two files, reloading them when they change.
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    loaded: Mutex<Loaded>,
}

impl std::fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish()
    }
}

impl ReloadingCert {
    /// Loads the files now; an error here stops the operator (TLS only).
    pub fn new(cert: PathBuf, key: PathBuf) -> Result<Self, TlsError> {
        let stamps = (stamp(&cert), stamp(&key));
        let loaded = load(&cert, &key)?;
        Ok(Self {
            cert,
            key,
            loaded: Mutex::new(Loaded {
                key: loaded,
                stamps,
                checked: Instant::now(),
            }),
        })
    }

    /// The certificate to serve now, re-read first if the files changed.
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        let mut l = self.loaded.lock().ok()?;
        if l.checked.elapsed() >= CHECK_EVERY {
            l.checked = Instant::now();
            let now = (stamp(&self.cert), stamp(&self.key));
            if now != l.stamps {
                match load(&self.cert, &self.key) {
                    Ok(k) => {
                        l.key = k;
                        l.stamps = now;
                        tracing::info!(cert = %self.cert.display(), "webhook certificate reloaded");
                    }
                    // A half-written pair (certificate renewed, key not yet) fails here and is
                    // tried again on the next check.
                    Err(e) => {
                        tracing::warn!(error = %e, "webhook certificate changed but cannot be loaded; serving the previous one")
                    }
                }
            }
        }
        Some(l.key.clone())
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

/// The verifier the client CA in `path` describes.
fn ca_verifier(
    path: &Path,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&read(path)?).filter_map(Result::ok) {
        // A certificate the store refuses (not a CA it can parse) is left out; none at all
        // is an error below.
        let _ = roots.add(c);
    }
    if roots.is_empty() {
        return Err(TlsError::NoClientCa {
            path: path.to_path_buf(),
        });
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        // The hints would have to be swapped with the CA, and a client that gets none offers
        // the certificate it has (RFC 8446 4.2.4); the roots alone decide.
        .clear_root_hint_subjects()
        .build()
        .map_err(|source| TlsError::ClientVerifier {
            path: path.to_path_buf(),
            source,
        })
}

struct LoadedCa {
    verifier: Arc<dyn ClientCertVerifier>,
    stamp: Stamp,
    checked: Instant,
}

/// Verifies client certificates against the CA file, read again when it changes (the API
/// servers' client CA is rotated like any other CA), as `ReloadingCert` does for the serving
/// certificate: a file that cannot be read or parsed keeps the previous CA and is logged.
pub struct ReloadingClientCa {
    path: PathBuf,
    provider: Arc<rustls::crypto::CryptoProvider>,
    loaded: Mutex<LoadedCa>,
}

impl std::fmt::Debug for ReloadingClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingClientCa")
            .field("path", &self.path)
            .finish()
    }
}

impl ReloadingClientCa {
    /// Loads the CA now; an error here stops the operator.
    pub fn new(
        path: PathBuf,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let stamp = stamp(&path);
        let verifier = ca_verifier(&path, &provider)?;
        Ok(Self {
            path,
            provider,
            loaded: Mutex::new(LoadedCa {
                verifier,
                stamp,
                checked: Instant::now(),
            }),
        })
    }

    /// The verifier of the CA in force, the file re-read first if it changed.
    fn current(&self) -> Arc<dyn ClientCertVerifier> {
        let mut l = self
            .loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if l.checked.elapsed() >= CHECK_EVERY {
            l.checked = Instant::now();
            let now = stamp(&self.path);
            if now != l.stamp {
                match ca_verifier(&self.path, &self.provider) {
                    Ok(v) => {
                        l.verifier = v;
                        l.stamp = now;
                        tracing::info!(ca = %self.path.display(), "webhook client CA reloaded");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "webhook client CA changed but cannot be loaded; verifying against the previous one")
                    }
                }
            }
        }
        l.verifier.clone()
    }
}

impl ClientCertVerifier for ReloadingClientCa {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current().supported_verify_schemes()
    }
}

/// Who may connect: anyone, or only holders of a client certificate signed by a CA in `path`
/// (read again when the file changes).
fn client_verifier(
    path: Option<&Path>,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let Some(path) = path else {
        return Ok(rustls::server::WebPkiClientVerifier::no_client_auth());
    };
    Ok(Arc::new(ReloadingClientCa::new(
        path.to_path_buf(),
        provider.clone(),
    )?))
}

/// The server configuration: TLS 1.2 and 1.3 with ring, HTTP/1.1; client certificates signed by
/// the CA in `client_ca` required when it is set, none asked for otherwise.
pub fn server_config(
    cert: Arc<ReloadingCert>,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = client_verifier(client_ca, &provider)?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cert);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_rustls::rustls::pki_types::ServerName;
    use tokio_rustls::{TlsAcceptor, TlsConnector};

    struct Ca {
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
        pem: String,
    }

    fn ca() -> Ca {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = p.self_signed(&key).expect("ca").pem();
        Ca {
            issuer: rcgen::Issuer::new(p, key),
            pem,
        }
    }

    /// Writes a serving certificate for `localhost` and returns its DER.
    fn issue(ca: &Ca, dir: &Path) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().expect("key");
        let p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        let cert = p.signed_by(&key, &ca.issuer).expect("cert");
        std::fs::write(dir.join("tls.key.tmp"), key.serialize_pem()).expect("key");
        std::fs::rename(dir.join("tls.key.tmp"), dir.join("tls.key")).expect("rename");
        std::fs::write(dir.join("tls.crt.tmp"), cert.pem()).expect("cert");
        std::fs::rename(dir.join("tls.crt.tmp"), dir.join("tls.crt")).expect("rename");
        cert.der().to_vec()
    }

    /// One handshake over an in-memory pipe; the certificate the server presented.
    async fn served(server: Arc<rustls::ServerConfig>, ca: &Ca) -> Vec<u8> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
            roots.add(c.expect("ca pem")).expect("root");
        }
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let (a, b) = tokio::io::duplex(64 * 1024);
        let accept =
            tokio::spawn(async move { TlsAcceptor::from(server).accept(b).await.map(|_| ()) });
        let name = ServerName::try_from("localhost").expect("name");
        let conn = TlsConnector::from(Arc::new(client))
            .connect(name, a)
            .await
            .expect("handshake verified against the CA");
        let _ = accept.await;
        conn.get_ref().1.peer_certificates().expect("certs")[0].to_vec()
    }

    #[tokio::test]
    async fn a_renewed_certificate_is_served_without_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = ca();
        let first = issue(&ca, dir.path());
        let cert = Arc::new(
            ReloadingCert::new(dir.path().join("tls.crt"), dir.path().join("tls.key"))
                .expect("loads"),
        );
        let cfg = server_config(cert.clone(), None).expect("config");
        assert_eq!(served(cfg.clone(), &ca).await, first);
        let second = issue(&ca, dir.path());
        assert_ne!(first, second);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if served(cfg.clone(), &ca).await == second {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the renewed certificate was never served"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A broken file keeps the current certificate serving. Once the check interval has
        // passed, `current` reads the files before it answers, so the failed reload has happened
        // by the time it returns.
        std::fs::write(dir.path().join("tls.crt"), "not a certificate").expect("write");
        tokio::time::sleep(CHECK_EVERY + Duration::from_millis(50)).await;
        let now = cert.current().expect("a certificate");
        assert_eq!(now.cert[0].to_vec(), second);
        assert_eq!(served(cfg, &ca).await, second);
    }

    /// A client certificate signed by `ca`.
    fn client_cert(ca: &Ca) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = p.signed_by(&key, &ca.issuer).expect("cert");
        let der = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).expect("key");
        (cert.der().clone(), der)
    }

    /// Whether the server accepted a handshake from a client that presents `auth`, if any.
    async fn server_accepts(
        server: Arc<rustls::ServerConfig>,
        ca: &Ca,
        auth: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>,
    ) -> bool {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
            roots.add(c.expect("ca pem")).expect("root");
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
        let client = match auth {
            Some((cert, key)) => builder
                .with_client_auth_cert(vec![cert], key)
                .expect("client auth"),
            None => builder.with_no_client_auth(),
        };
        let (a, b) = tokio::io::duplex(64 * 1024);
        let accept = tokio::spawn(async move { TlsAcceptor::from(server).accept(b).await });
        let name = ServerName::try_from("localhost").expect("name");
        // With TLS 1.3 the client may finish before the server has judged its certificate:
        // the server's side of the handshake decides.
        let conn = TlsConnector::from(Arc::new(client)).connect(name, a).await;
        let accepted = accept.await.expect("join").is_ok();
        drop(conn);
        accepted
    }

    #[tokio::test]
    async fn with_a_client_ca_only_clients_it_signed_are_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (serving, callers, strangers) = (ca(), ca(), ca());
        issue(&serving, dir.path());
        std::fs::write(dir.path().join("client-ca.crt"), &callers.pem).expect("write");
        let cert = Arc::new(
            ReloadingCert::new(dir.path().join("tls.crt"), dir.path().join("tls.key"))
                .expect("loads"),
        );
        let open = server_config(cert.clone(), None).expect("config");
        assert!(server_accepts(open.clone(), &serving, None).await);
        assert!(server_accepts(open, &serving, Some(client_cert(&strangers))).await);
        let strict = server_config(cert, Some(&dir.path().join("client-ca.crt"))).expect("config");
        assert!(
            !server_accepts(strict.clone(), &serving, None).await,
            "a caller without a client certificate was served"
        );
        assert!(
            !server_accepts(strict.clone(), &serving, Some(client_cert(&strangers))).await,
            "a caller with a certificate of another CA was served"
        );
        assert!(server_accepts(strict, &serving, Some(client_cert(&callers))).await);
    }

    /// Writes `pem` to `path` as the kubelet swaps a mounted file: a new file renamed over it.
    fn swap(path: &Path, pem: &str) {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, pem).expect("write");
        std::fs::rename(&tmp, path).expect("rename");
    }

    #[tokio::test]
    async fn a_rotated_client_ca_is_used_without_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (serving, old, new) = (ca(), ca(), ca());
        issue(&serving, dir.path());
        let ca_file = dir.path().join("client-ca.crt");
        swap(&ca_file, &old.pem);
        let cert = Arc::new(
            ReloadingCert::new(dir.path().join("tls.crt"), dir.path().join("tls.key"))
                .expect("loads"),
        );
        let cfg = server_config(cert, Some(&ca_file)).expect("config");
        assert!(server_accepts(cfg.clone(), &serving, Some(client_cert(&old))).await);
        assert!(!server_accepts(cfg.clone(), &serving, Some(client_cert(&new))).await);
        swap(&ca_file, &new.pem);
        let deadline = Instant::now() + CHECK_EVERY + Duration::from_secs(5);
        while !server_accepts(cfg.clone(), &serving, Some(client_cert(&new))).await {
            assert!(
                Instant::now() < deadline,
                "a client of the rotated CA was never served"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            !server_accepts(cfg.clone(), &serving, Some(client_cert(&old))).await,
            "a client of the old CA was still served"
        );
        // A broken file keeps the CA in force (checked once the interval has passed).
        swap(&ca_file, "not a certificate");
        tokio::time::sleep(CHECK_EVERY + Duration::from_millis(50)).await;
        assert!(server_accepts(cfg.clone(), &serving, Some(client_cert(&new))).await);
        assert!(!server_accepts(cfg, &serving, Some(client_cert(&old))).await);
    }

    #[test]
    fn a_client_ca_file_without_a_certificate_is_an_error_at_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = ca();
        issue(&ca, dir.path());
        let cert = Arc::new(
            ReloadingCert::new(dir.path().join("tls.crt"), dir.path().join("tls.key"))
                .expect("loads"),
        );
        let bad = dir.path().join("client-ca.crt");
        std::fs::write(&bad, "not a certificate").expect("write");
        let err = server_config(cert.clone(), Some(&bad)).expect_err("refused");
        assert!(matches!(err, TlsError::NoClientCa { .. }), "{err}");
        let missing = dir.path().join("absent.crt");
        assert!(matches!(
            server_config(cert, Some(&missing)),
            Err(TlsError::Read { .. })
        ));
    }

    #[test]
    fn missing_or_invalid_files_are_errors_at_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (c, k) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        assert!(matches!(
            ReloadingCert::new(c.clone(), k.clone()),
            Err(TlsError::Read { .. })
        ));
        std::fs::write(&c, "x").expect("write");
        std::fs::write(&k, "y").expect("write");
        assert!(matches!(
            ReloadingCert::new(c, k),
            Err(TlsError::NoCertificate { .. })
        ));
    }
}
