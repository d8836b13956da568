//! `tinyperf mlperf`: scores of MLPerf results, as tables or JSON.

use super::printable::printable;
use std::fmt::Write as _;

use crate::cli::args::{MlperfCommand, MlperfPackageArgs, MlperfScoreArgs};
use crate::cli::UsageError;
use crate::engine::mllog::Division;
use crate::mlperf::package::{package, PackageError, PackageRequest};
use crate::mlperf::score::SystemScore;

/// `tinyperf mlperf score|package`: runs the subcommand and returns its exit status (0
/// when every system scores, 1 when some result has no score); a bad name or run count
/// is a usage error, an unreadable or mismatched run a plain error.
pub fn main(command: &MlperfCommand) -> anyhow::Result<i32> {
    match command {
        MlperfCommand::Score(args) => score(args),
        MlperfCommand::Package(args) => write_package(args),
    }
}

/// Exit status 0 when the package is written and scores; 1 when it is written but
/// has no score (too many runs did not converge).
fn write_package(args: &MlperfPackageArgs) -> anyhow::Result<i32> {
    let request = PackageRequest {
        org: args.org.clone(),
        system: args.system.clone(),
        division: args.division.as_deref().map(|d| {
            if d == "closed" {
                Division::Closed
            } else {
                Division::Open
            }
        }),
        out_dir: args.out.clone(),
        runs: args.runs.clone(),
        record: None,
    };
    let report = package(&request).map_err(|e| match e {
        PackageError::BadName(_) | PackageError::RunCount(_) => {
            anyhow::Error::new(UsageError(e.to_string()))
        }
        other => anyhow::Error::new(other),
    })?;
    let systems = crate::mlperf::score_paths(std::slice::from_ref(&report.root))?;
    let scored = systems.iter().all(|s| s.time_to_train_min.is_some());
    if args.json {
        let out = serde_json::json!({ "package": report, "systems": systems });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "wrote {} ({} division, seeds {:?}{})",
            printable(&report.root.display().to_string()),
            report.division,
            report.seeds,
            if report.power { ", power logs" } else { "" }
        );
        for note in &report.notes {
            println!("  note: {}", printable(note));
        }
        for system in &systems {
            print!("{}", render(system));
        }
    }
    Ok(if scored { 0 } else { 1 })
}

/// Exit status 0 when every system has a score, 1 otherwise.
fn score(args: &MlperfScoreArgs) -> anyhow::Result<i32> {
    let systems = crate::mlperf::score_paths(&args.paths)?;
    if args.json {
        let out = serde_json::json!({ "ruleset": "4.0.0", "systems": systems });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for system in &systems {
            print!("{}", render(system));
        }
    }
    Ok(if systems.iter().all(|s| s.time_to_train_min.is_some()) {
        0
    } else {
        1
    })
}

fn render(s: &SystemScore) -> String {
    let mut out = String::new();
    let score = s
        .time_to_train_min
        .map_or("no score".to_string(), |t| format!("{t:.3} min"));
    let _ = writeln!(
        out,
        "{} ({}): {score}, {} of {} runs counted{}",
        printable(&s.system),
        printable(s.division.as_deref().unwrap_or("division unknown")),
        s.runs_counted,
        s.runs.len(),
        if s.scaling_factor != 1.0 {
            format!(", scaled by {}", s.scaling_factor)
        } else {
            String::new()
        }
    );
    if s.summarizer_time_to_train_min != s.time_to_train_min {
        let theirs = s
            .summarizer_time_to_train_min
            .map_or("no score".to_string(), |t| format!("{t:.3} min"));
        let _ = writeln!(
            out,
            "  result_summarizer, which does not read run_stop's status, prints {theirs}"
        );
    }
    if let Some(j) = s.energy_j {
        let _ = writeln!(out, "  energy: {j:.0} J ({:.4} kWh)", j / 3.6e6);
    }
    for run in &s.runs {
        let time = run
            .time_to_train_min
            .map_or("-".to_string(), |t| format!("{t:.3} min"));
        let epochs = run
            .epochs_to_converge
            .map_or(String::new(), |e| format!(", {e} epochs"));
        let energy = run
            .energy_j
            .map_or(String::new(), |j| format!(", {j:.0} J"));
        let verdict = match &run.reason {
            None => "converged".to_string(),
            Some(r) => format!("not counted: {}", printable(r)),
        };
        let _ = writeln!(
            out,
            "  {}: {time}{epochs}{energy}; {verdict}",
            printable(&run.name)
        );
    }
    for note in &s.notes {
        let _ = writeln!(out, "  note: {}", printable(note));
    }
    out
}
