//! The fs routes against an allocation directory kept by this agent's
//! client: Nomad's answers, errors and confinement.

use super::*;
use actix_web::{test as web_test, App};
use herder::state::fixtures;
use herder_common::config::{AgentConfig, ConfigSources, FlagOverrides};
use std::sync::Arc;

struct Fixture {
    info: Arc<AgentInfo>,
    alloc: AllocId,
    _dir: tempfile::TempDir,
}

/// An agent (no server) whose client keeps one allocation with a task
/// that wrote `local/out.txt`, a secret and a symlink to the host.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut flags = FlagOverrides {
        data_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    flags.client.insert("enabled".into(), true.into());
    flags
        .client
        .insert("servers".into(), vec!["127.0.0.1:1".to_string()].into());
    let config = AgentConfig::load(&ConfigSources {
        env: Some(Vec::new()),
        flags,
        ..Default::default()
    })
    .unwrap();
    let mut job = fixtures::job("default", "web", &[("g", 1)]);
    job.canonicalize();
    let eval = fixtures::eval(&job, herder::structs::TriggeredBy::JobRegister, 1);
    let node = fixtures::node("here");
    let alloc = fixtures::AllocBuilder::new(&job, "g").build(0, node.id, eval.id, 1);
    let root = AllocDir::new(dir.path(), &alloc.id).root;
    std::fs::create_dir_all(root.join("main/local")).unwrap();
    std::fs::create_dir_all(root.join("main/secrets")).unwrap();
    std::fs::create_dir_all(root.join("alloc/logs")).unwrap();
    std::fs::write(root.join("main/local/out.txt"), "0123456789").unwrap();
    std::fs::write(root.join("main/secrets/key"), "hush").unwrap();
    std::fs::write(dir.path().join("host.txt"), "host").unwrap();
    std::os::unix::fs::symlink(dir.path().join("host.txt"), root.join("main/local/esc")).unwrap();
    std::fs::write(
        root.join(herder_client::alloc_runner::ALLOC_STATE_FILE),
        serde_json::to_vec(&serde_json::json!({ "alloc": alloc, "job": job })).unwrap(),
    )
    .unwrap();
    let info = Arc::new(AgentInfo {
        config,
        data_dir: dir.path().to_path_buf(),
        started_at: std::time::SystemTime::now(),
        http_addr: std::sync::OnceLock::new(),
        server: None,
        client_node_id: std::sync::OnceLock::new(),
        shutting_down: tokio::sync::watch::Sender::new(false),
        nomad_metrics: Default::default(),
        client: std::sync::OnceLock::new(),
        own_server: std::sync::OnceLock::new(),
    });
    Fixture {
        info,
        alloc: alloc.id,
        _dir: dir,
    }
}

async fn call(f: &Fixture, uri: &str) -> (u16, String) {
    let app = web_test::init_service(
        App::new()
            .app_data(web::Data::from(f.info.clone()))
            .configure(configure),
    )
    .await;
    let resp =
        web_test::call_service(&app, web_test::TestRequest::get().uri(uri).to_request()).await;
    let status = resp.status().as_u16();
    let body = web_test::read_body(resp).await;
    (status, String::from_utf8_lossy(&body).to_string())
}

#[actix_rt::test]
async fn ls_and_stat_answer_alloc_file_info() {
    let f = fixture();
    let (code, body) = call(&f, &format!("/v1/client/fs/ls/{}", f.alloc)).await;
    assert_eq!(code, 200, "{body}");
    let files: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["Name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alloc", "main"]);
    assert_eq!(files[0]["IsDir"], true);
    let (code, body) = call(
        &f,
        &format!("/v1/client/fs/stat/{}?path=/main/local/out.txt", f.alloc),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let stat: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(stat["Size"], 10);
    assert_eq!(stat["ContentType"], "text/plain; charset=utf-8");
    let (code, body) = call(&f, &format!("/v1/client/fs/stat/{}", f.alloc)).await;
    assert_eq!((code, body.as_str()), (400, "must provide a file name"));
}

#[actix_rt::test]
async fn paths_outside_the_allocation_are_refused_with_nomads_text() {
    let f = fixture();
    for path in ["../../host.txt", "main/local/esc", "/../.."] {
        let (code, body) = call(&f, &format!("/v1/client/fs/ls/{}?path={path}", f.alloc)).await;
        assert_eq!(
            (code, body.as_str()),
            (500, "Path escapes the alloc directory"),
            "ls {path}"
        );
        let (code, body) = call(&f, &format!("/v1/client/fs/cat/{}?path={path}", f.alloc)).await;
        assert_eq!(
            (code, body.as_str()),
            (400, "Path escapes the alloc directory"),
            "cat {path}"
        );
    }
    let (code, body) = call(
        &f,
        &format!("/v1/client/fs/cat/{}?path=main/secrets/key", f.alloc),
    )
    .await;
    assert_eq!(
        (code, body.as_str()),
        (500, "Reading secret file prohibited: main/secrets/key")
    );
    let (code, body) = call(&f, &format!("/v1/client/fs/cat/{}?path=main", f.alloc)).await;
    assert_eq!((code, body.as_str()), (400, "file \"main\" is a directory"));
}

#[actix_rt::test]
async fn cat_readat_and_stream_read_what_the_task_wrote() {
    let f = fixture();
    let file = "main/local/out.txt";
    let (code, body) = call(&f, &format!("/v1/client/fs/cat/{}?path={file}", f.alloc)).await;
    assert_eq!((code, body.as_str()), (200, "0123456789"));
    let (code, body) = call(
        &f,
        &format!(
            "/v1/client/fs/readat/{}?path={file}&offset=3&limit=4",
            f.alloc
        ),
    )
    .await;
    assert_eq!((code, body.as_str()), (200, "3456"));
    let (code, body) = call(
        &f,
        &format!(
            "/v1/client/fs/readat/{}?path={file}&offset=8&limit=100",
            f.alloc
        ),
    )
    .await;
    assert_eq!((code, body.as_str()), (200, "89"));
    let (code, body) = call(&f, &format!("/v1/client/fs/readat/{}?path={file}", f.alloc)).await;
    assert_eq!(code, 500);
    assert!(body.starts_with("error parsing offset"), "{body}");
    let (code, body) = call(
        &f,
        &format!(
            "/v1/client/fs/stream/{}?path={file}&follow=false&origin=end&offset=3",
            f.alloc
        ),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        body,
        format!("{{\"Offset\":10,\"Data\":\"Nzg5\",\"File\":\"{file}\"}}\n")
    );
    let (code, body) = call(
        &f,
        &format!("/v1/client/fs/stream/{}?path=/redis/executor", f.alloc),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    let (code, _) = call(
        &f,
        &format!("/v1/client/fs/stream/{}?path={file}&origin=middle", f.alloc),
    )
    .await;
    assert_eq!(code, 400);
}

#[actix_rt::test]
async fn an_allocation_no_one_knows_is_unknown() {
    let f = fixture();
    let other = herder::structs::new_id();
    let (code, body) = call(&f, &format!("/v1/client/fs/ls/{other}")).await;
    assert_eq!(
        (code, body),
        (404, format!("Unknown allocation \"{other}\""))
    );
    let (code, body) = call(&f, "/v1/client/fs/ls/not-a-uuid").await;
    assert_eq!(
        (code, body.as_str()),
        (404, "Unknown allocation \"not-a-uuid\"")
    );
}
