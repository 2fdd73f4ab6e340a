//! `herder alloc fs <alloc> [path]`: look into an allocation's directory
//! as Nomad's `alloc fs` does: a directory is listed, a file printed
//! (`-f` follows it, `-tail` with `-n`/`-c` starts near its end), `-stat`
//! shows one entry. Requests go to the agent the CLI talks to, which
//! routes them to the node that runs the allocation.

use super::alloc_logs::{copy_frames, last_lines};
use super::lookup::resolve_uuid_prefix;
use super::stats_output::{file_list, file_stat};
use anyhow::{bail, Context};
use clap::Args;
use herder_api_client::{path_segment, ApiClient};
use std::io::{Read, Write};

/// Nomad's CLI reads this many bytes per wanted line when tailing.
const BYTES_PER_LINE: u64 = 120;
/// Lines shown by `-tail` without `-n` or `-c`.
const DEFAULT_TAIL_LINES: u64 = 10;

#[derive(Debug, Args)]
pub struct AllocFsArgs {
    /// An allocation ID or a unique prefix of one (with -job: a job ID).
    pub id: String,
    /// A path inside the allocation directory.
    #[arg(default_value = "/")]
    pub path: String,
    /// Show the file's information instead of its content.
    #[arg(long)]
    pub stat: bool,
    /// Sizes in bytes rather than human units.
    #[arg(short = 'H')]
    pub machine: bool,
    /// Full IDs.
    #[arg(long)]
    pub verbose: bool,
    /// Take a running allocation of the job named by the first argument.
    #[arg(long)]
    pub job: bool,
    /// Keep printing what is appended to the file (Ctrl-C stops).
    #[arg(short = 'f')]
    pub follow: bool,
    /// Start near the end of the file: the last 10 lines unless -n or -c.
    #[arg(long)]
    pub tail: bool,
    /// With -tail: the number of lines from the end.
    #[arg(short = 'n', value_name = "LINES", conflicts_with = "bytes")]
    pub lines: Option<u64>,
    /// With -tail: the number of bytes from the end.
    #[arg(short = 'c', value_name = "BYTES")]
    pub bytes: Option<u64>,
}

/// Runs `alloc fs` and returns its exit status.
pub fn run(client: &ApiClient, args: &AllocFsArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = if args.job {
        job_alloc(client, &args.id)?
    } else {
        resolve_uuid_prefix(client, "/v1/allocations", "allocation", &args.id)?
    };
    let seg = path_segment(&id);
    let path = [("path", args.path.clone())];
    let info = client
        .get(&format!("/v1/client/fs/stat/{seg}"), &path)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .body;
    if args.stat {
        write!(out, "{}", file_stat(&info, args.machine))?;
        return Ok(0);
    }
    if info["IsDir"] == true {
        let files = client
            .get(&format!("/v1/client/fs/ls/{seg}"), &path)
            .context("Error listing alloc dir")?
            .body;
        let files = files.as_array().cloned().unwrap_or_default();
        write!(out, "{}", file_list(&files, args.machine))?;
        return Ok(0);
    }
    let size = info["Size"].as_u64().unwrap_or(0);
    print_file(client, &seg, args, size, out)?;
    Ok(0)
}

/// A running allocation of the job (else any of its allocations).
fn job_alloc(client: &ApiClient, job: &str) -> anyhow::Result<String> {
    let allocs = client
        .get(&format!("/v1/job/{}/allocations", path_segment(job)), &[])
        .context("Error fetching allocations")?
        .body;
    let allocs = allocs.as_array().cloned().unwrap_or_default();
    let pick = allocs
        .iter()
        .find(|a| a["ClientStatus"] == "running")
        .or_else(|| allocs.first())
        .and_then(|a| a["ID"].as_str());
    match pick {
        Some(id) => Ok(id.to_string()),
        None => bail!("job {job:?} doesn't exist or it has no allocations"),
    }
}

/// Where a tail starts from the end, and the lines it keeps.
fn tail_window(args: &AllocFsArgs, size: u64) -> (u64, Option<usize>) {
    let (offset, lines) = match (args.lines, args.bytes) {
        (_, Some(bytes)) => (bytes, None),
        (lines, None) => {
            let lines = lines.unwrap_or(DEFAULT_TAIL_LINES);
            (lines.saturating_mul(BYTES_PER_LINE), Some(lines))
        }
    };
    let keep = lines.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    (offset.min(size), keep)
}

fn print_file(
    client: &ApiClient,
    seg: &str,
    args: &AllocFsArgs,
    size: u64,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let path = args.path.clone();
    let tail = args.tail || args.lines.is_some() || args.bytes.is_some();
    if !tail {
        if args.follow {
            let query = [
                ("path", path),
                ("origin", "start".into()),
                ("offset", "0".into()),
            ];
            let stream = client
                .get_stream(&format!("/v1/client/fs/stream/{seg}"), &query)
                .context("Error reading file")?;
            return copy_frames(stream, None, out);
        }
        let mut body = client
            .get_stream(&format!("/v1/client/fs/cat/{seg}"), &[("path", path)])
            .context("Error reading file")?;
        std::io::copy(&mut body, out)?;
        return Ok(());
    }
    let (offset, keep) = tail_window(args, size);
    if args.follow {
        let query = [
            ("path", path),
            ("origin", "end".into()),
            ("offset", offset.to_string()),
        ];
        let stream = client
            .get_stream(&format!("/v1/client/fs/stream/{seg}"), &query)
            .context("Error tailing file")?;
        return copy_frames(stream, keep, out);
    }
    let query = [("path", path), ("offset", (size - offset).to_string())];
    let mut body = Vec::new();
    client
        .get_stream(&format!("/v1/client/fs/readat/{seg}"), &query)
        .context("Error tailing file")?
        .read_to_end(&mut body)?;
    match keep {
        Some(n) => out.write_all(last_lines(&body, n))?,
        None => out.write_all(&body)?,
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(lines: Option<u64>, bytes: Option<u64>) -> AllocFsArgs {
        AllocFsArgs {
            id: "a".into(),
            path: "/".into(),
            stat: false,
            machine: false,
            verbose: false,
            job: false,
            follow: false,
            tail: true,
            lines,
            bytes,
        }
    }

    #[test]
    fn a_tail_starts_as_nomads_does() {
        assert_eq!(tail_window(&args(None, None), 10_000), (1200, Some(10)));
        assert_eq!(tail_window(&args(Some(2), None), 10_000), (240, Some(2)));
        assert_eq!(tail_window(&args(None, Some(5)), 10_000), (5, None));
        assert_eq!(tail_window(&args(None, None), 100), (100, Some(10)));
    }
}
