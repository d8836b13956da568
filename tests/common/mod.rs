//! Real parts for integration tests: a private `dbus-daemon` and a `tinyperf agent`
//! process on it, with its HTTP socket on loopback.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod curl;
pub mod in_process;
pub mod runs;
pub mod signing;
pub mod small_resnet;

pub const TOKEN: &str = "test-token-0123456789abcdef-0123456789abcdef";

/// The `tinyperf` binary cargo built for these tests.
pub fn tinyperf_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tinyperf"))
}

/// The agent core in this process with `config`, an empty hardware root under `dir`,
/// and the `tinyperf` binary cargo built as its worker.
pub fn core_in(
    dir: &Path,
    config: tinyperf::agent::config::Config,
) -> tinyperf::agent::AgentHandle {
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    tinyperf::agent::start_core(&tinyperf::agent::AgentOptions {
        config,
        worker_exe: tinyperf_exe(),
        root,
    })
    .unwrap()
}

/// A private session bus, killed on drop.
pub struct Bus {
    pub address: String,
    pid: i32,
}

impl Bus {
    pub fn start() -> Bus {
        let out = Command::new("dbus-daemon")
            .args([
                "--session",
                "--fork",
                "--nosyslog",
                "--print-address=1",
                "--print-pid=1",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("dbus-daemon runs (apt-get install dbus)");
        assert!(out.status.success(), "dbus-daemon failed: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        let address = lines.next().expect("address line").trim().to_string();
        let pid = lines.next().expect("pid line").trim().parse().unwrap();
        Bus { address, pid }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        unsafe {
            libc_kill(self.pid, 9);
        }
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// A running `tinyperf agent`, killed on drop.
pub struct Agent {
    pub child: Child,
    pub http: SocketAddr,
    pub state_dir: PathBuf,
    pub config: PathBuf,
    pub bus: String,
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// Where an agent keeps its files in a test.
pub struct AgentDirs {
    pub dir: tempfile::TempDir,
}

impl AgentDirs {
    /// A state directory, a token file and a config listening on loopback port 0;
    /// `extra` is appended to the config.
    pub fn new(extra: &str) -> AgentDirs {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        write_token(&token, TOKEN.as_bytes(), 0o600);
        let config = format!(
            "listen = \"127.0.0.1:0\"\ntoken_file = \"{}\"\nstate_dir = \"{}\"\n{extra}\n",
            token.display(),
            dir.path().join("state").display()
        );
        std::fs::write(dir.path().join("tinyperf.toml"), config).unwrap();
        AgentDirs { dir }
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("tinyperf.toml")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }
}

impl Agent {
    /// Starts an agent on `bus` with the files in `dirs`, and waits until it serves.
    pub fn start(bus: &Bus, dirs: &AgentDirs) -> Agent {
        Agent::start_with_args(bus, dirs, &[])
    }

    pub fn start_with_args(bus: &Bus, dirs: &AgentDirs, args: &[&str]) -> Agent {
        let mut command = agent_command(&dirs.config(), &bus.address);
        command.args(args);
        Agent::start_command(command, &bus.address, dirs)
    }

    /// Starts the agent, on the bus at `bus_address`, as the last arguments of `wrapper`
    /// (a program that sets up the agent's surroundings and then executes its arguments).
    pub fn start_wrapped(bus_address: &str, dirs: &AgentDirs, wrapper: &[&str]) -> Agent {
        let agent = agent_command(&dirs.config(), bus_address);
        let mut command = Command::new(wrapper[0]);
        command
            .args(&wrapper[1..])
            .arg(agent.get_program())
            .args(agent.get_args())
            .stdin(Stdio::null());
        Agent::start_command(command, bus_address, dirs)
    }

    fn start_command(mut command: Command, bus_address: &str, dirs: &AgentDirs) -> Agent {
        let mut child = command
            .env("TINYPERF_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tinyperf agent starts");
        let stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut s);
            s
        });
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("ready http://") {
                    let _ = tx.send(url.to_string());
                }
            }
        });
        let http = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr.parse().unwrap(),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "agent did not become ready; its log:\n{}",
                    stderr.join().unwrap_or_default()
                );
            }
        };
        Agent {
            child,
            http,
            state_dir: dirs.state_dir(),
            config: dirs.config(),
            bus: bus_address.to_string(),
            stderr: Some(stderr),
        }
    }

    /// Kills the agent with SIGKILL and returns its log.
    pub fn kill(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Stops the agent with SIGTERM, waits, and returns its log.
    pub fn stop(&mut self) -> String {
        unsafe {
            libc_kill(self.child.id() as i32, 15);
        }
        let _ = self.child.wait();
        self.stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether process `pid` is alive: it exists and is not a zombie waiting to be reaped.
pub fn process_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// `tinyperf agent` with the config file `config` on the bus at `bus`, its stdin
/// closed: how every test starts an agent process, whether it expects it to serve or
/// to refuse.
pub fn agent_command(config: &Path, bus: &str) -> Command {
    let mut command = Command::new(tinyperf_exe());
    command
        .arg("agent")
        .arg("--config")
        .arg(config)
        .arg("--bus")
        .arg(bus)
        .stdin(Stdio::null());
    command
}

/// A private bus with an agent serving on it, as most agent tests begin. The fields
/// drop in order, so the agent is killed before its files and its bus go away.
pub struct AgentOnBus {
    pub agent: Agent,
    pub dirs: AgentDirs,
    pub bus: Bus,
}

impl AgentOnBus {
    /// A fresh bus, and an agent on it whose config adds `extra` (see [`AgentDirs::new`]).
    pub fn start(extra: &str) -> AgentOnBus {
        let bus = Bus::start();
        let dirs = AgentDirs::new(extra);
        let agent = Agent::start(&bus, &dirs);
        AgentOnBus { agent, dirs, bus }
    }
}

/// Polls `f` until it returns `Some`, or panics after `limit`.
pub fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads a run record straight from the store on disk.
pub fn read_record(state_dir: &Path, id: &str) -> Option<serde_json::Value> {
    let bytes = std::fs::read(state_dir.join("runs").join(id).join("run.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The ids of the runs stored under `state_dir`, oldest first; none before the store
/// has made its `runs` folder.
pub fn run_ids(state_dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(state_dir.join("runs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// Writes a token file with `mode`.
pub fn write_token(path: &Path, token: &[u8], mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, token).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The resident memory of process `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

/// A finished run record of a tinybox green's size: the inventory suite run over the
/// green fixture tree, as the worker records it.
pub fn green_record() -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tinybox-green");
    let out = Command::new(tinyperf_exe())
        .args(["run", "inventory", "--events", "jsonl", "--root"])
        .arg(&fixture)
        .arg("--state-dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("tinyperf run starts");
    assert!(out.status.code().is_some(), "{out:?}");
    let runs = dir.path().join("runs");
    let run = std::fs::read_dir(&runs).unwrap().flatten().next().unwrap();
    serde_json::from_slice(&std::fs::read(run.path().join("run.json")).unwrap()).unwrap()
}

/// Writes `count` copies of `template` into the store under `state_dir`, each under
/// its own id and start time, newest last. Returns the ids, oldest first.
pub fn seed_runs(state_dir: &Path, template: &serde_json::Value, count: usize) -> Vec<String> {
    let runs = state_dir.join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let start = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap();
    (0..count)
        .map(|i| {
            let at = start + chrono::Duration::seconds(i as i64 * 60);
            let id = format!("{}-{:06x}", at.format("%Y%m%d-%H%M%S"), i);
            let mut record = template.clone();
            record["id"] = id.clone().into();
            record["started_at"] = at.to_rfc3339().into();
            record["finished_at"] = (at + chrono::Duration::seconds(5)).to_rfc3339().into();
            let dir = runs.join(&id);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("run.json"),
                serde_json::to_vec_pretty(&record).unwrap(),
            )
            .unwrap();
            id
        })
        .collect()
}

/// A plain HTTP/1.1 GET on a fresh connection: the status and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of head"))?;
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
    let mut body = raw[head_end + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Ok((status, body))
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(
            std::str::from_utf8(&data[..line_end]).unwrap_or("0").trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = line_end + 2;
        out.extend_from_slice(&data[start..(start + size).min(data.len())]);
        data = &data[(start + size + 2).min(data.len())..];
    }
    out
}

/// An amdgpu in a sysfs-shaped tree under `root`, laid out as the kernel does (its PCI
/// device under a root port, linked from `sys/bus/pci/devices`, 87 % busy): returns its
/// `hwmon` folder, where a test writes the sensors it needs.
pub fn amdgpu_sysfs(root: &Path, address: &str, hwmon: &str) -> PathBuf {
    let device = root
        .join("sys/devices/pci0000:00/0000:00:01.1")
        .join(address);
    let hwmon_dir = device.join("hwmon").join(hwmon);
    std::fs::create_dir_all(&hwmon_dir).unwrap();
    std::fs::write(device.join("vendor"), "0x1002\n").unwrap();
    std::fs::write(device.join("class"), "0x030000\n").unwrap();
    std::fs::write(device.join("gpu_busy_percent"), "87\n").unwrap();
    std::fs::write(hwmon_dir.join("name"), "amdgpu\n").unwrap();
    let bus = root.join("sys/bus/pci/devices");
    std::fs::create_dir_all(&bus).unwrap();
    std::os::unix::fs::symlink(&device, bus.join(address)).unwrap();
    hwmon_dir
}

/// A writable copy of the fixture tree `name`; folders it shares with another fixture by
/// relative links are copied whole, so that the copy can be changed.
pub fn fixture_copy(name: &str) -> tempfile::TempDir {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let tree = tempfile::tempdir().unwrap();
    let copy = |from: &Path, to: &Path| {
        let status = Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(to)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "cp -a {} {}",
            from.display(),
            to.display()
        );
    };
    copy(&fixture.join("."), tree.path());
    for entry in std::fs::read_dir(tree.path()).unwrap().flatten() {
        if entry.file_type().unwrap().is_symlink() {
            let target = std::fs::canonicalize(fixture.join(entry.file_name())).unwrap();
            std::fs::remove_file(entry.path()).unwrap();
            copy(&target, &entry.path());
        }
    }
    tree
}
