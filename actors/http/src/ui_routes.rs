//! The web UI: `/ui/` serves a small front end compiled into the binary
//! (the files of `actors/http/ui/`, embedded with `include_bytes!`), and
//! `/` redirects there.
//!
//! The UI is a client of this same `/v1/` API, as Nomad's is: these routes
//! hand out static files only and read no state, so they are public under
//! ACLs and every piece of data the UI shows passes the API's own rules
//! with the token the user gave it.
//!
//! `/ui/assets/<file>` is one of the embedded files (404 otherwise); any
//! other path under `/ui/` is the page itself (`index.html`), whose script
//! reads the path and renders the view it names, so a link to
//! `/ui/jobs/default/web` can be opened, bookmarked and reloaded.
//!
//! Every answer carries a strong `ETag` (a hash of the file, computed at
//! compile time) and `Cache-Control: no-cache`: the browser keeps the file
//! but asks each time, and gets a bodiless 304 while the binary is the
//! same. The URLs carry no version, so a longer lifetime would keep an old
//! script after an upgrade.

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};

/// One embedded file.
struct Asset {
    /// Its path under `/ui/assets/`.
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
    etag: &'static str,
}

/// FNV-1a over `bytes`, at compile time: the ETag of a file.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

/// `"<16 hex digits>"`, quotes included (an entity tag is quoted).
const fn etag_of(bytes: &[u8]) -> [u8; 18] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let hash = fnv1a(bytes);
    let mut out = [b'"'; 18];
    let mut i = 0;
    while i < 16 {
        out[1 + i] = HEX[((hash >> (60 - 4 * i)) & 0xf) as usize];
        i += 1;
    }
    out
}

/// Declares the embedded files: each one's bytes and its ETag, computed
/// once by the compiler.
macro_rules! assets {
    ($(($name:literal, $content_type:expr)),* $(,)?) => {
        &[$({
            const BODY: &[u8] = include_bytes!(concat!("../ui/", $name));
            const TAG: [u8; 18] = etag_of(BODY);
            Asset {
                name: $name,
                content_type: $content_type,
                body: BODY,
                etag: match std::str::from_utf8(&TAG) {
                    Ok(tag) => tag,
                    Err(_) => panic!("an ETag is ASCII"),
                },
            }
        }),*]
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the UI. `index.html` first: it is the page.
static ASSETS: &[Asset] = assets![
    ("index.html", "text/html; charset=utf-8"),
    ("assets/style.css", "text/css; charset=utf-8"),
    ("assets/app.js", JS),
    ("assets/api.js", JS),
    ("assets/dom.js", JS),
    ("assets/format.js", JS),
    ("assets/chart.js", JS),
    ("assets/pages/jobs.js", JS),
    ("assets/pages/job.js", JS),
    ("assets/pages/run.js", JS),
    ("assets/pages/alloc.js", JS),
    ("assets/pages/nodes.js", JS),
    ("assets/pages/node.js", JS),
    ("assets/pages/servers.js", JS),
    ("assets/pages/evals.js", JS),
    ("assets/pages/topology.js", JS),
    ("assets/favicon.svg", "image/svg+xml"),
];

/// What the page may load and call: its own files and its own API, no
/// inline script, no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; \
     style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; \
     base-uri 'none'; form-action 'none'";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(to_ui))
        .route("/ui", web::get().to(to_ui))
        .route("/ui/{tail:.*}", web::get().to(ui_file));
}

/// `/` and `/ui`: the UI is at `/ui/`.
async fn to_ui() -> HttpResponse {
    HttpResponse::TemporaryRedirect()
        .insert_header((header::LOCATION, "/ui/"))
        .finish()
}

/// `/ui/{tail}`: an embedded asset, or the page for any other path.
async fn ui_file(req: HttpRequest, tail: web::Path<String>) -> HttpResponse {
    let tail = tail.into_inner();
    let asset = if tail.starts_with("assets/") {
        match ASSETS.iter().find(|a| a.name == tail) {
            Some(asset) => asset,
            None => {
                return HttpResponse::NotFound()
                    .content_type("text/plain; charset=utf-8")
                    .body(format!("no UI file {tail}"))
            }
        }
    } else {
        &ASSETS[0]
    };
    serve(&req, asset)
}

/// The file, or 304 when the browser's copy (`If-None-Match`) is current.
fn serve(req: &HttpRequest, asset: &Asset) -> HttpResponse {
    let current = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| {
            tags.split(',')
                .any(|t| t.trim() == asset.etag || t.trim() == "*")
        });
    let mut answer = if current {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    answer
        .insert_header((header::ETAG, asset.etag))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .insert_header((header::REFERRER_POLICY, "same-origin"));
    if current {
        return answer.finish();
    }
    answer.content_type(asset.content_type).body(asset.body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::{call_service, init_service, read_body, TestRequest};
    use actix_web::App;

    #[actix_rt::test]
    async fn the_page_its_files_and_revalidation() {
        let app = init_service(App::new().configure(configure)).await;
        let res = call_service(&app, TestRequest::get().uri("/").to_request()).await;
        assert_eq!(res.status(), 307);
        assert_eq!(res.headers().get(header::LOCATION).unwrap(), "/ui/");

        // Any view's path is the page, so a view's link can be reloaded.
        let res = call_service(
            &app,
            TestRequest::get().uri("/ui/jobs/default/x").to_request(),
        )
        .await;
        assert_eq!(res.status(), 200);
        assert_eq!(
            res.headers().get(header::CONTENT_TYPE).unwrap(),
            "text/html; charset=utf-8"
        );
        let etag = res.headers().get(header::ETAG).unwrap().clone();
        let body = read_body(res).await;
        assert!(std::str::from_utf8(&body)
            .unwrap()
            .contains("/ui/assets/app.js"));

        let res = call_service(
            &app,
            TestRequest::get()
                .uri("/ui/")
                .insert_header((header::IF_NONE_MATCH, etag))
                .to_request(),
        )
        .await;
        assert_eq!(res.status(), 304);
        assert!(read_body(res).await.is_empty());

        let res = call_service(
            &app,
            TestRequest::get().uri("/ui/assets/app.js").to_request(),
        )
        .await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers().get(header::CONTENT_TYPE).unwrap(), JS);
        let res = call_service(
            &app,
            TestRequest::get().uri("/ui/assets/nosuch.js").to_request(),
        )
        .await;
        assert_eq!(res.status(), 404);
    }

    #[test]
    fn every_file_has_its_own_tag_and_every_import_is_embedded() {
        let mut tags: Vec<_> = ASSETS.iter().map(|a| a.etag).collect();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(tags.len(), ASSETS.len());
        // A module imported but not embedded would 404 in the browser.
        for asset in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            let text = std::str::from_utf8(asset.body).unwrap();
            let dir = asset.name.rsplit_once('/').map_or("", |(d, _)| d);
            for line in text.lines().filter(|l| l.starts_with("import ")) {
                let spec = line.rsplit(['"', '\'']).nth(1).unwrap_or_default();
                let path = resolve(dir, spec);
                assert!(
                    ASSETS.iter().any(|a| a.name == path),
                    "{} imports {spec} ({path}), which is not embedded",
                    asset.name
                );
            }
        }
    }

    /// `spec` (`./x.js`, `../x.js`) relative to the folder `dir`.
    fn resolve(dir: &str, spec: &str) -> String {
        let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
        for part in spec.split('/') {
            match part {
                "." => {}
                ".." => {
                    parts.pop();
                }
                p => parts.push(p),
            }
        }
        parts.join("/")
    }
}
