//! Live progress for `tinyperf run` and `tinyperf health` when a person watches a terminal:
//! a bar per stage with its rate and the time it has left, and above the bars every line
//! the plain output has besides progress (the suite, the box, each stage's figures, checks,
//! findings and verdict, the run's end).
//!
//! [`Tracker`] folds the worker's events into what a bar shows and what is printed, with
//! the time passed in, so that part is tested without a terminal or a clock;
//! [`TerminalProgress`] draws it with indicatif.

use std::collections::VecDeque;
use std::io::{self, IsTerminal, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::human;
use crate::record::Verdict;
use crate::suite::event::WorkerEvent;

/// A bar's length in steps: fine enough that a long stage visibly moves.
pub const BAR_LENGTH: u64 = 1000;

/// How far back the rate looks: long enough to smooth steps of uneven length, short
/// enough to follow a stage that changes pace (preparing data, then training).
const RATE_WINDOW: Duration = Duration::from_secs(20);
/// A rate over less time than this is noise.
const MIN_RATE_SPAN: Duration = Duration::from_millis(500);
/// Samples kept at most: a fast CPU run reports progress every few milliseconds.
const MAX_SAMPLES: usize = 512;

/// How fast a stage goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// Training images per second, as the last training figure said.
    ImagesPerSecond(f64),
    /// The share of the stage done per second, 0..1.
    StagePerSecond(f64),
}

impl Rate {
    /// The rate as the bar shows it: `123 img/s` (one decimal below 10), or the stage's
    /// share in `%/s`, in `%/min` when slower than 0.1 %/s.
    pub fn render(self) -> String {
        match self {
            Rate::ImagesPerSecond(r) if r < 10.0 => format!("{r:.1} img/s"),
            Rate::ImagesPerSecond(r) => format!("{r:.0} img/s"),
            Rate::StagePerSecond(r) if r >= 0.001 => format!("{:.1} %/s", r * 100.0),
            Rate::StagePerSecond(r) => format!("{:.1} %/min", r * 6000.0),
        }
    }
}

/// What one stage's bar shows.
#[derive(Debug, Clone, PartialEq)]
pub struct BarState {
    /// `[2/8] cpu-gemm`, as the plain output's stage line.
    pub prefix: String,
    /// 0..=[`BAR_LENGTH`].
    pub position: u64,
    /// The stage's last word on what it is doing.
    pub message: String,
    /// How fast the stage goes lately; `None` until there is enough to tell.
    pub rate: Option<Rate>,
    /// Time left in the stage, at the rate it has gone lately.
    pub eta: Option<Duration>,
    /// The stage's verdict, once it has finished.
    pub verdict: Option<Verdict>,
}

impl BarState {
    /// The text after the bar: rate, time left, then the stage's message (or its verdict).
    pub fn status(&self) -> String {
        let mut parts = Vec::new();
        if let Some(verdict) = self.verdict {
            parts.push(verdict.as_str().to_uppercase());
        } else {
            if let Some(rate) = self.rate {
                parts.push(rate.render());
            }
            if let Some(eta) = self.eta {
                parts.push(format!("{} left", render_duration(eta)));
            }
        }
        if !self.message.is_empty() && self.verdict.is_none() {
            parts.push(self.message.clone());
        }
        parts.join(" · ")
    }
}

/// `42s`, `3m 07s`, `2h 05m`.
pub fn render_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// What the terminal should do for one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// Plain lines, each ending in a newline, printed above the bar.
    Lines(String),
    /// A stage started: a new bar.
    Begin(BarState),
    /// The current bar moved.
    Move(BarState),
    /// The stage finished: the bar stays as it ended.
    End(BarState),
}

/// The running stage, as its events have told it.
#[derive(Debug)]
struct Stage {
    state: BarState,
    index: usize,
    total: usize,
    /// The share of the stage done, 0..1, never going back.
    fraction: f64,
    /// (when, fraction) of the last [`RATE_WINDOW`].
    samples: VecDeque<(Duration, f64)>,
}

impl Stage {
    fn note(&mut self, now: Duration, fraction: f64) {
        self.fraction = self.fraction.max(fraction.clamp(0.0, 1.0));
        self.state.position = (self.fraction * BAR_LENGTH as f64).round() as u64;
        self.samples.push_back((now, self.fraction));
        while self.samples.len() > MAX_SAMPLES
            || self
                .samples
                .front()
                .is_some_and(|(t, _)| now.saturating_sub(*t) > RATE_WINDOW)
        {
            self.samples.pop_front();
        }
        let per_second = self.per_second();
        self.state.eta = per_second
            .filter(|_| self.fraction < 1.0)
            .map(|r| Duration::from_secs_f64(((1.0 - self.fraction) / r).min(1e7)));
        if !matches!(self.state.rate, Some(Rate::ImagesPerSecond(_))) {
            self.state.rate = per_second.map(Rate::StagePerSecond);
        }
    }

    /// The stage's share per second over the window, when it moved.
    fn per_second(&self) -> Option<f64> {
        let (t0, f0) = *self.samples.front()?;
        let (t1, f1) = *self.samples.back()?;
        let span = t1.saturating_sub(t0);
        (span >= MIN_RATE_SPAN && f1 > f0).then(|| (f1 - f0) / span.as_secs_f64())
    }
}

/// Folds the worker's events into bar states and lines to print.
#[derive(Debug, Default)]
pub struct Tracker {
    stage: Option<Stage>,
}

impl Tracker {
    /// A tracker that has seen no event yet.
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// What `event`, arriving at `now` (any fixed origin), changes on the terminal.
    pub fn apply(&mut self, event: &WorkerEvent, now: Duration) -> Vec<Update> {
        let mut updates = Vec::new();
        match event {
            WorkerEvent::StageStarted {
                stage,
                index,
                total,
            } => {
                updates.extend(self.end(None));
                let state = BarState {
                    prefix: format!("[{}/{total}] {stage}", index + 1),
                    position: 0,
                    message: String::new(),
                    rate: None,
                    eta: None,
                    verdict: None,
                };
                updates.push(Update::Begin(state.clone()));
                self.stage = Some(Stage {
                    state,
                    index: *index,
                    total: (*total).max(1),
                    fraction: 0.0,
                    samples: VecDeque::from([(now, 0.0)]),
                });
            }
            WorkerEvent::Progress {
                progress, message, ..
            } => match &mut self.stage {
                Some(stage) => {
                    // The event counts the whole run; the bar counts its stage's span.
                    let fraction = progress * stage.total as f64 - stage.index as f64;
                    if let Some(m) = message {
                        stage.state.message = m.clone();
                    }
                    stage.note(now, fraction);
                    updates.push(Update::Move(stage.state.clone()));
                }
                None => updates.extend(plain(event)),
            },
            WorkerEvent::Train { point } => {
                if let Some(stage) = &mut self.stage {
                    if point.images_per_s > 0.0 {
                        stage.state.rate = Some(Rate::ImagesPerSecond(point.images_per_s));
                        updates.push(Update::Move(stage.state.clone()));
                    }
                }
            }
            WorkerEvent::StageFinished { result } => {
                updates.extend(self.end(Some(result.verdict)));
                updates.extend(plain(event));
            }
            WorkerEvent::RunFinished { .. } => {
                updates.extend(self.end(None));
                updates.extend(plain(event));
            }
            WorkerEvent::RunStarted { .. } | WorkerEvent::Hardware { .. } => {
                updates.extend(plain(event))
            }
            WorkerEvent::Heartbeat | WorkerEvent::Telemetry { .. } => {}
        }
        updates
    }

    /// Ends the running stage's bar: full when the stage ran to a verdict on its checks,
    /// where it stopped when it could not run or was skipped.
    fn end(&mut self, verdict: Option<Verdict>) -> Option<Update> {
        let mut stage = self.stage.take()?;
        if matches!(verdict, Some(Verdict::Pass | Verdict::Fail)) {
            stage.state.position = BAR_LENGTH;
        }
        stage.state.verdict = verdict;
        stage.state.eta = None;
        Some(Update::End(stage.state))
    }
}

/// The plain output's lines for `event`, if it has any.
fn plain(event: &WorkerEvent) -> Option<Update> {
    let mut text = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = human::write_event(&mut text, event);
    (!text.is_empty()).then(|| Update::Lines(String::from_utf8_lossy(&text).into_owned()))
}

/// Draws the events of a run on the terminal on stdout: bars when stdout is a terminal
/// that can draw them, the plain lines otherwise.
pub struct TerminalProgress {
    tracker: Tracker,
    clock: Instant,
    /// Where bars are drawn; `None` writes the plain lines to stdout.
    term: Option<console::Term>,
    bar: Option<ProgressBar>,
}

impl Default for TerminalProgress {
    fn default() -> Self {
        TerminalProgress::new()
    }
}

impl TerminalProgress {
    /// Progress on stdout, drawn as bars when stdout is a terminal that is not `dumb`.
    pub fn new() -> TerminalProgress {
        TerminalProgress {
            tracker: Tracker::new(),
            clock: Instant::now(),
            term: terminal(),
            bar: None,
        }
    }

    /// Shows one event.
    pub fn show(&mut self, event: &WorkerEvent) -> io::Result<()> {
        let Some(term) = self.term.clone() else {
            return human::write_event(&mut io::stdout().lock(), event);
        };
        for update in self.tracker.apply(event, self.clock.elapsed()) {
            match update {
                Update::Lines(text) => match &self.bar {
                    Some(bar) => bar.suspend(|| write_str(&term, &text))?,
                    None => write_str(&term, &text)?,
                },
                Update::Begin(state) => {
                    let bar = ProgressBar::with_draw_target(
                        Some(BAR_LENGTH),
                        ProgressDrawTarget::term(term.clone(), 10),
                    )
                    .with_style(style());
                    draw(&bar, &state);
                    // Redraws the elapsed time while a stage computes without a word.
                    bar.enable_steady_tick(Duration::from_millis(250));
                    self.bar = Some(bar);
                }
                Update::Move(state) => {
                    if let Some(bar) = &self.bar {
                        draw(bar, &state);
                    }
                }
                Update::End(state) => {
                    if let Some(bar) = self.bar.take() {
                        draw(&bar, &state);
                        leave(&bar, &term)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Leaves the bar that is still drawn as it is; nothing more is drawn after it.
    pub fn finish(&mut self) {
        if let (Some(bar), Some(term)) = (self.bar.take(), &self.term) {
            // Nothing is left to tell a failed write to.
            let _ = leave(&bar, term);
        }
    }
}

impl Drop for TerminalProgress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// stdout as a terminal to draw on, or `None` for a pipe, a file or a terminal that
/// cannot move its cursor.
fn terminal() -> Option<console::Term> {
    let stdout = io::stdout();
    if !stdout.is_terminal() || std::env::var_os("TERM").is_some_and(|t| t == "dumb") {
        return None;
    }
    // The bars draw through a descriptor of their own, not `io::stdout()`: the run holds
    // stdout's lock while it hands over an event, and the thread redrawing the bar would
    // wait on that lock while holding the bar the run is about to update.
    let out = std::fs::File::from(stdout.as_fd().try_clone_to_owned().ok()?);
    Some(console::Term::read_write_pair(io::stdin(), out))
}

fn style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{prefix:.bold} [{bar:30.cyan/blue}] {percent:>3}% {elapsed:>4} {wide_msg}",
    )
    // The template is a constant; it parses.
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("█▉▊▋▌▍▎▏ ")
}

fn draw(bar: &ProgressBar, state: &BarState) {
    bar.set_prefix(state.prefix.clone());
    bar.set_position(state.position);
    bar.set_message(state.status());
}

/// Stops redrawing `bar` and leaves it as drawn, on a line of its own: indicatif leaves
/// the cursor at its end.
fn leave(bar: &ProgressBar, term: &console::Term) -> io::Result<()> {
    bar.abandon();
    write_str(term, "\n")
}

fn write_str(term: &console::Term, text: &str) -> io::Result<()> {
    let mut term = term.clone();
    term.write_all(text.as_bytes())?;
    term.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{RunState, StageResult};
    use crate::suite::event::{TrainPoint, TrainPointKind};

    fn at(seconds: f64) -> Duration {
        Duration::from_secs_f64(seconds)
    }

    fn started(index: usize, total: usize) -> WorkerEvent {
        WorkerEvent::StageStarted {
            stage: "smoke".into(),
            index,
            total,
        }
    }

    fn progress(progress: f64, message: Option<&str>) -> WorkerEvent {
        WorkerEvent::Progress {
            stage: "smoke".into(),
            progress,
            message: message.map(str::to_string),
        }
    }

    fn finished(verdict: Verdict) -> WorkerEvent {
        let now = chrono::Utc::now();
        WorkerEvent::StageFinished {
            result: StageResult {
                name: "smoke".into(),
                verdict,
                started_at: now,
                finished_at: now,
                metrics: vec![],
                checks: vec![],
                findings: vec!["seed 1".into()],
                message: Some("trained".into()),
            },
        }
    }

    fn train(images_per_s: f64) -> WorkerEvent {
        WorkerEvent::Train {
            point: TrainPoint {
                stage: "smoke".into(),
                kind: TrainPointKind::Step,
                epoch: 1,
                planned_epochs: 2,
                global_step: 3,
                planned_steps: 10,
                loss: Some(2.0),
                accuracy: Some(0.1),
                images_per_s,
                lr: Some(0.1),
                eval_accuracy: None,
                elapsed_s: 1.0,
            },
        }
    }

    fn moved(updates: &[Update]) -> BarState {
        match updates {
            [Update::Move(state)] => state.clone(),
            other => panic!("want one move, got {other:?}"),
        }
    }

    #[test]
    fn a_stage_gets_a_bar_named_as_its_plain_line() {
        let mut t = Tracker::new();
        let updates = t.apply(&started(1, 4), at(0.0));
        let [Update::Begin(state)] = updates.as_slice() else {
            panic!("{updates:?}")
        };
        assert_eq!(state.prefix, "[2/4] smoke");
        assert_eq!(state.position, 0);
        assert_eq!(state.status(), "");
    }

    #[test]
    fn the_runs_progress_is_counted_within_the_stages_span() {
        let mut t = Tracker::new();
        t.apply(&started(1, 4), at(0.0));
        // Stage 2 of 4 spans 0.25..0.5 of the run: 0.375 is half of it.
        let state = moved(&t.apply(&progress(0.375, Some("n=1024")), at(1.0)));
        assert_eq!(state.position, BAR_LENGTH / 2);
        assert_eq!(state.message, "n=1024");
        // Half the stage in a second: 50 %/s, another second to go.
        assert_eq!(state.rate, Some(Rate::StagePerSecond(0.5)));
        assert_eq!(state.eta, Some(at(1.0)));
        assert_eq!(state.status(), "50.0 %/s · 1s left · n=1024");
        // A message-less event keeps the message; the bar never goes back.
        let state = moved(&t.apply(&progress(0.3, None), at(1.5)));
        assert_eq!(state.position, BAR_LENGTH / 2);
        assert_eq!(state.message, "n=1024");
    }

    #[test]
    fn the_rate_follows_the_last_seconds_of_the_stage() {
        let mut t = Tracker::new();
        t.apply(&started(0, 1), at(0.0));
        // A slow first phase, then 1 % per second for longer than the window.
        t.apply(&progress(0.01, None), at(100.0));
        let mut state = None;
        for s in 1..=40 {
            let f = 0.01 + 0.01 * f64::from(s);
            state = Some(moved(
                &t.apply(&progress(f, None), at(100.0 + f64::from(s))),
            ));
        }
        let state = state.unwrap();
        let Some(Rate::StagePerSecond(r)) = state.rate else {
            panic!("{state:?}")
        };
        assert!((r - 0.01).abs() < 1e-9, "{r}");
        // 41 % done at 1 %/s: 59 s left.
        let eta = state.eta.unwrap().as_secs_f64();
        assert!((eta - 59.0).abs() < 1e-6, "{eta}");
        assert_eq!(state.status(), "1.0 %/s · 59s left");
    }

    #[test]
    fn no_rate_or_time_left_before_the_stage_moves() {
        let mut t = Tracker::new();
        t.apply(&started(0, 1), at(0.0));
        let state = moved(&t.apply(&progress(0.0, Some("preparing")), at(5.0)));
        assert_eq!((state.rate, state.eta), (None, None));
        assert_eq!(state.status(), "preparing");
        // Moving within less than half a second of the start says nothing yet either.
        let mut t = Tracker::new();
        t.apply(&started(0, 1), at(0.0));
        let state = moved(&t.apply(&progress(0.5, None), at(0.1)));
        assert_eq!((state.rate, state.eta), (None, None));
    }

    #[test]
    fn training_shows_images_per_second_and_keeps_the_time_left() {
        let mut t = Tracker::new();
        t.apply(&started(0, 1), at(0.0));
        t.apply(&progress(0.2, None), at(2.0));
        let state = moved(&t.apply(&train(812.4), at(2.0)));
        assert_eq!(state.rate, Some(Rate::ImagesPerSecond(812.4)));
        let state = moved(&t.apply(&progress(0.4, Some("epoch 1")), at(4.0)));
        // The images per second stay; the time left comes from the stage's pace.
        assert_eq!(state.rate, Some(Rate::ImagesPerSecond(812.4)));
        assert_eq!(state.eta, Some(at(6.0)));
        assert_eq!(state.status(), "812 img/s · 6s left · epoch 1");
        // A figure without a rate (the first step) changes nothing.
        assert!(t.apply(&train(0.0), at(4.5)).is_empty());
    }

    #[test]
    fn a_finished_stage_ends_its_bar_then_prints_its_plain_lines() {
        let mut t = Tracker::new();
        t.apply(&started(0, 1), at(0.0));
        t.apply(&progress(0.5, None), at(1.0));
        let updates = t.apply(&finished(Verdict::Pass), at(2.0));
        let [Update::End(state), Update::Lines(lines)] = updates.as_slice() else {
            panic!("{updates:?}")
        };
        assert_eq!(state.position, BAR_LENGTH);
        assert_eq!(state.eta, None);
        assert_eq!(state.status(), "PASS");
        assert_eq!(lines, "  note: seed 1\n  → PASS trained\n");
        // A stage that could not run stops its bar where it was.
        t.apply(&started(0, 1), at(3.0));
        t.apply(&progress(0.25, None), at(4.0));
        let updates = t.apply(&finished(Verdict::Error), at(5.0));
        let Update::End(state) = &updates[0] else {
            panic!("{updates:?}")
        };
        assert_eq!(state.position, BAR_LENGTH / 4);
        assert_eq!(state.status(), "ERROR");
    }

    #[test]
    fn run_and_box_lines_are_the_plain_ones_and_samples_draw_nothing() {
        let mut t = Tracker::new();
        let updates = t.apply(
            &WorkerEvent::RunStarted {
                suite: "acceptance".into(),
                stages: vec!["inventory".into(), "cpu-gemm".into()],
            },
            at(0.0),
        );
        assert_eq!(
            updates,
            [Update::Lines(
                "suite acceptance: inventory → cpu-gemm\n".into()
            )]
        );
        t.apply(&started(0, 2), at(0.0));
        let updates = t.apply(
            &WorkerEvent::Hardware {
                hardware: serde_json::json!({"sku": "tinybox-green"}),
            },
            at(0.1),
        );
        assert_eq!(updates, [Update::Lines("  box: tinybox-green\n".into())]);
        assert!(t.apply(&WorkerEvent::Heartbeat, at(0.2)).is_empty());
        // A run cancelled mid-stage leaves that bar as it was, then says so.
        let updates = t.apply(
            &WorkerEvent::RunFinished {
                state: RunState::Cancelled,
                message: Some("cancelled".into()),
            },
            at(1.0),
        );
        let [Update::End(state), Update::Lines(line)] = updates.as_slice() else {
            panic!("{updates:?}")
        };
        assert_eq!((state.position, state.verdict), (0, None));
        assert_eq!(line, "run cancelled: cancelled\n");
    }

    #[test]
    fn durations_and_rates_read_as_a_person_writes_them() {
        assert_eq!(render_duration(at(42.4)), "42s");
        assert_eq!(render_duration(at(187.0)), "3m 07s");
        assert_eq!(render_duration(at(7500.0)), "2h 05m");
        assert_eq!(Rate::ImagesPerSecond(6350.2).render(), "6350 img/s");
        assert_eq!(Rate::ImagesPerSecond(3.25).render(), "3.2 img/s");
        assert_eq!(Rate::StagePerSecond(0.0001).render(), "0.6 %/min");
    }
}
