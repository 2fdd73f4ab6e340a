//! `herder alloc logs`: print (or follow) a task's stdout or stderr.
//!
//! The allocation is found by ID prefix through the agent the CLI talks to;
//! its logs are read from the agent of the node that runs it (the node's
//! `HTTPAddr`), since herder does not forward client requests between
//! agents. The logs API answers Nomad's stream frames, decoded here.

use super::lookup::resolve_uuid_prefix;
use anyhow::{bail, Context};
use base64::Engine;
use clap::Args;
use herder_api_client::{path_segment, ApiClient, ApiError};
use serde::Deserialize;
use serde_json::Value;
use std::io::{Read, Write};

/// Nomad's CLI reads this many bytes per wanted line when tailing.
const BYTES_PER_LINE: u64 = 120;
/// Lines shown by `-tail` without `-n` or `-c`.
const DEFAULT_TAIL_LINES: u64 = 10;

#[derive(Debug, Args)]
pub struct AllocLogsArgs {
    /// An allocation ID or a unique prefix of one.
    pub id: String,
    /// The task; may be left out when the allocation's group has one task.
    #[arg(value_name = "TASK")]
    pub task_arg: Option<String>,
    /// The task (wins over the TASK argument).
    #[arg(long = "task", value_name = "TASK")]
    pub task: Option<String>,
    /// Show stderr instead of stdout.
    #[arg(long)]
    pub stderr: bool,
    /// Show stdout (the default).
    #[arg(long, conflicts_with = "stderr")]
    pub stdout: bool,
    /// Keep printing new output until the task ends (or Ctrl-C).
    #[arg(short = 'f')]
    pub follow: bool,
    /// Start near the end of the log: the last 10 lines unless -n or -c.
    #[arg(long)]
    pub tail: bool,
    /// With -tail (implied): the number of lines from the end.
    #[arg(short = 'n', value_name = "LINES", conflicts_with = "bytes")]
    pub lines: Option<u64>,
    /// With -tail (implied): the number of bytes from the end.
    #[arg(short = 'c', value_name = "BYTES")]
    pub bytes: Option<u64>,
}

/// Where reading starts and how many trailing lines to keep.
#[derive(Debug, PartialEq, Eq)]
struct Window {
    origin: &'static str,
    offset: u64,
    keep_lines: Option<usize>,
}

impl AllocLogsArgs {
    fn window(&self) -> Window {
        if !(self.tail || self.lines.is_some() || self.bytes.is_some()) {
            return Window {
                origin: "start",
                offset: 0,
                keep_lines: None,
            };
        }
        let (offset, keep_lines) = match (self.lines, self.bytes) {
            (_, Some(bytes)) => (bytes, None),
            (lines, None) => {
                let lines = lines.unwrap_or(DEFAULT_TAIL_LINES);
                (
                    lines.saturating_mul(BYTES_PER_LINE),
                    Some(usize::try_from(lines).unwrap_or(usize::MAX)),
                )
            }
        };
        Window {
            origin: "end",
            offset,
            keep_lines,
        }
    }

    fn log_type(&self) -> &'static str {
        if self.stderr {
            "stderr"
        } else {
            "stdout"
        }
    }
}

/// Runs `alloc logs` and returns its exit status.
pub fn run(client: &ApiClient, args: &AllocLogsArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = resolve_uuid_prefix(client, "/v1/allocations", "allocation", &args.id)?;
    let alloc = client
        .get(&format!("/v1/allocation/{}", path_segment(&id)), &[])?
        .body;
    let task = pick_task(&alloc, args)?;
    let window = args.window();
    let query = [
        ("task", task),
        ("type", args.log_type().to_string()),
        ("follow", args.follow.to_string()),
        ("origin", window.origin.to_string()),
        ("offset", window.offset.to_string()),
    ];
    let path = format!("/v1/client/fs/logs/{}", path_segment(&id));
    let stream = match node_client(client, &alloc) {
        Some(node) => match node.get_stream(&path, &query) {
            // The node's advertised address may not be reachable from here;
            // the agent the CLI talks to may be that node.
            Err(ApiError::Unreachable { .. }) => client.get_stream(&path, &query),
            other => other,
        },
        None => client.get_stream(&path, &query),
    }
    .context("reading the logs")?;
    copy_frames(stream, window.keep_lines, out)?;
    Ok(0)
}

/// The task asked for, or the group's only task.
fn pick_task(alloc: &Value, args: &AllocLogsArgs) -> anyhow::Result<String> {
    choose_task(alloc, args.task.as_deref().or(args.task_arg.as_deref()))
}

/// `wanted` when the allocation's group has it, or the group's only task.
pub(super) fn choose_task(alloc: &Value, wanted: Option<&str>) -> anyhow::Result<String> {
    let group_name = alloc["TaskGroup"].as_str().unwrap_or_default();
    let tasks: Vec<&str> = alloc["Job"]["TaskGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["Name"] == group_name)
        .flat_map(|g| g["Tasks"].as_array().into_iter().flatten())
        .filter_map(|t| t["Name"].as_str())
        .collect();
    match wanted {
        Some("") => bail!("Task name required"),
        Some(t) if !tasks.is_empty() && !tasks.contains(&t) => bail!(
            "Failed to validate task: task {t:?} not found in allocation {group_name:?} (tasks: {})",
            tasks.join(", ")
        ),
        Some(t) => Ok(t.to_string()),
        None if tasks.len() == 1 => Ok(tasks[0].to_string()),
        None => bail!(
            "Allocation {:?} is running the following tasks:\n{}\n\nPlease specify the task.",
            alloc["ID"].as_str().unwrap_or_default(),
            tasks
                .iter()
                .map(|t| format!("  * {t}"))
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

/// A client for the agent of the node that runs `alloc`, when the node
/// advertises a usable HTTP address.
pub(super) fn node_client(client: &ApiClient, alloc: &Value) -> Option<ApiClient> {
    let node_id = alloc["NodeID"].as_str().filter(|n| !n.is_empty())?;
    let node = client
        .get(&format!("/v1/node/{}", path_segment(node_id)), &[])
        .ok()?
        .body;
    let addr: std::net::SocketAddr = node["HTTPAddr"].as_str()?.parse().ok()?;
    if addr.port() == 0 {
        return None;
    }
    let host = if addr.ip().is_unspecified() {
        // Bound on every interface: reach it where the CLI reaches agents.
        let base = client.address().trim_start_matches("http://");
        base.rsplit_once(':').map_or(base, |(h, _)| h).to_string()
    } else {
        addr.ip().to_string()
    };
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host
    };
    client
        .at_address(&format!("http://{host}:{}", addr.port()))
        .ok()
}

/// One of Nomad's stream frames; heartbeats are `{}`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct Frame {
    data: Option<String>,
    file_event: Option<String>,
}

/// Writes the frames' data as it arrives. With `keep_lines`, what arrives
/// before the first heartbeat (the backlog) is cut to its last lines first.
pub(super) fn copy_frames(
    stream: Box<dyn Read + Send + Sync>,
    keep_lines: Option<usize>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut backlog = keep_lines.map(|n| (n, Vec::new()));
    let frames =
        serde_json::Deserializer::from_reader(std::io::BufReader::new(stream)).into_iter::<Frame>();
    for frame in frames {
        let frame = frame.context("reading a log frame")?;
        let data = match frame.data.as_deref() {
            Some(text) => base64::engine::general_purpose::STANDARD
                .decode(text)
                .context("a log frame's data is not base64")?,
            None => Vec::new(),
        };
        let heartbeat = data.is_empty() && frame.file_event.is_none();
        if let Some((n, buf)) = &mut backlog {
            buf.extend_from_slice(&data);
            if heartbeat {
                out.write_all(last_lines(buf, *n))?;
                out.flush()?;
                backlog = None;
            }
            continue;
        }
        if !data.is_empty() {
            out.write_all(&data)?;
            out.flush()?;
        }
    }
    if let Some((n, buf)) = backlog {
        out.write_all(last_lines(&buf, n))?;
    }
    out.flush()?;
    Ok(())
}

/// The last `n` lines of `data` (a final line without newline counts).
pub(super) fn last_lines(data: &[u8], n: usize) -> &[u8] {
    if n == 0 {
        return &[];
    }
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    let mut start = body.len();
    for _ in 0..n {
        match body[..start].iter().rposition(|b| *b == b'\n') {
            Some(i) => start = i,
            None => return data,
        }
    }
    &data[start + 1..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_keeps_the_tail_with_or_without_a_final_newline() {
        assert_eq!(last_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(last_lines(b"a\nb\nc", 2), b"b\nc");
        assert_eq!(last_lines(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(last_lines(b"partial line\nx\n", 1), b"x\n");
        assert_eq!(last_lines(b"a\n", 0), b"");
    }
}
