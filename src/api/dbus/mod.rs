//! The D-Bus interface `org.tinyperf.Agent1`: the service the agent exports, the
//! proxy the command-line client calls it through, and the errors both sides share.
//!
//! Name, object and interface are all `org.tinyperf.Agent1` (object path
//! `/org/tinyperf/Agent1`). Who may call what is decided by the bus policy in
//! `systemd/org.tinyperf.Agent1.conf`, not here.

mod error;
mod interface;
mod options;
mod proxy;
mod read_only;
mod signals;

use anyhow::Context;
use zbus::fdo::RequestNameFlags;

use crate::agent::AgentHandle;

pub use error::Agent1Error;
pub use interface::AgentInterface;
pub use options::{json_to_variant, options_from_dbus};
pub use proxy::{
    Agent1Proxy, RunFinished, RunFinishedArgs, RunFinishedStream, RunStarted, RunStartedArgs,
    RunStartedStream, StageFinished, StageFinishedArgs, StageFinishedStream,
};
use read_only::ReadOnly;

/// The agent's well-known bus name.
pub const BUS_NAME: &str = "org.tinyperf.Agent1";
/// The path of the one object the agent exports.
pub const OBJECT_PATH: &str = "/org/tinyperf/Agent1";
/// The interface name.
pub const INTERFACE: &str = "org.tinyperf.Agent1";

/// Which bus to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusChoice {
    /// The system bus, where the agent runs on the box.
    System,
    /// The user's session bus (tests, a development agent).
    Session,
    /// The bus at this D-Bus address (`unix:path=/run/…`).
    Address(String),
}

impl std::str::FromStr for BusChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "system" => Ok(BusChoice::System),
            "session" => Ok(BusChoice::Session),
            a if a.contains(':') => Ok(BusChoice::Address(a.to_string())),
            other => Err(format!(
                "{other:?} is not a bus: use system, session or a D-Bus address"
            )),
        }
    }
}

impl std::fmt::Display for BusChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BusChoice::System => f.write_str("system"),
            BusChoice::Session => f.write_str("session"),
            BusChoice::Address(a) => f.write_str(a),
        }
    }
}

impl BusChoice {
    /// Connects to the bus as a plain client, exporting nothing.
    pub async fn connect(&self) -> zbus::Result<zbus::Connection> {
        self.builder().build().await
    }

    fn builder(&self) -> zbus::connection::Builder<'static> {
        match self {
            BusChoice::System => zbus::connection::Builder::system(),
            BusChoice::Session => zbus::connection::Builder::session(),
            BusChoice::Address(address) => zbus::connection::Builder::address(address.as_str()),
        }
    }
}

/// Connects to `bus`, exports the agent at [`OBJECT_PATH`], takes [`BUS_NAME`] and
/// starts forwarding the agent's events as signals and property changes. The
/// connection lives as long as the caller keeps the returned value.
pub async fn serve(handle: AgentHandle, bus: &BusChoice) -> anyhow::Result<zbus::Connection> {
    // Subscribe before exporting so no event between the two is lost.
    let events = handle.subscribe();
    let connection = bus
        .builder()
        .serve_at(
            OBJECT_PATH,
            ReadOnly::new(AgentInterface::new(handle), interface::PROPERTIES),
        )
        .build()
        .await
        .with_context(|| format!("cannot connect to the {bus} bus"))?;
    take_name(&connection).await?;
    let iface = connection
        .object_server()
        .interface::<_, ReadOnly<AgentInterface>>(OBJECT_PATH)
        .await
        .context("the agent object is not exported")?;
    tokio::spawn(signals::forward(iface, events));
    tracing::info!(bus = %bus, name = BUS_NAME, "serving on D-Bus");
    Ok(connection)
}

/// Requests the well-known name without queueing or replacing: a second agent on the
/// same bus must fail, not wait or steal the name.
async fn take_name(connection: &zbus::Connection) -> anyhow::Result<()> {
    match connection
        .request_name_with_flags(BUS_NAME, RequestNameFlags::DO_NOT_QUEUE)
        .await
    {
        Ok(_) => Ok(()),
        Err(zbus::Error::NameTaken) => anyhow::bail!(
            "the bus name {BUS_NAME} is already owned by another process (is another tinyperf agent running?)"
        ),
        Err(e) if error_name(&e).as_deref() == Some("org.freedesktop.DBus.Error.AccessDenied") => {
            anyhow::bail!(
                "the bus policy does not allow this user to own {BUS_NAME} (only root may): {e}"
            )
        }
        Err(e) => Err(e).with_context(|| format!("cannot request the bus name {BUS_NAME}")),
    }
}

/// The D-Bus error name carried by a zbus error, when it carries one.
pub fn error_name(error: &zbus::Error) -> Option<String> {
    match error {
        zbus::Error::MethodError(name, _, _) => Some(name.to_string()),
        zbus::Error::FDO(e) => Some(zbus::DBusError::name(e.as_ref()).to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_choice_parses_and_prints() {
        assert_eq!("system".parse::<BusChoice>(), Ok(BusChoice::System));
        assert_eq!("session".parse::<BusChoice>(), Ok(BusChoice::Session));
        let a: BusChoice = "unix:path=/tmp/x".parse().unwrap();
        assert_eq!(a, BusChoice::Address("unix:path=/tmp/x".into()));
        assert_eq!(a.to_string(), "unix:path=/tmp/x");
        assert!("nonsense".parse::<BusChoice>().is_err());
    }
}
