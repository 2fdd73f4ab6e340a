//! The flags the client verbs share: how to reach the agent (address,
//! token, namespace, region, each with its environment fallback), the
//! views (`-json`, `-verbose`) and `-t` templates. Apart from the verb
//! dispatch in `cli/mod.rs` so that the verbs, which it dispatches to,
//! need nothing of it.

use super::output;
use anyhow::bail;
use clap::Args;
use herder_api_client::{ApiClient, ApiError, ClientConfig};

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
}

impl ApiFlags {
    /// A client for the agent these flags and the environment name.
    pub fn client(&self) -> Result<ApiClient, ApiError> {
        self.client_with_env(|key| std::env::var(key).ok())
    }

    /// As [`ApiFlags::client`], looking variables up with `env`.
    pub fn client_with_env(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ApiClient, ApiError> {
        let pick = |flag: &Option<String>, ours: &str, nomads: &str| {
            flag.clone()
                .or_else(|| env(ours).filter(|v| !v.is_empty()))
                .or_else(|| env(nomads).filter(|v| !v.is_empty()))
        };
        let namespace = pick(&self.namespace, "HERDER_NAMESPACE", "NOMAD_NAMESPACE");
        let region = pick(&self.region, "HERDER_REGION", "NOMAD_REGION");
        let config = ClientConfig::resolve(self.address.as_deref(), self.token.as_deref(), &env);
        Ok(ApiClient::new(config)?.with_scope(namespace, region))
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
