use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tinyperf::agent::config::Config;
use tinyperf::agent::AgentOptions;
use tinyperf::cli::args::{AgentArgs, Cli, Command, DetectArgs};
use tinyperf::cli::client;
use tinyperf::cli::UsageError;

/// Exit status for usage and configuration errors, as clap uses.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(matches!(cli.command, Command::Agent(_)));
    let result = match cli.command {
        Command::Detect(args) => detect(&args),
        Command::Run(args) => tinyperf::cli::run::main(&args),
        Command::Health(args) => match args.kernel_log {
            Some(path) => tinyperf::cli::kernel_log::main(&path, args.json),
            None => tinyperf::cli::run::health(args.run),
        },
        Command::Agent(args) => runtime().and_then(|rt| rt.block_on(agent(args))),
        Command::Start(args) => runtime().and_then(|rt| rt.block_on(client::start(&args))),
        Command::Cancel(args) => runtime().and_then(|rt| rt.block_on(client::cancel(&args))),
        Command::Status(args) => runtime().and_then(|rt| rt.block_on(client::status(&args))),
        Command::Runs(args) => runtime().and_then(|rt| rt.block_on(client::runs(&args))),
        Command::Show(args) => runtime().and_then(|rt| rt.block_on(client::show(&args))),
        Command::Dataset(command) => tinyperf::cli::dataset::main(&command),
        Command::Gpu(command) => tinyperf::cli::gpu::main(&command),
        Command::Mlperf(command) => tinyperf::cli::mlperf::main(&command),
        Command::Box(command) => tinyperf::cli::box_record::main(&command),
        Command::Image(command) => tinyperf::cli::image::main(&command),
        Command::BootCheck(args) => tinyperf::cli::boot_check::main(&args),
        Command::Completions(args) => tinyperf::cli::generate::completions(&args),
        Command::Man(args) => tinyperf::cli::generate::man(&args),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("tinyperf: {e:#}");
            ExitCode::from(if e.is::<UsageError>() { EXIT_USAGE } else { 1 })
        }
    }
}

fn init_logging(agent: bool) {
    let default = if agent { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("TINYPERF_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: the journal and log files get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn detect(args: &DetectArgs) -> anyhow::Result<i32> {
    if let Some(sku) = &args.sku {
        if !tinyperf::inventory::is_known_sku(sku) {
            return Err(UsageError(format!(
                "unknown SKU {sku:?} (known: {})",
                tinyperf::inventory::known_skus().join(", ")
            ))
            .into());
        }
    }
    let report = tinyperf::inventory::take(&args.root, args.sku.as_deref(), !args.no_runtime);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_human());
    }
    Ok(report.exit_code())
}

async fn agent(args: AgentArgs) -> anyhow::Result<i32> {
    let mut config = Config::load(&args.config).map_err(|e| UsageError(e.to_string()))?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(dir) = args.state_dir {
        config.state_dir = dir;
    }
    let bus = match &args.bus {
        Some(b) => b.parse().map_err(UsageError)?,
        None => tinyperf::api::dbus::BusChoice::System,
    };
    let worker_exe = std::env::current_exe().context("cannot find the tinyperf executable")?;
    let options = AgentOptions {
        config,
        worker_exe,
        root: args.root,
    };
    tinyperf::api::daemon::run(options, bus).await?;
    Ok(0)
}
