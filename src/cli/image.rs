//! `tinyperf image status` and `tinyperf image factory-reset`: the OS image as firmware,
//! read from this machine directly (no agent needed), and the root side of a factory
//! reset.
//!
//! Exit status: 0 when the status was printed or the reset arranged (or, with
//! `--requested`, when no request was waiting); 1 when the reset is refused or fails.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use anyhow::{anyhow, bail, Context};

use super::args::{ImageCommand, ImageFactoryResetArgs, ImageStatusArgs};
use crate::api::dbus::{Agent1Proxy, BusChoice, BUS_NAME};
use crate::update::reset;
use crate::update::status::{self, Extras, ImageStatus};

/// Runs one `tinyperf image` command; returns the exit status.
pub fn main(command: &ImageCommand) -> anyhow::Result<i32> {
    match command {
        ImageCommand::Status(args) => status(args),
        ImageCommand::FactoryReset(args) => factory_reset(args),
        ImageCommand::Check(args) => super::image_update::check(args),
        ImageCommand::Update(args) => super::image_update::update(args),
    }
}

fn status(args: &ImageStatusArgs) -> anyhow::Result<i32> {
    let request = reset::request_path(&args.state_dir);
    let status = status::read(
        &args.root,
        Extras {
            reset_request: Some(&request),
            state_dir: Some(&args.state_dir),
        },
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", render(&status));
    }
    Ok(0)
}

/// The status for a person: the headline, then a line per fact.
pub fn render(status: &ImageStatus) -> String {
    let mut out = format!("{}\n", status.headline());
    let Some(os) = &status.os else {
        return out;
    };
    let mut line = |key: &str, value: String| out.push_str(&format!("  {key:<16}{value}\n"));
    line("image", format!("{} {}", os.image_id, or_dash(&os.version)));
    line(
        "verity",
        format!("{} (root hash {})", os.verity, or_dash(&os.roothash)),
    );
    for slot in &os.slots {
        let version = if slot.version.is_empty() {
            "(empty)"
        } else {
            &slot.version
        };
        line(
            &format!("slot {}", slot.slot.to_uppercase()),
            format!(
                "{version:<16} {:<10} root {}, hash {}",
                slot.state,
                or_dash(&slot.root_partition),
                or_dash(&slot.hash_partition)
            ),
        );
    }
    let state = match &os.state_partition {
        None => "—".to_string(),
        Some(p) => match (p.size_bytes, p.free_bytes) {
            (Some(size), Some(free)) => {
                format!("{}, {} of {} free", p.device, gib(free), gib(size))
            }
            _ => format!("{}, size unknown", p.device),
        },
    };
    line("state partition", state);
    if os.factory_reset_pending {
        line(
            "factory reset",
            "pending: the next boot erases the state partition".into(),
        );
    }
    if os.factory_reset_boot {
        line(
            "factory reset",
            "this boot erased the state partition".into(),
        );
    }
    if os.on_trial {
        line(
            "trial",
            "this version is on trial until its boot check passes".into(),
        );
    }
    if let Some(a) = &os.boot_assessment {
        line("boot check", a.reason.clone());
    }
    if let Some(u) = &os.update {
        let mut text = u.state.clone();
        if u.state == "downloading" && u.total_bytes > 0 {
            text.push_str(&format!(
                " {} of {} MiB",
                u.done_bytes >> 20,
                u.total_bytes >> 20
            ));
        }
        if !u.pending_version.is_empty() {
            text.push_str(&format!(
                ", {} written, starts at the next boot",
                u.pending_version
            ));
        }
        if !u.message.is_empty() && u.state != "idle" {
            text.push_str(&format!(": {}", u.message));
        }
        line("update", text);
        if !u.available.is_empty() {
            line("available", u.available.clone());
        }
    }
    for r in &os.rejections {
        line(
            "rejected",
            match r.at {
                Some(at) => format!("{} ({})", r.reason, at.format("%Y-%m-%d %H:%M UTC")),
                None => r.reason.clone(),
            },
        );
    }
    for note in &os.notes {
        line("note", note.clone());
    }
    out
}

fn or_dash(text: &str) -> &str {
    if text.is_empty() {
        "—"
    } else {
        text
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn factory_reset(args: &ImageFactoryResetArgs) -> anyhow::Result<i32> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "a factory reset needs root (it sets systemd-boot's next boot and reboots); \
             as another user, ask the agent: busctl call {BUS_NAME} /org/tinyperf/Agent1 \
             {BUS_NAME} FactoryReset, or POST /api/v1/image/factory-reset"
        );
    }
    if args.requested {
        match reset::take_request(&args.state_dir)? {
            None => {
                println!(
                    "no factory reset was requested ({} is absent); nothing to do",
                    reset::request_path(&args.state_dir).display()
                );
                return Ok(0);
            }
            Some(request) => tracing::warn!(
                requested_by = %request.requested_by,
                requested_at = %request.requested_at,
                "a factory reset was requested"
            ),
        }
    }
    let image = status::read(&args.root, Extras::default());
    if !image.image {
        bail!(
            "{}; a factory reset needs one",
            image
                .message
                .unwrap_or_else(|| "not a tinybox OS image".into())
        );
    }
    if let Some(run) = run_going(&args.bus, &args.state_dir)? {
        bail!("a run is going ({run}); cancel it or wait for it to end before a factory reset");
    }
    if !args.requested && !args.yes {
        confirm()?;
    }
    let entry = reset::apply(&args.root)?;
    println!("the next boot ({entry}) erases the state partition; rebooting");
    Ok(0)
}

/// Asks the operator at a terminal to type the host name; anything else refuses.
fn confirm() -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        bail!("not at a terminal: pass --yes to confirm the factory reset");
    }
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    eprint!(
        "A factory reset reboots this box and erases its state partition: every run, \
         record and setting.\nType the host name ({hostname}) to go on: "
    );
    std::io::stderr().flush().ok();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if hostname.is_empty() || answer.trim() != hostname {
        bail!("the answer is not the host name; nothing was done");
    }
    Ok(())
}

/// The run going, if any: asked of the agent on the bus when it is there (never
/// starting it by activation), else read from the run store.
pub fn run_going(bus: &str, state_dir: &Path) -> anyhow::Result<Option<String>> {
    let bus: BusChoice = bus.parse().map_err(|e: String| anyhow!(e))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let asked = runtime.block_on(async {
        let connection = bus.connect().await.ok()?;
        let dbus = zbus::fdo::DBusProxy::new(&connection).await.ok()?;
        let name = zbus::names::BusName::try_from(BUS_NAME).ok()?;
        if !dbus.name_has_owner(name).await.ok()? {
            return None;
        }
        let agent = Agent1Proxy::builder(&connection)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .ok()?;
        let state = agent.state().await.ok()?;
        let current = agent.current_run().await.unwrap_or_default();
        Some((state != "idle").then_some(current).map(|c| {
            if c.is_empty() {
                "the agent is busy".to_string()
            } else {
                format!("run {c}")
            }
        }))
    });
    match asked {
        Some(answer) => Ok(answer),
        None => Ok(running_in_store(state_dir)),
    }
}

/// A run the store under `state_dir` records as `running`: with no agent to ask, a
/// `tinyperf run --state-dir` may still be at work.
fn running_in_store(state_dir: &Path) -> Option<String> {
    let runs = std::fs::read_dir(state_dir.join("runs")).ok()?;
    runs.flatten().find_map(|entry| {
        let bytes = std::fs::read(entry.path().join("run.json")).ok()?;
        let record: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        (record["state"] == "running").then(|| {
            format!(
                "run {} in {}",
                entry.file_name().to_string_lossy(),
                state_dir.display()
            )
        })
    })
}
