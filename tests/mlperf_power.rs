//! MLPerf power logs from each kind of source: wall power through an `ipmitool`
//! stand-in (tests/fixtures/mlperf/ipmitool-stand-in, a script that answers as a BMC
//! would), and GPU plus CPU package power from hwmon and powercap trees on disk.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::runs::ipmitool_stand_in;
use tinyperf::mlperf::energy::node_energy_j;
use tinyperf::mlperf::log::MlLogText;
use tinyperf::mlperf::power_log::PowerLog;
use tinyperf::runtime::power::ipmi::{parse_dcmi_reading, IpmiPower};
use tinyperf::runtime::power::rapl::RaplPower;
use tinyperf::runtime::power::{PowerKind, PowerMeter};

#[test]
fn the_ipmitool_stand_in_reads_as_a_bmc() {
    let bmc = IpmiPower::open(ipmitool_stand_in()).expect("the stand-in answers");
    assert_eq!(bmc.read(), Ok(400.0));
    let text = "    Instantaneous power reading:   1234 Watts\n    Power reading state is:   deactivated\n";
    assert!(parse_dcmi_reading(text)
        .unwrap_err()
        .contains("deactivated"));
    let missing = IpmiPower::open(PathBuf::from("/nonexistent/ipmitool")).unwrap_err();
    assert!(missing.contains("cannot run"), "{missing}");
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// A machine with one amdgpu drawing 150 W (hwmon) and one CPU package (powercap),
/// and a BMC device node but no ipmitool.
fn component_tree(root: &Path) -> PathBuf {
    let hwmon = common::amdgpu_sysfs(root, "0000:03:00.0", "hwmon2");
    write(&hwmon.join("power1_average"), "150000000\n");
    let package = root.join("sys/class/powercap/intel-rapl:0");
    write(&package.join("name"), "package-0\n");
    write(&package.join("energy_uj"), "1000000\n");
    write(&package.join("max_energy_range_uj"), "262143328850\n");
    // A sub-zone inside the package, counted with it already.
    write(
        &root.join("sys/class/powercap/intel-rapl:0:0/name"),
        "core\n",
    );
    write(
        &root.join("sys/class/powercap/intel-rapl:0:0/energy_uj"),
        "5\n",
    );
    write(&root.join("dev/ipmi0"), "");
    package.join("energy_uj")
}

#[test]
fn rapl_counters_give_package_power_and_wrap() {
    let root = tempfile::tempdir().unwrap();
    let counter = component_tree(root.path());
    let mut rapl = RaplPower::discover(root.path()).expect("a package");
    assert_eq!(rapl.packages(), 1);
    assert_eq!(rapl.read(), None, "the first read only primes");
    let before = Instant::now();
    std::thread::sleep(Duration::from_millis(400));
    write(&counter, "41000000\n");
    let watts = rapl.read().unwrap();
    let elapsed = before.elapsed().as_secs_f64();
    assert!(
        watts <= 40.0 / 0.4 + 1.0 && watts >= 40.0 / (elapsed + 0.2),
        "{watts} W"
    );
    // The counter wrapped: it went past its range and started again.
    write(&counter, "1000000\n");
    let wrapped = rapl.read().unwrap();
    assert!(wrapped > 1000.0, "{wrapped} W");
    assert!(RaplPower::discover(Path::new("/nonexistent")).is_none());
}

#[test]
fn without_a_bmc_the_components_are_summed_and_labelled() {
    let root = tempfile::tempdir().unwrap();
    let counter = component_tree(root.path());
    let mut meter = PowerMeter::discover_sysfs(root.path()).expect("components");
    assert_eq!(meter.kind(), PowerKind::Components);
    assert!(meter.label().contains("GPU power"), "{}", meter.label());
    assert!(meter.label().contains("RAPL"), "{}", meter.label());
    assert!(
        meter.label().contains("not wall power"),
        "{}",
        meter.label()
    );
    assert!(
        meter
            .findings
            .iter()
            .any(|f| f.contains("ipmitool is not installed")),
        "{:?}",
        meter.findings
    );
    std::thread::sleep(Duration::from_millis(300));
    write(&counter, "31000000\n");
    let watts = meter.read().unwrap();
    assert!(
        watts > 150.0 + 30.0 && watts < 150.0 + 30.0 / 0.3 + 1.0,
        "{watts} W"
    );

    // A power log of a few seconds from the same sources.
    let log_path = root.path().join("power.txt");
    let log = PowerLog::prepare_sysfs(root.path(), &log_path);
    assert!(log.source.as_ref().unwrap().contains("not wall power"));
    log.begin();
    std::thread::sleep(Duration::from_millis(2500));
    let outcome = log.finish().expect("logged");
    assert!(!outcome.wall);
    assert!(outcome.readings >= 2, "{outcome:?}");
    let text = fs::read_to_string(&log_path).unwrap();
    let parsed = MlLogText::parse(&text);
    assert!(parsed.bad_lines.is_empty());
    let keys: Vec<&str> = parsed.entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys.first(), Some(&"power_measurement_start"));
    assert_eq!(keys[1], "power_source");
    assert_eq!(keys.last(), Some(&"power_measurement_stop"));
    assert!(parsed.entries.iter().all(|e| e.meta("host").is_some()));
    // At least the GPU's 150 W over the window.
    let window = parsed.entries.last().unwrap().time_ms - parsed.entries[0].time_ms;
    let joules = node_energy_j(&parsed, window).unwrap();
    assert!(
        joules >= 150.0 * window / 1000.0 * 0.5,
        "{joules} J over {window} ms"
    );
}

#[test]
fn no_source_at_all_says_why() {
    let root = tempfile::tempdir().unwrap();
    let why = PowerMeter::discover_sysfs(root.path())
        .err()
        .expect("nothing to read");
    assert!(why.contains("no power source"), "{why}");
    let log = PowerLog::prepare_sysfs(root.path(), &root.path().join("power.txt"));
    assert!(log.source.is_err());
    assert!(log.finish().unwrap_err().contains("no power source"));
    assert!(!root.path().join("power.txt").exists());
}
