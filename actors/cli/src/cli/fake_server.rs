//! A tiny HTTP/1.1 server for the CLI's tests: it records every request
//! (method, path, query, headers, body) and answers from a routing closure,
//! so tests can check exactly what each verb sends and feed it real Nomad
//! answers from the fixtures.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// Decoded query parameters (the last of a repeated one).
    pub query: BTreeMap<String, String>,
    /// The query string as sent, for parameters that repeat.
    pub raw_query: String,
    /// Header names lowercased.
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

impl Seen {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// A canned answer: status, body and the X-Nomad-Index header.
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub index: u64,
}

impl Reply {
    pub fn ok(body: impl Into<String>, index: u64) -> Self {
        Reply {
            status: 200,
            body: body.into(),
            index,
        }
    }
    pub fn status(status: u16, body: &str) -> Self {
        Reply {
            status,
            body: body.to_string(),
            index: 0,
        }
    }
}

type Router = dyn Fn(&Seen) -> Reply + Send + Sync;

pub struct FakeServer {
    pub address: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeServer {
    /// Serves until the test process ends (threads are detached).
    pub fn start(router: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let router: Arc<Router> = Arc::new(router);
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (router, log) = (router.clone(), log.clone());
                std::thread::spawn(move || serve(stream, &*router, &log));
            }
        });
        FakeServer { address, seen }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The first request with this method and path.
    pub fn request(&self, method: &str, path: &str) -> Seen {
        self.requests()
            .into_iter()
            .find(|r| r.method == method && r.path == path)
            .unwrap_or_else(|| panic!("no {method} {path} in {:#?}", self.requests()))
    }
}

/// Reads a fixture file of the Nomad 1.1.2 answers.
pub fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../../tests/fixtures/nomad-1.1.2/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn serve(stream: TcpStream, router: &Router, log: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let mut headers = BTreeMap::new();
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).unwrap();
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((k, v)) = header.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let length: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let (path, query) = split_target(&target);
        let raw_query = target.split_once('?').map_or("", |(_, q)| q).to_string();
        let seen = Seen {
            method,
            path,
            query,
            raw_query,
            headers,
            body: String::from_utf8(body).unwrap(),
        };
        log.lock().unwrap().push(seen.clone());
        let reply = router(&seen);
        let mut stream = &stream;
        let _ = write!(
            stream,
            "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nX-Nomad-Index: {}\r\nContent-Length: {}\r\n\r\n{}",
            reply.status,
            reply.index,
            reply.body.len(),
            reply.body
        );
    }
}

fn split_target(target: &str) -> (String, BTreeMap<String, String>) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let pairs = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    (path.to_string(), pairs)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}
