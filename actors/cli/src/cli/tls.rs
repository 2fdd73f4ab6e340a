//! `herder tls ca create` and `herder tls cert create -server|-client|-cli`:
//! a development CA and the agents' certificates, named and shaped as
//! Nomad's `tls` command makes them (`nomad-agent-ca.pem`,
//! `<region>-server-nomad.pem`, `server.<region>.nomad` with `localhost`
//! and 127.0.0.1), written to the current directory. Existing files are
//! never overwritten; keys are written readable by their owner only.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use herder_common::tls::Role;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Nomad's file names for the CA.
pub const CA_FILE: &str = "nomad-agent-ca.pem";
pub const CA_KEY_FILE: &str = "nomad-agent-ca-key.pem";

#[derive(Debug, Args)]
pub struct TlsArgs {
    #[command(subcommand)]
    pub command: TlsCommand,
}

#[derive(Debug, Subcommand)]
pub enum TlsCommand {
    /// The certificate authority.
    #[command(subcommand)]
    Ca(CaCommand),
    /// Agents' and the CLI's certificates.
    #[command(subcommand)]
    Cert(CertCommand),
}

#[derive(Debug, Subcommand)]
pub enum CaCommand {
    /// Create a CA: nomad-agent-ca.pem and nomad-agent-ca-key.pem.
    Create(CaCreateArgs),
}

#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Create a certificate signed by the CA: <region>-<role>-<domain>.pem
    /// and its -key.pem.
    Create(CertCreateArgs),
}

#[derive(Debug, Clone, Args)]
pub struct CaCreateArgs {
    /// Days the CA is valid for.
    #[arg(long, default_value_t = 1825)]
    pub days: u32,
    /// The domain of the agents' names (`server.<region>.<domain>`).
    #[arg(long, default_value = "nomad")]
    pub domain: String,
    /// The CA's common name [default: Nomad Agent CA <serial>].
    #[arg(long = "common-name")]
    pub common_name: Option<String>,
}

#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("role").required(true).args(["server", "client", "cli"])))]
pub struct CertCreateArgs {
    /// A server's certificate (`server.<region>.<domain>`).
    #[arg(long)]
    pub server: bool,
    /// A client agent's certificate (`client.<region>.<domain>`).
    #[arg(long)]
    pub client: bool,
    /// The command line's certificate (`cli.<region>.<domain>`).
    #[arg(long)]
    pub cli: bool,
    #[arg(long, default_value = "global")]
    pub region: String,
    #[arg(long, default_value = "nomad")]
    pub domain: String,
    /// Days the certificate is valid for.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
    /// The CA certificate.
    #[arg(long, default_value = CA_FILE)]
    pub ca: PathBuf,
    /// The CA's key.
    #[arg(long, default_value = CA_KEY_FILE)]
    pub key: PathBuf,
    /// Another DNS name in the certificate (repeatable); `localhost` is
    /// always there.
    #[arg(long = "additional-dnsname")]
    pub additional_dnsname: Vec<String>,
    /// Another IP address in the certificate (repeatable); a server's and a
    /// client's always hold 127.0.0.1.
    #[arg(long = "additional-ipaddress")]
    pub additional_ipaddress: Vec<IpAddr>,
}

impl CertCreateArgs {
    fn role(&self) -> Role {
        match (self.server, self.client) {
            (true, _) => Role::Server,
            (_, true) => Role::Client,
            _ => Role::Cli,
        }
    }
}

/// A certificate and its key, both PEM.
pub struct Pem {
    pub cert: String,
    pub key: String,
}

pub fn run(args: TlsArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let dir = std::env::current_dir().context("the current directory")?;
    match args.command {
        TlsCommand::Ca(CaCommand::Create(args)) => {
            let pem = create_ca(&args)?;
            save(&dir, CA_FILE, CA_KEY_FILE, &pem, out)?;
        }
        TlsCommand::Cert(CertCommand::Create(args)) => {
            let read = |p: &Path| {
                std::fs::read_to_string(dir.join(p))
                    .with_context(|| format!("reading {}", p.display()))
            };
            let ca = Pem {
                cert: read(&args.ca)?,
                key: read(&args.key)?,
            };
            writeln!(
                out,
                "==> Using {} and {}",
                args.ca.display(),
                args.key.display()
            )?;
            let pem = create_cert(&args, &ca)?;
            let base = format!("{}-{}-{}", args.region, args.role().as_str(), args.domain);
            save(
                &dir,
                &format!("{base}.pem"),
                &format!("{base}-key.pem"),
                &pem,
                out,
            )?;
        }
    }
    Ok(0)
}

/// A self-signed CA certificate and its key.
pub fn create_ca(args: &CaCreateArgs) -> anyhow::Result<Pem> {
    let key = KeyPair::generate().context("generating the CA's key")?;
    let serial = random_serial();
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let name = args.common_name.clone().unwrap_or_else(|| {
        let hex: String = serial.iter().map(|b| format!("{b:02x}")).collect();
        format!("Nomad Agent CA {hex}")
    });
    params.distinguished_name = subject(&name);
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.subject_alt_names = vec![SanType::DnsName(args.domain.clone().try_into()?)];
    set_validity(&mut params, args.days);
    let cert = params.self_signed(&key).context("signing the CA")?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A certificate for `args`' role, signed by `ca`.
pub fn create_cert(args: &CertCreateArgs, ca: &Pem) -> anyhow::Result<Pem> {
    let ca_key = KeyPair::from_pem(&ca.key).context("the CA key is not a PEM private key")?;
    let ca_params = CertificateParams::from_ca_cert_pem(&ca.cert)
        .context("the CA certificate is not a PEM certificate")?;
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .context("the CA key does not sign for the CA certificate")?;
    let role = args.role();
    let name = format!("{}.{}.{}", role.as_str(), args.region, args.domain);
    let mut sans = vec![name.clone(), "localhost".to_string()];
    sans.extend(args.additional_dnsname.iter().cloned());
    let mut params = CertificateParams::new(sans).context("a DNS name")?;
    let mut ips = args.additional_ipaddress.clone();
    if role != Role::Cli {
        ips.insert(0, IpAddr::from([127, 0, 0, 1]));
    }
    params
        .subject_alt_names
        .extend(ips.into_iter().map(SanType::IpAddress));
    params.distinguished_name = subject(&name);
    params.serial_number = Some(SerialNumber::from_slice(&random_serial()));
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = match role {
        Role::Cli => vec![ExtendedKeyUsagePurpose::ClientAuth],
        Role::Server | Role::Client => vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    };
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, args.days);
    let key = KeyPair::generate().context("generating the key")?;
    let cert = params
        .signed_by(&key, &ca_cert, &ca_key)
        .context("signing the certificate")?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

fn subject(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

fn random_serial() -> [u8; 16] {
    let mut serial: [u8; 16] = rand::random();
    // Positive, as DER integers of serials must be.
    serial[0] &= 0x7f;
    serial
}

fn set_validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    // A minute back, so a peer whose clock is slightly behind accepts it.
    params.not_before = now - time::Duration::minutes(1);
    params.not_after = now + time::Duration::days(i64::from(days));
}

/// Writes the certificate and key, refusing to overwrite either.
fn save(dir: &Path, cert: &str, key: &str, pem: &Pem, out: &mut dyn Write) -> anyhow::Result<()> {
    for name in [cert, key] {
        if dir.join(name).exists() {
            bail!("{name} already exists");
        }
    }
    write_new(&dir.join(cert), pem.cert.as_bytes(), 0o644)?;
    writeln!(out, "==> Saved {cert}")?;
    write_new(&dir.join(key), pem.key.as_bytes(), 0o600)?;
    writeln!(out, "==> Saved {key}")?;
    Ok(())
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use herder_common::tls::{client_config, server_config, ClientAuth, PeerName, TlsFiles};

    fn ca() -> Pem {
        create_ca(&CaCreateArgs {
            days: 30,
            domain: "nomad".into(),
            common_name: None,
        })
        .expect("a CA")
    }

    fn cert_args(role: Role) -> CertCreateArgs {
        CertCreateArgs {
            server: role == Role::Server,
            client: role == Role::Client,
            cli: role == Role::Cli,
            region: "global".into(),
            domain: "nomad".into(),
            days: 30,
            ca: CA_FILE.into(),
            key: CA_KEY_FILE.into(),
            additional_dnsname: vec!["herder.example".into()],
            additional_ipaddress: Vec::new(),
        }
    }

    /// Writes a CA and one certificate into `dir`; answers the files.
    fn files(dir: &Path, ca: &Pem, role: Role) -> TlsFiles {
        let pem = create_cert(&cert_args(role), ca).expect("a certificate");
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("written");
            path
        };
        TlsFiles {
            ca_file: Some(write(CA_FILE, &ca.cert)),
            cert_file: Some(write(&format!("{}.pem", role.as_str()), &pem.cert)),
            key_file: Some(write(&format!("{}-key.pem", role.as_str()), &pem.key)),
        }
    }

    /// Completes a TLS handshake in memory between the two configurations.
    fn handshake(
        client: std::sync::Arc<rustls::ClientConfig>,
        server: std::sync::Arc<rustls::ServerConfig>,
        dialled: &str,
    ) -> Result<(), rustls::Error> {
        let name = rustls::pki_types::ServerName::try_from(dialled.to_string()).expect("a name");
        let mut c = rustls::ClientConnection::new(client, name)?;
        let mut s = rustls::ServerConnection::new(server)?;
        for _ in 0..10 {
            let mut buf = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut buf).expect("in memory");
            }
            s.read_tls(&mut buf.as_slice()).expect("in memory");
            s.process_new_packets()?;
            let mut buf = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut buf).expect("in memory");
            }
            c.read_tls(&mut buf.as_slice()).expect("in memory");
            c.process_new_packets()?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(());
            }
        }
        Err(rustls::Error::General("handshake did not finish".into()))
    }

    #[test]
    fn a_servers_certificate_names_its_role_region_localhost_and_loopback() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = ca();
        assert!(ca.cert.starts_with("-----BEGIN CERTIFICATE-----"));
        let server = files(dir.path(), &ca, Role::Server);
        let listener = server_config(&server, &ClientAuth::None).expect("server config");
        for (peer, dialled) in [
            (PeerName::UrlHost, "localhost"),
            (PeerName::UrlHost, "127.0.0.1"),
            (PeerName::UrlHost, "herder.example"),
            (PeerName::Role(Role::Server, "global".into()), "10.9.9.9"),
        ] {
            let client = client_config(&server, &peer).expect("client config");
            handshake(client, listener.clone(), dialled)
                .unwrap_or_else(|e| panic!("{peer:?} dialling {dialled}: {e}"));
        }
        let other_region = client_config(&server, &PeerName::Role(Role::Server, "eu".into()))
            .expect("client config");
        assert!(handshake(other_region, listener.clone(), "localhost").is_err());
        let elsewhere = client_config(&server, &PeerName::UrlHost).expect("client config");
        assert!(handshake(elsewhere, listener, "10.9.9.9").is_err());
    }

    #[test]
    fn a_servers_only_listener_refuses_a_clients_certificate_and_another_cas() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = ca();
        let server = files(dir.path(), &ca, Role::Server);
        let only_servers = server_config(&server, &ClientAuth::Role(Role::Server, "global".into()))
            .expect("server config");
        let peer = PeerName::ChainOnly;
        let as_server = client_config(&server, &peer).expect("config");
        handshake(as_server, only_servers.clone(), "localhost").expect("a server is accepted");

        let client_dir = tempfile::tempdir().expect("tempdir");
        let client = files(client_dir.path(), &ca, Role::Client);
        let as_client = client_config(&client, &peer).expect("config");
        assert!(handshake(as_client.clone(), only_servers, "localhost").is_err());
        let any_from_ca = server_config(&server, &ClientAuth::FromCa).expect("config");
        handshake(as_client, any_from_ca.clone(), "localhost").expect("the CA's client");

        let rogue_dir = tempfile::tempdir().expect("tempdir");
        let mut rogue = files(
            rogue_dir.path(),
            &create_ca(&CaCreateArgs {
                days: 30,
                domain: "nomad".into(),
                common_name: None,
            })
            .expect("another CA"),
            Role::Server,
        );
        rogue.ca_file = server.ca_file.clone();
        let as_rogue = client_config(&rogue, &peer).expect("config");
        assert!(handshake(as_rogue, any_from_ca, "localhost").is_err());
    }

    #[test]
    fn a_cli_certificate_is_for_clients_only_and_files_are_never_overwritten() {
        let ca = ca();
        let pem = create_cert(&cert_args(Role::Cli), &ca).expect("a certificate");
        assert!(pem.key.contains("PRIVATE KEY"));
        let dir = tempfile::tempdir().expect("tempdir");
        let mut out = Vec::new();
        save(dir.path(), "a.pem", "a-key.pem", &pem, &mut out).expect("saved");
        let again = save(dir.path(), "a.pem", "a-key.pem", &pem, &mut out);
        assert!(again.is_err_and(|e| e.to_string().contains("already exists")));
        let mode = std::fs::metadata(dir.path().join("a-key.pem"))
            .expect("key")
            .permissions();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.mode() & 0o777, 0o600);
    }
}
