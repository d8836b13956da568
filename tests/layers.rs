//! The modules' imports follow the one-way flow of the design: `cli` → `api` → `agent`
//! → `update`, `suite` → `mlperf`, `engine` → `inventory`, `runtime` → `record`. A
//! module imports only from layers below it; nothing reaches up into a layer that uses
//! it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((path, text));
        }
    }
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The text of `text` without its comments, so that a doc comment naming a layer is
/// not read as an import of it.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths below the crate root that `text` names, as `a::b` (`crate::a::b::C` gives
/// `a::b::C`, `crate::{a, b::c}` gives `a` and `b::c`).
fn crate_paths(text: &str) -> Vec<String> {
    let code = code_of(text);
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let item: String = item.split_whitespace().collect();
                if !item.is_empty() {
                    out.push(item);
                }
            }
        } else {
            let path: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(path.trim_end_matches(':').to_string());
        }
    }
    out
}

/// Each file under `src/<module>` with the crate paths it names that start with one of
/// the `forbidden` layers.
fn reaches(module: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in sources(&src().join(module)) {
        for named in crate_paths(&text) {
            let layer = named.split("::").next().unwrap_or_default();
            if forbidden.contains(&layer) {
                found.push(format!(
                    "{} names crate::{named}",
                    path.strip_prefix(src()).unwrap().display()
                ));
            }
        }
    }
    found
}

fn assert_never(module: &str, forbidden: &[&str]) {
    let found = reaches(module, forbidden);
    assert!(
        found.is_empty(),
        "{module} reaches up into a layer above it:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_record_layer_imports_no_other_layer() {
    assert_never(
        "record",
        &[
            "runtime",
            "inventory",
            "engine",
            "mlperf",
            "suite",
            "agent",
            "api",
            "cli",
        ],
    );
}

#[test]
fn runtime_and_inventory_never_import_engine_suite_agent_or_api() {
    for module in ["runtime", "inventory"] {
        assert_never(
            module,
            &["engine", "mlperf", "suite", "agent", "api", "cli"],
        );
    }
}

#[test]
fn update_never_imports_the_daemon_its_front_ends_or_the_layers_beside_it() {
    assert_never(
        "update",
        &["engine", "mlperf", "suite", "agent", "api", "cli"],
    );
    for module in [
        "suite",
        "mlperf",
        "engine",
        "inventory",
        "runtime",
        "record",
    ] {
        assert_never(module, &["update"]);
    }
}

#[test]
fn the_engine_never_imports_the_suites_or_the_daemon() {
    assert_never("engine", &["mlperf", "suite", "agent", "api", "cli"]);
}

#[test]
fn mlperf_never_imports_suite_agent_api_or_cli() {
    assert_never("mlperf", &["suite", "agent", "api", "cli"]);
}

#[test]
fn suite_never_imports_cli_or_the_daemon() {
    assert_never("suite", &["cli", "agent", "api"]);
}

#[test]
fn the_agent_never_imports_the_engine_or_its_front_ends() {
    assert_never("agent", &["engine", "api", "cli"]);
}

#[test]
fn the_front_ends_never_import_the_engine() {
    assert_never("api", &["engine", "cli"]);
}

/// What `api` may use of `suite`: the event and option vocabulary and the epoch log's
/// format, never a stage, the runner or the worker.
const SUITE_SEEN_BY_API: &[&str] = &[
    "event",
    "options",
    "option_schema",
    "epoch_log",
    "SUITES",
    "is_known_suite",
];

#[test]
fn the_front_ends_never_import_the_suites_stages() {
    let mut found = Vec::new();
    for (path, text) in sources(&src().join("api")) {
        for named in crate_paths(&text) {
            let mut parts = named.split("::");
            if parts.next() != Some("suite") {
                continue;
            }
            let used = parts.next().unwrap_or_default();
            if !SUITE_SEEN_BY_API.contains(&used) {
                found.push(format!(
                    "{} names crate::{named}",
                    path.strip_prefix(src()).unwrap().display()
                ));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// For each module of the agent, the agent modules it imports (`super::x`).
fn agent_imports() -> BTreeMap<String, BTreeSet<String>> {
    let dir = src().join("agent");
    let modules: BTreeSet<String> = sources(&dir)
        .iter()
        .filter_map(|(p, _)| Some(p.file_stem()?.to_str()?.to_string()))
        .filter(|m| m != "mod")
        .collect();
    let mut graph = BTreeMap::new();
    for (path, text) in sources(&dir) {
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        if name == "mod" {
            continue;
        }
        let code = code_of(&text);
        // Unit tests inside a module see its parent through `super::*`; they are not
        // the module's imports.
        let code = code.split("#[cfg(test)]").next().unwrap_or_default();
        let mut uses = BTreeSet::new();
        for (at, _) in code.match_indices("super::") {
            let rest = &code[at + "super::".len()..];
            let names: Vec<String> = match rest.strip_prefix('{') {
                Some(group) => group[..group.find('}').unwrap_or(group.len())]
                    .split(',')
                    .map(|s| s.trim().split("::").next().unwrap_or_default().to_string())
                    .collect(),
                None => vec![rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect()],
            };
            uses.extend(names.into_iter().filter(|n| modules.contains(n)));
        }
        uses.remove(&name);
        graph.insert(name, uses);
    }
    graph
}

#[test]
fn the_agents_modules_import_each_other_without_circles() {
    let graph = agent_imports();
    // Depth-first search for a path back to where it started.
    fn cycle_from(
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        let last = path.last().unwrap().clone();
        for next in graph.get(&last).into_iter().flatten() {
            if *next == path[0] {
                let mut cycle = path.clone();
                cycle.push(next.clone());
                return Some(cycle);
            }
            if !path.contains(next) {
                path.push(next.clone());
                if let Some(cycle) = cycle_from(graph, path) {
                    return Some(cycle);
                }
                path.pop();
            }
        }
        None
    }
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, &mut vec![module.clone()]) {
            panic!(
                "agent modules import each other in a circle: {}",
                cycle.join(" → ")
            );
        }
    }
}

#[test]
fn only_the_agents_root_knows_the_supervisor() {
    let graph = agent_imports();
    let knowing: Vec<&String> = graph
        .iter()
        .filter(|(_, uses)| uses.contains("supervisor"))
        .map(|(m, _)| m)
        .collect();
    assert!(knowing.is_empty(), "{knowing:?} import the supervisor");
    for (module, others) in [
        ("handle", ["worker", "supervisor"]),
        ("worker", ["handle", "events"]),
        ("events", ["handle", "worker"]),
    ] {
        for other in others {
            assert!(
                !graph[module].contains(other),
                "agent/{module}.rs imports agent/{other}.rs"
            );
        }
    }
}

#[test]
fn the_import_reader_sees_grouped_and_plain_paths() {
    let text = "use crate::{agent, suite::plan};\n// crate::cli is only named here\nuse crate::engine::Tensor;";
    assert_eq!(
        crate_paths(text),
        ["agent", "suite::plan", "engine::Tensor"]
    );
}
