use super::*;
use engine::{Funcs, Limits, Template as Engine};
use serde_json::{json, Value};

struct NoFuncs;
impl Funcs for NoFuncs {
    fn call(&mut self, _: &str, _: Vec<Value>) -> Option<Result<Value, String>> {
        None
    }
}

fn node() -> Node {
    let mut n = Node {
        name: "node-1".into(),
        datacenter: "dc1".into(),
        ..Default::default()
    };
    n.attributes.insert("kernel.name".into(), "linux".into());
    n.meta.insert("rack".into(), "r7".into());
    n
}

/// Renders with the task functions over a small environment.
fn render(src: &str) -> Result<String, String> {
    render_with(src, "{{", "}}", Limits::default())
}

fn render_with(src: &str, l: &str, r: &str, limits: Limits) -> Result<String, String> {
    let env = BTreeMap::from([
        ("NOMAD_ALLOC_INDEX".to_string(), "3".to_string()),
        ("GREETING".to_string(), " hello ".to_string()),
        ("LIST".to_string(), "a,b,c".to_string()),
    ]);
    let node = node();
    let catalog = ServiceCatalog::default();
    let mut funcs = TaskFuncs {
        env: &env,
        node: &node,
        namespace: "default",
        catalog: &catalog,
    };
    Engine::parse(src, l, r, limits)
        .and_then(|t| t.render(&Value::Null, &mut funcs))
        .map_err(|e| e.0)
}

#[test]
fn text_and_simple_actions() {
    assert_eq!(render("plain").unwrap(), "plain");
    assert_eq!(render("a{{ \"b\" }}c{{ 42 }}").unwrap(), "abc42");
    assert_eq!(render("{{/* a comment */}}x").unwrap(), "x");
    assert_eq!(render("a  {{- \"b\" -}}  \n c").unwrap(), "abc");
}

#[test]
fn custom_delimiters() {
    assert_eq!(
        render_with(
            "{{ x }} [[ env \"GREETING\" | trimSpace ]]",
            "[[",
            "]]",
            Limits::default()
        )
        .unwrap(),
        "{{ x }} hello"
    );
}

#[test]
fn pipelines_and_string_functions() {
    assert_eq!(
        render("{{ env \"GREETING\" | trimSpace | toUpper }}").unwrap(),
        "HELLO"
    );
    assert_eq!(render("{{ \"ABC\" | toLower }}").unwrap(), "abc");
    assert_eq!(
        render("{{ env \"LIST\" | split \",\" | join \"-\" }}").unwrap(),
        "a-b-c"
    );
    // The text is trimmed before it is split.
    assert_eq!(
        render("{{ \"a b \\n\" | split \" \" | len }}").unwrap(),
        "2"
    );
    assert_eq!(
        render("{{ \"foo\" | replaceAll \"o\" \"0\" }}").unwrap(),
        "f00"
    );
    assert_eq!(
        render("{{ if \"foobar\" | contains \"oba\" }}yes{{ end }}").unwrap(),
        "yes"
    );
    assert_eq!(
        render("{{ if env \"LIST\" | split \",\" | contains \"b\" }}in{{ end }}").unwrap(),
        "in"
    );
    assert_eq!(
        render("{{ \"41\" | parseInt | printf \"%d!\" }}").unwrap(),
        "41!"
    );
    assert_eq!(render("{{ \"hi\" | base64Encode }}").unwrap(), "aGk=");
    assert_eq!(render("{{ \"aGk=\" | base64Decode }}").unwrap(), "hi");
    assert_eq!(
        render("{{ printf \"%s=%05.1f|%-3s|%q\" \"x\" 3.14159 \"a\" \"q\" }}").unwrap(),
        "x=003.1|a  |\"q\""
    );
    assert_eq!(
        render("{{ env \"LIST\" | split \",\" | toJSON }}").unwrap(),
        "[\"a\",\"b\",\"c\"]"
    );
    assert_eq!(
        render("{{ (env \"LIST\" | split \",\") | len }}").unwrap(),
        "3"
    );
}

#[test]
fn env_reads_task_and_node_variables() {
    assert_eq!(render("{{ env \"NOMAD_ALLOC_INDEX\" }}").unwrap(), "3");
    assert_eq!(
        render("{{ env \"node.unique.name\" }}/{{ env \"node.datacenter\" }}").unwrap(),
        "node-1/dc1"
    );
    assert_eq!(
        render("{{ env \"attr.kernel.name\" }} {{ env \"meta.rack\" }}").unwrap(),
        "linux r7"
    );
    assert_eq!(
        render("[{{ env \"UNSET\" }}][{{ env \"attr.none\" }}]").unwrap(),
        "[][]"
    );
}

#[test]
fn conditionals() {
    let t = "{{ if eq (env \"NOMAD_ALLOC_INDEX\") \"0\" }}first{{ else if eq (env \"NOMAD_ALLOC_INDEX\") \"3\" }}fourth{{ else }}other{{ end }}";
    assert_eq!(render(t).unwrap(), "fourth");
    assert_eq!(
        render("{{ if and true (not false) }}y{{ else }}n{{ end }}").unwrap(),
        "y"
    );
    assert_eq!(
        render("{{ if or \"\" 0 }}y{{ else }}n{{ end }}").unwrap(),
        "n"
    );
    assert_eq!(
        render("{{ if lt 1 2 }}{{ if ge 2 2 }}ok{{ end }}{{ end }}").unwrap(),
        "ok"
    );
}

#[test]
fn range_with_and_variables() {
    assert_eq!(
        render("{{ range env \"LIST\" | split \",\" }}<{{ . }}>{{ end }}").unwrap(),
        "<a><b><c>"
    );
    assert_eq!(
        render("{{ range $i, $e := split \",\" \"x,y\" }}{{ $i }}={{ $e }};{{ end }}").unwrap(),
        "0=x;1=y;"
    );
    assert_eq!(
        render("{{ range split \",\" \"\" }}x{{ else }}empty{{ end }}").unwrap(),
        "empty"
    );
    assert_eq!(
        render("{{ $n := \"v\" }}{{ $n = \"w\" }}{{ $n }}").unwrap(),
        "w"
    );
    assert_eq!(
        render("{{ with env \"GREETING\" }}[{{ . | trimSpace }}]{{ end }}").unwrap(),
        "[hello]"
    );
    assert_eq!(
        render("{{ with env \"UNSET\" }}x{{ else }}none{{ end }}").unwrap(),
        "none"
    );
    assert_eq!(
        render("{{ $l := split \",\" \"p,q\" }}{{ index $l 1 }}").unwrap(),
        "q"
    );
    // A string is not something to range over.
    assert!(render("{{ range \"abc\" }}{{ end }}")
        .unwrap_err()
        .contains("range can't iterate"));
}

#[test]
fn fields_of_values() {
    let mut f = NoFuncs;
    let t = Engine::parse(
        "{{ .A.B }} {{ $.A.B }} {{ range .L }}{{ .N }}{{ end }}",
        "{{",
        "}}",
        Limits::default(),
    )
    .unwrap();
    let data = json!({"A": {"B": "deep"}, "L": [{"N": 1}, {"N": 2}]});
    assert_eq!(t.render(&data, &mut f).unwrap(), "deep deep 12");
}

#[test]
fn refusals_name_the_cause() {
    assert!(render("{{ nosuch \"x\" }}")
        .unwrap_err()
        .contains("function \"nosuch\" not defined"));
    assert!(render("{{ key \"a/b\" }}")
        .unwrap_err()
        .contains("needs Consul or Vault"));
    assert!(render("{{ nomadVar \"x\" }}")
        .unwrap_err()
        .contains("no server is known"));
    assert!(render("{{ nomadService \"web\" }}")
        .unwrap_err()
        .contains("no server is known"));
    assert!(render("{{ if true }}x").unwrap_err().contains("no {{end}}"));
    assert!(render("{{ end }}").unwrap_err().contains("unexpected"));
    assert!(render("{{ \"x\"").unwrap_err().contains("unclosed action"));
    assert!(render("{{ parseInt \"x1\" }}")
        .unwrap_err()
        .contains("parseInt"));
}

#[test]
fn limits_bound_every_cost() {
    let small = Limits {
        max_source_bytes: 100,
        max_depth: 3,
        max_output_bytes: 10,
        max_steps: 50,
    };
    assert!(render_with(&"x".repeat(101), "{{", "}}", small)
        .unwrap_err()
        .contains("bytes"));
    let deep = "{{ if true }}".repeat(4) + &"{{ end }}".repeat(4);
    assert!(render_with(&deep, "{{", "}}", small)
        .unwrap_err()
        .contains("nests deeper"));
    assert!(render_with("{{ range 100 }}x{{ end }}", "{{", "}}", small)
        .unwrap_err()
        .contains("larger than 10 bytes"));
    let steps = Limits {
        max_output_bytes: 1 << 20,
        ..small
    };
    assert!(render_with("{{ range 1000 }}{{ end }}", "{{", "}}", steps)
        .unwrap_err()
        .contains("steps"));
}

fn set(dir: &Path, templates: Vec<Template>) -> TemplateSet {
    TemplateSet {
        templates: templates
            .into_iter()
            .map(|mut t| {
                t.canonicalize();
                t
            })
            .collect(),
        task_dir: dir.join("task"),
        node: Arc::new(node()),
        namespace: "default".into(),
        catalog: ServiceCatalog::default(),
        limits: Limits::default(),
    }
}

#[test]
fn files_are_written_with_perms_and_changes_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("task/local")).unwrap();
    std::fs::write(dir.path().join("task/local/in.tpl"), "v={{ env \"V\" }}").unwrap();
    let s = set(
        dir.path(),
        vec![
            Template {
                source_path: "local/in.tpl".into(),
                dest_path: "local/out.conf".into(),
                perms: "0600".into(),
                ..Default::default()
            },
            Template {
                embedded_tmpl: "export A=\"x y\"\n# c\nB={{ env \"V\" }}\n".into(),
                dest_path: "secrets/app.env".into(),
                envvar: true,
                change_mode: "noop".into(),
                ..Default::default()
            },
        ],
    );
    let env = BTreeMap::from([("V".to_string(), "1".to_string())]);
    let first = s.render(&env).unwrap();
    assert!(first.changed && first.restart);
    assert_eq!(first.env["A"], "x y");
    assert_eq!(first.env["B"], "1");
    let out = dir.path().join("task/local/out.conf");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "v=1");
    assert_eq!(
        std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Nothing changed: nothing to do.
    assert!(!s.render(&env).unwrap().changed);
    // The source changes: the restart template acts.
    std::fs::write(dir.path().join("task/local/in.tpl"), "v2={{ env \"V\" }}").unwrap();
    let again = s.render(&env).unwrap();
    assert!(again.restart);
    assert_eq!(s.env_on_disk()["B"], "1");
}

#[test]
fn sources_and_destinations_outside_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("task/local")).unwrap();
    std::fs::write(dir.path().join("secret"), "s").unwrap();
    let escaping_source = set(
        dir.path(),
        vec![Template {
            source_path: "../../secret".into(),
            dest_path: "local/x".into(),
            ..Default::default()
        }],
    );
    let e = escaping_source.render(&BTreeMap::new()).unwrap_err();
    assert!(e.0.contains("escapes"), "{e}");
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(
        elsewhere.path().join("secret"),
        dir.path().join("task/local/link"),
    )
    .unwrap();
    let linked = set(
        dir.path(),
        vec![Template {
            source_path: "local/link".into(),
            dest_path: "local/x".into(),
            ..Default::default()
        }],
    );
    let e = linked.render(&BTreeMap::new()).unwrap_err();
    assert!(e.0.contains("outside the allocation directory"), "{e}");
}

#[test]
fn signal_templates_ask_for_their_signal_once() {
    let dir = tempfile::tempdir().unwrap();
    let t = |dest: &str| Template {
        embedded_tmpl: "x".into(),
        dest_path: dest.into(),
        change_mode: "signal".into(),
        change_signal: "sigusr1".into(),
        ..Default::default()
    };
    let s = set(dir.path(), vec![t("local/a"), t("local/b")]);
    let r = s.render(&BTreeMap::new()).unwrap();
    assert_eq!(r.signals, vec!["SIGUSR1".to_string()]);
    assert!(!r.restart);
}
