//! Hostile job files: deep nesting, values that multiply, huge text. Each
//! must be refused with a [`JobspecError::Limit`] that names the setting,
//! quickly, without overflowing a small stack or allocating what the file
//! describes; and the deepest file the limits accept must still parse on a
//! small stack.

use super::*;
use std::time::{Duration, Instant};

/// The stack the deepest accepted files must parse within: half of the
/// 2 MiB that server threads (tokio's workers) get, leaving the rest for
/// what runs below the parser. Measured in this test build (herder
/// unoptimized, its dependencies at opt-level 2), the deepest accepted file
/// of each construct needs 143 KiB (`1 + 1 + ...`) to 674 KiB
/// (`[for x in [for x in ...`), nearly all of it `hcl-edit`'s parser (up to
/// ~11 KiB a level); 256 KiB would hold only about 24 levels of the worst.
const SMALL_STACK: usize = 1 << 20;

/// Runs `f` on a thread with `stack` bytes of stack: a stack overflow
/// aborts the whole test binary, which is the failure these tests catch.
fn on_stack<T: Send + 'static>(stack: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(stack)
        .spawn(f)
        .expect("spawn a test thread")
        .join()
        .expect("the parse panicked")
}

/// One way to nest: `open` n times, `inner`, `close` n times, all
/// between `prefix` and `suffix`.
struct Construct {
    name: &'static str,
    prefix: &'static str,
    open: &'static str,
    inner: &'static str,
    close: &'static str,
    suffix: &'static str,
}

const CONSTRUCTS: [Construct; 15] = [
    nest("lists", "[", "1", "]"),
    nest("parentheses", "(", "1", ")"),
    nest("objects", "{a = ", "1", "}"),
    nest("interpolations", "\"${", "1", "}\""),
    nest("heredocs", "<<EOF\n${", "1", "}\nEOF\n"),
    nest("nots", "!", "true", ""),
    nest("negations", "- ", "1", ""),
    nest("sums", "1 + ", "1", ""),
    nest("comparisons", "1 == ", "1", ""),
    nest("conditionals", "true ? ", "1", " : 0"),
    nest("else chains", "false ? 0 : ", "1", ""),
    nest("function calls", "upper(", "\"a\"", ")"),
    nest("for expressions", "[for x in ", "[1]", " : x]"),
    Construct {
        prefix: "\"",
        suffix: "\"",
        ..nest("if directives", "%{if true}", "x", "%{endif}")
    },
    Construct {
        prefix: "\"",
        suffix: "\"",
        ..nest("for directives", "%{for x in [1]}", "x", "%{endfor}")
    },
];

const fn nest(
    name: &'static str,
    open: &'static str,
    inner: &'static str,
    close: &'static str,
) -> Construct {
    Construct {
        name,
        prefix: "",
        open,
        inner,
        close,
        suffix: "",
    }
}

impl Construct {
    /// A job file whose local `v` nests the construct `n` times.
    fn file(&self, n: usize) -> String {
        let expr = [
            self.prefix,
            &self.open.repeat(n),
            self.inner,
            &self.close.repeat(n),
            self.suffix,
        ]
        .concat();
        format!("locals {{\n  v = {expr}\n}}\njob \"x\" {{}}\n")
    }

    /// A job file whose task's driver config holds the construct nested
    /// `n` times: the value goes on through the JSON conversion into the job.
    fn in_config(&self, n: usize) -> String {
        let expr = [
            self.prefix,
            &self.open.repeat(n),
            self.inner,
            &self.close.repeat(n),
            self.suffix,
        ]
        .concat();
        format!(
            "job \"x\" {{\n group \"g\" {{\n  task \"t\" {{\n   config {{\n    v = {expr}\n   }}\n  }}\n }}\n}}\n"
        )
    }

    /// How many times the construct nests in about `bytes` of text.
    fn times_in(&self, bytes: usize) -> usize {
        bytes / (self.open.len() + self.close.len())
    }

    /// The deepest nesting the default limits accept.
    fn deepest_accepted(&self) -> usize {
        let max = HclLimits::default().max_nesting_depth;
        (1..)
            .find(|n| {
                let budget = limits::Budget::new(usize::MAX);
                scan::scan(&self.file(*n), max, &budget).is_err()
            })
            .map_or(0, |n| n - 1)
    }
}

fn is_limit(e: &JobspecError, kind: LimitKind) -> bool {
    matches!(e, JobspecError::Limit { limit, .. } if *limit == kind)
}

/// Parses on a small stack and expects the named limit, with the setting
/// in the message, within `within`.
fn refused(src: String, kind: LimitKind, within: Duration) -> JobspecError {
    let (result, took) = on_stack(SMALL_STACK, move || {
        let start = Instant::now();
        let result = parse_hcl(&src, "hostile.hcl");
        (result, start.elapsed())
    });
    let e = result.expect_err("a hostile file must be refused");
    assert!(is_limit(&e, kind), "expected a {kind:?} limit, got {e}");
    assert!(e.to_string().contains(kind.setting()), "{e}");
    assert!(took < within, "refusing took {took:?}: {e}");
    e
}

#[test]
fn deep_nesting_of_every_kind_is_refused_before_parsing() {
    for c in &CONSTRUCTS {
        for bytes in [2_000, 100_000] {
            let n = c.times_in(bytes);
            let e = refused(c.file(n), LimitKind::NestingDepth, Duration::from_secs(2));
            let text = e.to_string();
            assert!(
                text.contains("deeper than 64 levels"),
                "{} x{n}: {text}",
                c.name
            );
            // The error points into the nested value, from line 2 on.
            assert!(
                e.location().is_some_and(|l| l.0 >= 2),
                "{} x{n}: {text}",
                c.name
            );
        }
    }
}

#[test]
fn the_deepest_accepted_nesting_parses_on_a_small_stack() {
    for c in &CONSTRUCTS {
        let n = c.deepest_accepted();
        assert!(n >= 20, "{}: only {n} levels accepted", c.name);
        let src = c.file(n);
        let result = on_stack(SMALL_STACK, move || parse_hcl(&src, "deep.hcl").map(|_| ()));
        assert_eq!(result, Ok(()), "{} x{n}", c.name);
        // One more level is refused.
        let e = parse_hcl(&c.file(n + 1), "deep.hcl").expect_err(c.name);
        assert!(is_limit(&e, LimitKind::NestingDepth), "{}: {e}", c.name);
        // The same in a driver's config, three levels further in: the value
        // is converted to JSON, stored in the job, serialized and dropped.
        let src = c.in_config(n - 3);
        let result = on_stack(SMALL_STACK, move || {
            let job = parse_hcl(&src, "deep.hcl").map_err(|e| e.to_string())?;
            serde_json::to_string(&job).map_err(|e| e.to_string())?;
            Ok::<_, String>(job.task_groups[0].tasks[0].config.contains_key("v"))
        });
        assert_eq!(result, Ok(true), "{} x{} in a config", c.name, n - 3);
    }
}

#[test]
fn text_the_parser_reads_as_code_is_scanned_as_code() {
    // Each file makes a naive scan take the deep list at its end for the
    // inside of a string, where the parser reads it as code.
    let deep = format!("b = {}1{}\n", "[".repeat(5_000), "]".repeat(5_000));
    let cases = [
        // In a directive body `"` does not end the string...
        (
            "a = \"%{ if true }\"%{ endif }\"\n",
            Some(LimitKind::NestingDepth),
        ),
        // ... nor does the delimiter line end a heredoc.
        (
            "a = <<EOF\n%{ if true }\nEOF\n\"\n%{ endif }\nEOF\n",
            Some(LimitKind::NestingDepth),
        ),
        // A heredoc empty on its first line is read as ending at the next
        // delimiter line unless the body fails to parse (the `${"` in the
        // comment): refused outright.
        ("a = <<EOF\nEOF\n# ${\"\nEOF = 1\n", None),
    ];
    for (head, kind) in cases {
        let src = format!("{head}{deep}");
        let result = on_stack(SMALL_STACK, move || parse_hcl(&src, "crafted.hcl"));
        let e = result.expect_err(head);
        match kind {
            Some(kind) => assert!(is_limit(&e, kind), "{head}: {e}"),
            None => {
                assert!(
                    matches!(e, JobspecError::Syntax { line: 2, .. }),
                    "{head}: {e}"
                );
                assert!(e
                    .to_string()
                    .contains("heredoc must not close on its first line"));
            }
        }
    }
}

#[test]
fn nested_blocks_and_labels_are_bounded_too() {
    let blocks = |n: usize, labels: usize| {
        let label = " \"l\"".repeat(labels);
        format!(
            "job \"x\" {{\n group \"g\" {{\n task \"t\" {{\n config {{\n{}{}\n}}\n}}\n}}\n}}\n",
            format!("b{label} {{\n").repeat(n),
            "}\n".repeat(n)
        )
    };
    // Free-form blocks in a driver's config become lists of objects, one
    // level per label more: the deepest the parser accepts is refused as a
    // value, and nothing overflows.
    for (n, labels) in [(10, 0), (30, 0), (60, 0), (1000, 0), (1, 1000), (1, 10_000)] {
        let src = blocks(n, labels);
        let result = on_stack(SMALL_STACK, move || parse_hcl(&src, "blocks.hcl"));
        match result {
            Ok(job) => assert!(
                n <= 30 && labels == 0,
                "{n} blocks, {labels} labels: {job:?}"
            ),
            Err(e) => {
                assert!(n > 30 || labels > 0, "{n} blocks, {labels} labels: {e}");
                // Ten thousand labels are refused for their size first.
                let kind = match labels {
                    10_000 => LimitKind::ExpansionBytes,
                    _ => LimitKind::NestingDepth,
                };
                assert!(is_limit(&e, kind), "{e}");
            }
        }
    }
}

#[test]
fn the_nesting_limit_is_a_setting() {
    let list = |n: usize| {
        format!(
            "locals {{\n  v = {}1{}\n}}\njob \"x\" {{}}\n",
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    let strict = HclLimits {
        max_nesting_depth: 8,
        ..HclLimits::default()
    };
    let none = BTreeMap::new();
    // The locals block is one level, the lists the other seven.
    assert!(parse_hcl_with_limits(&list(7), "f", &none, &strict).is_ok());
    let e = parse_hcl_with_limits(&list(8), "f", &none, &strict).unwrap_err();
    assert_eq!(e.location(), Some((2, 14)), "{e}");
    assert!(
        e.to_string()
            .ends_with("nesting deeper than 8 levels at 2:14 (limits: hcl_max_nesting_depth); flatten the brackets, strings and operator chains or raise the limit"),
        "{e}"
    );
    // A generous limit lets deep text through (on a stack that holds it).
    let generous = HclLimits {
        max_nesting_depth: 150,
        ..HclLimits::default()
    };
    let result = on_stack(16 << 20, move || {
        parse_hcl_with_limits(&list(120), "f", &BTreeMap::new(), &generous).map(|_| ())
    });
    assert_eq!(result, Ok(()));
}

#[test]
fn values_may_not_nest_deeper_than_the_limit_through_locals() {
    // Each local wraps the previous one: no text nests, the value does.
    let mut src = String::from("locals {\n  l0 = 1\n");
    for i in 1..=200 {
        src.push_str(&format!("  l{i} = [local.l{}]\n", i - 1));
    }
    src.push_str("}\njob \"x\" {}\n");
    let e = refused(src, LimitKind::NestingDepth, Duration::from_secs(2));
    assert!(
        e.to_string().contains("a value nested deeper than 64"),
        "{e}"
    );
}

/// `a = "x"`, `b = "${local.a}${local.a}"`, ...: `doublings` locals, each
/// twice the one before; 30 make a gigabyte.
fn doubling_locals(doublings: usize) -> String {
    let mut src = String::from("locals {\n  l0 = \"x\"\n");
    for i in 1..=doublings {
        let prev = i - 1;
        src.push_str(&format!(
            "  l{i} = \"${{local.l{prev}}}${{local.l{prev}}}\"\n"
        ));
    }
    src.push_str(&format!(
        "}}\njob \"x\" {{\n  meta {{\n    big = local.l{doublings}\n  }}\n}}\n"
    ));
    src
}

#[test]
fn locals_that_double_are_refused_quickly() {
    let src = doubling_locals(30);
    assert!(src.len() < 1300, "{}", src.len());
    let e = refused(src, LimitKind::ExpansionBytes, Duration::from_secs(1));
    assert!(
        e.to_string()
            .contains("evaluating this file builds more than 16777216 bytes"),
        "{e}"
    );
    // Locals in any order (here: reversed) still double, and are refused.
    let mut lines: Vec<&str> = Vec::new();
    let src = doubling_locals(30);
    let (head, rest) = src.split_once('\n').unwrap_or_default();
    let (body, tail) = rest.split_once("}\njob").unwrap_or_default();
    lines.extend(body.lines().rev());
    let reversed = format!("{head}\n{}\n}}\njob{tail}", lines.join("\n"));
    refused(reversed, LimitKind::ExpansionBytes, Duration::from_secs(1));
}

#[test]
fn a_real_amount_of_doubling_is_fine() {
    // 2^16 = 64 KiB of text: large for a job, small for the budget.
    let job = parse_hcl(&doubling_locals(16), "ok.hcl").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(job.meta["big"].len(), 1 << 16);
}

/// A local list of 100 short strings, for expressions that multiply it.
const HUNDRED: &str = "locals {\n  l = split(\",\", \"a,b,c,d,e,f,g,h,i,j,a,b,c,d,e,f,g,h,i,j,a,b,c,d,e,f,g,h,i,j,a,b,c,d,e,f,g,h,i,j,a,b,c,d,e,f,g,h,i,j,a,b,c,d,e,f,g,h,i,j,a,b,c,d,e,f,g,h,i,j,a,b,c,d,e,f,g,h,i,j,a,b,c,d,e,f,g,h,i,j,a,b,c,d,e,f,g,h,i,j\")\n  s = \"0123456789012345678901234567890123456789012345678901234567890123\"\n";

fn with_hundred(attr: &str) -> String {
    format!("{HUNDRED}  x = {attr}\n}}\njob \"x\" {{}}\n")
}

#[test]
fn single_expressions_that_multiply_are_refused_quickly() {
    let ten_seconds = Duration::from_secs(10);
    let cases = [
        // 10^8 strings from nested `for` expressions.
        "[for a in local.l : [for b in local.l : [for c in local.l : [for d in local.l : \"${a}${b}${c}${d}\"]]]]",
        // The same product, every element filtered out: time, not memory.
        "[for a in local.l : [for b in local.l : [for c in local.l : [for d in local.l : d if false]]]]",
        // Template directives: 10^6 copies of a 64-byte local.
        "\"%{for a in local.l}%{for b in local.l}%{for c in local.l}${local.s}%{endfor}%{endfor}%{endfor}\"",
        // A long separator repeated between many parts.
        "join(join(\"\", [for a in local.l : local.s]), [for a in local.l : [for b in local.l : a]]...)",
        "replace(join(\",\", [for a in local.l : join(\",\", local.l)]), \",\", join(\"\", [for a in local.l : local.s]))",
        // Object `for` with grouping.
        "{for a in local.l : a => [for b in local.l : [for c in local.l : local.s]]...}",
    ];
    for case in cases {
        let e = refused(with_hundred(case), LimitKind::ExpansionBytes, ten_seconds);
        assert_eq!(e.location().map(|l| l.0), Some(4), "{case}: {e}");
    }
}

#[test]
fn concatenating_many_references_is_refused() {
    // ~230 KiB of `local.l,` references to a list of 100 strings.
    let refs = vec!["local.l"; 30_000].join(",");
    let e = refused(
        with_hundred(&format!("concat({refs})")),
        LimitKind::ExpansionBytes,
        Duration::from_secs(10),
    );
    assert!(e.to_string().contains("hcl_max_expansion_bytes"), "{e}");
}

#[test]
fn the_expansion_limit_is_a_setting_and_counts_every_value() {
    let src = with_hundred("[for a in local.l : [for b in local.l : \"${a}${b}\"]]");
    let none = BTreeMap::new();
    assert!(parse_hcl(&src, "f").is_ok());
    let tight = HclLimits {
        max_expansion_bytes: 100_000,
        ..HclLimits::default()
    };
    let e = parse_hcl_with_limits(&src, "f", &none, &tight).unwrap_err();
    assert!(is_limit(&e, LimitKind::ExpansionBytes), "{e}");
    // Values given on the command line are charged to the same budget.
    let src = "variable \"v\" {\n  type = list(string)\n}\njob \"x\" {}\n";
    let big = format!("[{}]", vec!["\"aaaaaaaaaa\""; 10_000].join(","));
    let vars = BTreeMap::from([("v".to_string(), big)]);
    let e = parse_hcl_with_limits(src, "f", &vars, &tight).unwrap_err();
    assert!(is_limit(&e, LimitKind::ExpansionBytes), "{e}");
    assert!(e.to_string().contains("given for variable \"v\""), "{e}");
    assert!(parse_hcl_with_vars(src, "f", &vars).is_ok());
    let deep = BTreeMap::from([("v".to_string(), "[".repeat(10_000))]);
    let e = on_stack(SMALL_STACK, move || parse_hcl_with_vars(src, "f", &deep)).unwrap_err();
    assert!(is_limit(&e, LimitKind::NestingDepth), "{e}");
}

#[test]
fn source_larger_than_the_limit_is_refused_unread() {
    let limits = HclLimits {
        max_source_bytes: 1000,
        ..HclLimits::default()
    };
    let src = format!(
        "job \"x\" {{\n  meta {{\n    a = \"{}\"\n  }}\n}}\n",
        "x".repeat(1000)
    );
    let e = parse_hcl_with_limits(&src, "big.hcl", &BTreeMap::new(), &limits).unwrap_err();
    assert!(is_limit(&e, LimitKind::SourceBytes), "{e}");
    let expected = format!(
        "big.hcl:1:1: the job file is {} bytes, more than the 1000 allowed (limits: hcl_max_source_bytes)",
        src.len()
    );
    assert!(e.to_string().starts_with(&expected), "{e}");
    // The default takes a job with a large inline template.
    let src = format!(
        "job \"x\" {{\n  group \"g\" {{\n    task \"t\" {{\n      config {{\n        script = <<EOT\n{}\nEOT\n      }}\n    }}\n  }}\n}}\n",
        "echo 'a line of a long script, {with} (brackets) [of] every \"kind\"\n".repeat(80_000)
    );
    assert!(src.len() > 4 << 20);
    let job = parse_hcl(&src, "big.hcl").unwrap_or_else(|e| panic!("{e}"));
    assert!(job.task_groups[0].tasks[0].config["script"]
        .as_str()
        .is_some());
}

#[test]
fn deeply_nested_json_is_a_clean_error() {
    // serde_json stops at 128 levels; nothing after it recurses further.
    for n in [2_000, 100_000] {
        let src = format!(
            "{{\"ID\": \"x\", \"TaskGroups\": [{{\"Name\": \"g\", \"Tasks\": [{{\"Name\": \"t\", \"Config\": {{\"a\": {}{}}}}}]}}]}}",
            "[".repeat(n),
            "]".repeat(n)
        );
        let e = on_stack(SMALL_STACK, move || parse_json(&src)).unwrap_err();
        assert!(matches!(e, JobspecError::Json { .. }), "{e}");
        assert!(e.to_string().contains("recursion limit exceeded"), "{e}");
    }
    // The deepest JSON accepted parses on the small stack.
    let depth = 115;
    let src = format!(
        "{{\"ID\": \"x\", \"TaskGroups\": [{{\"Name\": \"g\", \"Tasks\": [{{\"Name\": \"t\", \"Config\": {{\"a\": {}{}}}}}]}}]}}",
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let job = on_stack(SMALL_STACK, move || {
        let job = parse_json(&src).map_err(|e| e.to_string());
        // Serializing and dropping the job walk its config too.
        job.map(|j| serde_json::to_string(&j).map(|s| s.len()))
    });
    assert!(matches!(job, Ok(Ok(_))), "{job:?}");
}

// The evaluator does all of HCL's work itself now: the semantics real job
// files use must hold.

fn value_of(expr: &str) -> serde_json::Value {
    let src = format!("{HUNDRED}}}\njob \"x\" {{\n  group \"g\" {{\n    task \"t\" {{\n      config {{\n        v = {expr}\n      }}\n    }}\n  }}\n}}\n");
    let job = parse_hcl(&src, "v.hcl").unwrap_or_else(|e| panic!("{expr}: {e}"));
    job.task_groups[0].tasks[0].config["v"].clone()
}

fn error_of(expr: &str) -> String {
    let src = format!("job \"x\" {{\n  group \"g\" {{\n    task \"t\" {{\n      config {{\n        v = {expr}\n      }}\n    }}\n  }}\n}}\n");
    parse_hcl(&src, "v.hcl")
        .map(|_| ())
        .expect_err(expr)
        .to_string()
}

#[test]
fn operators_follow_hcl_precedence_and_never_panic() {
    use serde_json::json;
    assert_eq!(value_of("1 + 2 * 3"), json!(7));
    assert_eq!(value_of("2 * 3 + 1"), json!(7));
    assert_eq!(value_of("10 - 4 - 3"), json!(3));
    assert_eq!(value_of("7 / 2"), json!(3.5));
    assert_eq!(value_of("7 % 4 * 2"), json!(6));
    assert_eq!(value_of("1 + 2 == 3 && !false"), json!(true));
    assert_eq!(value_of("false || 1 < 2 == true"), json!(true));
    assert_eq!(value_of("(1 + 2) * 3"), json!(9));
    assert_eq!(value_of("-3 + 1"), json!(-2));
    assert_eq!(value_of("1 > 2 ? \"a\" : \"b\""), json!("b"));
    assert_eq!(value_of("[1, \"a\"] == [1, \"a\"]"), json!(true));
    // Past 64 bits integers become floats rather than wrapping or panicking.
    assert_eq!(
        value_of("18446744073709551615 + 1"),
        json!(18446744073709551616.0)
    );
    assert_eq!(
        value_of("-9223372036854775807 - 3").as_f64(),
        Some(-9223372036854775810.0)
    );
    assert!(error_of("1 % 0").contains("division by zero"));
    assert!(error_of("1 / 0").contains("division by zero"));
    assert!(error_of("1 + \"a\"").contains("operator `+` cannot combine number 1 and string \"a\""));
    assert!(error_of("!1").contains("`!` needs a bool"));
}

#[test]
fn templates_for_expressions_and_traversals_evaluate_as_in_nomad() {
    use serde_json::json;
    assert_eq!(
        value_of(
            "\"%{for i, x in slice}${i}=${x}%{if i < 1},%{endif}%{endfor}\""
                .replace("slice", "[\"a\", \"b\"]")
                .as_str()
        ),
        json!("0=a,1=b")
    );
    // `~` strips the whitespace (newlines included) beside it.
    assert_eq!(
        value_of("<<EOT\n%{ for x in [1, 2] ~}\n  ${x}\n%{~ endfor ~}\nend\nEOT"),
        json!("12end\n")
    );
    assert_eq!(
        value_of("<<EOT\n%{ for x in [1, 2] ~}\n  ${x}\n%{ endfor ~}\nend\nEOT"),
        json!("1\n2\nend\n")
    );
    assert_eq!(value_of("\"a ${~ \"b\" ~} c\""), json!("abc"));
    // Runtime references stay as written, in directive templates too.
    assert_eq!(
        value_of("\"%{for x in [1]}${x}:${NOMAD_PORT_http}%{endfor}\""),
        json!("1:${NOMAD_PORT_http}")
    );
    assert_eq!(
        value_of("{for k, v in {b = 2, a = 1} : k => v * 10}"),
        json!({"a": 10, "b": 20})
    );
    assert_eq!(
        value_of("{for x in [\"a\", \"bb\", \"c\"] : length(x) => x...}"),
        json!({"1": ["a", "c"], "2": ["bb"]})
    );
    assert_eq!(
        value_of("[for x in local.l : x if x == \"j\"]")
            .as_array()
            .map(Vec::len),
        Some(10)
    );
    assert_eq!(value_of("[{a = 1}, {a = 2}][*].a"), json!([1, 2]));
    assert_eq!(value_of("[{a = [1]}, {a = [2]}][*].a[0]"), json!([1, 2]));
    // `.*` applies only the attribute names after it; `[0]` indexes the result.
    assert_eq!(value_of("[{a = [1]}, {a = [2]}].*.a[0]"), json!([1]));
    assert_eq!(value_of("{a = [{b = \"c\"}]}.a[0][\"b\"]"), json!("c"));
    assert_eq!(value_of("[1, 2, 3].1"), json!(2));
    assert_eq!(
        value_of("upper(join(\"-\", [[\"a\"], [\"b\"]]...))"),
        json!("A-B")
    );
    assert!(error_of("{for x in [\"a\", \"a\"] : x => 1}").contains("duplicate key \"a\""));
    assert!(error_of("[1][5]").contains("index 5 is out of range for a list of 1"));
}

#[test]
fn locals_in_any_order_and_cycles() {
    // A long chain written backwards: evaluated in dependency order (not
    // by retrying every local until nothing changes).
    let mut src = String::from("locals {\n");
    for i in (1..=2_000).rev() {
        src.push_str(&format!("  l{i} = local.l{} + 1\n", i - 1));
    }
    src.push_str("  l0 = 0\n}\njob \"x\" {\n  priority = local.l50\n}\n");
    let start = Instant::now();
    let job = parse_hcl(&src, "chain.hcl").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(job.priority, 50);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );

    let e = parse_hcl(
        "locals {\n  a = local.b\n  b = local.a\n}\njob \"x\" {}\n",
        "cycle.hcl",
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("refer to each other in a cycle"),
        "{e}"
    );
    let e = parse_hcl("locals {\n  a = local.nope\n}\njob \"x\" {}\n", "nope.hcl").unwrap_err();
    assert!(
        e.to_string()
            .contains("no attribute \"nope\" in local.nope"),
        "{e}"
    );
}

#[test]
fn messages_about_huge_values_stay_short() {
    let e = error_of(&format!("upper(\"{}\", 1)", "x".repeat(100_000)));
    assert!(e.len() < 1_000, "{} bytes", e.len());
    let e = parse_hcl(
        &format!("job \"x\" {{ a = = {} }}\n", "x".repeat(100_000)),
        "f",
    )
    .unwrap_err();
    assert!(e.to_string().len() < 1_000, "{} bytes", e.to_string().len());
}

/// Openers that are valid where an expression starts, so that random
/// sequences of them nest deeply, and noise that may or may not break the
/// sequence (comments, strings with brackets, escapes, heredoc and
/// directive markers, newlines): what could make the scan and the parser
/// disagree about what is code.
const OPENERS: [&str; 16] = [
    "[",
    "(",
    "{a = ",
    "\"${",
    "!",
    "- ",
    "1 + ",
    "true ? ",
    "upper(",
    "[for x in ",
    "\"%{if true}",
    "\"%{for x in [1]}",
    "<<EOF\n${",
    "<<-E\n%{if x}",
    "{for k, v in ",
    "x ? 1 : ",
];
const NOISE: [&str; 24] = [
    "\n",
    " ",
    "# ([{\n",
    "// \"\n",
    "/* \" ${ */",
    "\"",
    "\\\"",
    "$${",
    "%%{",
    "}",
    "]",
    ")",
    "\nEOF\n",
    "\nE\n",
    "%{endif}",
    "%{endfor}",
    "%{else}",
    "~",
    ",",
    "\"[[[\"",
    "<<EOF\n",
    "<<EOF\nEOF\n",
    "a.b",
    "=",
];

fn soup(rng: &mut impl rand::Rng, pieces: usize) -> String {
    let mut text = String::from("a = ");
    for _ in 0..pieces {
        let piece = if rng.gen_bool(0.8) {
            OPENERS[rng.gen_range(0..OPENERS.len())]
        } else {
            NOISE[rng.gen_range(0..NOISE.len())]
        };
        text.push_str(piece);
    }
    text
}

#[test]
fn random_nesting_with_noise_never_overflows_the_stack() {
    use rand::{Rng, SeedableRng};
    // HCL_SOUP_CASES=200000 searches longer.
    let cases: usize = std::env::var("HCL_SOUP_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    let seed: u64 = std::env::var("HCL_SOUP_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(15);
    let inputs = on_stack(SMALL_STACK, move || {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let mut accepted = 0;
        for _ in 0..cases {
            let pieces = rng.gen_range(1..400);
            let text = soup(&mut rng, pieces);
            // A crash here aborts the test binary; the text is the finding.
            if parse_hcl(&text, "soup.hcl").is_ok() {
                accepted += 1;
            }
        }
        accepted
    });
    // Nearly all soup is refused; that it never crashed is the point.
    assert!(inputs < cases, "{inputs}");
}
