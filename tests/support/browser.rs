//! A real browser for the web UI's tests: Debian's Chromium, headless,
//! driven by `chromedriver` over WebDriver's JSON protocol (W3C) with the
//! HTTP client the tests already use. No crate of its own: the few calls
//! the tests make (open, find, click, type, run a script, screenshot) are
//! each one request.
//!
//! Every wait polls a condition until a deadline and, when it runs out,
//! fails with what the page showed and a screenshot of it, so a slow,
//! loaded machine costs time, not a flaky result. One browser runs at a
//! time in a test process: two at once would only slow each other down.

use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The key of an element reference in WebDriver's answers.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(100);
/// Serialises the browsers of one test process.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A headless Chromium session; closed (and its driver stopped) on drop.
pub struct Browser {
    driver: Child,
    base: String,
    /// Its profile, fresh for each session.
    profile: tempfile::TempDir,
    _turn: MutexGuard<'static, ()>,
}

/// The first of `candidates` that exists, or one found on `PATH`.
fn find_program(env: &str, candidates: &[&str]) -> PathBuf {
    if let Ok(path) = std::env::var(env) {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    for name in candidates {
        let direct = Path::new(name);
        if direct.is_absolute() && direct.exists() {
            return direct.to_path_buf();
        }
        if let Some(found) = on_path.iter().map(|d| d.join(name)).find(|p| p.exists()) {
            return found;
        }
    }
    panic!(
        "none of {candidates:?} found (set {env}); install Debian's `chromium` and \
         `chromium-driver` (.ci/run does)"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Browser {
    /// Starts `chromedriver` and a Chromium session with a fresh profile
    /// and every network feature of its own off (this machine is closed).
    pub fn start() -> Browser {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let chromium = find_program("HERDER_CHROMIUM", &["/usr/bin/chromium", "chromium"]);
        let chromedriver = find_program("HERDER_CHROMEDRIVER", &["chromedriver"]);
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", chromedriver.display()));
        let profile = tempfile::Builder::new()
            .prefix("herder-chromium-")
            .tempdir()
            .expect("a profile directory");
        let mut browser = Browser {
            driver,
            base: format!("http://127.0.0.1:{port}"),
            profile,
            _turn: turn,
        };
        let ready = crate::wait_for(Duration::from_secs(30), || {
            ureq::get(&format!("{}/status", browser.base))
                .timeout(Duration::from_secs(2))
                .call()
                .ok()
        });
        assert!(ready.is_some(), "chromedriver did not answer within 30 s");
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,1000",
            &format!("--user-data-dir={}", browser.profile.path().display()),
        ];
        let session = browser.send(
            "POST",
            "/session",
            json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "pageLoadStrategy": "normal",
                "goog:chromeOptions": {"binary": chromium, "args": args}
            }}}),
        );
        let id = session["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {session}"))
            .to_string();
        browser.base = format!("{}/session/{id}", browser.base);
        browser
    }

    /// One WebDriver call; its `value`, or a panic with the driver's error.
    fn send(&self, method: &str, path: &str, body: Value) -> Value {
        self.try_send(method, path, body)
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"))
    }

    fn try_send(&self, method: &str, path: &str, body: Value) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let req = ureq::request(method, &url).timeout(Duration::from_secs(60));
        let answer = if method == "GET" || method == "DELETE" {
            req.call()
        } else {
            req.send_json(body)
        };
        let text = match answer {
            Ok(r) => r.into_string().map_err(|e| e.to_string())?,
            Err(ureq::Error::Status(code, r)) => {
                return Err(format!("{code}: {}", r.into_string().unwrap_or_default()))
            }
            Err(e) => return Err(e.to_string()),
        };
        let value: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        Ok(value["value"].clone())
    }

    /// Opens `url` and waits for the page to load.
    pub fn goto(&self, url: &str) {
        self.send("POST", "/url", json!({ "url": url }));
    }

    /// The address the page is at now.
    pub fn current_url(&self) -> String {
        self.send("GET", "/url", Value::Null)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    pub fn script(&self, script: &str, args: Value) -> Value {
        self.send(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
    }

    /// The visible text of the first element matching `css` (None: none).
    pub fn text(&self, css: &str) -> Option<String> {
        self.script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
            json!([css]),
        )
        .as_str()
        .map(str::to_string)
    }

    /// How many elements match `css`.
    pub fn count(&self, css: &str) -> usize {
        self.script(
            "return document.querySelectorAll(arguments[0]).length;",
            json!([css]),
        )
        .as_u64()
        .unwrap_or(0) as usize
    }

    /// Waits until `check` answers `Some`, for at most `timeout`; fails
    /// with `what`, the page's text and a screenshot otherwise.
    pub fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut() -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = check() {
                return v;
            }
            if Instant::now() >= deadline {
                let shot = std::env::temp_dir().join("herder-ui-failure.png");
                let _ = std::fs::write(&shot, self.png());
                panic!(
                    "waited {timeout:?} for {what}; at {} the page shows:\n{}\n(screenshot: {})",
                    self.current_url(),
                    self.text("body").unwrap_or_default(),
                    shot.display()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits until the element matching `css` exists and its text holds
    /// `needle`; its text.
    pub fn wait_text(&self, css: &str, needle: &str, timeout: Duration) -> String {
        self.wait(&format!("{css} to show {needle:?}"), timeout, || {
            self.text(css).filter(|t| t.contains(needle))
        })
    }

    /// The reference of the element `using` (`css selector`, `xpath`)
    /// finds, once it exists (at most `timeout`).
    fn element(&self, using: &str, value: &str, timeout: Duration) -> String {
        self.wait(&format!("{using} {value}"), timeout, || {
            self.try_send("POST", "/element", json!({"using": using, "value": value}))
                .ok()
                .and_then(|v| v[ELEMENT_KEY].as_str().map(str::to_string))
        })
    }

    /// Clicks the element `using` finds, waiting for it up to 30 s.
    ///
    /// The pages re-render their live sections as the cluster changes, so
    /// an element found a moment ago may have been replaced by an equal
    /// one before the click lands: the driver then answers "stale element
    /// reference" and nothing was clicked, so finding and clicking again is
    /// what a user's second click would do. Any other error fails.
    fn click_found(&self, using: &str, value: &str) {
        self.wait(
            &format!("a click on {using} {value}"),
            Duration::from_secs(30),
            || {
                let id = self.element(using, value, Duration::from_secs(30));
                match self.try_send("POST", &format!("/element/{id}/click"), json!({})) {
                    Ok(_) => Some(()),
                    Err(e) if e.contains("stale element reference") => None,
                    Err(e) => panic!("WebDriver click on {using} {value}: {e}"),
                }
            },
        )
    }

    /// Clicks the element matching `css` (waiting for it up to 30 s).
    pub fn click(&self, css: &str) {
        self.click_found("css selector", css);
    }

    /// Clicks the button whose text is `label` (waiting up to 30 s).
    pub fn click_button(&self, label: &str) {
        self.click_found("xpath", &format!("//button[normalize-space(.)='{label}']"));
    }

    /// Clicks the link whose text is `label` (waiting up to 30 s).
    pub fn click_link(&self, label: &str) {
        self.click_found("xpath", &format!("//a[normalize-space(.)='{label}']"));
    }

    /// Replaces the text of the field matching `css` with `text`, typed.
    pub fn fill(&self, css: &str, text: &str) {
        let id = self.element("css selector", css, Duration::from_secs(30));
        self.send("POST", &format!("/element/{id}/clear"), json!({}));
        self.send(
            "POST",
            &format!("/element/{id}/value"),
            json!({ "text": text }),
        );
    }

    /// The page as a PNG.
    pub fn png(&self) -> Vec<u8> {
        use base64::Engine as _;
        let encoded = self.send("GET", "/screenshot", Value::Null);
        base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap_or_default())
            .expect("a base64 screenshot")
    }

    /// Saves the page as `docs/ui/<name>.png` in the repository.
    pub fn screenshot(&self, name: &str) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ui");
        std::fs::create_dir_all(&dir).expect("create docs/ui");
        let png = self.png();
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is a PNG");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write the screenshot");
    }

    /// Marks the page so that [`Browser::same_page`] can tell whether it
    /// was loaded again since.
    pub fn mark_page(&self) {
        self.script("window.__herderTestMark = 'kept';", json!([]));
    }

    /// Whether the page marked by [`Browser::mark_page`] is still the one
    /// shown (no full reload happened).
    pub fn same_page(&self) -> bool {
        self.script("return window.__herderTestMark === 'kept';", json!([])) == json!(true)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.try_send("DELETE", "", Value::Null);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
