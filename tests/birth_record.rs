//! The box's birth record through the real binary on the fixture trees: `tinyperf box
//! record` saves it, reads it back and names what changed in a copy of the tree; the
//! agent writes it at start and serves it on `GET /api/v1/box`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use common::{fixture_copy, tinyperf_exe, wait_for, Agent, AgentDirs, Bus};
use tinyperf::inventory::smbios;

/// The serial the red and green fixtures' baseboards carry.
const SERIAL: &str = "M80-F4012300561";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// `tinyperf box record --json` on `root`, keeping records under `state`.
fn box_record(root: &Path, state: &Path, save: bool) -> (Output, Value) {
    let mut command = Command::new(tinyperf_exe());
    command
        .args(["box", "record", "--json", "--no-bmc", "--root"])
        .arg(root)
        .arg("--state-dir")
        .arg(state);
    if save {
        command.arg("--save");
    }
    let out = command.output().unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, json)
}

fn messages(view: &Value) -> Vec<String> {
    view["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["message"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_fixture_box_round_trips_through_its_record() {
    let state = tempfile::tempdir().unwrap();
    let (out, first) = box_record(&fixture("tinybox-red"), state.path(), true);
    assert!(out.status.success(), "{out:?}");
    assert!(first["record"].is_null(), "no record before the first save");
    let file = state.path().join("box").join(format!("{SERIAL}.json"));
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        saved, first["current"],
        "the file holds the box as it was read"
    );

    let (out, second) = box_record(&fixture("tinybox-red"), state.path(), false);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(second["record"], saved, "read back equal");
    assert_eq!(messages(&second), Vec::<String>::new());

    let record = &second["record"];
    assert_eq!(record["baseboard_serial"], SERIAL);
    let firmware = &record["firmware"];
    assert_eq!(firmware["source"], "smbios");
    assert_eq!(firmware["smbios_version"], "3.3");
    assert_eq!(firmware["bios"]["version"], "P3.50");
    assert_eq!(firmware["system"]["product"], "ROMED8-2T");
    let dimms = firmware["dimms"].as_array().unwrap();
    assert_eq!(dimms.len(), 8);
    assert!(dimms.iter().all(|d| d["installed"] == true
        && d["size_bytes"] == 16u64 << 30
        && d["part_number"] == "M393A2K40DB3-CWE"
        && d["serial"].is_string()));
    let gpus = record["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 6);
    assert!(gpus
        .iter()
        .all(|g| g["vbios"].is_string() && g["serial"].is_string() && g["uuid"].is_string()));
    assert_eq!(record["nvme"].as_array().unwrap().len(), 4);
    assert_eq!(record["nvme"][0]["firmware"], "4B2QJXD7");
    assert_eq!(record["os"]["image_version"], "2025.06.1");
    assert!(record["bmc"].is_null());
    assert!(record["pci_devices"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["address"] == "0000:43:00.0" && d["link"]["speed"] == "16.0 GT/s"));
}

#[test]
fn a_swapped_gpu_is_named_with_both_serials() {
    let tree = fixture_copy("tinybox-red");
    let state = tempfile::tempdir().unwrap();
    let (out, first) = box_record(tree.path(), state.path(), true);
    assert!(out.status.success(), "{out:?}");
    let old = first["current"]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["address"] == "0000:43:00.0")
        .unwrap()["serial"]
        .as_str()
        .unwrap()
        .to_string();
    let gpu = std::fs::canonicalize(tree.path().join("sys/bus/pci/devices/0000:43:00.0")).unwrap();
    std::fs::write(gpu.join("serial_number"), "00c0ffee00c0ffee\n").unwrap();

    let (out, view) = box_record(tree.path(), state.path(), false);
    assert_eq!(out.status.code(), Some(1), "a change exits 1: {out:?}");
    assert_eq!(
        messages(&view),
        [format!("GPU 0000:43:00.0 serial {old} → 00c0ffee00c0ffee")]
    );
    let change = &view["changes"][0];
    assert_eq!(change["part"], "gpu");
    assert_eq!(change["was"], old.as_str());
    assert_eq!(change["now"], "00c0ffee00c0ffee");

    // The readable form says the same, under the record it compared with.
    let text = Command::new(tinyperf_exe())
        .args(["box", "record", "--no-bmc", "--root"])
        .arg(tree.path())
        .arg("--state-dir")
        .arg(state.path())
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("changed since the record (1):"), "{text}");
    assert!(text.contains(&format!("GPU 0000:43:00.0 serial {old} → 00c0ffee00c0ffee")));
}

/// Empties the slot `locator` in the tree's SMBIOS table, as firmware writes a slot
/// without a module: size 0, the rest left as it was.
fn empty_dimm_slot(root: &Path, locator: &str) {
    let path = root.join(smbios::TABLE_PATH);
    let mut table = std::fs::read(&path).unwrap();
    let at = {
        let structures = smbios::structures(&table, None).unwrap();
        let slot = structures
            .iter()
            .find(|s| s.kind == 17 && s.string(0x10).as_deref() == Some(locator))
            .unwrap_or_else(|| panic!("no DIMM {locator}"));
        slot.formatted.as_ptr() as usize - table.as_ptr() as usize
    };
    table[at + 0x0c..at + 0x0e].copy_from_slice(&0u16.to_le_bytes());
    std::fs::write(&path, table).unwrap();
}

#[test]
fn a_missing_dimm_is_named_with_what_it_was() {
    let tree = fixture_copy("tinybox-green");
    let state = tempfile::tempdir().unwrap();
    let (out, _) = box_record(tree.path(), state.path(), true);
    assert!(out.status.success(), "{out:?}");
    empty_dimm_slot(tree.path(), "DIMM_B1");

    let (out, view) = box_record(tree.path(), state.path(), false);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        messages(&view),
        ["DIMM DIMM_B1 missing (was Samsung M393A2K40DB3-CWE 16 GiB)"]
    );
    let slot = view["current"]["firmware"]["dimms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["locator"] == "DIMM_B1")
        .unwrap()
        .clone();
    assert_eq!(slot["installed"], false);
    assert!(slot["part_number"].is_null());

    // Saving takes the box as it is now: nothing has changed since.
    let (out, _) = box_record(tree.path(), state.path(), true);
    assert!(out.status.success());
    let (out, view) = box_record(tree.path(), state.path(), false);
    assert_eq!(out.status.code(), Some(0));
    assert!(messages(&view).is_empty());
}

#[test]
fn a_corrupt_table_is_a_note_and_the_box_is_still_recorded() {
    let tree = fixture_copy("tinybox-green");
    let state = tempfile::tempdir().unwrap();
    let table = tree.path().join(smbios::TABLE_PATH);
    let bytes = std::fs::read(&table).unwrap();
    // The end-of-table structure cut in its header.
    std::fs::write(&table, &bytes[..bytes.len() - 3]).unwrap();
    let (out, view) = box_record(tree.path(), state.path(), false);
    assert!(out.status.success(), "{out:?}");
    let current = &view["current"];
    assert_eq!(current["firmware"]["source"], "sysfs");
    assert!(current["firmware"]["dimms"].is_null());
    // sys/class/dmi/id still names the board.
    assert_eq!(current["baseboard_serial"], SERIAL);
    let notes = current["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .unwrap()
            .starts_with("SMBIOS tables not read (structure")),
        "{notes:?}"
    );
}

#[test]
fn the_agent_records_the_box_at_start_and_names_a_change_at_the_next() {
    let tree = fixture_copy("tinybox-green");
    let root = tree.path().to_str().unwrap().to_string();
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let mut agent = Agent::start_with_args(&bus, &dirs, &["--root", &root]);
    let view = wait_for(Duration::from_secs(30), "the box's record", || {
        let (code, view) = common::curl::curl_json(&[&agent.url("/api/v1/box")]);
        (code == 200).then_some(view)
    });
    assert_eq!(view["record"]["baseboard_serial"], SERIAL);
    assert_eq!(view["current"]["baseboard_serial"], SERIAL);
    assert_eq!(messages(&view), Vec::<String>::new());
    let file = dirs.state_dir().join("box").join(format!("{SERIAL}.json"));
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved, view["record"]);
    let (_, page) = common::curl::curl(&[&agent.url("/")]);
    assert!(page.contains("<section id=\"box-record\">"), "{page}");
    assert!(page.contains(SERIAL));
    agent.stop();

    // A GPU's UUID changes while the agent is down: the next start names it.
    let info = tree
        .path()
        .join("proc/driver/nvidia/gpus/0000:41:00.0/information");
    let text = std::fs::read_to_string(&info).unwrap();
    let old = text
        .lines()
        .find_map(|l| l.strip_prefix("GPU UUID:"))
        .unwrap()
        .trim()
        .to_string();
    std::fs::write(
        &info,
        text.replace(&old, "GPU-00000000-1111-2222-3333-444444444444"),
    )
    .unwrap();
    let mut agent = Agent::start_with_args(&bus, &dirs, &["--root", &root]);
    let expected =
        format!("GPU 0000:41:00.0 UUID {old} → GPU-00000000-1111-2222-3333-444444444444");
    let view = wait_for(Duration::from_secs(30), "the change", || {
        let (code, view) = common::curl::curl_json(&[&agent.url("/api/v1/box")]);
        (code == 200 && !messages(&view).is_empty()).then_some(view)
    });
    assert_eq!(messages(&view), [expected.as_str()]);
    let (_, page) = common::curl::curl(&[&agent.url("/")]);
    assert!(page.contains(&expected), "{page}");
    let log = agent.stop();
    assert!(
        log.contains("the box changed since its record") && log.contains(&old),
        "{log}"
    );
    // The record is not rewritten at start: only a passed burn-in does that.
    let still: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(still, saved);
}
