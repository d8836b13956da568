//! `make gpu-speed` without a GPU: the summary table built from recorded variant reports
//! (a tinyperf `gpu check --json-out` report per variant, PyTorch's JSON lines, exit
//! statuses including a timeout and a budget skip), and the script's dry run, which prints
//! every command with its timeout and runs none.

use std::fs;
use std::path::Path;
use std::process::Command;

fn report(img_per_s: f64, step_ms: f64, memory_gib: f64) -> String {
    format!(
        r#"[{{"device": {{"ordinal": 0, "name": "NVIDIA H200", "arch": "sm_90"}},
            "throughput": [{{"model": "resnet50", "batch": 256, "image_size": 224,
              "precision": "fp16 activations, f32 master weights", "img_per_s": {img_per_s},
              "step_ms_median": {step_ms}, "step_ms": [{step_ms}],
              "peak_memory_in_use_gib": {memory_gib}, "peak_memory_reserved_gib": 14.0}}],
            "errors": [], "passed": true}}]"#
    )
}

fn write(dir: &Path, name: &str, body: &str) {
    fs::write(dir.join(name), body).unwrap();
}

fn table(dir: &Path, names: &[&str]) -> String {
    let out = Command::new("python3")
        .arg("scripts/gpu_speed_table.py")
        .arg(dir)
        .args(names)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_table_gives_each_variant_its_speed_ratio_memory_and_ending() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "check-16-bit.rc", "0\n");
    write(d, "check-16-bit.json", "[]");
    write(d, "fp16.rc", "0\n");
    write(d, "fp16.json", &report(2893.5, 88.47, 10.9));
    write(d, "fp16-graph.rc", "124\n");
    write(d, "fp16-fused-bn.rc", "1\n");
    write(
        d,
        "fp16-fused-bn.json",
        r#"[{"throughput": [], "errors": ["training throughput (fp16): out of memory"]}]"#,
    );
    write(d, "bf16.rc", "skipped\n");
    write(d, "torch-amp.rc", "0\n");
    write(
        d,
        "torch-amp.jsonl",
        concat!(
            r#"{"engine": "pytorch", "torch": "2.5.1", "device": "NVIDIA H200"}"#,
            "\n",
            r#"{"engine": "pytorch", "model": "resnet50", "batch": 256, "precision": "amp-fp16", "img_per_s": 5787.0, "step_ms_median": 44.24, "peak_mem_bytes": 16106127360}"#,
            "\n",
            r#"{"engine": "pytorch", "model": "resnet50", "batch": 256, "precision": "tf32", "img_per_s": 3143.0, "step_ms_median": 81.45, "peak_mem_bytes": 26843545600}"#,
            "\n"
        ),
    );
    let names = [
        "check-16-bit",
        "fp16",
        "fp16-graph",
        "fp16-fused-bn",
        "bf16",
        "torch-amp",
        "fp16-conv-dnn",
    ];
    let printed = table(d, &names);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 1 + names.len(), "{printed}");
    let line = |name: &str| {
        *lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name}: {printed}"))
    };
    assert!(line("check-16-bit").ends_with("passed"), "{printed}");
    // 2893.5 / 5787 = 0.50.
    let fp16: Vec<&str> = line("fp16").split_whitespace().collect();
    assert_eq!(
        fp16,
        ["fp16", "2894", "88.5", "0.50", "10.9", "ok"],
        "{printed}"
    );
    assert!(line("fp16-graph").ends_with("timed out"), "{printed}");
    assert!(
        line("fp16-fused-bn").ends_with("failed (exit 1)"),
        "{printed}"
    );
    assert!(
        line("bf16").ends_with("skipped (budget spent)"),
        "{printed}"
    );
    assert!(line("fp16-conv-dnn").ends_with("not run"), "{printed}");
    let torch: Vec<&str> = line("torch-amp").split_whitespace().collect();
    assert_eq!(
        torch,
        ["torch-amp", "5787", "44.2", "1.00", "15.0", "ok"],
        "{printed}"
    );

    let json: serde_json::Value =
        serde_json::from_slice(&fs::read(d.join("gpu-speed.json")).unwrap()).unwrap();
    let rows = json["variants"].as_array().unwrap();
    assert_eq!(rows.len(), names.len());
    assert_eq!(rows[1]["variant"], "fp16");
    assert!((rows[1]["ratio_to_torch_amp"].as_f64().unwrap() - 2893.5 / 5787.0).abs() < 1e-9);
    assert_eq!(
        rows[3]["errors"][0],
        "training throughput (fp16): out of memory"
    );
    assert_eq!(rows[2]["exit_status"], 124);
}

#[test]
fn without_a_pytorch_figure_there_is_no_ratio() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "f32.rc", "0\n");
    write(dir.path(), "f32.json", &report(2819.0, 90.8, 20.9));
    let printed = table(dir.path(), &["f32", "torch-amp"]);
    let f32: Vec<&str> = printed.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(f32, ["f32", "2819", "90.8", "-", "20.9", "ok"], "{printed}");
}

#[test]
fn the_dry_run_prints_every_command_with_its_timeout_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = Command::new("scripts/gpu-speed.sh")
        .arg(&out_dir)
        .env("DRY_RUN", "1")
        .env("BIN", "/nonexistent/tinyperf")
        .env("VARIANT_TIMEOUT", "40")
        .output()
        .expect("bash runs the script");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = printed.lines().collect();
    // The check, nine tinyperf variants and PyTorch.
    assert_eq!(lines.len(), 11, "{printed}");
    assert!(lines.iter().all(|l| l.starts_with("timeout ")), "{printed}");
    assert!(lines[0].contains("gpu check --quick"), "{printed}");
    for (env, precision) in [
        ("TINYPERF_CONV=implicit", "fp16"),
        ("TINYPERF_GPU_GRAPH=1", "fp16"),
        ("TINYPERF_FUSED_BN=1", "fp16"),
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with("timeout 40 env ")
                && l.contains(env)
                && l.contains(&format!(
                    "--throughput-only --device 0 --precision {precision}"
                ))),
            "{env}: {printed}"
        );
    }
    assert!(
        lines.iter().any(|l| l.contains("--precision bf16")),
        "{printed}"
    );
    assert!(lines[10].contains("bench-torch-gpu.py"), "{printed}");
    let written = fs::read_dir(&out_dir).map(|d| d.count()).unwrap_or(0);
    assert_eq!(written, 0, "a dry run writes nothing");
}

fn floors(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["gpu", "floors"])
        .args(args)
        .output()
        .expect("tinyperf runs")
}

#[test]
fn gpu_floors_counts_resnet50_without_a_gpu() {
    let out = floors(&["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["parameters"], 25_557_032);
    assert_eq!(c["forward_macs_per_image"], 4_089_184_256u64);
    assert_eq!(
        (c["batch"].as_u64(), c["image_size"].as_u64()),
        (Some(256), Some(224))
    );
    assert_eq!(c["precision"], "fp16");
    assert_eq!(c["categories"].as_array().unwrap().len(), 10);
    let devices: Vec<&str> = c["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["gpu"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(devices, ["H200 SXM", "RTX 4090", "RX 7900 XTX"]);
    assert!(c["floor_bytes"].as_u64() < c["today_bytes"].as_u64());

    let f32: serde_json::Value = serde_json::from_slice(
        &floors(&["--json", "--precision", "fp32", "--batch", "256"]).stdout,
    )
    .unwrap();
    let ratio = f32["floor_bytes"].as_f64().unwrap() / c["floor_bytes"].as_f64().unwrap();
    assert!((1.8..2.0).contains(&ratio), "{ratio}");

    let table = String::from_utf8(floors(&[]).stdout).unwrap();
    assert!(
        table.contains("BN partial sums") && table.contains("RX 7900 XTX"),
        "{table}"
    );
    let bad = floors(&["--precision", "fp8"]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn gpu_check_refuses_a_bad_throughput_precision_or_mode_before_looking_for_a_gpu() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tinyperf"))
            .args(["gpu", "check"])
            .args(args)
            .output()
            .expect("tinyperf runs")
    };
    let bad = run(&["--throughput-only", "--precision", "fp8"]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--precision"));
    let both = run(&["--throughput-only", "--quick"]);
    assert_eq!(
        both.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&both.stderr)
    );
}
