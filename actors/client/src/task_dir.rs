//! An allocation's directories and its tasks' environment.
//!
//! Layout, as Nomad's: `<data_dir>/alloc/<alloc_id>/alloc/` is shared by the
//! group's tasks (with `logs/`, `data/`, `tmp/`), and each task has
//! `<task>/local/`, `<task>/secrets/` (mode 0700) and `<task>/tmp/`.
//!
//! The environment carries Nomad's `NOMAD_*` variables and each again with a
//! `HERDER_` prefix, and `${...}` references in task config, args and env
//! values are replaced the way Nomad does: `${NOMAD_ALLOC_ID}` or any other
//! task variable, `${env.X}` / `${env["X"]}`, `${attr.<name>}`,
//! `${meta.<key>}` and `${node.<field>}`. Unknown references stay verbatim.

use herder::structs::{Allocation, Job, Node, Task, TaskGroup};
use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The directory tree of one allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocDir {
    pub root: PathBuf,
}

impl AllocDir {
    pub fn new(data_dir: &Path, alloc_id: &herder::structs::AllocId) -> Self {
        AllocDir {
            root: data_dir.join("alloc").join(alloc_id.to_string()),
        }
    }

    /// The directory the group's tasks share (`NOMAD_ALLOC_DIR`).
    pub fn shared_dir(&self) -> PathBuf {
        self.root.join("alloc")
    }

    pub fn log_dir(&self) -> PathBuf {
        log_dir(&self.root)
    }

    /// A task's working directory.
    pub fn task_dir(&self, task: &str) -> PathBuf {
        self.root.join(task)
    }

    /// Creates the shared directories and each task's.
    pub fn build<'a>(&self, tasks: impl IntoIterator<Item = &'a str>) -> io::Result<()> {
        let shared = self.shared_dir();
        for sub in ["logs", "data", "tmp"] {
            std::fs::create_dir_all(shared.join(sub))?;
        }
        for task in tasks {
            self.build_task(task)?;
        }
        Ok(())
    }

    /// Creates one task's directories (the name must be a plain name).
    pub fn build_task(&self, task: &str) -> io::Result<()> {
        check_task_name(task)?;
        build_task_dir(&self.task_dir(task))
    }

    /// Removes the whole tree (after the allocation is garbage collected).
    pub fn destroy(&self) -> io::Result<()> {
        match std::fs::remove_dir_all(&self.root) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// The log directory of an allocation directory (`logs` writes and reads
/// the files in it).
pub fn log_dir(alloc_dir: &Path) -> PathBuf {
    alloc_dir.join("alloc").join("logs")
}

/// Refuses a task name that is not one plain directory name. A task's
/// name becomes its directory under the allocation's and the stem of its
/// log files: `../../tmp/x` would create both outside the data dir. The
/// servers refuse such jobs; the client checks again because it must not
/// trust a server (an older one, or a restored state) with its disk.
pub fn check_task_name(task: &str) -> io::Result<()> {
    let plain = !task.is_empty()
        && !task.contains(['/', '\\', '\0'])
        && task != "alloc"
        && !task.starts_with('.');
    if plain {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("task name {task:?} cannot be a directory name"),
        ))
    }
}

/// Creates a task's `local/`, `tmp/` and private `secrets/` directories.
pub fn build_task_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir.join("local"))?;
    std::fs::create_dir_all(dir.join("tmp"))?;
    let secrets = dir.join("secrets");
    std::fs::create_dir_all(&secrets)?;
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o700))
}

/// Host variables never passed to tasks (Nomad's default `env.denylist`
/// plus herder's own token).
pub const HOST_ENV_DENYLIST: [&str; 10] = [
    "CONSUL_TOKEN",
    "CONSUL_HTTP_TOKEN",
    "VAULT_TOKEN",
    "NOMAD_LICENSE",
    "NOMAD_TOKEN",
    "HERDER_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// The client's own environment less the deny list: what tasks inherit.
pub fn host_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| !HOST_ENV_DENYLIST.contains(&k.as_str()))
        .collect()
}

/// Everything a task's environment is built from.
pub struct EnvInputs<'a> {
    pub alloc: &'a Allocation,
    pub job: &'a Job,
    pub group: &'a TaskGroup,
    pub task: &'a Task,
    pub node: &'a Node,
    pub alloc_dir: &'a AllocDir,
    /// The inherited environment (see [`host_env`]).
    pub host_env: &'a BTreeMap<String, String>,
}

/// A port as a task sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortVar {
    pub label: String,
    /// The address the port is reachable at on the node.
    pub ip: String,
    pub host_port: i64,
    /// The port inside the task (`to`), the host port when not mapped.
    pub task_port: i64,
}

/// Builds the complete environment of a task: inherited variables, the
/// task's own `env` (interpolated), then the `NOMAD_*` / `HERDER_*` ones.
pub fn build_task_env(inputs: &EnvInputs<'_>) -> BTreeMap<String, String> {
    let nomad = nomad_vars(inputs);
    let mut env = inputs.host_env.clone();
    env.extend(nomad.clone());
    for (k, v) in &inputs.task.env {
        let value = interpolate(v, &env, inputs.node);
        env.insert(k.clone(), value);
    }
    // Nomad's own variables win over a task `env` of the same name.
    env.extend(nomad);
    env
}

fn nomad_vars(inputs: &EnvInputs<'_>) -> BTreeMap<String, String> {
    let EnvInputs {
        alloc,
        job,
        group,
        task,
        node,
        alloc_dir,
        ..
    } = inputs;
    let mut v = BTreeMap::new();
    let mut set = |k: &str, val: String| {
        v.insert(format!("NOMAD_{k}"), val);
    };
    let alloc_id = alloc.id.to_string();
    set("SHORT_ALLOC_ID", alloc_id.chars().take(8).collect());
    set("ALLOC_ID", alloc_id);
    set("ALLOC_NAME", alloc.name.to_string());
    set(
        "ALLOC_INDEX",
        alloc.index().map_or_else(String::new, |i| i.to_string()),
    );
    set("TASK_NAME", task.name.clone());
    set("GROUP_NAME", group.name.clone());
    set("JOB_ID", job.id.clone());
    set("JOB_NAME", job.name.clone());
    if !job.parent_id.is_empty() {
        set("JOB_PARENT_ID", job.parent_id.clone());
    }
    set("NAMESPACE", job.namespace.clone());
    set("REGION", job.region.clone());
    set("DC", node.datacenter.clone());
    set("ALLOC_DIR", path_string(&alloc_dir.shared_dir()));
    let task_dir = alloc_dir.task_dir(&task.name);
    set("TASK_DIR", path_string(&task_dir.join("local")));
    set("SECRETS_DIR", path_string(&task_dir.join("secrets")));
    let allocated = alloc.allocated_resources.tasks.get(&task.name);
    let cpu = allocated.map_or(task.resources.cpu, |r| r.cpu.cpu_shares);
    let memory = allocated.map_or(task.resources.memory_mb, |r| r.memory.memory_mb);
    set("CPU_LIMIT", cpu.to_string());
    set("MEMORY_LIMIT", memory.to_string());
    for port in ports(inputs) {
        let label = port.label.replace('-', "_");
        set(&format!("IP_{label}"), port.ip.clone());
        set(&format!("PORT_{label}"), port.task_port.to_string());
        set(&format!("HOST_PORT_{label}"), port.host_port.to_string());
        set(
            &format!("ADDR_{label}"),
            format!("{}:{}", port.ip, port.host_port),
        );
    }
    let mut meta = job.meta.clone();
    meta.extend(group.meta.clone());
    meta.extend(task.meta.clone());
    for (k, val) in meta {
        set(&format!("META_{k}"), val);
    }
    let herder: Vec<(String, String)> = v
        .iter()
        .filter_map(|(k, val)| Some((format!("HERDER_{}", k.strip_prefix("NOMAD_")?), val.clone())))
        .collect();
    v.extend(herder);
    v
}

fn path_string(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn ports(inputs: &EnvInputs<'_>) -> Vec<PortVar> {
    allocated_ports(inputs.alloc, inputs.node, Some(&inputs.task.name))
}

/// Every port the allocation holds for `task` (for none: the group's
/// only): the group's shared ports and networks, then the task's own
/// networks. A port without an address of its own is at the node's.
pub fn allocated_ports(alloc: &Allocation, node: &Node, task: Option<&str>) -> Vec<PortVar> {
    let default_ip = node
        .attributes
        .get("unique.network.ip-address")
        .map(ToString::to_string)
        .unwrap_or_else(|| "127.0.0.1".to_string());
    let resources = &alloc.allocated_resources;
    let mut out = Vec::new();
    let mut push = |p: &herder::structs::Port, ip: &str| {
        if p.label.is_empty() {
            return;
        }
        out.push(PortVar {
            label: p.label.clone(),
            ip: if ip.is_empty() {
                default_ip.clone()
            } else {
                ip.to_string()
            },
            host_port: p.value,
            task_port: if p.to > 0 { p.to } else { p.value },
        });
    };
    for p in &resources.shared.ports {
        push(p, "");
    }
    let task_networks = task
        .and_then(|name| resources.tasks.get(name))
        .map(|t| t.networks.as_slice())
        .unwrap_or_default();
    for net in resources.shared.networks.iter().chain(task_networks) {
        for p in net.all_ports() {
            push(p, &net.ip);
        }
    }
    out
}

/// Replaces `${...}` references in `s` (see the module docs).
pub fn interpolate(s: &str, env: &BTreeMap<String, String>, node: &Node) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let key = after[..end].trim();
        match lookup(key, env, node) {
            Some(v) => out.push_str(&v),
            None => out.push_str(&rest[start..start + 2 + end + 1]),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

fn lookup(key: &str, env: &BTreeMap<String, String>, node: &Node) -> Option<String> {
    if let Some(var) = key.strip_prefix("env.") {
        return env.get(var).cloned();
    }
    if let Some(var) = key.strip_prefix("env[").and_then(|r| r.strip_suffix(']')) {
        return env
            .get(var.trim_matches(|c| c == '"' || c == '\''))
            .cloned();
    }
    if let Some(attr) = key
        .strip_prefix("attr.")
        .or_else(|| key.strip_prefix("node.attr."))
    {
        return node.attributes.get(attr).map(ToString::to_string);
    }
    if let Some(meta) = key
        .strip_prefix("meta.")
        .or_else(|| key.strip_prefix("node.meta."))
    {
        return node.meta.get(meta).map(ToString::to_string);
    }
    match key {
        "node.unique.id" => return Some(node.id.to_string()),
        "node.unique.name" => return Some(node.name.to_string()),
        "node.datacenter" => return Some(node.datacenter.clone()),
        "node.class" => return Some(node.node_class.clone()),
        "node.pool" => return Some(node.node_pool.clone()),
        "node.region" => return env.get("NOMAD_REGION").cloned(),
        _ => {}
    }
    env.get(key).cloned()
}

/// Interpolates every string inside a task's config (nested lists and maps
/// included).
pub fn interpolate_config(
    config: &BTreeMap<String, serde_json::Value>,
    env: &BTreeMap<String, String>,
    node: &Node,
) -> BTreeMap<String, serde_json::Value> {
    config
        .iter()
        .map(|(k, v)| (k.clone(), interpolate_value(v, env, node)))
        .collect()
}

fn interpolate_value(
    v: &serde_json::Value,
    env: &BTreeMap<String, String>,
    node: &Node,
) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => Value::String(interpolate(s, env, node)),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| interpolate_value(i, env, node))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, i)| (k.clone(), interpolate_value(i, env, node)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herder::structs::{AllocatedTaskResources, NetworkResource, Port};

    fn fixture() -> (Allocation, Job, Node) {
        let mut job = Job {
            id: "web".into(),
            name: "web".into(),
            namespace: "default".into(),
            region: "global".into(),
            ..Default::default()
        };
        let task = Task {
            name: "server".into(),
            driver: "raw_exec".into(),
            ..Default::default()
        };
        job.task_groups.push(TaskGroup {
            name: "front".into(),
            count: 1,
            tasks: vec![task],
            ..Default::default()
        });
        let mut alloc = Allocation {
            id: herder::structs::new_id(),
            name: "web.front[2]".into(),
            ..Default::default()
        };
        std::sync::Arc::make_mut(&mut alloc.allocated_resources)
            .shared
            .ports
            .push(Port {
                label: "http".into(),
                value: 25000,
                to: 8080,
                host_network: String::new(),
            });
        let mut t = AllocatedTaskResources::default();
        t.cpu.cpu_shares = 250;
        t.memory.memory_mb = 128;
        t.networks.push(NetworkResource {
            ip: "10.0.0.5".into(),
            dynamic_ports: vec![Port {
                label: "admin-ui".into(),
                value: 26000,
                ..Default::default()
            }],
            ..Default::default()
        });
        std::sync::Arc::make_mut(&mut alloc.allocated_resources)
            .tasks
            .insert("server".into(), t);
        let mut node = Node {
            datacenter: "dc1".into(),
            name: "n1".into(),
            node_class: "gpu".into(),
            ..Default::default()
        };
        node.attributes.insert("kernel.name".into(), "linux".into());
        node.attributes
            .insert("unique.network.ip-address".into(), "192.168.1.2".into());
        node.meta.insert("rack".into(), "r1".into());
        (alloc, job, node)
    }

    #[test]
    fn env_has_nomad_and_herder_variables_and_ports() {
        let (alloc, mut job, node) = fixture();
        job.task_groups[0].tasks[0].env.insert(
            "GREETING".into(),
            "hi from ${NOMAD_TASK_NAME} on ${attr.kernel.name}".into(),
        );
        let dir = AllocDir::new(Path::new("/data"), &alloc.id);
        let host = BTreeMap::from([("PATH".to_string(), "/bin".to_string())]);
        let env = build_task_env(&EnvInputs {
            alloc: &alloc,
            job: &job,
            group: &job.task_groups[0],
            task: &job.task_groups[0].tasks[0],
            node: &node,
            alloc_dir: &dir,
            host_env: &host,
        });
        let id = alloc.id.to_string();
        assert_eq!(env["NOMAD_ALLOC_ID"], id);
        assert_eq!(env["HERDER_ALLOC_ID"], id);
        assert_eq!(env["NOMAD_ALLOC_INDEX"], "2");
        assert_eq!(env["HERDER_JOB_NAME"], "web");
        assert_eq!(env["NOMAD_DC"], "dc1");
        assert_eq!(env["NOMAD_CPU_LIMIT"], "250");
        assert_eq!(env["NOMAD_MEMORY_LIMIT"], "128");
        assert_eq!(env["NOMAD_PORT_http"], "8080");
        assert_eq!(env["NOMAD_HOST_PORT_http"], "25000");
        assert_eq!(env["NOMAD_ADDR_http"], "192.168.1.2:25000");
        assert_eq!(env["HERDER_IP_admin_ui"], "10.0.0.5");
        assert_eq!(
            env["NOMAD_TASK_DIR"],
            format!("/data/alloc/{id}/server/local")
        );
        assert_eq!(env["NOMAD_ALLOC_DIR"], format!("/data/alloc/{id}/alloc"));
        assert_eq!(env["GREETING"], "hi from server on linux");
        assert_eq!(env["PATH"], "/bin");
    }

    #[test]
    fn interpolation_handles_every_namespace_and_leaves_unknowns() {
        let (_, _, node) = fixture();
        let env = BTreeMap::from([
            ("NOMAD_ALLOC_ID".to_string(), "a1".to_string()),
            ("HOME".to_string(), "/root".to_string()),
        ]);
        let s = "${NOMAD_ALLOC_ID}/${env.HOME}/${env[\"HOME\"]}/${meta.rack}/${node.class}/${node.datacenter}/${nope}/${open";
        assert_eq!(
            interpolate(s, &env, &node),
            "a1//root//root/r1/gpu/dc1/${nope}/${open"
        );
        let config = BTreeMap::from([(
            "args".to_string(),
            serde_json::json!(["-id", "${NOMAD_ALLOC_ID}", 3]),
        )]);
        let out = interpolate_config(&config, &env, &node);
        assert_eq!(out["args"], serde_json::json!(["-id", "a1", 3]));
    }

    #[test]
    fn build_makes_shared_and_task_dirs_with_private_secrets() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = AllocDir::new(tmp.path(), &herder::structs::new_id());
        dir.build(["a", "b"]).unwrap();
        assert!(dir.log_dir().is_dir());
        for t in ["a", "b"] {
            assert!(dir.task_dir(t).join("local").is_dir());
            assert!(dir.task_dir(t).join("tmp").is_dir());
            let mode = std::fs::metadata(dir.task_dir(t).join("secrets"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        assert!(dir.build(["../escape"]).is_err());
        dir.destroy().unwrap();
        assert!(!dir.root.exists());
    }
}
