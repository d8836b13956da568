//! Telemetry on real files: amdgpu and CPU hwmon trees on disk (the red box fixture
//! and trees written by each test), `telemetry.csv` as written and read back, limit
//! findings, the background recorder, and `tinyperf run` recording telemetry and
//! energy for a run.

mod common;

use common::amdgpu_sysfs as amd_gpu;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use tinyperf::runtime::telemetry::csv::{self, CsvWriter};
use tinyperf::runtime::telemetry::{
    GpuSample, LimitWatch, RecorderConfig, Sampler, Sources, TelemetryRecorder, TelemetrySample,
    Temperature, ThrottleReason, NO_POWER_SOURCE,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn write(path: &Path, content: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn hwmon_chip(root: &Path, hwmon: &str, name: &str, temps: &[(&str, u32)]) -> PathBuf {
    let dir = root.join("sys/devices/platform").join(name).join(hwmon);
    write(&dir.join("name"), &format!("{name}\n"));
    for (n, (label, millicelsius)) in temps.iter().enumerate() {
        write(
            &dir.join(format!("temp{}_label", n + 1)),
            &format!("{label}\n"),
        );
        write(
            &dir.join(format!("temp{}_input", n + 1)),
            &format!("{millicelsius}\n"),
        );
    }
    let class = root.join("sys/class/hwmon");
    fs::create_dir_all(&class).unwrap();
    std::os::unix::fs::symlink(&dir, class.join(hwmon)).unwrap();
    dir
}

fn only_gpu(root: &Path) -> GpuSample {
    let mut sampler = Sampler::discover_sysfs(root);
    let sample = sampler.sample(0.0);
    assert_eq!(sample.gpus.len(), 1, "{sample:?}");
    sample.gpus.into_iter().next().unwrap()
}

#[test]
fn the_red_box_reads_power_temperatures_clocks_and_load_of_six_gpus() {
    let mut sampler = Sampler::discover_sysfs(&fixture("tinybox-red"));
    assert!(sampler.has_power_source());
    assert!(sampler.findings().is_empty(), "{:?}", sampler.findings());
    let sample = sampler.sample(1.5);
    let addresses: Vec<_> = sample
        .gpus
        .iter()
        .map(|g| g.address.clone().unwrap())
        .collect();
    assert_eq!(
        addresses,
        [
            "0000:03:00.0",
            "0000:23:00.0",
            "0000:43:00.0",
            "0000:63:00.0",
            "0000:83:00.0",
            "0000:c3:00.0"
        ]
    );
    let gpu = &sample.gpus[2];
    assert_eq!(gpu.index, 2);
    assert_eq!(gpu.device(), "gpu2");
    assert_eq!(gpu.power_w, Some(59.0));
    let temps: Vec<(&str, f64, Option<f64>)> = gpu
        .temperatures
        .iter()
        .map(|t| (t.label.as_str(), t.celsius, t.limit_c))
        .collect();
    assert_eq!(
        temps,
        [
            ("edge", 42.0, Some(100.0)),
            ("junction", 48.0, Some(110.0)),
            ("mem", 54.0, Some(100.0))
        ]
    );
    assert_eq!(gpu.sm_clock_mhz, Some(43.0));
    assert_eq!(gpu.mem_clock_mhz, Some(96.0));
    assert_eq!(gpu.util_percent, Some(0.0));
    // hwmon cannot tell throttling; the card's gpu_metrics table says nothing holds it.
    assert_eq!(gpu.throttling, Some(vec![]));
    assert_eq!(sample.cpu_temp_c, Some(48.5));
    assert_eq!(sample.t_s, 1.5);
}

#[test]
fn power1_input_is_read_where_the_kernel_has_no_power1_average() {
    let root = tempfile::tempdir().unwrap();
    let hwmon = amd_gpu(root.path(), "0000:0a:00.0", "hwmon2");
    write(&hwmon.join("power1_input"), "312250000\n");
    assert_eq!(only_gpu(root.path()).power_w, Some(312.25));
    assert!(Sampler::discover_sysfs(root.path()).has_power_source());

    // Where both exist, the averaged reading is the one to integrate.
    write(&hwmon.join("power1_average"), "300000000\n");
    assert_eq!(only_gpu(root.path()).power_w, Some(300.0));
}

#[test]
fn missing_files_leave_only_their_own_fields_empty() {
    let root = tempfile::tempdir().unwrap();
    let hwmon = amd_gpu(root.path(), "0000:0a:00.0", "hwmon2");
    write(&hwmon.join("temp2_input"), "71000\n");
    write(&hwmon.join("temp2_label"), "junction\n");
    write(&hwmon.join("temp2_emergency"), "115000\n");
    write(&hwmon.join("freq2_input"), "1249000000\n");
    write(&hwmon.join("freq2_label"), "mclk\n");
    let gpu = only_gpu(root.path());
    assert_eq!(gpu.power_w, None);
    assert_eq!(gpu.sm_clock_mhz, None);
    assert_eq!(gpu.mem_clock_mhz, Some(1249.0));
    assert_eq!(gpu.util_percent, Some(87.0));
    // No crit: the emergency limit stands in.
    assert_eq!(
        gpu.temperatures,
        [Temperature {
            label: "junction".into(),
            celsius: 71.0,
            limit_c: Some(115.0)
        }]
    );
    assert!(!Sampler::discover_sysfs(root.path()).has_power_source());
}

#[test]
fn garbage_gives_none_and_never_a_panic() {
    let root = tempfile::tempdir().unwrap();
    let hwmon = amd_gpu(root.path(), "0000:0a:00.0", "hwmon2");
    write(&hwmon.join("power1_average"), "lots\n");
    fs::write(hwmon.join("temp1_input"), b"\xff\xfe\x00").unwrap();
    write(&hwmon.join("temp2_input"), "");
    write(&hwmon.join("temp2_label"), "junction\n");
    write(&hwmon.join("temp3_input"), "55000\n");
    write(&hwmon.join("temp3_crit"), "9999999999999999999999\n");
    fs::create_dir(hwmon.join("freq1_input")).unwrap();
    std::os::unix::fs::symlink("gone", hwmon.join("freq2_input")).unwrap();
    let device = hwmon.parent().unwrap().parent().unwrap();
    write(&device.join("gpu_busy_percent"), "-\n");
    let gpu = only_gpu(root.path());
    assert_eq!(gpu.power_w, None);
    assert_eq!(gpu.sm_clock_mhz, None);
    assert_eq!(gpu.mem_clock_mhz, None);
    assert_eq!(gpu.util_percent, None);
    assert_eq!(
        gpu.temperatures,
        [Temperature {
            label: "temp3".into(),
            celsius: 55.0,
            limit_c: None
        }]
    );
}

#[test]
fn only_amd_display_devices_with_hwmon_are_sources() {
    let root = tempfile::tempdir().unwrap();
    let hwmon = amd_gpu(root.path(), "0000:0a:00.0", "hwmon2");
    write(&hwmon.join("power1_average"), "1000000\n");
    // The GPU's HDMI audio: AMD, but not a display device.
    let audio = amd_gpu(root.path(), "0000:0a:00.1", "hwmon3");
    write(
        &audio.parent().unwrap().parent().unwrap().join("class"),
        "0x040300\n",
    );
    // An AMD GPU whose driver is not bound has no hwmon.
    let unbound = root
        .path()
        .join("sys/devices/pci0000:00/0000:00:01.1/0000:0b:00.0");
    write(&unbound.join("vendor"), "0x1002\n");
    write(&unbound.join("class"), "0x030000\n");
    std::os::unix::fs::symlink(
        &unbound,
        root.path().join("sys/bus/pci/devices/0000:0b:00.0"),
    )
    .unwrap();
    let gpu = only_gpu(root.path());
    assert_eq!(gpu.address.as_deref(), Some("0000:0a:00.0"));
    assert_eq!(gpu.power_w, Some(1.0));
}

#[test]
fn cpu_temperature_from_k10temp_or_coretemp_hottest_socket() {
    let root = tempfile::tempdir().unwrap();
    hwmon_chip(root.path(), "hwmon0", "nvme", &[("Composite", 40000)]);
    hwmon_chip(
        root.path(),
        "hwmon1",
        "k10temp",
        &[("Tctl", 61000), ("Tdie", 51000)],
    );
    let mut sampler = Sampler::discover_sysfs(root.path());
    // Tdie is the die; Tctl carries a fan-control offset on some parts.
    assert_eq!(sampler.sample(0.0).cpu_temp_c, Some(51.0));
    assert!(!sampler.has_power_source());
    assert_eq!(sampler.findings(), [NO_POWER_SOURCE]);

    let root = tempfile::tempdir().unwrap();
    hwmon_chip(
        root.path(),
        "hwmon2",
        "coretemp",
        &[("Package id 0", 55000), ("Core 0", 90000)],
    );
    hwmon_chip(
        root.path(),
        "hwmon3",
        "coretemp",
        &[("Package id 1", 63000)],
    );
    assert_eq!(
        Sampler::discover_sysfs(root.path()).sample(0.0).cpu_temp_c,
        Some(63.0)
    );

    let empty = tempfile::tempdir().unwrap();
    let sample = Sampler::discover_sysfs(empty.path()).sample(0.0);
    assert_eq!(sample, TelemetrySample::default());
}

fn hot_gpu() -> GpuSample {
    GpuSample {
        index: 1,
        address: Some("0000:23:00.0".into()),
        power_w: Some(355.0),
        temperatures: vec![
            Temperature {
                label: "edge".into(),
                celsius: 88.0,
                limit_c: Some(100.0),
            },
            Temperature {
                label: "junction".into(),
                celsius: 110.0,
                limit_c: Some(110.0),
            },
        ],
        sm_clock_mhz: Some(2498.5),
        mem_clock_mhz: Some(1249.0),
        util_percent: Some(100.0),
        throttling: Some(vec![ThrottleReason::SwPowerCap, ThrottleReason::HwThermal]),
    }
}

#[test]
fn csv_rows_have_the_header_order_empty_cells_and_escaped_stage_names() {
    let sample = TelemetrySample {
        t_s: 2.0,
        gpus: vec![
            hot_gpu(),
            GpuSample {
                index: 2,
                throttling: Some(vec![]),
                ..GpuSample::default()
            },
        ],
        cpu_temp_c: Some(47.25),
    };
    assert_eq!(
        csv::HEADER.join(","),
        "time_s,stage,device,address,power_w,temp_c,temp_limit_c,junction_temp_c,mem_temp_c,\
         sm_clock_mhz,mem_clock_mhz,util_percent,throttling"
    );
    let text = csv::rows("train, \"fast\"", &sample);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "2.000,\"train, \"\"fast\"\"\",gpu1,0000:23:00.0,355,88,100,110,,2498.5,1249,100,\
             sw_power_cap|hw_thermal",
            "2.000,\"train, \"\"fast\"\"\",gpu2,,,,,,,,,,none",
            "2.000,\"train, \"\"fast\"\"\",cpu,,,47.25,,,,,,,",
        ]
    );
    let full = format!("{}\n{text}", csv::HEADER.join(","));
    let rows = csv::parse(&full).unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0].stage, "train, \"fast\"");
    assert_eq!(rows[0].junction_temp_c, Some(110.0));
    assert_eq!(
        rows[0].throttling,
        Some(vec![ThrottleReason::SwPowerCap, ThrottleReason::HwThermal])
    );
    assert_eq!(rows[1].throttling, Some(vec![]));
    assert_eq!(rows[1].power_w, None);
    assert_eq!(rows[2].device, "cpu");
    assert_eq!(rows[2].temp_c, Some(47.25));
    // A line break in a name cannot split a row.
    assert_eq!(csv::escape("a\nb"), "a b");
}

#[test]
fn a_cut_last_line_is_dropped_and_a_bad_middle_line_is_an_error() {
    let header = csv::HEADER.join(",");
    let good = "1.000,s,gpu0,0000:03:00.0,55,40,100,46,52,43,96,0,";
    let cut = format!("{header}\n{good}\n2.000,s,gpu0,0000:03:0");
    let rows = csv::parse(&cut).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].power_w, Some(55.0));
    assert_eq!(rows[0].throttling, None);
    // Cut inside the header: nothing yet, not a foreign file.
    assert_eq!(csv::parse(&header[..7]), Ok(vec![]));
    assert_eq!(csv::parse(""), Ok(vec![]));
    let bad = format!("{header}\nx,s,gpu0,,,,,,,,,,\n{good}\n");
    let error = csv::parse(&bad).unwrap_err().to_string();
    assert!(error.starts_with("line 2: time_s: not a number"), "{error}");
    assert!(csv::parse("a,b\n")
        .unwrap_err()
        .to_string()
        .contains("header"));
}

#[test]
fn the_writer_appends_whole_rows_and_writes_the_header_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("telemetry.csv");
    let sample = TelemetrySample {
        t_s: 0.5,
        gpus: vec![hot_gpu()],
        cpu_temp_c: None,
    };
    let mut writer = CsvWriter::create(&path).unwrap();
    writer.append("a", &sample).unwrap();
    // Every append is on disk at once: a reader sees whole rows.
    assert_eq!(
        csv::parse(&fs::read_to_string(&path).unwrap())
            .unwrap()
            .len(),
        1
    );
    drop(writer);
    CsvWriter::create(&path)
        .unwrap()
        .append("b", &sample)
        .unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches("time_s").count(), 1, "{text}");
    let stages: Vec<String> = csv::parse(&text)
        .unwrap()
        .into_iter()
        .map(|r| r.stage)
        .collect();
    assert_eq!(stages, ["a", "b"]);
    let error = CsvWriter::create(&dir.path().join("no/such/dir/t.csv"))
        .err()
        .unwrap();
    assert!(error.to_string().contains("no/such/dir/t.csv"), "{error}");
}

#[test]
fn a_gpu_past_its_temperature_limit_or_throttled_is_a_finding_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let hwmon = amd_gpu(root.path(), "0000:c3:00.0", "hwmon6");
    write(&hwmon.join("temp2_input"), "111000\n");
    write(&hwmon.join("temp2_label"), "junction\n");
    write(&hwmon.join("temp2_crit"), "110000\n");
    write(&hwmon.join("temp1_input"), "80000\n");
    write(&hwmon.join("temp1_label"), "edge\n");
    write(&hwmon.join("temp1_crit"), "100000\n");
    let mut sampler = Sampler::discover_sysfs(root.path());
    let mut watch = LimitWatch::default();
    watch.observe(&sampler.sample(0.0));
    write(&hwmon.join("temp2_input"), "113500\n");
    watch.observe(&sampler.sample(1.0));
    write(&hwmon.join("temp2_input"), "90000\n");
    watch.observe(&sampler.sample(2.0));
    assert_eq!(
        watch.findings(),
        [
            "GPU 0000:c3:00.0: junction temperature reached 113.5 °C, at or above its limit of \
          110 °C (in 2 of 3 samples)"
        ]
    );

    let mut watch = LimitWatch::default();
    let mut idle = hot_gpu();
    idle.temperatures.clear();
    idle.throttling = Some(vec![ThrottleReason::Idle]);
    let mut throttled = idle.clone();
    throttled.throttling = Some(vec![
        ThrottleReason::Idle,
        ThrottleReason::HwThermal,
        ThrottleReason::SwPowerCap,
    ]);
    for gpu in [idle.clone(), throttled, idle] {
        watch.observe(&TelemetrySample {
            t_s: 0.0,
            gpus: vec![gpu],
            cpu_temp_c: None,
        });
    }
    assert_eq!(
        watch.findings(),
        ["GPU 0000:23:00.0: throttled by hw_thermal, sw_power_cap (in 1 of 3 samples)"]
    );
}

fn recorder(root: &Path, csv_path: Option<PathBuf>, interval: Duration) -> TelemetryRecorder {
    TelemetryRecorder::start(RecorderConfig {
        root: root.to_path_buf(),
        csv_path,
        interval,
        sources: Sources::SysfsOnly,
        sink: None,
        watch_bmc: false,
    })
}

#[test]
fn the_recorder_samples_each_stage_into_the_csv_and_integrates_its_energy() {
    let root = tempfile::tempdir().unwrap();
    let hwmon = amd_gpu(root.path(), "0000:0a:00.0", "hwmon2");
    write(&hwmon.join("power1_average"), "250000000\n");
    hwmon_chip(root.path(), "hwmon0", "k10temp", &[("Tctl", 45000)]);
    let csv_path = root.path().join("telemetry.csv");
    let rec = recorder(
        root.path(),
        Some(csv_path.clone()),
        Duration::from_millis(20),
    );
    rec.begin_stage("first");
    std::thread::sleep(Duration::from_millis(300));
    let first = rec.end_stage();
    write(&hwmon.join("power1_average"), "100000000\n");
    rec.begin_stage("second");
    std::thread::sleep(Duration::from_millis(100));
    let second = rec.end_stage();
    drop(rec);

    assert!(first.samples >= 5, "{first:?}");
    assert!(first.findings.is_empty(), "{first:?}");
    let energy = first.energy.unwrap();
    let covered = energy.covered_s["gpu0"];
    assert!(covered >= 0.25, "{energy:?}");
    assert!((energy.joules - 250.0 * covered).abs() < 1e-6, "{energy:?}");
    assert!((energy.mean_power_w().unwrap() - 250.0).abs() < 1e-9);
    let second_energy = second.energy.unwrap();
    assert!((second_energy.mean_power_w().unwrap() - 100.0).abs() < 1e-9);

    let rows = csv::parse(&fs::read_to_string(&csv_path).unwrap()).unwrap();
    let gpu_rows: Vec<_> = rows.iter().filter(|r| r.device == "gpu0").collect();
    assert_eq!(gpu_rows.len(), first.samples + second.samples);
    assert!(gpu_rows
        .iter()
        .all(|r| r.address.as_deref() == Some("0000:0a:00.0")));
    assert!(gpu_rows
        .iter()
        .any(|r| r.stage == "first" && r.power_w == Some(250.0)));
    assert!(gpu_rows
        .iter()
        .any(|r| r.stage == "second" && r.power_w == Some(100.0)));
    assert!(rows
        .iter()
        .any(|r| r.device == "cpu" && r.temp_c == Some(45.0)));
    assert!(rows.windows(2).all(|w| w[0].time_s <= w[1].time_s));
}

#[test]
fn with_no_power_source_energy_is_absent_with_a_note_and_the_csv_has_what_there_is() {
    let root = tempfile::tempdir().unwrap();
    hwmon_chip(root.path(), "hwmon0", "k10temp", &[("Tctl", 45000)]);
    let csv_path = root.path().join("telemetry.csv");
    let rec = recorder(
        root.path(),
        Some(csv_path.clone()),
        Duration::from_millis(20),
    );
    rec.begin_stage("only");
    std::thread::sleep(Duration::from_millis(60));
    let stage = rec.end_stage();
    drop(rec);
    assert_eq!(stage.energy, None);
    assert_eq!(stage.findings, [NO_POWER_SOURCE]);
    let rows = csv::parse(&fs::read_to_string(&csv_path).unwrap()).unwrap();
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r.device == "cpu" && r.stage == "only"));

    // The note is the run's, said once: a second stage has no energy and no repeat of it.
    let rec = recorder(root.path(), None, Duration::from_millis(20));
    rec.begin_stage("first");
    assert_eq!(rec.end_stage().findings, [NO_POWER_SOURCE]);
    rec.begin_stage("second");
    let second = rec.end_stage();
    assert_eq!(second.energy, None);
    assert!(second.findings.is_empty(), "{:?}", second.findings);
    drop(rec);

    let empty = tempfile::tempdir().unwrap();
    let csv_path = empty.path().join("telemetry.csv");
    let rec = recorder(
        empty.path(),
        Some(csv_path.clone()),
        Duration::from_millis(20),
    );
    rec.begin_stage("only");
    let stage = rec.end_stage();
    drop(rec);
    assert_eq!(stage.energy, None);
    assert_eq!(
        fs::read_to_string(&csv_path).unwrap(),
        format!("{}\n", csv::HEADER.join(","))
    );
}

#[test]
fn the_recorder_stops_at_once_even_with_a_long_interval() {
    let root = tempfile::tempdir().unwrap();
    let rec = recorder(root.path(), None, Duration::from_secs(60));
    rec.begin_stage("s");
    let started = Instant::now();
    let stage = rec.end_stage();
    drop(rec);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // The opening and closing samples, though the interval never came round.
    assert_eq!(stage.samples, 2);
}

#[test]
fn an_unwritable_csv_is_a_finding_not_a_failure() {
    let root = tempfile::tempdir().unwrap();
    let hwmon = amd_gpu(root.path(), "0000:0a:00.0", "hwmon2");
    write(&hwmon.join("power1_average"), "50000000\n");
    let rec = recorder(
        root.path(),
        Some(root.path().join("missing/telemetry.csv")),
        Duration::from_millis(20),
    );
    rec.begin_stage("s");
    let stage = rec.end_stage();
    assert!(stage.energy.is_some());
    assert!(
        stage
            .findings
            .iter()
            .any(|f| f.starts_with("telemetry not written:") && f.contains("missing/telemetry.csv")),
        "{stage:?}"
    );
    rec.begin_stage("t");
    let next = rec.end_stage();
    assert!(next.energy.is_some());
    assert!(next.findings.is_empty(), "said once: {next:?}");
}

// --- `tinyperf run` -------------------------------------------------------------------

fn run_inventory(root: &Path, state: &Path) -> (PathBuf, Value) {
    run_inventory_with(root, state, &[])
}

fn run_inventory_with(root: &Path, state: &Path, env: &[(&str, &str)]) -> (PathBuf, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .envs(env.iter().copied())
        .args(["run", "--suite", "inventory", "--events", "jsonl"])
        .arg("--state-dir")
        .arg(state)
        .arg("--root")
        .arg(root)
        .args(["--telemetry-interval", "0.05"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runs: Vec<PathBuf> = fs::read_dir(state.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let record = serde_json::from_slice(&fs::read(runs[0].join("run.json")).unwrap()).unwrap();
    (runs[0].clone(), record)
}

fn metric(stage: &Value, name: &str) -> Option<f64> {
    stage["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .map(|m| m["value"].as_f64().unwrap())
}

#[test]
fn a_run_on_the_red_box_records_gpu_power_rows_and_energy_metrics() {
    let state = tempfile::tempdir().unwrap();
    let (dir, record) = run_inventory(&fixture("tinybox-red"), state.path());
    let rows = csv::parse(&fs::read_to_string(dir.join("telemetry.csv")).unwrap()).unwrap();
    for (index, address) in ["0000:03:00.0", "0000:c3:00.0"].iter().enumerate() {
        let device = format!("gpu{}", index * 5);
        let power = 55.0 + 2.0 * (index * 5) as f64;
        assert!(
            rows.iter().any(|r| r.device == device
                && r.address.as_deref() == Some(address)
                && r.stage == "inventory"
                && r.power_w == Some(power)),
            "{rows:?}"
        );
    }
    assert!(rows
        .iter()
        .any(|r| r.device == "cpu" && r.temp_c == Some(48.5)));

    let stage = &record["stages"][0];
    let energy = metric(stage, "energy_j").expect("energy recorded");
    let mean = metric(stage, "mean_power_w").unwrap();
    // Six idle cards at 55, 57, … 65 W.
    assert!((mean - 360.0).abs() < 1e-6, "{stage:#}");
    assert!(energy > 0.0, "{stage:#}");
    let per_gpu: f64 = (0..6)
        .map(|n| metric(stage, &format!("gpu{n}_energy_j")).unwrap())
        .sum();
    assert!((per_gpu - energy).abs() < 1e-9);
    assert!((metric(stage, "energy_kwh").unwrap() - energy / 3.6e6).abs() < 1e-15);
    assert_eq!(metric(stage, "images_per_joule"), None);
    assert_eq!(record["summary"]["energy_j"].as_f64(), Some(energy));
    assert!(!stage["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == NO_POWER_SOURCE));
}

#[test]
fn a_run_without_power_sources_writes_cpu_rows_or_the_header_and_no_energy() {
    let state = tempfile::tempdir().unwrap();
    let (dir, record) = run_inventory(&fixture("no-gpu"), state.path());
    let text = fs::read_to_string(dir.join("telemetry.csv")).unwrap();
    let rows = csv::parse(&text).unwrap();
    assert!(!rows.is_empty(), "{text}");
    assert!(rows.iter().all(|r| r.device == "cpu"), "{text}");
    let stage = &record["stages"][0];
    assert_eq!(metric(stage, "energy_j"), None, "{stage:#}");
    assert!(
        stage["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == NO_POWER_SOURCE),
        "{stage:#}"
    );
    assert!(record["summary"].get("energy_j").is_none(), "{record:#}");

    let state = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let (dir, _) = run_inventory(empty.path(), state.path());
    assert_eq!(
        fs::read_to_string(dir.join("telemetry.csv")).unwrap(),
        format!("{}\n", csv::HEADER.join(","))
    );
}

#[test]
fn a_bad_telemetry_interval_is_a_usage_error() {
    let state = tempfile::tempdir().unwrap();
    for interval in ["0", "-1", "nan", "3600"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
            .args(["run", "inventory", "--state-dir"])
            .arg(state.path())
            .arg(format!("--telemetry-interval={interval}"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{interval}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("telemetry-interval"));
    }
    // Refused before anything was recorded.
    let runs = state.path().join("runs");
    assert!(!runs.exists() || fs::read_dir(&runs).unwrap().next().is_none());
}

/// Compiles the fake NVML from tests/fixtures into `dir`, under the names the
/// bindings look for (the unversioned one first, so it wins over a real driver's).
fn build_fake_libnvidia_ml(dir: &Path) {
    let source = fixture("fake-libnvidia-ml/fake_libnvidia_ml.c");
    let target = dir.join("libnvidia-ml.so.1");
    let output = Command::new("gcc")
        .args(["-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o"])
        .arg(&target)
        .arg(&source)
        .output()
        .expect("gcc runs (apt-get install gcc)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::os::unix::fs::symlink(&target, dir.join("libnvidia-ml.so")).unwrap();
}

#[test]
fn a_run_with_fake_libnvidia_ml_records_nvml_power_and_names_hot_and_throttled_gpus() {
    let libs = tempfile::tempdir().unwrap();
    build_fake_libnvidia_ml(libs.path());
    let empty_root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let lib_path = libs.path().to_str().unwrap();
    let (dir, record) = run_inventory_with(
        empty_root.path(),
        state.path(),
        &[
            ("LD_LIBRARY_PATH", lib_path),
            ("ROCM_PATH", empty_root.path().to_str().unwrap()),
            ("FAKE_NVML_DEVICES", "2"),
            ("FAKE_NVML_HOT", "0"),
            ("FAKE_NVML_THROTTLED", "1"),
        ],
    );
    let rows = csv::parse(&fs::read_to_string(dir.join("telemetry.csv")).unwrap()).unwrap();
    let gpu1 = rows
        .iter()
        .find(|r| r.device == "gpu1")
        .unwrap_or_else(|| panic!("{rows:?} {record:#}"));
    assert_eq!(gpu1.address.as_deref(), Some("0000:0b:00.0"));
    assert_eq!(gpu1.power_w, Some(351.0));
    assert_eq!(gpu1.temp_c, Some(61.0));
    assert_eq!(gpu1.temp_limit_c, Some(90.0));
    assert_eq!(gpu1.sm_clock_mhz, Some(2520.0));
    assert_eq!(gpu1.mem_clock_mhz, Some(10501.0));
    assert_eq!(gpu1.util_percent, Some(98.0));
    assert_eq!(
        gpu1.throttling,
        Some(vec![ThrottleReason::SwPowerCap, ThrottleReason::HwThermal])
    );
    let gpu0 = rows.iter().find(|r| r.device == "gpu0").unwrap();
    assert_eq!(gpu0.throttling, Some(vec![]));
    assert_eq!(gpu0.temp_c, Some(93.0));

    let stage = &record["stages"][0];
    assert!(
        (metric(stage, "mean_power_w").unwrap() - 701.0).abs() < 1e-6,
        "{stage:#}"
    );
    assert!(record["summary"]["energy_j"].as_f64().unwrap() > 0.0);
    let findings: Vec<&str> = stage["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        findings.iter().any(|f| f.starts_with(
            "GPU 0000:0a:00.0: gpu temperature reached 93 °C, at or above its limit of 90 °C"
        )),
        "{findings:#?}"
    );
    assert!(
        findings
            .iter()
            .any(|f| f.starts_with("GPU 0000:0b:00.0: throttled by sw_power_cap, hw_thermal")),
        "{findings:#?}"
    );
    assert!(!findings.contains(&NO_POWER_SOURCE), "{findings:#?}");
}

/// A worker process that is killed and reaped however the test ends.
struct Worker(std::process::Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a recorded acceptance run on the red box whose GEMM stage lasts long enough
/// to be interrupted, and waits until that stage's rows are in its telemetry.csv.
fn start_long_run(state: &Path) -> (Worker, PathBuf) {
    let worker = Worker(
        Command::new(env!("CARGO_BIN_EXE_tinyperf"))
            .args(["run", "acceptance", "--events", "jsonl"])
            .args(["-o", "gemm_seconds=60", "-o", "gemm_size=128"])
            .arg("--state-dir")
            .arg(state)
            .arg("--root")
            .arg(fixture("tinybox-red"))
            .args(["--telemetry-interval", "0.05"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let csv_path = fs::read_dir(state.join("runs"))
            .ok()
            .and_then(|mut runs| runs.next())
            .map(|run| run.unwrap().path().join("telemetry.csv"));
        if let Some(path) = csv_path {
            let text = fs::read_to_string(&path).unwrap_or_default();
            if text.matches(",cpu-gemm,").count() >= 14 {
                return (worker, path);
            }
        }
        assert!(Instant::now() < deadline, "no cpu-gemm telemetry in time");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_with_limit(worker: &mut Worker, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = worker.0.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the run did not end within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_cancelled_run_stops_sampling_and_records_the_energy_it_measured() {
    let state = tempfile::tempdir().unwrap();
    let (mut worker, csv_path) = start_long_run(state.path());
    let sent = Command::new("kill")
        .args(["-TERM", &worker.0.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = wait_with_limit(&mut worker, Duration::from_secs(20));
    assert_eq!(status.code(), Some(1));
    let rows = csv::parse(&fs::read_to_string(&csv_path).unwrap()).unwrap();
    assert!(rows.iter().any(|r| r.stage == "cpu-gemm"));
    // The sampler ended with the run: nothing more is written.
    let length = fs::metadata(&csv_path).unwrap().len();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(fs::metadata(&csv_path).unwrap().len(), length);
    let record: Value =
        serde_json::from_slice(&fs::read(csv_path.with_file_name("run.json")).unwrap()).unwrap();
    assert_eq!(record["state"], "cancelled");
    let gemm = record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "cpu-gemm")
        .unwrap();
    assert!(metric(gemm, "energy_j").unwrap() > 0.0, "{gemm:#}");
    assert!((metric(gemm, "mean_power_w").unwrap() - 360.0).abs() < 1e-6);
}

#[test]
fn a_killed_worker_leaves_a_readable_telemetry_prefix() {
    let state = tempfile::tempdir().unwrap();
    let (mut worker, csv_path) = start_long_run(state.path());
    worker.0.kill().unwrap();
    worker.0.wait().unwrap();
    let text = fs::read_to_string(&csv_path).unwrap();
    let rows = csv::parse(&text).unwrap();
    assert!(rows.len() >= 14, "{text}");
    assert!(rows
        .iter()
        .all(|r| r.device == "cpu" || r.power_w.is_some()));
}

#[test]
fn an_rdna3_card_held_back_by_heat_and_power_says_so_through_gpu_metrics() {
    let mut sampler = Sampler::discover_sysfs(&fixture("red-throttling"));
    let sample = sampler.sample(1.0);
    let held = sample
        .gpus
        .iter()
        .find(|g| g.address.as_deref() == Some("0000:43:00.0"))
        .unwrap();
    assert_eq!(
        held.throttling,
        Some(vec![ThrottleReason::SwPowerCap, ThrottleReason::HwThermal])
    );
    let others: Vec<_> = sample
        .gpus
        .iter()
        .filter(|g| g.address.as_deref() != Some("0000:43:00.0"))
        .map(|g| g.throttling.clone())
        .collect();
    assert!(others.iter().all(|t| t == &Some(vec![])), "{others:?}");
    let mut watch = LimitWatch::default();
    watch.observe(&sample);
    let findings = watch.findings();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert!(findings[0].contains("0000:43:00.0"), "{}", findings[0]);
    assert!(
        findings[0].contains("sw_power_cap, hw_thermal"),
        "{}",
        findings[0]
    );
}
