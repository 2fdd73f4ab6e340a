//! The agent's log, handed live to whoever watches it (`agent monitor`,
//! `GET /v1/agent/monitor`), as Nomad's log broadcaster does.
//!
//! Each watcher asks for its own level and format; asking for `debug` does
//! not make the agent's own output more verbose. The program's log
//! subscriber (the CLI's `logging`) formats a line only when some watcher
//! wants its level ([`LogTap::wants`]) and hands it over with
//! [`LogTap::publish`]; with no watcher nothing is formatted at all (the
//! subscriber's interest is recomputed when the most verbose level wanted
//! changes, [`LogTap::on_levels_changed`]).
//!
//! A watcher that falls behind loses lines rather than slowing the agent:
//! each has a bounded queue, and the count of lines it lost is told to it
//! when it catches up.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::mpsc;

/// Lines queued per watcher before newer ones are dropped.
const QUEUE_LINES: usize = 512;

/// A log level, ordered from the least to the most verbose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TapLevel {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
    Trace = 5,
}

impl TapLevel {
    /// Nomad's level names (`log_level=`), any case; `None` for others.
    pub fn parse(name: &str) -> Option<TapLevel> {
        match name.to_ascii_lowercase().as_str() {
            "error" | "err" => Some(TapLevel::Error),
            "warn" | "warning" => Some(TapLevel::Warn),
            "info" => Some(TapLevel::Info),
            "debug" => Some(TapLevel::Debug),
            "trace" => Some(TapLevel::Trace),
            _ => None,
        }
    }

    fn from_u8(n: u8) -> Option<TapLevel> {
        [
            TapLevel::Error,
            TapLevel::Warn,
            TapLevel::Info,
            TapLevel::Debug,
            TapLevel::Trace,
        ]
        .into_iter()
        .find(|l| *l as u8 == n)
    }
}

/// How a watcher wants its lines: as the agent prints them, or one JSON
/// object per line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapFormat {
    Text,
    Json,
}

struct Watcher {
    id: u64,
    level: TapLevel,
    format: TapFormat,
    lines: mpsc::Sender<Arc<str>>,
    /// Lines lost since the last one delivered.
    dropped: u64,
}

/// The broadcaster; one per process ([`LogTap::global`]), as the log
/// subscriber is.
pub struct LogTap {
    watchers: Mutex<Vec<Watcher>>,
    /// The most verbose level a watcher wants, per format (0: none).
    max_text: AtomicU8,
    max_json: AtomicU8,
    next_id: AtomicU64,
    /// Set by the log subscriber that feeds this tap.
    installed: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl LogTap {
    fn new() -> LogTap {
        LogTap {
            watchers: Mutex::new(Vec::new()),
            max_text: AtomicU8::new(0),
            max_json: AtomicU8::new(0),
            next_id: AtomicU64::new(1),
            installed: OnceLock::new(),
        }
    }

    /// The process's tap.
    pub fn global() -> &'static LogTap {
        static TAP: OnceLock<LogTap> = OnceLock::new();
        TAP.get_or_init(LogTap::new)
    }

    /// Called once by the log subscriber that feeds this tap, with what to
    /// run when the levels watched change (recompute its interest). A
    /// program that installed a subscriber of its own never calls it, and
    /// [`is_fed`](Self::is_fed) stays false.
    pub fn on_levels_changed(&self, rebuild: Box<dyn Fn() + Send + Sync>) {
        let _ = self.installed.set(rebuild);
    }

    /// Whether a log subscriber feeds this tap.
    pub fn is_fed(&self) -> bool {
        self.installed.get().is_some()
    }

    /// The most verbose level some watcher of `format` wants, if any.
    pub fn max_level(&self, format: TapFormat) -> Option<TapLevel> {
        TapLevel::from_u8(self.max_of(format).load(Ordering::Relaxed))
    }

    /// Whether some watcher of `format` wants lines of `level`.
    pub fn wants(&self, format: TapFormat, level: TapLevel) -> bool {
        self.max_of(format).load(Ordering::Relaxed) >= level as u8
    }

    fn max_of(&self, format: TapFormat) -> &AtomicU8 {
        match format {
            TapFormat::Text => &self.max_text,
            TapFormat::Json => &self.max_json,
        }
    }

    /// Starts watching: lines of `level` or less verbose, in `format`,
    /// from now on, until the [`Watch`] is dropped.
    pub fn watch(&'static self, level: TapLevel, format: TapFormat) -> Watch {
        let (tx, rx) = mpsc::channel(QUEUE_LINES);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().push(Watcher {
            id,
            level,
            format,
            lines: tx,
            dropped: 0,
        });
        self.recompute();
        Watch {
            tap: self,
            id,
            lines: rx,
        }
    }

    /// Hands a formatted line of `level` to every watcher of `format` that
    /// wants it; a watcher whose queue is full loses it (and is told how
    /// many it lost with its next line).
    pub fn publish(&self, format: TapFormat, level: TapLevel, line: &str) {
        let mut watchers = self.lock();
        let line: Arc<str> = Arc::from(line);
        // A watcher that went away is removed by its `Watch`'s drop; here,
        // inside the log subscriber, nothing recomputes interest.
        for w in watchers
            .iter_mut()
            .filter(|w| w.format == format && w.level >= level && !w.lines.is_closed())
        {
            if w.dropped > 0 {
                let note = format!("[WARN] monitor: dropped {} log lines\n", w.dropped);
                if w.lines.try_send(Arc::from(note)).is_err() {
                    w.dropped += 1;
                    continue;
                }
                w.dropped = 0;
            }
            if w.lines.try_send(line.clone()).is_err() {
                w.dropped += 1;
            }
        }
    }

    fn forget(&self, id: u64) {
        self.lock().retain(|w| w.id != id);
        self.recompute();
    }

    /// Sets the most verbose level per format, and has the subscriber
    /// recompute its interest when that changed.
    fn recompute(&self) {
        let (text, json) = self
            .lock()
            .iter()
            .fold((0u8, 0u8), |(t, j), w| match w.format {
                TapFormat::Text => (t.max(w.level as u8), j),
                TapFormat::Json => (t, j.max(w.level as u8)),
            });
        let was_text = self.max_text.swap(text, Ordering::Relaxed);
        let was_json = self.max_json.swap(json, Ordering::Relaxed);
        if was_text != text || was_json != json {
            if let Some(rebuild) = self.installed.get() {
                rebuild();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Watcher>> {
        // A panic while holding the lock leaves a list that is still
        // whole: every change to it is one push or retain.
        self.watchers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One watcher's lines; dropping it stops the watch.
pub struct Watch {
    tap: &'static LogTap,
    id: u64,
    lines: mpsc::Receiver<Arc<str>>,
}

impl Watch {
    /// The next line, or `None` once the tap is gone.
    pub async fn next(&mut self) -> Option<Arc<str>> {
        self.lines.recv().await
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.tap.forget(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tap() -> &'static LogTap {
        Box::leak(Box::new(LogTap::new()))
    }

    #[test]
    fn a_watcher_gets_lines_at_its_level_and_less_verbose_only() {
        let tap = tap();
        let mut watch = tap.watch(TapLevel::Info, TapFormat::Text);
        assert!(tap.wants(TapFormat::Text, TapLevel::Warn));
        assert!(!tap.wants(TapFormat::Text, TapLevel::Debug));
        assert!(!tap.wants(TapFormat::Json, TapLevel::Error));
        tap.publish(TapFormat::Text, TapLevel::Debug, "too verbose\n");
        tap.publish(TapFormat::Json, TapLevel::Info, "{}\n");
        tap.publish(TapFormat::Text, TapLevel::Warn, "a warning\n");
        let line = futures::executor::block_on(watch.next());
        assert_eq!(line.as_deref(), Some("a warning\n"));
    }

    #[test]
    fn the_levels_wanted_follow_the_watchers() {
        let tap = tap();
        let rebuilt = Arc::new(AtomicU64::new(0));
        let count = rebuilt.clone();
        tap.on_levels_changed(Box::new(move || {
            count.fetch_add(1, Ordering::Relaxed);
        }));
        let debug = tap.watch(TapLevel::Debug, TapFormat::Json);
        let error = tap.watch(TapLevel::Error, TapFormat::Json);
        assert_eq!(tap.max_level(TapFormat::Json), Some(TapLevel::Debug));
        drop(debug);
        assert_eq!(tap.max_level(TapFormat::Json), Some(TapLevel::Error));
        drop(error);
        assert_eq!(tap.max_level(TapFormat::Json), None);
        // none → debug, debug → error, error → none; the second watch at a
        // less verbose level changed nothing.
        assert_eq!(rebuilt.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_watcher_that_falls_behind_is_told_how_many_lines_it_lost() {
        let tap = tap();
        let mut watch = tap.watch(TapLevel::Info, TapFormat::Text);
        for i in 0..QUEUE_LINES + 3 {
            tap.publish(TapFormat::Text, TapLevel::Info, &format!("{i}\n"));
        }
        for _ in 0..QUEUE_LINES {
            futures::executor::block_on(watch.next());
        }
        tap.publish(TapFormat::Text, TapLevel::Info, "after\n");
        let note = futures::executor::block_on(watch.next());
        assert_eq!(
            note.as_deref(),
            Some("[WARN] monitor: dropped 3 log lines\n")
        );
        let line = futures::executor::block_on(watch.next());
        assert_eq!(line.as_deref(), Some("after\n"));
    }
}
