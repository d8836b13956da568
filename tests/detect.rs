//! `tinyperf detect` against sysfs/procfs trees on disk (tests/fixtures, written by
//! tests/fixtures/generate.py) and against this machine's own `/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn detect(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .arg("detect")
        .args(args)
        .output()
        .expect("tinyperf runs")
}

/// Human output and exit status for a fixture, without the runtime probe.
fn detect_human(name: &str) -> (String, i32) {
    let root = fixture(name);
    let out = detect(&["--no-runtime", "--root", root.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).expect("utf-8 output");
    (text, out.status.code().expect("exit status"))
}

fn detect_json(name: &str, extra: &[&str]) -> (Value, i32) {
    let root = fixture(name);
    let mut args = vec!["--json", "--no-runtime", "--root", root.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = detect(&args);
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{name}: output is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (json, out.status.code().expect("exit status"))
}

fn failed_checks(report: &Value) -> Vec<(String, String, String, String)> {
    report["checks"]
        .as_array()
        .expect("checks array")
        .iter()
        .filter(|c| c["verdict"] == "fail")
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["subject"].as_str().unwrap_or("").to_string(),
                c["expected"].as_str().unwrap().to_string(),
                c["found"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn gpu_addresses(report: &Value) -> Vec<&str> {
    report["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["address"].as_str().unwrap())
        .collect()
}

#[test]
fn good_boxes_are_recognised_and_pass() {
    for (name, sku, gpus, model) in [
        ("tinybox-green", "tinybox-green", 6, "GeForce RTX 4090"),
        ("tinybox-red", "tinybox-red", 6, "Radeon RX 7900 XTX"),
        (
            "tinybox-green-v2",
            "tinybox-green-v2",
            4,
            "GeForce RTX 5090",
        ),
        ("tinybox-red-v2", "tinybox-red-v2", 4, "Radeon RX 9070 XT"),
    ] {
        let (report, code) = detect_json(name, &[]);
        assert_eq!(code, 0, "{name}: {:?}", failed_checks(&report));
        assert_eq!(report["sku"], sku);
        assert_eq!(report["sku_source"], "recognised");
        assert_eq!(report["verdict"], "pass");
        assert_eq!(report["gpus"].as_array().unwrap().len(), gpus);
        assert!(report["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["model"] == model && g["resizable_bar"]["state"] == "on"));
        let checks = report["checks"].as_array().unwrap();
        // Count, then model, link and Resizable BAR per GPU, memory, cores, NVMe
        // count and a link per drive.
        assert_eq!(checks.len(), 1 + 3 * gpus + 3 + 4, "{name}");
        assert_eq!(report["host"]["cpu_cores"], 32);
        assert_eq!(report["host"]["cpu_threads"], 64);
        assert_eq!(report["nvme"].as_array().unwrap().len(), 4);
        assert!(
            report["findings"].as_array().unwrap().is_empty(),
            "{name}: {}",
            report["findings"]
        );
    }
}

#[test]
fn json_has_every_section() {
    let (report, _) = detect_json("tinybox-red", &[]);
    for key in [
        "sku",
        "checks",
        "findings",
        "gpus",
        "pci_devices",
        "host",
        "nvme",
        "runtime",
    ] {
        assert!(report.get(key).is_some(), "missing {key}");
    }
    assert!(report["runtime"].is_null(), "--no-runtime skips the probe");
    // The shape is versioned, and says which tinyperf took it.
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["tinyperf_version"], env!("CARGO_PKG_VERSION"));
    let gpu = &report["gpus"][0];
    assert_eq!(gpu["address"], "0000:03:00.0");
    assert_eq!(gpu["pci_id"], "1002:744c");
    assert_eq!(gpu["vram_bytes"], 25_753_026_560u64);
    assert_eq!(gpu["vram_source"], "amdgpu");
    assert_eq!(gpu["driver"], "amdgpu");
    assert_eq!(gpu["driver_version"], "6.8.5");
    let device = report["pci_devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["address"] == "0000:03:00.0")
        .unwrap();
    assert_eq!(device["class"], "0x030000");
    assert_eq!(device["revision"], "0xc8");
    assert_eq!(device["link"]["current_speed_gts"], 16.0);
    assert_eq!(device["link"]["max_width"], 16);
    assert_eq!(
        device["upstream"],
        serde_json::json!(["0000:00:01.1", "0000:01:00.0", "0000:02:00.0"])
    );
    // The Resizable BAR capability read from the binary config space.
    assert_eq!(device["resizable_bar"][0]["bar"], 0);
    assert_eq!(
        device["resizable_bar"][0]["current_size_bytes"],
        32u64 << 30
    );
    assert_eq!(device["resizable_bar"][1]["bar"], 2);
    let bar0 = &device["bars"][0];
    assert_eq!(bar0["size_bytes"], 32u64 << 30);
    assert_eq!(bar0["prefetchable"], true);
}

#[test]
fn nvidia_driver_version_comes_from_procfs() {
    let (green, _) = detect_json("tinybox-green", &[]);
    assert_eq!(green["gpus"][0]["driver_version"], "550.120");
    let (box5090, _) = detect_json("tinybox-green-v2", &[]);
    assert_eq!(box5090["gpus"][0]["driver_version"], "570.124.04");
    assert_eq!(box5090["gpus"][0]["path_link"]["speed_gts"], 32.0);
}

#[test]
fn bmc_vga_is_never_a_gpu() {
    for name in [
        "tinybox-green",
        "tinybox-red",
        "tinybox-green-v2",
        "tinybox-pro",
        "no-gpu",
    ] {
        let (report, _) = detect_json(name, &[]);
        let aspeed = report["pci_devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["vendor"] == "0x1a03" && d["device"] == "0x2000")
            .unwrap_or_else(|| panic!("{name} has the BMC's VGA"));
        assert_eq!(aspeed["class"], "0x030000");
        assert_eq!(aspeed["driver"], "ast");
        assert!(!gpu_addresses(&report).contains(&aspeed["address"].as_str().unwrap()));
    }
}

#[test]
fn missing_gpu_fails_the_count() {
    let (report, code) = detect_json("green-gpu-missing", &[]);
    assert_eq!(code, 1);
    assert_eq!(report["sku"], "tinybox-green");
    assert_eq!(
        failed_checks(&report),
        [("gpu_count".into(), "".into(), "6".into(), "5".into())]
    );
    assert!(!gpu_addresses(&report).contains(&"0000:81:00.0"));
}

#[test]
fn degraded_links_name_the_device_with_expected_and_found() {
    let (report, code) = detect_json("green-degraded-links", &[]);
    assert_eq!(code, 1);
    let failed = failed_checks(&report);
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert_eq!(
        failed[0],
        (
            "gpu_link".into(),
            "0000:41:00.0".into(),
            "16.0 GT/s x16".into(),
            "16.0 GT/s x8".into()
        )
    );
    assert_eq!(
        failed[1],
        (
            "gpu_link".into(),
            "0000:81:00.0".into(),
            "16.0 GT/s x16".into(),
            "8.0 GT/s x16".into()
        )
    );
    let (text, code) = detect_human("green-degraded-links");
    assert_eq!(code, 1);
    let line = text
        .lines()
        .find(|l| l.contains("FAIL") && l.contains("0000:41:00.0"))
        .unwrap_or_else(|| panic!("no FAIL line for 0000:41:00.0 in:\n{text}"));
    assert!(
        line.contains("expected 16.0 GT/s x16, found 16.0 GT/s x8"),
        "{line}"
    );
    assert!(
        text.contains("Verdict  FAIL: 2 of 26 checks failed"),
        "{text}"
    );
}

#[test]
fn link_degraded_behind_the_cards_switch_is_caught() {
    let (report, code) = detect_json("red-link-x8-behind-switch", &[]);
    assert_eq!(code, 1);
    let gpu = report["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["address"] == "0000:43:00.0")
        .unwrap();
    assert_eq!(gpu["link"]["current_width"], 16, "the GPU itself says x16");
    assert_eq!(gpu["path_link"]["width"], 8);
    assert_eq!(gpu["path_link"]["limited_at"], "0000:41:00.0");
    assert_eq!(
        failed_checks(&report),
        [(
            "gpu_link".into(),
            "0000:43:00.0".into(),
            "16.0 GT/s x16".into(),
            "16.0 GT/s x8, limited at 0000:41:00.0".into()
        )]
    );
}

#[test]
fn idle_links_pass_with_a_finding() {
    let (report, code) = detect_json("green-idle-links", &[]);
    assert_eq!(code, 0, "{:?}", failed_checks(&report));
    assert_eq!(report["gpus"][0]["path_link"]["speed_gts"], 2.5);
    let findings = report["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 6);
    assert!(findings[0]
        .as_str()
        .unwrap()
        .starts_with("GPU 0000:01:00.0: link idles at 2.5 GT/s"));
}

#[test]
fn resizable_bar_off_fails_every_gpu() {
    let (report, code) = detect_json("red-rebar-off", &[]);
    assert_eq!(code, 1);
    let failed = failed_checks(&report);
    assert_eq!(failed.len(), 6);
    for (name, subject, expected, found) in &failed {
        assert_eq!(name, "gpu_resizable_bar");
        assert!(gpu_addresses(&report).contains(&subject.as_str()));
        assert_eq!(expected, "on");
        assert_eq!(
            found,
            "off (BAR0 is 256 MiB, smaller than 24.0 GiB of VRAM)"
        );
    }
    let (text, _) = detect_human("red-rebar-off");
    assert!(text.contains(
        "FAIL  gpu_resizable_bar  0000:c3:00.0  expected on, found off (BAR0 is 256 MiB"
    ));
}

#[test]
fn mixed_models_are_judged_by_the_majority() {
    let (report, code) = detect_json("green-mixed-models", &[]);
    assert_eq!(code, 1);
    assert_eq!(report["sku"], "tinybox-green");
    assert_eq!(
        failed_checks(&report),
        [(
            "gpu_model".into(),
            "0000:c1:00.0".into(),
            "GeForce RTX 4090".into(),
            "GeForce RTX 4080".into()
        )]
    );
}

#[test]
fn box_without_gpus_is_unrecognised_and_still_listed() {
    let (report, code) = detect_json("no-gpu", &[]);
    assert_eq!(code, 0);
    assert_eq!(report["sku"], "unrecognised");
    assert_eq!(report["verdict"], "skip");
    assert!(report["checks"].as_array().unwrap().is_empty());
    assert!(report["gpus"].as_array().unwrap().is_empty());
    assert_eq!(report["nvme"].as_array().unwrap().len(), 4);
    assert_eq!(
        report["host"]["cpu_model"],
        "AMD EPYC 7532 32-Core Processor"
    );
    assert!(report["pci_devices"].as_array().unwrap().len() > 10);
    let (text, _) = detect_human("no-gpu");
    assert!(text.contains("Box      unrecognised"), "{text}");
    assert!(text.contains("nvme3  0000:a4:00.0  Samsung SSD 990 PRO 2TB  16.0 GT/s x4"));
}

#[test]
fn explicit_sku_judges_the_box_as_that_sku() {
    let (report, code) = detect_json("no-gpu", &["--sku", "tinybox-green"]);
    assert_eq!(code, 1);
    assert_eq!(report["sku"], "tinybox-green");
    assert_eq!(report["sku_source"], "configured");
    assert!(failed_checks(&report).contains(&(
        "gpu_count".into(),
        "".into(),
        "6".into(),
        "0".into()
    )));
    let (report, code) = detect_json("tinybox-red", &["--sku", "tinybox-green"]);
    assert_eq!(code, 1);
    let models: Vec<_> = failed_checks(&report)
        .into_iter()
        .filter(|c| c.0 == "gpu_model")
        .collect();
    assert_eq!(models.len(), 6);
}

#[test]
fn unknown_sku_is_a_usage_error() {
    let root = fixture("tinybox-green");
    let out = detect(&["--sku", "tinybox-blue", "--root", root.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tinybox-blue") && err.contains("tinybox-green"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn unreadable_files_become_findings() {
    let (report, code) = detect_json("green-unreadable", &[]);
    assert_eq!(code, 1);
    assert_eq!(report["sku"], "tinybox-green");
    assert_eq!(report["gpus"].as_array().unwrap().len(), 6);
    let findings: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    let expect = [
        "0000:41:00.0/current_link_speed: dangling symlink",
        "0000:61:00.0/resource: is a directory, expected a file",
        "0000:e1:00.0/class: malformed class code: \"0xzz0000\"",
        "sys/bus/pci/devices/0000:e1:00.1: device directory is missing",
        "proc/meminfo: malformed meminfo",
        "sys/class/dmi/id/board_serial: not text",
        "sys/class/nvme/nvme3/device: dangling symlink",
    ];
    for needle in expect {
        assert!(
            findings.iter().any(|f| f.contains(needle)),
            "no finding with {needle:?} in {findings:#?}"
        );
    }
    let failed = failed_checks(&report);
    let names: Vec<&str> = failed.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(names, ["gpu_link", "memory", "nvme_count"], "{failed:?}");
    assert_eq!(failed[0].1, "0000:41:00.0");
    assert_eq!(failed[0].3, "? GT/s x16");
    // A GPU whose resource table is unreadable still has its Resizable BAR judged,
    // from config space; one whose config space is cut short, from its BARs.
    let gpus = report["gpus"].as_array().unwrap();
    assert!(gpus.iter().all(|g| g["resizable_bar"]["state"] == "on"));
}

#[test]
fn empty_root_is_unrecognised_with_findings() {
    let dir = tempfile::tempdir().unwrap();
    let out = detect(&[
        "--json",
        "--no-runtime",
        "--root",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["sku"], "unrecognised");
    let findings = report["findings"].to_string();
    assert!(
        findings.contains("sys/bus/pci/devices: cannot list PCI devices"),
        "{findings}"
    );
    assert!(findings.contains("proc/cpuinfo: missing"), "{findings}");
    assert!(findings.contains("proc/meminfo: missing"), "{findings}");
}

#[test]
fn runtime_probe_is_included_unless_skipped() {
    let root = fixture("tinybox-green");
    let out = detect(&["--json", "--root", root.to_str().unwrap()]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let runtime = &report["runtime"];
    for name in ["cuda", "hip", "nvml"] {
        assert!(runtime[name]["loaded"].is_boolean(), "{name}: {runtime}");
    }
    let out = detect(&["--root", root.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    let section = text.split("\nRuntimes\n").nth(1).unwrap();
    assert!(section.starts_with("  CUDA"), "{text}");
    assert!(!section.starts_with("  not probed"));
}

#[test]
fn this_machine_has_no_gpu_and_is_unrecognised() {
    let out = detect(&["--json"]);
    assert_eq!(out.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["sku"], "unrecognised");
    assert!(report["gpus"].as_array().unwrap().is_empty());
    assert!(!report["pci_devices"].as_array().unwrap().is_empty());
    assert!(report["host"]["cpu_threads"].as_u64().unwrap() >= 1);
    assert!(report["host"]["memory_bytes"].as_u64().unwrap() > 0);
    assert!(report["host"]["kernel"].is_string());
    assert!(report["runtime"].is_object());
    let out = detect(&[]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("Box      unrecognised"), "{text}");
}

#[test]
fn an_rtx_5090_under_driver_550_is_a_finding_naming_both_versions() {
    let root = tempfile::tempdir().unwrap();
    let copy = Command::new("cp")
        .arg("-a")
        .arg(fixture("tinybox-green-v2"))
        .arg(root.path().join("box"))
        .status()
        .unwrap();
    assert!(copy.success());
    let box_root = root.path().join("box");
    // Debian 13's driver, as /proc/driver/nvidia/version spells it.
    std::fs::write(
        box_root.join("proc/driver/nvidia/version"),
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.163.01  Release Build  \
         (pbuilder@debian)  Sat Apr 19 2025\nGCC version:  gcc version 14.2.0 (Debian 14.2.0-19)\n",
    )
    .unwrap();
    let out = detect(&[
        "--json",
        "--no-runtime",
        "--root",
        box_root.to_str().unwrap(),
    ]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|f| f.contains("needs NVIDIA driver"))
        .collect();
    assert_eq!(findings.len(), 4, "{report}");
    assert!(findings[0].contains("570 or later"), "{}", findings[0]);
    assert!(findings[0].contains("550.163.01"), "{}", findings[0]);
    // The box's own driver (570) draws no such finding.
    let (current, _) = detect_json("tinybox-green-v2", &[]);
    assert!(!current.to_string().contains("needs NVIDIA driver"));
}

fn findings_of(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn link_errors_and_xids_are_findings_with_the_gpus_address_and_fail_detect() {
    let (report, code) = detect_json("green-link-errors", &[]);
    assert_eq!(
        code, 1,
        "an uncorrectable AER error and a lost GPU: {report}"
    );
    let findings = findings_of(&report);
    let has = |needle: &str| findings.iter().any(|f| f.contains(needle));
    // Correctable errors on a GPU (short names) and at its root port; non-fatal ones at a
    // root port; long names and an unnamed bit.
    assert!(has("GPU 0000:21:00.0: PCIe AER errors since boot on the GPU: 7 correctable (BadTLP 5, RxErr 2)"), "{findings:?}");
    assert!(
        has("at its root port 0000:20:01.1: received from below: 7 correctable"),
        "{findings:?}"
    );
    assert!(has("GPU 0000:41:00.0: PCIe AER errors since boot at its root port 0000:40:01.1: 2 non-fatal (CmpltTO 2)"), "{findings:?}");
    assert!(
        has("4 correctable (Bad DLLP 1, dev_cor_errs_bit[14] 3)"),
        "{findings:?}"
    );
    let serious_links: Vec<&Value> = report["link_errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["counters"]["total_nonfatal"].as_u64() > Some(0))
        .collect();
    assert_eq!(serious_links.len(), 1);
    assert_eq!(serious_links[0]["role"], "root_port");

    let events = report["kernel_events"].as_array().unwrap();
    let event = |address: &str, kind: &str| {
        events
            .iter()
            .filter(|e| e["address"] == address && e["kind"] == kind)
            .cloned()
            .collect::<Vec<Value>>()
    };
    let xid13 = event("0000:21:00.0", "xid");
    assert_eq!(xid13[0]["code"], 13);
    assert_eq!(
        xid13[0]["serious"], false,
        "an application's Xid alone is not"
    );
    let xid79 = event("0000:41:00.0", "xid");
    assert_eq!(xid79[0]["code"], 79);
    assert_eq!(xid79[0]["xid_class"], "lost");
    assert_eq!(xid79[0]["class"], "serious");
    assert_eq!(xid79[0]["serious"], true);
    assert_eq!(event("0000:41:00.0", "fallen_off_the_bus").len(), 1);
    // The MIG form, and "fallen off the bus" over three records without an Xid.
    assert_eq!(event("0000:61:00.0", "xid")[0]["code"], 94);
    assert_eq!(event("0000:81:00.0", "fallen_off_the_bus").len(), 1);
    let ghost = event("0000:f1:00.0", "xid");
    assert_eq!(ghost[0]["known_gpu"], false);
    assert!(
        has("GPU 0000:f1:00.0 (no GPU at that address in this box): Xid 48"),
        "{findings:?}"
    );
    // Ordinary boot lines in the same log are nothing.
    assert_eq!(events.len(), 6, "{events:?}");
}

#[test]
fn an_amdgpu_ring_timeout_and_reset_fail_detect_and_switch_port_errors_are_named() {
    let (report, code) = detect_json("red-gpu-reset", &[]);
    assert_eq!(code, 1);
    let findings = findings_of(&report);
    let has = |needle: &str| findings.iter().any(|f| f.contains(needle));
    assert!(
        has("GPU 0000:43:00.0: ring gfx_0.0.0 timed out"),
        "{findings:?}"
    );
    assert!(
        has("GPU 0000:43:00.0: was reset by the driver"),
        "{findings:?}"
    );
    assert!(
        has("GPU 0000:83:00.0: PCIe AER errors since boot at bridge 0000:81:00.0: 40 correctable"),
        "{findings:?}"
    );
    assert_eq!(report["kernel_events"].as_array().unwrap().len(), 2);
}

#[test]
fn zero_counters_and_ordinary_boot_messages_change_nothing() {
    for name in ["green-clean-boot", "tinybox-green", "tinybox-red"] {
        let (report, code) = detect_json(name, &[]);
        assert_eq!(code, 0, "{name}: {report}");
        assert_eq!(report["link_errors"], serde_json::json!([]), "{name}");
        assert_eq!(report["kernel_events"], serde_json::json!([]), "{name}");
        let findings = findings_of(&report);
        assert!(
            !findings
                .iter()
                .any(|f| f.contains("AER") || f.contains("kernel")),
            "{name}: {findings:?}"
        );
    }
}
