//! The OS image the agent runs on, as the front ends ask about it: its status read
//! below the configured `image_root`, and the factory-reset request written into the
//! state folder (a root service applies it; see `crate::update::reset`).

use std::path::PathBuf;

use super::error::AgentError;
use crate::update::reset::{self, ResetRequest};
use crate::update::status::{self, Extras, ImageStatus};

/// Where the image is read and where a factory-reset request goes.
#[derive(Debug, Clone)]
pub struct ImageSource {
    /// The root the image's files are read below (`/` on the box).
    pub root: PathBuf,
    /// The agent's state folder, which holds the request file.
    pub state_dir: PathBuf,
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
