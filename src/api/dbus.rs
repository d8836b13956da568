//! The D-Bus interface `org.tinyperf.Agent1`. (Placeholder: not implemented yet.)

use crate::agent::AgentHandle;

/// Which bus to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BusChoice {
    System,
    Session,
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

pub async fn serve(_handle: AgentHandle, _bus: &BusChoice) -> anyhow::Result<zbus::Connection> {
    anyhow::bail!("D-Bus interface not implemented")
}
