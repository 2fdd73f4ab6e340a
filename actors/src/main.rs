//! The `herder` binary: parse the command line and hand off.
//!
//! This is the edge of the program: errors become `anyhow` reports and an
//! exit status here, and nowhere deeper.

use clap::Parser;
use herder_actors::cli::{nomad_style_args, Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse_from(nomad_style_args(std::env::args_os()));
    let result = match cli.command {
        Command::Agent(args) => herder_actors::cli::agent::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
