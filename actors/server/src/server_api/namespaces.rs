//! Namespaces (Nomad's `Namespace.UpsertNamespaces` and
//! `Namespace.DeleteNamespaces` RPCs): create, update and delete, each
//! one command through the write path. Reads are the snapshot's
//! (`StateSnapshot::namespace`, `namespaces_by_prefix`).
//!
//! The refusals the endpoint makes before writing are Nomad's, in its
//! words; the store makes the same checks again inside the command, so a
//! job registered meanwhile cannot slip between the check and the delete.

use super::{ServerApi, ServerApiError};
use herder::state::Command;
use herder::structs::job::{job_status, DEFAULT_NAMESPACE};
use herder::structs::Namespace;

impl ServerApi {
    /// Creates or updates namespaces; answers the index at which they are
    /// durable. Each is validated first (Nomad's `Invalid namespace`).
    pub async fn upsert_namespaces(
        &self,
        namespaces: Vec<Namespace>,
    ) -> Result<u64, ServerApiError> {
        if namespaces.is_empty() {
            return Err(ServerApiError::Invalid(
                "must specify at least one namespace".into(),
            ));
        }
        for ns in &namespaces {
            ns.validate().map_err(|problems| {
                ServerApiError::Invalid(format!("Invalid namespace {:?}: {problems}", ns.name))
            })?;
        }
        let outcome = self
            .writes
            .submit(Command::NamespaceUpsert { namespaces })
            .await?;
        Ok(outcome.index)
    }

    /// Deletes a namespace: refused for `default`, for one that does not
    /// exist (404), and for one holding a job that is not dead, naming
    /// `region` as Nomad names the regions that still have such jobs.
    pub async fn delete_namespace(&self, name: &str, region: &str) -> Result<u64, ServerApiError> {
        if name == DEFAULT_NAMESPACE {
            return Err(ServerApiError::Invalid(
                "can not delete default namespace".into(),
            ));
        }
        let snap = self.snapshot();
        if snap.namespace(name).is_none() {
            return Err(ServerApiError::NotFound("namespace not found".into()));
        }
        if snap
            .jobs_from(name, "")
            .any(|job| job.status != job_status::DEAD)
        {
            return Err(ServerApiError::Invalid(format!(
                "namespace {name:?} has non-terminal jobs in regions: [{region}]"
            )));
        }
        let outcome = self
            .writes
            .submit(Command::NamespaceDelete {
                names: vec![name.to_string()],
            })
            .await?;
        Ok(outcome.index)
    }
}
