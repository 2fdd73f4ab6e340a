//! Fuzzes the API's filter expressions (`?filter=` on list endpoints):
//! `Filter::parse` on arbitrary UTF-8, then matching the parsed filter
//! against a small job-like JSON value, on a 1 MiB stack.

#![no_main]

use herder_actors::http::filter::Filter;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use std::sync::LazyLock;

const STACK: usize = 1 << 20;

/// A value with every kind of field a filter can select: strings, numbers,
/// bools, null, lists, maps and nesting.
static VALUE: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "ID": "web",
        "Name": "web-frontend",
        "Status": "running",
        "Priority": 50,
        "Stop": false,
        "ParentID": null,
        "Datacenters": ["dc1", "dc2"],
        "Meta": {"owner": "ops", "tier": "1"},
        "TaskGroups": [
            {"Name": "g", "Count": 3, "Tasks": [{"Name": "t", "Driver": "exec"}]}
        ]
    })
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    std::thread::scope(|scope| {
        let run = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn_scoped(scope, || {
                if let Ok(filter) = Filter::parse(text) {
                    let _ = filter.matches(&VALUE);
                }
            });
        if let Ok(run) = run {
            if let Err(panic) = run.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
});
