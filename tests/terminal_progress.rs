//! `tinyperf run` and `tinyperf health` as a person at a terminal sees them (live bars,
//! on a pseudo-terminal that util-linux's `script` makes) and as a pipe, a log or the
//! agent sees them: today's plain lines or JSON events, without a control code.

use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// Settings that train the smoke suite's small ResNet for a few seconds.
const SHORT_SMOKE: &[&str] = &[
    "synth_classes=2",
    "synth_per_class=32",
    "synth_val_per_class=8",
    "synth_size=16",
    "image_size=16",
    "batch_size=16",
    "eval_batch_size=16",
    "train_epochs=3",
    "target_accuracy=1",
    "seed=1",
];

fn tinyperf_args(args: &[&str]) -> Vec<String> {
    let mut argv = vec![env!("CARGO_BIN_EXE_tinyperf").to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    argv
}

fn quoted(argv: &[String]) -> String {
    argv.iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs tinyperf on a pseudo-terminal 120 columns wide: what it drew, with the
/// terminal's line ends (CR LF) as plain newlines.
fn on_terminal(args: &[&str], cache: &std::path::Path) -> (Output, String) {
    let command = format!(
        "stty cols 120 rows 40; exec {}",
        quoted(&tinyperf_args(args))
    );
    let out = Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .env("TERM", "xterm-256color")
        .env("XDG_CACHE_HOME", cache)
        .env("TINYPERF_LOG", "error")
        // No vendor library from this machine may stand in for a GPU.
        .env("LD_LIBRARY_PATH", cache)
        .env("ROCM_PATH", cache)
        .stdin(Stdio::null())
        .output()
        .expect("util-linux's script runs (make test-deps installs it)");
    let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    (out, text)
}

fn piped(args: &[&str], cache: &std::path::Path) -> (Output, String) {
    let argv = tinyperf_args(args);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .env("XDG_CACHE_HOME", cache)
        .env("TINYPERF_LOG", "error")
        .env("LD_LIBRARY_PATH", cache)
        .env("ROCM_PATH", cache)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, text)
}

fn smoke_args(events: Option<&str>) -> Vec<&'static str> {
    let mut args = vec!["run", "smoke"];
    if let Some(format) = events {
        args.extend([
            "--events",
            if format == "jsonl" { "jsonl" } else { "human" },
        ]);
    }
    for o in SHORT_SMOKE {
        args.extend(["-o", o]);
    }
    args
}

/// Today's plain lines: the suite, the stage, each progress word, figures, verdict, end.
fn assert_plain(text: &str, suite: &str, stage: &str) {
    assert!(
        !text.contains('\x1b') && !text.contains('\r'),
        "control codes in plain output: {text:?}"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with(&format!("suite {suite}: ")), "{text}");
    let stage_line = format!("] {stage}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("[1/") && l.ends_with(&stage_line)),
        "no stage line: {text}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("  → ")),
        "no verdict line: {text}"
    );
    assert!(
        lines.iter().rev().any(|l| l.starts_with("run ")),
        "no run line: {text}"
    );
}

#[test]
fn a_run_on_a_terminal_draws_a_bar_and_keeps_the_plain_lines_above_it() {
    let cache = tempfile::tempdir().unwrap();
    let (out, text) = on_terminal(&["run", "inventory"], cache.path());
    let (piped_out, plain) = piped(&["run", "inventory"], cache.path());
    assert_eq!(out.status.code(), piped_out.status.code(), "{text}");
    assert_plain(&plain, "inventory", "inventory");
    // The bar: redrawn in place (carriage return, erase line), styled.
    assert!(text.contains("\r\x1b[2K"), "no redrawing: {text:?}");
    let shown = visible(&text);
    // Its last frame, on a line of its own: full, with the stage's verdict.
    let verdict = plain
        .lines()
        .find_map(|l| l.strip_prefix("  → "))
        .and_then(|v| v.split(' ').next())
        .unwrap_or_else(|| panic!("{plain}"));
    let last_frame = shown
        .lines()
        .map(|l| l.rsplit('\r').next().unwrap())
        .find(|l| l.starts_with("[1/1] inventory ["))
        .unwrap_or_else(|| panic!("{shown:?}"));
    assert!(
        last_frame.contains("█] 100%") && last_frame.trim_end().ends_with(verdict),
        "{last_frame:?}"
    );
    // Earlier frames said what the stage was doing.
    assert!(shown.contains("0%   0s scanning "), "{shown:?}");
    // Every line the plain output has besides the stage line and progress words, in
    // its order, each on a line of its own.
    let wanted: Vec<&str> = plain
        .lines()
        .filter(|l| !l.starts_with("[1/1] ") && !l.starts_with("  … "))
        .collect();
    let drawn: Vec<&str> = shown
        .lines()
        .map(|l| l.rsplit('\r').next().unwrap())
        .filter(|l| !l.starts_with("[1/1] "))
        .collect();
    assert_eq!(drawn, wanted, "{shown:?}");
}

/// `text` without its styling codes: what the terminal shows, each frame of a bar
/// still separated by the carriage return that redraws it.
fn visible(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            chars.next();
            // Parameters, then the final byte (a letter) ends the sequence.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn explicit_events_on_a_terminal_are_the_plain_lines_and_the_agents_json() {
    let cache = tempfile::tempdir().unwrap();
    let (out, human) = on_terminal(&["run", "inventory", "--events", "human"], cache.path());
    assert!(out.status.code().is_some(), "{human}");
    assert_plain(&human, "inventory", "inventory");

    let (_, jsonl) = on_terminal(&["run", "inventory", "--events", "jsonl"], cache.path());
    assert!(!jsonl.contains('\x1b'), "{jsonl:?}");
    let events: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    assert_eq!(events[0]["event"], "run_started", "{jsonl}");
    assert_eq!(events.last().unwrap()["event"], "run_finished", "{jsonl}");
}

#[test]
fn training_on_a_terminal_shows_images_per_second_and_time_left() {
    let cache = tempfile::tempdir().unwrap();
    let (out, text) = on_terminal(&smoke_args(None), cache.path());
    assert!(out.status.code().is_some(), "{text}");
    let shown = visible(&text);
    // Drawn while it trains: the rate from the training figures, and the time left.
    let frames: Vec<&str> = shown
        .split(['\r', '\n'])
        .filter(|f| f.starts_with("[1/1] smoke ["))
        .collect();
    assert!(
        frames
            .iter()
            .any(|f| f.contains(" img/s · ") && f.contains("s left · epoch ")),
        "{shown:?}"
    );
    assert!(shown.lines().any(|l| l.starts_with("run ")), "{shown:?}");

    let (_, plain) = piped(&smoke_args(None), cache.path());
    assert_plain(&plain, "smoke", "smoke");
    assert!(plain.contains("  … epoch 1 step 1/"), "{plain}");
}

#[test]
fn health_on_a_terminal_draws_bars_then_prints_its_table() {
    let cache = tempfile::tempdir().unwrap();
    // A tinybox green's files: six GPUs for the table, whose checks skip without a runtime.
    let root = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/green-clean-boot"
    );
    let args = ["health", "--root", root];
    let (out, text) = on_terminal(&args, cache.path());
    let (piped_out, plain) = piped(&args, cache.path());
    assert_eq!(
        out.status.code(),
        piped_out.status.code(),
        "{text}\n{plain}"
    );
    let text = visible(&text);
    assert!(text.contains("[1/9] inventory ["), "{text:?}");
    assert_plain(&plain, "health", "inventory");
    // The table: a line per GPU, its PCI address first, after the run's last line.
    let table: Vec<&str> = plain
        .lines()
        .skip_while(|l| !l.starts_with("run "))
        .skip(1)
        .collect();
    assert_eq!(table.len(), 6, "{plain}");
    let last_bar = text
        .rfind("[9/9] power-ramp [")
        .unwrap_or_else(|| panic!("{text:?}"));
    for row in table {
        assert!(row.starts_with("0000:"), "{plain}");
        let at = text
            .rfind(row)
            .unwrap_or_else(|| panic!("{row:?}: {text:?}"));
        assert!(at > last_bar, "{row:?} before the last bar: {text:?}");
    }
}
