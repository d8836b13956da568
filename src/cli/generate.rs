//! Shell completions and manual pages, generated from the clap definitions so they say
//! exactly what the parser accepts. `make install` writes them where the shells and
//! man look.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::CommandFactory;

use super::args::{Cli, CompletionsArgs, ManArgs};

/// The name the completions are registered for: the installed binary's.
const BIN_NAME: &str = "tinyperf";

/// `tinyperf completions SHELL`: the shell's completion script on stdout.
pub fn completions(args: &CompletionsArgs) -> anyhow::Result<i32> {
    let mut out = io::stdout().lock();
    ignore_closed_pipe(write_completions(args.shell, &mut out).and_then(|_| out.flush()))?;
    Ok(0)
}

/// Writes `shell`'s completion script for tinyperf to `out`; fails only when `out` does.
pub fn write_completions(shell: clap_complete::Shell, out: &mut dyn Write) -> io::Result<()> {
    let mut buffer = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), BIN_NAME, &mut buffer);
    out.write_all(&buffer)
}

/// `tinyperf man [--dir DIR]`: tinyperf(1) on stdout, or every page written into DIR.
pub fn man(args: &ManArgs) -> anyhow::Result<i32> {
    match &args.dir {
        None => {
            let pages = pages();
            let mut out = io::stdout().lock();
            ignore_closed_pipe(out.write_all(render(&pages[0])?.as_bytes()))?;
            ignore_closed_pipe(out.flush())?;
        }
        Some(dir) => {
            for path in write_man_pages(dir)? {
                println!("{}", path.display());
            }
        }
    }
    Ok(0)
}

/// Writes tinyperf.1 and a page for every subcommand, nested ones too
/// (tinyperf-dataset-synth.1), into `dir`; returns their paths, the main page first.
pub fn write_man_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    pages()
        .iter()
        .map(|page| {
            let path = dir.join(format!("{}.1", page_name(page)));
            std::fs::write(&path, render(page)?)
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(path)
        })
        .collect()
}

/// tinyperf and every subcommand --help shows, each named after its path
/// (`tinyperf-dataset-synth`), the main command first.
fn pages() -> Vec<clap::Command> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Building names each subcommand after its path.
    cmd.build();
    let mut pages = Vec::new();
    collect(&cmd, &mut pages);
    pages
}

fn page_name(cmd: &clap::Command) -> &str {
    cmd.get_display_name().unwrap_or_else(|| cmd.get_name())
}

/// One page in roff.
fn render(cmd: &clap::Command) -> io::Result<String> {
    let title = page_name(cmd).to_uppercase();
    let man = clap_mangen::Man::new(cmd.clone())
        .title(title)
        .date(page_date())
        // Subcommands have no version of their own; every page is this release's.
        .source(format!("tinyperf {}", env!("CARGO_PKG_VERSION")))
        .manual("tinyperf manual");
    let mut roff = Vec::new();
    man.render(&mut roff)?;
    Ok(tidy(&String::from_utf8_lossy(&roff)))
}

/// The pages' date: SOURCE_DATE_EPOCH's when set (the image build sets it, so the same
/// source gives the same pages), else today.
fn page_date() -> String {
    let date = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .unwrap_or_else(chrono::Utc::now);
    date.format("%Y-%m-%d").to_string()
}

/// clap_mangen puts a blank line between two `.br` before an option's list of values,
/// which linters flag as a paragraph break misplaced; a `.sp` is the gap it means.
fn tidy(roff: &str) -> String {
    roff.replace("\n.br\n\n.br\n", "\n.sp\n")
}

/// A reader that stopped reading (`| head`) is no error worth a message.
fn ignore_closed_pipe(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `cmd` and every subcommand under it that `--help` shows, in that order.
fn collect(cmd: &clap::Command, pages: &mut Vec<clap::Command>) {
    pages.push(cmd.clone());
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect(sub, pages);
    }
}
