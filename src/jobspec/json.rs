//! JSON jobs: `{"Job": {...}}` as `nomad job run -output` prints it and
//! `PUT /v1/jobs` takes it, or a bare job object as `/v1/jobs/parse` answers.
//!
//! The text is first read straight into the typed job, so that serde_json's
//! line and column point into the user's text for syntax and type errors.
//!
//! Nomad's `api` structs use nil pointers for "not written", and its
//! `Canonicalize` merges what was written over defaults field by field: a
//! group's `RestartPolicy: {"Attempts": 5}` keeps the job type's interval
//! and delay, a missing `Count` means 1 (an explicit 0 stays 0), a group
//! without `Update` takes the job's. herder's structs cannot tell missing
//! from zero, so the same merges are done here on the untyped JSON, where
//! "missing or null" is visible, before the job is read a second time.

use super::JobspecError;
use crate::structs::{
    EphemeralDisk, Job, JobType, LogConfig, MigrateStrategy, ReschedulePolicy, RestartPolicy,
    UpdateStrategy,
};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The wrapped shape, read only to check types with positions.
#[derive(Deserialize)]
struct Wrapped {
    #[serde(rename = "Job")]
    _job: Job,
}

pub(crate) fn parse(text: &str, file: &str) -> Result<Job, JobspecError> {
    let error = |e: serde_json::Error| JobspecError::Json {
        file: file.to_string(),
        line: e.line(),
        column: e.column(),
        message: e
            .to_string()
            .split(" at line ")
            .next()
            .unwrap_or("")
            .to_string(),
    };
    let mut value: Value = serde_json::from_str(text).map_err(error)?;
    // `null` anywhere means "not set" (Nomad's API structs are pointers):
    // the members go, and the merges below fill their defaults.
    crate::structs::serde_util::strip_nulls(&mut value);
    let mut raw = match value {
        Value::Object(mut map) => match map.remove("Job") {
            Some(Value::Object(job)) => {
                check_types::<Wrapped>(text, || json!({"Job": job.clone()})).map_err(error)?;
                job
            }
            // A bare job never has a "Job" field; put back what was taken.
            other => {
                if let Some(v) = other {
                    map.insert("Job".to_string(), v);
                }
                check_types::<Job>(text, || Value::Object(map.clone())).map_err(error)?;
                map
            }
        },
        _ => {
            return Err(JobspecError::Json {
                file: file.to_string(),
                line: 1,
                column: 1,
                message: "a job must be a JSON object, either {\"Job\": {...}} or the job itself"
                    .to_string(),
            })
        }
    };
    if raw.contains_key("job") && !raw.contains_key("ID") {
        return Err(JobspecError::Json {
            file: file.to_string(),
            line: 1,
            column: 1,
            message: "this looks like HCL's JSON syntax ({\"job\": ...}), which herder does not \
                      read; write the job in HCL or in the API's JSON form ({\"Job\": {\"ID\": ...}})"
                .to_string(),
        });
    }
    fill_unset(&mut raw);
    // The typed read above succeeded and the merges only add values of the
    // fields' own types, so this read fails only on a herder bug.
    serde_json::from_value(Value::Object(raw)).map_err(|e| JobspecError::Json {
        file: file.to_string(),
        line: 1,
        column: 1,
        message: format!("after filling defaults: {e}"),
    })
}

/// Checks the typed shape: read from the text, so that an error has its
/// line and column; a text whose only trouble is a `null` (which the
/// typed read refuses where a field is not optional) is accepted when its
/// null-free value (made only on that path) reads.
fn check_types<T: serde::de::DeserializeOwned>(
    text: &str,
    null_free: impl FnOnce() -> Value,
) -> Result<(), serde_json::Error> {
    match serde_json::from_str::<T>(text) {
        Ok(_) => Ok(()),
        Err(e) => T::deserialize(null_free()).map(|_| ()).map_err(|_| e),
    }
}

/// Merges written fields over Nomad's defaults, level by level.
fn fill_unset(job: &mut Map<String, Value>) {
    let job_type = JobType::parse(
        job.get("Type")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .unwrap_or("service"),
    );
    let update =
        written(job, "Update").map(|u| overlay(to_json(UpdateStrategy::group_default()), u));
    set_or_remove(job, "Update", update.clone());
    let periodic = written(job, "Periodic").map(|p| {
        overlay(
            json!({"Enabled": true, "SpecType": "cron", "TimeZone": "UTC"}),
            p,
        )
    });
    set_or_remove(job, "Periodic", periodic);
    let parameterized =
        written(job, "ParameterizedJob").map(|p| overlay(json!({"Payload": "optional"}), p));
    set_or_remove(job, "ParameterizedJob", parameterized);
    default_weights(job);

    let type_reschedule = ReschedulePolicy::default_for(&job_type);
    let inherited = Inherited {
        has_reschedule: type_reschedule.is_some(),
        reschedule: overlay_opt(
            to_json(type_reschedule.unwrap_or_default()),
            written(job, "Reschedule"),
        ),
        migrate: overlay_opt(to_json(MigrateStrategy::default()), written(job, "Migrate")),
        restart: to_json(RestartPolicy::default_for(&job_type)),
        update,
        is_service: job_type == JobType::Service,
    };
    if let Some(Value::Array(groups)) = job.get_mut("TaskGroups") {
        for group in groups.iter_mut().filter_map(Value::as_object_mut) {
            fill_group(group, &inherited);
        }
    }
}

/// What a group takes from its job.
struct Inherited {
    has_reschedule: bool,
    reschedule: Value,
    migrate: Value,
    restart: Value,
    update: Option<Value>,
    is_service: bool,
}

fn fill_group(group: &mut Map<String, Value>, job: &Inherited) {
    if group.get("Count").is_none_or(Value::is_null) {
        group.insert("Count".into(), json!(1));
    }
    let restart = overlay_opt(job.restart.clone(), written(group, "RestartPolicy"));
    group.insert("RestartPolicy".into(), restart.clone());
    let reschedule = match written(group, "ReschedulePolicy") {
        Some(g) => Some(overlay(job.reschedule.clone(), g)),
        None => job.has_reschedule.then(|| job.reschedule.clone()),
    };
    set_or_remove(group, "ReschedulePolicy", reschedule);
    if job.is_service {
        let migrate = overlay_opt(job.migrate.clone(), written(group, "Migrate"));
        group.insert("Migrate".into(), migrate);
    }
    let update = match (written(group, "Update"), &job.update) {
        (Some(g), Some(j)) => Some(overlay(j.clone(), g)),
        (Some(g), None) => Some(overlay(to_json(UpdateStrategy::group_default()), g)),
        (None, j) => j.clone(),
    };
    set_or_remove(group, "Update", update);
    let disk =
        written(group, "EphemeralDisk").map(|d| overlay(to_json(EphemeralDisk::default()), d));
    set_or_remove(group, "EphemeralDisk", disk);
    default_weights(group);
    if let Some(Value::Array(tasks)) = group.get_mut("Tasks") {
        for task in tasks.iter_mut().filter_map(Value::as_object_mut) {
            let task_restart = written(task, "RestartPolicy").map(|r| overlay(restart.clone(), r));
            set_or_remove(task, "RestartPolicy", task_restart);
            let logs =
                written(task, "LogConfig").map(|l| overlay(to_json(LogConfig::default()), l));
            set_or_remove(task, "LogConfig", logs);
            default_weights(task);
        }
    }
}

/// Affinities and spreads without a weight weigh 50, as in Nomad.
fn default_weights(level: &mut Map<String, Value>) {
    for key in ["Affinities", "Spreads"] {
        if let Some(Value::Array(items)) = level.get_mut(key) {
            for item in items.iter_mut().filter_map(Value::as_object_mut) {
                if item.get("Weight").is_none_or(Value::is_null) {
                    item.insert("Weight".into(), json!(50));
                }
            }
        }
    }
}

/// The object at `key`, when it was written (present and not null).
fn written<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| v.is_object())
}

/// `base` with every non-null field of `written` put over it.
fn overlay(mut base: Value, written: &Value) -> Value {
    if let (Value::Object(base_map), Value::Object(w)) = (&mut base, written) {
        for (k, v) in w.iter().filter(|(_, v)| !v.is_null()) {
            base_map.insert(k.clone(), v.clone());
        }
    }
    base
}

fn overlay_opt(base: Value, written: Option<&Value>) -> Value {
    match written {
        Some(w) => overlay(base, w),
        None => base,
    }
}

fn set_or_remove(obj: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    match value {
        Some(v) => obj.insert(key.to_string(), v),
        None => obj.remove(key),
    };
}

fn to_json<T: serde::Serialize>(value: T) -> Value {
    // herder's own structs always serialize.
    serde_json::to_value(value).unwrap_or(Value::Null)
}
