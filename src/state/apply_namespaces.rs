//! How the namespace commands change the `namespaces` table, and the
//! check every job write makes that its namespace exists.
//!
//! `default` is present whether or not a row was written for it (see
//! [`crate::structs::namespace`]); writing it only changes its
//! description or meta, and it can never be deleted. The refusals are
//! made here, inside the command's application, so that a job registered
//! while a namespace is being deleted cannot slip between a check and the
//! write.

use super::super::changes::{JobKey, RowKey};
use super::super::ApplyError;
use super::Txn;
use crate::structs::job::{job_status, DEFAULT_NAMESPACE};
use crate::structs::{Job, Namespace};
use std::sync::Arc;

impl Txn {
    /// Stores each namespace; `CreateIndex` is kept across updates and an
    /// unchanged namespace is not written again.
    pub(super) fn upsert_namespaces(&mut self, namespaces: &[Namespace]) -> Result<(), ApplyError> {
        for ns in namespaces {
            if let Err(problems) = ns.validate() {
                return Err(ApplyError::NamespaceRefused(format!(
                    "Invalid namespace {:?}: {problems}",
                    ns.name
                )));
            }
        }
        for ns in namespaces {
            let old = self.t.namespaces.get(&ns.name).cloned();
            let create_index = match old {
                Some(old) if ns.with_indexes_of(&old) == *old => continue,
                Some(old) => old.create_index,
                None => self.index,
            };
            let row = Namespace {
                create_index,
                modify_index: self.index,
                ..ns.clone()
            };
            self.t.namespaces.insert(ns.name.clone(), Arc::new(row));
            self.touched.insert(RowKey::Namespace(ns.name.clone()));
        }
        Ok(())
    }

    /// Removes namespaces: all of them or, on the first refusal, none.
    pub(super) fn delete_namespaces(&mut self, names: &[String]) -> Result<(), ApplyError> {
        for name in names {
            if name == DEFAULT_NAMESPACE {
                return Err(refused("can not delete default namespace".into()));
            }
            if !self.t.namespaces.contains_key(name) {
                return Err(refused(format!("namespace {name:?} not found")));
            }
            if let Some(job) = self.live_job_in(name) {
                return Err(refused(format!(
                    "namespace {name:?} contains at least one non-terminal job {job:?}. \
                     All jobs must be terminal in namespace before it can be deleted"
                )));
            }
        }
        for name in names {
            if self.t.namespaces.remove(name).is_some() {
                self.touched.insert(RowKey::Namespace(name.clone()));
            }
        }
        Ok(())
    }

    /// The ID of a job in `namespace` that is not dead, if there is one.
    fn live_job_in(&self, namespace: &str) -> Option<String> {
        self.t
            .jobs
            .range(JobKey::new(namespace, "")..)
            .take_while(|(k, _)| &*k.namespace == namespace)
            .find(|(_, job)| job.status != job_status::DEAD)
            .map(|(_, job)| job.id.clone())
    }

    /// A job may only be written into a namespace that exists (Nomad's
    /// state store refuses it with these words).
    pub(super) fn check_job_namespace(&self, job: &Job) -> Result<(), ApplyError> {
        if job.namespace == DEFAULT_NAMESPACE || self.t.namespaces.contains_key(&job.namespace) {
            return Ok(());
        }
        Err(refused(format!(
            "job {:?} is in nonexistent namespace {:?}",
            job.id, job.namespace
        )))
    }
}

fn refused(text: String) -> ApplyError {
    ApplyError::NamespaceRefused(text)
}
