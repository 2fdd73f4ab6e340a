//! Log output: tracing-subscriber to stderr, level from the configuration,
//! overridable with `RUST_LOG` for per-module filters.

use tracing_subscriber::EnvFilter;

/// One step less verbose than `level`, down to `warn`.
fn quieter(level: &str) -> &'static str {
    match level {
        "trace" => "debug",
        "debug" => "info",
        "error" => "error",
        _ => "warn",
    }
}

/// Installs the global subscriber once; later calls (tests, embedding
/// programs that installed their own) are harmless no-ops.
pub fn init(level: &str) {
    // openraft narrates every vote and membership step at `info`; herder
    // logs the changes an operator cares about (leadership, joins) itself.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{level},openraft={}", quieter(level))));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
