//! `/v1/job/:id/plan`: what registering a job would do, without doing it.
//!
//! The dry run is `ServerApi::plan_job` (`server_api::plan`); this file
//! renders it in Nomad's shape: the scheduler's per-group counts
//! (`DesiredTGUpdates`), the placements it could not make, and a diff of
//! the job against the stored one.

use super::body::off_worker;
use super::body::Body;
use super::errors::ApiError;
use super::job_body::decode_job_body;
use super::query::{api, QueryOptions};
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::structs::{DesiredUpdates, Job, PlanAnnotations};
use herder_server::server_api::JobPlan;
use serde_json::{json, Map, Value};

pub async fn plan_job(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let _ = QueryOptions::from_request(&req)?;
    let api = api(&info)?;
    let (job, value) = decode_job_body(&info, body).await?;
    crate::acl_rules::require_namespace(&req, &job.namespace, herder::acl::Capability::SubmitJob)?;
    if job.id != *id {
        return Err(ApiError::BadRequest("Job ID does not match".into()));
    }
    let want_diff = plan_flag(&value, "Diff")?;
    // Accepted and without effect: herder has no Sentinel policies.
    plan_flag(&value, "PolicyOverride")?;
    let (answer, index) = off_worker(&info, move || {
        let plan = api.plan_job(job.clone())?;
        Ok((render_plan(&plan, &job, want_diff), plan.index))
    })
    .await?;
    Ok(super::query::json_with_index(index, &answer))
}

/// A boolean option of the plan request: absent or `null` is false,
/// anything but a JSON boolean (`"yes"`, `1`) is a 400, as Nomad's decoder
/// answers.
fn plan_flag(body: &Value, name: &str) -> Result<bool, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(ApiError::BadRequest(format!(
            "Failed to decode request body: {name} must be true or false, got {other}"
        ))),
    }
}

/// Nomad's `JobPlanResponse`: the plan, with the diff of `job` against the
/// stored one when asked.
fn render_plan(plan: &JobPlan, job: &Job, want_diff: bool) -> Value {
    let diff = want_diff.then(|| {
        let mut diff = job_diff(plan.previous.as_deref(), job, true);
        attach_updates(&mut diff, &plan.annotations);
        diff
    });
    let created = (!plan.created_evals.is_empty()).then_some(&plan.created_evals);
    let failed = (!plan.failed_tg_allocs.is_empty()).then_some(&plan.failed_tg_allocs);
    json!({
        "JobModifyIndex": plan.job_modify_index,
        "CreatedEvals": created,
        "Diff": diff,
        "Annotations": plan.annotations,
        "FailedTGAllocs": failed,
        "NextPeriodicLaunch": null,
        "Warnings": herder::structs::unhonoured::join_warnings(&plan.warnings),
        "Index": plan.index,
    })
}

/// Nomad's names of the per-group counts in a plan diff's `Updates`.
fn updates_of(u: &DesiredUpdates) -> Map<String, Value> {
    let named = [
        ("ignore", u.ignore),
        ("create", u.place),
        ("migrate", u.migrate),
        ("destroy", u.stop),
        ("in-place update", u.in_place_update),
        ("create/destroy update", u.destructive_update),
        ("canary", u.canary),
        ("preemptions", u.preemptions),
    ];
    named
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| (name.to_string(), json!(n)))
        .collect()
}

fn attach_updates(diff: &mut Value, annotations: &PlanAnnotations) {
    let Some(groups) = diff.get_mut("TaskGroups").and_then(Value::as_array_mut) else {
        return;
    };
    for group in groups {
        let name = group.get("Name").and_then(Value::as_str).unwrap_or("");
        if let Some(u) = annotations.desired_tg_updates.get(name) {
            let updates = updates_of(u);
            if !updates.is_empty() {
                group["Updates"] = Value::Object(updates);
            }
        }
    }
}

/// Fields the server sets; a diff of what the user wrote leaves them out.
const BOOKKEEPING: [&str; 9] = [
    "Status",
    "StatusDescription",
    "Stable",
    "Version",
    "SubmitTime",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
    "TaskGroups",
];

/// The diff of a job against its previous version, in Nomad's `JobDiff`
/// shape: `Type` is Added, Deleted, Edited or None at every level.
/// `contextual` lists unchanged groups and tasks too (with Type None),
/// as Nomad's plan does.
pub fn job_diff(old: Option<&Job>, new: &Job, contextual: bool) -> Value {
    let (old_v, new_v) = (old.map(to_object), to_object(new));
    let strip = |mut m: Map<String, Value>| {
        for k in BOOKKEEPING {
            m.remove(k);
        }
        m
    };
    let (fields, objects) = diff_maps(old_v.clone().map(strip), Some(strip(new_v.clone())));
    let mut groups = Vec::new();
    let old_groups = old.map(|j| j.task_groups.as_slice()).unwrap_or_default();
    for tg in &new.task_groups {
        let before = old_groups.iter().find(|g| g.name == tg.name);
        let d = named_diff(
            before.map(group_object),
            Some(group_object(tg)),
            &tg.name,
            "Tasks",
            before.map(|g| tasks_of(&g.tasks)).unwrap_or_default(),
            tasks_of(&tg.tasks),
            contextual,
        );
        if contextual || d["Type"] != "None" {
            groups.push(d);
        }
    }
    for tg in old_groups {
        if new.lookup_task_group(&tg.name).is_none() {
            groups.push(named_diff(
                Some(group_object(tg)),
                None,
                &tg.name,
                "Tasks",
                tasks_of(&tg.tasks),
                vec![],
                contextual,
            ));
        }
    }
    let changed =
        !fields.is_empty() || !objects.is_empty() || groups.iter().any(|g| g["Type"] != "None");
    json!({
        "Type": change_type(old.is_some(), true, changed),
        "ID": new.id,
        "Fields": null_if_empty(fields),
        "Objects": null_if_empty(objects),
        "TaskGroups": null_if_empty(groups),
    })
}

/// A group as its diff sees it: a scaling policy's ID and indexes are the
/// server's (as Nomad's `scalingPolicyDiff` leaves them out).
fn group_object(tg: &herder::structs::TaskGroup) -> Map<String, Value> {
    let mut object = to_object(tg);
    if let Some(Value::Object(policy)) = object.get_mut("Scaling") {
        for key in ["ID", "CreateIndex", "ModifyIndex"] {
            policy.remove(key);
        }
    }
    object
}

fn tasks_of(tasks: &[herder::structs::Task]) -> Vec<(String, Map<String, Value>)> {
    tasks
        .iter()
        .map(|t| (t.name.clone(), to_object(t)))
        .collect()
}

/// A group's diff (with its tasks as `children`).
fn named_diff(
    old: Option<Map<String, Value>>,
    new: Option<Map<String, Value>>,
    name: &str,
    children_key: &str,
    old_children: Vec<(String, Map<String, Value>)>,
    new_children: Vec<(String, Map<String, Value>)>,
    contextual: bool,
) -> Value {
    let strip = |mut m: Map<String, Value>| {
        m.remove(children_key);
        m
    };
    let (exists_old, exists_new) = (old.is_some(), new.is_some());
    let (fields, objects) = diff_maps(old.map(strip), new.map(strip));
    let mut children = Vec::new();
    for (child, value) in &new_children {
        let before = old_children
            .iter()
            .find(|(n, _)| n == child)
            .map(|(_, v)| v.clone());
        let d = leaf_diff(before, Some(value.clone()), child);
        if contextual || d["Type"] != "None" {
            children.push(d);
        }
    }
    for (child, value) in &old_children {
        if !new_children.iter().any(|(n, _)| n == child) {
            children.push(leaf_diff(Some(value.clone()), None, child));
        }
    }
    let changed =
        !fields.is_empty() || !objects.is_empty() || children.iter().any(|c| c["Type"] != "None");
    json!({
        "Type": change_type(exists_old, exists_new, changed),
        "Name": name,
        "Fields": null_if_empty(fields),
        "Objects": null_if_empty(objects),
        children_key: null_if_empty(children),
    })
}

/// A task's diff.
fn leaf_diff(
    old: Option<Map<String, Value>>,
    new: Option<Map<String, Value>>,
    name: &str,
) -> Value {
    let (exists_old, exists_new) = (old.is_some(), new.is_some());
    let (fields, objects) = diff_maps(old, new);
    let changed = !fields.is_empty() || !objects.is_empty();
    json!({
        "Type": change_type(exists_old, exists_new, changed),
        "Name": name,
        "Fields": null_if_empty(fields),
        "Objects": null_if_empty(objects),
        "Annotations": null,
    })
}

fn change_type(old: bool, new: bool, changed: bool) -> &'static str {
    match (old, new) {
        (false, _) => "Added",
        (true, false) => "Deleted",
        (true, true) if changed => "Edited",
        _ => "None",
    }
}

fn to_object<T: serde::Serialize>(value: &T) -> Map<String, Value> {
    match serde_json::to_value(value) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

fn null_if_empty(items: Vec<Value>) -> Value {
    if items.is_empty() {
        Value::Null
    } else {
        Value::Array(items)
    }
}

/// Nomad prints every field value as text.
fn text_of(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

fn is_nested(value: Option<&Value>) -> bool {
    matches!(value, Some(Value::Object(_) | Value::Array(_)))
}

/// Field and object diffs of two objects; only changes are listed.
fn diff_maps(
    old: Option<Map<String, Value>>,
    new: Option<Map<String, Value>>,
) -> (Vec<Value>, Vec<Value>) {
    let (old, new) = (old.unwrap_or_default(), new.unwrap_or_default());
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let (mut fields, mut objects) = (Vec::new(), Vec::new());
    for key in keys {
        let (o, n) = (old.get(key), new.get(key));
        if o == n {
            continue;
        }
        if is_nested(o) || is_nested(n) {
            objects.extend(diff_nested(key, o, n));
        } else {
            let (o_text, n_text) = (text_of(o), text_of(n));
            if o_text != n_text {
                fields.push(field_diff(key, &o_text, &n_text));
            }
        }
    }
    (fields, objects)
}

fn field_diff(name: &str, old: &str, new: &str) -> Value {
    let kind = match (old.is_empty(), new.is_empty()) {
        (true, false) => "Added",
        (false, true) => "Deleted",
        _ => "Edited",
    };
    json!({"Type": kind, "Name": name, "Old": old, "New": new, "Annotations": null})
}

/// An object or list field: objects diff field by field; lists of values
/// list what was added and removed; lists of objects diff by position.
fn diff_nested(name: &str, old: Option<&Value>, new: Option<&Value>) -> Vec<Value> {
    let object = |fields: Vec<Value>, objects: Vec<Value>, exists_old: bool, exists_new: bool| {
        let changed = !fields.is_empty() || !objects.is_empty();
        json!({
            "Type": change_type(exists_old, exists_new, changed),
            "Name": name,
            "Fields": null_if_empty(fields),
            "Objects": null_if_empty(objects),
        })
    };
    let present = |v: Option<&Value>| !matches!(v, None | Some(Value::Null));
    let as_map = |v: Option<&Value>| match v {
        Some(Value::Object(m)) => Some(m.clone()),
        _ => None,
    };
    let as_list = |v: Option<&Value>| match v {
        Some(Value::Array(a)) => a.clone(),
        _ => vec![],
    };
    if matches!(old, Some(Value::Object(_))) || matches!(new, Some(Value::Object(_))) {
        let (fields, objects) = diff_maps(as_map(old), as_map(new));
        return vec![object(fields, objects, present(old), present(new))];
    }
    let (old_list, new_list) = (as_list(old), as_list(new));
    let all_values = old_list
        .iter()
        .chain(&new_list)
        .all(|v| !is_nested(Some(v)));
    if all_values {
        let mut fields = Vec::new();
        for v in old_list.iter().filter(|v| !new_list.contains(v)) {
            fields.push(field_diff(name, &text_of(Some(v)), ""));
        }
        for v in new_list.iter().filter(|v| !old_list.contains(v)) {
            fields.push(field_diff(name, "", &text_of(Some(v))));
        }
        return vec![object(fields, vec![], present(old), present(new))];
    }
    let len = old_list.len().max(new_list.len());
    (0..len)
        .filter(|i| old_list.get(*i) != new_list.get(*i))
        .map(|i| {
            let (o, n) = (old_list.get(i), new_list.get(i));
            let (fields, objects) = diff_maps(as_map(o), as_map(n));
            object(fields, objects, o.is_some(), n.is_some())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use herder::state::fixtures;

    fn find<'a>(list: &'a Value, name: &str) -> &'a Value {
        list.as_array()
            .and_then(|l| l.iter().find(|v| v["Name"] == name))
            .unwrap_or_else(|| panic!("{name} in {list}"))
    }

    #[test]
    fn a_new_job_is_added_and_an_unchanged_one_is_none() {
        let job = fixtures::job("default", "web", &[("g", 1)]);
        let added = job_diff(None, &job, true);
        assert_eq!(added["Type"], "Added");
        assert_eq!(added["TaskGroups"][0]["Type"], "Added");
        assert_eq!(find(&added["Fields"], "Priority")["New"], "50");
        let same = job_diff(Some(&job), &job, true);
        assert_eq!(same["Type"], "None");
        assert_eq!(same["Fields"], Value::Null);
        assert_eq!(same["TaskGroups"][0]["Type"], "None", "contextual lists it");
        assert_eq!(job_diff(Some(&job), &job, false)["TaskGroups"], Value::Null);
    }

    #[test]
    fn edits_name_the_field_group_task_and_list_entries() {
        let old = fixtures::job("default", "web", &[("g", 1), ("gone", 1)]);
        let mut new = fixtures::job("default", "web", &[("g", 3), ("fresh", 1)]);
        new.datacenters.push("dc2".into());
        new.task_groups[0].tasks[0].resources.cpu = 500;
        let diff = job_diff(Some(&old), &new, false);
        assert_eq!(diff["Type"], "Edited");
        let dcs = find(&diff["Objects"], "Datacenters");
        assert_eq!(dcs["Fields"][0]["Type"], "Added");
        assert_eq!(dcs["Fields"][0]["New"], "dc2");
        let g = find(&diff["TaskGroups"], "g");
        assert_eq!(g["Type"], "Edited");
        let count = find(&g["Fields"], "Count");
        assert_eq!(
            (count["Old"].as_str(), count["New"].as_str()),
            (Some("1"), Some("3"))
        );
        let task = &g["Tasks"][0];
        assert_eq!(task["Type"], "Edited");
        let cpu = find(&find(&task["Objects"], "Resources")["Fields"], "CPU");
        assert_eq!(cpu["New"], "500");
        assert_eq!(find(&diff["TaskGroups"], "fresh")["Type"], "Added");
        assert_eq!(find(&diff["TaskGroups"], "gone")["Type"], "Deleted");
    }

    #[test]
    fn a_scaling_policys_id_and_indexes_are_not_a_change() {
        use herder::structs::ScalingPolicy;
        let mut old = fixtures::job("default", "web", &[("g", 1)]);
        old.task_groups[0].scaling = Some(ScalingPolicy {
            id: "stored".into(),
            create_index: 7,
            modify_index: 7,
            max: Some(3),
            ..Default::default()
        });
        let mut new = old.clone();
        let policy = new.task_groups[0].scaling.as_mut().unwrap();
        (policy.id, policy.create_index, policy.modify_index) = (String::new(), 0, 0);
        assert_eq!(job_diff(Some(&old), &new, false)["Type"], "None");
        new.task_groups[0].scaling.as_mut().unwrap().max = Some(5);
        let diff = job_diff(Some(&old), &new, false);
        let scaling = find(&diff["TaskGroups"][0]["Objects"], "Scaling");
        assert_eq!(
            scaling["Fields"],
            json!([{"Type": "Edited", "Name": "Max", "Old": "3", "New": "5", "Annotations": null}])
        );
    }
}
