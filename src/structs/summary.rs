//! Job summaries: per task group counts of allocations by state, kept up to
//! date by the state store as allocations change (`/v1/job/:id/summary`).

use super::alloc::ClientStatus;
use super::serde_util::nullable;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskGroupSummary {
    pub queued: u64,
    pub complete: u64,
    pub failed: u64,
    pub running: u64,
    pub starting: u64,
    pub lost: u64,
    pub unknown: u64,
}

impl TaskGroupSummary {
    /// The counter an allocation in `status` is counted in.
    pub fn slot(&mut self, status: ClientStatus) -> &mut u64 {
        match status {
            ClientStatus::Pending => &mut self.starting,
            ClientStatus::Running => &mut self.running,
            ClientStatus::Complete => &mut self.complete,
            ClientStatus::Failed => &mut self.failed,
            ClientStatus::Lost => &mut self.lost,
            ClientStatus::Unknown => &mut self.unknown,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct JobChildrenSummary {
    pub pending: u64,
    pub running: u64,
    pub dead: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct JobSummary {
    #[serde(rename = "JobID")]
    pub job_id: String,
    pub namespace: String,
    #[serde(with = "nullable")]
    pub summary: BTreeMap<String, TaskGroupSummary>,
    pub children: Option<JobChildrenSummary>,
    pub create_index: u64,
    pub modify_index: u64,
}
