//! What a failed call to the agent means, in words an operator can act on.

use crate::api::dbus::{error_name, Agent1Error, BusChoice};

/// Why the agent could not be reached, with a hint at what to start.
pub fn unreachable(bus: &BusChoice) -> String {
    match bus {
        BusChoice::System => {
            "cannot reach the agent on the system bus: is tinyperf.service running?".to_string()
        }
        other => format!(
            "cannot reach the agent on the {other} bus: is `tinyperf agent --bus {other}` running?"
        ),
    }
}

/// The sentence for an error a call returned. `run_id` is the run the call was
/// about, if any; `busy_with` names the run in progress for `Busy`.
pub fn explain(
    error: &Agent1Error,
    bus: &BusChoice,
    run_id: Option<&str>,
    busy_with: Option<&str>,
) -> String {
    match error {
        Agent1Error::Busy(description) => match busy_with {
            Some(current) if !current.is_empty() => {
                format!("the agent is busy with run {current}; cancel it or wait for it to finish")
            }
            _ => format!("the agent is busy: {description}"),
        },
        Agent1Error::NotFound(description) => match run_id {
            Some(id) => format!("no run with id {id}"),
            None => description.clone(),
        },
        Agent1Error::InvalidArgs(description) => {
            format!("the agent refused the request: {description}")
        }
        Agent1Error::TooLarge(description) => format!("the agent cannot send it: {description}"),
        Agent1Error::NoSpace(description) => format!("the agent cannot start a run: {description}"),
        Agent1Error::Refused(description) => format!("the agent will not serve it: {description}"),
        Agent1Error::NotAnImage(description) => description.clone(),
        Agent1Error::UpdateSource(description) => {
            format!("the update source cannot be used: {description}")
        }
        Agent1Error::AccessDenied(description) => format!("permission denied: {description}"),
        Agent1Error::Internal(description) => format!("the agent failed: {description}"),
        Agent1Error::ZBus(e) => explain_bus_error(e, bus),
    }
}

fn explain_bus_error(error: &zbus::Error, bus: &BusChoice) -> String {
    match error_name(error).as_deref() {
        Some(
            "org.freedesktop.DBus.Error.ServiceUnknown"
            | "org.freedesktop.DBus.Error.NameHasNoOwner"
            | "org.freedesktop.DBus.Error.Spawn.ServiceNotFound"
            | "org.freedesktop.systemd1.NoSuchUnit",
        ) => unreachable(bus),
        Some("org.freedesktop.DBus.Error.AccessDenied") => format!(
            "permission denied: starting, cancelling and rescanning need root or membership of group tinyperf ({error})"
        ),
        Some("org.freedesktop.DBus.Error.NoReply" | "org.freedesktop.DBus.Error.Timeout") => {
            "the agent did not answer in time".to_string()
        }
        _ => format!("the D-Bus call to the agent failed: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_sentences() {
        let bus = BusChoice::System;
        assert_eq!(
            explain(&Agent1Error::NotFound("x".into()), &bus, Some("r1"), None),
            "no run with id r1"
        );
        assert!(
            explain(&Agent1Error::Busy("x".into()), &bus, None, Some("r2"))
                .starts_with("the agent is busy with run r2")
        );
        assert_eq!(
            unreachable(&bus),
            "cannot reach the agent on the system bus: is tinyperf.service running?"
        );
    }
}
