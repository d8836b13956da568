//! Scores as `mlperf_logging.result_summarizer` (ruleset 4.0.0) computes them: a run's
//! time to train is `run_stop − run_start` in minutes, a run that fails the compliance
//! rules is dropped, the system's score drops the fastest and slowest of the rest (a
//! dropped run takes the slowest's place; more than one dropped is no score) and
//! averages the others, times the review's `scaling.json` when there is one.

use serde::Serialize;
use serde_json::Value;

use super::compliance::{self, Compliance};
use super::log::MlLogText;

/// Runs a ResNet result needs.
pub const RESULTS_NEEDED: usize = 5;
/// Non-converged runs a ResNet result may drop.
pub const MAX_DROPPED: usize = 1;

/// One evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Eval {
    /// The `epoch_num` it was logged at.
    pub epoch: f64,
    /// Top-1 accuracy, from 0 to 1.
    pub accuracy: f64,
}

/// One epoch (or block of epochs) of training, timed from its start and stop lines.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EpochTiming {
    /// The `epoch_num` of its start line.
    pub epoch: f64,
    /// Epochs the interval covers (a block may hold several).
    pub epochs: f64,
    /// Its length, in seconds.
    pub seconds: f64,
    /// `train_samples × epochs / seconds`, when the log says how many samples an epoch has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images_per_s: Option<f64>,
}

/// One run's log, read and judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunScore {
    /// `result_0`, or the file's name.
    pub name: String,
    /// The log's path, as given.
    pub file: String,
    /// `submission_platform`, as first logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// `submission_division`, as first logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub division: Option<String>,
    /// The `seed` the run logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<Value>,
    /// `run_stop`'s status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Whether the run counts towards the score: it passes the compliance rules and
    /// its `run_stop` says `success`.
    pub converged: bool,
    /// Whether it passes the compliance rules, which is all result_summarizer asks of a
    /// run before it counts its time.
    pub compliant: bool,
    /// `run_stop − run_start` in minutes, whenever both are logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_train_min: Option<f64>,
    /// The `epoch_num` of the last evaluation, as the RCP checker counts epochs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epochs_to_converge: Option<f64>,
    /// Each evaluation, in log order.
    pub evals: Vec<Eval>,
    /// Each timed epoch or block, in log order.
    pub epochs: Vec<EpochTiming>,
    /// Why the run does not count, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the compliance rules only warn about, and other oddities of the log (a repeated
    /// `run_start`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Energy of the timed part in joules, from the run's power logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// `run_stop − run_start`, in milliseconds.
    #[serde(skip)]
    pub run_ms: Option<f64>,
}

/// How the summarizer finds `run_start` and `run_stop`: it walks the lines, keeping
/// the latest `run_start`, until it has seen both.
pub fn run_start_stop(log: &MlLogText) -> (Option<f64>, Option<f64>) {
    let (mut start, mut stop) = (None, None);
    for entry in &log.entries {
        if entry.key == "run_start" {
            start = Some(entry.time_ms);
        }
        if entry.key == "run_stop" {
            stop = Some(entry.time_ms);
        }
        if start.is_some() && stop.is_some() {
            break;
        }
    }
    (start, stop)
}

fn number(v: &Value) -> Option<f64> {
    v.as_f64()
}

impl RunScore {
    /// Reads and judges one run's log: its times, evaluations and compliance.
    pub fn of(name: &str, file: &str, log: &MlLogText) -> RunScore {
        let compliance = compliance::check(log);
        let (start, stop) = run_start_stop(log);
        let run_ms = match (start, stop) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        };
        let status = log
            .first("run_stop")
            .and_then(|e| e.meta("status"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let evals: Vec<Eval> = log
            .with_key("eval_accuracy")
            .filter_map(|e| {
                Some(Eval {
                    epoch: e.meta("epoch_num").and_then(number)?,
                    accuracy: number(&e.value)?,
                })
            })
            .collect();
        let epochs_to_converge = log
            .with_key("eval_accuracy")
            .filter_map(|e| {
                e.meta("samples_count")
                    .or_else(|| e.meta("epoch_num"))
                    .and_then(number)
            })
            .last();
        let mut score = RunScore {
            name: name.to_string(),
            file: file.to_string(),
            platform: text_of(log, "submission_platform"),
            division: compliance.division.clone(),
            seed: log.first("seed").map(|e| e.value.clone()),
            status: status.clone(),
            converged: false,
            compliant: compliance.passed() && run_ms.is_some(),
            time_to_train_min: run_ms.map(|ms| ms / 60_000.0),
            epochs_to_converge,
            epochs: epoch_timings(log),
            evals,
            reason: None,
            warnings: compliance.warnings.clone(),
            energy_j: None,
            run_ms,
        };
        let starts = log.with_key("run_start").count();
        if starts > 1 {
            // One warning for the key, saying both what the checker says and how the
            // time is counted.
            score
                .warnings
                .retain(|w| !w.starts_with("run_start appears"));
            score.warnings.push(format!(
                "run_start appears {starts} times, where it should appear once: the time \
                 counts from the last one before run_stop, as result_summarizer counts it"
            ));
        }
        score.reason = why_not_counted(&compliance, log, &score);
        score.converged = score.reason.is_none();
        if score.run_ms.is_some_and(|ms| ms < 0.0) {
            // Never a negative time to train, in any figure.
            score.time_to_train_min = None;
            score.compliant = false;
        }
        if score.converged {
            score.epochs_to_converge = epochs_to_converge;
        }
        score
    }
}

fn text_of(log: &MlLogText, key: &str) -> Option<String> {
    log.first(key)
        .and_then(|e| e.value.as_str().map(str::to_string))
}

fn why_not_counted(compliance: &Compliance, log: &MlLogText, run: &RunScore) -> Option<String> {
    if let Some(benchmark) = &compliance.benchmark {
        if benchmark != "resnet" {
            return Some(format!(
                "a log of another benchmark ({benchmark}), not ResNet"
            ));
        }
    }
    let best = run
        .evals
        .iter()
        .max_by(|a, b| a.accuracy.total_cmp(&b.accuracy));
    let best_text = match best {
        Some(e) => format!("best top-1 {} at epoch {}", e.accuracy, e.epoch),
        None => "no evaluation".to_string(),
    };
    if log.entries.is_empty() {
        return Some(match log.bad_lines.first() {
            Some(bad) => format!(
                "no MLLOG lines can be read (line {}: {})",
                bad.line, bad.reason
            ),
            None => "no MLLOG lines".to_string(),
        });
    }
    if log.first("run_stop").is_none() {
        let last_epoch = run.epochs.last().map_or(0.0, |e| e.epoch);
        let cut = match log.bad_lines.last() {
            Some(bad) => format!(
                ", line {} cut short or unreadable: {}",
                bad.line, bad.reason
            ),
            None => String::new(),
        };
        return Some(format!(
            "no run_stop: the log ends after epoch {last_epoch}{cut} ({best_text})"
        ));
    }
    if let Some(ms) = run.run_ms.filter(|ms| *ms < 0.0) {
        return Some(format!(
            "run_stop is {:.3} s before run_start: the times are impossible",
            -ms / 1000.0
        ));
    }
    if let Some(bad) = run
        .evals
        .iter()
        .find(|e| !e.epoch.is_finite() || e.epoch < 0.0 || !(0.0..=1.0).contains(&e.accuracy))
    {
        return Some(format!(
            "an evaluation at epoch_num {} with accuracy {}: epochs count from 0 and top-1 lies in [0, 1]",
            bad.epoch, bad.accuracy
        ));
    }
    if !compliance.passed() {
        return Some(format!(
            "fails the compliance rules ({best_text}): {}",
            compliance.errors.join("; ")
        ));
    }
    match run.status.as_deref() {
        Some("success") => None,
        Some(other) => Some(format!("run_stop status {other} ({best_text})")),
        None => Some(format!("run_stop has no status ({best_text})")),
    }
}

/// Epoch intervals from `epoch_start`/`epoch_stop`, else from `block_start`/`block_stop`.
fn epoch_timings(log: &MlLogText) -> Vec<EpochTiming> {
    let samples = log.first("train_samples").and_then(|e| number(&e.value));
    let mut out = Vec::new();
    let pairs = [
        ("epoch_start", "epoch_stop", "epoch_num"),
        ("block_start", "block_stop", "first_epoch_num"),
    ];
    for (start_key, stop_key, field) in pairs {
        let mut open: Vec<(f64, f64, f64)> = Vec::new();
        for entry in &log.entries {
            let Some(epoch) = entry.meta(field).and_then(number) else {
                continue;
            };
            if entry.key == start_key {
                let count = if start_key == "block_start" {
                    entry.meta("epoch_count").and_then(number).unwrap_or(1.0)
                } else {
                    1.0
                };
                open.push((epoch, count, entry.time_ms));
            } else if entry.key == stop_key {
                if let Some(i) = open.iter().position(|(e, _, _)| *e == epoch) {
                    let (_, count, began) = open.remove(i);
                    let seconds = (entry.time_ms - began) / 1000.0;
                    out.push(EpochTiming {
                        epoch,
                        epochs: count,
                        seconds,
                        images_per_s: samples
                            .filter(|_| seconds > 0.0)
                            .map(|s| s * count / seconds),
                    });
                }
            }
        }
        if !out.is_empty() {
            break;
        }
    }
    out
}

/// A system's result: its runs and the olympic score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SystemScore {
    /// The system's name (its folder under `results/`).
    pub system: String,
    /// The division its runs logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub division: Option<String>,
    /// The olympic mean in minutes; absent when too many runs did not converge.
    pub time_to_train_min: Option<f64>,
    /// What result_summarizer prints: the same mean over every run that passes the
    /// compliance rules, whatever its `run_stop` status. It differs from
    /// `time_to_train_min` only when a compliant run did not end `success` (an open
    /// division run that missed its target).
    pub summarizer_time_to_train_min: Option<f64>,
    /// The `scaling.json` factor applied (1 without one).
    pub scaling_factor: f64,
    /// Runs that count towards the score.
    pub runs_counted: usize,
    /// Runs dropped for not converging.
    pub runs_dropped: usize,
    /// Whether the result has the five runs a ResNet score needs.
    pub complete: bool,
    /// The energy score in joules, olympic over the same runs, when power was logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// `energy_j` in kWh.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy_kwh: Option<f64>,
    /// What a reader should know about how the score was reached.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Every run, by name.
    pub runs: Vec<RunScore>,
}

/// The summarizer's olympic mean: sort, drop `max_dropped` from the bottom and the
/// slots of `max_dropped − dropped` from the top, average what is left.
pub fn olympic_mean(mut scores: Vec<f64>, dropped: usize, max_dropped: usize) -> Option<f64> {
    scores.sort_by(f64::total_cmp);
    let end = scores
        .len()
        .checked_sub(max_dropped.saturating_sub(dropped))?;
    let kept = scores.get(max_dropped.min(end)..end)?;
    if kept.is_empty() {
        return None;
    }
    Some(kept.iter().sum::<f64>() / kept.len() as f64)
}

/// `values` (one per counted run, in `times`' order) averaged over the runs the
/// time score keeps, as the summarizer averages energy.
pub fn olympic_by(
    times: &[f64],
    values: &[f64],
    dropped: usize,
    max_dropped: usize,
) -> Option<f64> {
    let mut order: Vec<usize> = (0..times.len()).collect();
    order.sort_by(|a, b| times[*a].total_cmp(&times[*b]));
    let sorted: Vec<f64> = order.iter().map(|i| values[*i]).collect();
    let end = sorted
        .len()
        .checked_sub(max_dropped.saturating_sub(dropped))?;
    let kept = sorted.get(max_dropped.min(end)..end)?;
    if kept.is_empty() {
        return None;
    }
    Some(kept.iter().sum::<f64>() / kept.len() as f64)
}

impl SystemScore {
    /// Scores `runs` of `system`; `has_power` says whether the result has power logs.
    pub fn of(
        system: &str,
        runs: Vec<RunScore>,
        scaling_factor: f64,
        has_power: bool,
    ) -> SystemScore {
        let counted: Vec<&RunScore> = runs.iter().filter(|r| r.converged).collect();
        let dropped = runs.len() - counted.len();
        let times: Vec<f64> = counted.iter().filter_map(|r| r.time_to_train_min).collect();
        let mut notes = Vec::new();
        let time = if dropped > MAX_DROPPED {
            notes.push(format!(
                "{dropped} runs did not converge; at most {MAX_DROPPED} may, so there is no score"
            ));
            None
        } else {
            olympic_mean(times.clone(), dropped, MAX_DROPPED).map(|m| m * scaling_factor)
        };
        if runs.len() != RESULTS_NEEDED {
            notes.push(format!(
                "{} run(s); a ResNet result needs exactly {RESULTS_NEEDED}, so this score is not one",
                runs.len()
            ));
        }
        if dropped == 1 && time.is_some() {
            notes.push("one run did not converge and is dropped as the slowest".into());
        }
        let energy = if has_power && dropped <= MAX_DROPPED {
            let values: Option<Vec<f64>> = counted.iter().map(|r| r.energy_j).collect();
            match values {
                Some(values) => {
                    olympic_by(&times, &values, dropped, MAX_DROPPED).map(|e| e * scaling_factor)
                }
                None => {
                    notes.push(
                        "a counted run has no readable power log, so there is no energy score"
                            .into(),
                    );
                    None
                }
            }
        } else {
            None
        };
        let compliant: Vec<f64> = runs
            .iter()
            .filter(|r| r.compliant)
            .filter_map(|r| r.time_to_train_min)
            .collect();
        let summarizer_dropped = runs.len() - compliant.len();
        let summarizer_time = if summarizer_dropped > MAX_DROPPED {
            None
        } else {
            olympic_mean(compliant, summarizer_dropped, MAX_DROPPED).map(|m| m * scaling_factor)
        };
        let division = runs.iter().find_map(|r| r.division.clone());
        for run in &runs {
            if !run.converged {
                if let Some(t) = run.time_to_train_min.filter(|_| run.status.is_some()) {
                    if run
                        .reason
                        .as_deref()
                        .is_some_and(|r| r.starts_with("run_stop status"))
                    {
                        notes.push(format!(
                            "{} ends {} yet passes the compliance rules: result_summarizer \
                             counts its {t:.3} min, the rules count it as not converged",
                            run.name,
                            run.status.as_deref().unwrap_or("?")
                        ));
                    }
                }
            }
        }
        SystemScore {
            system: system.to_string(),
            division,
            time_to_train_min: time,
            summarizer_time_to_train_min: summarizer_time,
            scaling_factor,
            runs_counted: counted.len(),
            runs_dropped: dropped,
            complete: runs.len() == RESULTS_NEEDED && time.is_some(),
            energy_j: energy,
            energy_kwh: energy.map(|j| j / 3.6e6),
            notes,
            runs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn olympic_drops_fastest_and_slowest() {
        assert_eq!(olympic_mean(vec![5.0, 1.0, 3.0, 4.0, 2.0], 0, 1), Some(3.0));
        // A dropped run is the slowest: only the fastest of the four goes.
        assert_eq!(olympic_mean(vec![4.0, 1.0, 2.0, 3.0], 1, 1), Some(3.0));
        assert_eq!(olympic_mean(vec![1.0, 2.0], 0, 1), None);
        assert_eq!(olympic_mean(vec![1.0, 2.0, 9.0], 0, 1), Some(2.0));
    }

    #[test]
    fn energy_follows_the_time_order() {
        let times = [3.0, 1.0, 2.0, 5.0, 4.0];
        let energy = [30.0, 10.0, 20.0, 50.0, 400.0];
        assert_eq!(
            olympic_by(&times, &energy, 0, 1),
            Some((20.0 + 30.0 + 400.0) / 3.0)
        );
    }
}
