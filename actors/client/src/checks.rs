//! Running one service check: an `http` request, a `tcp` connect or a
//! `script` in the task's directory, bounded by the check's timeout, and
//! its result in the shape Nomad 1.4 serves at
//! `/v1/client/allocation/:id/checks`.
//!
//! Outcomes follow Consul's (and Nomad's) reading: an http check passes on
//! a 2xx answer, warns on 429 and is critical otherwise; a script passes
//! on exit 0, warns on exit 1 and is critical otherwise; a tcp check
//! passes when the connection opens. Only a passing check is healthy; a
//! warning is reported as a `failure`, as Nomad's own checks do.

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// How much of a check's output is kept.
const OUTPUT_LIMIT: usize = 4096;

/// What one run of a check does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    Http {
        url: String,
        /// `GET` when the check names none.
        method: String,
        headers: Vec<(String, String)>,
        body: String,
    },
    Tcp {
        /// `host:port`.
        address: String,
    },
    Script {
        command: String,
        args: Vec<String>,
        dir: PathBuf,
        env: BTreeMap<String, String>,
    },
}

/// The outcome of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Passing,
    Warning,
    Critical,
}

/// One run's outcome, HTTP status and output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeResult {
    pub outcome: Outcome,
    /// The HTTP status of an http check (0 when no answer came).
    pub status_code: u16,
    pub output: String,
}

impl ProbeResult {
    fn critical(output: String) -> ProbeResult {
        ProbeResult {
            outcome: Outcome::Critical,
            status_code: 0,
            output,
        }
    }
}

/// Runs `probe` once, for at most `timeout`.
pub async fn run_probe(probe: &Probe, timeout: Duration) -> ProbeResult {
    match probe {
        Probe::Http {
            url,
            method,
            headers,
            body,
        } => http(url, method, headers, body, timeout).await,
        Probe::Tcp { address } => tcp(address, timeout).await,
        Probe::Script {
            command,
            args,
            dir,
            env,
        } => script(command, args, dir, env, timeout).await,
    }
}

async fn http(
    url: &str,
    method: &str,
    headers: &[(String, String)],
    body: &str,
    timeout: Duration,
) -> ProbeResult {
    let method = if method.is_empty() { "GET" } else { method };
    let (url, method) = (url.to_string(), method.to_string());
    let (headers, body) = (headers.to_vec(), body.to_string());
    let call = tokio::task::spawn_blocking(move || {
        let agent = ureq::AgentBuilder::new().timeout(timeout).build();
        let mut request = agent.request(&method, &url);
        for (name, value) in &headers {
            request = request.set(name, value);
        }
        let answer = if body.is_empty() {
            request.call()
        } else {
            request.send_string(&body)
        };
        match answer {
            Ok(r) => http_result(r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(code, r)) => {
                http_result(code, r.into_string().unwrap_or_default())
            }
            Err(e) => ProbeResult::critical(format!("{method} {url}: {e}")),
        }
    });
    call.await
        .unwrap_or_else(|e| ProbeResult::critical(format!("the check's task failed: {e}")))
}

fn http_result(code: u16, body: String) -> ProbeResult {
    let outcome = match code {
        200..=299 => Outcome::Passing,
        429 => Outcome::Warning,
        _ => Outcome::Critical,
    };
    ProbeResult {
        outcome,
        status_code: code,
        output: truncated(body),
    }
}

async fn tcp(address: &str, timeout: Duration) -> ProbeResult {
    let connect = tokio::net::TcpStream::connect(address);
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(_)) => ProbeResult {
            outcome: Outcome::Passing,
            status_code: 0,
            output: format!("TCP connect {address}: Success"),
        },
        Ok(Err(e)) => ProbeResult::critical(format!("dial tcp {address}: {e}")),
        Err(_) => ProbeResult::critical(format!("dial tcp {address}: i/o timeout")),
    }
}

async fn script(
    command: &str,
    args: &[String],
    dir: &PathBuf,
    env: &BTreeMap<String, String>,
    timeout: Duration,
) -> ProbeResult {
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args)
        .current_dir(dir)
        .env_clear()
        .envs(env)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    match tokio::time::timeout(timeout, cmd.output()).await {
        Err(_) => ProbeResult::critical(format!("script {command:?} timed out after {timeout:?}")),
        Ok(Err(e)) => ProbeResult::critical(format!("script {command:?} could not run: {e}")),
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            let outcome = match out.status.code() {
                Some(0) => Outcome::Passing,
                Some(1) => Outcome::Warning,
                _ => Outcome::Critical,
            };
            ProbeResult {
                outcome,
                status_code: 0,
                output: truncated(text),
            }
        }
    }
}

fn truncated(mut s: String) -> String {
    if s.len() > OUTPUT_LIMIT {
        let mut end = OUTPUT_LIMIT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// A check's status as the checks endpoint reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Success,
    Failure,
    Pending,
}

/// Nomad's `CheckQueryResult`: a check's latest result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CheckResult {
    #[serde(rename = "ID")]
    pub id: String,
    /// The check's name.
    pub check: String,
    pub group: String,
    pub task: String,
    pub service: String,
    pub status: CheckStatus,
    pub status_code: u16,
    pub output: String,
    /// `healthiness` (counts toward the allocation's health) or
    /// `readiness` (`on_update = "ignore"`).
    pub mode: String,
    /// Unix seconds of the result.
    pub timestamp: i64,
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
}

impl CheckResult {
    /// Whether the result counts toward the allocation's health.
    pub fn counts_for_health(&self) -> bool {
        self.mode == "healthiness"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A listener that answers every request with `status` (and counts
    /// the requests it saw) until the test ends.
    fn http_server(status: u16) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut buf = [0u8; 2048];
                let _ = stream.read(&mut buf);
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                );
            }
        });
        (address, seen)
    }

    fn http_probe(address: &str) -> Probe {
        Probe::Http {
            url: format!("http://{address}/health"),
            method: String::new(),
            headers: vec![("X-Probe".into(), "1".into())],
            body: String::new(),
        }
    }

    #[actix_rt::test]
    async fn http_checks_read_the_status_code() {
        let second = Duration::from_secs(2);
        for (status, outcome) in [
            (200, Outcome::Passing),
            (204, Outcome::Passing),
            (429, Outcome::Warning),
            (500, Outcome::Critical),
            (404, Outcome::Critical),
        ] {
            let (address, seen) = http_server(status);
            let r = run_probe(&http_probe(&address), second).await;
            assert_eq!((r.outcome, r.status_code), (outcome, status), "{status}");
            assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 1);
        }
    }

    #[actix_rt::test]
    async fn nothing_listening_is_critical() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        drop(listener);
        let r = run_probe(&http_probe(&address), Duration::from_secs(2)).await;
        assert_eq!(r.outcome, Outcome::Critical);
        let tcp = Probe::Tcp { address };
        let r = run_probe(&tcp, Duration::from_secs(2)).await;
        assert_eq!(r.outcome, Outcome::Critical, "{}", r.output);
    }

    #[actix_rt::test]
    async fn tcp_checks_pass_when_the_port_accepts() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let r = run_probe(&Probe::Tcp { address }, Duration::from_secs(2)).await;
        assert_eq!(r.outcome, Outcome::Passing, "{}", r.output);
    }

    #[actix_rt::test]
    async fn scripts_run_in_the_task_dir_with_the_task_env() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("marker"), "x").unwrap();
        let script = |code: &str| Probe::Script {
            command: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                format!("test -f marker && echo \"$GREETING\" && exit {code}"),
            ],
            dir: dir.path().to_path_buf(),
            env: [("GREETING".to_string(), "hello".to_string())].into(),
        };
        let second = Duration::from_secs(5);
        let r = run_probe(&script("0"), second).await;
        assert_eq!((r.outcome, r.output.trim()), (Outcome::Passing, "hello"));
        assert_eq!(
            run_probe(&script("1"), second).await.outcome,
            Outcome::Warning
        );
        assert_eq!(
            run_probe(&script("2"), second).await.outcome,
            Outcome::Critical
        );
        let slow = Probe::Script {
            command: "/bin/sleep".into(),
            args: vec!["5".into()],
            dir: dir.path().to_path_buf(),
            env: BTreeMap::new(),
        };
        let started = std::time::Instant::now();
        let r = run_probe(&slow, Duration::from_millis(200)).await;
        assert_eq!(r.outcome, Outcome::Critical);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the timeout did not stop it"
        );
    }
}
