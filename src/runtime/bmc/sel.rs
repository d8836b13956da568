//! The BMC's system event log as `ipmitool sel elist` prints it, each event classed as
//! serious, a warning or informational; and the mark that says which events a previous
//! run already judged.
//!
//! A line looks like `   1 | 11/27/2024 | 10:15:02 | Power Supply PSU1 Status | Failure
//! detected () | Asserted`. Record ids are hex. Events logged before the BMC's clock was set
//! carry `Pre-Init` (or `PreInit`) and a counter instead of a date; OEM records carry raw
//! bytes instead of a sensor event. A line that fits none of this is kept as informational.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::BmcError;

/// The file in the state folder that holds the [`SelMark`] of the last judged run.
pub const MARK_FILE: &str = "bmc-sel.json";

/// How much an event matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Nothing to act on: deassertions, presence, buttons, OEM records, a cleared log.
    Informational,
    /// Worth knowing: non-critical thresholds, corrected memory errors.
    Warning,
    /// A broken or failing part: a failed supply, a stopped fan, a critical temperature.
    Serious,
}

impl Severity {
    /// The word the records use.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Informational => "informational",
            Severity::Warning => "warning",
            Severity::Serious => "serious",
        }
    }
}

/// Whether the event says a condition began or ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// The condition began.
    Asserted,
    /// The condition ended.
    Deasserted,
    /// The line does not say (OEM records, cut lines).
    Unknown,
}

/// One event of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelEvent {
    /// The record id as ipmitool prints it (hex, `1a`); empty for a line with none.
    pub id: String,
    /// `MM/DD/YYYY HH:MM:SS` as the BMC keeps it; `None` before its clock was set.
    pub time: Option<String>,
    /// The sensor type (`Power Supply`, `Fan`); empty when the line does not say.
    pub sensor_type: String,
    /// The sensor's name (`PSU1 Status`, `#0x51`).
    pub sensor_name: String,
    /// What happened (`Failure detected ()`, `Lower Critical going low`).
    pub description: String,
    /// Whether it began or ended.
    pub direction: Direction,
    /// How much it matters.
    pub severity: Severity,
}

impl SelEvent {
    /// The sensor as the log names it: type and name.
    pub fn sensor(&self) -> String {
        match (self.sensor_type.is_empty(), self.sensor_name.is_empty()) {
            (false, false) => format!("{} {}", self.sensor_type, self.sensor_name),
            (false, true) => self.sensor_type.clone(),
            _ => self.sensor_name.clone(),
        }
    }

    /// The event in words: sensor, description, time and record id.
    pub fn describe(&self) -> String {
        let when = self
            .time
            .as_deref()
            .unwrap_or("before the BMC's clock was set");
        let id = if self.id.is_empty() { "?" } else { &self.id };
        let sensor = self.sensor();
        let what = match (sensor.is_empty(), self.description.is_empty()) {
            (true, _) => self.description.clone(),
            (false, true) => sensor,
            (false, false) => format!("{sensor}: {}", self.description),
        };
        let ended = if self.direction == Direction::Deasserted {
            " (deasserted)"
        } else {
            ""
        };
        format!("{what}{ended} at {when} (record {id})")
    }
}

/// Sensor types as ipmitool names them, longest first where one begins another.
const SENSOR_TYPES: &[&str] = &[
    "System Firmware Progress",
    "System Firmware Error",
    "System Firmwares",
    "System ACPI Power State",
    "System Boot Initiated",
    "System Event",
    "Event Logging Disabled",
    "Management Subsys Health",
    "Physical Security",
    "Platform Security",
    "Platform Alert",
    "Power Supply",
    "Power Unit",
    "Cooling Device",
    "Drive Slot / Bay",
    "Drive Slot",
    "POST Memory Resize",
    "Critical Interrupt",
    "Module / Board",
    "Microcontroller",
    "Add-in Card",
    "Chip Set",
    "Other FRU",
    "Cable / Interconnect",
    "Cable/Interconnect",
    "Boot Error",
    "OS Boot",
    "OS Critical Stop",
    "Slot / Connector",
    "Entity Presence",
    "Monitor ASIC",
    "Session Audit",
    "Version Change",
    "FRU State",
    "Temperature",
    "Voltage",
    "Current",
    "Fan",
    "Processor",
    "Memory",
    "Watchdog1",
    "Watchdog2",
    "Watchdog",
    "Button",
    "Chassis",
    "Terminator",
    "LAN",
    "Battery",
    "Other",
];

/// Every event of `ipmitool sel elist` output, in the order printed (oldest first).
/// Blank lines and ipmitool's own notes (`SEL has no entries`) are skipped; any other line
/// that does not parse is kept as an informational event whose description is the line.
pub fn parse_elist(text: &str) -> Vec<SelEvent> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<SelEvent> {
    let trimmed = line.trim();
    if trimmed.is_empty() || trimmed.eq_ignore_ascii_case("SEL has no entries") {
        return None;
    }
    let fields: Vec<&str> = trimmed.split('|').map(str::trim).collect();
    let id = fields[0];
    if fields.len() < 2 || id.is_empty() || !id.chars().all(|c| c.is_ascii_hexdigit()) {
        return Some(unparsed(trimmed));
    }
    let id = id.to_ascii_lowercase();
    // An OEM record without a timestamp: `5 | OEM record e0 | 000000...`.
    if fields[1].starts_with("OEM record") {
        return Some(SelEvent {
            id,
            time: None,
            sensor_type: String::new(),
            sensor_name: fields[1].to_string(),
            description: fields[2..].join(" | "),
            direction: Direction::Unknown,
            severity: Severity::Informational,
        });
    }
    if fields.len() < 4 {
        return Some(SelEvent {
            id,
            ..unparsed(trimmed)
        });
    }
    let date = fields[1];
    let time = if is_pre_init(date) || date.is_empty() {
        None
    } else {
        Some(format!("{date} {}", fields[2]).trim().to_string())
    };
    let sensor = fields[3];
    if sensor.starts_with("OEM record") {
        return Some(SelEvent {
            id,
            time,
            sensor_type: String::new(),
            sensor_name: sensor.to_string(),
            description: fields[4..].join(" | "),
            direction: Direction::Unknown,
            severity: Severity::Informational,
        });
    }
    let (sensor_type, sensor_name) = split_sensor(sensor);
    let rest = &fields[4.min(fields.len())..];
    // The direction is the last field that names one; a description may itself hold a
    // `|` (`Uncorrectable ECC (UnCorrectable ECC | DIMMD7)`), and some ipmitool versions
    // add the reading after the direction.
    let at = rest.iter().rposition(|f| direction_of(f).is_some());
    let (description, direction) = match at {
        Some(i) => (
            rest[..i].join(" | "),
            direction_of(rest[i]).unwrap_or(Direction::Unknown),
        ),
        None => (rest.join(" | "), Direction::Unknown),
    };
    let severity = classify(&sensor_type, &sensor_name, &description, direction);
    Some(SelEvent {
        id,
        time,
        sensor_type,
        sensor_name,
        description,
        direction,
        severity,
    })
}

fn unparsed(line: &str) -> SelEvent {
    SelEvent {
        id: String::new(),
        time: None,
        sensor_type: String::new(),
        sensor_name: String::new(),
        description: line.to_string(),
        direction: Direction::Unknown,
        severity: Severity::Informational,
    }
}

fn is_pre_init(date: &str) -> bool {
    let d = date.to_ascii_lowercase().replace(['-', ' '], "");
    d == "preinit"
}

fn direction_of(field: &str) -> Option<Direction> {
    match field.to_ascii_lowercase().as_str() {
        "asserted" => Some(Direction::Asserted),
        "deasserted" => Some(Direction::Deasserted),
        _ => None,
    }
}

/// `Power Supply PSU1 Status` → (`Power Supply`, `PSU1 Status`); a sensor whose type is not
/// known keeps the whole text as its name.
fn split_sensor(sensor: &str) -> (String, String) {
    for kind in SENSOR_TYPES {
        let Some(head) = sensor.get(..kind.len()) else {
            continue;
        };
        if head.eq_ignore_ascii_case(kind) {
            let rest = &sensor[kind.len()..];
            if rest.is_empty() || rest.starts_with(' ') {
                return (kind.to_string(), rest.trim().to_string());
            }
        }
    }
    (String::new(), sensor.to_string())
}

/// How much an event matters, from its sensor type, name, description and direction.
/// Pure: the same words always get the same class.
pub fn classify(
    sensor_type: &str,
    sensor_name: &str,
    description: &str,
    direction: Direction,
) -> Severity {
    if direction == Direction::Deasserted {
        return Severity::Informational;
    }
    let t = sensor_type.to_ascii_lowercase();
    let name = sensor_name.to_ascii_lowercase();
    let d = description.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| d.contains(w));
    if has(&[
        "log area reset",
        "log area cleared",
        "presence detected",
        "device present",
    ]) || t == "button"
        || sensor_name.starts_with("OEM record")
    {
        return Severity::Informational;
    }
    let non_recoverable = has(&["non-recoverable", "nonrecoverable"]);
    // "Critical going" but not "Non-critical going": a critical threshold was crossed.
    let critical = d.replace("non-critical", "").contains("critical going")
        || has(&["transition to critical"]);
    let non_critical = has(&["non-critical"]);
    let fan = t == "fan" || name.contains("fan");
    match t.as_str() {
        "power supply"
            if has(&[
                "failure detected",
                "predictive failure",
                "ac lost",
                "input lost",
                "out-of-range",
                "out of range",
                "config error",
            ]) =>
        {
            return Severity::Serious;
        }
        "memory" => {
            if has(&["uncorrectable"]) {
                return Severity::Serious;
            }
            if has(&["correctable ecc", "correctable memory"]) {
                return Severity::Warning;
            }
        }
        "processor" => {
            if has(&[
                "ierr",
                "thermal trip",
                "frb1",
                "frb2",
                "frb3",
                "uncorrectable machine check",
            ]) {
                return Severity::Serious;
            }
            if has(&["throttled", "correctable machine check"]) {
                return Severity::Warning;
            }
        }
        "watchdog2" | "watchdog1" | "watchdog" => {
            if has(&["hard reset", "power cycle", "power down"]) {
                return Severity::Serious;
            }
            return Severity::Warning;
        }
        "critical interrupt" => {
            if has(&["fatal", "serr", "uncorrectable", "nmi"]) {
                return Severity::Serious;
            }
            if has(&["correctable"]) {
                return Severity::Warning;
            }
        }
        "os critical stop" => return Severity::Warning,
        _ => {}
    }
    if fan && (has(&["failure", "fault"]) || non_recoverable || critical) {
        return Severity::Serious;
    }
    // Temperature, voltage, current and any other threshold sensor.
    if non_recoverable || critical {
        return Severity::Serious;
    }
    if non_critical || has(&["redundancy lost", "redundancy degraded"]) {
        return Severity::Warning;
    }
    Severity::Informational
}

/// Where the last judged run left the log: its newest record id and its number of entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelMark {
    /// The newest record id the run judged (hex, as ipmitool prints it).
    pub last_id: String,
    /// How many entries the log held then.
    pub entries: usize,
}

impl SelMark {
    /// The mark `events` leave: their newest id and how many there are; `None` for an
    /// empty log.
    pub fn of(events: &[SelEvent]) -> Option<SelMark> {
        let last = events.iter().rev().find(|e| !e.id.is_empty())?;
        Some(SelMark {
            last_id: last.id.clone(),
            entries: events.len(),
        })
    }
}

/// The events new since `mark`, and whether the log was cleared since (fewer entries than
/// the mark counted, or the marked record gone): a cleared log is judged whole, as is one
/// with no mark.
pub fn new_since<'a>(events: &'a [SelEvent], mark: Option<&SelMark>) -> (&'a [SelEvent], bool) {
    let Some(mark) = mark else {
        return (events, false);
    };
    if events.len() < mark.entries {
        return (events, true);
    }
    match events.iter().rposition(|e| e.id == mark.last_id) {
        Some(i) => (&events[i + 1..], false),
        None => (events, true),
    }
}

/// The mark kept in `path`; `None` when there is none or it cannot be read, so the next
/// judgement falls back to the whole log instead of failing.
pub fn load_mark(path: &Path) -> Option<SelMark> {
    let bytes = std::fs::read(path).ok()?;
    if bytes.len() > 64 * 1024 {
        return None;
    }
    serde_json::from_slice(&bytes).ok()
}

/// Writes `mark` to `path` through a temporary file renamed over it, so a crash leaves the
/// old mark or the new one, never half of one.
pub fn save_mark(path: &Path, mark: &SelMark) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(mark).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Runs `ipmitool sel elist` and parses it.
pub fn read(ipmitool: &Path) -> Result<Vec<SelEvent>, BmcError> {
    Ok(parse_elist(&super::run(ipmitool, &["sel", "elist"])?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> SelEvent {
        let events = parse_elist(line);
        assert_eq!(events.len(), 1, "{events:?}");
        events.into_iter().next().unwrap()
    }

    #[test]
    fn reads_a_power_supply_failure_as_serious() {
        let e = one("   1 | 11/27/2024 | 10:15:02 | Power Supply PSU1 Status | Failure detected () | Asserted");
        assert_eq!(e.id, "1");
        assert_eq!(e.time.as_deref(), Some("11/27/2024 10:15:02"));
        assert_eq!(e.sensor_type, "Power Supply");
        assert_eq!(e.sensor_name, "PSU1 Status");
        assert_eq!(e.description, "Failure detected ()");
        assert_eq!(e.direction, Direction::Asserted);
        assert_eq!(e.severity, Severity::Serious);
        assert_eq!(
            e.describe(),
            "Power Supply PSU1 Status: Failure detected () at 11/27/2024 10:15:02 (record 1)"
        );
    }

    #[test]
    fn a_deasserted_failure_is_informational() {
        let e = one("   2 | 11/27/2024 | 10:16:02 | Power Supply PSU1 Status | Failure detected () | Deasserted");
        assert_eq!(e.direction, Direction::Deasserted);
        assert_eq!(e.severity, Severity::Informational);
        assert!(e.describe().contains("(deasserted)"));
    }

    #[test]
    fn pre_init_events_have_no_time() {
        for line in [
            "   e |  Pre-Init  |0000000093| System ACPI Power State #0xd5 | S0/G0: working | Asserted",
            "   f | PreInit    | 0000000094 | Power Supply #0x51 | Power Supply AC lost | Asserted",
        ] {
            let e = one(line);
            assert_eq!(e.time, None, "{line}");
            assert!(e.describe().contains("before the BMC's clock was set"));
        }
        let ac = one(
            "   f | PreInit | 0000000094 | Power Supply #0x51 | Power Supply AC lost | Asserted",
        );
        assert_eq!(ac.sensor_type, "Power Supply");
        assert_eq!(ac.sensor_name, "#0x51");
        assert_eq!(ac.severity, Severity::Serious);
    }

    #[test]
    fn oem_records_are_kept_as_informational() {
        let timed = one("  1c | 09/18/2026 | 14:10:00 | OEM record df | 040320");
        assert_eq!(timed.id, "1c");
        assert_eq!(timed.sensor_name, "OEM record df");
        assert_eq!(timed.description, "040320");
        assert_eq!(timed.severity, Severity::Informational);
        let untimed = one("   5 | OEM record e0 | 00000000000000000000000000");
        assert_eq!(untimed.time, None);
        assert_eq!(untimed.direction, Direction::Unknown);
    }

    #[test]
    fn classes_follow_the_sensor_and_the_threshold() {
        let cases = [
            (
                "Fan FAN3 | Lower Critical going low | Asserted",
                Severity::Serious,
            ),
            (
                "Fan #0x30 | Lower Non-recoverable going low | Asserted",
                Severity::Serious,
            ),
            (
                "Fan FAN3 | Lower Non-critical going low | Asserted",
                Severity::Warning,
            ),
            (
                "Fan PSU1 Slow FAN1 | Transition to Non-recoverable | Asserted",
                Severity::Serious,
            ),
            (
                "Temperature CPU1 Temp | Upper Critical going high | Asserted",
                Severity::Serious,
            ),
            (
                "Temperature CPU1 Temp | Upper Non-recoverable going high | Asserted",
                Severity::Serious,
            ),
            (
                "Temperature CPU1 Temp | Upper Non-critical going high | Asserted",
                Severity::Warning,
            ),
            (
                "Voltage 12V | Lower Critical going low | Asserted",
                Severity::Serious,
            ),
            (
                "Voltage 12V | Upper Non-critical going high | Asserted",
                Severity::Warning,
            ),
            (
                "Memory #0x53 | Correctable ECC | Asserted",
                Severity::Warning,
            ),
            (
                "Memory DIMM A3 | Uncorrectable ECC | Asserted",
                Severity::Serious,
            ),
            ("Processor CPU0 | IERR | Asserted", Severity::Serious),
            (
                "Processor CPU0 | Thermal Trip | Asserted",
                Severity::Serious,
            ),
            ("Watchdog2 #0x03 | Hard reset | Asserted", Severity::Serious),
            (
                "Watchdog2 #0x03 | Power cycle | Asserted",
                Severity::Serious,
            ),
            (
                "Power Supply PS1 Status | Predictive failure | Asserted",
                Severity::Serious,
            ),
            (
                "Power Supply PS1 Status | Power Supply input lost (AC/DC) | Asserted",
                Severity::Serious,
            ),
            (
                "Power Supply PS1 Status | Presence detected | Asserted",
                Severity::Informational,
            ),
            (
                "Event Logging Disabled #0x07 | Log area reset/cleared | Asserted",
                Severity::Informational,
            ),
            (
                "Button Button | Power Button pressed | Asserted",
                Severity::Informational,
            ),
            (
                "Power Unit Pwr Unit Status | Power off/down | Asserted",
                Severity::Informational,
            ),
            (
                "System Firmware Progress #0x05 | Motherboard initialization | Asserted",
                Severity::Informational,
            ),
        ];
        for (tail, expected) in cases {
            let e = one(&format!("   9 | 01/01/2025 | 00:00:00 | {tail}"));
            assert_eq!(e.severity, expected, "{tail}");
        }
    }

    #[test]
    fn a_description_with_a_bar_and_a_trailing_reading_keep_their_direction() {
        let e = one("  34 | 02/25/2025 | 04:50:09 PM EST | Memory #0x02 | Uncorrectable ECC (UnCorrectable ECC |  DIMMD7) | Asserted");
        assert_eq!(
            e.description,
            "Uncorrectable ECC (UnCorrectable ECC | DIMMD7)"
        );
        assert_eq!(e.severity, Severity::Serious);
        let e = one("  8d | 04/06/26 | 04:34:55 CEST | Fan CPU_FAN1 | Lower Critical going low  | Asserted | Reading 0 < Threshold 100 RPM");
        assert_eq!(e.direction, Direction::Asserted);
        assert_eq!(e.sensor_name, "CPU_FAN1");
        assert_eq!(e.severity, Severity::Serious);
    }

    #[test]
    fn lines_that_do_not_parse_are_kept_not_dropped() {
        let events = parse_elist(
            "SEL has no entries\n\n   9 | Linux kernel panic: Fatal excep\ngarbage with no bars\n   a | 01/01/2025 | 00:00:00\n",
        );
        assert_eq!(events.len(), 3, "{events:?}");
        assert!(events.iter().all(|e| e.severity == Severity::Informational));
        assert_eq!(events[0].id, "9");
        assert_eq!(events[1].id, "");
        assert_eq!(events[1].description, "garbage with no bars");
        assert_eq!(events[2].id, "a");
    }

    #[test]
    fn a_field_missing_gives_an_unknown_direction() {
        let e = one("   3 | 01/01/2025 | 00:00:00 | Fan FAN1 | Lower Critical going low");
        assert_eq!(e.direction, Direction::Unknown);
        assert_eq!(e.severity, Severity::Serious);
        let e = one("   4 | 01/01/2025 | 00:00:00 | Temperature #0x30");
        assert_eq!(e.description, "");
        assert_eq!(e.severity, Severity::Informational);
    }

    #[test]
    fn never_panics_on_odd_bytes() {
        for line in [
            "|",
            "||||||",
            "  | | | |",
            "ff",
            "é | ü | ß | ∑",
            "1 | | | | | | | |",
        ] {
            let _ = parse_elist(line);
        }
        let _ = split_sensor("Fané");
    }

    fn log(ids: &[&str]) -> Vec<SelEvent> {
        ids.iter()
            .map(|id| one(&format!("{id:>4} | 01/01/2025 | 00:00:00 | Fan FAN1 | Lower Critical going low | Asserted")))
            .collect()
    }

    #[test]
    fn only_events_after_the_mark_are_new() {
        let events = log(&["1", "2", "3", "4"]);
        let mark = SelMark {
            last_id: "2".into(),
            entries: 2,
        };
        let (new, cleared) = new_since(&events, Some(&mark));
        assert!(!cleared);
        assert_eq!(
            new.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
            ["3", "4"]
        );
        let same = SelMark::of(&events).unwrap();
        assert_eq!(
            same,
            SelMark {
                last_id: "4".into(),
                entries: 4
            }
        );
        assert!(new_since(&events, Some(&same)).0.is_empty());
        assert_eq!(new_since(&events, None).0.len(), 4);
    }

    #[test]
    fn a_cleared_log_is_judged_whole() {
        let before = SelMark {
            last_id: "4".into(),
            entries: 4,
        };
        // Fewer entries than the mark counted.
        let shorter = log(&["1", "2"]);
        let (new, cleared) = new_since(&shorter, Some(&before));
        assert!(cleared);
        assert_eq!(new.len(), 2);
        // As many or more, but the marked record is gone.
        let renumbered = log(&["1", "2", "3", "5", "6"]);
        let (new, cleared) = new_since(&renumbered, Some(&before));
        assert!(cleared);
        assert_eq!(new.len(), 5);
        assert_eq!(SelMark::of(&[]), None);
    }

    #[test]
    fn the_mark_survives_a_round_trip_and_a_bad_file_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state").join(MARK_FILE);
        assert_eq!(load_mark(&path), None);
        let mark = SelMark {
            last_id: "1a".into(),
            entries: 26,
        };
        save_mark(&path, &mark).unwrap();
        assert_eq!(load_mark(&path), Some(mark));
        std::fs::write(&path, "not json").unwrap();
        assert_eq!(load_mark(&path), None);
    }
}
