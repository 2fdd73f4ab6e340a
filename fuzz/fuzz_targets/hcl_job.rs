//! Fuzzes the HCL job parser (`herder::jobspec::parse_hcl`) with arbitrary
//! UTF-8: no text may panic, overflow the stack, or take more than the
//! expansion limit's time and memory.
//!
//! Each input is parsed on a thread with the stack the parser's tests
//! allow (1 MiB, half of what server threads get), so that a hole in the
//! nesting bound shows up as a crash here rather than only past the 8 MiB
//! of the fuzzer's main thread.

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
                // Errors are expected; only crashes, hangs and memory
                // blow-ups are findings.
                let _ = herder::jobspec::parse_hcl(text, "fuzz.hcl");
            });
        if let Ok(parse) = parse {
            // A panic in the parser is a finding: re-raise it.
            if let Err(panic) = parse.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
});
