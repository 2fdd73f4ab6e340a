//! A task's `template` blocks: rendered into its directory before it
//! starts, and re-rendered while it runs.
//!
//! Each template comes from its inline `data` or a `source` file inside the
//! task directory, is rendered by [`engine`] with the functions of
//! [`funcs`], and written to its destination (confined to the allocation
//! directory, with its `perms`) only when its text changed. A template with
//! `env = true` is also read as `KEY=value` lines into the task's
//! environment. [`TemplateSet::render`] answers what changed, so the task
//! runner can apply each changed template's `change_mode` (restart, signal
//! or nothing), as Nomad's template manager does after a re-render.

pub mod engine;
pub mod funcs;

use engine::{Limits, TemplateError};
use funcs::{ServiceCatalog, TaskFuncs};
use herder::structs::task_files::{change_mode, parse_perms, path_escapes_alloc_dir};
use herder::structs::{Node, Template};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often a running task's templates are rendered again to notice a
/// changed source file, environment or service catalog.
pub const RERENDER_PERIOD: Duration = Duration::from_secs(2);

/// The templates of one task and what they are rendered with.
#[derive(Clone)]
pub struct TemplateSet {
    pub templates: Vec<Template>,
    pub task_dir: PathBuf,
    pub node: Arc<Node>,
    pub namespace: String,
    pub catalog: ServiceCatalog,
    pub limits: Limits,
}

/// What one rendering pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rendered {
    /// The variables of the `env = true` templates, in template order.
    pub env: BTreeMap<String, String>,
    /// A changed template asks for a restart.
    pub restart: bool,
    /// Signals changed templates ask for, each once.
    pub signals: Vec<String>,
    /// The largest splay of the changed templates that act.
    pub splay: Duration,
    /// Any template's output changed on disk.
    pub changed: bool,
}

impl TemplateSet {
    /// Renders every template with the task's environment `env` and writes
    /// those whose output changed. The first error stops the pass.
    /// Blocking (files, and the servers for `nomadService`).
    pub fn render(&self, env: &BTreeMap<String, String>) -> Result<Rendered, TemplateError> {
        let mut out = Rendered::default();
        for (i, t) in self.templates.iter().enumerate() {
            let text = self
                .render_one(t, env)
                .map_err(|e| TemplateError(format!("template {}: {}", i + 1, e.0)))?;
            let dest = self.dest(&t.dest_path)?;
            let changed = write_if_changed(&dest, &text, t)?;
            if t.envvar {
                out.env.extend(parse_env_file(&text));
            }
            if !changed {
                continue;
            }
            out.changed = true;
            match t.change_mode.as_str() {
                change_mode::RESTART => out.restart = true,
                change_mode::SIGNAL if !out.signals.contains(&t.change_signal) => {
                    out.signals.push(t.change_signal.clone())
                }
                _ => continue,
            }
            out.splay = out.splay.max(t.splay);
        }
        Ok(out)
    }

    /// The environment the `env = true` templates already wrote (a client
    /// restarted under a running task reads it back).
    pub fn env_on_disk(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for t in self.templates.iter().filter(|t| t.envvar) {
            if let Ok(text) = self
                .dest(&t.dest_path)
                .and_then(|d| std::fs::read_to_string(d).map_err(|e| TemplateError(e.to_string())))
            {
                env.extend(parse_env_file(&text));
            }
        }
        env
    }

    fn render_one(
        &self,
        t: &Template,
        env: &BTreeMap<String, String>,
    ) -> Result<String, TemplateError> {
        let src = if t.source_path.is_empty() {
            t.embedded_tmpl.clone()
        } else {
            self.read_source(&t.source_path)?
        };
        let parsed = engine::Template::parse(&src, &t.left_delim, &t.right_delim, self.limits)?;
        let mut funcs = TaskFuncs {
            env,
            node: &self.node,
            namespace: &self.namespace,
            catalog: &self.catalog,
        };
        parsed.render(&serde_json::Value::Null, &mut funcs)
    }

    /// A `source` file, which must be inside the task directory (Nomad's
    /// file sandbox) and no larger than a template may be.
    fn read_source(&self, source: &str) -> Result<String, TemplateError> {
        let path = self.dest(source)?;
        let fail = |e: std::io::Error| TemplateError(format!("source {source:?}: {e}"));
        let real = path.canonicalize().map_err(fail)?;
        let root = self.task_dir.parent().unwrap_or(&self.task_dir);
        let root = root.canonicalize().map_err(fail)?;
        if !real.starts_with(&root) {
            return Err(TemplateError(format!(
                "source {source:?} is outside the allocation directory"
            )));
        }
        let len = std::fs::metadata(&real).map_err(fail)?.len();
        if len > self.limits.max_source_bytes as u64 {
            return Err(TemplateError(format!(
                "source {source:?} is {len} bytes, more than the {} allowed",
                self.limits.max_source_bytes
            )));
        }
        std::fs::read_to_string(&real).map_err(fail)
    }

    /// `rel` under the task directory, refused if it leaves the
    /// allocation directory.
    fn dest(&self, rel: &str) -> Result<PathBuf, TemplateError> {
        if path_escapes_alloc_dir("task", rel) {
            return Err(TemplateError(format!(
                "{rel:?} escapes the allocation directory"
            )));
        }
        let mut out = self.task_dir.clone();
        for part in Path::new(rel).components() {
            match part {
                Component::Normal(p) => out.push(p),
                Component::ParentDir => {
                    out.pop();
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

/// Writes `text` to `dest` (through a temporary file, with the template's
/// perms) unless it already holds exactly that; answers whether it wrote.
/// A destination that is a link is replaced, never followed.
fn write_if_changed(dest: &Path, text: &str, t: &Template) -> Result<bool, TemplateError> {
    let io = |e: std::io::Error| TemplateError(format!("writing {}: {e}", dest.display()));
    let is_link = std::fs::symlink_metadata(dest).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link && std::fs::read(dest).is_ok_and(|old| old == text.as_bytes()) {
        return Ok(false);
    }
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let tmp = dest.with_file_name(format!(
        ".{}.herder-tmp",
        dest.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    ));
    std::fs::write(&tmp, text).map_err(io)?;
    let mode = parse_perms(&t.perms).unwrap_or(0o644);
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).map_err(io)?;
    std::fs::rename(&tmp, dest).map_err(io)?;
    Ok(true)
}

/// `KEY=value` lines as Nomad reads an env template: blank lines and `#`
/// comments skipped, an `export ` prefix allowed, values in single or
/// double quotes unquoted (`\n` in double quotes is a newline).
pub fn parse_env_file(text: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim();
        let value = if let Some(v) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            v.replace("\\n", "\n").replace("\\\"", "\"")
        } else if let Some(v) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
            v.to_string()
        } else {
            value.split(" #").next().unwrap_or("").trim().to_string()
        };
        env.insert(key.trim().to_string(), value);
    }
    env
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
