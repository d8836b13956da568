//! The named errors of `org.tinyperf.Agent1`, shared by the service and its proxy.

use crate::agent::AgentError;

/// Errors the agent answers method calls with, named `org.tinyperf.Agent1.Error.*`.
/// On the client side, any other D-Bus error arrives as [`Agent1Error::ZBus`].
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.tinyperf.Agent1.Error")]
pub enum Agent1Error {
    /// Any other D-Bus error: the bus's, or one the proxy could not name.
    #[zbus(error)]
    ZBus(zbus::Error),
    /// A run is in progress; the description names it.
    Busy(String),
    /// No run has that id.
    NotFound(String),
    /// An unknown suite, option, or option value.
    InvalidArgs(String),
    /// A record too large to send whole.
    TooLarge(String),
    /// Not enough free space in the state directory to start a run.
    NoSpace(String),
    /// A file the agent never serves (a link in a run folder).
    Refused(String),
    /// The caller may not call this method (a method that checks its caller itself:
    /// `FactoryReset` is root's); the bus's own refusals are
    /// `org.freedesktop.DBus.Error.AccessDenied`.
    AccessDenied(String),
    /// The machine is not a tinybox OS image (a factory reset was asked for).
    NotAnImage(String),
    /// The update source cannot be used: unreachable, unsigned, wrongly signed, or it
    /// does not offer the version asked for.
    UpdateSource(String),
    /// Something broke inside the agent.
    Internal(String),
}

impl From<AgentError> for Agent1Error {
    fn from(e: AgentError) -> Self {
        let description = e.to_string();
        match e {
            AgentError::Busy(_) => Agent1Error::Busy(description),
            AgentError::NotFound(_) | AgentError::MissingFile(_) => {
                Agent1Error::NotFound(description)
            }
            AgentError::InvalidArgs(_) => Agent1Error::InvalidArgs(description),
            AgentError::TooLarge(_) => Agent1Error::TooLarge(description),
            AgentError::NoSpace(_) => Agent1Error::NoSpace(description),
            AgentError::Refused(_) => Agent1Error::Refused(description),
            AgentError::NotAnImage(_) => Agent1Error::NotAnImage(description),
            AgentError::Updating(_) => Agent1Error::Busy(description),
            AgentError::UpdateSource(_) => Agent1Error::UpdateSource(description),
            AgentError::Internal(_) => Agent1Error::Internal(description),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::DBusError;

    #[test]
    fn agent_errors_get_their_names() {
        for (e, name) in [
            (AgentError::Busy("r1".into()), "Busy"),
            (AgentError::NotFound("r2".into()), "NotFound"),
            (AgentError::InvalidArgs("x".into()), "InvalidArgs"),
            (AgentError::Internal("y".into()), "Internal"),
        ] {
            let text = e.to_string();
            let dbus = Agent1Error::from(e);
            assert_eq!(
                dbus.name().as_str(),
                format!("org.tinyperf.Agent1.Error.{name}")
            );
            assert_eq!(dbus.description(), Some(text.as_str()));
        }
    }
}
