//! The `herder` binary: parse the command line and hand off.
//!
//! This is the edge of the program: errors become `anyhow` reports and an
//! exit status here, and nowhere deeper.

use clap::Parser;
use herder_cli::cli::{self, nomad_style_args, Cli};
use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: the server allocates and frees
/// small objects on many threads (workers, plan applier, store writer and
/// persister); at cluster scale mimalloc spends about 15% less CPU on the
/// same work (docs/PERFORMANCE.md, "Allocator"). Built without transparent
/// huge pages (see Cargo.toml).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse_from(nomad_style_args(std::env::args_os()));
    let result = cli::run(cli.command, &mut std::io::stdout().lock());
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
