//! The webhook's serving certificate, read from PEM files and read again when they change (a
//! mounted Secret is swapped atomically by the kubelet; cert-manager renews it), so a renewal
//! never needs a restart. A file that cannot be read or parsed keeps the previous certificate
//! serving and is logged; at start it is an error: the webhook serves TLS only.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;

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
}

/// The stamp of a file: modification time and length.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(p: &Path) -> Stamp {
    let m = std::fs::metadata(p).ok()?;
    Some((m.modified().ok()?, m.len()))
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

/// The server configuration: TLS 1.2 and 1.3 with ring, HTTP/1.1, no client certificates.
pub fn server_config(cert: Arc<ReloadingCert>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}
