//! `herder alloc exec [-task T] [-i] [-t] <alloc> <command> [args...]`:
//! runs a command beside a running task, in the task's isolation, with
//! this terminal's input and output, and exits with the command's status.
//!
//! The session is the websocket of `/v1/client/allocation/:id/exec` (see
//! the HTTP API's `client_exec_routes`) on the agent of the node that runs
//! the allocation, in Nomad's JSON frames. One blocking connection carries
//! both directions: reads time out briefly so stdin (read by a thread)
//! and the socket take turns. With `-t` this terminal is put in raw mode
//! for the session and its size sent along.
//!
//! Words of the command that look like Nomad's one-dash long flags
//! (`-la`) are rewritten like every flag before parsing: put `--` before
//! such a command.

use super::alloc_logs::{choose_task, node_client};
use super::lookup::resolve_uuid_prefix;
use anyhow::{bail, Context};
use base64::Engine;
use clap::Args;
use herder_api_client::{path_segment, ApiClient};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};

/// How long a read of the socket waits before stdin gets its turn.
const POLL: Duration = Duration::from_millis(20);

#[derive(Debug, Args)]
#[command(trailing_var_arg = true)]
pub struct AllocExecArgs {
    /// The task; may be left out when the allocation's group has one task.
    #[arg(long = "task", value_name = "TASK")]
    pub task: Option<String>,
    /// Pass stdin to the command (default true; `-i=false` to not).
    #[arg(short = 'i', long = "i", num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub stdin: Option<bool>,
    /// Give the command a terminal (default: when stdin is one).
    #[arg(short = 't', long = "t", num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    pub tty: Option<bool>,
    /// An allocation ID or a unique prefix of one.
    pub id: String,
    /// The command and its arguments.
    #[arg(required = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// Runs `alloc exec`; its status is the command's exit code.
pub fn run(client: &ApiClient, args: &AllocExecArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = resolve_uuid_prefix(client, "/v1/allocations", "allocation", &args.id)?;
    let alloc = client
        .get(&format!("/v1/allocation/{}", path_segment(&id)), &[])?
        .body;
    if alloc["ClientStatus"]
        .as_str()
        .is_some_and(|s| s != "running" && s != "pending")
    {
        bail!("Allocation {id} is not running");
    }
    let task = choose_task(&alloc, args.task.as_deref())?;
    // SAFETY: isatty only inspects the descriptor.
    let stdin_is_tty = unsafe { libc::isatty(0) } == 1;
    let tty = args.tty.unwrap_or(stdin_is_tty);
    let agent = node_client(client, &alloc).unwrap_or_else(|| client.clone());
    let command = serde_json::to_string(&args.command)?;
    let query = serde_urlencoded::to_string([
        ("task", task.as_str()),
        ("tty", if tty { "true" } else { "false" }),
        ("command", command.as_str()),
    ])?;
    let url = format!(
        "{}/v1/client/allocation/{}/exec?{query}",
        agent.address().replacen("http://", "ws://", 1),
        path_segment(&id)
    );
    let mut socket = connect(&url, agent.token())?;
    let raw = if tty && stdin_is_tty {
        RawTerminal::enter()
    } else {
        None
    };
    if tty {
        if let Some((height, width)) = terminal_size() {
            send(
                &mut socket,
                json!({"tty_size": {"height": height, "width": width}}),
            )?;
        }
    }
    let code = session(&mut socket, args.stdin.unwrap_or(true), out);
    drop(raw);
    code
}

/// Opens the websocket, turning an HTTP refusal into its message.
fn connect(url: &str, token: Option<&str>) -> anyhow::Result<WebSocket<TcpStream>> {
    let mut request = url.into_client_request()?;
    if let Some(token) = token {
        request
            .headers_mut()
            .insert("X-Nomad-Token", token.parse()?);
    }
    let host = request.uri().host().unwrap_or("127.0.0.1").to_string();
    let port = request.uri().port_u16().unwrap_or(4646);
    let stream = TcpStream::connect((host.as_str(), port))
        .with_context(|| format!("connecting to {host}:{port}"))?;
    match tungstenite::client(request, stream) {
        Ok((socket, _)) => {
            socket.get_ref().set_read_timeout(Some(POLL))?;
            Ok(socket)
        }
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
            let body = response
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            bail!("{} ({})", body.trim(), response.status())
        }
        Err(e) => bail!("starting the exec session: {e}"),
    }
}

fn send(socket: &mut WebSocket<TcpStream>, frame: Value) -> anyhow::Result<()> {
    socket.send(Message::Text(frame.to_string()))?;
    Ok(())
}

/// Carries stdin to the socket and the socket's output here until the
/// command exits; answers its exit code.
fn session(
    socket: &mut WebSocket<TcpStream>,
    pass_stdin: bool,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let input = if pass_stdin {
        Some(read_stdin())
    } else {
        send(socket, json!({"stdin": {"close": true}}))?;
        None
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    loop {
        if let Some(rx) = &input {
            while let Ok(chunk) = rx.try_recv() {
                let frame = match chunk {
                    Some(bytes) => json!({"stdin": {"data": b64.encode(bytes)}}),
                    None => json!({"stdin": {"close": true}}),
                };
                send(socket, frame)?;
            }
        }
        let text = match socket.read() {
            Ok(Message::Text(t)) => t,
            Ok(Message::Binary(b)) => String::from_utf8_lossy(&b).into_owned(),
            Ok(Message::Close(_)) => {
                bail!("the agent closed the session before the command exited")
            }
            Ok(_) => continue,
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => bail!("exec session: {e}"),
        };
        let frame: Value = serde_json::from_str(&text).unwrap_or_default();
        if frame["exited"] == true {
            let code = frame["result"]["exit_code"].as_i64().unwrap_or(0);
            let _ = socket.close(None);
            return Ok(u8::try_from(code.rem_euclid(256)).unwrap_or(1));
        }
        for (key, to_stdout) in [("stdout", true), ("stderr", false)] {
            let Some(data) = frame[key]["data"].as_str() else {
                continue;
            };
            let bytes = b64.decode(data).unwrap_or_default();
            if to_stdout {
                out.write_all(&bytes)?;
                out.flush()?;
            } else {
                let mut err = std::io::stderr();
                err.write_all(&bytes)?;
                err.flush()?;
            }
        }
    }
}

/// Reads stdin on a thread: chunks, then `None` at its end.
fn read_stdin() -> mpsc::Receiver<Option<Vec<u8>>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
                Ok(n) => {
                    if tx.send(Some(buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// This terminal's size (rows, columns), when stdout is a terminal.
fn terminal_size() -> Option<(u16, u16)> {
    // SAFETY: TIOCGWINSZ fills the winsize given.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_row > 0).then_some((size.ws_row, size.ws_col))
}

/// This terminal in raw mode (keys go to the remote terminal as typed);
/// restored on drop.
struct RawTerminal {
    saved: libc::termios,
}

impl RawTerminal {
    fn enter() -> Option<RawTerminal> {
        // SAFETY: tcgetattr/tcsetattr read and write the termios given.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut saved) != 0 {
                return None;
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            (libc::tcsetattr(0, libc::TCSANOW, &raw) == 0).then_some(RawTerminal { saved })
        }
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `enter`.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.saved);
        }
    }
}
