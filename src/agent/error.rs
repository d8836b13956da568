//! The agent's errors, which the front ends turn into named D-Bus errors and HTTP
//! status codes.

use crate::record::store::ReadError;

/// Errors the front ends turn into named D-Bus errors and HTTP status codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// A run is in progress, so another cannot start; the message names the run.
    #[error("a run is already in progress: {0}")]
    Busy(String),
    /// No run in the store has this id.
    #[error("no run with id {}", crate::echo::quoted(.0))]
    NotFound(String),
    /// The run exists but lacks the file asked for; the message names both.
    #[error("{0}")]
    MissingFile(String),
    /// The request cannot be acted on: a bad run id, a suite's options that fail the
    /// preflight, or a cancel of a run not in progress.
    #[error("invalid arguments: {0}")]
    InvalidArgs(String),
    /// A record or file too large to be served whole.
    #[error("{0}")]
    TooLarge(String),
    /// Not enough free space to start a run.
    #[error("{0}")]
    NoSpace(String),
    /// A file the agent never serves (a link in a run folder, something not a plain
    /// file); the message says which.
    #[error("{0}")]
    Refused(String),
    /// The machine is not a tinybox OS image, so an image's operation (a factory reset)
    /// does not apply; the message says why.
    #[error("{0}")]
    NotAnImage(String),
    /// An OS update is being checked or written, so a run cannot start (or another update
    /// with it); the message says which.
    #[error("{0}")]
    Updating(String),
    /// The update source cannot be used: unreachable, unsigned, wrongly signed, or it does
    /// not offer the version asked for; the message says which.
    #[error("{0}")]
    UpdateSource(String),
    /// Something on the agent's side failed (the store, the worker, the inventory); not the
    /// caller's fault.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<crate::update::UpdateError> for AgentError {
    fn from(e: crate::update::UpdateError) -> Self {
        use crate::update::UpdateError as U;
        let text = e.to_string();
        match e {
            U::NoSource(_) | U::BadSource(_) | U::UpToDate(_) | U::Rejected { .. } => {
                AgentError::InvalidArgs(text)
            }
            U::Fetch { .. }
            | U::Unsigned(_)
            | U::BadSignature { .. }
            | U::BadList { .. }
            | U::Checksum { .. }
            | U::NotOffered { .. } => AgentError::UpdateSource(text),
            U::NoKeyring(_) | U::NotAnImage(_) => AgentError::NotAnImage(text),
            U::NoSpace(_) => AgentError::NoSpace(text),
            U::Busy(_) => AgentError::Updating(text),
            U::Sysupdate(_) | U::Io { .. } => AgentError::Internal(text),
        }
    }
}

impl From<ReadError> for AgentError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::InvalidId(id) => {
                AgentError::InvalidArgs(format!("invalid run id {}", crate::echo::quoted(&id)))
            }
            ReadError::NotFound(id) => AgentError::NotFound(id),
            e @ ReadError::MissingFile { .. } => AgentError::MissingFile(e.to_string()),
            e @ ReadError::TooLarge { .. } => AgentError::TooLarge(e.to_string()),
            ReadError::Unreadable(reason) => AgentError::Internal(reason),
            ReadError::Refused(reason) => AgentError::Refused(reason),
        }
    }
}

impl AgentError {
    /// A stable machine-readable code: `busy`, `not_found`, `invalid_args`,
    /// `too_large`, `no_space`, `refused`, `not_an_image`, `update_source`, `internal`.
    pub fn code(&self) -> &'static str {
        match self {
            AgentError::Busy(_) => "busy",
            AgentError::NotFound(_) | AgentError::MissingFile(_) => "not_found",
            AgentError::InvalidArgs(_) => "invalid_args",
            AgentError::TooLarge(_) => "too_large",
            AgentError::NoSpace(_) => "no_space",
            AgentError::Refused(_) => "refused",
            AgentError::NotAnImage(_) => "not_an_image",
            AgentError::Updating(_) => "busy",
            AgentError::UpdateSource(_) => "update_source",
            AgentError::Internal(_) => "internal",
        }
    }
}
