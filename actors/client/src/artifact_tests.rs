use super::*;
use std::collections::BTreeMap;

fn artifact(source: &Path, options: &[(&str, &str)]) -> TaskArtifact {
    let mut a = TaskArtifact {
        getter_source: source.to_string_lossy().into_owned(),
        getter_options: options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        ..TaskArtifact::default()
    };
    a.canonicalize();
    a
}

fn sha256_of(bytes: &[u8]) -> String {
    hex(&sha2::Sha256::digest(bytes))
}

fn tar_gz(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    for (name, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o640);
        h.set_entry_type(tar::EntryType::Regular);
        // `set_path` refuses `..`; write the raw name as a hostile archive would.
        let raw = &mut h.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
    for (name, data) in entries {
        w.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fn fast() -> ArtifactLimits {
    ArtifactLimits {
        first_backoff: Duration::from_millis(1),
        ..ArtifactLimits::default()
    }
}

#[test]
fn a_file_lands_in_local_when_its_checksum_matches() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("app.conf");
    std::fs::write(&src, b"port = 8080\n").unwrap();
    let task = dir.path().join("task");
    let sum = format!("sha256:{}", sha256_of(b"port = 8080\n"));
    fetch(&artifact(&src, &[("checksum", &sum)]), &task, &fast()).unwrap();
    assert_eq!(
        std::fs::read(task.join("local/app.conf")).unwrap(),
        b"port = 8080\n"
    );
}

#[test]
fn a_checksum_mismatch_fails_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("app.conf");
    std::fs::write(&src, b"tampered").unwrap();
    let task = dir.path().join("task");
    std::fs::create_dir_all(&task).unwrap();
    let sum = format!("md5:{}", "00".repeat(16));
    let e = fetch(&artifact(&src, &[("checksum", &sum)]), &task, &fast()).unwrap_err();
    assert!(
        matches!(e, ArtifactError::Checksum { kind: "md5", .. }),
        "{e}"
    );
    assert!(!task.join("local/app.conf").exists());
    assert_eq!(
        std::fs::read_dir(&task).unwrap().count(),
        0,
        "temp file left behind"
    );
}

#[test]
fn a_tar_gz_is_unpacked_into_the_destination() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("bundle.tar.gz");
    std::fs::write(
        &src,
        tar_gz(&[("bin/run.sh", b"echo hi"), ("README", b"r")]),
    )
    .unwrap();
    let task = dir.path().join("task");
    fetch(&artifact(&src, &[]), &task, &fast()).unwrap();
    assert_eq!(
        std::fs::read(task.join("local/bin/run.sh")).unwrap(),
        b"echo hi"
    );
    assert_eq!(std::fs::read(task.join("local/README")).unwrap(), b"r");
}

#[test]
fn archive_false_keeps_the_archive_whole() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("bundle.tgz");
    std::fs::write(&src, tar_gz(&[("a", b"1")])).unwrap();
    let task = dir.path().join("task");
    fetch(&artifact(&src, &[("archive", "false")]), &task, &fast()).unwrap();
    assert!(task.join("local/bundle.tgz").is_file());
    assert!(!task.join("local/a").exists());
}

#[test]
fn tar_entries_climbing_out_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("evil.tar.gz");
    std::fs::write(&src, tar_gz(&[("../../../escaped", b"x")])).unwrap();
    let task = dir.path().join("task");
    let e = fetch(&artifact(&src, &[]), &task, &fast()).unwrap_err();
    assert!(e.to_string().contains("outside the destination"), "{e}");
    assert!(!dir.path().join("escaped").exists());
}

#[test]
fn tar_links_pointing_out_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "etc", "/etc").unwrap();
    let bytes = b.into_inner().unwrap().finish().unwrap();
    let src = dir.path().join("links.tar.gz");
    std::fs::write(&src, bytes).unwrap();
    let e = fetch(&artifact(&src, &[]), &dir.path().join("task"), &fast()).unwrap_err();
    assert!(e.to_string().contains("points outside"), "{e}");
}

#[test]
fn zip_slip_is_refused_and_a_plain_zip_unpacks() {
    let dir = tempfile::tempdir().unwrap();
    let evil = dir.path().join("evil.zip");
    std::fs::write(&evil, zip_of(&[("../../slipped", b"x")])).unwrap();
    let task = dir.path().join("task");
    let e = fetch(&artifact(&evil, &[]), &task, &fast()).unwrap_err();
    assert!(e.to_string().contains("outside the destination"), "{e}");
    assert!(!dir.path().join("slipped").exists());

    let good = dir.path().join("good.zip");
    std::fs::write(&good, zip_of(&[("conf/app.ini", b"[a]")])).unwrap();
    fetch(&artifact(&good, &[]), &task, &fast()).unwrap();
    assert_eq!(
        std::fs::read(task.join("local/conf/app.ini")).unwrap(),
        b"[a]"
    );
}

#[test]
fn an_archive_past_its_budget_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("big.tar.gz");
    std::fs::write(&src, tar_gz(&[("zeros", &[0u8; 4096])])).unwrap();
    let limits = ArtifactLimits {
        max_unpacked_bytes: 1024,
        ..fast()
    };
    let e = fetch(&artifact(&src, &[]), &dir.path().join("task"), &limits).unwrap_err();
    assert!(e.to_string().contains("more bytes than allowed"), "{e}");
}

#[test]
fn a_destination_out_of_the_allocation_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("f");
    std::fs::write(&src, b"x").unwrap();
    let mut a = artifact(&src, &[]);
    a.relative_dest = "../../outside".into();
    let e = fetch(&a, &dir.path().join("task"), &fast()).unwrap_err();
    assert!(e.to_string().contains("escapes"), "{e}");
}

#[test]
fn unsupported_sources_are_named() {
    let e = parse_source("git::https://example.invalid/repo", Path::new("/t")).unwrap_err();
    assert!(e.to_string().contains("unsupported artifact source"), "{e}");
    assert_eq!(
        parse_source("http::https://h/x", Path::new("/t")).unwrap(),
        Source::Http("https://h/x".into())
    );
    assert_eq!(
        parse_source("file:///srv/x", Path::new("/t")).unwrap(),
        Source::File("/srv/x".into())
    );
}

#[test]
fn a_server_error_is_retried_then_reported() {
    // A port nothing listens on: every try fails on the network.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let dir = tempfile::tempdir().unwrap();
    let mut a = artifact(Path::new("x"), &[]);
    a.getter_source = format!("http://127.0.0.1:{port}/x");
    let started = std::time::Instant::now();
    let e = fetch(
        &a,
        dir.path(),
        &ArtifactLimits {
            first_backoff: Duration::from_millis(50),
            ..fast()
        },
    )
    .unwrap_err();
    assert!(matches!(e, ArtifactError::Fetch(_)), "{e}");
    // Three tries: two backoffs of 50 and 100 ms.
    assert!(started.elapsed() >= Duration::from_millis(150));
}
