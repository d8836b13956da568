//! A state directory on a small tmpfs (the tests run as root): a start refused for
//! want of space leaves nothing behind; a disk that fills during a run loses nothing:
//! the run is reported as it ended, with a finding that it could not be saved, and
//! written once space returns, never marked `interrupted`.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{wait_for, Agent, AgentDirs, Bus};

/// A tmpfs mounted over a folder, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tinyperf-test",
            ])
            .arg(at)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "SKIPPED: cannot mount a tmpfs here ({}); this test needs root and mount(8)",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Tmpfs(at.to_path_buf()))
    }

    /// Fills the filesystem but for about `leave` bytes.
    fn fill(&self, leave: u64) {
        let mut file = std::fs::File::create(self.0.join("filler")).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        loop {
            let free = nix::sys::statvfs::statvfs(&self.0).unwrap();
            let free = free.blocks_available() as u64 * free.fragment_size() as u64;
            if free <= leave {
                break;
            }
            let n = (free - leave).min(chunk.len() as u64) as usize;
            if file.write_all(&chunk[..n.max(1)]).is_err() {
                break;
            }
        }
        let _ = file.sync_all();
    }

    /// Keeps the filesystem full from a thread of its own, taking any space that is
    /// freed (a temporary file removed after a failed write) until `stop` is set.
    fn keep_full(&self, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
        let path = self.0.join("filler");
        std::thread::spawn(move || {
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(path)
                .unwrap();
            let page = vec![0u8; 4096];
            while !stop.load(Ordering::Relaxed) {
                while file.write_all(&page).is_ok() {}
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    }

    fn free(&self) {
        std::fs::remove_file(self.0.join("filler")).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn run_folders(state: &Path) -> Vec<String> {
    std::fs::read_dir(state.join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_start_without_free_space_is_refused_and_leaves_nothing() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("min_free_space_mb = 4");
    let Some(disk) = Tmpfs::mount(&dirs.state_dir(), "16m") else {
        return;
    };
    let agent = Agent::start(&bus, &dirs);
    disk.fill(2 << 20);
    let (code, reply) = agent.post_run(r#"{"suite": "inventory"}"#);
    assert_eq!(code, 507, "{reply}");
    assert_eq!(reply["error"]["code"], "no_space", "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("min_free_space_mb"), "{message}");
    assert!(run_folders(&dirs.state_dir()).is_empty());

    // A generated dataset that could never fit the cache is refused outright.
    disk.free();
    let (code, reply) = agent.post_run(
        r#"{"suite": "smoke", "options": {"synth_classes": 72, "synth_per_class": 100000, "synth_size": 2048}}"#,
    );
    assert_eq!(code, 400, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("dataset cache budget"),
        "{reply}"
    );
    assert!(run_folders(&dirs.state_dir()).is_empty());
    drop(agent);
}

#[test]
fn a_disk_that_fills_during_a_run_loses_nothing() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("min_free_space_mb = 1\ncancel_grace_s = 1");
    let Some(disk) = Tmpfs::mount(&dirs.state_dir(), "16m") else {
        return;
    };
    let mut agent = Agent::start(&bus, &dirs);
    let (code, reply) = agent.post_run(
        r#"{"suite": "acceptance", "options": {"gemm_size": 128, "gemm_seconds": 2,
            "gemm_min_fraction": 0, "train_steps": 1, "train_warmup": 0, "train_batch": 2,
            "train_image_size": 32}}"#,
    );
    assert_eq!(code, 202, "{reply}");
    let id = reply["id"].as_str().unwrap().to_string();
    agent.wait_stage("cpu-gemm");
    disk.fill(0);
    let stop = Arc::new(AtomicBool::new(false));
    let filler = disk.keep_full(stop.clone());

    let status_after = wait_for(Duration::from_secs(120), "the run to end", || {
        let s = agent.status();
        (s["state"] == "idle").then_some(s)
    });
    let last = &status_after["last_run"];
    assert_eq!(last["id"], id.as_str(), "{status_after}");
    let ended = last["state"].as_str().unwrap().to_string();
    assert!(
        ended != "running" && ended != "interrupted",
        "the run is reported as {ended}"
    );
    let findings = last["findings"].to_string();
    assert!(findings.contains("could not be saved"), "{status_after}");
    assert_eq!(
        status_after["unsaved_runs"][0],
        id.as_str(),
        "{status_after}"
    );
    let record = agent.run_record(&id);
    assert_eq!(record["state"], ended.as_str(), "served from memory");
    let on_disk = common::read_record(&dirs.state_dir(), &id).unwrap();
    assert_eq!(on_disk["state"], "running", "the disk was full");

    stop.store(true, Ordering::Relaxed);
    filler.join().unwrap();
    disk.free();
    let saved = wait_for(Duration::from_secs(20), "the record written", || {
        let r = common::read_record(&dirs.state_dir(), &id)?;
        (r["state"] == ended.as_str()).then_some(r)
    });
    assert!(saved["summary"]["findings"]
        .to_string()
        .contains("could not be saved"));
    assert!(agent.status().get("unsaved_runs").is_none());

    // A restart finds it finished, not interrupted.
    agent.stop();
    let agent = Agent::start(&bus, &dirs);
    let record = agent.run_record(&id);
    assert_eq!(record["state"], ended.as_str());
    drop(agent);
}
