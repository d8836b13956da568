//! The agent's configuration: `/etc/tinyperf/tinyperf.toml`, then command-line overrides.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The configuration file read when `--config` is not given; it may be absent.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/tinyperf/tinyperf.toml";
/// The default of `listen`: every address, port 8470.
pub const DEFAULT_LISTEN: &str = "[::]:8470";
/// The default of `state_dir`: the state folder (runs in `runs/`, generated datasets in
/// `cache/`).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/tinyperf";
/// The default of `token_file`: the HTTP write token; without the file, HTTP writes are
/// disabled.
pub const DEFAULT_TOKEN_FILE: &str = "/etc/tinyperf/token";
/// The default of `dataset`: the ImageNet root (`train/` and `val/`).
pub const DEFAULT_DATASET: &str = "/raid/datasets/imagenet";
pub use crate::record::store::DEFAULT_RETENTION;
/// The default of `cancel_grace_s`: seconds a cancelled worker has between SIGTERM and
/// SIGKILL.
pub const DEFAULT_CANCEL_GRACE_S: f64 = 10.0;
/// The default of `http_max_connections`: HTTP connections served at once.
pub const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 256;
/// The default of `http_max_connections_per_peer`: HTTP connections served at once to one
/// client address.
pub const DEFAULT_HTTP_MAX_CONNECTIONS_PER_PEER: usize = 64;
/// The default of `http_idle_timeout_s`: seconds an HTTP connection may wait between
/// requests.
pub const DEFAULT_HTTP_IDLE_TIMEOUT_S: f64 = 10.0;
/// The default of `http_send_timeout_s`: seconds an HTTP client may leave a response
/// untaken.
pub const DEFAULT_HTTP_SEND_TIMEOUT_S: f64 = 10.0;
/// The default of `min_free_space_mb`: MiB the state folder must keep free to start a run.
pub const DEFAULT_MIN_FREE_SPACE_MB: u64 = 512;
/// The tinybox front display's control socket (tinyos's display service).
pub const DEFAULT_FRONT_DISPLAY_SOCKET: &str = "/run/tinybox-screen.sock";
/// The default of `electricity_usd_per_kwh`: dollars per kWh, for the pages' energy cost.
pub const DEFAULT_ELECTRICITY_USD_PER_KWH: f64 = 0.15;
const MIB: u64 = 1024 * 1024;

/// Why the configuration could not be loaded; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists (or was named explicitly) but could not be read.
    #[error("cannot read configuration {path}: {source}")]
    Read {
        /// The file that could not be read.
        path: PathBuf,
        /// What reading it failed with.
        source: std::io::Error,
    },
    /// The file parses badly, has an unknown key or a value out of range.
    #[error("invalid configuration {path}: {message}")]
    Invalid {
        /// The file whose content is wrong.
        path: PathBuf,
        /// What is wrong, naming the key and its allowed values where it can.
        message: String,
    },
}

/// The file as written; every key optional, unknown keys rejected.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    listen: Option<String>,
    token_file: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    dataset: Option<PathBuf>,
    boot_suite: Option<String>,
    boot_options: Option<toml::Table>,
    sku: Option<String>,
    retention: Option<usize>,
    cancel_grace_s: Option<f64>,
    http_max_connections: Option<usize>,
    http_max_connections_per_peer: Option<usize>,
    http_idle_timeout_s: Option<f64>,
    http_send_timeout_s: Option<f64>,
    min_free_space_mb: Option<u64>,
    dataset_cache_mb: Option<u64>,
    benchmarks: Option<toml::Table>,
    box_price_usd: Option<f64>,
    electricity_usd_per_kwh: Option<f64>,
    front_display_socket: Option<PathBuf>,
    idle_health_every: Option<String>,
    idle_health_after: Option<String>,
    idle_health_suite: Option<String>,
    idle_health_options: Option<toml::Table>,
    resume_after_reboot: Option<bool>,
    image_root: Option<PathBuf>,
    update_url: Option<String>,
    update_check: Option<String>,
    update_reboot: Option<bool>,
    boot_check_min_ratio: Option<f64>,
    boot_check_timeout_s: Option<f64>,
}

/// Every key [`ConfigFile`] knows. A key outside it is ignored with a warning rather
/// than refused: the state partition (and `/etc` on it) outlives a rollback, so an
/// older tinyperf must still start on a file a newer one's settings were added to.
const KNOWN_KEYS: &[&str] = &[
    "listen",
    "token_file",
    "state_dir",
    "dataset",
    "boot_suite",
    "boot_options",
    "sku",
    "retention",
    "cancel_grace_s",
    "http_max_connections",
    "http_max_connections_per_peer",
    "http_idle_timeout_s",
    "http_send_timeout_s",
    "min_free_space_mb",
    "dataset_cache_mb",
    "benchmarks",
    "box_price_usd",
    "electricity_usd_per_kwh",
    "front_display_socket",
    "idle_health_every",
    "idle_health_after",
    "idle_health_suite",
    "idle_health_options",
    "resume_after_reboot",
    "image_root",
    "update_url",
    "update_check",
    "update_reboot",
    "boot_check_min_ratio",
    "boot_check_timeout_s",
];

/// The configuration the agent runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The address and port the HTTP server listens on.
    pub listen: SocketAddr,
    /// The file holding the bearer token that HTTP writes must present; when it is absent
    /// HTTP writes are disabled.
    pub token_file: PathBuf,
    /// The state folder: the run store in `runs/`, generated datasets in `cache/`;
    /// its free space gates new runs.
    pub state_dir: PathBuf,
    /// The ImageNet root (`train/` and `val/`) that training suites read by default.
    pub dataset: PathBuf,
    /// Suite run once when the agent starts.
    pub boot_suite: Option<String>,
    /// Options of the boot suite's run (as `tinyperf start -o KEY=VALUE`).
    pub boot_options: serde_json::Map<String, serde_json::Value>,
    /// Judge the box as this SKU instead of recognising it.
    pub sku: Option<String>,
    /// How many runs the store keeps.
    pub retention: usize,
    /// How long a cancelled worker has between SIGTERM and SIGKILL.
    pub cancel_grace: Duration,
    /// HTTP connections served at once, in all and from one client address.
    pub http_max_connections: usize,
    /// The limit on HTTP connections from one client address.
    pub http_max_connections_per_peer: usize,
    /// How long an HTTP connection may wait between requests.
    pub http_idle_timeout: Duration,
    /// How long an HTTP client may leave what it was sent untaken.
    pub http_send_timeout: Duration,
    /// Free space the state directory must keep: a run is not started below it.
    pub min_free_space_bytes: u64,
    /// Size budget of the generated datasets in the cache folder.
    pub dataset_cache_bytes: u64,
    /// Other frameworks' benchmarks the agent may run (`[benchmarks.NAME]`: the external
    /// suite's options), started over D-Bus and HTTP by name only.
    pub benchmarks: std::collections::BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
    /// What the box cost, for the pages' price-performance; `None` takes the list
    /// price of its SKU.
    pub box_price_usd: Option<f64>,
    /// Dollars per kWh, for the pages' energy cost of a run.
    pub electricity_usd_per_kwh: f64,
    /// Where the front display listens; the agent writes to it only when it exists.
    pub front_display_socket: PathBuf,
    /// The health pass run while the box is idle; `None` (the default) runs none.
    pub idle_health: Option<IdleHealth>,
    /// Whether a burn-in that a reboot interrupted is taken up again, after its last
    /// finished stage, when the agent starts.
    pub resume_after_reboot: bool,
    /// The root the OS image's files are read below (`/`; a tree on disk in tests):
    /// os-release, the kernel command line, the partitions and the verity device in
    /// sysfs, systemd-boot's EFI variables.
    pub image_root: PathBuf,
    /// Where OS updates come from: an `http(s)://` folder or a local one; `None` when
    /// unset (updates need `--source`).
    pub update_url: Option<String>,
    /// How often the agent asks the source what it offers; `None` (the default) never.
    pub update_check: Option<Duration>,
    /// Whether an update the agent wrote reboots the box into it by itself.
    pub update_reboot: bool,
    /// The ratio of a new version's figures to the previous version's below which the
    /// boot check rejects it.
    pub boot_check_min_ratio: f64,
    /// How long the boot check waits for the boot run.
    pub boot_check_timeout: Duration,
    /// Keys of the file this tinyperf does not know, ignored (a newer one's settings).
    pub unknown_keys: Vec<String>,
}

/// How long the boot check waits for the boot run unless configured.
pub const DEFAULT_BOOT_CHECK_TIMEOUT: Duration = Duration::from_secs(600);

/// A health pass the agent runs on its own while nobody uses the box.
#[derive(Debug, Clone, PartialEq)]
pub struct IdleHealth {
    /// How long after one idle pass the next is due.
    pub every: Duration,
    /// How long no run may have ended (or the agent have started) before a pass begins.
    pub after: Duration,
    /// The suite the pass runs (`health` unless configured).
    pub suite: String,
    /// The pass's options: a short health pass unless configured.
    pub options: serde_json::Map<String, serde_json::Value>,
}

/// The default of `idle_health_after`: half an hour without a run.
pub const DEFAULT_IDLE_HEALTH_AFTER: Duration = Duration::from_secs(30 * 60);

/// The idle pass's options unless `idle_health_options` says: the health suite in
/// minutes rather than its full length.
pub fn short_health_options() -> serde_json::Map<String, serde_json::Value> {
    let mut options = serde_json::Map::new();
    for (key, value) in [
        ("burn_seconds", 30.0),
        ("link_load_seconds", 5.0),
        ("throttle_seconds", 10.0),
        ("memory_fraction", 0.25),
    ] {
        options.insert(key.into(), value.into());
    }
    options
}

/// A duration as configuration writes it: a number with `s`, `m`, `h` or `d` (`6h`,
/// `30m`, `90s`), or a plain number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((at, _)) => (&text[..at], &text[at..]),
        None => (text, "s"),
    };
    let scale = match unit.trim() {
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?} (use s, m, h or d, as in \"6h\")"
            ))
        }
    };
    let value: f64 = number.trim().parse().map_err(|_| {
        format!("{text:?} is not a duration (a number and s, m, h or d, as in \"6h\")")
    })?;
    let seconds = value * scale;
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 366.0 * 86_400.0) {
        return Err(format!(
            "{text:?} must be more than zero and at most a year"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: DEFAULT_LISTEN
                .parse()
                .expect("default listen address parses"),
            token_file: DEFAULT_TOKEN_FILE.into(),
            state_dir: DEFAULT_STATE_DIR.into(),
            dataset: DEFAULT_DATASET.into(),
            boot_suite: None,
            boot_options: serde_json::Map::new(),
            sku: None,
            retention: DEFAULT_RETENTION,
            cancel_grace: Duration::from_secs_f64(DEFAULT_CANCEL_GRACE_S),
            http_max_connections: DEFAULT_HTTP_MAX_CONNECTIONS,
            http_max_connections_per_peer: DEFAULT_HTTP_MAX_CONNECTIONS_PER_PEER,
            http_idle_timeout: Duration::from_secs_f64(DEFAULT_HTTP_IDLE_TIMEOUT_S),
            http_send_timeout: Duration::from_secs_f64(DEFAULT_HTTP_SEND_TIMEOUT_S),
            min_free_space_bytes: DEFAULT_MIN_FREE_SPACE_MB * MIB,
            dataset_cache_bytes: crate::suite::plan::DEFAULT_CACHE_BUDGET_BYTES,
            benchmarks: std::collections::BTreeMap::new(),
            box_price_usd: None,
            electricity_usd_per_kwh: DEFAULT_ELECTRICITY_USD_PER_KWH,
            front_display_socket: DEFAULT_FRONT_DISPLAY_SOCKET.into(),
            idle_health: None,
            resume_after_reboot: true,
            image_root: "/".into(),
            update_url: None,
            update_check: None,
            update_reboot: false,
            boot_check_min_ratio: crate::update::gate::DEFAULT_MIN_RATIO,
            boot_check_timeout: DEFAULT_BOOT_CHECK_TIMEOUT,
            unknown_keys: Vec::new(),
        }
    }
}

impl Config {
    /// Loads `path`. The default path may be absent (defaults apply); a path given
    /// explicitly must exist.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text, path),
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && path == Path::new(DEFAULT_CONFIG_PATH) =>
            {
                Ok(Config::default())
            }
            Err(source) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Parses configuration text; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let mut table: toml::Table = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let unknown_keys: Vec<String> = table
            .keys()
            .filter(|k| !KNOWN_KEYS.contains(&k.as_str()))
            .cloned()
            .collect();
        for key in &unknown_keys {
            table.remove(key);
        }
        let file: ConfigFile = table.try_into().map_err(|e| invalid(e.to_string()))?;
        let mut config = Config {
            unknown_keys,
            ..Config::default()
        };
        if let Some(listen) = file.listen {
            config.listen = listen.parse().map_err(|_| {
                invalid(format!(
                    "listen = {listen:?} is not an ADDRESS:PORT (for example \"[::]:8470\")"
                ))
            })?;
        }
        if let Some(p) = file.token_file {
            config.token_file = p;
        }
        if let Some(p) = file.state_dir {
            if !p.is_absolute() {
                return Err(invalid(format!(
                    "state_dir = {:?} must be an absolute path",
                    p.display()
                )));
            }
            config.state_dir = p;
        }
        if let Some(p) = file.dataset {
            config.dataset = p;
        }
        if let Some(suite) = file.boot_suite.filter(|s| !s.is_empty()) {
            if !crate::suite::is_known_suite(&suite) {
                return Err(invalid(format!(
                    "boot_suite = {suite:?} is not a suite (known: {})",
                    crate::suite::SUITES.join(", ")
                )));
            }
            config.boot_suite = Some(suite);
        }
        if let Some(table) = file.boot_options.filter(|t| !t.is_empty()) {
            let Some(suite) = &config.boot_suite else {
                return Err(invalid("boot_options needs a boot_suite".into()));
            };
            let serde_json::Value::Object(options) =
                serde_json::to_value(&table).map_err(|e| invalid(format!("boot_options: {e}")))?
            else {
                return Err(invalid("boot_options must be a table".into()));
            };
            crate::suite::plan::check_options(suite, &options)
                .map_err(|e| invalid(format!("boot_options: {e}")))?;
            config.boot_options = options;
        }
        if let Some(sku) = file.sku.filter(|s| !s.is_empty()) {
            if !crate::inventory::is_known_sku(&sku) {
                return Err(invalid(format!(
                    "sku = {sku:?} is not a known SKU (known: {})",
                    crate::inventory::known_skus().join(", ")
                )));
            }
            config.sku = Some(sku);
        }
        if let Some(n) = file.retention {
            if n == 0 {
                return Err(invalid("retention must be at least 1".into()));
            }
            config.retention = n;
        }
        if let Some(s) = file.cancel_grace_s {
            if !(s.is_finite() && s > 0.0 && s <= 3600.0) {
                return Err(invalid(format!(
                    "cancel_grace_s = {s} must be between 0 and 3600 seconds"
                )));
            }
            config.cancel_grace = Duration::from_secs_f64(s);
        }
        if let Some(n) = file.http_max_connections {
            config.http_max_connections =
                count(n, "http_max_connections", 1, 65_536).map_err(invalid)?;
        }
        if let Some(n) = file.http_max_connections_per_peer {
            config.http_max_connections_per_peer =
                count(n, "http_max_connections_per_peer", 1, 65_536).map_err(invalid)?;
        }
        if let Some(s) = file.http_idle_timeout_s {
            config.http_idle_timeout =
                seconds(s, "http_idle_timeout_s", 3600.0).map_err(invalid)?;
        }
        if let Some(s) = file.http_send_timeout_s {
            config.http_send_timeout =
                seconds(s, "http_send_timeout_s", 3600.0).map_err(invalid)?;
        }
        if let Some(mb) = file.min_free_space_mb {
            config.min_free_space_bytes = mb.saturating_mul(MIB);
        }
        if let Some(mb) = file.dataset_cache_mb {
            if mb == 0 {
                return Err(invalid("dataset_cache_mb must be at least 1".into()));
            }
            config.dataset_cache_bytes = mb.saturating_mul(MIB);
        }
        if let Some(usd) = file.box_price_usd {
            if !(usd.is_finite() && usd > 0.0) {
                return Err(invalid(format!(
                    "box_price_usd = {usd} must be a positive number of dollars"
                )));
            }
            config.box_price_usd = Some(usd);
        }
        if let Some(usd) = file.electricity_usd_per_kwh {
            if !(usd.is_finite() && usd >= 0.0) {
                return Err(invalid(format!(
                    "electricity_usd_per_kwh = {usd} must be zero or more dollars"
                )));
            }
            config.electricity_usd_per_kwh = usd;
        }
        if let Some(p) = file.front_display_socket {
            config.front_display_socket = p;
        }
        if let Some(p) = file.image_root {
            if !p.is_absolute() {
                return Err(invalid(format!(
                    "image_root = {:?} must be an absolute path",
                    p.display()
                )));
            }
            config.image_root = p;
        }
        if let Some(resume) = file.resume_after_reboot {
            config.resume_after_reboot = resume;
        }
        if let Some(url) = file.update_url.filter(|u| !u.trim().is_empty()) {
            crate::update::source::Source::parse(&url)
                .map_err(|e| invalid(format!("update_url: {e}")))?;
            config.update_url = Some(url);
        }
        if let Some(every) = file.update_check {
            config.update_check = match every.as_str() {
                "off" | "never" | "" => None,
                "daily" => Some(Duration::from_secs(24 * 3600)),
                "hourly" => Some(Duration::from_secs(3600)),
                other => Some(parse_duration(other).map_err(|e| {
                    invalid(format!(
                        "update_check = {e} (use \"off\", \"daily\", \"hourly\" or a duration such as \"12h\")"
                    ))
                })?),
            };
        }
        if let Some(reboot) = file.update_reboot {
            config.update_reboot = reboot;
        }
        if let Some(ratio) = file.boot_check_min_ratio {
            if !(ratio > 0.0 && ratio <= 10.0) {
                return Err(invalid(format!(
                    "boot_check_min_ratio = {ratio} must be more than 0 and at most 10 (0.95: a new version keeps 95 % of each figure)"
                )));
            }
            config.boot_check_min_ratio = ratio;
        }
        if let Some(seconds) = file.boot_check_timeout_s {
            if !(seconds > 0.0 && seconds <= 86_400.0) {
                return Err(invalid(format!(
                    "boot_check_timeout_s = {seconds} must be more than 0 and at most a day (86400)"
                )));
            }
            config.boot_check_timeout = Duration::from_secs_f64(seconds);
        }
        config.idle_health = idle_health(
            file.idle_health_every,
            file.idle_health_after,
            file.idle_health_suite,
            file.idle_health_options,
        )
        .map_err(invalid)?;
        for (name, entry) in file.benchmarks.unwrap_or_default() {
            let serde_json::Value::Object(options) = serde_json::to_value(&entry)
                .map_err(|e| invalid(format!("benchmarks.{name}: {e}")))?
            else {
                return Err(invalid(format!("benchmarks.{name} must be a table")));
            };
            crate::suite::plan::check_options(crate::suite::external::NAME, &options)
                .map_err(|e| invalid(format!("benchmarks.{name}: {e}")))?;
            config.benchmarks.insert(name, options);
        }
        Ok(config)
    }
}

/// The idle health pass the `idle_health_*` keys describe; `None` without
/// `idle_health_every`, which the others need.
fn idle_health(
    every: Option<String>,
    after: Option<String>,
    suite: Option<String>,
    options: Option<toml::Table>,
) -> Result<Option<IdleHealth>, String> {
    let Some(every) = every.filter(|e| !e.trim().is_empty()) else {
        if after.is_some() || suite.is_some() || options.is_some() {
            return Err(
                "idle_health_after, idle_health_suite and idle_health_options need \
                        idle_health_every (for example \"6h\")"
                    .into(),
            );
        }
        return Ok(None);
    };
    let every = parse_duration(&every).map_err(|e| format!("idle_health_every = {e}"))?;
    let after = match after {
        Some(after) => parse_duration(&after).map_err(|e| format!("idle_health_after = {e}"))?,
        None => DEFAULT_IDLE_HEALTH_AFTER,
    };
    let suite = suite.unwrap_or_else(|| "health".to_string());
    if !crate::suite::is_known_suite(&suite) {
        return Err(format!(
            "idle_health_suite = {suite:?} is not a suite (known: {})",
            crate::suite::SUITES.join(", ")
        ));
    }
    let options = match options {
        Some(table) => {
            let serde_json::Value::Object(options) =
                serde_json::to_value(&table).map_err(|e| format!("idle_health_options: {e}"))?
            else {
                return Err("idle_health_options must be a table".into());
            };
            options
        }
        None if suite == "health" => short_health_options(),
        None => serde_json::Map::new(),
    };
    if suite != crate::suite::external::NAME {
        crate::suite::plan::check_options(&suite, &options)
            .map_err(|e| format!("idle_health_options: {e}"))?;
    }
    Ok(Some(IdleHealth {
        every,
        after,
        suite,
        options,
    }))
}

/// A count between `min` and `max`, or an error naming the key.
fn count(n: usize, key: &str, min: usize, max: usize) -> Result<usize, String> {
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{key} = {n} must be between {min} and {max}"))
    }
}

/// A positive, finite number of seconds up to `max`, or an error naming the key.
fn seconds(s: f64, key: &str, max: f64) -> Result<Duration, String> {
    if s.is_finite() && s > 0.0 && s <= max {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(format!(
            "{key} = {s} must be more than 0 and at most {max} seconds"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("test.toml"))
    }

    #[test]
    fn benchmarks_are_the_external_suites_options_by_name_and_checked() {
        let c = parse(
            "[benchmarks.tinygrad-resnet]\ncommand = [\"python3\", \"examples/mlperf/model_train.py\"]\n\
             cwd = \"/opt/tinygrad\"\nenv = { MODEL = \"resnet\" }\nmllog = \"stdout\"\ntimeout_s = 30000\n",
        )
        .unwrap();
        let bench = &c.benchmarks["tinygrad-resnet"];
        assert_eq!(bench["cwd"], "/opt/tinygrad");
        assert_eq!(bench["env"]["MODEL"], "resnet");
        let err = parse("[benchmarks.broken]\nenv = { A = \"1\" }\n").unwrap_err();
        assert!(err.to_string().contains("benchmarks.broken"), "{err}");
        assert!(
            err.to_string().contains("needs the option command"),
            "{err}"
        );
    }

    #[test]
    fn the_idle_health_pass_is_off_unless_configured_and_short_by_default() {
        assert_eq!(parse("").unwrap().idle_health, None);
        let c = parse("idle_health_every = \"6h\"").unwrap();
        let idle = c.idle_health.unwrap();
        assert_eq!(idle.every, Duration::from_secs(6 * 3600));
        assert_eq!(idle.after, DEFAULT_IDLE_HEALTH_AFTER);
        assert_eq!(idle.suite, "health");
        assert_eq!(idle.options, short_health_options());
        let c = parse(
            "idle_health_every = \"90m\"\nidle_health_after = \"45s\"\n\
             idle_health_suite = \"smoke\"\nidle_health_options = { batch_size = 16 }",
        )
        .unwrap();
        let idle = c.idle_health.unwrap();
        assert_eq!(
            (idle.every, idle.after, idle.suite.as_str()),
            (Duration::from_secs(5400), Duration::from_secs(45), "smoke")
        );
        for (text, needle) in [
            ("idle_health_every = \"6 parsecs\"", "unknown unit"),
            ("idle_health_every = \"-1h\"", "more than zero"),
            ("idle_health_every = \"h\"", "not a duration"),
            ("idle_health_after = \"1h\"", "need idle_health_every"),
            (
                "idle_health_every = \"1h\"\nidle_health_suite = \"nap\"",
                "not a suite",
            ),
            (
                "idle_health_every = \"1h\"\nidle_health_options = { colour = 1 }",
                "colour",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
        assert!(
            !parse("resume_after_reboot = false")
                .unwrap()
                .resume_after_reboot
        );
        assert!(Config::default().resume_after_reboot);
    }

    #[test]
    fn durations_read_as_people_write_them() {
        for (text, seconds) in [
            ("6h", 21_600.0),
            ("30m", 1800.0),
            ("90s", 90.0),
            ("2", 2.0),
            ("1.5d", 129_600.0),
            ("0.5 h", 1800.0),
        ] {
            assert_eq!(
                parse_duration(text).unwrap().as_secs_f64(),
                seconds,
                "{text}"
            );
        }
    }

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn every_key_is_read() {
        let c = parse(
            r#"
            listen = "127.0.0.1:9000"
            token_file = "/run/token"
            state_dir = "/tmp/state"
            dataset = "/data/imagenet"
            boot_suite = "acceptance"
            boot_options = { gemm_size = 256, gemm_seconds = 0.5 }
            retention = 5
            cancel_grace_s = 2.5
            http_max_connections = 100
            http_max_connections_per_peer = 8
            http_idle_timeout_s = 4.5
            http_send_timeout_s = 3
            min_free_space_mb = 64
            dataset_cache_mb = 100
            box_price_usd = 27500
            electricity_usd_per_kwh = 0.31
            front_display_socket = "/tmp/screen.sock"
            image_root = "/tmp/image"
            "#,
        )
        .unwrap();
        assert_eq!(c.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(c.token_file, PathBuf::from("/run/token"));
        assert_eq!(c.state_dir, PathBuf::from("/tmp/state"));
        assert_eq!(c.dataset, PathBuf::from("/data/imagenet"));
        assert_eq!(c.boot_suite.as_deref(), Some("acceptance"));
        assert_eq!(c.boot_options["gemm_size"], 256);
        assert_eq!(c.boot_options["gemm_seconds"], 0.5);
        assert_eq!(c.retention, 5);
        assert_eq!(c.cancel_grace, Duration::from_millis(2500));
        assert_eq!(c.http_max_connections, 100);
        assert_eq!(c.http_max_connections_per_peer, 8);
        assert_eq!(c.http_idle_timeout, Duration::from_millis(4500));
        assert_eq!(c.http_send_timeout, Duration::from_secs(3));
        assert_eq!(c.min_free_space_bytes, 64 << 20);
        assert_eq!(c.dataset_cache_bytes, 100 << 20);
        assert_eq!(c.box_price_usd, Some(27_500.0));
        assert_eq!(c.electricity_usd_per_kwh, 0.31);
        assert_eq!(c.front_display_socket, PathBuf::from("/tmp/screen.sock"));
        assert_eq!(c.image_root, PathBuf::from("/tmp/image"));
    }

    #[test]
    fn bad_values_are_clear_errors() {
        for (text, needle) in [
            (
                "update_url = \"updates.example\"",
                "neither an http(s):// URL",
            ),
            ("update_check = \"weekly-ish\"", "update_check"),
            ("boot_check_min_ratio = 0", "boot_check_min_ratio"),
            ("boot_check_min_ratio = 11", "at most 10"),
            ("boot_check_timeout_s = -5", "boot_check_timeout_s"),
            ("listen = \"nowhere\"", "not an ADDRESS:PORT"),
            ("boot_suite = \"fastest\"", "not a suite"),
            ("boot_options = { gemm_size = 256 }", "needs a boot_suite"),
            (
                "boot_suite = \"acceptance\"\nboot_options = { size = 1 }",
                "has no option",
            ),
            (
                "boot_suite = \"inventory\"\nboot_options = { gemm_size = 256 }",
                "has no option",
            ),
            ("retention = 0", "at least 1"),
            ("retention = -3", "retention"),
            ("state_dir = \"relative\"", "absolute"),
            ("image_root = \"tree\"", "absolute"),
            ("cancel_grace_s = -1.0", "cancel_grace_s"),
            ("sku = \"tinybox-blue\"", "not a known SKU"),
            ("http_max_connections = 0", "http_max_connections"),
            ("http_idle_timeout_s = 0", "http_idle_timeout_s"),
            ("http_send_timeout_s = -1.0", "http_send_timeout_s"),
            ("listen = ", "invalid"),
            ("box_price_usd = 0", "box_price_usd"),
            ("electricity_usd_per_kwh = -0.1", "electricity_usd_per_kwh"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text:?} gave {err:?}");
            assert!(err.contains("test.toml"), "{err:?} does not name the file");
        }
    }

    #[test]
    fn keys_of_a_newer_tinyperf_are_ignored_and_named_so_a_rollback_still_starts() {
        let c = parse("colour = 1\nretention = 7\n[future_table]\nx = 1").unwrap();
        assert_eq!(c.retention, 7);
        assert_eq!(c.unknown_keys, ["colour", "future_table"]);
        assert!(parse("retention = 7").unwrap().unknown_keys.is_empty());
    }

    #[test]
    fn update_and_boot_check_settings_parse() {
        let c = parse(
            "update_url = \"http://updates.example/green\"\nupdate_check = \"daily\"\n\
             update_reboot = true\nboot_check_min_ratio = 0.9\nboot_check_timeout_s = 120",
        )
        .unwrap();
        assert_eq!(
            c.update_url.as_deref(),
            Some("http://updates.example/green")
        );
        assert_eq!(c.update_check, Some(Duration::from_secs(86_400)));
        assert!(c.update_reboot);
        assert_eq!(c.boot_check_min_ratio, 0.9);
        assert_eq!(c.boot_check_timeout, Duration::from_secs(120));
        let d = parse("update_check = \"off\"").unwrap();
        assert_eq!((d.update_check, d.boot_check_min_ratio), (None, 0.95));
        assert_eq!(
            parse("update_check = \"6h\"").unwrap().update_check,
            Some(Duration::from_secs(6 * 3600))
        );
    }

    #[test]
    fn missing_explicit_file_is_an_error() {
        let err = Config::load(Path::new("/nonexistent/tinyperf.toml")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/tinyperf.toml"));
    }
}

#[cfg(test)]
mod shipped_definitions {
    use super::*;

    /// The lines of the commented-out table `[benchmarks.NAME]` in `text`, uncommented.
    fn uncommented_table(text: &str, name: &str) -> String {
        let header = format!("# [benchmarks.{name}]");
        text.lines()
            .skip_while(|l| *l != header)
            .take_while(|l| l.starts_with("# "))
            .map(|l| &l[2..])
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_shipped_tinygrad_definition_is_one_the_agent_takes() {
        let shipped = include_str!("../../systemd/tinyperf.toml");
        let table = uncommented_table(shipped, "tinygrad-resnet");
        assert!(table.contains("epochs = 37"), "{table}");
        let config = Config::parse(&table, Path::new("tinyperf.toml")).unwrap();
        let options = &config.benchmarks["tinygrad-resnet"];
        assert_eq!(options["mllog"], "result_resnet_1234.txt");
        assert_eq!(options["env"]["TRAIN_BEAM"], "4");
        let spec = crate::suite::external::spec(options).unwrap();
        assert_eq!(spec.epochs, Some(37));
        assert_eq!(spec.command[..2], ["sh", "-c"]);
        assert!(
            spec.command[2].contains("INITMLPERF=1") && spec.command[2].contains("RUNMLPERF=1")
        );
        // The documented definition is the shipped one.
        let docs = include_str!("../../docs/tinygrad.md");
        let documented = docs
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .unwrap();
        let documented = Config::parse(documented, Path::new("tinyperf.toml")).unwrap();
        assert_eq!(documented.benchmarks, config.benchmarks);
    }
}
