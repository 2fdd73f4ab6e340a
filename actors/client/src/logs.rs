//! Task logs: rotated files written as Nomad's logmon writes them, and a
//! reader for the logs API.
//!
//! A task's stdout goes to `<alloc>/alloc/logs/<task>.stdout.<n>`: writes go
//! to the highest `n`; when it reaches `max_file_size_mb` the next index is
//! opened and the oldest files beyond `max_files` are deleted. Readers see
//! the files, in index order, as one stream whose start moves forward as old
//! files are deleted.
//!
//! Processes write into a named pipe the client drains (see [`pump_fifo`]);
//! the task holds its end open for reading too, so a client restart never
//! breaks its pipe (it only blocks once the pipe buffer is full until the
//! new client drains it).

use crate::task_dir::{check_task_name, log_dir};
use futures::Stream;
use herder::structs::LogConfig;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// Which of a task's streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogKind {
    Stdout,
    Stderr,
}

impl LogKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LogKind::Stdout => "stdout",
            LogKind::Stderr => "stderr",
        }
    }

    pub fn parse(s: &str) -> Option<LogKind> {
        match s {
            "stdout" => Some(LogKind::Stdout),
            "stderr" => Some(LogKind::Stderr),
            _ => None,
        }
    }
}

/// Where reading starts from: Nomad's `origin=start|end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Start,
    End,
}

fn file_prefix(task: &str, kind: LogKind) -> String {
    format!("{task}.{}.", kind.as_str())
}

/// The indices of a task's log files that exist, ascending.
pub fn log_indices(log_dir: &Path, task: &str, kind: LogKind) -> io::Result<Vec<u32>> {
    let prefix = file_prefix(task, kind);
    let mut out = Vec::new();
    let entries = match fs::read_dir(log_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name.strip_prefix(&prefix).and_then(|s| s.parse().ok()) {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn log_path(log_dir: &Path, task: &str, kind: LogKind, index: u32) -> PathBuf {
    log_dir.join(format!("{}{index}", file_prefix(task, kind)))
}

/// A writer that rotates at a size and keeps a number of files.
pub struct RotatingLog {
    dir: PathBuf,
    task: String,
    kind: LogKind,
    max_files: usize,
    max_bytes: u64,
    index: u32,
    size: u64,
    file: File,
}

impl RotatingLog {
    /// Opens the task's newest log file for appending (a restarted task or
    /// client continues where the last one stopped, as logmon does).
    pub fn open(dir: &Path, task: &str, kind: LogKind, config: &LogConfig) -> io::Result<Self> {
        // The task's name is the files' stem: it must not lead elsewhere.
        check_task_name(task)?;
        fs::create_dir_all(dir)?;
        let index = log_indices(dir, task, kind)?.last().copied().unwrap_or(0);
        let path = log_path(dir, task, kind, index);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        Ok(RotatingLog {
            dir: dir.to_path_buf(),
            task: task.to_string(),
            kind,
            max_files: usize::try_from(config.max_files.max(1)).unwrap_or(1),
            max_bytes: u64::try_from(config.max_file_size_mb.max(1)).unwrap_or(1) * 1024 * 1024,
            index,
            size,
            file,
        })
    }

    /// Test hook: rotate at a byte size instead of megabytes.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes.max(1);
        self
    }

    /// Appends `buf`, rotating as often as it needs to.
    pub fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            if self.size >= self.max_bytes {
                self.rotate()?;
            }
            let room = usize::try_from(self.max_bytes - self.size).unwrap_or(usize::MAX);
            let n = room.min(buf.len());
            self.file.write_all(&buf[..n])?;
            self.size += n as u64;
            buf = &buf[n..];
        }
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.index += 1;
        let path = log_path(&self.dir, &self.task, self.kind, self.index);
        self.file = OpenOptions::new().create(true).append(true).open(path)?;
        self.size = 0;
        for old in log_indices(&self.dir, &self.task, self.kind)? {
            if (self.index - old) as usize >= self.max_files {
                let _ = fs::remove_file(log_path(&self.dir, &self.task, self.kind, old));
            }
        }
        Ok(())
    }
}

/// Opens the client's end of a task's named pipe. It must be open before
/// the task starts: a pipe whose last descriptor closes discards what it
/// holds, so a task that writes and exits at once would lose its output.
pub fn open_fifo_reader(fifo: &Path) -> io::Result<tokio::net::unix::pipe::Receiver> {
    // Read-write, so that the pipe never reports end-of-file while the task
    // lives (its own writers may come and go).
    tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(fifo)
}

/// Copies what a process writes into the pipe `rx` to `log` until `exited`
/// resolves, then drains what is left and returns.
pub async fn pump_fifo(
    mut rx: tokio::net::unix::pipe::Receiver,
    mut log: RotatingLog,
    exited: impl std::future::Future<Output = ()>,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    tokio::pin!(exited);
    loop {
        tokio::select! {
            n = rx.read(&mut buf) => {
                let n = n?;
                if n == 0 { break; }
                log.write_all(&buf[..n])?;
            }
            _ = &mut exited => break,
        }
    }
    loop {
        match rx.try_read(&mut buf) {
            Ok(0) => break,
            Ok(n) => log.write_all(&buf[..n])?,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Creates a named pipe (replacing a stale file of the same name).
pub fn make_fifo(path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let _ = fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A place in a task's log stream: a file index and an offset within it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogPosition {
    pub index: u32,
    pub offset: u64,
}

/// Bytes read and where the next read continues.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogChunk {
    pub data: Vec<u8>,
    pub next: LogPosition,
}

/// Reads up to `limit` bytes of a task's log, `offset` bytes from the start
/// or end of what the rotated files still hold, as the logs API does.
pub fn read_logs(
    alloc_dir: &Path,
    task: &str,
    kind: LogKind,
    offset: u64,
    origin: Origin,
    limit: usize,
) -> io::Result<LogChunk> {
    let dir = log_dir(alloc_dir);
    let start = resolve_offset(&dir, task, kind, offset, origin)?;
    read_from(&dir, task, kind, start, limit)
}

/// Turns an offset from the start or end into a file position.
fn resolve_offset(
    dir: &Path,
    task: &str,
    kind: LogKind,
    offset: u64,
    origin: Origin,
) -> io::Result<LogPosition> {
    let mut files = Vec::new();
    for index in log_indices(dir, task, kind)? {
        let len = match fs::metadata(log_path(dir, task, kind, index)) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        files.push((index, len));
    }
    let total: u64 = files.iter().map(|(_, l)| l).sum();
    let mut skip = match origin {
        Origin::Start => offset.min(total),
        Origin::End => total.saturating_sub(offset),
    };
    for (index, len) in &files {
        if skip < *len {
            return Ok(LogPosition {
                index: *index,
                offset: skip,
            });
        }
        skip -= len;
    }
    Ok(files
        .last()
        .map(|(index, len)| LogPosition {
            index: *index,
            offset: *len,
        })
        .unwrap_or_default())
}

/// Reads from `pos` onwards across rotated files. A position whose file was
/// rotated away continues at the oldest file that remains.
pub fn read_from(
    dir: &Path,
    task: &str,
    kind: LogKind,
    pos: LogPosition,
    limit: usize,
) -> io::Result<LogChunk> {
    let indices = log_indices(dir, task, kind)?;
    let mut next = pos;
    if let Some(first) = indices.first() {
        if next.index < *first {
            next = LogPosition {
                index: *first,
                offset: 0,
            };
        }
    }
    let mut data = Vec::new();
    let first_index = next.index;
    for index in indices.iter().copied().filter(|i| *i >= first_index) {
        if index > next.index {
            next = LogPosition { index, offset: 0 };
        }
        let mut file = match File::open(log_path(dir, task, kind, index)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        file.seek(SeekFrom::Start(next.offset))?;
        let want = limit.saturating_sub(data.len()) as u64;
        let n = file.take(want).read_to_end(&mut data)?;
        next.offset += n as u64;
        if data.len() >= limit {
            break;
        }
    }
    Ok(LogChunk { data, next })
}

/// Bytes of one log file, for a stream that names the file each piece came
/// from (the logs API's frames).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSegment {
    /// The file's index; `data` starts at `next.offset - data.len()` in it.
    pub index: u32,
    pub data: Vec<u8>,
    pub next: LogPosition,
}

/// Reads up to `limit` bytes from the one file at `pos`. When that file is
/// exhausted and a newer one exists (the writer rotated, so it will not
/// grow again), reading moves on to the newer file; a file rotated away
/// continues at the oldest one that remains. Empty `data` means the reader
/// is at the end of what is written.
pub fn read_segment(
    dir: &Path,
    task: &str,
    kind: LogKind,
    pos: LogPosition,
    limit: usize,
) -> io::Result<LogSegment> {
    let indices = log_indices(dir, task, kind)?;
    let mut at = pos;
    if let Some(first) = indices.first() {
        if at.index < *first {
            at = LogPosition {
                index: *first,
                offset: 0,
            };
        }
    }
    let from = at.index;
    for index in indices.iter().copied().filter(|i| *i >= from) {
        if index > at.index {
            at = LogPosition { index, offset: 0 };
        }
        let mut file = match File::open(log_path(dir, task, kind, index)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        file.seek(SeekFrom::Start(at.offset))?;
        let mut data = Vec::new();
        file.take(limit as u64).read_to_end(&mut data)?;
        if !data.is_empty() {
            let next = LogPosition {
                index,
                offset: at.offset + data.len() as u64,
            };
            return Ok(LogSegment { index, data, next });
        }
    }
    Ok(LogSegment {
        index: at.index,
        data: Vec::new(),
        next: at,
    })
}

/// The name of a task's log file, as the logs API reports it relative to
/// the allocation directory (`alloc/logs/<task>.<type>.<index>`).
pub fn log_file_name(task: &str, kind: LogKind, index: u32) -> String {
    format!("alloc/logs/{}{index}", file_prefix(task, kind))
}

/// Follows a task's log from `from`: yields new bytes as they are written,
/// across rotations, checking every `poll`. Never ends on its own.
pub fn follow_logs(
    alloc_dir: PathBuf,
    task: String,
    kind: LogKind,
    from: LogPosition,
    poll: Duration,
) -> impl Stream<Item = io::Result<Vec<u8>>> {
    let dir = log_dir(&alloc_dir);
    futures::stream::unfold(from, move |pos| {
        let dir = dir.clone();
        let task = task.clone();
        async move {
            let mut pos = pos;
            loop {
                match read_from(&dir, &task, kind, pos, 64 * 1024) {
                    Ok(chunk) if !chunk.data.is_empty() => {
                        return Some((Ok(chunk.data), chunk.next))
                    }
                    Ok(chunk) => pos = chunk.next,
                    Err(e) => return Some((Err(e), pos)),
                }
                tokio::time::sleep(poll).await;
            }
        }
    })
}

/// The position `offset` bytes from `origin`, for starting a follow.
pub fn position_of(
    alloc_dir: &Path,
    task: &str,
    kind: LogKind,
    offset: u64,
    origin: Origin,
) -> io::Result<LogPosition> {
    resolve_offset(&log_dir(alloc_dir), task, kind, offset, origin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn config(max_files: i32) -> LogConfig {
        LogConfig {
            max_files,
            max_file_size_mb: 1,
        }
    }

    #[test]
    fn rotation_keeps_max_files_and_reads_span_them() {
        let tmp = tempfile::tempdir().unwrap();
        let alloc = tmp.path();
        let dir = log_dir(alloc);
        let mut log = RotatingLog::open(&dir, "web", LogKind::Stdout, &config(3))
            .unwrap()
            .with_max_bytes(10);
        for i in 0..10 {
            log.write_all(format!("line-{i:03}\n").as_bytes()).unwrap(); // 9 bytes each
        }
        assert_eq!(
            log_indices(&dir, "web", LogKind::Stdout).unwrap(),
            vec![6, 7, 8]
        );
        let all = read_logs(alloc, "web", LogKind::Stdout, 0, Origin::Start, 1 << 20).unwrap();
        let text = String::from_utf8(all.data).unwrap();
        assert!(text.ends_with("line-009\n"), "{text:?}");
        assert_eq!(text.len(), 30, "three files of 10 bytes remain");
        let tail = read_logs(alloc, "web", LogKind::Stdout, 9, Origin::End, 1 << 20).unwrap();
        assert_eq!(tail.data, b"line-009\n");
        let mid = read_logs(alloc, "web", LogKind::Stdout, 12, Origin::Start, 4).unwrap();
        assert_eq!(mid.data.len(), 4);
    }

    #[test]
    fn reopening_continues_the_newest_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = log_dir(tmp.path());
        let mut log = RotatingLog::open(&dir, "t", LogKind::Stderr, &config(5))
            .unwrap()
            .with_max_bytes(4);
        log.write_all(b"abcdef").unwrap();
        drop(log);
        let mut log = RotatingLog::open(&dir, "t", LogKind::Stderr, &config(5))
            .unwrap()
            .with_max_bytes(4);
        log.write_all(b"gh").unwrap();
        assert_eq!(log_indices(&dir, "t", LogKind::Stderr).unwrap(), vec![0, 1]);
        let all = read_logs(tmp.path(), "t", LogKind::Stderr, 0, Origin::Start, 100).unwrap();
        assert_eq!(all.data, b"abcdefgh");
    }

    #[test]
    fn segments_stay_within_one_file_and_move_on_after_rotation() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = log_dir(tmp.path());
        let mut log = RotatingLog::open(&dir, "s", LogKind::Stdout, &config(2))
            .unwrap()
            .with_max_bytes(4);
        log.write_all(b"abcdef").unwrap(); // files 0 ("abcd") and 1 ("ef")
        let first = read_segment(&dir, "s", LogKind::Stdout, LogPosition::default(), 100).unwrap();
        assert_eq!((first.index, &first.data[..]), (0, &b"abcd"[..]));
        let second = read_segment(&dir, "s", LogKind::Stdout, first.next, 100).unwrap();
        assert_eq!((second.index, &second.data[..]), (1, &b"ef"[..]));
        assert_eq!(
            second.next,
            LogPosition {
                index: 1,
                offset: 2
            }
        );
        let idle = read_segment(&dir, "s", LogKind::Stdout, second.next, 100).unwrap();
        assert!(idle.data.is_empty());
        assert_eq!(
            idle.next, second.next,
            "waits at the end of the newest file"
        );
        // "gh" fills file 1; files 2 and 3 rotate 0 and 1 away: a reader
        // left behind continues at the oldest file that remains.
        log.write_all(b"ghijklmn").unwrap();
        let late = read_segment(&dir, "s", LogKind::Stdout, first.next, 100).unwrap();
        assert_eq!((late.index, &late.data[..]), (2, &b"ijkl"[..]));
        assert_eq!(
            log_file_name("s", LogKind::Stdout, 2),
            "alloc/logs/s.stdout.2"
        );
    }

    #[tokio::test]
    async fn follow_yields_new_bytes_across_rotation() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = log_dir(tmp.path());
        let mut log = RotatingLog::open(&dir, "f", LogKind::Stdout, &config(10))
            .unwrap()
            .with_max_bytes(5);
        log.write_all(b"hello").unwrap();
        let start = position_of(tmp.path(), "f", LogKind::Stdout, 0, Origin::End).unwrap();
        let stream = follow_logs(
            tmp.path().to_path_buf(),
            "f".into(),
            LogKind::Stdout,
            start,
            Duration::from_millis(20),
        );
        tokio::pin!(stream);
        log.write_all(b" world, again").unwrap();
        let mut got = Vec::new();
        while got.len() < 13 {
            let chunk = tokio::time::timeout(Duration::from_secs(20), stream.next())
                .await
                .expect("follow produced nothing")
                .unwrap()
                .unwrap();
            got.extend(chunk);
        }
        assert_eq!(got, b" world, again");
    }
}
