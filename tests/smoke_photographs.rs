//! The smoke suite on real scans and photographs, not generated images: scikit-learn's
//! handwritten digits, and patches of the photographs scikit-image and scikit-learn
//! ship (one photograph a class, validation patches from blocks no training patch
//! touches), written as JPEG folders in the ImageNet layout at test time by
//! `scripts/photo_sets.py`. Each set is trained with three fixed seeds by the release
//! binary (a debug build trains too slowly; `make test` builds it first) and must reach
//! its target within three quarters of its planned epochs. The epoch each seed crossed
//! its target is written to the test output.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::runs::{only_run, output_text};
use serde_json::Value;

const SEEDS: [u64; 3] = [1, 2, 3];
const IMAGE_SIZE: &str = "32";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The release build of tinyperf: `TINYPERF_RELEASE_BIN`, else target/release/tinyperf.
fn release_binary() -> PathBuf {
    let path = std::env::var_os("TINYPERF_RELEASE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = option_env!("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo().join("target"));
            target.join("release").join("tinyperf")
        });
    assert!(
        path.is_file(),
        "{} is missing: these tests train with the release binary; build it with \
         `cargo build --release` (make test does)",
        path.display()
    );
    path
}

/// Writes the real image set `set` into `root` with scripts/photo_sets.py.
fn photo_set(set: &str, root: &Path, extra: &[&str]) {
    let venv = Command::new(repo().join("scripts/photo-venv.sh"))
        .output()
        .expect("run scripts/photo-venv.sh");
    assert!(
        venv.status.success(),
        "scripts/photo-venv.sh: {}",
        String::from_utf8_lossy(&venv.stderr)
    );
    let python = String::from_utf8(venv.stdout).unwrap().trim().to_string();
    let out = Command::new(python)
        .arg(repo().join("scripts/photo_sets.py"))
        .args([set, root.to_str().unwrap(), "--size", IMAGE_SIZE])
        .args(extra)
        .output()
        .expect("run scripts/photo_sets.py");
    assert!(
        out.status.success(),
        "photo_sets.py {set}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What one seed's run did: the epoch its evaluation first reached the target, the
/// epochs it planned, and its last training and evaluation accuracy.
struct Outcome {
    crossed: u64,
    planned: u64,
    train_accuracy: f64,
    eval_accuracy: f64,
    seconds: f64,
}

/// Trains `dataset` with `seed`; the run must pass, its evaluation crossing `target` by
/// three quarters of its planned epochs.
fn train(dataset: &Path, seed: u64, target: f64) -> Outcome {
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(release_binary())
        .env("RUST_LOG", "warn")
        .args(["run", "--suite", "smoke", "--dataset"])
        .arg(dataset)
        .arg("--state-dir")
        .arg(state.path())
        .args(["-o", &format!("seed={seed}")])
        .args(["-o", &format!("image_size={IMAGE_SIZE}")])
        .args(["-o", &format!("target_accuracy={target}")])
        .output()
        .expect("run tinyperf");
    let text = output_text(&out);
    let (run, record) = only_run(state.path());
    assert_eq!(record["state"], "passed", "{text}");
    let epochs: Vec<Value> = std::fs::read_to_string(run.join("train.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|p| p["kind"] == "epoch")
        .collect();
    let last = epochs
        .last()
        .unwrap_or_else(|| panic!("no epoch finished:\n{text}"));
    let planned = last["planned_epochs"].as_u64().unwrap();
    let crossed = epochs
        .iter()
        .find(|p| p["eval_accuracy"].as_f64().is_some_and(|a| a >= target))
        .and_then(|p| p["epoch"].as_u64())
        .unwrap_or_else(|| panic!("passed without an epoch at {target}:\n{text}"));
    assert!(
        crossed * 4 <= planned * 3,
        "crossed {target} only at epoch {crossed} of {planned}:\n{text}"
    );
    Outcome {
        crossed,
        planned,
        train_accuracy: last["accuracy"].as_f64().unwrap_or(f64::NAN),
        eval_accuracy: last["eval_accuracy"].as_f64().unwrap_or(f64::NAN),
        seconds: last["elapsed_s"].as_f64().unwrap_or(f64::NAN),
    }
}

/// Trains `dataset` with every seed, writing one line per seed to the test output
/// (past the harness's capture, so that it shows on success too).
fn every_seed_reaches(name: &str, dataset: &Path, target: f64) {
    for seed in SEEDS {
        let o = train(dataset, seed, target);
        let _ = writeln!(
            std::io::stderr(),
            "{name} seed {seed}: top-1 {target} crossed at epoch {} of {} planned; last \
             training accuracy {:.3}, evaluation {:.4}, {:.0} s",
            o.crossed,
            o.planned,
            o.train_accuracy,
            o.eval_accuracy,
            o.seconds
        );
    }
}

#[test]
fn handwritten_digits_reach_0_9_top1_by_three_quarters_of_the_epochs_for_every_seed() {
    let folder = tempfile::tempdir().unwrap();
    let root = folder.path().join("digits");
    photo_set("digits", &root, &[]);
    every_seed_reaches("digits (10 classes, 1,438 scans)", &root, 0.9);
}

#[test]
fn patches_of_photographs_reach_0_8_top1_by_three_quarters_of_the_epochs_for_every_seed() {
    let folder = tempfile::tempdir().unwrap();
    let root = folder.path().join("scenes");
    photo_set("scenes", &root, &["--classes", "12", "--per-class", "100"]);
    every_seed_reaches("photographs (12 classes, 960 patches)", &root, 0.8);
}
