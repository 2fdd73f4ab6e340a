//! TLS for every connection herder accepts or makes: the one place that
//! reads the PEM files and turns them into rustls configurations.
//!
//! The listeners (the HTTP API, the servers' RPC port) take a
//! [`server_config`]; every outgoing client (the servers' signed RPC
//! client, the client agent's link to the servers, the CLI and the API
//! client, forwarding between agents) takes a [`client_config`] and hands
//! it to ureq. Both follow Nomad's conventions (`helper/tlsutil`): one CA
//! signs every agent's certificate; a server's carries
//! `server.<region>.nomad`, a client's `client.<region>.nomad`
//! ([`Role::dns_name`]); with `verify_server_hostname` a peer is checked
//! for that name instead of the address it was dialled at, so a client's
//! certificate is never taken for a server's.
//!
//! Errors name the file and what is wrong with it, never the bytes of a
//! key.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::ResolvesClientCert;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};

pub use rustls::{ClientConfig, ServerConfig};

/// The files a TLS configuration is made of; `None` is not given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA certificate(s) peers must be signed by.
    pub ca_file: Option<PathBuf>,
    /// This side's certificate chain, presented to peers.
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert_file`.
    pub key_file: Option<PathBuf>,
}

/// Why TLS could not be set up. Messages name the configuration key and
/// the file, never a key's bytes.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{key} is required: {why}")]
    Missing {
        key: &'static str,
        why: &'static str,
    },
    #[error("{key} {path}: cannot read it: {source}")]
    Read {
        key: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{key} {path}: {what}")]
    Invalid {
        key: &'static str,
        path: PathBuf,
        what: String,
    },
    #[error("TLS setup: {0}")]
    Rustls(String),
}

/// An agent's part in Nomad's certificate naming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
    Cli,
}

impl Role {
    /// Its lower-case name, as in file and DNS names.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
            Role::Cli => "cli",
        }
    }

    /// The name its certificates carry in `region`: `server.global.nomad`.
    pub fn dns_name(self, region: &str) -> String {
        format!("{}.{region}.nomad", self.as_str())
    }
}

/// Which server certificate an outgoing connection accepts (every one
/// must be signed by the CA).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerName {
    /// Valid for the host of the URL dialled (the CLI's and an HTTPS
    /// client's ordinary check).
    UrlHost,
    /// Valid for `<role>.<region>.nomad`, whatever address was dialled
    /// (`verify_server_hostname`).
    Role(Role, String),
    /// Any certificate the CA signed (Nomad's RPC without
    /// `verify_server_hostname`).
    ChainOnly,
}

/// Which client certificates a listener asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// None: any client may connect (the HTTP API without
    /// `verify_https_client`).
    None,
    /// A certificate signed by the CA, required.
    FromCa,
    /// A certificate signed by the CA and valid for `<role>.<region>.nomad`,
    /// required (the RPC port with `verify_server_hostname`: servers only).
    Role(Role, String),
}

/// The one crypto provider herder uses (ring, as ureq's rustls).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A listener's configuration: this side's certificate and key, and the
/// client certificates asked for.
pub fn server_config(files: &TlsFiles, auth: &ClientAuth) -> Result<Arc<ServerConfig>, TlsError> {
    let identity = Identity::of(files)?.ok_or(TlsError::Missing {
        key: "tls.cert_file and tls.key_file",
        why: "a TLS listener presents a certificate",
    })?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::FromCa | ClientAuth::Role(..) => {
            let roots = Arc::new(roots(files)?);
            let inner = WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| TlsError::Rustls(e.to_string()))?;
            let verifier: Arc<dyn ClientCertVerifier> = match auth {
                ClientAuth::Role(role, region) => Arc::new(NamedClientVerifier {
                    inner,
                    name: owned_name(&role.dns_name(region))?,
                }),
                _ => inner,
            };
            builder.with_client_cert_verifier(verifier)
        }
    };
    Ok(Arc::new(builder.with_cert_resolver(identity)))
}

/// An outgoing connection's configuration: the CA it trusts, the server
/// certificate it accepts, and this side's certificate when one is given
/// (presented when the server asks).
pub fn client_config(files: &TlsFiles, peer: &PeerName) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = Arc::new(roots(files)?);
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let inner = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match peer {
        PeerName::UrlHost => builder.with_webpki_verifier(inner),
        PeerName::Role(role, region) => {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NamedServerVerifier {
                    inner,
                    roots,
                    name: Some(owned_name(&role.dns_name(region))?),
                }))
        }
        PeerName::ChainOnly => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NamedServerVerifier {
                inner,
                roots,
                name: None,
            })),
    };
    let config = match Identity::of(files)? {
        Some(identity) => builder.with_client_cert_resolver(identity),
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// Checks that every given file reads and parses (and that the key is the
/// certificate's): the agent's startup check.
pub fn check_files(files: &TlsFiles) -> Result<(), TlsError> {
    if files.ca_file.is_some() {
        roots(files)?;
    }
    if files.cert_file.is_some() || files.key_file.is_some() {
        server_config(files, &ClientAuth::None)?;
    }
    Ok(())
}

fn owned_name(name: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(name.to_string())
        .map_err(|e| TlsError::Rustls(format!("{name:?} is not a DNS name: {e}")))
}

/// The CA certificates of `ca_file`.
fn roots(files: &TlsFiles) -> Result<RootCertStore, TlsError> {
    let path = files.ca_file.as_deref().ok_or(TlsError::Missing {
        key: "tls.ca_file",
        why: "peers' certificates are checked against the CA",
    })?;
    let mut store = RootCertStore::empty();
    for cert in certificates("tls.ca_file", path)? {
        store.add(cert).map_err(|e| TlsError::Invalid {
            key: "tls.ca_file",
            path: path.to_path_buf(),
            what: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(store)
}

/// This side's certificate and key, presented by every listener and
/// client made from the same files, and read again from them by
/// [`reload_identities`] (SIGHUP): a renewed certificate is presented to
/// the next connection without a restart. The CA is not reloaded (a new
/// CA is a new cluster; restart for it).
#[derive(Debug)]
struct Identity {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

/// Every identity in use, so that a reload reaches them all; dead ones
/// are dropped as new ones are made.
static IDENTITIES: Mutex<Vec<Weak<Identity>>> = Mutex::new(Vec::new());

impl Identity {
    /// The identity of `files`' certificate and key, when both are given
    /// (shared with whoever uses the same files).
    fn of(files: &TlsFiles) -> Result<Option<Arc<Identity>>, TlsError> {
        let (cert, key) = match (&files.cert_file, &files.key_file) {
            (None, None) => return Ok(None),
            (Some(_), None) => {
                return Err(TlsError::Missing {
                    key: "tls.key_file",
                    why: "tls.cert_file is given",
                })
            }
            (None, Some(_)) => {
                return Err(TlsError::Missing {
                    key: "tls.cert_file",
                    why: "tls.key_file is given",
                })
            }
            (Some(cert), Some(key)) => (cert, key),
        };
        let certified = Arc::new(read_identity(cert, key)?);
        let mut all = IDENTITIES.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        let same = all
            .iter()
            .filter_map(Weak::upgrade)
            .find(|i| &i.cert == cert && &i.key == key);
        if let Some(identity) = same {
            return Ok(Some(identity));
        }
        let identity = Arc::new(Identity {
            cert: cert.clone(),
            key: key.clone(),
            current: RwLock::new(certified),
        });
        all.push(Arc::downgrade(&identity));
        Ok(Some(identity))
    }

    fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn reload(&self) -> Result<(), TlsError> {
        let fresh = Arc::new(read_identity(&self.cert, &self.key)?);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }
}

impl ResolvesServerCert for Identity {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for Identity {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Reads a certificate chain and its key, checking that they go together.
fn read_identity(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = certificates("tls.cert_file", cert)?;
    let der = private_key(key)?;
    CertifiedKey::from_der(chain, der, &provider()).map_err(|e| TlsError::Invalid {
        key: "tls.key_file",
        path: key.to_path_buf(),
        what: format!("does not go with tls.cert_file: {e}"),
    })
}

/// Reads every identity in use again from its files (SIGHUP). Each
/// answer names the certificate file and whether it was taken; one that
/// no longer reads (or whose key does not go with it) is refused and the
/// one in use kept.
pub fn reload_identities() -> Vec<(PathBuf, Result<(), TlsError>)> {
    let live: Vec<Arc<Identity>> = IDENTITIES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    live.iter().map(|i| (i.cert.clone(), i.reload())).collect()
}

/// Every certificate of a PEM file; at least one.
fn certificates(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let text = std::fs::read(path).map_err(|source| TlsError::Read {
        key,
        path: path.to_path_buf(),
        source,
    })?;
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&text).collect();
    let invalid = |what: String| TlsError::Invalid {
        key,
        path: path.to_path_buf(),
        what,
    };
    match certs {
        Err(e) => Err(invalid(format!("not a PEM certificate file: {e}"))),
        Ok(certs) if certs.is_empty() => Err(invalid("holds no PEM certificate".into())),
        Ok(certs) => Ok(certs),
    }
}

/// The private key of a PEM file. Its parse error is not repeated: it
/// could quote the file.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let text = std::fs::read(path).map_err(|source| TlsError::Read {
        key: "tls.key_file",
        path: path.to_path_buf(),
        source,
    })?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|_| TlsError::Invalid {
        key: "tls.key_file",
        path: path.to_path_buf(),
        what: "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)".into(),
    })
}

/// A server certificate check against the CA, and against a fixed name
/// instead of the dialled address (`name: None`: the CA's signature only).
#[derive(Debug)]
struct NamedServerVerifier {
    inner: Arc<WebPkiServerVerifier>,
    roots: Arc<RootCertStore>,
    name: Option<ServerName<'static>>,
}

impl ServerCertVerifier for NamedServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _dialled: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.name {
            Some(name) => {
                self.inner
                    .verify_server_cert(end_entity, intermediates, name, ocsp_response, now)
            }
            None => {
                let cert = ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_cert_signed_by_trust_anchor(
                    &cert,
                    &self.roots,
                    intermediates,
                    now,
                    provider().signature_verification_algorithms.all,
                )?;
                Ok(ServerCertVerified::assertion())
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A required client certificate signed by the CA and valid for `name`
/// (a server's, on the RPC port).
#[derive(Debug)]
struct NamedClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    name: ServerName<'static>,
}

impl ClientCertVerifier for NamedClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&cert, &self.name)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The rustls configurations an agent's `[tls]` asks for, each `None`
/// when that port is plain.
impl crate::config::TlsConfig {
    /// The HTTP API's listener: client certificates from the CA required
    /// with `verify_https_client`.
    pub fn http_listener(&self) -> Result<Option<Arc<ServerConfig>>, TlsError> {
        if !self.http {
            return Ok(None);
        }
        let auth = if self.verify_https_client {
            ClientAuth::FromCa
        } else {
            ClientAuth::None
        };
        server_config(&self.files(), &auth).map(Some)
    }

    /// The RPC port's listener: always mTLS; with `verify_server_hostname`
    /// only servers' certificates (`server.<region>.nomad`).
    pub fn rpc_listener(&self, region: &str) -> Result<Option<Arc<ServerConfig>>, TlsError> {
        if !self.rpc {
            return Ok(None);
        }
        let auth = if self.verify_server_hostname {
            ClientAuth::Role(Role::Server, region.to_string())
        } else {
            ClientAuth::FromCa
        };
        server_config(&self.files(), &auth).map(Some)
    }

    /// A server's client of the other servers' RPC ports.
    pub fn rpc_client(&self, region: &str) -> Result<Option<Arc<ClientConfig>>, TlsError> {
        if !self.rpc {
            return Ok(None);
        }
        client_config(&self.files(), &self.server_peer(region)).map(Some)
    }

    /// A client agent's client of the servers' HTTP API (the node
    /// protocol): a server's certificate, this agent's presented.
    pub fn servers_client(&self, region: &str) -> Result<Option<Arc<ClientConfig>>, TlsError> {
        if !self.http {
            return Ok(None);
        }
        client_config(&self.files(), &self.server_peer(region)).map(Some)
    }

    /// An agent's client of another agent's HTTP API (forwarding to a
    /// node's agent or another region), which may be a server or a
    /// client: any certificate the CA signed.
    pub fn agents_client(&self) -> Result<Option<Arc<ClientConfig>>, TlsError> {
        if !self.http {
            return Ok(None);
        }
        client_config(&self.files(), &PeerName::ChainOnly).map(Some)
    }

    fn server_peer(&self, region: &str) -> PeerName {
        if self.verify_server_hostname {
            PeerName::Role(Role::Server, region.to_string())
        } else {
            PeerName::ChainOnly
        }
    }
}
