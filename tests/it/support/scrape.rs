//! Scraping the operator's HTTPS `/metrics` as Prometheus does: TLS without verifying the
//! operator's self-signed certificate (`insecureSkipVerify`), a ServiceAccount's bearer token
//! (`kubectl create token`), and a ClusterRoleBinding of it to the shipped reader role.
#![allow(dead_code)]

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{DigitallySignedStruct, SignatureScheme};

use super::{kubectl, unique};

/// Accepts any server certificate (the scraper's `insecureSkipVerify`); signatures are still
/// checked, so the handshake is real TLS.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `GET path` over HTTPS with an optional bearer token: (status, body).
pub async fn https_get(addr: &str, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let name = ServerName::try_from("hap-operator-metrics").ok()?;
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .ok()?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!("GET {path} HTTP/1.0\r\nHost: hap\r\n{auth}\r\n");
    tls.write_all(head.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|x| x.1.to_string())?;
    Some((status, body))
}

/// A ServiceAccount in `ns` (created) and its token; with `role`, a ClusterRoleBinding of it to
/// that ClusterRole, deleted when the returned guard drops.
pub fn scraper(ns: &str, role: Option<&str>) -> (String, Option<Binding>) {
    let sa = unique("scraper");
    let (ok, _, err) = kubectl(&["create", "serviceaccount", &sa, "-n", ns]);
    assert!(ok, "create serviceaccount {sa}: {err}");
    let binding = role.map(|role| {
        let name = unique("metrics-reader");
        let (ok, _, err) = kubectl(&[
            "create",
            "clusterrolebinding",
            &name,
            &format!("--clusterrole={role}"),
            &format!("--serviceaccount={ns}:{sa}"),
        ]);
        assert!(ok, "bind {sa} to {role}: {err}");
        Binding(name)
    });
    let (ok, token, err) = kubectl(&["create", "token", &sa, "-n", ns, "--duration=1h"]);
    assert!(ok, "kubectl create token {sa}: {err}");
    (token.trim().to_string(), binding)
}

/// A ClusterRoleBinding a test made; deleted on drop.
pub struct Binding(pub String);

impl Drop for Binding {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "clusterrolebinding",
            &self.0,
            "--ignore-not-found",
            "--wait=false",
        ]);
    }
}

/// `POST path` of a JSON body over HTTPS (any server certificate): the status code. The way a
/// forged AdmissionReview reaches the webhook from a client that is not kube-apiserver.
pub async fn https_post(addr: &str, path: &str, body: &str) -> Option<u16> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let name = ServerName::try_from("hap-operator-webhook").ok()?;
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .ok()?;
    let head = format!(
        "POST {path} HTTP/1.0\r\nHost: hap\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.ok()?;
    tls.write_all(body.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw).await;
    String::from_utf8_lossy(&raw)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
