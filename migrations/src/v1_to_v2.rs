//! Format 1 -> 2: allocations stop embedding their job.
//!
//! In format 1 an allocation row carried the whole job it ran as `Job`
//! (as Nomad's allocations do). Format 2 keeps a reference instead: the
//! row gets `JobVersion` and the job lives once in the job-versions table.
//! This step strips `Job` from every allocation row and stores each
//! embedded job as its version when that version is not stored yet.

use crate::format::{describe_key, meta_with_version, read_meta, MigrationError, META_KEY};
use serde_json::Value;
use std::collections::BTreeSet;

/// Table prefixes of formats 1 and 2 (frozen here: later formats may move).
const ALLOC_PREFIX: u8 = b'a';
const JOB_VERSION_PREFIX: u8 = b'v';

pub(crate) fn run(db: &sled::Db) -> Result<(), MigrationError> {
    let mut batch = sled::Batch::default();
    let mut versions_added = BTreeSet::new();
    for row in db.scan_prefix([ALLOC_PREFIX]) {
        let (key, value) = row?;
        let bad = |reason: String| MigrationError::BadRow {
            key: describe_key(&key),
            reason,
        };
        let mut alloc: Value = serde_json::from_slice(&value).map_err(|e| bad(e.to_string()))?;
        let object = alloc
            .as_object_mut()
            .ok_or_else(|| bad("not a JSON object".into()))?;
        let version = match object.remove("Job") {
            Some(job) if !job.is_null() => {
                let version_key = version_key(object, &job).map_err(bad)?;
                let version = job.get("Version").and_then(Value::as_u64).unwrap_or(0);
                if !versions_added.contains(&version_key) && !db.contains_key(&version_key)? {
                    let bytes = serde_json::to_vec(&job).map_err(|e| bad(e.to_string()))?;
                    batch.insert(version_key.clone(), bytes);
                    versions_added.insert(version_key);
                }
                version
            }
            _ => object
                .get("JobVersion")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        };
        object.insert("JobVersion".to_string(), Value::from(version));
        let bytes = serde_json::to_vec(&alloc).map_err(|e| bad(e.to_string()))?;
        batch.insert(key, bytes);
    }
    batch.insert(META_KEY, meta_with_version(read_meta(db)?, 2)?);
    db.apply_batch(batch)?;
    db.flush()?;
    Ok(())
}

/// The job-versions key of the embedded job: prefix, namespace, 0, job ID,
/// 0, version (big-endian, so versions sort numerically).
fn version_key(alloc: &serde_json::Map<String, Value>, job: &Value) -> Result<Vec<u8>, String> {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let namespace = text(job.get("Namespace"))
        .or_else(|| text(alloc.get("Namespace")))
        .ok_or("the embedded job has no Namespace")?;
    let job_id = text(job.get("ID"))
        .or_else(|| text(alloc.get("JobID")))
        .ok_or("the embedded job has no ID")?;
    let version = job.get("Version").and_then(Value::as_u64).unwrap_or(0);
    let mut key = vec![JOB_VERSION_PREFIX];
    key.extend_from_slice(namespace.as_bytes());
    key.push(0);
    key.extend_from_slice(job_id.as_bytes());
    key.push(0);
    key.extend_from_slice(&version.to_be_bytes());
    Ok(key)
}
