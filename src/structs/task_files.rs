//! The files a client puts in a task's directory before it starts: the
//! `template` block (Nomad's `Template`) and the `artifact` block (Nomad's
//! `TaskArtifact`), with Nomad's defaults and validation.
//!
//! Both name a destination relative to the task directory; a destination
//! that climbs out of the allocation directory (`../../x`) is refused at
//! validation, with Nomad's words, and the client confines them again
//! because it must not trust a server with its disk.

use super::serde_util::{nanos, null_default, nullable};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// What a re-rendered template does to its task.
pub mod change_mode {
    pub const NOOP: &str = "noop";
    pub const SIGNAL: &str = "signal";
    pub const RESTART: &str = "restart";
}

/// How an artifact's source is fetched (go-getter's client modes).
pub mod getter_mode {
    pub const ANY: &str = "any";
    pub const FILE: &str = "file";
    pub const DIR: &str = "dir";
}

/// A `template` block: a file (or environment variables, with `Envvar`)
/// rendered into the task directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Template {
    /// A template file in the task directory (`source`).
    #[serde(deserialize_with = "null_default::deserialize")]
    pub source_path: String,
    /// Where it is rendered, relative to the task directory.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub dest_path: String,
    /// The template itself (`data`).
    #[serde(deserialize_with = "null_default::deserialize")]
    pub embedded_tmpl: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub change_mode: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub change_signal: String,
    /// Left out of a JSON job it is Nomad's 5 s, as the API's
    /// canonicalization fills it (an explicit 0 stays 0).
    #[serde(with = "nanos", default = "default_splay")]
    pub splay: Duration,
    /// Octal file mode of the rendered file.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub perms: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub left_delim: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub right_delim: String,
    /// The rendered file is `KEY=value` lines read into the task's
    /// environment.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub envvar: bool,
    #[serde(with = "nanos")]
    pub vault_grace: Duration,
}

/// An `artifact` block: a file or archive fetched into the task directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskArtifact {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub getter_source: String,
    /// go-getter's options: `checksum = "sha256:..."`, `archive = "false"`.
    #[serde(with = "nullable")]
    pub getter_options: BTreeMap<String, String>,
    /// HTTP headers sent with the download.
    #[serde(with = "nullable")]
    pub getter_headers: BTreeMap<String, String>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub getter_mode: String,
    /// Where it lands, relative to the task directory.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub relative_dest: String,
    /// Kept for jobs written for newer Nomads; herder's tasks run as the
    /// agent's user, so there is no owner to change to.
    #[serde(
        deserialize_with = "null_default::deserialize",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub chown: bool,
}

fn default_splay() -> Duration {
    Duration::from_secs(5)
}

impl Template {
    /// Nomad's defaults (the API's `Template.Canonicalize`).
    pub fn canonicalize(&mut self) {
        if self.change_mode.is_empty() {
            self.change_mode = change_mode::RESTART.into();
        }
        if self.change_signal.is_empty() && self.change_mode == change_mode::SIGNAL {
            self.change_signal = "SIGHUP".into();
        }
        self.change_signal = self.change_signal.to_uppercase();
        if self.perms.is_empty() {
            self.perms = "0644".into();
        }
        if self.left_delim.is_empty() {
            self.left_delim = "{{".into();
        }
        if self.right_delim.is_empty() {
            self.right_delim = "}}".into();
        }
    }

    /// Every mistake in the block, in Nomad's words.
    pub fn validate(&self) -> Vec<String> {
        let mut errs = Vec::new();
        if self.source_path.is_empty() && self.embedded_tmpl.is_empty() {
            errs.push("Must specify a source path or have an embedded template".into());
        }
        if self.dest_path.is_empty() {
            errs.push("Must specify a destination for the template".into());
        }
        if path_escapes_alloc_dir("task", &self.dest_path) {
            errs.push("destination escapes allocation directory".into());
        }
        match self.change_mode.as_str() {
            change_mode::NOOP | change_mode::RESTART => {}
            change_mode::SIGNAL => {
                if self.change_signal.is_empty() {
                    errs.push("Must specify signal value when change mode is signal".into());
                }
                if self.envvar {
                    errs.push("cannot use signals with env var templates".into());
                }
            }
            _ => errs.push(
                "Invalid change mode. Must be one of the following: noop, signal, restart".into(),
            ),
        }
        if !self.perms.is_empty() && parse_perms(&self.perms).is_none() {
            errs.push(format!("Failed to parse {:?} as octal", self.perms));
        }
        errs
    }
}

/// A template's `perms` as a file mode: octal, at most 12 bits.
pub fn parse_perms(perms: &str) -> Option<u32> {
    u32::from_str_radix(perms, 8).ok().filter(|m| *m <= 0o7777)
}

impl TaskArtifact {
    /// Nomad's defaults (the API's `TaskArtifact.Canonicalize`): mode
    /// `any`, destination `local/` (for a single file, `local/<its name>`).
    pub fn canonicalize(&mut self) {
        if self.getter_mode.is_empty() {
            self.getter_mode = getter_mode::ANY.into();
        }
        if self.relative_dest.is_empty() {
            self.relative_dest = if self.getter_mode == getter_mode::FILE {
                let source = self.getter_source.split(['?', '#']).next().unwrap_or("");
                let base = source.rsplit('/').next().unwrap_or("");
                format!("local/{base}")
            } else {
                "local/".into()
            };
        }
    }

    /// Every mistake in the block, in Nomad's words.
    pub fn validate(&self) -> Vec<String> {
        let mut errs = Vec::new();
        if self.getter_source.is_empty() {
            errs.push("source must be specified".into());
        }
        match self.getter_mode.as_str() {
            "" | getter_mode::ANY | getter_mode::FILE | getter_mode::DIR => {}
            other => errs.push(format!(
                "invalid artifact mode {other:?}; must be one of: any, file, dir"
            )),
        }
        if path_escapes_alloc_dir("task", &self.relative_dest) {
            errs.push("destination escapes allocation directory".into());
        }
        if let Some(check) = self.getter_options.get("checksum") {
            if let Err(e) = parse_checksum(check) {
                errs.push(e);
            }
        }
        errs
    }
}

/// The hash algorithms an artifact's checksum may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChecksumKind {
    Md5,
    Sha1,
    Sha256,
    Sha512,
}

impl ChecksumKind {
    pub fn name(self) -> &'static str {
        match self {
            ChecksumKind::Md5 => "md5",
            ChecksumKind::Sha1 => "sha1",
            ChecksumKind::Sha256 => "sha256",
            ChecksumKind::Sha512 => "sha512",
        }
    }

    fn digest_len(self) -> usize {
        match self {
            ChecksumKind::Md5 => 16,
            ChecksumKind::Sha1 => 20,
            ChecksumKind::Sha256 => 32,
            ChecksumKind::Sha512 => 64,
        }
    }
}

/// `type:hex` parsed and checked as Nomad's validation does.
pub fn parse_checksum(check: &str) -> Result<(ChecksumKind, Vec<u8>), String> {
    let check = check.trim();
    if check.is_empty() {
        return Err("checksum value cannot be empty".into());
    }
    let parts: Vec<&str> = check.split(':').collect();
    let [kind, value] = parts[..] else {
        return Err(format!(
            "checksum must be given as \"type:value\"; got {check:?}"
        ));
    };
    let bytes =
        decode_hex(value).ok_or_else(|| format!("invalid checksum: {value:?} is not hex"))?;
    let kind = match kind {
        "md5" => ChecksumKind::Md5,
        "sha1" => ChecksumKind::Sha1,
        "sha256" => ChecksumKind::Sha256,
        "sha512" => ChecksumKind::Sha512,
        other => return Err(format!("unsupported checksum type: {other}")),
    };
    if bytes.len() != kind.digest_len() {
        return Err(format!("invalid {} checksum: {value}", kind.name()));
    }
    Ok((kind, bytes))
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Whether `path`, joined under `<alloc>/<prefix>`, climbs out of the
/// allocation directory (Nomad's `PathEscapesAllocDir`): lexical, as the
/// path is not on this machine.
pub fn path_escapes_alloc_dir(prefix: &str, path: &str) -> bool {
    let mut depth: i64 = 0;
    let joined = format!("{prefix}/{path}");
    // An absolute destination is joined under the prefix too, as Go's
    // filepath.Join does.
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_template_without_splay_gets_nomads_five_seconds() {
        let t: Template = serde_json::from_str(r#"{"EmbeddedTmpl": "x"}"#).unwrap();
        assert_eq!(t.splay, Duration::from_secs(5));
        let t: Template = serde_json::from_str(r#"{"EmbeddedTmpl": "x", "Splay": 0}"#).unwrap();
        assert_eq!(t.splay, Duration::ZERO);
    }

    #[test]
    fn escapes_are_found_as_nomad_finds_them() {
        assert!(!path_escapes_alloc_dir("task", "local/x"));
        assert!(!path_escapes_alloc_dir("task", "../alloc/x"));
        assert!(path_escapes_alloc_dir("task", "../../x"));
        assert!(path_escapes_alloc_dir("task", "local/../../../etc"));
        assert!(!path_escapes_alloc_dir("task", "/etc/x"));
    }

    #[test]
    fn checksums_are_checked_for_type_and_length() {
        let sha = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(parse_checksum(&sha).map(|c| c.0), Ok(ChecksumKind::Sha256));
        assert_eq!(
            parse_checksum("sha256:abcd").unwrap_err(),
            "invalid sha256 checksum: abcd"
        );
        assert_eq!(
            parse_checksum("crc:abcd").unwrap_err(),
            "unsupported checksum type: crc"
        );
        assert!(parse_checksum("abcd").unwrap_err().contains("type:value"));
        assert_eq!(
            parse_checksum(" ").unwrap_err(),
            "checksum value cannot be empty"
        );
    }

    #[test]
    fn templates_get_nomads_defaults_and_checks() {
        let mut t = Template {
            embedded_tmpl: "x".into(),
            dest_path: "../../etc/passwd".into(),
            change_mode: "signal".into(),
            envvar: true,
            ..Template::default()
        };
        t.canonicalize();
        assert_eq!(t.change_signal, "SIGHUP");
        assert_eq!(t.perms, "0644");
        let errs = t.validate();
        assert!(errs.contains(&"destination escapes allocation directory".to_string()));
        assert!(errs.contains(&"cannot use signals with env var templates".to_string()));
    }

    #[test]
    fn a_file_artifact_lands_under_its_own_name() {
        let mut a = TaskArtifact {
            getter_source: "https://example.com/dl/app.tgz?x=1".into(),
            getter_mode: "file".into(),
            ..TaskArtifact::default()
        };
        a.canonicalize();
        assert_eq!(a.relative_dest, "local/app.tgz");
        assert!(a.validate().is_empty());
    }
}
