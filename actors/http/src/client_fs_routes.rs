//! `/v1/client/fs/{ls,stat,cat,readat,stream}/:alloc_id?path=`: an
//! allocation's directory as `nomad alloc fs` reads it, with Nomad's
//! parameters, answers and errors.
//!
//! The agent whose client keeps the allocation answers from its disk
//! (`herder_client::alloc_fs`: paths confined to the allocation directory);
//! any other agent routes the request there (`alloc_routing`). `ls` and
//! `stat` answer `AllocFileInfo` JSON; `cat` and `readat` the file's bytes
//! (`readat` from `offset`, at most `limit`); `stream` Nomad's
//! `StreamFrame`s, following the file (`follow`, true unless said
//! otherwise) with `{}` heartbeats and a `file truncated` or `file
//! deleted` event when it shrinks or goes. Every read is streamed a frame
//! (64 KiB) at a time, so no answer holds a file in memory.

use super::alloc_routing::{alloc_route, path_and_query, unknown_alloc, Route};
use super::errors::ApiError;
use super::forward::{forward_get, forward_stream};
use super::query::QueryOptions;
use super::stream_frame::{StreamFrame, DELETE_EVENT, FRAME_BYTES, TRUNCATE_EVENT};
use crate::AgentInfo;
use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use herder::structs::AllocId;
use herder_client::alloc_fs::{self, FsError};
use herder_client::alloc_runner::persisted_alloc;
use herder_client::task_dir::AllocDir;
use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a forwarded request may wait for the other agent's answer
/// (for a stream: its first bytes).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a follower looks for new content.
const FOLLOW_POLL: Duration = Duration::from_millis(250);
/// An idle follower sends `{}` this often (Nomad's heartbeat rate).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// What `cat` and `readat` answer as: the bytes, never sniffed by a
/// browser (Nomad wraps them as untrusted content).
const PLAIN: &str = "text/plain; charset=utf-8";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/client/fs/ls/{alloc_id}", web::get().to(ls))
        .route("/v1/client/fs/stat/{alloc_id}", web::get().to(stat))
        .route("/v1/client/fs/cat/{alloc_id}", web::get().to(cat))
        .route("/v1/client/fs/readat/{alloc_id}", web::get().to(readat))
        .route("/v1/client/fs/stream/{alloc_id}", web::get().to(stream));
}

/// The allocation asked for, and where it is answered.
fn route(info: &AgentInfo, req: &HttpRequest, raw_id: &str) -> Result<(AllocId, Route), ApiError> {
    if raw_id.is_empty() {
        return Err(ApiError::BadRequest("must provide a valid alloc id".into()));
    }
    let id: AllocId = raw_id.parse().map_err(|_| unknown_alloc(raw_id))?;
    let here = persisted_alloc(&info.data_dir, &id)
        .map_err(|e| ApiError::Internal(format!("reading allocation {id}: {e}")))?
        .is_some();
    Ok((id, alloc_route(info, req, &id, here, |_| Ok(()))?))
}

fn alloc_root(info: &AgentInfo, id: &AllocId) -> PathBuf {
    AllocDir::new(&info.data_dir, id).root
}

/// The `path` parameter, required (Nomad's text when it is missing).
fn required_path(q: &QueryOptions) -> Result<String, ApiError> {
    q.param("path")
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .ok_or_else(|| ApiError::BadRequest("must provide a file name".into()))
}

/// Runs a file operation off the async threads; its errors are 500s with
/// Nomad's texts (as Nomad's `FileSystem.List`/`Stat` answer them).
async fn on_disk<T: Send + 'static>(
    op: impl FnOnce() -> Result<T, FsError> + Send + 'static,
) -> Result<T, ApiError> {
    web::block(op)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| ApiError::Internal(e.to_string()))
}

async fn ls(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    alloc_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let path = q
        .param("path")
        .filter(|p| !p.is_empty())
        .unwrap_or("/")
        .to_string();
    match route(&info, &req, &alloc_id)? {
        (id, Route::Here) => {
            let root = alloc_root(&info, &id);
            let files = on_disk(move || alloc_fs::list(&root, &path)).await?;
            Ok(HttpResponse::Ok().json(files))
        }
        (_, Route::There { address, hop }) => {
            forward_get(&req, &address, hop, &path_and_query(&req), FORWARD_TIMEOUT).await
        }
    }
}

async fn stat(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    alloc_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let path = required_path(&q)?;
    match route(&info, &req, &alloc_id)? {
        (id, Route::Here) => {
            let root = alloc_root(&info, &id);
            let file = on_disk(move || alloc_fs::stat(&root, &path)).await?;
            Ok(HttpResponse::Ok().json(file))
        }
        (_, Route::There { address, hop }) => {
            forward_get(&req, &address, hop, &path_and_query(&req), FORWARD_TIMEOUT).await
        }
    }
}

/// What a read asks for, as Nomad's `FsStreamRequest`.
#[derive(Debug, PartialEq, Eq)]
struct ReadRequest {
    path: String,
    offset: u64,
    /// From the end of the file rather than its start.
    from_end: bool,
    /// At most this many bytes (`None`: to the end).
    limit: Option<u64>,
    follow: bool,
    /// Raw bytes instead of frames.
    plain: bool,
}

/// An integer parameter, with Go's `strconv.ParseInt` words on error.
fn int_param(q: &QueryOptions, name: &str, required: bool) -> Result<Option<i64>, ApiError> {
    let value = match q.param(name) {
        Some(v) if !v.is_empty() || required => v,
        None if required => "",
        _ => return Ok(None),
    };
    value.parse::<i64>().map(Some).map_err(|_| {
        ApiError::Internal(format!(
            "error parsing {name}: strconv.ParseInt: parsing {value:?}: invalid syntax"
        ))
    })
}

impl ReadRequest {
    fn cat(q: &QueryOptions) -> Result<ReadRequest, ApiError> {
        Ok(ReadRequest {
            path: required_path(q)?,
            offset: 0,
            from_end: false,
            limit: None,
            follow: false,
            plain: true,
        })
    }

    fn readat(q: &QueryOptions) -> Result<ReadRequest, ApiError> {
        let path = required_path(q)?;
        let offset = int_param(q, "offset", true)?.unwrap_or(0);
        let limit = int_param(q, "limit", false)?.filter(|l| *l > 0);
        Ok(ReadRequest {
            path,
            offset: u64::try_from(offset).unwrap_or(0),
            from_end: false,
            limit: limit.and_then(|l| u64::try_from(l).ok()),
            follow: false,
            plain: true,
        })
    }

    fn stream(q: &QueryOptions) -> Result<ReadRequest, ApiError> {
        let path = required_path(q)?;
        let follow = match q.param("follow").filter(|f| !f.is_empty()) {
            None => true,
            Some(_) => q.flag("follow").map_err(|e| {
                ApiError::Internal(format!("failed to parse follow field to boolean: {e}"))
            })?,
        };
        let offset = int_param(q, "offset", false)?.unwrap_or(0);
        let from_end = match q.param("origin") {
            None | Some("" | "start") => false,
            Some("end") => true,
            Some(_) => return Err(ApiError::BadRequest("origin must be start or end".into())),
        };
        Ok(ReadRequest {
            path,
            offset: u64::try_from(offset).unwrap_or(0),
            from_end,
            limit: None,
            follow,
            plain: false,
        })
    }
}

async fn cat(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    alloc_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let request = ReadRequest::cat(&q)?;
    read(&info, &req, &alloc_id, request).await
}

async fn readat(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    alloc_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let request = ReadRequest::readat(&q)?;
    read(&info, &req, &alloc_id, request).await
}

async fn stream(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    alloc_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let request = ReadRequest::stream(&q)?;
    read(&info, &req, &alloc_id, request).await
}

/// Serves a read here, or sends it on to the agent that can.
async fn read(
    info: &web::Data<AgentInfo>,
    req: &HttpRequest,
    alloc_id: &str,
    request: ReadRequest,
) -> Result<HttpResponse, ApiError> {
    let content_type = if request.plain {
        PLAIN
    } else {
        "application/json"
    };
    let id = match route(info, req, alloc_id)? {
        (id, Route::Here) => id,
        (_, Route::There { address, hop }) => {
            let path = path_and_query(req);
            return forward_stream(req, &address, hop, &path, content_type, FORWARD_TIMEOUT).await;
        }
    };
    let root = alloc_root(info, &id);
    let streamer = open(root, request).await?;
    let mut shutting_down = info.shutting_down.subscribe();
    let body = futures::stream::unfold(streamer, |mut s| async move {
        s.next_chunk()
            .await
            .map(|chunk| (Ok::<_, ApiError>(chunk), s))
    })
    .take_until(async move {
        let _ = shutting_down.wait_for(|down| *down).await;
    });
    Ok(HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Cache-Control", "no-store"))
        .streaming(body))
}

/// Checks the file as Nomad does before it streams (stat errors and
/// directories are 400s, a refused read a 500) and opens it.
async fn open(root: PathBuf, request: ReadRequest) -> Result<FileStreamer, ApiError> {
    let opened = web::block(move || {
        let info = alloc_fs::stat(&root, &request.path)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        if info.is_dir {
            return Err(ApiError::BadRequest(format!(
                "file {:?} is a directory",
                request.path
            )));
        }
        let size = u64::try_from(info.size).unwrap_or(0);
        let offset = if request.from_end {
            size.saturating_sub(request.offset)
        } else {
            request.offset
        };
        let file = alloc_fs::open_at(&root, &request.path, offset)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok(FileStreamer {
            root,
            file,
            offset,
            remaining: request.limit,
            follow: request.follow,
            plain: request.plain,
            path: request.path,
            last_sent: Instant::now(),
            done: false,
        })
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    opened
}

/// One reader of one file, producing the response body piece by piece.
struct FileStreamer {
    root: PathBuf,
    file: File,
    /// Where the next read starts.
    offset: u64,
    remaining: Option<u64>,
    follow: bool,
    plain: bool,
    /// The path as the caller named it (each frame's `File`).
    path: String,
    last_sent: Instant,
    done: bool,
}

/// What a follower finds when it looks at its file again.
enum Change {
    Same,
    Truncated,
    Deleted,
}

impl FileStreamer {
    /// The next piece of the body, `None` at its end.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        loop {
            let want = self
                .remaining
                .map_or(FRAME_BYTES, |r| r.min(FRAME_BYTES as u64) as usize);
            let data = if want == 0 {
                Vec::new()
            } else {
                match alloc_fs::read_chunk(&mut self.file, want) {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::warn!(path = %self.path, error = %e, "reading an allocation's file");
                        return None;
                    }
                }
            };
            if !data.is_empty() {
                return Some(self.data_chunk(data));
            }
            if !self.follow || want == 0 {
                return None;
            }
            match self.look_again() {
                Change::Deleted => {
                    self.done = true;
                    return Some(self.event(DELETE_EVENT));
                }
                Change::Truncated => {
                    let reopened = alloc_fs::open_at(&self.root, &self.path, 0).ok()?;
                    self.file = reopened;
                    self.offset = 0;
                    return Some(self.event(TRUNCATE_EVENT));
                }
                Change::Same => {}
            }
            tokio::time::sleep(FOLLOW_POLL).await;
            if self.last_sent.elapsed() >= HEARTBEAT_EVERY {
                self.last_sent = Instant::now();
                return Some(StreamFrame::default().encode());
            }
        }
    }

    fn data_chunk(&mut self, data: Vec<u8>) -> Bytes {
        self.offset += data.len() as u64;
        if let Some(r) = &mut self.remaining {
            *r = r.saturating_sub(data.len() as u64);
        }
        self.last_sent = Instant::now();
        if self.plain {
            return Bytes::from(data);
        }
        StreamFrame::data(self.path.clone(), &data, self.offset).encode()
    }

    fn event(&mut self, event: &str) -> Bytes {
        self.last_sent = Instant::now();
        StreamFrame {
            offset: self.offset,
            file: self.path.clone(),
            file_event: event.to_string(),
            ..Default::default()
        }
        .encode()
    }

    fn look_again(&self) -> Change {
        match alloc_fs::stat(&self.root, &self.path) {
            Err(FsError::NotFound { .. }) => Change::Deleted,
            Ok(info) if u64::try_from(info.size).unwrap_or(0) < self.offset => Change::Truncated,
            _ => Change::Same,
        }
    }
}

#[cfg(test)]
#[path = "client_fs_routes_tests.rs"]
mod tests;
