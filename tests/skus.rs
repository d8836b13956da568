//! The boxes sold today, each recognised from its sysfs/procfs tree (tests/fixtures,
//! written by tests/fixtures/generate.py) with its checks, and the GPU stacks their images
//! can carry that cannot drive their GPUs: each a finding that names the version needed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// `tinyperf detect --json --no-runtime` under `root`, with its exit status.
fn detect_root(root: &Path, extra: &[&str]) -> (Value, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["detect", "--json", "--no-runtime", "--root"])
        .arg(root)
        .args(extra)
        .output()
        .expect("tinyperf runs");
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: output is not JSON ({e}): {}",
            root.display(),
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (report, out.status.code().expect("exit status"))
}

fn detect(name: &str, extra: &[&str]) -> (Value, i32) {
    detect_root(&fixture(name), extra)
}

fn failed_checks(report: &Value) -> Vec<(String, String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "fail")
        .map(|c| {
            let text = |key: &str| c[key].as_str().unwrap_or("").to_string();
            (text("name"), text("expected"), text("found"))
        })
        .collect()
}

fn findings(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

fn gpu_addresses(report: &Value) -> Vec<String> {
    report["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["address"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn each_box_sold_today_is_recognised_with_every_check_passing() {
    for (name, title, gpus, model, cores) in [
        (
            "tinybox-green-v2",
            "tinybox green v2: 4× GeForce RTX 5090",
            4,
            "GeForce RTX 5090",
            32,
        ),
        (
            "tinybox-red-v2",
            "tinybox red v2: 4× Radeon RX 9070 XT",
            4,
            "Radeon RX 9070 XT",
            32,
        ),
        (
            "tinybox-pro",
            "tinybox pro v2: 8× GeForce RTX 5090",
            8,
            "GeForce RTX 5090",
            64,
        ),
    ] {
        let (report, code) = detect(name, &[]);
        assert_eq!(code, 0, "{name}: {:?}", failed_checks(&report));
        assert_eq!(report["sku"], name);
        assert_eq!(report["sku_source"], "recognised");
        assert_eq!(report["sku_title"], title);
        assert_eq!(report["verdict"], "pass");
        let found = report["gpus"].as_array().unwrap();
        assert_eq!(found.len(), gpus, "{name}");
        assert!(found.iter().all(|g| g["model"] == model), "{name}");
        // Count, then model, link and Resizable BAR per GPU, memory, cores, NVMe count
        // and a link per drive.
        assert_eq!(
            report["checks"].as_array().unwrap().len(),
            1 + 3 * gpus + 3 + 4,
            "{name}"
        );
        assert_eq!(report["host"]["cpu_cores"], cores, "{name}");
        assert!(
            findings(&report).is_empty(),
            "{name}: {:?}",
            findings(&report)
        );
    }
}

#[test]
fn the_red_v2s_cards_are_9070_xts_by_their_revision_with_16_gib() {
    let (report, _) = detect("tinybox-red-v2", &[]);
    for gpu in report["gpus"].as_array().unwrap() {
        assert_eq!(gpu["pci_id"], "1002:7550");
        assert_eq!(gpu["vram_bytes"], 17_163_091_968u64);
        assert_eq!(gpu["driver"], "amdgpu");
        assert_eq!(gpu["resizable_bar"]["state"], "on");
    }
    let kfd = fixture("tinybox-red-v2").join("sys/class/kfd/kfd/topology/nodes/1/properties");
    let properties = std::fs::read_to_string(kfd).unwrap();
    assert!(
        properties.contains("gfx_target_version 120001\n"),
        "{properties}"
    );
}

#[test]
fn the_pros_gpus_hang_off_both_sockets() {
    let (report, _) = detect("tinybox-pro", &[]);
    assert_eq!(report["host"]["cpu_sockets"], 2);
    assert_eq!(report["host"]["cpu_threads"], 128);
    let nodes: Vec<u64> = report["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["numa_node"].as_u64().unwrap())
        .collect();
    assert_eq!(nodes, [0, 0, 0, 0, 1, 1, 1, 1]);
    assert!(report["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .all(|g| g["path_link"]["speed_gts"] == 32.0 && g["path_link"]["width"] == 16));
}

#[test]
fn a_pro_with_a_gpu_missing_is_still_a_pro_and_fails_its_count() {
    let (report, code) = detect("pro-gpu-missing", &[]);
    assert_eq!(code, 1);
    assert_eq!(report["sku"], "tinybox-pro");
    assert_eq!(report["sku_source"], "recognised");
    assert_eq!(
        failed_checks(&report),
        [("gpu_count".into(), "8".into(), "7".into())]
    );
    assert!(!gpu_addresses(&report).contains(&"0000:c2:00.0".to_string()));
}

#[test]
fn the_old_and_the_sellers_names_judge_the_box_as_the_new_sku() {
    let (report, code) = detect("tinybox-green-v2", &["--sku", "tinybox-5090"]);
    assert_eq!(code, 0);
    assert_eq!(report["sku"], "tinybox-green-v2");
    assert_eq!(report["sku_source"], "configured");
    let (report, code) = detect("tinybox-pro", &["--sku", "tinybox-pro-v2"]);
    assert_eq!(code, 0);
    assert_eq!(report["sku"], "tinybox-pro");
    // A green v2 judged as a pro: four GPUs short, and the pro's host.
    let (report, code) = detect("tinybox-green-v2", &["--sku", "tinybox-pro"]);
    assert_eq!(code, 1);
    let failed: Vec<String> = failed_checks(&report).into_iter().map(|c| c.0).collect();
    assert_eq!(failed, ["gpu_count", "memory", "cpu_cores"]);
}

#[test]
fn a_5090_under_the_proprietary_550_driver_names_the_driver_it_needs() {
    let (report, code) = detect("green-v2-proprietary-550", &[]);
    // The hardware is sound; the image's driver is what cannot drive it.
    assert_eq!(code, 0);
    assert_eq!(report["sku"], "tinybox-green-v2");
    let findings = findings(&report);
    assert_eq!(findings.len(), 4, "{findings:?}");
    for (finding, address) in findings.iter().zip(gpu_addresses(&report)) {
        assert_eq!(
            finding,
            &format!(
                "GPU {address}: GeForce RTX 5090 needs NVIDIA driver 570 or later, with the \
                 open kernel modules (CUDA 12.8); this system has driver 550.120 with the \
                 proprietary kernel module"
            )
        );
    }
}

/// A copy of the green v2 whose `/proc/driver/nvidia/version` is `version_line`.
fn green_v2_with_driver(version_line: &str) -> tempfile::TempDir {
    let dir = common::fixture_copy("tinybox-green-v2");
    std::fs::write(
        dir.path().join("proc/driver/nvidia/version"),
        format!(
            "{version_line}\nGCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n"
        ),
    )
    .unwrap();
    dir
}

#[test]
fn a_5090_on_the_proprietary_module_is_a_finding_even_on_a_new_enough_branch() {
    let dir = green_v2_with_driver(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.04  Thu Feb 27 18:37:40 UTC 2025",
    );
    let (report, code) = detect_root(dir.path(), &[]);
    assert_eq!(code, 0);
    let findings = findings(&report);
    assert_eq!(findings.len(), 4, "{findings:?}");
    assert!(
        findings[0].ends_with(
            "needs NVIDIA driver 570 or later, with the open kernel modules (CUDA 12.8); \
             this system has driver 570.124.04 with the proprietary kernel module"
        ),
        "{}",
        findings[0]
    );
}

#[test]
fn a_9070_xt_under_rocm_5_names_the_rocm_it_needs() {
    let (report, code) = detect("red-v2-rocm-5", &[]);
    assert_eq!(code, 0);
    assert_eq!(report["sku"], "tinybox-red-v2");
    let findings = findings(&report);
    assert_eq!(findings.len(), 4, "{findings:?}");
    for (finding, address) in findings.iter().zip(gpu_addresses(&report)) {
        assert_eq!(
            finding,
            &format!(
                "GPU {address}: Radeon RX 9070 XT (gfx1201) needs ROCm 6.4 or later; this \
                 system has ROCm 5.7.1 (/opt/rocm/.info/version)"
            )
        );
    }
    // The human report carries them too.
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["detect", "--no-runtime", "--root"])
        .arg(fixture("red-v2-rocm-5"))
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("needs ROCm 6.4 or later; this system has ROCm 5.7.1"),
        "{text}"
    );
}

/// A red v2 whose `/opt` is replaced by what `install` puts in the tree (the hardware is
/// the fixture's, through links to its sys and proc).
fn red_v2_with(install: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for part in ["sys", "proc"] {
        std::os::unix::fs::symlink(fixture("tinybox-red-v2").join(part), root.join(part)).unwrap();
    }
    install(root);
    dir
}

#[test]
fn a_9070_xt_whose_only_hip_is_debians_rocm_5_is_a_finding() {
    let dir = red_v2_with(|root| {
        let lib = root.join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libamdhip64.so.5.7.31921"), "").unwrap();
        std::os::unix::fs::symlink("libamdhip64.so.5.7.31921", lib.join("libamdhip64.so.5"))
            .unwrap();
    });
    let (report, _) = detect_root(dir.path(), &[]);
    let findings = findings(&report);
    assert_eq!(findings.len(), 4, "{findings:?}");
    assert!(
        findings[0].ends_with(
            "Radeon RX 9070 XT (gfx1201) needs ROCm 6.4 or later; this system has ROCm 5.7 \
             (HIP runtime library /usr/lib/x86_64-linux-gnu/libamdhip64.so.5.7.31921)"
        ),
        "{}",
        findings[0]
    );
}

#[test]
fn a_9070_xt_without_any_rocm_says_so() {
    let dir = red_v2_with(|_| {});
    let (report, _) = detect_root(dir.path(), &[]);
    let findings = findings(&report);
    assert_eq!(findings.len(), 4, "{findings:?}");
    assert!(
        findings[0].ends_with(
            "needs ROCm 6.4 or later; no ROCm found (no /opt/rocm*/.info/version, no HIP \
             runtime library)"
        ),
        "{}",
        findings[0]
    );
}

#[test]
fn a_newer_side_by_side_rocm_without_the_link_is_enough() {
    let dir = red_v2_with(|root| {
        let info = root.join("opt/rocm-7.0.2/.info");
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(info.join("version"), "7.0.2-56\n").unwrap();
    });
    let (report, _) = detect_root(dir.path(), &[]);
    assert!(findings(&report).is_empty(), "{:?}", findings(&report));
}

#[test]
fn a_configuration_naming_the_old_sku_still_loads_and_judges_the_green_v2() {
    let path = Path::new("/etc/tinyperf/tinyperf.toml");
    let config = tinyperf::agent::config::Config::parse("sku = \"tinybox-5090\"\n", path)
        .expect("the old name is accepted");
    assert_eq!(config.sku.as_deref(), Some("tinybox-5090"));
    let report =
        tinyperf::inventory::take(&fixture("tinybox-green-v2"), config.sku.as_deref(), false);
    assert_eq!(report.sku_name(), "tinybox-green-v2");
    assert_eq!(
        report.sku_source,
        tinyperf::inventory::SkuSource::Configured
    );
    let unknown = tinyperf::agent::config::Config::parse("sku = \"tinybox-5091\"\n", path)
        .unwrap_err()
        .to_string();
    assert!(unknown.contains("tinybox-green-v2"), "{unknown}");
}
