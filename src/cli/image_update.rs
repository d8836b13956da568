//! `tinyperf image check` and `tinyperf image update`: what the update source offers,
//! and the root side of an update (run at a terminal, or by tinyperf-update.service on
//! the agent's request).
//!
//! Exit status: 0 when the versions were listed or the update written (or, with
//! `--requested`, when no request was waiting); 1 when the source cannot be used or
//! the update is refused or fails.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context};

use super::args::{ImageCheckArgs, ImageUpdateArgs, UpdatePlaces};
use crate::agent::config::Config;
use crate::update::install::{self, CheckReport, Places};
use crate::update::progress::{self, UpdateProgress};
use crate::update::source::Source;
use crate::update::UpdateError;

/// Where the runtime transfer definitions are written.
pub const DEFINITIONS_DIR: &str = "/run/tinyperf/sysupdate.d";

struct Resolved {
    places: Places,
    source: Option<Source>,
    config_path: PathBuf,
}

fn resolve(places: &UpdatePlaces) -> anyhow::Result<Resolved> {
    let config = Config::load(&places.config)?;
    let source = places
        .source
        .clone()
        .or(config.update_url.clone())
        .map(|s| Source::parse(&s))
        .transpose()?;
    Ok(Resolved {
        places: Places {
            root: places.root.clone().unwrap_or(config.image_root.clone()),
            state_dir: places.state_dir.clone().unwrap_or(config.state_dir.clone()),
            definitions: PathBuf::from(DEFINITIONS_DIR),
        },
        source,
        config_path: places.config.clone(),
    })
}

fn source(resolved: &Resolved) -> Result<Source, UpdateError> {
    resolved
        .source
        .clone()
        .ok_or_else(|| UpdateError::NoSource(resolved.config_path.display().to_string()))
}

/// `tinyperf image check`.
pub fn check(args: &ImageCheckArgs) -> anyhow::Result<i32> {
    let resolved = resolve(&args.places)?;
    let source = source(&resolved)?;
    let report = install::check(&resolved.places, &source)?;
    if nix::unistd::geteuid().is_root() {
        install::record_check(&resolved.places, &report);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_check(&report));
    }
    Ok(0)
}

/// The check for a person: a line per version.
pub fn render_check(report: &CheckReport) -> String {
    let mut out = format!("{}: running {}\n", report.source, report.current);
    if report.versions.is_empty() {
        out.push_str("  no version is offered whole\n");
    }
    for offer in &report.versions {
        let size = offer
            .bytes
            .map(|b| format!("{:.0} MiB", b as f64 / 1_048_576.0))
            .unwrap_or_else(|| "size unknown".into());
        out.push_str(&format!(
            "  {:<24} {:<9} {size}\n",
            offer.version, offer.state
        ));
        if let Some(reason) = &offer.reason {
            out.push_str(&format!("  {:<24} {reason}\n", ""));
        }
    }
    for (version, missing) in &report.incomplete {
        out.push_str(&format!("  {version:<24} incomplete: {missing}\n"));
    }
    match &report.newest {
        Some(v) => out.push_str(&format!("update available: {v} (tinyperf image update)\n")),
        None => out.push_str("up to date\n"),
    }
    out
}

/// `tinyperf image update`.
pub fn update(args: &ImageUpdateArgs) -> anyhow::Result<i32> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "an update needs root (systemd-sysupdate writes partitions and the EFI system \
             partition); as another user, ask the agent: busctl call {bus} /org/tinyperf/Agent1 \
             {bus} Update s \"\", or POST /api/v1/image/update",
            bus = crate::api::dbus::BUS_NAME
        );
    }
    let resolved = resolve(&args.places)?;
    let places = &resolved.places;
    let (mut version, mut reboot) = (args.version.clone().unwrap_or_default(), args.reboot);
    if args.requested {
        match progress::take_request(&places.state_dir).with_context(|| {
            format!(
                "cannot take the update request in {}",
                places.state_dir.display()
            )
        })? {
            None => {
                println!(
                    "no update was requested ({} is absent); nothing to do",
                    progress::request_path(&places.state_dir).display()
                );
                return Ok(0);
            }
            Some(request) => {
                tracing::info!(
                    requested_by = %request.requested_by,
                    version = %request.version,
                    "an OS update was requested"
                );
                version = request.version;
                reboot = request.reboot;
            }
        }
    }
    let refuse = |error: UpdateError| -> anyhow::Error {
        install::refuse(places, &version, &error);
        anyhow!(error)
    };
    let source = source(&resolved).map_err(refuse)?;
    if let Some(run) = super::image::run_going(&args.bus, &places.state_dir)? {
        return Err(refuse(UpdateError::Busy(format!(
            "a run is going ({run}); an update waits until it ends"
        ))));
    }
    install::begin(places, &version);
    let wanted = (!version.is_empty()).then_some(version.as_str());
    let plan = install::plan(places, &source, wanted).map_err(refuse)?;
    println!(
        "updating {} → {} from {}{}",
        plan.current,
        plan.target.version,
        source.describe(),
        plan.total_bytes
            .map(|b| format!(" ({:.0} MiB)", b as f64 / 1_048_576.0))
            .unwrap_or_default()
    );
    let started = std::time::Instant::now();
    let mut bar = ProgressLine::new(plan.total_bytes.unwrap_or(0));
    install::install(places, &plan, |state| bar.show(state))?;
    bar.finish();
    println!(
        "{} written into the other slot in {:.0} s; it starts at the next boot, on trial until its boot check passes",
        plan.target.version,
        started.elapsed().as_secs_f64()
    );
    if reboot {
        println!("rebooting into {}", plan.target.version);
        let status = std::process::Command::new("systemctl")
            .arg("reboot")
            .status()
            .context("cannot run systemctl reboot")?;
        if !status.success() {
            bail!(
                "systemctl reboot failed ({status}); reboot to start {}",
                plan.target.version
            );
        }
    }
    Ok(0)
}

/// Progress in bytes: a bar on stderr at a terminal, a line per tenth on stdout
/// elsewhere (a journal).
struct ProgressLine {
    bar: Option<indicatif::ProgressBar>,
    last_tenth: u64,
}

impl ProgressLine {
    fn new(total: u64) -> ProgressLine {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total.max(1));
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        ProgressLine { bar, last_tenth: 0 }
    }

    fn show(&mut self, state: &UpdateProgress) {
        if let Some(bar) = &self.bar {
            bar.set_position(state.done_bytes);
            return;
        }
        if let Some(tenth) = (state.done_bytes * 10).checked_div(state.total_bytes) {
            if tenth > self.last_tenth {
                self.last_tenth = tenth;
                // Off a terminal (a journal, a script), on stdout: stderr keeps the
                // reason alone when the update fails.
                println!(
                    "{} of {} bytes ({}%)",
                    state.done_bytes,
                    state.total_bytes,
                    tenth * 10
                );
            }
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
