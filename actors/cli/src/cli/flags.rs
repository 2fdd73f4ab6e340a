//! The flags the client verbs share: how to reach the agent (address,
//! token, namespace, region, the TLS files of an HTTPS agent: each with
//! its environment fallback, Nomad's names included), the
//! views (`-json`, `-verbose`) and `-t` templates. Apart from the verb
//! dispatch in `cli/mod.rs` so that the verbs, which it dispatches to,
//! need nothing of it.

use super::output;
use anyhow::bail;
use clap::Args;
use herder_api_client::{ApiClient, ClientConfig};
use herder_common::tls::{client_config, PeerName, TlsFiles};
use std::path::PathBuf;

/// How a client verb reaches the agent; accepted after any verb word.
#[derive(Clone, Debug, Default, Args)]
pub struct ApiFlags {
    /// The agent's HTTP address [default: $HERDER_ADDR, $NOMAD_ADDR,
    /// http://127.0.0.1:4646].
    #[arg(long = "address", value_name = "ADDR", global = true)]
    pub address: Option<String>,
    /// ACL token sent as X-Nomad-Token [default: $HERDER_TOKEN, $NOMAD_TOKEN].
    #[arg(long = "token", value_name = "TOKEN", global = true)]
    pub token: Option<String>,
    /// The namespace of jobs and their objects [default: $HERDER_NAMESPACE,
    /// $NOMAD_NAMESPACE, default]; `*` lists every namespace.
    #[arg(long = "namespace", value_name = "NAMESPACE", global = true)]
    pub namespace: Option<String>,
    /// The region to ask [default: $HERDER_REGION, $NOMAD_REGION, the
    /// agent's].
    #[arg(long = "region", value_name = "REGION", global = true)]
    pub region: Option<String>,
    /// The CA certificate (PEM) the agent's HTTPS certificate is checked
    /// against [default: $HERDER_CACERT, $NOMAD_CACERT].
    #[arg(long = "ca-cert", value_name = "FILE", global = true)]
    pub ca_cert: Option<String>,
    /// The certificate (PEM) presented to an agent that asks for one
    /// (`verify_https_client`) [default: $HERDER_CLIENT_CERT, $NOMAD_CLIENT_CERT].
    #[arg(long = "client-cert", value_name = "FILE", global = true)]
    pub client_cert: Option<String>,
    /// The key of -client-cert [default: $HERDER_CLIENT_KEY, $NOMAD_CLIENT_KEY].
    #[arg(long = "client-key", value_name = "FILE", global = true)]
    pub client_key: Option<String>,
}

impl ApiFlags {
    /// A client for the agent these flags and the environment name.
    pub fn client(&self) -> anyhow::Result<ApiClient> {
        self.client_with_env(|key| std::env::var(key).ok())
    }

    /// As [`ApiFlags::client`], looking variables up with `env`.
    pub fn client_with_env(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<ApiClient> {
        let pick = |flag: &Option<String>, ours: &str, nomads: &str| {
            flag.clone()
                .or_else(|| env(ours).filter(|v| !v.is_empty()))
                .or_else(|| env(nomads).filter(|v| !v.is_empty()))
        };
        let namespace = pick(&self.namespace, "HERDER_NAMESPACE", "NOMAD_NAMESPACE");
        let region = pick(&self.region, "HERDER_REGION", "NOMAD_REGION");
        let config = ClientConfig::resolve(self.address.as_deref(), self.token.as_deref(), &env);
        let files = TlsFiles {
            ca_file: pick(&self.ca_cert, "HERDER_CACERT", "NOMAD_CACERT").map(PathBuf::from),
            cert_file: pick(&self.client_cert, "HERDER_CLIENT_CERT", "NOMAD_CLIENT_CERT")
                .map(PathBuf::from),
            key_file: pick(&self.client_key, "HERDER_CLIENT_KEY", "NOMAD_CLIENT_KEY")
                .map(PathBuf::from),
        };
        let client = ApiClient::new(config)?.with_scope(namespace, region);
        if files == TlsFiles::default() {
            return Ok(client);
        }
        let tls = client_config(&files, &PeerName::UrlHost).map_err(|e| {
            anyhow::anyhow!(
                "TLS (-ca-cert, -client-cert, -client-key or NOMAD_CACERT, \
                 NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY): {e}"
            )
        })?;
        Ok(client.with_tls(tls))
    }
}

/// Output switches most read verbs share.
#[derive(Clone, Debug, Default, Args)]
pub struct ViewFlags {
    /// Print the API's raw JSON answer instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Full IDs and every event instead of short forms.
    #[arg(long)]
    pub verbose: bool,
}

/// `-t`: a Go template for the answer. herder renders the simple subset
/// (text and `{{.Field}}` / `{{.A.B}}` / `{{.}}` actions); anything else is
/// refused with a message saying so.
#[derive(Clone, Debug, Default, Args)]
pub struct TemplateFlag {
    /// Format the answer with a Go template (the `{{.Field}}` subset).
    #[arg(short = 't', value_name = "TEMPLATE")]
    pub template: Option<String>,
}

impl TemplateFlag {
    /// Renders `value` with the template, if one was given; refuses it
    /// together with `-json`, as Nomad does.
    pub fn render(&self, json: bool, value: &serde_json::Value) -> anyhow::Result<Option<String>> {
        let Some(template) = &self.template else {
            return Ok(None);
        };
        if json {
            bail!("Both json and template formatting are not allowed");
        }
        output::go_template(template, value).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nomads_tls_variables_are_read_and_a_missing_file_is_named() {
        let env = |key: &str| match key {
            "NOMAD_ADDR" => Some("https://127.0.0.1:4646".to_string()),
            "NOMAD_CACERT" => Some("/nonexistent/ca.pem".to_string()),
            _ => None,
        };
        let err = ApiFlags::default()
            .client_with_env(env)
            .expect_err("the CA file does not exist");
        let text = err.to_string();
        assert!(
            text.contains("NOMAD_CACERT") && text.contains("/nonexistent/ca.pem"),
            "{text}"
        );
        let flag_wins = ApiFlags {
            ca_cert: Some("/nonexistent/flag.pem".into()),
            ..ApiFlags::default()
        }
        .client_with_env(env)
        .expect_err("the flag's file does not exist either");
        assert!(flag_wins.to_string().contains("flag.pem"), "{flag_wins}");
        let plain = ApiFlags::default()
            .client_with_env(|k| (k == "NOMAD_ADDR").then(|| "https://h:1".to_string()))
            .expect("no TLS files: the public roots");
        assert_eq!(plain.address(), "https://h:1");
    }
}
