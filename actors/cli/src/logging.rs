//! Log output: tracing-subscriber to stderr, level from the configuration,
//! overridable with `RUST_LOG` for per-module filters; and the same lines,
//! each watcher at its own level, to the agent's [`LogTap`] (`agent
//! monitor`), formatted only while someone watches.

use herder_common::log_tap::{LogTap, TapFormat, TapLevel};
use tracing::metadata::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{DefaultFields, Writer};
use tracing_subscriber::fmt::{FormatFields, MakeWriter};
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer};

/// One step less verbose than `level`, down to `warn`.
fn quieter(level: &str) -> &'static str {
    match level {
        "trace" => "debug",
        "debug" => "info",
        "error" => "error",
        _ => "warn",
    }
}

/// Changes the installed subscriber's level while the agent runs (SIGHUP
/// reloads the configuration's `log_level` through it).
pub struct LogLevel {
    /// The subscriber's reload handle, its long type erased.
    reload: Box<dyn Fn(EnvFilter) -> bool + Send + Sync>,
    /// `RUST_LOG` was set: its per-module filters win over any reload.
    from_env: bool,
}

impl LogLevel {
    /// Sets `level` (as the configuration names it); says whether it took.
    pub fn set(&self, level: &str) -> bool {
        if self.from_env {
            return false;
        }
        (self.reload)(filter_for(level))
    }
}

fn filter_for(level: &str) -> EnvFilter {
    // openraft narrates every vote and membership step at `info`; herder
    // logs the changes an operator cares about (leadership, joins) itself.
    EnvFilter::new(format!("{level},openraft={}", quieter(level)))
}

/// Installs the global subscriber once; later calls (tests, embedding
/// programs that installed their own) are harmless no-ops and get no
/// handle.
pub fn init(level: &str) -> Option<LogLevel> {
    let from_env = EnvFilter::try_from_default_env().ok();
    let is_env = from_env.is_some();
    let filter = from_env.unwrap_or_else(|| filter_for(level));
    let (filter, handle) = reload::Layer::new(filter);
    let stderr = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let text = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .fmt_fields(PlainFields::default())
        .with_writer(TapWriter(TapFormat::Text))
        .with_filter(TapFilter(TapFormat::Text));
    let json = tracing_subscriber::fmt::layer()
        .json()
        .with_writer(TapWriter(TapFormat::Json))
        .with_filter(TapFilter(TapFormat::Json));
    tracing_subscriber::registry()
        .with(stderr)
        .with(text)
        .with(json)
        .try_init()
        .ok()?;
    LogTap::global().on_levels_changed(Box::new(tracing::callsite::rebuild_interest_cache));
    Some(LogLevel {
        reload: Box::new(move |filter| handle.reload(filter).is_ok()),
        from_env: is_env,
    })
}

/// The default field formatting under a type of its own: layers with the
/// same field formatter share each span's formatted fields, and the tap's
/// text would carry stderr's colour codes.
#[derive(Default)]
struct PlainFields(DefaultFields);

impl<'w> FormatFields<'w> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> std::fmt::Result {
        self.0.format_fields(writer, fields)
    }
}

fn tap_level(level: &Level) -> TapLevel {
    match *level {
        Level::ERROR => TapLevel::Error,
        Level::WARN => TapLevel::Warn,
        Level::INFO => TapLevel::Info,
        Level::DEBUG => TapLevel::Debug,
        Level::TRACE => TapLevel::Trace,
    }
}

/// Lets through to a tap layer what some watcher of its format wants. Its
/// answers change only when the watchers' levels do, and the tap then has
/// every callsite's interest recomputed: with nobody watching, the tap
/// layers cost nothing.
struct TapFilter(TapFormat);

impl TapFilter {
    fn wants(&self, meta: &Metadata<'_>) -> bool {
        LogTap::global().wants(self.0, tap_level(meta.level()))
    }
}

impl<S> Filter<S> for TapFilter {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        self.wants(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.wants(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(match LogTap::global().max_level(self.0) {
            None => LevelFilter::OFF,
            Some(TapLevel::Error) => LevelFilter::ERROR,
            Some(TapLevel::Warn) => LevelFilter::WARN,
            Some(TapLevel::Info) => LevelFilter::INFO,
            Some(TapLevel::Debug) => LevelFilter::DEBUG,
            Some(TapLevel::Trace) => LevelFilter::TRACE,
        })
    }
}

/// Where a tap layer writes: each event's line, whole, to the watchers.
struct TapWriter(TapFormat);

/// One event's formatted line, published when the formatter is done.
struct TapLine {
    format: TapFormat,
    level: TapLevel,
    line: Vec<u8>,
}

impl std::io::Write for TapLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for TapLine {
    fn drop(&mut self) {
        if !self.line.is_empty() {
            let line = String::from_utf8_lossy(&self.line);
            LogTap::global().publish(self.format, self.level, &line);
        }
    }
}

impl<'a> MakeWriter<'a> for TapWriter {
    type Writer = TapLine;

    fn make_writer(&'a self) -> TapLine {
        self.line_of(TapLevel::Info)
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> TapLine {
        self.line_of(tap_level(meta.level()))
    }
}

impl TapWriter {
    fn line_of(&self, level: TapLevel) -> TapLine {
        TapLine {
            format: self.0,
            level,
            line: Vec::new(),
        }
    }
}
