//! Log output: tracing-subscriber to stderr, level from the configuration,
//! overridable with `RUST_LOG` for per-module filters.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls (tests, embedding
/// programs that installed their own) are harmless no-ops.
pub fn init(level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
