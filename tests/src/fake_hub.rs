//! A fake Hugging Face Hub on `127.0.0.1:0`, serving exactly what hf-hub 0.5's async API calls
//! (read from `hf-hub-0.5.0/src/api/tokio.rs`):
//!
//! - `GET /api/datasets/{owner}/{name}/revision/{revision}` (`ApiRepo::info`; a `/` in the
//!   revision arrives as `%2F`): `200` with JSON `{"id", "sha", "siblings": [{"rfilename",
//!   "size"}]}` (the Hub lists sizes with `?blobs=true`; `gen doctor` asks for them).
//! - `GET /datasets/{owner}/{name}/resolve/{revision}/{path}`, first with `Range: bytes=0-0`
//!   (`Api::metadata`, which needs `x-repo-commit`, `etag` or `x-linked-etag`, and
//!   `content-range: bytes 0-0/{size}`), then once per 10 MB chunk with
//!   `Range: bytes={start}-{stop}` where `stop` may be one past the last byte (clamped here).
//!   Answers `206` with `content-range`, `content-length` and `accept-ranges: bytes`; `200` with
//!   the whole file without `Range`.
//!
//! Python's `huggingface_hub.hf_hub_download` needs nothing more: a `HEAD` on the same
//! `resolve` route (answered like the `GET`; hyper sends no body for a `HEAD`) for the commit
//! and etag, then a `GET` (`it::python` runs the real client against this hub). Its
//! `snapshot_download` lists files with `/api/datasets/{repo}/tree/{revision}`, not served.
//!
//! A repository marked `redirect` answers `resolve` as the Hub does for LFS files: `302` to
//! `http://localhost:{port}/cdn/{sha256}` (another origin, like the real CDN), carrying
//! `x-repo-commit`, `x-linked-etag` and `x-linked-size`; `GET /cdn/{sha256}` serves the bytes with
//! `Range` support and none of the Hub's headers.
//!
//! `x-linked-etag` is the sha256 of the content, as the real Hub sends for LFS files, so blobs
//! land in the cache under the same names Python's `huggingface_hub` uses. Access rules mimic
//! the Hub, with its `X-Error-Code` and `X-Error-Message` headers (the codes
//! `huggingface_hub.utils.hf_raise_for_status` tells apart): a gated repository answers `401`
//! without a token and `403` with a wrong one (`GatedRepo`); an unknown repository answers
//! `401` without a token and `404` with one (`RepoNotFound`: the Hub does not tell a missing
//! repository from a private one to a stranger); an unknown revision `404`
//! (`RevisionNotFound`), an unknown file `404` (`EntryNotFound`). Every request is recorded
//! (with its `Authorization` header) so tests can check what was sent, and the first N
//! requests can be made to fail with `500` to exercise retries.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use sha2::{Digest, Sha256};

/// One dataset repository at one commit.
#[derive(Debug, Clone)]
pub struct FakeRepo {
    pub id: String,
    pub sha: String,
    /// Branch names that resolve to `sha` (besides `sha` itself).
    pub branches: Vec<String>,
    pub files: BTreeMap<String, Vec<u8>>,
    /// `Some(token)`: gated; only this bearer token may read.
    pub token: Option<String>,
    /// Files listed in `siblings` but missing on `resolve` (a broken upload).
    pub unresolvable: Vec<String>,
    /// Serve files through a `302` to the fake CDN.
    pub redirect: bool,
}

impl FakeRepo {
    pub fn new(id: &str, files: Vec<(&str, Vec<u8>)>) -> FakeRepo {
        let sha = format!("{:040x}", u128::from(fnv(id.as_bytes())));
        FakeRepo {
            id: id.to_owned(),
            sha,
            branches: vec!["main".to_owned()],
            files: files.into_iter().map(|(p, b)| (p.to_owned(), b)).collect(),
            token: None,
            unresolvable: Vec::new(),
            redirect: false,
        }
    }

    pub fn gated(mut self, token: &str) -> FakeRepo {
        self.token = Some(token.to_owned());
        self
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One request as the hub saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

struct Shared {
    repos: Vec<FakeRepo>,
    port: std::sync::OnceLock<u16>,
    seen: Mutex<Vec<Seen>>,
    fail_next: AtomicU32,
    /// 1-based request numbers that fail with `500`.
    fail_at: Mutex<Vec<usize>>,
}

/// A running fake hub; stops when dropped.
pub struct FakeHub {
    pub endpoint: String,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeHub {
    /// Serves `repos` on a fresh port, on its own thread and runtime (the code under test
    /// blocks on a runtime of its own).
    pub fn start(repos: Vec<FakeRepo>) -> FakeHub {
        let shared = Arc::new(Shared {
            repos,
            port: std::sync::OnceLock::new(),
            seen: Mutex::new(Vec::new()),
            fail_next: AtomicU32::new(0),
            fail_at: Mutex::new(Vec::new()),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, address) = std::sync::mpsc::channel();
        let state = Arc::clone(&shared);
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("fake hub runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind 127.0.0.1:0");
                ready
                    .send(listener.local_addr().expect("local address"))
                    .expect("test waits for the address");
                let app = Router::new().fallback(handle).with_state(state);
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        // A dropped sender means the test is over too.
                        stopped.await.ok();
                    })
                    .await
                    .expect("fake hub serves");
            });
        });
        let address: std::net::SocketAddr = address.recv().expect("fake hub started");
        shared.port.set(address.port()).expect("set once");
        FakeHub {
            endpoint: format!("http://{address}"),
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Makes the next `n` requests fail with `500`.
    pub fn fail_next(&self, n: u32) {
        self.shared.fail_next.store(n, Ordering::SeqCst);
    }

    /// Makes the `n`-th request (counted from the start, 1-based) fail with `500`.
    pub fn fail_request(&self, n: usize) {
        self.shared.fail_at.lock().expect("not poisoned").push(n);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().expect("not poisoned").clone()
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The server may already be gone; either way it stops.
            stop.send(()).ok();
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
            && !std::thread::panicking()
        {
            panic!("the fake hub thread panicked");
        }
    }
}

fn status(code: StatusCode, message: &str) -> Response {
    let mut response = Response::new(Body::from(format!("{{\"error\":\"{message}\"}}")));
    *response.status_mut() = code;
    response
}

/// A refusal as the Hub sends it: the status, `X-Error-Code`, `X-Error-Message` and the same
/// message as JSON.
fn refusal(code: StatusCode, error_code: &'static str, message: &str) -> Response {
    let mut response = status(code, message);
    let headers = response.headers_mut();
    headers.insert("x-error-code", HeaderValue::from_static(error_code));
    headers.insert(
        "x-error-message",
        HeaderValue::from_str(message).expect("ascii message"),
    );
    response
}

fn header_text(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let path = request.uri().path().replace("%2F", "/").replace("%2f", "/");
    let headers = request.headers();
    let authorization = header_text(headers, header::AUTHORIZATION);
    let range = header_text(headers, header::RANGE);
    let number = {
        let mut seen = shared.seen.lock().expect("not poisoned");
        seen.push(Seen {
            path: path.clone(),
            range: range.clone(),
            authorization: authorization.clone(),
        });
        seen.len()
    };
    if shared
        .fail_at
        .lock()
        .expect("not poisoned")
        .contains(&number)
    {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "injected failure");
    }
    if shared
        .fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "injected failure");
    }
    if let Some(etag) = path.strip_prefix("/cdn/") {
        let file = shared
            .repos
            .iter()
            .flat_map(|r| r.files.values())
            .find(|bytes| sha256_hex(bytes) == etag);
        return match file {
            Some(bytes) => serve_bytes(bytes, range.as_deref()),
            None => status(StatusCode::NOT_FOUND, "no such blob"),
        };
    }
    let (api, rest) = if let Some(rest) = path.strip_prefix("/api/datasets/") {
        (true, rest)
    } else if let Some(rest) = path.strip_prefix("/datasets/") {
        (false, rest)
    } else {
        return status(StatusCode::NOT_FOUND, "unknown route");
    };
    let separator = if api { "/revision/" } else { "/resolve/" };
    let Some((repo_id, rest)) = rest.split_once(separator) else {
        return status(StatusCode::NOT_FOUND, "unknown route");
    };
    let bearer = authorization
        .as_deref()
        .and_then(|a| a.strip_prefix("Bearer "));
    let Some(repo) = shared.repos.iter().find(|r| r.id == repo_id) else {
        let code = if bearer.is_some() {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::UNAUTHORIZED
        };
        return refusal(code, "RepoNotFound", "Repository not found");
    };
    if let Some(token) = &repo.token {
        match bearer {
            None => {
                return refusal(
                    StatusCode::UNAUTHORIZED,
                    "GatedRepo",
                    "Access to this dataset is restricted",
                );
            }
            Some(sent) if sent != token => {
                return refusal(
                    StatusCode::FORBIDDEN,
                    "GatedRepo",
                    "You must accept the conditions",
                );
            }
            Some(_) => {}
        }
    }
    let revisions = std::iter::once(&repo.sha).chain(&repo.branches);
    if api {
        if !revisions.clone().any(|r| r == rest) {
            return refusal(
                StatusCode::NOT_FOUND,
                "RevisionNotFound",
                &format!("Invalid rev id: {rest}"),
            );
        }
        // Sizes as the Hub lists them with `?blobs=true` (hf-hub ignores them).
        let siblings: Vec<serde_json::Value> = repo
            .files
            .iter()
            .map(|(f, bytes)| serde_json::json!({ "rfilename": f, "size": bytes.len() }))
            .chain(
                repo.unresolvable
                    .iter()
                    .map(|f| serde_json::json!({ "rfilename": f })),
            )
            .collect();
        let body = serde_json::json!({ "id": repo.id, "sha": repo.sha, "siblings": siblings });
        let mut response = Response::new(Body::from(body.to_string()));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return response;
    }
    let Some(file) = revisions
        .filter_map(|r| rest.strip_prefix(r.as_str())?.strip_prefix('/'))
        .next()
    else {
        let revision = rest.split('/').next().unwrap_or(rest);
        return refusal(
            StatusCode::NOT_FOUND,
            "RevisionNotFound",
            &format!("Invalid rev id: {revision}"),
        );
    };
    let Some(bytes) = repo.files.get(file) else {
        return refusal(StatusCode::NOT_FOUND, "EntryNotFound", "Entry not found");
    };
    let mut response = if repo.redirect {
        let port = shared.port.get().expect("port is set before serving");
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::FOUND;
        let location = format!("http://localhost:{port}/cdn/{}", sha256_hex(bytes));
        response.headers_mut().insert(
            header::LOCATION,
            HeaderValue::from_str(&location).expect("ascii"),
        );
        response
    } else {
        serve_bytes(bytes, range.as_deref())
    };
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: String| {
        headers.insert(name, HeaderValue::from_str(&value).expect("ascii header"));
    };
    set("x-repo-commit", repo.sha.clone());
    set("x-linked-etag", format!("\"{}\"", sha256_hex(bytes)));
    set("etag", format!("\"{:016x}\"", fnv(bytes)));
    set("x-linked-size", bytes.len().to_string());
    response
}

fn serve_bytes(bytes: &[u8], range: Option<&str>) -> Response {
    let size = bytes.len();
    let (code, start, end) = match range.and_then(|r| r.strip_prefix("bytes=")) {
        Some(spec) => {
            let (start, stop) = spec.split_once('-').unwrap_or((spec, ""));
            let start: usize = start.parse().unwrap_or(0);
            let stop: usize = stop.parse().unwrap_or(size.saturating_sub(1));
            let end = (stop + 1).min(size);
            if start >= size {
                return status(StatusCode::RANGE_NOT_SATISFIABLE, "bad range");
            }
            (StatusCode::PARTIAL_CONTENT, start, end)
        }
        None => (StatusCode::OK, 0, size),
    };
    let mut response = Response::new(Body::from(bytes[start..end].to_vec()));
    *response.status_mut() = code;
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: String| {
        headers.insert(name, HeaderValue::from_str(&value).expect("ascii header"));
    };
    set("accept-ranges", "bytes".to_owned());
    set("content-length", (end - start).to_string());
    if code == StatusCode::PARTIAL_CONTENT {
        set("content-range", format!("bytes {start}-{}/{size}", end - 1));
    }
    response
}
