//! `template` and `artifact` end to end: real `raw_exec` tasks on a `-dev`
//! agent, driven over HTTP, checked through the API, the task's log and the
//! files in its directory.
//!
//! - a template renders a file the task reads, and an env template's
//!   variable reaches the task's environment;
//! - a template over a `source` file (itself brought in by a checksummed
//!   `file` artifact) is re-rendered when the test rewrites the source, and
//!   its `change_mode = "restart"` restarts the task with the new file;
//! - a `change_mode = "signal"` template sends its signal to the task;
//! - a `nomadService` template is re-rendered when another job's service
//!   registers in the native catalog, and restarts its task;
//! - a `nomadVar` template renders a variable of the job's namespace and
//!   follows its changes;
//! - an artifact served over http by `python3 -m http.server` lands
//!   checksummed and a `.tar.gz` unpacked; a wrong checksum fails the task
//!   with Nomad's "Failed Artifact Download" event;
//! - a template calling a function herder does not have fails the task with
//!   "Template failed".

use herder_tests::{dev_config, get, send_json, wait_for, TestAgent};
use serde_json::{json, Value};
use sha2::Digest as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Generous: the machine is small and shared.
const WAIT: Duration = Duration::from_secs(60);

fn base(agent: &TestAgent) -> String {
    format!("http://{}", agent.addr)
}

fn get_json(url: &str) -> Value {
    let (code, body) = get(url);
    assert_eq!(code, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

fn register(base: &str, job: &Value) {
    let (code, body) = send_json(
        "PUT",
        &format!("{base}/v1/jobs"),
        None,
        &json!({ "Job": job }),
    );
    assert_eq!(code, 200, "register: {body}");
    let answer: Value = serde_json::from_str(&body).unwrap_or_default();
    let warnings = answer["Warnings"].as_str().unwrap_or_default();
    assert!(
        !warnings.contains("template") && !warnings.contains("artifact"),
        "templates and artifacts are honoured, yet warned about: {warnings}"
    );
}

/// The job's one allocation once its client status is one of `statuses`.
fn alloc_in(base: &str, job: &str, statuses: &[&str]) -> Value {
    wait_for(WAIT, || {
        get_json(&format!("{base}/v1/job/{job}/allocations"))
            .as_array()?
            .iter()
            .find(|a| statuses.iter().any(|s| a["ClientStatus"] == *s))
            .cloned()
    })
    .unwrap_or_else(|| {
        let now = get_json(&format!("{base}/v1/job/{job}/allocations"));
        panic!("{job}: no allocation {statuses:?}: {now:#}")
    })
}

fn alloc_id(a: &Value) -> String {
    a["ID"].as_str().unwrap_or_default().to_string()
}

fn task_state(base: &str, alloc: &str) -> Value {
    get_json(&format!("{base}/v1/allocation/{alloc}"))["TaskStates"]["t"].clone()
}

fn events(state: &Value) -> Vec<(String, String)> {
    state["Events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let field = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (field("Type"), field("DisplayMessage"))
        })
        .collect()
}

fn task_dir(agent: &TestAgent, alloc: &str) -> PathBuf {
    agent.data_dir.join("alloc").join(alloc).join("t")
}

fn stdout_of(agent: &TestAgent, alloc: &str) -> String {
    let log = agent
        .data_dir
        .join("alloc")
        .join(alloc)
        .join("alloc/logs/t.stdout.0");
    std::fs::read_to_string(log).unwrap_or_default()
}

fn task(script: &str) -> Value {
    json!({
        "Name": "t", "Driver": "raw_exec",
        "Config": {"command": "/bin/sh", "args": ["-c", script]},
        "KillTimeout": 2_000_000_000u64,
        "Resources": {"CPU": 50, "MemoryMB": 32}
    })
}

fn job(id: &str, kind: &str, task: Value) -> Value {
    json!({
        "ID": id, "Name": id, "Type": kind, "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "RestartPolicy": {"Attempts": 0, "Interval": 60_000_000_000u64,
                              "Delay": 1_000_000_000u64, "Mode": "fail"},
            "ReschedulePolicy": {"Attempts": 0, "Unlimited": false},
            "Tasks": [task]
        }]
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn a_template_renders_a_file_and_env_the_task_reads() {
    let agent = TestAgent::start(dev_config(), true);
    let base = base(&agent);
    let mut t = task("cat local/app.conf; echo \"greeting=$GREETING\"");
    t["Templates"] = json!([
        {"EmbeddedTmpl": "task={{ env \"NOMAD_TASK_NAME\" }} index={{ env \"NOMAD_ALLOC_INDEX\" }}\n{{ range $i, $p := split \",\" \"a,b\" }}{{ $i }}:{{ $p | toUpper }} {{ end }}\n",
         "DestPath": "local/app.conf", "Perms": "0640"},
        {"EmbeddedTmpl": "GREETING=\"hello {{ env \"node.datacenter\" }}\"\n",
         "DestPath": "secrets/app.env", "Envvar": true}
    ]);
    register(&base, &job("tmpl", "batch", t));
    let alloc = alloc_in(&base, "tmpl", &["complete", "failed"]);
    let id = alloc_id(&alloc);
    assert_eq!(
        alloc["ClientStatus"],
        "complete",
        "{:#}",
        task_state(&base, &id)
    );
    let out = stdout_of(&agent, &id);
    assert!(out.contains("task=t index=0\n0:A 1:B \n"), "{out:?}");
    assert!(out.contains("greeting=hello dc1"), "{out:?}");
    let conf = task_dir(&agent, &id).join("local/app.conf");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&conf).map(|m| m.permissions().mode() & 0o777);
    assert_eq!(mode.ok(), Some(0o640));
}

#[test]
fn a_rewritten_source_restarts_the_task_with_the_new_file() {
    let agent = TestAgent::start(dev_config(), true);
    let base = base(&agent);
    let host = tempfile::tempdir().unwrap();
    let source = host.path().join("in.tpl");
    let first = "version=1 on {{ env \"node.unique.name\" | trimSpace | len | printf \"%d\" }}\n";
    std::fs::write(&source, first).unwrap();
    let marks = host.path().join("seen");
    let mut t = task(&format!(
        "cat local/out.txt >> {m}; echo $$ > {m}.pid; while :; do sleep 0.1; done",
        m = marks.display()
    ));
    t["Artifacts"] = json!([{
        "GetterSource": source.display().to_string(),
        "GetterOptions": {"checksum": format!("sha256:{}", sha256_hex(first.as_bytes()))},
        "GetterMode": "file",
        "RelativeDest": "local/in.tpl"
    }]);
    t["Templates"] = json!([{"SourcePath": "local/in.tpl", "DestPath": "local/out.txt",
                             "ChangeMode": "restart", "Splay": 100_000_000u64}]);
    register(&base, &job("reload", "service", t));
    let id = alloc_id(&alloc_in(&base, "reload", &["running"]));
    let seen = |n: usize| {
        wait_for(WAIT, || {
            let text = std::fs::read_to_string(&marks).ok()?;
            (text.lines().count() >= n).then_some(text)
        })
    };
    let text = seen(1).expect("the task read its rendered file");
    assert!(text.starts_with("version=1 on "), "{text:?}");

    // The source in the task's directory changes: the template renders
    // again and its change_mode restarts the task, which reads the new file.
    let in_task = task_dir(&agent, &id).join("local/in.tpl");
    std::fs::write(&in_task, "version=2\n").unwrap();
    let text = seen(2).unwrap_or_else(|| panic!("no restart: {:#}", task_state(&base, &id)));
    assert_eq!(text.lines().nth(1), Some("version=2"), "{text:?}");
    // The client reports the restart to the servers in its next update.
    let restarted = wait_for(WAIT, || {
        let state = task_state(&base, &id);
        let signaled = events(&state).contains(&(
            "Restart Signaled".into(),
            "Template with change_mode restart re-rendered".into(),
        ));
        (signaled && state["Restarts"].as_u64() >= Some(1)).then_some(())
    });
    assert!(restarted.is_some(), "{:#}", task_state(&base, &id));
    let (code, body) = send_json(
        "DELETE",
        &format!("{base}/v1/job/reload?purge=true"),
        None,
        &json!({}),
    );
    assert_eq!(code, 200, "{body}");
    alloc_in(&base, "reload", &["complete"]);
}

#[test]
fn a_signal_template_signals_the_task_on_rerender() {
    let agent = TestAgent::start(dev_config(), true);
    let base = base(&agent);
    let host = tempfile::tempdir().unwrap();
    let source = host.path().join("in.tpl");
    std::fs::write(&source, "v1\n").unwrap();
    let marks = host.path().join("usr1");
    let mut t = task(&format!(
        "trap 'cat local/out.txt >> {m}' USR1; while :; do sleep 0.1; done",
        m = marks.display()
    ));
    t["Artifacts"] =
        json!([{"GetterSource": source.display().to_string(), "RelativeDest": "local/"}]);
    t["Templates"] = json!([{"SourcePath": "local/in.tpl", "DestPath": "local/out.txt",
                             "ChangeMode": "signal", "ChangeSignal": "SIGUSR1", "Splay": 0}]);
    register(&base, &job("signalled", "service", t));
    let id = alloc_id(&alloc_in(&base, "signalled", &["running"]));
    std::fs::write(task_dir(&agent, &id).join("local/in.tpl"), "v2\n").unwrap();
    let text = wait_for(WAIT, || {
        std::fs::read_to_string(&marks)
            .ok()
            .filter(|t| !t.is_empty())
    })
    .unwrap_or_else(|| panic!("no signal: {:#}", task_state(&base, &id)));
    assert_eq!(text, "v2\n");
    let signalled = wait_for(WAIT, || {
        let state = task_state(&base, &id);
        let event = events(&state).contains(&("Signaling".into(), "Template re-rendered".into()));
        (event && state["Restarts"].as_u64() == Some(0)).then_some(())
    });
    assert!(signalled.is_some(), "{:#}", task_state(&base, &id));
    let (code, body) = send_json(
        "DELETE",
        &format!("{base}/v1/job/signalled?purge=true"),
        None,
        &json!({}),
    );
    assert_eq!(code, 200, "{body}");
}

#[test]
fn a_service_registering_rerenders_a_nomad_service_template_and_restarts() {
    let agent = TestAgent::start(dev_config(), true);
    let base = base(&agent);
    let host = tempfile::tempdir().unwrap();
    let marks = host.path().join("seen");
    let mut t = task(&format!(
        "cat local/upstreams >> {m}; while :; do sleep 0.1; done",
        m = marks.display()
    ));
    t["Templates"] = json!([{
        "EmbeddedTmpl": "{{ range nomadService \"backend\" }}{{ .Name }} {{ .Address }}:{{ .Port }}\n{{ else }}none\n{{ end }}",
        "DestPath": "local/upstreams", "ChangeMode": "restart", "Splay": 100_000_000u64
    }]);
    register(&base, &job("consumer", "service", t));
    let id = alloc_id(&alloc_in(&base, "consumer", &["running"]));
    let seen = |want: &str| {
        wait_for(WAIT, || {
            let text = std::fs::read_to_string(&marks).ok()?;
            text.contains(want).then_some(text)
        })
    };
    seen("none\n").expect("the template rendered with no backend");

    // Another job's service registers: the catalog's answer changes, the
    // template renders it and restarts the consumer, which reads it.
    let mut backend = job("backend", "service", task("while :; do sleep 0.1; done"));
    backend["TaskGroups"][0]["Networks"] = json!([{"DynamicPorts": [{"Label": "api"}]}]);
    backend["TaskGroups"][0]["Services"] =
        json!([{"Name": "backend", "PortLabel": "api", "Provider": "nomad"}]);
    register(&base, &backend);
    let text = seen("backend 127.0.0.1:")
        .unwrap_or_else(|| panic!("never re-rendered: {:#}", task_state(&base, &id)));
    assert!(text.starts_with("none\nbackend 127.0.0.1:"), "{text:?}");
    let restarted = wait_for(WAIT, || {
        (task_state(&base, &id)["Restarts"].as_u64() >= Some(1)).then_some(())
    });
    assert!(restarted.is_some(), "{:#}", task_state(&base, &id));
    for job in ["consumer", "backend"] {
        let (code, body) = send_json(
            "DELETE",
            &format!("{base}/v1/job/{job}?purge=true"),
            None,
            &json!({}),
        );
        assert_eq!(code, 200, "{body}");
    }
}

/// `python3 -m http.server` serving a directory on a free loopback port;
/// stopped on drop.
struct FileServer {
    child: Child,
    url: String,
}

impl FileServer {
    fn start(dir: &Path) -> FileServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new("python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
            ])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs");
        let url = format!("http://127.0.0.1:{port}");
        wait_for(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        })
        .expect("the file server answers");
        FileServer { child, url }
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tar_gz(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    for (name, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, *data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

#[test]
fn http_artifacts_land_checksummed_and_a_wrong_checksum_fails_the_task() {
    let served = tempfile::tempdir().unwrap();
    std::fs::write(served.path().join("hello.txt"), "hello from http\n").unwrap();
    std::fs::write(
        served.path().join("bundle.tar.gz"),
        tar_gz(&[("inner/data.txt", b"unpacked\n")]),
    )
    .unwrap();
    let files = FileServer::start(served.path());
    let agent = TestAgent::start(dev_config(), true);
    let base = base(&agent);
    let good_sum = format!("sha256:{}", sha256_hex(b"hello from http\n"));

    let mut t = task("cat local/hello.txt local/bundle/inner/data.txt");
    t["Artifacts"] = json!([
        {"GetterSource": format!("{}/hello.txt", files.url),
         "GetterOptions": {"checksum": good_sum}},
        {"GetterSource": format!("{}/bundle.tar.gz", files.url), "RelativeDest": "local/bundle"}
    ]);
    register(&base, &job("fetch", "batch", t));
    let alloc = alloc_in(&base, "fetch", &["complete", "failed"]);
    let id = alloc_id(&alloc);
    let state = task_state(&base, &id);
    assert_eq!(alloc["ClientStatus"], "complete", "{state:#}");
    assert_eq!(stdout_of(&agent, &id), "hello from http\nunpacked\n");
    assert!(
        events(&state)
            .iter()
            .any(|(t, _)| t == "Downloading Artifacts"),
        "{state:#}"
    );

    let mut t = task("echo should-not-run");
    t["Artifacts"] = json!([{
        "GetterSource": format!("{}/hello.txt", files.url),
        "GetterOptions": {"checksum": format!("sha256:{}", sha256_hex(b"something else"))}
    }]);
    register(&base, &job("tampered", "batch", t));
    let alloc = alloc_in(&base, "tampered", &["complete", "failed"]);
    let id = alloc_id(&alloc);
    let state = task_state(&base, &id);
    assert_eq!(alloc["ClientStatus"], "failed", "{state:#}");
    let failed = events(&state)
        .into_iter()
        .find(|(t, _)| t == "Failed Artifact Download")
        .unwrap_or_else(|| panic!("no download failure: {state:#}"));
    assert!(failed.1.contains("checksums did not match"), "{failed:?}");
    assert!(!task_dir(&agent, &id).join("local/hello.txt").exists());
    assert_eq!(stdout_of(&agent, &id), "");
}

#[test]
fn a_template_with_an_unknown_function_fails_the_task() {
    let agent = TestAgent::start(dev_config(), true);
    let base = base(&agent);
    let mut t = task("echo should-not-run");
    t["Templates"] = json!([{"EmbeddedTmpl": "{{ sprig_whatever \"x\" }}", "DestPath": "local/x"}]);
    register(&base, &job("badtmpl", "batch", t));
    let alloc = alloc_in(&base, "badtmpl", &["complete", "failed"]);
    let id = alloc_id(&alloc);
    let state = task_state(&base, &id);
    assert_eq!(alloc["ClientStatus"], "failed", "{state:#}");
    assert!(
        events(&state).iter().any(|(t, d)| t == "Killing"
            && d.starts_with("Template failed:")
            && d.contains("\"sprig_whatever\" not defined")),
        "{state:#}"
    );
}

#[test]
fn a_destination_escaping_the_task_is_refused_at_registration() {
    let agent = TestAgent::start(dev_config(), true);
    let base = base(&agent);
    let mut t = task("true");
    t["Templates"] = json!([{"EmbeddedTmpl": "x", "DestPath": "../../../etc/x"}]);
    t["Artifacts"] =
        json!([{"GetterSource": "https://example.invalid/x", "RelativeDest": "../../x"}]);
    let (code, body) = send_json(
        "PUT",
        &format!("{base}/v1/jobs"),
        None,
        &json!({ "Job": job("escape", "batch", t) }),
    );
    assert!(code >= 400, "{code}: {body}");
    assert!(
        body.contains("Template 1 validation failed: destination escapes allocation directory"),
        "{body}"
    );
    assert!(
        body.contains("Artifact 1 validation failed: destination escapes allocation directory"),
        "{body}"
    );
}

/// `nomadVar` reads a variable of the job's namespace through the node's
/// servers; a changed variable re-renders the file and restarts the task.
#[test]
fn a_nomad_var_template_renders_the_variable_and_follows_its_changes() {
    let agent = TestAgent::start(dev_config(), true);
    let base = base(&agent);
    let (code, body) = send_json(
        "PUT",
        &format!("{base}/v1/var/nomad/jobs/reader"),
        None,
        &json!({"Items": {"user": "app", "password": "first"}}),
    );
    assert_eq!(code, 200, "{body}");
    let host = tempfile::tempdir().unwrap();
    let marks = host.path().join("seen");
    let mut t = task(&format!(
        "cat local/creds >> {m}; while :; do sleep 0.1; done",
        m = marks.display()
    ));
    t["Templates"] = json!([{
        "EmbeddedTmpl": "{{ with nomadVar \"nomad/jobs/reader\" }}{{ .user }}:{{ .password }}{{ end }} {{ nomadVarExists \"nope\" }}\n",
        "DestPath": "local/creds", "ChangeMode": "restart", "Splay": 100_000_000u64
    }]);
    register(&base, &job("reader", "service", t));
    let id = alloc_id(&alloc_in(&base, "reader", &["running"]));
    let seen = |want: &str| {
        wait_for(WAIT, || {
            let text = std::fs::read_to_string(&marks).ok()?;
            text.contains(want).then_some(text)
        })
    };
    seen("app:first false\n")
        .unwrap_or_else(|| panic!("never rendered: {:#}", task_state(&base, &id)));
    let (code, body) = send_json(
        "PUT",
        &format!("{base}/v1/var/nomad/jobs/reader"),
        None,
        &json!({"Items": {"user": "app", "password": "second"}}),
    );
    assert_eq!(code, 200, "{body}");
    seen("app:second false\n")
        .unwrap_or_else(|| panic!("never re-rendered: {:#}", task_state(&base, &id)));
    let (code, body) = send_json(
        "DELETE",
        &format!("{base}/v1/job/reader?purge=true"),
        None,
        &json!({}),
    );
    assert_eq!(code, 200, "{body}");
}

/// (status, body) of a GET with `X-Nomad-Token: token`.
fn get_with(url: &str, token: &str) -> (u16, String) {
    match ureq::get(url)
        .set("X-Nomad-Token", token)
        .timeout(Duration::from_secs(30))
        .call()
    {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => panic!("GET {url}: {e}"),
    }
}

/// Under ACLs the client fetches a template's variables with its node's
/// secret, not a token: its workload reads its own job's paths
/// (`nomad/jobs/<job>[/<group>[/<task>]]`) and nothing else, and those
/// refusals are not failed logins.
#[test]
fn under_acls_a_workload_reads_its_own_job_variables_only() {
    let mut config = dev_config();
    config.acl.enabled = true;
    let agent = TestAgent::start(config, true);
    let base = base(&agent);
    let (code, body) = send_json("PUT", &format!("{base}/v1/acl/bootstrap"), None, &json!({}));
    assert_eq!(code, 200, "bootstrap: {body}");
    let bootstrap: Value = serde_json::from_str(&body).expect("token JSON");
    let management = bootstrap["SecretID"]
        .as_str()
        .expect("SecretID")
        .to_string();
    for (path, value) in [("nomad/jobs/reader", "app"), ("secret/x", "hidden")] {
        let (code, body) = send_json(
            "PUT",
            &format!("{base}/v1/var/{path}"),
            Some(&management),
            &json!({"Items": {"user": value}}),
        );
        assert_eq!(code, 200, "{path}: {body}");
    }
    let host = tempfile::tempdir().unwrap();
    let marks = host.path().join("seen");
    let mut t = task(&format!(
        "cat local/creds >> {m}; while :; do sleep 0.1; done",
        m = marks.display()
    ));
    t["Templates"] = json!([{
        "EmbeddedTmpl": "{{ with nomadVar \"nomad/jobs/reader\" }}user={{ .user }}{{ end }}\n",
        "DestPath": "local/creds", "ChangeMode": "noop"
    }]);
    let (code, body) = send_json(
        "PUT",
        &format!("{base}/v1/jobs"),
        Some(&management),
        &json!({"Job": job("reader", "service", t)}),
    );
    assert_eq!(code, 200, "register: {body}");
    let rendered = wait_for(WAIT, || {
        std::fs::read_to_string(&marks)
            .ok()
            .filter(|t| t.ends_with('\n'))
    });
    let allocs = || get_with(&format!("{base}/v1/job/reader/allocations"), &management).1;
    assert_eq!(
        rendered.as_deref(),
        Some("user=app\n"),
        "never rendered: {}",
        allocs()
    );
    // The node's secret, as its client sends it.
    let server = agent.server.as_ref().expect("a server");
    let snap = server.store.snapshot();
    let secret = snap
        .nodes()
        .next()
        .map(|n| n.secret_id.to_string())
        .expect("the dev node");
    let read = |path: &str| get_with(&format!("{base}/v1/var/{path}"), &secret).0;
    assert_eq!(read("nomad/jobs/reader"), 200);
    assert_eq!(read("nomad/jobs"), 404, "allowed, and absent");
    assert_eq!(read("nomad/jobs/reader/g/t"), 404, "allowed, and absent");
    assert_eq!(read("nomad/jobs/reader/other"), 403);
    assert_eq!(read("nomad/jobs/someone-else"), 403);
    // Past the failed-login burst: still refused, never throttled.
    for _ in 0..15 {
        assert_eq!(read("secret/x"), 403);
    }
    let (code, _) = send_json(
        "PUT",
        &format!("{base}/v1/var/nomad/jobs/reader"),
        Some(&secret),
        &json!({"Items": {"user": "forged"}}),
    );
    assert_eq!(code, 403, "a node secret writes nothing");
    // Once its job is stopped, the node runs no workload of it.
    let (code, body) = send_json(
        "DELETE",
        &format!("{base}/v1/job/reader"),
        Some(&management),
        &json!({}),
    );
    assert_eq!(code, 200, "{body}");
    let refused = wait_for(WAIT, || (read("nomad/jobs/reader") == 403).then_some(()));
    assert!(
        refused.is_some(),
        "still readable after the stop: {}",
        allocs()
    );
}
