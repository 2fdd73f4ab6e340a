//! Job files against Nomad's own answers, and every error a user can make.

use super::*;
use crate::structs::fixture_tests::{assert_subset, fixture_text};
use crate::structs::{Job, JobType};
use serde_json::Value;
use std::time::Duration;

fn fixture(name: &str) -> String {
    fixture_text(name)
}

#[test]
fn nomad_fixture_files_parse_to_nomads_jobs() {
    for name in ["web", "nightly", "node-agent", "cleanup"] {
        let file = format!("{name}.nomad.hcl");
        let job = parse_hcl(&fixture(&file), &file).unwrap_or_else(|e| panic!("{e}"));
        let nomad: Value = serde_json::from_str(&fixture(&format!("parse-{name}.json"))).unwrap();
        assert_subset(&serde_json::to_value(&job).unwrap(), &nomad, &file);

        // The same job read from Nomad's JSON and canonicalized by herder
        // is the job the HCL gave, field for field.
        let mut from_nomad: Job = serde_json::from_value(nomad).unwrap();
        from_nomad.canonicalize();
        assert_eq!(job, from_nomad, "{file}");
        job.validate().unwrap_or_else(|e| panic!("{file}: {e}"));
    }
}

#[test]
fn web_fixture_fields_a_user_wrote_arrive() {
    let job = parse_hcl(&fixture("web.nomad.hcl"), "web.nomad.hcl").unwrap();
    assert_eq!((job.id.as_str(), job.priority), ("web", 60));
    let tg = &job.task_groups[0];
    assert_eq!(tg.count, 3);
    let net = &tg.networks[0];
    assert_eq!(net.dynamic_ports[0].label, "http");
    assert_eq!(
        (
            net.reserved_ports[0].label.as_str(),
            net.reserved_ports[0].value
        ),
        ("admin", 9090)
    );
    let task = &tg.tasks[0];
    assert_eq!(task.kill_timeout, Duration::from_secs(10));
    // Runtime interpolations stay literal for the client to resolve.
    assert_eq!(task.config["args"][2], "${NOMAD_PORT_http}");
    assert_eq!(job.constraints[0].l_target, "${attr.kernel.name}");
    // The group inherits the job's whole update block, canary included.
    let update = tg.update.as_ref().unwrap();
    assert_eq!(
        (update.canary, update.auto_revert, update.max_parallel),
        (1, true, 2)
    );
}

fn err(src: &str) -> JobspecError {
    parse_hcl(src, "job.hcl").expect_err("should fail")
}

fn spec_error(src: &str, line: usize, column: usize, message: &str) {
    let e = err(src);
    assert!(matches!(e, JobspecError::Spec { .. }), "{e:?}");
    assert_eq!(e.location(), Some((line, column)), "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("job.hcl:{line}:{column}: ")),
        "{text}"
    );
    assert!(text.contains(message), "expected {message:?} in {text:?}");
}

#[test]
fn syntax_errors_report_line_and_column() {
    let e = err("job \"x\" {\n  group \"g\" {\n    count = = 3\n  }\n}\n");
    let JobspecError::Syntax { line, column, .. } = &e else {
        panic!("{e:?}");
    };
    assert_eq!((*line, *column), (3, 13), "{e}");
    assert!(
        e.to_string().starts_with("job.hcl:3:13: syntax error"),
        "{e}"
    );

    // An unclosed block is reported where the input ends.
    let e = err("job \"x\" {\n  type = \"batch\"\n");
    assert!(matches!(e, JobspecError::Syntax { line: 2, .. }), "{e:?}");
    assert!(e.to_string().contains("expected `}`"), "{e}");

    // The parser itself refuses an attribute set twice.
    let e = err("job \"a\" {\n  priority = 10\n  priority = 20\n}\n");
    assert_eq!(e.location(), Some((3, 3)), "{e}");
    assert!(e.to_string().contains("redefined attribute"), "{e}");
}

#[test]
fn unknown_block_names_the_block_and_its_group() {
    let src = fixture("web.nomad.hcl").replace("    network {", "    nework {");
    let e = parse_hcl(&src, "web.nomad.hcl").unwrap_err();
    assert_eq!(
        e.to_string(),
        "web.nomad.hcl:37:5: unknown block \"nework\" in group \"frontend\"; did you mean \"network\"?"
    );
}

#[test]
fn unknown_attribute_names_the_attribute_and_its_task() {
    let src = "job \"x\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      colour = \"red\"\n    }\n  }\n}\n";
    spec_error(src, 5, 7, "unknown attribute \"colour\" in task \"t\"");
    let src = "job \"x\" {\n  group \"g\" {\n    restart {\n      atempts = 3\n    }\n  }\n}\n";
    spec_error(
        src,
        4,
        7,
        "unknown attribute \"atempts\" in restart block of group \"g\"; did you mean \"attempts\"?",
    );
}

#[test]
fn bad_duration_points_at_the_value() {
    let src = "job \"x\" {\n  group \"g\" {\n    task \"t\" {\n      kill_timeout = \"10 seconds\"\n    }\n  }\n}\n";
    spec_error(
        src,
        4,
        22,
        "invalid value for \"kill_timeout\" in task \"t\": invalid duration \"10 seconds\"",
    );
}

#[test]
fn wrong_type_says_what_was_expected_and_found() {
    let src = "job \"x\" {\n  group \"g\" {\n    count = \"three\"\n  }\n}\n";
    spec_error(
        src,
        3,
        13,
        "invalid value for \"count\" in group \"g\": a whole number is required, got string \"three\"",
    );
    let src = "job \"x\" {\n  datacenters = \"dc1\"\n}\n";
    spec_error(
        src,
        2,
        17,
        "a list of strings is required, got string \"dc1\"",
    );
    // HCL2 converts a numeric string where a number is expected.
    let job = parse_hcl("job \"x\" {\n group \"g\" { count = \"3\" }\n}\n", "j").unwrap();
    assert_eq!(job.task_groups[0].count, 3);
}

#[test]
fn structural_mistakes_are_positioned() {
    spec_error("variable \"a\" {\n  default = 1\n}\n", 1, 1, "no job block");
    spec_error(
        "job \"a\" {}\njob \"b\" {}\n",
        2,
        1,
        "only one \"job\" block",
    );
    spec_error(
        "job {\n}\n",
        1,
        1,
        "block \"job\" in the file needs 1 label",
    );
    spec_error(
        "job \"a\" {\n  group \"g\" {\n    restart {}\n    restart {}\n  }\n}\n",
        4,
        5,
        "only one \"restart\" block is allowed in group \"g\"",
    );
    spec_error(
        "job \"a\" {\n  group \"g\" {\n    task \"t\" {\n      lifecycle {\n        sidecar = true\n      }\n    }\n  }\n}\n",
        4,
        7,
        "lifecycle block of task \"t\" needs a hook",
    );
    spec_error(
        "job \"a\" {\n  group \"g\" {\n    task \"t\" {\n      config = \"x\"\n    }\n  }\n}\n",
        4,
        16,
        "invalid value for \"config\" in task \"t\": an object is required, got string \"x\"",
    );
}

const VARIABLES: &str = r#"
variable "dc" {
  type    = string
  default = "dc2"
}
variable "replicas" {
  default = 2
}
locals {
  name = "${var.dc}-api"
  mem  = local.base_mem * 2
  base_mem = 128
}
job "api" {
  datacenters = [var.dc]
  group "g" {
    count = var.replicas + 1
    task "t" {
      driver = "raw_exec"
      env {
        NAME = "${local.name}"
        PORT = "${NOMAD_PORT_http}"
        KERNEL = "on ${attr.kernel.name} in ${var.dc}"
      }
      resources {
        memory = local.mem
      }
    }
  }
}
"#;

#[test]
fn variables_and_locals_are_evaluated_and_runtime_references_kept() {
    let job = parse_hcl(VARIABLES, "api.hcl").unwrap();
    assert_eq!(job.datacenters, vec!["dc2"]);
    let tg = &job.task_groups[0];
    assert_eq!(tg.count, 3);
    let env = &tg.tasks[0].env;
    assert_eq!(env["NAME"], "dc2-api");
    assert_eq!(env["PORT"], "${NOMAD_PORT_http}");
    assert_eq!(env["KERNEL"], "on ${attr.kernel.name} in dc2");
    assert_eq!(tg.tasks[0].resources.memory_mb, 256);
}

fn given(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn given_variable_values_override_defaults_by_declared_type() {
    let vars = given(&[("dc", "east-1"), ("replicas", "4")]);
    let job = parse_hcl_with_vars(VARIABLES, "api.hcl", &vars).unwrap();
    assert_eq!(job.datacenters, vec!["east-1"]);
    assert_eq!(job.task_groups[0].count, 5);
    assert_eq!(job.task_groups[0].tasks[0].env["NAME"], "east-1-api");

    let src =
        "variable \"dcs\" {\n  type = list(string)\n}\njob \"x\" {\n  datacenters = var.dcs\n}\n";
    let job = parse_hcl_with_vars(src, "x.hcl", &given(&[("dcs", r#"["a", "b"]"#)])).unwrap();
    assert_eq!(job.datacenters, vec!["a", "b"]);

    let e = parse_hcl_with_vars(VARIABLES, "api.hcl", &given(&[("replicas", "many")])).unwrap_err();
    assert!(
        e.to_string()
            .contains("invalid value \"many\" given for variable \"replicas\""),
        "{e}"
    );
    let e = parse_hcl_with_vars(VARIABLES, "api.hcl", &given(&[("region", "x")])).unwrap_err();
    assert!(
        e.to_string()
            .contains("variable \"region\", which this file does not declare"),
        "{e}"
    );
}

#[test]
fn functions_compute_values_and_unknown_ones_are_errors() {
    let src = r#"
variable "dcs" {
  default = "east, west"
}
locals {
  extra = { TIER = "web" }
}
job "f" {
  datacenters = [for dc in split(",", var.dcs) : trimspace(dc)]
  meta = merge(local.extra, { OWNER = upper("ops") })
  group "g" {
    count = length(concat(["a"], ["b", "c"]))
    task "t" {
      driver = lookup({ linux = "exec" }, "linux", "raw_exec")
      env {
        LIST = join("-", keys(local.extra), ["x"])
        N    = tonumber("7") + 1
        HAS  = contains(["a"], "a")
        NODE = "${upper(var.dcs)} on ${node.unique.name}"
      }
    }
  }
}
"#;
    let job = parse_hcl(src, "f.hcl").unwrap();
    assert_eq!(job.datacenters, vec!["east", "west"]);
    assert_eq!(job.meta["OWNER"], "OPS");
    assert_eq!(job.meta["TIER"], "web");
    let tg = &job.task_groups[0];
    assert_eq!(tg.count, 3);
    let t = &tg.tasks[0];
    assert_eq!(t.driver, "exec");
    assert_eq!(t.env["LIST"], "TIER-x");
    assert_eq!(t.env["N"], "8");
    assert_eq!(t.env["HAS"], "true");
    assert_eq!(t.env["NODE"], "EAST, WEST on ${node.unique.name}");

    let e = err("job \"x\" {\n  region = file(\"/etc/passwd\")\n}\n");
    assert_eq!(e.location(), Some((2, 12)), "{e}");
    assert!(e.to_string().contains("file"), "{e}");
}

#[test]
fn heredocs_and_escapes_keep_their_text() {
    let src = "job \"x\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      env {\n        LITERAL = \"$${NOT_INTERPOLATED}\"\n      }\n      config {\n        script = <<-EOT\n          echo ${NOMAD_ALLOC_ID}\n          echo done\n        EOT\n      }\n    }\n  }\n}\n";
    let job = parse_hcl(src, "x.hcl").unwrap();
    let task = &job.task_groups[0].tasks[0];
    assert_eq!(task.env["LITERAL"], "${NOT_INTERPOLATED}");
    assert_eq!(task.config["script"], "echo ${NOMAD_ALLOC_ID}\necho done\n");
}

#[test]
fn undefined_variables_are_errors() {
    let src = "job \"x\" {\n  datacenters = [var.nope]\n}\n";
    let e = err(src);
    assert_eq!(e.location(), Some((2, 18)), "{e}");
    assert!(e.to_string().contains("nope"), "{e}");
    let e = err("variable \"v\" {}\njob \"x\" {}\n");
    assert!(
        e.to_string().contains("variable \"v\" has no default"),
        "{e}"
    );
    // A bare runtime reference (outside a string) is not a value either.
    let e = err("job \"x\" {\n  region = attr.region\n}\n");
    assert_eq!(e.location(), Some((2, 12)), "{e}");
}

#[test]
fn constraint_shorthands_become_operands() {
    let src = r#"
job "x" {
  constraint {
    distinct_hosts = true
  }
  constraint {
    distinct_property = "${meta.rack}"
  }
  constraint {
    attribute = "${attr.kernel.name}"
    regexp    = "^lin"
  }
  constraint {
    attribute = "${attr.nomad.version}"
    version   = ">= 1.0"
  }
  constraint {
    attribute    = "${meta.tags}"
    set_contains = "a,b"
  }
  constraint {
    attribute = "${node.class}"
    value     = 3
  }
  affinity {
    attribute = "${node.class}"
    semver    = ">= 2.0.0"
  }
  spread {
    attribute = "${node.datacenter}"
    target "dc1" {
      percent = 70
    }
    target "dc2" {
      percent = 30
    }
  }
  group "g" {
    task "t" { driver = "raw_exec" }
  }
}
"#;
    let job = parse_hcl(src, "x.hcl").unwrap();
    let c: Vec<(&str, &str, &str)> = job
        .constraints
        .iter()
        .map(|c| (c.l_target.as_str(), c.operand.as_str(), c.r_target.as_str()))
        .collect();
    assert_eq!(
        c,
        vec![
            ("", "distinct_hosts", ""),
            ("${meta.rack}", "distinct_property", ""),
            ("${attr.kernel.name}", "regexp", "^lin"),
            ("${attr.nomad.version}", "version", ">= 1.0"),
            ("${meta.tags}", "set_contains", "a,b"),
            ("${node.class}", "=", "3"),
        ]
    );
    let a = &job.affinities[0];
    assert_eq!(
        (a.operand.as_str(), a.r_target.as_str(), a.weight),
        ("semver", ">= 2.0.0", 50)
    );
    let s = &job.spreads[0];
    assert_eq!(s.weight, 50);
    assert_eq!(s.spread_target[1].value, "dc2");
    assert_eq!(s.spread_target[1].percent, 30);
    job.validate().unwrap();
}

#[test]
fn written_fields_merge_over_inherited_defaults() {
    let src = r#"
job "x" {
  update {
    max_parallel = 3
    canary       = 2
  }
  reschedule {
    attempts  = 7
    unlimited = false
  }
  group "g" {
    update {
      canary = 1
    }
    restart {
      attempts = 9
    }
    migrate {
      max_parallel = 4
    }
    task "a" {
      driver = "raw_exec"
      restart {
        delay = "1s"
      }
      logs {
        max_files = 3
      }
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
    }
    task "b" { driver = "raw_exec" }
  }
}
"#;
    let job = parse_hcl(src, "x.hcl").unwrap();
    let job_update = job.update.as_ref().unwrap();
    assert_eq!((job_update.max_parallel, job_update.canary), (3, 2));
    assert_eq!(job_update.healthy_deadline, Duration::from_secs(300));
    let tg = &job.task_groups[0];
    let u = tg.update.as_ref().unwrap();
    assert_eq!((u.max_parallel, u.canary), (3, 1));
    let rs = tg.reschedule_policy.as_ref().unwrap();
    // Written by the job; the rest is the service default.
    assert_eq!((rs.attempts, rs.unlimited), (7, false));
    assert_eq!(rs.delay_function, "exponential");
    let m = tg.migrate.as_ref().unwrap();
    assert_eq!((m.max_parallel, m.health_check.as_str()), (4, "checks"));
    let group_restart = tg.restart_policy.as_ref().unwrap();
    assert_eq!(
        (group_restart.attempts, group_restart.delay),
        (9, Duration::from_secs(15))
    );
    let a = tg.tasks[0].restart_policy.as_ref().unwrap();
    assert_eq!((a.attempts, a.delay), (9, Duration::from_secs(1)));
    assert_eq!(tg.tasks[1].restart_policy.as_ref(), Some(group_restart));
    let logs = tg.tasks[0].log_config.as_ref().unwrap();
    assert_eq!((logs.max_files, logs.max_file_size_mb), (3, 10));
    assert!(tg.tasks[0].lifecycle.as_ref().unwrap().sidecar);
    job.validate().unwrap();
}

#[test]
fn template_blocks_parse_with_nomads_defaults() {
    let src = r#"
job "t" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      template {
        data            = <<EOT
port=[[ env "NOMAD_PORT_http" ]]
EOT
        destination     = "local/app.conf"
        change_mode     = "signal"
        change_signal   = "sighup"
        splay           = "1s"
        perms           = "600"
        left_delimiter  = "[["
        right_delimiter = "]]"
      }
      template {
        source      = "local/env.tpl"
        destination = "secrets/app.env"
        env         = true
      }
      template {
        data        = "x"
        destination = "../../../etc/x"
      }
    }
  }
}
"#;
    let mut job = parse_hcl(src, "t.hcl").unwrap();
    job.canonicalize();
    let t = &job.task_groups[0].tasks[0].templates;
    assert_eq!(t[0].embedded_tmpl, "port=[[ env \"NOMAD_PORT_http\" ]]\n");
    assert_eq!(
        (
            t[0].change_mode.as_str(),
            t[0].change_signal.as_str(),
            t[0].splay
        ),
        ("signal", "SIGHUP", Duration::from_secs(1))
    );
    assert_eq!(
        (
            t[0].perms.as_str(),
            t[0].left_delim.as_str(),
            t[0].right_delim.as_str()
        ),
        ("600", "[[", "]]")
    );
    assert_eq!(
        (t[1].source_path.as_str(), t[1].envvar, t[1].splay),
        ("local/env.tpl", true, Duration::from_secs(5))
    );
    assert_eq!(
        (
            t[1].change_mode.as_str(),
            t[1].perms.as_str(),
            t[1].left_delim.as_str()
        ),
        ("restart", "0644", "{{")
    );
    let json = serde_json::to_value(&t[0]).unwrap();
    for key in [
        "SourcePath",
        "DestPath",
        "EmbeddedTmpl",
        "ChangeMode",
        "ChangeSignal",
        "Splay",
        "Perms",
        "LeftDelim",
        "RightDelim",
        "Envvar",
        "VaultGrace",
    ] {
        assert!(json.get(key).is_some(), "{key} missing from {json}");
    }
    let err = job.validate().unwrap_err().to_string();
    assert!(
        err.contains("Template 3 validation failed: destination escapes allocation directory"),
        "{err}"
    );
}

#[test]
fn periodic_parameterized_config_and_artifacts() {
    let src = r#"
job "p" {
  type = "batch"
  periodic {
    crons            = ["*/5 * * * *"]
    prohibit_overlap = true
  }
  parameterized {
    meta_required = ["who"]
  }
  meta = { "team.name" = "infra" }
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = "busybox:1"
        ports = ["http"]
        mount {
          type   = "bind"
          target = "/data"
        }
      }
      artifact {
        source      = "https://example.com/app.tgz"
        destination = "local/app"
        options {
          checksum = "sha256:abababababababababababababababababababababababababababababababab"
        }
      }
      service {
        name = "ignored-by-herder"
      }
      template {
        data        = "x"
        destination = "local/x"
      }
    }
  }
}
"#;
    let job = parse_hcl(src, "p.hcl").unwrap();
    let p = job.periodic.as_ref().unwrap();
    assert_eq!(
        (p.spec.as_str(), p.enabled, p.prohibit_overlap),
        ("*/5 * * * *", true, true)
    );
    let pj = job.parameterized_job.as_ref().unwrap();
    assert_eq!(
        (pj.payload.as_str(), pj.meta_required.clone()),
        ("optional", vec!["who".to_string()])
    );
    assert_eq!(job.meta["team.name"], "infra");
    let t = &job.task_groups[0].tasks[0];
    assert_eq!(t.config["image"], "busybox:1");
    assert_eq!(
        t.config["mount"],
        serde_json::json!([{"type": "bind", "target": "/data"}])
    );
    let a = &t.artifacts[0];
    assert_eq!(a.getter_source, "https://example.com/app.tgz");
    assert_eq!(a.relative_dest, "local/app");
    assert_eq!(a.getter_mode, "any");
    assert_eq!(
        a.getter_options["checksum"],
        "sha256:abababababababababababababababababababababababababababababababab"
    );
    job.validate().unwrap();
}

const JSON_JOB: &str = r#"{
  "ID": "j",
  "Type": "batch",
  "TaskGroups": [
    {"Name": "g", "Count": 2, "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}
  ]
}"#;

#[test]
fn json_jobs_wrapped_or_bare_are_canonicalized() {
    let bare = parse_json(JSON_JOB).unwrap();
    let wrapped = parse_json(&format!("{{\"Job\": {JSON_JOB}}}")).unwrap();
    assert_eq!(bare, wrapped);
    assert_eq!(bare.job_type, JobType::Batch);
    assert_eq!((bare.namespace.as_str(), bare.priority), ("default", 50));
    assert_eq!(bare.task_groups[0].tasks[0].resources.memory_mb, 300);
    // Nomad's own answers read back unchanged.
    let nomad = fixture("parse-web.json");
    let hcl = parse_hcl(&fixture("web.nomad.hcl"), "web.nomad.hcl").unwrap();
    assert_eq!(parse_any(&nomad, "web.json").unwrap(), hcl);
}

#[test]
fn json_fields_left_out_take_nomads_defaults() {
    let job = parse_json(
        r#"{"Job": {"ID": "j", "Type": "service",
            "Update": {"MaxParallel": 2, "Canary": 1, "AutoRevert": true},
            "TaskGroups": [
              {"Name": "a", "Tasks": [{"Name": "t", "Driver": "raw_exec"}]},
              {"Name": "b", "Count": 0, "Update": {"Canary": 3},
               "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}
            ]}}"#,
    )
    .unwrap();
    let (a, b) = (&job.task_groups[0], &job.task_groups[1]);
    assert_eq!((a.count, b.count), (1, 0), "a missing Count means 1");
    let ua = a.update.as_ref().unwrap();
    assert_eq!((ua.max_parallel, ua.canary, ua.auto_revert), (2, 1, true));
    assert_eq!(ua.health_check, "checks");
    assert_eq!(b.update.as_ref().unwrap().canary, 3);
}

#[test]
fn json_partial_blocks_merge_over_defaults_like_hcl() {
    let job = parse_json(
        r#"{"ID": "j", "Type": "batch",
            "Periodic": {"Spec": "@daily"},
            "Affinities": [{"LTarget": "${node.class}", "RTarget": "x", "Operand": "="}],
            "TaskGroups": [{
              "Name": "g",
              "RestartPolicy": {"Attempts": 5, "Interval": null},
              "EphemeralDisk": {"Sticky": true},
              "Tasks": [
                {"Name": "a", "Driver": "raw_exec", "RestartPolicy": {"Delay": 1000000000},
                 "LogConfig": {"MaxFiles": 2}},
                {"Name": "b", "Driver": "raw_exec"}
              ]}]}"#,
    )
    .unwrap();
    let p = job.periodic.as_ref().unwrap();
    assert!(p.enabled);
    assert_eq!(
        (p.spec_type.as_str(), p.time_zone.as_str()),
        ("cron", "UTC")
    );
    assert_eq!(job.affinities[0].weight, 50);
    let tg = &job.task_groups[0];
    let rp = tg.restart_policy.as_ref().unwrap();
    // Attempts written; the batch default fills interval, delay and mode.
    assert_eq!(
        (rp.attempts, rp.interval, rp.mode.as_str()),
        (5, Duration::from_secs(86400), "fail")
    );
    let disk = tg.ephemeral_disk.as_ref().unwrap();
    assert_eq!((disk.sticky, disk.size_mb), (true, 300));
    let a = &tg.tasks[0];
    let arp = a.restart_policy.as_ref().unwrap();
    assert_eq!((arp.attempts, arp.delay), (5, Duration::from_secs(1)));
    let logs = a.log_config.as_ref().unwrap();
    assert_eq!((logs.max_files, logs.max_file_size_mb), (2, 10));
    assert_eq!(tg.tasks[1].restart_policy.as_ref(), Some(rp));
    job.validate().unwrap();

    // The same job written in HCL reads the same.
    let hcl = r#"
job "j" {
  type = "batch"
  periodic {
    cron = "@daily"
  }
  affinity {
    attribute = "${node.class}"
    value     = "x"
  }
  group "g" {
    restart {
      attempts = 5
    }
    ephemeral_disk {
      sticky = true
    }
    task "a" {
      driver = "raw_exec"
      restart {
        delay = "1s"
      }
      logs {
        max_files = 2
      }
    }
    task "b" {
      driver = "raw_exec"
    }
  }
}
"#;
    assert_eq!(parse_hcl(hcl, "j.hcl").unwrap(), job);
}

#[test]
fn hcl_json_syntax_is_refused_with_a_reason() {
    let e = parse_json(r#"{"job": {"x": {"group": {"g": {}}}}}"#).unwrap_err();
    assert!(e.to_string().contains("HCL's JSON syntax"), "{e}");
}

#[test]
fn malformed_json_reports_line_and_column() {
    let e = parse_json("{\n  \"ID\": \"j\",\n  \"Type\": batch\n}").unwrap_err();
    assert!(
        matches!(
            e,
            JobspecError::Json {
                line: 3,
                column: 11,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().starts_with("<json>:3:11: expected value"),
        "{e}"
    );
    // Type errors point into the text too.
    let e = parse_any("{\"Job\": {\n  \"Priority\": \"high\"\n}}", "j.json").unwrap_err();
    assert_eq!(e.location(), Some((2, 20)), "{e}");
    assert!(
        e.to_string().starts_with("j.json:2:20: invalid type"),
        "{e}"
    );
    let e = parse_json("[1, 2]").unwrap_err();
    assert!(e.to_string().contains("a job must be a JSON object"), "{e}");
}

#[test]
fn parse_any_chooses_by_name_or_content() {
    let from_json = parse_any(JSON_JOB, "job.nomad").unwrap();
    assert_eq!(from_json.id, "j");
    let hcl = fixture("cleanup.nomad.hcl");
    assert_eq!(parse_any(&hcl, "-").unwrap().id, "cleanup");
    // A .json name with HCL content is parsed (and refused) as JSON.
    assert!(matches!(
        parse_any(&hcl, "c.json"),
        Err(JobspecError::Json { .. })
    ));
}

#[test]
fn parse_and_validate_reports_validation_errors_with_the_file() {
    let src = fixture("cleanup.nomad.hcl").replace("memory = 32", "memory = 5");
    let e = parse_and_validate(&src, "cleanup.nomad.hcl").unwrap_err();
    assert!(matches!(e, JobspecError::Validation { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.starts_with("cleanup.nomad.hcl: "), "{text}");
    assert!(text.contains("minimum MemoryMB value is 10"), "{text}");
    let ok = parse_and_validate(&fixture("cleanup.nomad.hcl"), "cleanup.nomad.hcl").unwrap();
    assert_eq!(ok.job_type, JobType::SysBatch);
}

#[test]
fn every_modelled_attribute_reaches_its_field() {
    let src = r#"
job "full" {
  region      = "eu"
  namespace   = "team-a"
  node_pool   = "gpu"
  all_at_once = true
  group "g" {
    stop_after_client_disconnect = "90s"
    max_client_disconnect        = "1h"
    shutdown_delay               = "5s"
    ephemeral_disk {
      size    = 1024
      sticky  = true
      migrate = true
    }
    network {
      mode = "bridge"
      port "db" {
        to           = 5432
        host_network = "internal"
      }
      dns {
        servers = ["10.0.0.1"]
      }
    }
    meta {
      zone = "a"
    }
    task "t" {
      driver         = "exec"
      user           = "nobody"
      kill_signal    = "SIGINT"
      leader         = true
      kind           = "connect-proxy:web"
      shutdown_delay = "2s"
      meta = {
        "build.id" = 42
      }
      constraint {
        attribute = "${attr.cpu.arch}"
        operator  = "!="
        value     = "arm64"
      }
      affinity {
        attribute = "${node.class}"
        value     = "fast"
        weight    = -30
      }
      resources {
        cores      = 2
        memory     = 512
        memory_max = 1024
        disk       = 50
      }
    }
  }
}
"#;
    let job = parse_hcl(src, "full.hcl").unwrap();
    assert_eq!(
        (
            job.region.as_str(),
            job.namespace.as_str(),
            job.node_pool.as_str()
        ),
        ("eu", "team-a", "gpu")
    );
    assert!(job.all_at_once);
    let tg = &job.task_groups[0];
    assert_eq!(
        tg.stop_after_client_disconnect,
        Some(Duration::from_secs(90))
    );
    assert_eq!(tg.max_client_disconnect, Some(Duration::from_secs(3600)));
    assert_eq!(tg.shutdown_delay, Some(Duration::from_secs(5)));
    let disk = tg.ephemeral_disk.as_ref().unwrap();
    assert_eq!(
        (disk.size_mb, disk.sticky, disk.migrate),
        (1024, true, true)
    );
    let net = &tg.networks[0];
    assert_eq!(net.mode, "bridge");
    let port = &net.dynamic_ports[0];
    assert_eq!(
        (port.label.as_str(), port.to, port.host_network.as_str()),
        ("db", 5432, "internal")
    );
    assert_eq!(net.dns.as_ref().unwrap()["Servers"][0], "10.0.0.1");
    assert_eq!(tg.meta["zone"], "a");
    let t = &tg.tasks[0];
    assert_eq!(
        (t.user.as_str(), t.kill_signal.as_str(), t.kind.as_str()),
        ("nobody", "SIGINT", "connect-proxy:web")
    );
    assert!(t.leader);
    assert_eq!(t.shutdown_delay, Duration::from_secs(2));
    assert_eq!(t.meta["build.id"], "42");
    assert_eq!(t.constraints[0].operand, "!=");
    assert_eq!(t.affinities[0].weight, -30);
    let r = &t.resources;
    assert_eq!(
        (r.cpu, r.cores, r.memory_mb, r.memory_max_mb, r.disk_mb),
        (0, 2, 512, 1024, 50)
    );
    job.validate().unwrap();
}

#[test]
fn service_and_check_blocks_become_nomads_services() {
    let src = r#"
job "web" {
  group "g" {
    network {
      port "http" {}
    }
    service {
      name     = "web"
      port     = "http"
      tags     = ["a", "b"]
      provider = "nomad"
      check_restart {
        limit = 3
      }
      check {
        type     = "http"
        path     = "/health"
        interval = "5s"
        timeout  = "2s"
        header {
          X-Probe = ["1"]
        }
      }
      check {
        name     = "script"
        type     = "script"
        task     = "t"
        command  = "/bin/true"
        args     = ["-x"]
        interval = "10s"
        timeout  = "1s"
      }
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
      }
      service {
        port = "http"
        check {
          type     = "tcp"
          interval = "1s"
          timeout  = "1s"
        }
      }
    }
  }
}"#;
    let job = parse_hcl(src, "web.hcl").unwrap_or_else(|e| panic!("{e}"));
    let s = &job.task_groups[0].services[0];
    assert_eq!((s.name.as_str(), s.port_label.as_str()), ("web", "http"));
    assert_eq!((s.tags.len(), s.provider.as_str()), (2, "nomad"));
    let http = &s.checks[0];
    assert_eq!(http.name, "service: \"web\" check");
    assert_eq!(http.interval, Duration::from_secs(5));
    assert_eq!(http.header["X-Probe"], vec!["1".to_string()]);
    assert_eq!(s.checks[1].args, vec!["-x".to_string()]);
    assert!(
        s.checks.iter().all(|c| c.check_restart.is_some()),
        "inherited"
    );
    let ts = &job.task_groups[0].tasks[0].services[0];
    assert_eq!((ts.name.as_str(), ts.task_name.as_str()), ("web-g-t", "t"));
    assert_eq!(ts.provider, "consul");
    job.validate().unwrap_or_else(|e| panic!("{e}"));

    // The JSON of the parsed job reads back as the same job.
    let json = serde_json::to_value(&job).unwrap();
    assert_eq!(json["TaskGroups"][0]["Services"][0]["PortLabel"], "http");
    let back: Job = serde_json::from_value(json).unwrap();
    assert_eq!(back, job);
}

#[test]
fn a_service_check_that_cannot_run_is_refused() {
    let src = r#"
job "web" {
  group "g" {
    service {
      name = "web"
      port = "nope"
      check {
        type     = "carrier-pigeon"
        interval = "5s"
        timeout  = "2s"
      }
      check {
        type     = "script"
        interval = "0s"
        timeout  = "2s"
        success_before_passing   = -1
        failures_before_critical = -2
      }
    }
    task "t" {
      driver = "raw_exec"
    }
  }
}"#;
    let job = parse_hcl(src, "web.hcl").unwrap_or_else(|e| panic!("{e}"));
    let err = job.validate().unwrap_err().to_string();
    for want in [
        "port label \"nope\" is not a port",
        "Type must be one of http, tcp, script, grpc; got \"carrier-pigeon\"",
        "Interval must be at least 1s",
        "a script check needs a Command",
        "a script check of a group service must name its task",
        "success_before_passing must be non-negative",
        "failures_before_critical must be non-negative",
    ] {
        assert!(err.contains(want), "{want:?} not in {err}");
    }
}
