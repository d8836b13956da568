//! The modules' imports follow the one-way flow inventory → plan → worker → events →
//! store → D-Bus/HTTP: nothing reaches up into a layer that uses it.

use std::path::Path;

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((
                path.display().to_string(),
                std::fs::read_to_string(&path).unwrap(),
            ));
        }
    }
    out
}

fn assert_no_imports(module: &str, forbidden: &[&str]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(module);
    for (path, text) in sources(&dir) {
        for layer in forbidden {
            let needle = format!("crate::{layer}::");
            let bare = format!("crate::{layer};");
            assert!(
                !text.contains(&needle) && !text.contains(&bare),
                "{path} imports from {layer}, a layer above {module}"
            );
        }
    }
}

#[test]
fn the_record_layer_imports_no_other_layer() {
    assert_no_imports(
        "record",
        &[
            "agent",
            "api",
            "suite",
            "inventory",
            "runtime",
            "engine",
            "cli",
        ],
    );
}

#[test]
fn suites_inventory_runtime_and_engine_never_reach_the_daemon() {
    for module in ["suite", "inventory", "runtime", "engine"] {
        assert_no_imports(module, &["agent", "api"]);
    }
}

#[test]
fn the_daemon_never_reaches_its_front_ends() {
    assert_no_imports("agent", &["api"]);
}
