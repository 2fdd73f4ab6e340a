//! The `herder` binary: parse the command line and hand off.
//!
//! This is the edge of the program: errors become `anyhow` reports and an
//! exit status here, and nowhere deeper.

use clap::Parser;
use herder_actors::cli::{self, nomad_style_args, Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse_from(nomad_style_args(std::env::args_os()));
    let mut stdout = std::io::stdout().lock();
    let result = match cli.command {
        Command::Agent(args) => herder_actors::cli::agent::run(args).map(|()| 0),
        Command::Job(args) => cli::job::run(args, &mut stdout),
        Command::Node(args) => cli::node::run(args, &mut stdout),
        Command::Eval(args) => cli::eval::run(args, &mut stdout),
        Command::Alloc(args) => cli::alloc::run(args, &mut stdout),
        Command::Operator(args) => cli::operator::run(args, &mut stdout),
        Command::Server(args) => cli::server::run(args, &mut stdout),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
