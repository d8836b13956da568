//! The image as it runs: its version, the slot it booted from, whether its root is
//! verified, the other slot and the state partition. Everything is read below a root
//! folder (`/` on the box), so a tree on disk stands in for a machine.

use std::path::Path;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::boot_check;
use super::boot_entries::{self, Trial};
use super::cmdline::Cmdline;
use super::gate::{Assessment, GateCheck};
use super::os_release::OsRelease;
use super::partitions::{self, Partition, Role};
use super::progress::{self, UpdateProgress};
use super::verity;

/// The `IMAGE_ID` of a tinybox OS image.
pub const IMAGE_ID: &str = "tinybox";

/// What the agent knows of the OS image it runs on: `{"image": true, …}` on a tinybox
/// OS image, `{"image": false, "message": "…"}` anywhere else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageStatus {
    /// Whether this is a tinybox OS image.
    pub image: bool,
    /// Why this is not an image; absent on an image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The image's details; absent when this is not an image.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub os: Option<OsImage>,
}

/// A tinybox OS image's version, slots and state partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsImage {
    /// `IMAGE_ID` from os-release.
    pub image_id: String,
    /// `IMAGE_VERSION` from os-release; empty when it has none.
    pub version: String,
    /// The slot booted from, `a` or `b`; empty when it cannot be told.
    pub slot: String,
    /// `verified` when `/` is the dm-verity device `root` over the booted slot and the
    /// kernel got its `roothash=`; `off` otherwise.
    pub verity: String,
    /// The root hash on the kernel command line; empty when none.
    pub roothash: String,
    /// Each slot, A first.
    pub slots: Vec<Slot>,
    /// The version in the slot not booted from; empty when it is empty or unknown.
    pub other_version: String,
    /// The state partition (`var`) and its filesystem's size; `null` when there is no
    /// partition named `var`.
    pub state_partition: Option<StatePartition>,
    /// A factory reset is asked for and has not happened yet: the request file is
    /// there, or the boot loader's next boot is a factory-reset one.
    pub factory_reset_pending: bool,
    /// This boot was a factory-reset boot (`systemd.factory_reset=1`): the state
    /// partition was erased as it began.
    pub factory_reset_boot: bool,
    /// The OS update: where the last one stands (`idle` when none was ever asked for).
    #[serde(default)]
    pub update: Option<UpdateProgress>,
    /// The running version is on trial: its boot entry counts tries, and it becomes
    /// blessed when the boot check passes.
    #[serde(default)]
    pub on_trial: bool,
    /// This boot's assessment by the boot check; `null` until the check has run.
    #[serde(default)]
    pub boot_assessment: Option<Assessment>,
    /// Versions this box rejected and went back from, newest first.
    #[serde(default)]
    pub rejections: Vec<Rejection>,
    /// How many times the box went back from a rejected version.
    #[serde(default)]
    pub rollbacks_total: u64,
    /// Boot assessments recorded, by result (`pass`, `fail`: failed but kept, as the
    /// version was blessed; `rejected`).
    #[serde(default)]
    pub boot_assessments_total: BTreeMap<String, u64>,
    /// What could not be read or does not add up, in words; empty when all is well.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A version this box rejected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejection {
    /// The version.
    pub version: String,
    /// When its boot check failed; `null` when it never got that far.
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    /// Why, in one line: `3 rejected: training img/s 4,410 vs 5,220 on 2, 0.84 < 0.95`.
    pub reason: String,
    /// The version it was held against.
    #[serde(default)]
    pub previous_version: Option<String>,
    /// The checks that failed.
    #[serde(default)]
    pub failed_checks: Vec<GateCheck>,
}

/// One A/B slot: its version and partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// `a` or `b`.
    pub slot: String,
    /// The version its partitions are named for; empty for an empty slot.
    pub version: String,
    /// `booted`, `installed`, `empty`, or `incomplete` (its two partitions disagree).
    pub state: String,
    /// Its root partition's kernel name (`vda3`); empty when not found.
    pub root_partition: String,
    /// Its verity hash partition's kernel name (`vda2`); empty when not found.
    pub hash_partition: String,
}

/// The state partition and its filesystem's size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatePartition {
    /// Its kernel name (`vda6`).
    pub device: String,
    /// The size of the filesystem mounted at `/var`; `null` when it cannot be read.
    pub size_bytes: Option<u64>,
    /// Its bytes free to unprivileged writers; `null` when it cannot be read.
    pub free_bytes: Option<u64>,
}

impl ImageStatus {
    /// Not an image, and why.
    pub fn not_an_image(why: &str) -> ImageStatus {
        ImageStatus {
            image: false,
            message: Some(format!("not a tinybox OS image ({why})")),
            os: None,
        }
    }

    /// The running version, or `""` when this is not an image.
    pub fn version(&self) -> &str {
        self.os.as_ref().map(|o| o.version.as_str()).unwrap_or("")
    }

    /// The header line of the status page and the first line of `tinyperf image
    /// status`: `OS 20261205.1130 · slot A · verified`, or why this is not an image.
    pub fn headline(&self) -> String {
        match &self.os {
            None => self
                .message
                .clone()
                .unwrap_or_else(|| "not a tinybox OS image".into()),
            Some(os) => {
                let version = if os.version.is_empty() {
                    "(no version)"
                } else {
                    &os.version
                };
                let slot = match os.slot.as_str() {
                    "" => "slot unknown".to_string(),
                    s => format!("slot {}", s.to_uppercase()),
                };
                let verity = if os.verity == "verified" {
                    "verified"
                } else {
                    "not verified"
                };
                format!("OS {version} · {slot} · {verity}")
            }
        }
    }
}

/// Where the status looks besides the root: the factory-reset request file and the
/// agent's state folder (update progress, boot assessments), if the caller has them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras<'a> {
    /// The factory-reset request file; its presence makes a reset pending.
    pub reset_request: Option<&'a Path>,
    /// The agent's state folder.
    pub state_dir: Option<&'a Path>,
}

/// Reads the image's status below `root`. Never fails: what cannot be read is said in
/// `notes`, or in `message` when it makes this no image at all.
pub fn read(root: &Path, extras: Extras<'_>) -> ImageStatus {
    let Some(release) = OsRelease::read(root) else {
        return ImageStatus::not_an_image(&format!(
            "no os-release in {} or {}",
            root.join(super::os_release::PLACES[0]).display(),
            root.join(super::os_release::PLACES[1]).display()
        ));
    };
    match release.get("IMAGE_ID") {
        Some(IMAGE_ID) => {}
        Some(other) => {
            return ImageStatus::not_an_image(&format!(
                "{} has IMAGE_ID={}, not {IMAGE_ID}",
                release.path.display(),
                crate::echo::quoted(other)
            ))
        }
        None => {
            return ImageStatus::not_an_image(&format!(
                "{} has no IMAGE_ID",
                release.path.display()
            ))
        }
    }
    let mut notes = Vec::new();
    let version = release.get("IMAGE_VERSION").unwrap_or_default().to_string();
    if version.is_empty() {
        notes.push(format!("{} has no IMAGE_VERSION", release.path.display()));
    }
    let cmdline_path = root.join("proc/cmdline");
    let cmdline = match std::fs::read_to_string(&cmdline_path) {
        Ok(text) => Cmdline::parse(&text),
        Err(e) => {
            notes.push(format!("cannot read {}: {e}", cmdline_path.display()));
            Cmdline::default()
        }
    };
    let scan = partitions::scan(root);
    notes.extend(scan.notes.iter().cloned());
    let device = verity::root_device(root);
    let booted_partitions: &[String] = device.as_ref().map(|d| d.slaves.as_slice()).unwrap_or(&[]);
    let mut slots = slots(&scan.partitions, IMAGE_ID, booted_partitions, &mut notes);
    let verity = verity_state(root, device.as_ref(), &cmdline, &mut notes);
    let mut slot = slots
        .iter()
        .find(|s| s.state == "booted")
        .map(|s| s.slot.clone())
        .unwrap_or_default();
    if slot.is_empty() && !version.is_empty() {
        // Without the verity device, the slot whose partitions carry the running
        // version is the one booted, when only one does.
        let matching: Vec<usize> = (0..slots.len())
            .filter(|&i| slots[i].version == version)
            .collect();
        if let [only] = matching[..] {
            slots[only].state = "booted".into();
            slot = slots[only].slot.clone();
            notes.push(format!(
                "the booted slot is told by its version only: no verity device holds slot {}",
                slot.to_uppercase()
            ));
        } else if !slots.is_empty() {
            notes.push("cannot tell which slot was booted".into());
        }
    }
    let other_version = slots
        .iter()
        .find(|s| !s.slot.is_empty() && s.slot != slot && !slot.is_empty())
        .map(|s| s.version.clone())
        .unwrap_or_default();
    let state_partition = state_partition(root, &scan.partitions, &mut notes);
    let requested = extras.reset_request.is_some_and(Path::exists);
    let trial = boot_entries::trial(root);
    let updates = extras
        .state_dir
        .map(|state_dir| updates(root, state_dir, &version, &mut notes))
        .unwrap_or_default();
    ImageStatus {
        image: true,
        message: None,
        os: Some(OsImage {
            image_id: IMAGE_ID.to_string(),
            version,
            slot,
            verity,
            roothash: cmdline.roothash.clone().unwrap_or_default(),
            slots,
            other_version,
            state_partition,
            factory_reset_pending: requested || super::reset::oneshot_is_factory_reset(root),
            factory_reset_boot: cmdline.factory_reset,
            update: updates.update,
            on_trial: matches!(trial, Trial::OnTrial(_)),
            boot_assessment: updates.boot_assessment,
            rejections: updates.rejections,
            rollbacks_total: updates.rollbacks_total,
            boot_assessments_total: updates.boot_assessments_total,
            notes,
        }),
    }
}

#[derive(Default)]
struct Updates {
    update: Option<UpdateProgress>,
    boot_assessment: Option<Assessment>,
    rejections: Vec<Rejection>,
    rollbacks_total: u64,
    boot_assessments_total: BTreeMap<String, u64>,
}

/// The update's progress and the boot check's history, from the state folder.
fn updates(root: &Path, state_dir: &Path, version: &str, notes: &mut Vec<String>) -> Updates {
    let boot_id = boot_check::boot_id(root);
    let update = progress::as_seen(root, state_dir, version);
    let (history, problem) = boot_check::read_history(state_dir);
    notes.extend(problem);
    let mut totals: BTreeMap<String, u64> = ["pass", "fail", "rejected"]
        .iter()
        .map(|r| (r.to_string(), 0))
        .collect();
    for a in &history {
        let key = if a.rejected {
            "rejected"
        } else {
            a.result.as_str()
        };
        *totals.entry(key.to_string()).or_default() += 1;
    }
    let mut rejections: Vec<Rejection> = Vec::new();
    for a in history.iter().rev().filter(|a| a.rejected) {
        if rejections.iter().any(|r| r.version == a.version) {
            continue;
        }
        rejections.push(Rejection {
            version: a.version.clone(),
            at: Some(a.at),
            reason: a.reason.clone(),
            previous_version: a.previous_version.clone(),
            failed_checks: a.checks.iter().filter(|c| c.failed()).cloned().collect(),
        });
    }
    let mut rollbacks_total = history.iter().filter(|a| a.rejected).count() as u64;
    for (version, reason) in super::install::rejected(root, &history) {
        if !rejections.iter().any(|r| r.version == version) {
            rollbacks_total += 1;
            rejections.push(Rejection {
                version,
                at: None,
                reason,
                previous_version: None,
                failed_checks: Vec::new(),
            });
        }
    }
    let boot_assessment = history
        .iter()
        .rev()
        .find(|a| !boot_id.is_empty() && a.boot_id == boot_id)
        .cloned();
    Updates {
        update: Some(update),
        boot_assessment,
        rejections,
        rollbacks_total,
        boot_assessments_total: totals,
    }
}

/// The disk the slots are on: the one holding the booted root partition, else the
/// first (by name) with a partition of the image's.
fn image_disk<'a>(
    partitions: &'a [Partition],
    image_id: &str,
    booted: &[String],
) -> Option<&'a str> {
    partitions
        .iter()
        .find(|p| booted.contains(&p.name))
        .or_else(|| {
            let mut named: Vec<&Partition> = partitions
                .iter()
                .filter(|p| matches!(p.role(image_id), Role::Root(_) | Role::Hash(_)))
                .collect();
            named.sort_by(|a, b| a.name.cmp(&b.name));
            named.into_iter().next()
        })
        .or_else(|| partitions.iter().find(|p| p.role(image_id) == Role::Empty))
        .map(Partition::disk)
}

/// The slots on the image's disk: its root, hash and empty partitions in partition
/// order, taken two at a time as the image lays them out (a slot's hash partition,
/// then its root). The first pair is slot A, the second B.
fn slots(
    partitions: &[Partition],
    image_id: &str,
    booted: &[String],
    notes: &mut Vec<String>,
) -> Vec<Slot> {
    let Some(disk) = image_disk(partitions, image_id, booted) else {
        notes.push(
            "no partition of the image's slots (named tinybox_<version>_r, _v or _empty)".into(),
        );
        return Vec::new();
    };
    let mut members: Vec<&Partition> = partitions
        .iter()
        .filter(|p| p.disk() == disk)
        .filter(|p| {
            matches!(
                p.role(image_id),
                Role::Root(_) | Role::Hash(_) | Role::Empty
            )
        })
        .collect();
    members.sort_by_key(|p| p.number);
    let mut pairs: Vec<Vec<&Partition>> = Vec::new();
    for partition in members {
        match pairs.last_mut() {
            Some(last) if last.len() == 1 && belong_together(last[0], partition, image_id) => {
                last.push(partition)
            }
            _ => pairs.push(vec![partition]),
        }
    }
    if pairs.len() > 2 {
        notes.push(format!(
            "{} has {} slots' worth of partitions; only the first two are slots A and B",
            disk,
            pairs.len()
        ));
    }
    pairs
        .iter()
        .take(2)
        .zip(["a", "b"])
        .map(|(pair, name)| slot_of(name, pair, image_id, booted, notes))
        .collect()
}

/// Whether two partitions in a row are one slot's: both empty, or a root and a hash
/// partition of one version.
fn belong_together(a: &Partition, b: &Partition, image_id: &str) -> bool {
    match (a.role(image_id), b.role(image_id)) {
        (Role::Empty, Role::Empty) => true,
        (Role::Hash(x), Role::Root(y)) | (Role::Root(x), Role::Hash(y)) => x == y,
        _ => false,
    }
}

fn slot_of(
    name: &str,
    pair: &[&Partition],
    image_id: &str,
    booted: &[String],
    notes: &mut Vec<String>,
) -> Slot {
    let mut slot = Slot {
        slot: name.to_string(),
        version: String::new(),
        state: "empty".into(),
        root_partition: String::new(),
        hash_partition: String::new(),
    };
    match pair {
        [a, b] if a.role(image_id) == Role::Empty => {
            // An empty slot's partitions are laid out hash first, then root.
            slot.hash_partition = a.name.clone();
            slot.root_partition = b.name.clone();
        }
        [a, b] => {
            for p in [a, b] {
                match p.role(image_id) {
                    Role::Root(v) => {
                        slot.root_partition = p.name.clone();
                        slot.version = v;
                    }
                    Role::Hash(_) => slot.hash_partition = p.name.clone(),
                    _ => {}
                }
            }
            slot.state = "installed".into();
        }
        [one] => {
            match one.role(image_id) {
                Role::Root(v) => {
                    slot.root_partition = one.name.clone();
                    slot.version = v;
                }
                Role::Hash(v) => {
                    slot.hash_partition = one.name.clone();
                    slot.version = v;
                }
                _ => slot.root_partition = one.name.clone(),
            }
            slot.state = "incomplete".into();
            notes.push(format!(
                "slot {} has only partition {} ({}); its partner is missing or named otherwise",
                name.to_uppercase(),
                one.name,
                crate::echo::quoted(&one.label)
            ));
        }
        _ => {}
    }
    if !slot.root_partition.is_empty() && booted.contains(&slot.root_partition) {
        slot.state = "booted".into();
    }
    slot
}

/// `verified` when the dm-verity device `root` backs `/` and the command line carries
/// its root hash; `off` otherwise, with the reason noted.
fn verity_state(
    root: &Path,
    device: Option<&verity::RootDevice>,
    cmdline: &Cmdline,
    notes: &mut Vec<String>,
) -> String {
    let off = |notes: &mut Vec<String>, why: String| {
        notes.push(format!("verity off: {why}"));
        "off".to_string()
    };
    let Some(device) = device else {
        return off(notes, "no device-mapper device named root".into());
    };
    if !device.is_verity() {
        return off(
            notes,
            format!(
                "{} is not a dm-verity device (uuid {})",
                device.name,
                crate::echo::quoted(&device.uuid)
            ),
        );
    }
    let mountinfo_path = root.join("proc/self/mountinfo");
    let mountinfo = match std::fs::read_to_string(&mountinfo_path) {
        Ok(text) => text,
        Err(e) => {
            return off(
                notes,
                format!("cannot read {}: {e}", mountinfo_path.display()),
            )
        }
    };
    let Some(mount) = verity::root_mount(&mountinfo) else {
        return off(
            notes,
            format!("{} mounts nothing at /", mountinfo_path.display()),
        );
    };
    if let Err(why) = mount.is_backed_by(device) {
        return off(notes, why);
    }
    if cmdline.roothash.is_none() {
        return off(notes, "no roothash= on the kernel command line".into());
    }
    "verified".into()
}

/// The partition named `var`, and the size of the filesystem at `root/var`.
fn state_partition(
    root: &Path,
    partitions: &[Partition],
    notes: &mut Vec<String>,
) -> Option<StatePartition> {
    let Some(partition) = partitions.iter().find(|p| p.label == "var") else {
        notes.push("no partition named var (the state partition)".into());
        return None;
    };
    let var = root.join("var");
    let (size_bytes, free_bytes) = match nix::sys::statvfs::statvfs(&var) {
        Ok(stat) => {
            let unit = stat.fragment_size();
            (
                Some(stat.blocks() * unit),
                Some(stat.blocks_available() * unit),
            )
        }
        Err(e) => {
            notes.push(format!("cannot measure {}: {e}", var.display()));
            (None, None)
        }
    };
    Some(StatePartition {
        device: partition.name.clone(),
        size_bytes,
        free_bytes,
    })
}
