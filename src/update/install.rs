//! An OS update from start to end, as the root side runs it: what the source offers
//! (`check`), the choice of version and every refusal that must come before a byte
//! is written (signature, a whole version, not rejected here, checksums of a local
//! source, room in the other slot and in the EFI system partition), then
//! systemd-sysupdate, with the progress stored for the agent to publish.

use std::path::{Path, PathBuf};

use chrono::Utc;
use serde::Serialize;

use super::boot_check;
use super::boot_entries;
use super::error::UpdateError;
use super::gate::Assessment;
use super::progress::{self, UpdateProgress};
use super::source::{self, compare_versions, OfferedVersion, Source, VerifiedList};
use super::status::{self, Extras, OsImage};
use super::sysupdate;

/// Where things are for one update.
#[derive(Debug, Clone)]
pub struct Places {
    /// The root the image is read below (`/`).
    pub root: PathBuf,
    /// The agent's state folder (progress, assessments, requests).
    pub state_dir: PathBuf,
    /// Where the rendered transfer definitions go (`/run/tinyperf/sysupdate.d`).
    pub definitions: PathBuf,
}

impl Places {
    /// The keyring that vouches for updates.
    pub fn keyring(&self) -> PathBuf {
        source::keyring(&self.root)
    }
}

/// A version the source offers, as this box sees it.
#[derive(Debug, Clone, Serialize)]
pub struct Offer {
    /// The version.
    pub version: String,
    /// `newer`, `current`, `older` or `rejected`.
    pub state: String,
    /// Its three files' size in bytes, when the source says.
    pub bytes: Option<u64>,
    /// Why it was rejected, for a rejected one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What `check` found.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// The source, in words.
    pub source: String,
    /// The running version.
    pub current: String,
    /// Every version offered whole, newest first.
    pub versions: Vec<Offer>,
    /// Versions listed with files missing, and what they lack.
    pub incomplete: Vec<(String, String)>,
    /// The version `update` with no version would install; `None` when up to date.
    pub newest: Option<String>,
}

/// Versions this box rejected, newest assessment first, with the reason: those its
/// boot check rejected (in `history`, the assessments read from the state folder), and
/// those whose entry below `root` ran out of tries without an assessment.
pub fn rejected(root: &Path, history: &[Assessment]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for a in history.iter().rev().filter(|a| a.rejected) {
        if !out.iter().any(|(v, _)| v == &a.version) {
            out.push((a.version.clone(), a.reason.clone()));
        }
    }
    if let Ok(entries) = boot_entries::list(&boot_entries::esp_dir(root)) {
        for bad in boot_entries::rejected_versions(&entries) {
            if !out.iter().any(|(v, _)| v == &bad.version) {
                out.push((
                    bad.version.clone(),
                    format!(
                        "{} rejected: its boot entry ran out of tries ({}) without passing the boot check",
                        bad.version, bad.file
                    ),
                ));
            }
        }
    }
    out
}

/// The running image, which must have a version.
fn running_image(root: &Path) -> Result<OsImage, UpdateError> {
    let image = status::read(root, Extras::default());
    let Some(os) = image.os else {
        return Err(UpdateError::NotAnImage(
            image
                .message
                .unwrap_or_else(|| "not a tinybox OS image".into()),
        ));
    };
    if os.version.is_empty() {
        return Err(UpdateError::NotAnImage(
            "the running image has no IMAGE_VERSION, so no version is newer".into(),
        ));
    }
    Ok(os)
}

/// What `source` offers, each version marked against the running one and this box's
/// rejections.
pub fn check(places: &Places, source: &Source) -> Result<CheckReport, UpdateError> {
    let current = running_image(&places.root)?.version;
    let list = source::read_verified(source, &places.keyring())?;
    Ok(report(places, source, &current, &list, true))
}

fn report(
    places: &Places,
    source: &Source,
    current: &str,
    list: &VerifiedList,
    sizes: bool,
) -> CheckReport {
    let (history, _) = boot_check::read_history(&places.state_dir);
    let rejected = rejected(&places.root, &history);
    let versions: Vec<Offer> = list
        .versions
        .iter()
        .map(|v| {
            let reason = rejected
                .iter()
                .find(|(r, _)| r == &v.version)
                .map(|(_, why)| why.clone());
            let state = if reason.is_some() {
                "rejected"
            } else {
                match compare_versions(&v.version, current) {
                    std::cmp::Ordering::Greater => "newer",
                    std::cmp::Ordering::Equal => "current",
                    std::cmp::Ordering::Less => "older",
                }
            };
            Offer {
                version: v.version.clone(),
                state: state.into(),
                bytes: if sizes { total_size(source, v) } else { None },
                reason,
            }
        })
        .collect();
    let newest = versions
        .iter()
        .find(|o| o.state == "newer")
        .map(|o| o.version.clone());
    CheckReport {
        source: source.describe(),
        current: current.to_string(),
        versions,
        incomplete: list.partial.clone(),
        newest,
    }
}

fn total_size(source: &Source, version: &OfferedVersion) -> Option<u64> {
    version.files().iter().map(|f| source.size(f)).sum()
}

/// An update ready to be written.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The source.
    pub source: Source,
    /// The version and its files.
    pub target: OfferedVersion,
    /// The running version.
    pub current: String,
    /// The update's bytes (compressed), when known.
    pub total_bytes: Option<u64>,
}

/// Chooses the version (`wanted`, else the newest newer one not rejected) and makes
/// every check that can refuse it before anything is written.
pub fn plan(places: &Places, source: &Source, wanted: Option<&str>) -> Result<Plan, UpdateError> {
    let image = running_image(&places.root)?;
    let current = image.version.clone();
    let list = source::read_verified(source, &places.keyring())?;
    let report = report(places, source, &current, &list, false);
    let target = match wanted.filter(|w| !w.is_empty()) {
        Some(wanted) => {
            let Some(target) = list.versions.iter().find(|v| v.version == wanted) else {
                let why = match list.partial.iter().find(|(v, _)| v == wanted) {
                    Some((_, missing)) => missing.clone(),
                    None => format!(
                        "offered: {}",
                        if list.versions.is_empty() {
                            "nothing whole".to_string()
                        } else {
                            list.versions
                                .iter()
                                .map(|v| v.version.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    ),
                };
                return Err(UpdateError::NotOffered {
                    version: wanted.into(),
                    source_name: source.describe(),
                    why,
                });
            };
            if wanted == current {
                return Err(UpdateError::UpToDate(format!("{current} already runs")));
            }
            target.clone()
        }
        None => {
            let Some(newest) = &report.newest else {
                let mut why = format!("{} offers nothing newer than {current}", source.describe());
                if let Some(r) = report.versions.iter().find(|o| o.state == "rejected") {
                    why.push_str(&format!(
                        " that this box has not rejected ({} was)",
                        r.version
                    ));
                }
                if let Some((v, missing)) = list
                    .partial
                    .iter()
                    .find(|(v, _)| compare_versions(v, &current).is_gt())
                {
                    why.push_str(&format!("; {v} is listed but incomplete: {missing}"));
                }
                return Err(UpdateError::UpToDate(why));
            };
            list.versions
                .iter()
                .find(|v| &v.version == newest)
                .cloned()
                .expect("the newest offer is in the list")
        }
    };
    if let Some(r) = report
        .versions
        .iter()
        .find(|o| o.version == target.version && o.state == "rejected")
    {
        return Err(UpdateError::Rejected {
            version: target.version.clone(),
            reason: r.reason.clone().unwrap_or_default(),
        });
    }
    if let Source::Folder(folder) = source {
        for file in target.files() {
            let path = folder.join(file);
            let found = source::sha256_file(&path).map_err(|e| UpdateError::Fetch {
                what: path.display().to_string(),
                why: e.to_string(),
            })?;
            let expected = list.sha256_of(file).unwrap_or_default();
            if found != expected {
                return Err(UpdateError::Checksum {
                    file: file.to_string(),
                    expected: expected.into(),
                    found,
                });
            }
        }
    }
    let total_bytes = total_size(source, &target);
    check_space(&places.root, &image, &target, source)?;
    Ok(Plan {
        source: source.clone(),
        target,
        current,
        total_bytes,
    })
}

/// The other slot must exist and be large enough for the compressed images (a
/// necessary bound; systemd-sysupdate refuses an image larger than its partition), and
/// the EFI system partition must hold the UKI once older entries are let go.
fn check_space(
    root: &Path,
    os: &OsImage,
    target: &OfferedVersion,
    source: &Source,
) -> Result<(), UpdateError> {
    let current = os.version.as_str();
    let Some(other) = os.slots.iter().find(|s| s.state != "booted") else {
        return Err(UpdateError::NotAnImage(format!(
            "no second slot to write: the disk has {} slot(s) of tinybox partitions",
            os.slots.len()
        )));
    };
    for (file, partition, what) in [
        (&target.root, &other.root_partition, "root"),
        (&target.verity, &other.hash_partition, "verity hash"),
    ] {
        let Some(size) = partition_bytes(root, partition) else {
            continue;
        };
        if let Some(needed) = source.size(file) {
            if needed > size {
                return Err(UpdateError::NoSpace(format!(
                    "{file} is {needed} bytes compressed, more than slot {}'s {what} partition {partition} ({size} bytes)",
                    other.slot.to_uppercase()
                )));
            }
        }
    }
    let esp = boot_entries::esp_dir(root);
    if let (Some(needed), Ok(stat)) = (source.size(&target.uki), nix::sys::statvfs::statvfs(&esp)) {
        let free = stat.blocks_available() * stat.fragment_size();
        let freed: u64 = boot_entries::list(&esp)
            .unwrap_or_default()
            .iter()
            .filter(|e| e.version != current)
            .filter_map(|e| std::fs::metadata(esp.join("EFI/Linux").join(&e.file)).ok())
            .map(|m| m.len())
            .sum();
        let margin = 1 << 20;
        if needed + margin > free + freed {
            return Err(UpdateError::NoSpace(format!(
                "the EFI system partition ({}) has {} MiB free ({} MiB more once older entries go); the UKI {} needs {} MiB",
                esp.display(),
                free >> 20,
                freed >> 20,
                target.uki,
                (needed + margin) >> 20
            )));
        }
    }
    Ok(())
}

fn partition_bytes(root: &Path, name: &str) -> Option<u64> {
    if name.is_empty() {
        return None;
    }
    let text =
        std::fs::read_to_string(root.join("sys/class/block").join(name).join("size")).ok()?;
    text.trim().parse::<u64>().ok().map(|sectors| sectors * 512)
}

/// Writes the plan's version into the other slot with systemd-sysupdate, keeping the
/// progress file current and telling `on_progress` each change; the progress ends
/// `written`, or `rejected` with the reason.
pub fn install(
    places: &Places,
    plan: &Plan,
    mut on_progress: impl FnMut(&UpdateProgress),
) -> Result<(), UpdateError> {
    let boot_id = boot_check::boot_id(&places.root);
    let mut state = progress::read(&places.state_dir).unwrap_or_else(UpdateProgress::idle);
    state.state = "downloading".into();
    state.version = plan.target.version.clone();
    state.done_bytes = 0;
    state.total_bytes = plan.total_bytes.unwrap_or(0);
    state.message = format!(
        "writing {} into the other slot from {}",
        plan.target.version,
        plan.source.describe()
    );
    state.boot_id = boot_id;
    state.pid = std::process::id();
    state.updated_at = Utc::now();
    store(places, &state);
    on_progress(&state);
    sysupdate::write_definitions(
        &places.root.join(sysupdate::TEMPLATES_DIR),
        &places.definitions,
        &plan.source,
    )?;
    let mut last = 0;
    let result = sysupdate::update(
        &places.root.join(sysupdate::SYSUPDATE),
        &places.definitions,
        &plan.target.version,
        |percent| {
            let renew = (Utc::now() - state.updated_at).num_seconds() >= progress::RENEW_EVERY_S;
            if percent != last || renew {
                last = percent;
                state.done_bytes = state.total_bytes * u64::from(percent) / 100;
                state.updated_at = Utc::now();
                store(places, &state);
                on_progress(&state);
            }
        },
    );
    let mut state = progress::read(&places.state_dir).unwrap_or_else(UpdateProgress::idle);
    state.updated_at = Utc::now();
    state.pid = 0;
    match &result {
        Ok(()) => {
            state.state = "written".into();
            state.pending_version = plan.target.version.clone();
            state.done_bytes = state.total_bytes;
            state.message = format!(
                "{} written into the other slot; it starts at the next boot, on trial until its boot check passes",
                plan.target.version
            );
        }
        Err(e) => {
            state.state = "rejected".into();
            state.message = e.to_string();
        }
    }
    store(places, &state);
    on_progress(&state);
    result
}

/// Records that a check or an update has begun (`checking`), so that no run starts
/// meanwhile.
pub fn begin(places: &Places, version: &str) {
    let mut state = progress::read(&places.state_dir).unwrap_or_else(UpdateProgress::idle);
    state.state = "checking".into();
    state.version = version.to_string();
    state.message = "checking the update source".into();
    state.boot_id = boot_check::boot_id(&places.root);
    state.pid = std::process::id();
    state.updated_at = Utc::now();
    store(places, &state);
}

/// Records a refusal before anything was written.
pub fn refuse(places: &Places, version: &str, error: &UpdateError) {
    let mut state = progress::read(&places.state_dir).unwrap_or_else(UpdateProgress::idle);
    state.state = "rejected".into();
    state.version = version.to_string();
    state.message = error.to_string();
    state.updated_at = Utc::now();
    state.pid = 0;
    state.done_bytes = 0;
    store(places, &state);
}

/// Records a check's outcome: the newest version offered, for the status and metrics.
pub fn record_check(places: &Places, report: &CheckReport) {
    let mut state = progress::read(&places.state_dir).unwrap_or_else(UpdateProgress::idle);
    state.available = report.newest.clone().unwrap_or_default();
    state.updated_at = Utc::now();
    store(places, &state);
}

fn store(places: &Places, state: &UpdateProgress) {
    if let Err(e) = progress::write(&places.state_dir, state) {
        tracing::warn!(error = %e, "cannot store the update's progress");
    }
}
