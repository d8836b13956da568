//! The OS image the agent runs on, as the front ends ask about it: its status read
//! below the configured `image_root`, what the update source offers, and the requests
//! for an update or a factory reset written into the state folder (root services act
//! on them; see `crate::update::install` and `crate::update::reset`).

use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;

use super::error::AgentError;
use crate::update::install::{self, CheckReport, Places};
use crate::update::os_release::OsRelease;
use crate::update::progress::{self, UpdateProgress, UpdateRequest};
use crate::update::reset::{self, ResetRequest};
use crate::update::source::Source;
use crate::update::status::{self, Extras, ImageStatus};

/// How long an update request may wait for the root service before runs are let
/// through again (on a machine without it, nothing ever takes the request).
const REQUEST_HOLDS_RUNS_FOR: Duration = Duration::from_secs(120);

/// Where the image is read and where requests go.
#[derive(Debug, Clone)]
pub struct ImageSource {
    /// The root the image's files are read below (`/` on the box).
    pub root: PathBuf,
    /// The agent's state folder, which holds the request files.
    pub state_dir: PathBuf,
    /// `update_url` of the configuration.
    pub update_url: Option<String>,
}

impl ImageSource {
    /// The factory-reset request file.
    pub fn request_file(&self) -> PathBuf {
        reset::request_path(&self.state_dir)
    }

    /// The image's status now (a few small files read; call off the async threads).
    pub fn status(&self) -> ImageStatus {
        let request = self.request_file();
        status::read(
            &self.root,
            Extras {
                reset_request: Some(&request),
                state_dir: Some(&self.state_dir),
            },
        )
    }

    /// Writes the factory-reset request, after checking that this is an image:
    /// `NotAnImage` on any other machine. Whether a run is going is the caller's to
    /// check (the supervisor does, so that no run starts in between).
    pub fn request_reset(&self, requested_by: &str) -> Result<ResetRequest, AgentError> {
        let status = self.status();
        if !status.image {
            return Err(AgentError::NotAnImage(
                status
                    .message
                    .unwrap_or_else(|| "not a tinybox OS image".into()),
            ));
        }
        let request = reset::write_request(&self.state_dir, requested_by)
            .map_err(|e| AgentError::Internal(e.to_string()))?;
        tracing::warn!(
            requested_by = %request.requested_by,
            file = %self.request_file().display(),
            "factory reset requested: the box reboots and erases its state partition"
        );
        Ok(request)
    }
}

impl ImageSource {
    fn places(&self) -> Places {
        Places {
            root: self.root.clone(),
            state_dir: self.state_dir.clone(),
            definitions: PathBuf::new(),
        }
    }

    fn source(&self) -> Result<Source, AgentError> {
        let url = self.update_url.as_deref().ok_or_else(|| {
            AgentError::InvalidArgs(
                "no update source: set update_url in tinyperf.toml (an http(s):// URL or a folder)"
                    .into(),
            )
        })?;
        Ok(Source::parse(url)?)
    }

    /// What the update source offers (fetched and verified; call off the async threads).
    /// The newest version offered is kept for the status and `/metrics`.
    pub fn check_update(&self) -> Result<CheckReport, AgentError> {
        let status = self.status();
        if !status.image {
            return Err(AgentError::NotAnImage(
                status
                    .message
                    .unwrap_or_else(|| "not a tinybox OS image".into()),
            ));
        }
        let places = self.places();
        let report = install::check(&places, &self.source()?)?;
        install::record_check(&places, &report);
        Ok(report)
    }

    /// The update's state as this boot sees it.
    pub fn update_progress(&self) -> UpdateProgress {
        // os-release alone: the whole status (partitions, verity, assessments) is more
        // than this, which runs every second and at every run's start.
        let release = OsRelease::read(&self.root);
        let version = release
            .as_ref()
            .and_then(|r| r.get("IMAGE_VERSION"))
            .unwrap_or_default();
        progress::as_seen(&self.root, &self.state_dir, version)
    }

    /// Why no run may start now because of an update, if so: one is being checked or
    /// written, or was asked for moments ago and waits for the root service.
    pub fn update_busy(&self) -> Option<String> {
        let progress = self.update_progress();
        if progress.busy() {
            return Some(format!(
                "an OS update to {} is {} ({} of {} bytes); a run waits until it is written",
                if progress.version.is_empty() {
                    "the newest version"
                } else {
                    &progress.version
                },
                progress.state,
                progress.done_bytes,
                progress.total_bytes
            ));
        }
        let asked = std::fs::metadata(progress::request_path(&self.state_dir))
            .and_then(|m| m.modified())
            .ok()?;
        (asked.elapsed().unwrap_or_default() < REQUEST_HOLDS_RUNS_FOR).then(|| {
            "an OS update was asked for and is about to start; a run waits until it is written"
                .to_string()
        })
    }

    /// Writes the update request after checking that this is an image with a source.
    /// Whether a run is going is the caller's to check (the supervisor does).
    pub fn request_update(
        &self,
        version: &str,
        reboot: bool,
        requested_by: &str,
    ) -> Result<UpdateRequest, AgentError> {
        let status = self.status();
        if !status.image {
            return Err(AgentError::NotAnImage(
                status
                    .message
                    .unwrap_or_else(|| "not a tinybox OS image".into()),
            ));
        }
        self.source()?;
        if let Some(why) = self.update_busy() {
            return Err(AgentError::Updating(why));
        }
        if !version.is_empty()
            && !version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '~' | '^'))
        {
            return Err(AgentError::InvalidArgs(format!(
                "{} is not an OS version (digits, letters, '.', '~', '^')",
                crate::echo::quoted(version)
            )));
        }
        let request = UpdateRequest {
            version: version.to_string(),
            reboot,
            requested_by: requested_by.to_string(),
            requested_at: Utc::now(),
        };
        progress::write_request(&self.state_dir, &request)
            .map_err(|e| AgentError::Internal(format!("cannot write the update request: {e}")))?;
        tracing::info!(
            requested_by,
            version = if version.is_empty() {
                "the newest"
            } else {
                version
            },
            reboot,
            "OS update requested"
        );
        Ok(request)
    }
}
