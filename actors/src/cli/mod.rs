//! The `herder` command line: Nomad's verbs and flags.
//!
//! Nomad spells long flags with one dash (`-dev`, `-data-dir D`); clap wants
//! two. `nomad_style_args` rewrites a single-dash word into its double-dash
//! form before clap sees it, so both spellings work.

pub mod agent;

use clap::{Parser, Subcommand};
use std::ffi::OsString;

#[derive(Debug, Parser)]
#[command(
    name = "herder",
    version,
    about = "A cluster workload scheduler with Nomad's API",
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a herder agent (server, client, or both with -dev).
    Agent(agent::AgentArgs),
}

/// Rewrites `-word` and `-word=value` into `--word...`; leaves short flags
/// (`-h`), negative numbers, `-` and everything after `--` alone.
pub fn nomad_style_args<I: IntoIterator<Item = OsString>>(args: I) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut passthrough = false;
    for (i, arg) in args.into_iter().enumerate() {
        if i == 0 || passthrough {
            out.push(arg);
            continue;
        }
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            passthrough = true;
            out.push(arg);
            continue;
        }
        let is_word_flag = text.len() > 2
            && text.starts_with('-')
            && !text.starts_with("--")
            && text[1..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic());
        if is_word_flag {
            out.push(OsString::from(format!("-{text}")));
        } else {
            out.push(arg);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(args: &[&str]) -> Vec<String> {
        nomad_style_args(args.iter().map(OsString::from))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn single_dash_words_become_long_flags() {
        assert_eq!(
            rewrite(&[
                "herder",
                "agent",
                "-dev",
                "-data-dir=/x",
                "-h",
                "-5",
                "--",
                "-keep"
            ]),
            vec![
                "herder",
                "agent",
                "--dev",
                "--data-dir=/x",
                "-h",
                "-5",
                "--",
                "-keep"
            ]
        );
    }

    #[test]
    fn agent_flags_parse_in_nomad_spelling() {
        let cli = Cli::parse_from(nomad_style_args(
            [
                "herder",
                "agent",
                "-dev",
                "-http-port",
                "0",
                "-node",
                "n1",
                "-dc",
                "dc2",
            ]
            .iter()
            .map(OsString::from),
        ));
        let Command::Agent(a) = cli.command;
        assert!(a.dev);
        assert_eq!(a.http_port, Some(0));
        assert_eq!(a.node.as_deref(), Some("n1"));
        assert_eq!(a.dc.as_deref(), Some("dc2"));
    }
}
