//! How the CLI shows what clients measure and keep: file listings (`alloc
//! fs`), an allocation's resource usage (`alloc status -stats`) and a
//! node's host figures (`node status -stats`), as Nomad's CLI lays them
//! out, with its byte and number formats.

use super::output::{format_time, key_values, table};
use serde_json::Value;
use std::fmt::Write as _;

/// go-humanize's `IBytes`: `512 B`, `1.5 KiB`, `12 MiB`.
pub fn ibytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 10 {
        return format!("{bytes} B");
    }
    let exp = ((bytes as f64).ln() / 1024f64.ln()).floor() as usize;
    let exp = exp.min(UNITS.len() - 1);
    let value = (bytes as f64 / 1024f64.powi(exp as i32) * 10.0 + 0.5).floor() / 10.0;
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[exp])
    } else {
        format!("{value:.0} {}", UNITS[exp])
    }
}

/// go-humanize's `FormatFloat("#,###.##", f)`.
pub fn group_float(value: f64) -> String {
    let text = format!("{:.2}", value.abs());
    let (int, frac) = text.split_once('.').unwrap_or((&text, "00"));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if value < 0.0 { "-" } else { "" };
    format!("{sign}{grouped}.{frac}")
}

/// An `AllocFileInfo`'s `ModTime` as Nomad's CLI prints it.
fn mod_time(info: &Value) -> String {
    info["ModTime"]
        .as_str()
        .and_then(|t| humantime::parse_rfc3339_weak(t.trim_end_matches('Z')).ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(String::new, |d| {
            format_time(i64::try_from(d.as_nanos()).unwrap_or(0))
        })
}

fn size(info: &Value, machine: bool) -> String {
    let bytes = info["Size"].as_u64().unwrap_or(0);
    if machine {
        bytes.to_string()
    } else {
        ibytes(bytes)
    }
}

fn display_name(info: &Value) -> String {
    let name = info["Name"].as_str().unwrap_or_default();
    if info["IsDir"] == true {
        format!("{name}/")
    } else {
        name.to_string()
    }
}

/// `alloc fs -stat`: one file.
pub fn file_stat(info: &Value, machine: bool) -> String {
    table(
        &["Mode", "Size", "Modified Time", "Content Type", "Name"],
        &[vec![
            info["FileMode"].as_str().unwrap_or_default().to_string(),
            size(info, machine),
            mod_time(info),
            info["ContentType"].as_str().unwrap_or_default().to_string(),
            display_name(info),
        ]],
    )
}

/// `alloc fs` of a directory.
pub fn file_list(files: &[Value], machine: bool) -> String {
    let rows: Vec<Vec<String>> = files
        .iter()
        .map(|f| {
            vec![
                f["FileMode"].as_str().unwrap_or_default().to_string(),
                size(f, machine),
                mod_time(f),
                display_name(f),
            ]
        })
        .collect();
    table(&["Mode", "Size", "Modified Time", "Name"], &rows)
}

/// Which of the `Measured` names are shown, sorted as Nomad sorts them.
fn measured(stats: &Value) -> Vec<String> {
    let mut names: Vec<String> = stats["Measured"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m.as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

fn percent(value: &Value) -> String {
    format!("{:.2}%", value.as_f64().unwrap_or(0.0))
}

/// `alloc status -stats`: a task's usage against what it was given, then
/// its measured memory and CPU figures.
pub fn task_usage(usage: &Value, cpu_mhz: i64, memory_mb: i64) -> String {
    let ru = &usage["ResourceUsage"];
    let (mem, cpu) = (&ru["MemoryStats"], &ru["CpuStats"]);
    let mut rss = mem["RSS"].as_u64().unwrap_or(0);
    if rss == 0 && !measured(mem).iter().any(|m| m == "RSS") {
        rss = mem["Usage"].as_u64().unwrap_or(0);
    }
    let ticks = cpu["TotalTicks"].as_f64().unwrap_or(0.0).floor();
    let mut out = String::from("Task Resources\n");
    out.push_str(&table(
        &["CPU", "Memory"],
        &[vec![
            format!("{ticks}/{cpu_mhz} MHz"),
            format!(
                "{}/{}",
                ibytes(rss),
                ibytes(u64::try_from(memory_mb).unwrap_or(0) * 1024 * 1024)
            ),
        ]],
    ));
    let mem_names = measured(mem);
    if !mem_names.is_empty() {
        let values: Vec<String> = mem_names
            .iter()
            .map(|m| {
                let key = match m.as_str() {
                    "RSS" => "RSS",
                    "Max Usage" => "MaxUsage",
                    "Kernel Usage" => "KernelUsage",
                    "Kernel Max Usage" => "KernelMaxUsage",
                    other => other,
                };
                ibytes(mem[key].as_u64().unwrap_or(0))
            })
            .collect();
        let header: Vec<&str> = mem_names.iter().map(String::as_str).collect();
        let _ = write!(out, "\nMemory Stats\n{}", table(&header, &[values]));
    }
    let cpu_names = measured(cpu);
    if !cpu_names.is_empty() {
        let values: Vec<String> = cpu_names
            .iter()
            .map(|m| match m.as_str() {
                "Percent" => percent(&cpu["Percent"]),
                "User Mode" => percent(&cpu["UserMode"]),
                "System Mode" => percent(&cpu["SystemMode"]),
                "Throttled Periods" => cpu["ThrottledPeriods"].to_string(),
                "Throttled Time" => cpu["ThrottledTime"].to_string(),
                _ => String::new(),
            })
            .collect();
        let header: Vec<&str> = cpu_names.iter().map(String::as_str).collect();
        let _ = write!(out, "\nCPU Stats\n{}", table(&header, &[values]));
    }
    out
}

/// `node status -stats`: uptime, the host's use against the node's
/// resources, then each CPU, memory and disk.
pub fn host_stats(stats: &Value, node_cpu_mhz: i64) -> String {
    let mem = &stats["Memory"];
    let u = |v: &Value| v.as_u64().unwrap_or(0);
    let mut out = format!(
        "\nHost Resource Utilization\n{}",
        table(
            &["CPU", "Memory"],
            &[vec![
                format!(
                    "{}/{node_cpu_mhz} MHz",
                    stats["CPUTicksConsumed"].as_f64().unwrap_or(0.0).floor()
                ),
                format!("{}/{}", ibytes(u(&mem["Used"])), ibytes(u(&mem["Total"]))),
            ]]
        )
    );
    out.push_str("\nCPU Stats\n");
    let cpus: Vec<String> = stats["CPU"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            key_values(&[
                ("CPU", c["CPU"].as_str().unwrap_or_default().to_string()),
                (
                    "User",
                    format!("{}%", group_float(c["User"].as_f64().unwrap_or(0.0))),
                ),
                (
                    "System",
                    format!("{}%", group_float(c["System"].as_f64().unwrap_or(0.0))),
                ),
                (
                    "Idle",
                    format!("{}%", group_float(c["Idle"].as_f64().unwrap_or(0.0))),
                ),
            ])
        })
        .collect();
    out.push_str(&cpus.join("\n"));
    out.push_str("\nMemory Stats\n");
    out.push_str(&key_values(&[
        ("Total", ibytes(u(&mem["Total"]))),
        ("Available", ibytes(u(&mem["Available"]))),
        ("Used", ibytes(u(&mem["Used"]))),
        ("Free", ibytes(u(&mem["Free"]))),
    ]));
    out.push_str("\nDisk Stats\n");
    let disks: Vec<String> = stats["DiskStats"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            key_values(&[
                (
                    "Device",
                    d["Device"].as_str().unwrap_or_default().to_string(),
                ),
                (
                    "MountPoint",
                    d["Mountpoint"].as_str().unwrap_or_default().to_string(),
                ),
                ("Size", ibytes(u(&d["Size"]))),
                ("Used", ibytes(u(&d["Used"]))),
                ("Available", ibytes(u(&d["Available"]))),
                (
                    "Used Percent",
                    format!("{}%", group_float(d["UsedPercent"].as_f64().unwrap_or(0.0))),
                ),
                (
                    "Inodes Percent",
                    format!(
                        "{}%",
                        group_float(d["InodesUsedPercent"].as_f64().unwrap_or(0.0))
                    ),
                ),
            ])
        })
        .collect();
    out.push_str(&disks.join("\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bytes_and_floats_read_as_go_humanize_writes_them() {
        assert_eq!(ibytes(0), "0 B");
        assert_eq!(ibytes(512), "512 B");
        assert_eq!(ibytes(1536), "1.5 KiB");
        assert_eq!(ibytes(12 * 1024 * 1024), "12 MiB");
        assert_eq!(ibytes(256 * 1024 * 1024), "256 MiB");
        assert_eq!(group_float(1234.5), "1,234.50");
        assert_eq!(group_float(7.126), "7.13");
    }

    #[test]
    fn a_tasks_usage_shows_only_what_was_measured() {
        let usage = json!({"ResourceUsage": {
            "MemoryStats": {"RSS": 52428800, "Swap": 0, "Usage": 0, "Measured": ["Swap", "RSS"]},
            "CpuStats": {"TotalTicks": 12.7, "Percent": 0.5, "UserMode": 0.4, "SystemMode": 0.1,
                         "Measured": ["System Mode", "User Mode", "Percent"]}}});
        let text = task_usage(&usage, 500, 256);
        assert!(text.contains("12/500 MHz"), "{text}");
        assert!(text.contains("50 MiB/256 MiB"), "{text}");
        assert!(
            text.contains("Memory Stats\nRSS     Swap\n50 MiB  0 B\n"),
            "{text}"
        );
        assert!(
            text.contains("Percent  System Mode  User Mode\n0.50%    0.10%        0.40%"),
            "{text}"
        );
        assert!(!text.contains("Cache"));
    }

    #[test]
    fn file_listings_are_nomads_columns() {
        let files = vec![
            json!({"Name": "alloc", "IsDir": true, "Size": 4096, "FileMode": "drwxrwxrwx",
                   "ModTime": "2021-07-06T10:11:12.5Z"}),
            json!({"Name": "out.txt", "IsDir": false, "Size": 6, "FileMode": "-rw-r--r--",
                   "ModTime": "2021-07-06T10:11:13Z"}),
        ];
        assert_eq!(
            file_list(&files, false),
            "Mode        Size     Modified Time         Name\n\
             drwxrwxrwx  4.0 KiB  2021-07-06T10:11:12Z  alloc/\n\
             -rw-r--r--  6 B      2021-07-06T10:11:13Z  out.txt\n"
        );
        assert!(file_list(&files, true).contains("4096"));
    }
}
