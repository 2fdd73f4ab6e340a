//! TLS as an operator turns it on: a development CA and certificates made
//! with `herder tls ca create` / `tls cert create`, three real servers
//! with `tls { http, rpc, verify_server_hostname, verify_https_client }`
//! forming a cluster over mutual TLS and replicating a job, a client agent
//! with a client certificate registering over HTTPS, and everything
//! without a certificate of the cluster's CA refused: plain HTTP on the
//! API port, another CA's server or client on the RPC port, a client
//! certificate posing as a server, another CA's client agent. The CLI
//! reads Nomad's `NOMAD_CACERT`/`NOMAD_CLIENT_CERT`/`NOMAD_CLIENT_KEY`.

use herder_common::tls::{client_config, PeerName, TlsFiles};
use herder_tests::cluster::{Cluster, ClusterOptions, SERVERS};
use herder_tests::{herder_bin, wait_for, HerderProcess};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

/// How long the cluster may take to form, a write to replicate, a node to
/// register.
const SETTLE: Duration = Duration::from_secs(60);

/// A directory of certificates made by the `herder tls` verbs.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A CA with a server, a client and a CLI certificate for `global`.
    fn create() -> Pki {
        let dir = tempfile::tempdir().expect("temp dir");
        let pki = Pki { dir };
        pki.herder(&["tls", "ca", "create"]);
        for role in ["-server", "-client", "-cli"] {
            pki.herder(&["tls", "cert", "create", role]);
        }
        pki
    }

    /// Runs `herder <args>` in the directory; it must succeed.
    fn herder(&self, args: &[&str]) -> Output {
        let out = Command::new(herder_bin())
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("run herder");
        assert!(
            out.status.success(),
            "herder {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ca(&self) -> PathBuf {
        self.path("nomad-agent-ca.pem")
    }

    /// The certificate and key of `role` (server, client, cli).
    fn cert(&self, role: &str) -> (PathBuf, PathBuf) {
        (
            self.path(&format!("global-{role}-nomad.pem")),
            self.path(&format!("global-{role}-nomad-key.pem")),
        )
    }

    /// `role`'s certificate, trusting `ca` (this CA's, or another's).
    fn files(&self, role: &str, ca: &Path) -> TlsFiles {
        let (cert, key) = self.cert(role);
        TlsFiles {
            ca_file: Some(ca.to_path_buf()),
            cert_file: Some(cert),
            key_file: Some(key),
        }
    }

    /// An agent's `[tls]` with `role`'s certificate (`ca`: the CA it trusts).
    fn agent_toml(&self, role: &str, ca: &Path) -> String {
        let (cert, key) = self.cert(role);
        format!(
            "[tls]\nhttp = true\nrpc = true\nca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\n\
             verify_server_hostname = true\nverify_https_client = true\n",
            ca.display().to_string(),
            cert.display().to_string(),
            key.display().to_string()
        )
    }
}

/// An HTTPS client presenting `files`' certificate.
fn https_agent(files: &TlsFiles, peer: &PeerName) -> ureq::Agent {
    let tls = client_config(files, peer).expect("TLS client configuration");
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .tls_config(tls)
        .build()
}

/// How a request ended: an HTTP answer (any status), or no answer at all.
fn exchange(request: ureq::Request, body: Option<&Value>) -> Result<(u16, String), String> {
    let sent = match body {
        Some(body) => request.send_json(body.clone()),
        None => request.call(),
    };
    match sent {
        Ok(r) => Ok((r.status(), r.into_string().unwrap_or_default())),
        Err(ureq::Error::Status(code, r)) => Ok((code, r.into_string().unwrap_or_default())),
        Err(e) => Err(e.to_string()),
    }
}

fn https_url(port: u16, path: &str) -> String {
    format!("https://127.0.0.1:{port}{path}")
}

/// The leader every server names over HTTPS, once they agree.
fn agreed_leader(agent: &ureq::Agent, cluster: &Cluster) -> Option<String> {
    let seen: Vec<String> = cluster
        .servers
        .iter()
        .map(|s| {
            let url = https_url(s.http_port, "/v1/status/leader");
            match exchange(agent.get(&url), None) {
                Ok((200, body)) => serde_json::from_str::<String>(&body).unwrap_or_default(),
                _ => String::new(),
            }
        })
        .collect();
    let first = seen.first()?.clone();
    (!first.is_empty() && seen.iter().all(|l| *l == first)).then_some(first)
}

fn mock_job(id: &str) -> Value {
    json!({"Job": {
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": {},
            "Resources": {"CPU": 100, "MemoryMB": 64}
        }]}]
    }})
}

/// Starts a client-only agent named `name` that reaches `server_http` with
/// `pki`'s client certificate, trusting `ca`.
fn start_client(name: &str, pki: &Pki, ca: &Path, server_http: u16) -> HerderProcess {
    let config = pki.path(&format!("{name}.toml"));
    std::fs::write(&config, pki.agent_toml("client", ca)).expect("write the client config");
    let data_dir = pki.path(&format!("{name}-data"));
    let (config, data_dir) = (config.display().to_string(), data_dir.display().to_string());
    let servers = format!("127.0.0.1:{server_http}");
    HerderProcess::spawn(&[
        "agent",
        "-client",
        "-servers",
        &servers,
        "-node",
        name,
        "-bind",
        "127.0.0.1",
        "-http-port",
        "0",
        "-data-dir",
        &data_dir,
        "-config",
        &config,
    ])
}

/// A child process killed when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server with `pki`'s server certificate (trusting `ca`) and the
/// cluster's key, joining the cluster's first server.
fn start_rogue_server(pki: &Pki, ca: &Path, cluster: &Cluster) -> Killed {
    let config = pki.path("rogue-server.toml");
    std::fs::write(&config, pki.agent_toml("server", ca)).expect("write the config");
    let data_dir = pki.path("rogue-server-data");
    let child = Command::new(herder_bin())
        .args(["agent", "-server", "-bootstrap-expect", "3", "-retry-join"])
        .arg(cluster.servers[0].rpc_addr())
        .args(["-rpc-port", "0", "-http-port", "0", "-bind", "127.0.0.1"])
        .args(["-node", "rogue", "-encrypt", cluster.key(), "-data-dir"])
        .arg(&data_dir)
        .arg("-config")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(pki.path("rogue-server.log")).expect("log"))
        .spawn()
        .expect("spawn the rogue server");
    Killed(child)
}

/// The names of the nodes the servers know, with their status.
fn nodes(agent: &ureq::Agent, port: u16) -> Vec<(String, String)> {
    let Ok((200, body)) = exchange(agent.get(&https_url(port, "/v1/nodes")), None) else {
        return Vec::new();
    };
    let list: Vec<Value> = serde_json::from_str(&body).unwrap_or_default();
    list.iter()
        .map(|n| {
            let field = |k: &str| n[k].as_str().unwrap_or_default().to_string();
            (field("Name"), field("Status"))
        })
        .collect()
}

/// `herder job status` over HTTPS with Nomad's environment variables.
fn cli_job_status(port: u16, env: &[(&str, PathBuf)]) -> Output {
    let mut command = Command::new(herder_bin());
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().to_string();
        if name.starts_with("HERDER_") || name.starts_with("NOMAD_") {
            command.env_remove(name);
        }
    }
    command
        .args(["job", "status"])
        .env("NOMAD_ADDR", https_url(port, ""))
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .expect("run herder job status")
}

#[test]
fn an_mtls_cluster_forms_replicates_and_refuses_whoever_lacks_its_certificate() {
    let pki = Pki::create();
    let rogue = Pki::create();
    let mut cluster = Cluster::start(ClusterOptions {
        server_toml: pki.agent_toml("server", &pki.ca()),
        ..ClusterOptions::default()
    });
    let cli = https_agent(&pki.files("cli", &pki.ca()), &PeerName::UrlHost);
    let leader = wait_for(SETTLE, || agreed_leader(&cli, &cluster));
    for i in 0..SERVERS {
        cluster.assert_alive(i);
    }
    assert!(leader.is_some(), "no leader over mTLS: {}", cluster.logs());

    // A job written on one server is read back from every server.
    let ports: Vec<u16> = cluster.servers.iter().map(|s| s.http_port).collect();
    let put = cli.put(&https_url(ports[1], "/v1/jobs"));
    let (code, body) = exchange(put, Some(&mock_job("web"))).expect("register over HTTPS");
    assert_eq!(code, 200, "{body}");
    for port in &ports {
        let read = || match exchange(cli.get(&https_url(*port, "/v1/job/web")), None) {
            Ok((200, _)) => Some(()),
            _ => None,
        };
        assert!(wait_for(SETTLE, read).is_some(), "web not on :{port}");
    }

    // The API port speaks TLS only, and asks for a certificate of the CA.
    let plain = exchange(
        ureq::get(&format!("http://127.0.0.1:{}/v1/jobs", ports[0])),
        None,
    );
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");
    let no_cert = TlsFiles {
        ca_file: Some(pki.ca()),
        ..TlsFiles::default()
    };
    let anonymous = https_agent(&no_cert, &PeerName::UrlHost);
    let refused = exchange(anonymous.get(&https_url(ports[0], "/v1/jobs")), None);
    assert!(
        refused.is_err(),
        "no client certificate answered: {refused:?}"
    );

    // The RPC port: the CA's servers only.
    let rpc_ports: Vec<u16> = cluster.servers.iter().map(|s| s.rpc_port).collect();
    let rpc = |files: TlsFiles| {
        let agent = https_agent(&files, &PeerName::ChainOnly);
        exchange(agent.get(&https_url(rpc_ports[0], "/v1/status")), None)
    };
    let server = rpc(pki.files("server", &pki.ca()));
    assert!(server.is_ok(), "the CA's server refused: {server:?}");
    let as_client = rpc(pki.files("client", &pki.ca()));
    assert!(
        as_client.is_err(),
        "a client certificate passed as a server"
    );
    let other_ca = rpc(rogue.files("server", &pki.ca()));
    assert!(other_ca.is_err(), "another CA's server answered");

    // A server of another CA, with the cluster key, never joins.
    let mut rogue_server = start_rogue_server(&rogue, &pki.ca(), &cluster);
    std::thread::sleep(Duration::from_secs(5));
    let peers = exchange(cli.get(&https_url(ports[0], "/v1/status/peers")), None);
    let peers: Vec<String> = peers
        .ok()
        .and_then(|(_, body)| serde_json::from_str(&body).ok())
        .unwrap_or_default();
    assert_eq!(peers.len(), SERVERS, "the peers: {peers:?}");
    let rogue_log = std::fs::read_to_string(rogue.path("rogue-server.log")).unwrap_or_default();
    assert!(
        matches!(rogue_server.0.try_wait(), Ok(None)),
        "the rogue server did not keep trying: {rogue_log}"
    );

    // Client agents: the CA's registers, another CA's never does.
    let _rogue_client = start_client("c-rogue", &rogue, &pki.ca(), ports[0]);
    let _client = start_client("c-good", &pki, &pki.ca(), ports[0]);
    let ready = || {
        let seen = nodes(&cli, ports[2]);
        seen.iter()
            .any(|(n, s)| n == "c-good" && s == "ready")
            .then_some(seen)
    };
    let seen = wait_for(SETTLE, ready).unwrap_or_else(|| {
        panic!(
            "c-good never registered: {:?}\n{}",
            nodes(&cli, ports[2]),
            cluster.logs()
        )
    });
    std::thread::sleep(Duration::from_secs(3));
    let seen_later = nodes(&cli, ports[2]);
    assert!(
        !seen.iter().chain(&seen_later).any(|(n, _)| n == "c-rogue"),
        "another CA's client registered: {seen_later:?}"
    );

    // The CLI with Nomad's variables lists the job; without its
    // certificate it is refused.
    let (cert, key) = pki.cert("cli");
    let listed = cli_job_status(
        ports[0],
        &[
            ("NOMAD_CACERT", pki.ca()),
            ("NOMAD_CLIENT_CERT", cert),
            ("NOMAD_CLIENT_KEY", key),
        ],
    );
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success() && stdout.contains("web"),
        "job status over HTTPS: {stdout}{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let refused = cli_job_status(ports[0], &[("NOMAD_CACERT", pki.ca())]);
    assert!(
        !refused.status.success(),
        "the CLI without a certificate was answered"
    );
}

#[test]
fn an_agent_whose_key_does_not_read_refuses_to_start_naming_the_file() {
    let pki = Pki::create();
    let broken = pki.path("broken-key.pem");
    std::fs::write(&broken, "not a key").expect("write");
    let toml = pki
        .agent_toml("server", &pki.ca())
        .replace("global-server-nomad-key.pem", "broken-key.pem");
    let config = pki.path("broken.toml");
    std::fs::write(&config, toml).expect("write the config");
    let out = Command::new(herder_bin())
        .args(["agent", "-dev", "-http-port", "0", "-config"])
        .arg(&config)
        .output()
        .expect("run herder agent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with a broken key");
    assert!(
        stderr.contains("tls.key_file") && stderr.contains("broken-key.pem"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("not a key"),
        "the key's bytes were printed"
    );
}

/// Accepts any server certificate: the test reads which one was presented.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The certificate the HTTPS listener at `addr` presents to a new
/// connection (DER).
fn presented_certificate(addr: std::net::SocketAddr) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("a connection");
    let mut tcp = std::net::TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).expect("the handshake");
    }
    let chain = conn.peer_certificates().expect("a certificate");
    chain.first().expect("the end entity").as_ref().to_vec()
}

#[test]
fn sighup_presents_a_renewed_certificate_and_keeps_it_when_the_next_is_broken() {
    let pki = Pki::create();
    let (cert, key) = pki.cert("server");
    let config = pki.path("https.toml");
    let toml = format!(
        "[tls]\nhttp = true\nca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\n",
        pki.ca().display().to_string(),
        cert.display().to_string(),
        key.display().to_string()
    );
    std::fs::write(&config, toml).expect("write the config");
    let config = config.display().to_string();
    let agent = HerderProcess::spawn(&["agent", "-dev", "-http-port", "0", "-config", &config]);
    let first = presented_certificate(agent.addr);

    // A renewed certificate from the same CA, written over the files in use.
    let renew = pki.path("renew");
    std::fs::create_dir(&renew).expect("mkdir");
    for f in ["nomad-agent-ca.pem", "nomad-agent-ca-key.pem"] {
        std::fs::copy(pki.path(f), renew.join(f)).expect("copy the CA");
    }
    let made = Command::new(herder_bin())
        .args(["tls", "cert", "create", "-server"])
        .current_dir(&renew)
        .output()
        .expect("run herder tls");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    std::fs::copy(renew.join("global-server-nomad.pem"), &cert).expect("new cert");
    std::fs::copy(renew.join("global-server-nomad-key.pem"), &key).expect("new key");
    assert_eq!(
        presented_certificate(agent.addr),
        first,
        "changed before SIGHUP"
    );

    let pid = agent.child.id() as i32;
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    let renewed = wait_for(Duration::from_secs(20), || {
        let now = presented_certificate(agent.addr);
        (now != first).then_some(now)
    })
    .expect("the renewed certificate presented after SIGHUP");

    // A key that does not go with the certificate is refused on reload;
    // the renewed pair stays in use.
    std::fs::copy(pki.cert("client").1, &key).expect("a mismatched key");
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(presented_certificate(agent.addr), renewed);
    let (code, _) = exchange(
        https_agent(&pki.files("cli", &pki.ca()), &PeerName::ChainOnly)
            .get(&format!("https://{}/v1/agent/health", agent.addr)),
        None,
    )
    .expect("still serving");
    assert_eq!(code, 200);
}
