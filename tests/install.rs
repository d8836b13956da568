//! `make install` into a staging folder, as image/build.sh runs it: the binary and
//! system files, and the shell completions and man pages generated from the clap
//! definitions, each checked by the tool that reads it (bash, zsh, fish, mandoc, groff,
//! man) and holding every subcommand.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use clap::CommandFactory;
use tinyperf::cli::args::Cli;

const BASH: &str = "usr/share/bash-completion/completions/tinyperf";
const ZSH: &str = "usr/share/zsh/vendor-completions/_tinyperf";
const FISH: &str = "usr/share/fish/vendor_completions.d/tinyperf.fish";
const MAN1: &str = "usr/share/man/man1";

/// One `make install DESTDIR=… PREFIX=/usr` of the debug build, shared by the tests.
fn staged() -> &'static Path {
    static STAGE: OnceLock<tempfile::TempDir> = OnceLock::new();
    STAGE
        .get_or_init(|| {
            let stage = tempfile::tempdir().unwrap();
            let out = Command::new("make")
                .args([
                    "-s",
                    "-C",
                    env!("CARGO_MANIFEST_DIR"),
                    "install",
                    "PREFIX=/usr",
                ])
                .arg(format!("DESTDIR={}", stage.path().display()))
                .arg(format!("BIN={}", env!("CARGO_BIN_EXE_tinyperf")))
                .output()
                .expect("make runs (make test-deps installs it)");
            assert!(out.status.success(), "make install: {}", text(&out));
            stage
        })
        .path()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn tool(name: &str) -> Command {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(found, "{name} is missing: run `make test-deps`");
    Command::new(name)
}

/// Every subcommand --help shows, as the words that name it: `["run"]`, `["dataset",
/// "synth"]`.
fn subcommands() -> Vec<Vec<String>> {
    fn walk(cmd: &clap::Command, path: &[String], out: &mut Vec<Vec<String>>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            if sub.get_name() == "help" {
                continue;
            }
            let mut words = path.to_vec();
            words.push(sub.get_name().to_string());
            out.push(words.clone());
            walk(sub, &words, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), &[], &mut out);
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn make_install_places_the_binary_system_files_completions_and_man_pages() {
    let stage = staged();
    let expected = [
        ("usr/bin/tinyperf", 0o755),
        ("usr/lib/systemd/system/tinyperf.service", 0o644),
        ("usr/lib/systemd/system/tinyperf-factory-reset.path", 0o644),
        (
            "usr/lib/systemd/system/tinyperf-factory-reset.service",
            0o644,
        ),
        ("usr/share/dbus-1/system.d/org.tinyperf.Agent1.conf", 0o644),
        ("usr/lib/udev/rules.d/70-tinyperf.rules", 0o644),
        ("usr/lib/sysusers.d/tinyperf.conf", 0o644),
        ("usr/lib/tmpfiles.d/tinyperf.conf", 0o644),
        ("etc/tinyperf/tinyperf.toml", 0o644),
        (BASH, 0o644),
        (ZSH, 0o644),
        (FISH, 0o644),
        ("usr/share/man/man1/tinyperf.1", 0o644),
        ("usr/share/man/man1/tinyperf-run.1", 0o644),
    ];
    for (file, want) in expected {
        let path = stage.join(file);
        assert!(path.is_file(), "make install left no {file}");
        assert_eq!(mode(&path), want, "{file}");
    }
    // The packaging commands stay out of the operator's way: no page, no --help line.
    assert!(!stage.join(MAN1).join("tinyperf-completions.1").exists());
    assert!(!stage.join(MAN1).join("tinyperf-man.1").exists());
    let help = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("  run ") && !help.contains("completions"),
        "{help}"
    );
}

#[test]
fn the_bash_completion_parses_and_completes_subcommands_options_and_values() {
    let script = staged().join(BASH);
    let out = tool("bash").arg("-n").arg(&script).output().unwrap();
    assert!(out.status.success(), "bash -n: {}", text(&out));
    // What bash-completion does at <TAB>: the function gets the words, fills COMPREPLY.
    let complete = |line: &str| -> Vec<String> {
        let out = Command::new("bash")
            .arg("-c")
            .arg(
                r#"source "$1"; read -ra COMP_WORDS <<<"$2"; [[ "$2" == *" " ]] && COMP_WORDS+=("");
                COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMP_LINE=$2; COMP_POINT=${#2}
                _tinyperf tinyperf "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
                printf '%s\n' "${COMPREPLY[@]}""#,
            )
            .arg("bash")
            .arg(&script)
            .arg(line)
            .output()
            .unwrap();
        assert!(out.status.success(), "{line:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let top = complete("tinyperf ");
    for words in subcommands().iter().filter(|w| w.len() == 1) {
        assert!(top.contains(&words[0]), "{words:?} not offered: {top:?}");
    }
    assert_eq!(complete("tinyperf run --ev"), ["--events"]);
    assert_eq!(complete("tinyperf run --events "), ["human", "jsonl"]);
    let dataset = complete("tinyperf dataset ");
    for sub in ["synth", "check", "bench"] {
        assert!(dataset.contains(&sub.to_string()), "{dataset:?}");
    }
}

#[test]
fn the_fish_completion_parses_and_completes_every_subcommand() {
    let script = staged().join(FISH);
    let out = tool("fish")
        .arg("--no-execute")
        .arg(&script)
        .output()
        .unwrap();
    assert!(out.status.success(), "fish -n: {}", text(&out));
    let complete = |line: &str| -> Vec<String> {
        let out = Command::new("fish")
            .args(["--no-config", "-c"])
            .arg(format!("source {}; complete -C '{line}'", script.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{line:?}: {}", text(&out));
        // Each candidate is its word, a tab, then its description.
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split('\t').next().unwrap().to_string())
            .collect()
    };
    for words in subcommands() {
        let parent = &words[..words.len() - 1];
        let line = format!(
            "tinyperf {}",
            parent.iter().map(|w| format!("{w} ")).collect::<String>()
        );
        let offered = complete(&line);
        assert!(
            offered.contains(words.last().unwrap()),
            "{words:?} not offered after {line:?}: {offered:?}"
        );
    }
    assert!(complete("tinyperf run --events ").contains(&"jsonl".to_string()));
}

#[test]
fn the_zsh_completion_parses_and_names_every_subcommand() {
    let script = staged().join(ZSH);
    let out = tool("zsh").arg("-n").arg(&script).output().unwrap();
    assert!(out.status.success(), "zsh -n: {}", text(&out));
    let body = read(&script);
    assert!(body.starts_with("#compdef tinyperf"), "{}", &body[..80]);
    for words in subcommands() {
        let name = words.last().unwrap();
        assert!(
            body.contains(&format!("'{name}:")) || body.contains(&format!("\"{name}:")),
            "{words:?} not in the zsh completion"
        );
    }
}

/// The man pages of every visible subcommand, by file name.
fn man_pages() -> Vec<(Vec<String>, PathBuf)> {
    let dir = staged().join(MAN1);
    let mut pages = vec![(Vec::new(), dir.join("tinyperf.1"))];
    for words in subcommands() {
        let file = dir.join(format!("tinyperf-{}.1", words.join("-")));
        pages.push((words, file));
    }
    pages
}

#[test]
fn every_subcommand_has_a_man_page_that_lints_clean() {
    for (words, page) in man_pages() {
        assert!(page.is_file(), "no page for {words:?}: {}", page.display());
        let roff = read(&page);
        let title = if words.is_empty() {
            "TINYPERF".to_string()
        } else {
            format!("TINYPERF-{}", words.join("-").to_uppercase())
        };
        // The title line, with a date and the release it documents.
        let th = roff
            .lines()
            .find(|l| l.starts_with(".TH "))
            .unwrap_or_else(|| panic!("{}: no .TH line", page.display()));
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            th.starts_with(&format!(".TH {title} 1 20"))
                && th.ends_with(&format!(" \"tinyperf {version}\" \"tinyperf manual\"")),
            "{}: {th}",
            page.display()
        );
        assert!(roff.contains("\n.SH NAME\n") && roff.contains("\n.SH SYNOPSIS\n"));
        // mandoc's linter, warnings and worse.
        let out = tool("mandoc")
            .args(["-T", "lint", "-W", "warning"])
            .arg(&page)
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stdout.is_empty(),
            "mandoc: {}",
            text(&out)
        );
        // groff, as man renders it, with every warning on.
        let out = tool("groff")
            .args(["-man", "-ww", "-z", "-rCHECKSTYLE=1"])
            .arg(&page)
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "groff: {}",
            text(&out)
        );
    }
}

#[test]
fn the_main_man_page_lists_every_subcommand_and_each_page_its_options() {
    let out = tool("man")
        .args(["--local-file"])
        .arg(staged().join(MAN1).join("tinyperf.1"))
        .env("MANWIDTH", "100")
        .env("MAN_KEEP_FORMATTING", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "man -l: {}", text(&out));
    let page = String::from_utf8_lossy(&out.stdout);
    for words in subcommands().iter().filter(|w| w.len() == 1) {
        assert!(
            page.lines().any(|l| l
                .trim_start()
                .starts_with(&format!("tinyperf-{}(1)", words[0]))
                || l.trim() == words[0]),
            "{words:?} not in man tinyperf:\n{page}"
        );
    }
    let run = read(&staged().join(MAN1).join("tinyperf-run.1"));
    for option in ["events", "state\\-dir", "option"] {
        assert!(
            run.contains(&format!("\\-\\-{option}")),
            "--{option} not in tinyperf-run.1"
        );
    }
}
