//! What a task needs in its directory before its driver starts it, in
//! Nomad's prestart order: its artifacts fetched ([`crate::artifact`]),
//! then its templates rendered ([`crate::template`]), whose `env = true`
//! variables join the task's environment.

use crate::artifact::{self, ArtifactLimits};
use crate::task_dir::interpolate;
use crate::template::TemplateSet;
use herder::structs::TaskArtifact;
use std::collections::BTreeMap;

/// A task's artifacts and templates.
#[derive(Clone)]
pub struct TaskFiles {
    pub artifacts: Vec<TaskArtifact>,
    pub templates: TemplateSet,
    pub artifact_limits: ArtifactLimits,
}

/// Why the files could not be made; each is reported as Nomad reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrestartError {
    /// `failed to download artifact "<source>": <cause>`: recoverable,
    /// the restart policy decides.
    Artifact(String),
    /// The first rendering failed: the task fails.
    Template(String),
}

impl TaskFiles {
    /// Fetches the artifacts, then renders the templates with `env`;
    /// answers the variables the env templates add. Blocking.
    pub fn prestart(
        &self,
        env: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, PrestartError> {
        for a in &self.artifacts {
            let a = self.interpolated(a, env);
            artifact::fetch(&a, &self.templates.task_dir, &self.artifact_limits).map_err(|e| {
                PrestartError::Artifact(format!(
                    "failed to download artifact {:?}: {e}",
                    a.getter_source
                ))
            })?;
        }
        self.templates
            .render(env)
            .map(|r| r.env)
            .map_err(|e| PrestartError::Template(e.to_string()))
    }

    /// An artifact with `${...}` references replaced, as Nomad replaces
    /// them in its source, options, headers and destination.
    fn interpolated(&self, a: &TaskArtifact, env: &BTreeMap<String, String>) -> TaskArtifact {
        let node = &self.templates.node;
        let map = |m: &BTreeMap<String, String>| {
            m.iter()
                .map(|(k, v)| (k.clone(), interpolate(v, env, node)))
                .collect()
        };
        TaskArtifact {
            getter_source: interpolate(&a.getter_source, env, node),
            getter_options: map(&a.getter_options),
            getter_headers: map(&a.getter_headers),
            relative_dest: interpolate(&a.relative_dest, env, node),
            ..a.clone()
        }
    }
}
