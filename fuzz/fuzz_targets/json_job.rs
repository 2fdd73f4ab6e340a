//! Fuzzes the JSON job parser (`herder::jobspec::parse_json`) with
//! arbitrary UTF-8, on a 1 MiB stack like the HCL target: serde_json stops
//! nesting at 128 levels, and nothing after it may recurse further.

#![no_main]

use libfuzzer_sys::fuzz_target;

const STACK: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    std::thread::scope(|scope| {
        let parse = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn_scoped(scope, || {
                if let Ok(job) = herder::jobspec::parse_json(text) {
                    // What a parsed job goes through next must hold too.
                    let _ = job.validate();
                    let _ = serde_json::to_string(&job);
                }
            });
        if let Ok(parse) = parse {
            if let Err(panic) = parse.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
});
