//! `tinyperf boot-check`: the gate before `boot-complete.target`. It waits for this
//! boot's boot run, judges it (and on a new version's first boot its figures against
//! the version the box came from), and records the assessment in the state folder,
//! where every later version reads it. A failure on a version still on trial exits 1,
//! and `tinyperf boot-check --rejected` (the unit's failure handler) marks the boot bad
//! with systemd-bless-boot and reboots, so systemd-boot starts the previous version at
//! once instead of after its remaining tries. A failure on a blessed version is
//! recorded and published, and the version stays.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};

use super::args::BootCheckArgs;
use crate::agent::config::Config;
use crate::update::boot_check::{self, ThisBoot, Waited};
use crate::update::boot_entries::Trial;
use crate::update::gate::Assessment;

/// systemd-bless-boot, below the root.
const BLESS_BOOT: &str = "/usr/lib/systemd/systemd-bless-boot";

/// Runs the gate or its failure handler; returns the exit status.
pub fn main(args: &BootCheckArgs) -> anyhow::Result<i32> {
    let config = Config::load(&args.config)?;
    let root = args.root.clone().unwrap_or(config.image_root.clone());
    let state_dir = args.state_dir.clone().unwrap_or(config.state_dir.clone());
    let boot = ThisBoot::read(&root);
    if boot.version.is_empty() {
        println!(
            "not a tinybox OS image with a version ({}): nothing to check",
            root.display()
        );
        return Ok(0);
    }
    if args.rejected {
        return rejected(args, &boot, &state_dir);
    }
    let min_ratio = args.min_ratio.unwrap_or(config.boot_check_min_ratio);
    if !(min_ratio > 0.0 && min_ratio <= 10.0) {
        bail!("--min-ratio {min_ratio} must be more than 0 and at most 10");
    }
    let timeout = match args.timeout_s {
        Some(s) if s > 0.0 && s <= 86_400.0 => Duration::from_secs_f64(s),
        Some(s) => bail!("--timeout-s {s} must be more than 0 and at most 86400"),
        None => config.boot_check_timeout,
    };
    let since = boot_check::boot_time(&root).unwrap_or_else(chrono::Utc::now);
    println!(
        "boot check of {} ({}): waiting up to {} s for this boot's boot run",
        boot.version,
        trial_words(&boot.trial),
        timeout.as_secs()
    );
    let waited = if config.boot_suite.is_none() {
        Waited::Missing(format!(
            "no boot suite is configured (boot_suite in {}), so this boot has no run to judge",
            args.config.display()
        ))
    } else {
        boot_check::wait_for_boot_run(&state_dir, since, timeout, Duration::from_secs(2))
    };
    if let Waited::Finished(run) = &waited {
        println!(
            "boot run {} ({}) ended {}",
            run.id,
            run.suite,
            run.state.as_str()
        );
    }
    let (history, problem) = boot_check::read_history(&state_dir);
    if let Some(problem) = problem {
        tracing::warn!("{problem}");
    }
    let assessment = boot_check::judge_boot(&boot, &waited, &history, min_ratio);
    record(&state_dir, &assessment)?;
    print_assessment(&assessment);
    if assessment.passed() || !assessment.rejected {
        // Passed, or failed on a blessed version: the version stays.
        return Ok(0);
    }
    println!(
        "{} is rejected: this boot is marked bad and the box goes back to the version before",
        boot.version
    );
    Ok(1)
}

fn trial_words(trial: &Trial) -> String {
    match trial {
        Trial::OnTrial(path) => format!("on trial, booted from {path}"),
        Trial::Blessed => "blessed".into(),
    }
}

fn record(state_dir: &Path, assessment: &Assessment) -> anyhow::Result<()> {
    boot_check::record(state_dir, assessment).with_context(|| {
        format!(
            "cannot record the boot assessment in {}",
            boot_check::history_path(state_dir).display()
        )
    })
}

fn print_assessment(assessment: &Assessment) {
    println!("{}", assessment.reason);
    for check in &assessment.checks {
        println!(
            "  {:<5} {:<34} {} (expected {})",
            check.result, check.name, check.found, check.expected
        );
    }
}

/// The failure handler: the gate failed, timed out or was killed.
fn rejected(args: &BootCheckArgs, boot: &ThisBoot, state_dir: &Path) -> anyhow::Result<i32> {
    let (history, _) = boot_check::read_history(state_dir);
    let recorded = history
        .iter()
        .rev()
        .find(|a| !boot.boot_id.is_empty() && a.boot_id == boot.boot_id)
        .cloned();
    let assessment = match recorded {
        Some(a) if !a.passed() => a,
        Some(_) => {
            // The gate passed and something after it failed the unit: not the gate's
            // finding, so nothing is rolled back.
            println!("this boot's check passed; nothing to reject");
            return Ok(0);
        }
        None => {
            let a = boot_check::unfinished(boot);
            record(state_dir, &a)?;
            a
        }
    };
    println!("{}", assessment.reason);
    if !boot.on_trial() {
        println!(
            "{} is blessed: the failure is published and the version stays",
            boot.version
        );
        return Ok(0);
    }
    if args.dry_run {
        println!("would run: {BLESS_BOOT} bad; systemctl reboot");
        return Ok(0);
    }
    run(BLESS_BOOT, &["bad"])?;
    println!("marked this boot bad; rebooting into the previous version");
    run("systemctl", &["reboot"])?;
    Ok(0)
}

fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let status = std::process::Command::new(program)
        .args(args)
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    if !status.success() {
        bail!("{program} {} failed ({status})", args.join(" "));
    }
    Ok(())
}
