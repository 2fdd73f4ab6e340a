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

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_t` (libmimalloc-sys
/// exports no constant for it). Pinned by the test below: the option at this
/// number must read as purge_delay's documented default.
#[cfg(not(feature = "system-allocator"))]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps freed memory before giving it back to the OS
/// (its default is 1 s). The store replaces whole B-tree paths on every plan
/// and the last holder of an old state frees them, so at cluster scale the
/// pages waiting out a second were 60-100 MiB of the server's peak RSS. At
/// 100 ms the peak is 40-70 MiB lower with no CPU measured against the
/// default; at 0 it is 20 MiB lower still, but the server's CPU rose 4-10%
/// in one sitting (docs/PERFORMANCE.md, "session 24").
#[cfg(not(feature = "system-allocator"))]
const PURGE_DELAY_MS: std::os::raw::c_long = 100;

/// Sets [`PURGE_DELAY_MS`]. An operator's own `MIMALLOC_PURGE_DELAY` still
/// wins: mimalloc keeps a value it read from the environment over a default
/// set here.
#[cfg(not(feature = "system-allocator"))]
fn set_purge_delay() {
    // SAFETY: sets a plain integer in mimalloc's option table; the number is
    // in range (checked by the test) and mimalloc ignores one that is not.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
}

#[cfg(feature = "system-allocator")]
fn set_purge_delay() {}

fn main() -> ExitCode {
    set_purge_delay();
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

#[cfg(all(test, not(feature = "system-allocator")))]
mod tests {
    use super::*;

    /// Read mimalloc's purge delay through the pinned option number.
    fn purge_delay() -> std::os::raw::c_long {
        // SAFETY: reads one entry of mimalloc's option table.
        unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }
    }

    /// If a libmimalloc-sys upgrade renumbers the options, the number would
    /// silently set something else: the option at that number must read as
    /// the purge delay does (the environment's value, or v3's default of
    /// 1000 ms, which no other option shares), and then as ours once set.
    #[test]
    fn the_pinned_option_is_the_purge_delay_and_the_binary_sets_it() {
        let from_env = std::env::var("MIMALLOC_PURGE_DELAY").ok();
        let expected = from_env.as_deref().map_or(Ok(1000), str::parse);
        assert_eq!(
            Ok(purge_delay()),
            expected,
            "option {MI_OPTION_PURGE_DELAY}"
        );
        set_purge_delay();
        if from_env.is_none() {
            assert_eq!(purge_delay(), PURGE_DELAY_MS);
        }
    }
}
