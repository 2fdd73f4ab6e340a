//! `alloc exec` sessions: a command started beside a running task, its
//! input and output carried over channels (the HTTP layer speaks Nomad's
//! websocket framing on top of them).
//!
//! Each driver builds the command with its own isolation (`raw_exec`: the
//! task dir and user; `exec`: the task's namespaces and chroot); this module
//! runs it, with pipes or, for `tty`, a pseudo-terminal, and owns the one
//! copy of the plumbing both drivers share.

use super::{DriverError, ExitResult};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// How long output may keep arriving after the command exited (a process
/// it left behind may hold its pipes open): then the session ends anyway.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);
/// Bytes read from the command's output at a time.
const CHUNK: usize = 16 * 1024;

/// What to run, as `nomad alloc exec` sends it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecRequest {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Give the command a pseudo-terminal (its stdout and stderr merge).
    pub tty: bool,
}

/// Input to a running session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecInput {
    Stdin(Vec<u8>),
    /// The user's end of stdin is closed.
    CloseStdin,
    /// The user's terminal changed size (tty sessions only).
    Resize {
        height: u16,
        width: u16,
    },
}

/// Output of a running session; `Exited` is the last message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecOutput {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exited(ExitResult),
}

/// A started session: send input, receive output until `Exited`. Dropping
/// the input sender and output receiver ends the command.
pub struct ExecSession {
    pub input: mpsc::Sender<ExecInput>,
    pub output: mpsc::Receiver<ExecOutput>,
}

/// Runs `cmd` (already carrying its driver's isolation) as a session. The
/// command gets a session of its own and, for `tty`, the pseudo-terminal
/// as its controlling terminal.
pub(crate) fn run_session(
    mut cmd: std::process::Command,
    tty: bool,
) -> Result<ExecSession, DriverError> {
    let master = if tty {
        let (master, slave) = open_pty()?;
        let dup = |fd: &OwnedFd| {
            fd.try_clone()
                .map_err(|e| DriverError::Node(format!("duplicating the terminal: {e}")))
        };
        cmd.stdin(dup(&slave)?).stdout(dup(&slave)?).stderr(slave);
        Some(master)
    } else {
        use std::process::Stdio;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        None
    };
    // SAFETY: setsid and ioctl are async-signal-safe system calls; the
    // closure touches no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if tty && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| {
        DriverError::task(format!(
            "failed to exec into task: {e}{}",
            if e.kind() == std::io::ErrorKind::NotFound {
                " (no such command in the task)"
            } else {
                ""
            }
        ))
    })?;
    drop(cmd);
    let (in_tx, in_rx) = mpsc::channel(64);
    let (out_tx, out_rx) = mpsc::channel(64);
    let readers = match master {
        Some(master) => start_tty_io(master, in_rx, &out_tx)?,
        None => start_pipe_io(&mut child, in_rx, &out_tx),
    };
    tokio::spawn(wait_and_report(child, readers, out_tx));
    Ok(ExecSession {
        input: in_tx,
        output: out_rx,
    })
}

/// Waits for the command, lets its output drain, then sends `Exited`;
/// kills what it left in its process group.
async fn wait_and_report(
    mut child: tokio::process::Child,
    readers: Vec<tokio::task::JoinHandle<()>>,
    out: mpsc::Sender<ExecOutput>,
) {
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    let result = tokio::select! {
        status = child.wait() => match status {
            Ok(status) => ExitResult {
                exit_code: status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
                signal: status.signal().unwrap_or(0),
                err: None,
            },
            Err(e) => ExitResult {
                exit_code: -1,
                err: Some(format!("waiting for the command: {e}")),
                ..Default::default()
            },
        },
        // The user went away: dropping the child kills it.
        _ = out.closed() => ExitResult::default(),
    };
    if let Some(pid) = pid {
        // SAFETY: kill has no memory effects; the group is the command's.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let drained = futures::future::join_all(readers);
    let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, drained).await;
    let _ = out.send(ExecOutput::Exited(result)).await;
}

fn start_pipe_io(
    child: &mut tokio::process::Child,
    mut input: mpsc::Receiver<ExecInput>,
    out: &mpsc::Sender<ExecOutput>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut stdin = child.stdin.take();
    tokio::spawn(async move {
        while let Some(msg) = input.recv().await {
            match msg {
                ExecInput::Stdin(bytes) => {
                    if let Some(w) = stdin.as_mut() {
                        if w.write_all(&bytes).await.is_err() {
                            stdin = None;
                        }
                    }
                }
                ExecInput::CloseStdin => stdin = None,
                ExecInput::Resize { .. } => {}
            }
        }
    });
    let mut readers = Vec::new();
    if let Some(r) = child.stdout.take() {
        readers.push(tokio::spawn(forward(r, out.clone(), ExecOutput::Stdout)));
    }
    if let Some(r) = child.stderr.take() {
        readers.push(tokio::spawn(forward(r, out.clone(), ExecOutput::Stderr)));
    }
    readers
}

fn start_tty_io(
    master: OwnedFd,
    mut input: mpsc::Receiver<ExecInput>,
    out: &mpsc::Sender<ExecOutput>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, DriverError> {
    let node_err = |e: std::io::Error| DriverError::Node(format!("duplicating the terminal: {e}"));
    let reader =
        tokio::fs::File::from_std(std::fs::File::from(master.try_clone().map_err(node_err)?));
    let mut writer =
        tokio::fs::File::from_std(std::fs::File::from(master.try_clone().map_err(node_err)?));
    tokio::spawn(async move {
        while let Some(msg) = input.recv().await {
            match msg {
                ExecInput::Stdin(bytes) => {
                    if writer.write_all(&bytes).await.is_err() {
                        break;
                    }
                    let _ = writer.flush().await;
                }
                // A terminal has no end of input of its own: ^D is how its
                // user closes it.
                ExecInput::CloseStdin => {
                    let _ = writer.write_all(&[4]).await;
                    let _ = writer.flush().await;
                }
                ExecInput::Resize { height, width } => resize(&master, height, width),
            }
        }
    });
    Ok(vec![tokio::spawn(forward(
        reader,
        out.clone(),
        ExecOutput::Stdout,
    ))])
}

/// Copies `reader` into `out` until it ends (EOF, or EIO once a
/// terminal's last user is gone).
async fn forward<R: AsyncRead + Unpin>(
    mut reader: R,
    out: mpsc::Sender<ExecOutput>,
    wrap: fn(Vec<u8>) -> ExecOutput,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if out.send(wrap(buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A new pseudo-terminal: (master, slave).
fn open_pty() -> Result<(OwnedFd, OwnedFd), DriverError> {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two fds into the given integers; the name,
    // termios and winsize pointers may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc < 0 {
        return Err(DriverError::Node(format!(
            "opening a pseudo-terminal: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: openpty succeeded, so both are open fds owned by nobody else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    Ok((master, slave))
}

fn resize(master: &OwnedFd, height: u16, width: u16) {
    let size = libc::winsize {
        ws_row: height,
        ws_col: width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer given.
    unsafe {
        libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn collect(mut session: ExecSession) -> (String, String, ExitResult) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        while let Some(msg) = session.output.recv().await {
            match msg {
                ExecOutput::Stdout(b) => out.extend(b),
                ExecOutput::Stderr(b) => err.extend(b),
                ExecOutput::Exited(r) => {
                    return (
                        String::from_utf8_lossy(&out).into_owned(),
                        String::from_utf8_lossy(&err).into_owned(),
                        r,
                    )
                }
            }
        }
        panic!("the session ended without Exited");
    }

    #[tokio::test]
    async fn pipes_carry_stdin_stdout_stderr_and_the_exit_code() {
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", "read x; echo got $x; echo oops >&2; exit 3"]);
        let session = run_session(cmd, false).unwrap();
        session
            .input
            .send(ExecInput::Stdin(b"hello\n".to_vec()))
            .await
            .unwrap();
        session.input.send(ExecInput::CloseStdin).await.unwrap();
        let (out, err, result) = collect(session).await;
        assert_eq!(out, "got hello\n");
        assert_eq!(err, "oops\n");
        assert_eq!(result.exit_code, 3);
    }

    #[tokio::test]
    async fn a_tty_session_is_a_terminal_of_the_size_asked() {
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", "read x; test -t 0 && echo tty; stty size; exit 5"]);
        let session = run_session(cmd, true).unwrap();
        let input = session.input.clone();
        input
            .send(ExecInput::Resize {
                height: 33,
                width: 101,
            })
            .await
            .unwrap();
        input
            .send(ExecInput::Stdin(b"go\n".to_vec()))
            .await
            .unwrap();
        let (out, _, result) = collect(session).await;
        assert!(out.contains("tty\r\n"), "{out:?}");
        assert!(out.contains("33 101"), "{out:?}");
        assert_eq!(result.exit_code, 5);
    }

    #[tokio::test]
    async fn a_missing_command_is_the_users_error() {
        let cmd = std::process::Command::new("/no/such/program");
        let err = run_session(cmd, false).err().unwrap();
        assert!(!err.is_node_failure());
        assert!(err.to_string().contains("no such command"), "{err}");
    }
}
