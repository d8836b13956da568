//! MLLOG and system description output, checked by MLCommons' own checkers
//! (mlperf-logging from PyPI, through scripts/mlperf-check.sh). Without PyPI these
//! tests fail: they never skip.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use tinyperf::engine::mllog::{
    drop_page_cache_via, evict_from_page_cache, keys, CacheFlush, Division, MlLog, MlLogError,
    RunConfig, RunStatus, Submission, SUBMITTER,
};
use tinyperf::mlperf::system_desc::{submission_platform, system_description, SoftwareStack};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `scripts/mlperf-check.sh KIND FILE`: whether it passed, and what it printed.
fn mlperf_check(kind: &str, file: &Path) -> (bool, String) {
    let output = Command::new(repo_root().join("scripts/mlperf-check.sh"))
        .arg(kind)
        .arg(file)
        .output()
        .expect("run scripts/mlperf-check.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !text.contains("cannot install") && !text.contains("cannot create a virtual environment"),
        "the checker could not be installed (PyPI is needed):\n{text}"
    );
    (output.status.success(), text)
}

fn venv_python() -> String {
    let output = Command::new(repo_root().join("scripts/mlperf-check.sh"))
        .arg("python")
        .output()
        .expect("run scripts/mlperf-check.sh python");
    assert!(
        output.status.success(),
        "no checker environment:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A shortened run of the recipe: 6 planned epochs, an evaluation after every epoch,
/// and a stop at the first evaluation at or above the target (epoch 4 here).
fn shortened_config() -> RunConfig {
    RunConfig {
        seed: 1234,
        global_batch_size: 256,
        train_samples: 12_800,
        eval_samples: 2_000,
        gradient_accumulation_steps: 1,
        base_learning_rate: 1.2,
        end_learning_rate: 1e-4,
        warmup_epochs: 1.0,
        decay_steps: 6,
        poly_power: 2.0,
        momentum: 0.9,
        weight_decay: 5e-5,
        epsilon: 0.0,
        bn_span: 256,
    }
}

const ACCURACIES: [f64; 6] = [0.31, 0.55, 0.71, 0.7702, 0.79, 0.80];

/// Writes a complete log the way a training loop does; returns the epochs it ran.
fn simulate_run(path: &Path, accuracies: &[f64], target: f64) -> u32 {
    let scratch = tempfile::tempdir().expect("tempdir");
    let control = scratch.path().join("drop_caches");
    std::fs::write(&control, "").expect("control file");

    let mut log = MlLog::create(path).expect("create the log");
    log.submission(&Submission::resnet(SUBMITTER, "tinybox_green"))
        .expect("submission");
    log.cache_clear(drop_page_cache_via(&control, true).flushed())
        .expect("cache_clear");
    log.init_start().expect("init_start");
    log.init_stop().expect("init_stop");
    log.run_start().expect("run_start");
    log.run_header(&shortened_config()).expect("run_header");
    let mut status = RunStatus::Aborted;
    let mut epochs = 0;
    for (index, accuracy) in accuracies.iter().enumerate() {
        let epoch = index as u32 + 1;
        epochs = epoch;
        log.block_start(epoch, 1).expect("block_start");
        log.epoch_start(epoch).expect("epoch_start");
        log.throughput(epoch, 512.5).expect("throughput");
        log.epoch_stop(epoch).expect("epoch_stop");
        log.eval_start(epoch).expect("eval_start");
        log.eval_accuracy(epoch, *accuracy).expect("eval_accuracy");
        log.eval_stop(epoch).expect("eval_stop");
        log.block_stop(epoch).expect("block_stop");
        if *accuracy >= target {
            status = RunStatus::Success;
            break;
        }
    }
    log.run_stop(status).expect("run_stop");
    epochs
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("read the log")
        .lines()
        .map(|line| {
            let json = line
                .strip_prefix(":::MLLOG ")
                .unwrap_or_else(|| panic!("not an MLLOG line: {line}"));
            serde_json::from_str(json).unwrap_or_else(|e| panic!("bad JSON ({e}): {line}"))
        })
        .collect()
}

#[test]
fn a_shortened_run_passes_the_compliance_checker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mllog.txt");
    let epochs = simulate_run(&path, &ACCURACIES, 0.759);
    assert_eq!(epochs, 4, "the run stops at the first evaluation on target");

    let events = lines(&path);
    let keys_logged: Vec<&str> = events.iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(keys_logged.first(), Some(&keys::SUBMISSION_ORG));
    assert_eq!(keys_logged.last(), Some(&keys::RUN_STOP));
    assert_eq!(events.last().unwrap()["metadata"]["status"], "success");
    for event in &events {
        assert_eq!(event["metadata"]["file"], "tests/mllog.rs", "{event}");
        assert!(event["metadata"]["lineno"].as_u64().unwrap() > 0);
    }
    let accuracy = events.iter().find(|e| e["key"] == "eval_accuracy").unwrap();
    assert_eq!(accuracy["metadata"]["epoch_num"], 1);
    assert_eq!(accuracy["event_type"], "POINT_IN_TIME");

    let (passed, output) = mlperf_check("compliance", &path);
    assert!(passed, "the compliance checker rejected the log:\n{output}");
    assert!(output.contains("SUCCESS"), "{output}");
    assert!(output.contains("closed_resnet_lars.yaml"), "{output}");
}

#[test]
fn lines_are_byte_identical_to_the_python_library() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mllog.txt");
    simulate_run(&path, &ACCURACIES, 0.759);
    let mut log = std::fs::read_to_string(&path).unwrap();
    // Values a run does not produce, to cover the encoder's corners.
    let event = tinyperf::engine::mllog::Event {
        namespace: "GPU0".into(),
        time_ms: 1715318457308,
        event_type: tinyperf::engine::mllog::EventType::PointInTime,
        key: "weird \"key\" é😀\u{1}".into(),
        value: tinyperf::engine::mllog::LogValue::Object(vec![
            ("tiny".into(), 1e-5.into()),
            ("huge".into(), 1.5e16.into()),
            ("third".into(), (1.0f64 / 3.0).into()),
            ("nan".into(), f64::NAN.into()),
            ("flag".into(), false.into()),
            ("nothing".into(), tinyperf::engine::mllog::LogValue::Null),
            ("neg".into(), tinyperf::engine::mllog::LogValue::Int(-7)),
        ]),
        metadata: vec![
            ("file".into(), "x.rs".into()),
            ("lineno".into(), 3u32.into()),
        ],
    };
    log.push_str(&tinyperf::engine::mllog::encode_line(&event));
    log.push('\n');
    let ours = dir.path().join("ours.txt");
    std::fs::write(&ours, &log).unwrap();

    let script = r#"
import json, sys
from mlperf_logging.mllog import mllog
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.rstrip("\n")
    d = json.loads(line[len(":::MLLOG "):])
    again = mllog._encode_log(d["namespace"], d["time_ms"], d["event_type"], d["key"], d["value"], d["metadata"])
    if again != line:
        print("DIFFERS\n ours:   " + line + "\n python: " + again)
        sys.exit(1)
print("IDENTICAL")
"#;
    let output = Command::new(venv_python())
        .arg("-c")
        .arg(script)
        .arg(&ours)
        .output()
        .expect("run python");
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && text.contains("IDENTICAL"),
        "{text}"
    );
}

#[test]
fn a_log_missing_a_required_key_fails_the_checker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let full = dir.path().join("full.txt");
    simulate_run(&full, &ACCURACIES, 0.759);
    let text = std::fs::read_to_string(&full).unwrap();
    let without: String = text
        .lines()
        .filter(|l| !l.contains("\"key\": \"lars_opt_weight_decay\""))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(without.lines().count() + 1, text.lines().count());
    let broken = dir.path().join("broken.txt");
    std::fs::write(&broken, without).unwrap();

    let (passed, output) = mlperf_check("compliance", &broken);
    assert!(
        !passed,
        "a log without lars_opt_weight_decay passed:\n{output}"
    );
    assert!(output.contains("lars_opt_weight_decay"), "{output}");
}

#[test]
fn a_run_that_never_reaches_the_target_fails_the_checker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mllog.txt");
    let epochs = simulate_run(&path, &ACCURACIES[..3], 0.759);
    assert_eq!(epochs, 3);
    let events = lines(&path);
    assert_eq!(events.last().unwrap()["metadata"]["status"], "aborted");
    let (passed, output) = mlperf_check("compliance", &path);
    assert!(!passed, "a run below the target passed:\n{output}");
}

#[test]
fn an_unwritable_log_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no/such/dir/mllog.txt");
    let err = MlLog::create(&missing).expect_err("no directory");
    assert!(matches!(err, MlLogError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("no/such/dir/mllog.txt"), "{err}");

    let err = MlLog::create(dir.path()).expect_err("a directory is no file");
    assert!(
        err.to_string().contains("cannot open the MLLOG file"),
        "{err}"
    );

    // /dev/full opens, then refuses every write with ENOSPC.
    let mut log = MlLog::create(Path::new("/dev/full")).expect("open /dev/full");
    let err = log
        .submission(&Submission::resnet(SUBMITTER, "tinybox_green"))
        .expect_err("the device is full");
    match &err {
        MlLogError::Write { key, .. } => assert_eq!(key, keys::SUBMISSION_ORG),
        other => panic!("expected a write error, got {other:?}"),
    }
    assert!(err.to_string().contains("/dev/full"), "{err}");
}

#[test]
fn calls_out_of_turn_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mllog.txt");
    let mut log = MlLog::create(&path).expect("create");
    assert!(matches!(
        log.init_start(),
        Err(MlLogError::OutOfOrder { .. })
    ));
    log.submission(&Submission::resnet(SUBMITTER, "tinybox_red"))
        .unwrap();
    assert!(log
        .submission(&Submission::resnet(SUBMITTER, "tinybox_red"))
        .is_err());
    log.init_start().unwrap();
    let err = log.run_start().expect_err("run_start before init_stop");
    assert!(err.to_string().contains("after init_stop"), "{err}");
    log.init_stop().unwrap();
    let err = log.run_start().expect_err("run_start before cache_clear");
    assert!(err.to_string().contains("cache_clear"), "{err}");
    log.cache_clear(false).unwrap();
    log.run_start().unwrap();
    assert!(log.epoch_start(1).is_err(), "epochs need the header first");

    let mut off_recipe = shortened_config();
    off_recipe.end_learning_rate = 1e-3;
    let err = log.run_header(&off_recipe).expect_err("closed division");
    assert!(matches!(err, MlLogError::NotClosedDivision(_)), "{err:?}");
    assert!(
        err.to_string().contains("lars_opt_end_learning_rate"),
        "{err}"
    );
    let mut broken = shortened_config();
    broken.global_batch_size = 0;
    assert!(matches!(
        log.run_header(&broken),
        Err(MlLogError::InvalidConfig(_))
    ));

    log.run_header(&shortened_config()).unwrap();
    assert!(log.epoch_start(0).is_err(), "epochs count from 1");
    log.epoch_start(1).unwrap();
    assert!(log.epoch_stop(2).is_err());
    log.epoch_stop(1).unwrap();
    assert!(log.epoch_start(1).is_err(), "epoch 1 again");
    assert!(
        log.eval_accuracy(1, 0.5).is_err(),
        "accuracy outside an eval"
    );
    log.eval_start(1).unwrap();
    let err = log.eval_accuracy(1, 75.9).expect_err("a percentage");
    assert!(err.to_string().contains("fraction"), "{err}");

    let logged: Vec<String> = lines(&path)
        .iter()
        .map(|e| e["key"].as_str().unwrap().to_string())
        .collect();
    let expected_tail = ["model_bn_span", "epoch_start", "epoch_stop", "eval_start"];
    assert_eq!(&logged[logged.len() - 4..], expected_tail);
    assert_eq!(logged.iter().filter(|k| *k == "seed").count(), 1);
    assert_eq!(logged.iter().filter(|k| *k == "submission_org").count(), 1);
    assert_eq!(logged.iter().filter(|k| *k == "run_start").count(), 1);
}

#[test]
fn an_unfinished_run_is_logged_as_aborted_when_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mllog.txt");
    {
        let mut log = MlLog::create(&path).unwrap();
        log.submission(&Submission::resnet(SUBMITTER, "tinybox_green"))
            .unwrap();
        log.cache_clear(false).unwrap();
        log.init_start().unwrap();
        log.init_stop().unwrap();
        log.run_start().unwrap();
        log.run_header(&shortened_config()).unwrap();
        log.epoch_start(1).unwrap();
    }
    let events = lines(&path);
    let last = events.last().unwrap();
    assert_eq!(last["key"], "run_stop");
    assert_eq!(last["metadata"]["status"], "aborted");
    assert_eq!(events.iter().filter(|e| e["key"] == "run_stop").count(), 1);
}

#[test]
fn the_page_cache_is_dropped_only_when_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let control = dir.path().join("drop_caches");
    std::fs::write(&control, "").unwrap();
    assert_eq!(drop_page_cache_via(&control, true), CacheFlush::Dropped);
    assert_eq!(std::fs::read_to_string(&control).unwrap(), "3\n");
    assert!(CacheFlush::Dropped.flushed());

    std::fs::write(&control, "").unwrap();
    let refused = drop_page_cache_via(&control, false);
    assert_eq!(refused, CacheFlush::NotRoot);
    assert!(!refused.flushed());
    assert_eq!(std::fs::read_to_string(&control).unwrap(), "");

    let failed = drop_page_cache_via(&dir.path().join("missing/drop_caches"), true);
    match &failed {
        CacheFlush::Failed(why) => assert!(why.contains("missing/drop_caches"), "{why}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(!failed.flushed());
}

#[test]
fn the_datasets_files_are_evicted_from_the_page_cache_without_root() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files: Vec<_> = (0..3)
        .map(|i| {
            let path = dir.path().join(format!("{i}.JPEG"));
            std::fs::write(&path, vec![i as u8; 64 * 1024]).unwrap();
            path
        })
        .collect();
    let evicted = evict_from_page_cache(files.iter().map(|p| p.as_path()).collect());
    assert_eq!(evicted, CacheFlush::Evicted { files: 3 });
    assert!(evicted.flushed());
    assert!(
        evicted.describe().contains("3 files evicted"),
        "{}",
        evicted.describe()
    );

    let missing = dir.path().join("gone.JPEG");
    let failed = evict_from_page_cache(vec![files[0].as_path(), missing.as_path()]);
    assert!(!failed.flushed());
    match &failed {
        CacheFlush::Failed(why) => {
            assert!(
                why.contains("1 of 2 files") && why.contains("gone.JPEG"),
                "{why}"
            )
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// What the inventory reports for a tinybox green (the shape `tinyperf detect --json` prints).
fn tinybox_green_inventory() -> Value {
    let gpu = |bus: u32| {
        json!({
            "address": format!("0000:{bus:02x}:00.0"),
            "vendor": "nvidia",
            "pci_id": "10de:2684",
            "model": "GeForce RTX 4090",
            "known_model": true,
            "driver": "nvidia",
            "driver_version": "550.54.15",
            "vram_bytes": 25_757_220_864u64,
            "vram_source": "bar",
            "link": {"current_speed_gts": 2.5, "current_width": 16, "max_speed_gts": 16.0, "max_width": 16},
            "path_link": {"speed_gts": 2.5, "width": 16, "capable_speed_gts": 16.0, "limited_at": null},
            "resizable_bar": {"state": "on", "basis": "BAR1 is 32 GiB, covering 24 GiB of VRAM"},
            "numa_node": 0
        })
    };
    let nvme = |n: u32| {
        json!({
            "name": format!("nvme{n}"),
            "address": format!("0000:4{n}:00.0"),
            "transport": "pcie",
            "model": "Samsung SSD 990 PRO 1TB",
            "serial": format!("S6Z{n}"),
            "firmware": "4B2QJXD7",
            "link": {"speed_gts": 16.0, "width": 4, "capable_speed_gts": 16.0, "limited_at": null}
        })
    };
    json!({
        "sku": "tinybox-green",
        "sku_source": "recognised",
        "sku_title": "tinybox green: 6× GeForce RTX 4090",
        "verdict": "pass",
        "checks": [],
        "findings": [],
        "gpus": [gpu(0x01), gpu(0x21), gpu(0x41), gpu(0x61), gpu(0x81), gpu(0xc1)],
        "host": {
            "hostname": "tinybox",
            "cpu_model": "AMD EPYC 7532 32-Core Processor",
            "cpu_sockets": 1,
            "cpu_cores": 32,
            "cpu_threads": 64,
            "memory_bytes": 135_007_608_832u64,
            "kernel": "6.5.0-35-generic",
            "board": {"system_vendor": "ASRock Rack", "product_name": null, "board_vendor": "ASRockRack", "board_name": "ROMED8-2T", "board_serial": null, "bios_version": "L3.45"}
        },
        "nvme": [nvme(1), nvme(2), nvme(3), nvme(4)],
        "pci_devices": [],
        "runtime": {
            "cuda": {"loaded": true, "driver_version": "12.4", "devices": [], "finding": null},
            "hip": {"loaded": false, "driver_version": null, "devices": [], "finding": "HIP runtime library not found"},
            "nvml": {"loaded": true, "driver_version": "550.54.15", "devices": [], "finding": null}
        },
        "root": "/"
    })
}

#[test]
fn a_tinybox_green_system_description_passes_the_checker() {
    let inventory = tinybox_green_inventory();
    let platform = submission_platform(&inventory);
    assert_eq!(platform, "tinybox_green");
    let software = SoftwareStack::new("Ubuntu 22.04.4 LTS".into());
    let desc = system_description(
        &inventory,
        &platform,
        SUBMITTER,
        &software,
        Division::Closed,
    );

    assert_eq!(desc["submitter"], "tinycorp");
    assert_eq!(desc["division"], "closed");
    assert_eq!(desc["status"], "Available on-premise");
    assert_eq!(desc["system_name"], "tinybox_green");
    assert_eq!(desc["accelerators_per_node"], "6");
    assert_eq!(desc["accelerator_model_name"], "NVIDIA GeForce RTX 4090");
    assert_eq!(desc["accelerator_host_interconnect"], "PCIe 4.0 x16");
    assert_eq!(desc["accelerator_memory_capacity"], "24 GB");
    assert_eq!(desc["accelerator_memory_configuration"], "GDDR6X");
    assert_eq!(
        desc["host_processor_model_name"],
        "AMD EPYC 7532 32-Core Processor"
    );
    assert_eq!(desc["host_processors_per_node"], "1");
    assert_eq!(desc["host_processor_core_count"], "32");
    assert_eq!(desc["host_processor_vcpu_count"], "64");
    assert_eq!(desc["host_memory_capacity"], "128 GB");
    assert_eq!(desc["host_storage_type"], "NVMe SSD");
    assert_eq!(desc["cooling"], "air");
    assert_eq!(desc["operating_system"], "Ubuntu 22.04.4 LTS");
    assert_eq!(
        desc["framework"],
        format!("tinyperf {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(desc["other_software_stack"]["nvidia driver"], "550.54.15");
    assert_eq!(desc["other_software_stack"]["CUDA driver"], "12.4");
    assert!(desc["hw_notes"]
        .as_str()
        .unwrap()
        .contains("4x Samsung SSD 990 PRO 1TB"));

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tinybox_green.json");
    std::fs::write(&path, serde_json::to_string_pretty(&desc).unwrap()).unwrap();
    let (passed, output) = mlperf_check("system-desc", &path);
    assert!(
        passed,
        "the system description checker rejected it:\n{output}"
    );

    // The check is real: without one required field it fails.
    let mut incomplete = desc.clone();
    incomplete
        .as_object_mut()
        .unwrap()
        .remove("host_processor_vcpu_count");
    std::fs::write(&path, serde_json::to_string_pretty(&incomplete).unwrap()).unwrap();
    let (passed, output) = mlperf_check("system-desc", &path);
    assert!(
        !passed,
        "a description without host_processor_vcpu_count passed:\n{output}"
    );
    assert!(output.contains("host_processor_vcpu_count"), "{output}");
}

#[test]
fn this_machine_system_description_passes_the_checker() {
    let output = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["detect", "--json", "--no-runtime"])
        .output()
        .expect("run tinyperf detect --json");
    let inventory: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "tinyperf detect --json printed no JSON ({e}):\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let platform = submission_platform(&inventory);
    assert!(!platform.is_empty());
    let software = SoftwareStack::of_this_system();
    assert!(
        !software.operating_system.is_empty(),
        "/etc/os-release names no system"
    );
    let desc = system_description(
        &inventory,
        &platform,
        "example-lab",
        &software,
        Division::Open,
    );
    assert_eq!(desc["submitter"], "example-lab");
    assert_eq!(desc["system_name"], platform.as_str());
    assert_eq!(desc["division"], "open");

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("system.json");
    std::fs::write(&path, serde_json::to_string_pretty(&desc).unwrap()).unwrap();
    let (passed, output) = mlperf_check("system-desc", &path);
    assert!(
        passed,
        "the system description checker rejected it:\n{output}"
    );
}
