//! `tinyperf start|cancel|status|runs|show`: talk to the agent over D-Bus.
//!
//! Exit status: 0 when the request succeeded (and, for `start --wait`, the run
//! passed); 1 when the run did not pass or the agent refused or could not be reached;
//! 2 for a mistake in the command line. `--json` prints what the agent returned.

mod failure;
mod render;
mod table;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{anyhow, Context};
use futures_util::StreamExt;
use zbus::proxy::CacheProperties;
use zbus::Variant;

use super::args::{ClientArgs, RunIdArgs, RunsArgs, StartArgs};
use crate::api::dbus::{json_to_variant, Agent1Error, Agent1Proxy, BusChoice};
use crate::record::{RunBrief, RunRecord, RunState};
use crate::suite::options::parse_pairs;

const EXIT_OK: i32 = 0;
const EXIT_FAILED: i32 = 1;
const EXIT_USAGE: i32 = 2;

/// How often `start --wait` asks for the run, in case a signal was missed.
const WAIT_POLL: Duration = Duration::from_secs(2);

/// A connection to the agent and the bus it was reached on.
struct Client {
    proxy: Agent1Proxy<'static>,
    bus: BusChoice,
}

impl Client {
    async fn connect(args: &ClientArgs) -> Result<Client, Exit> {
        let bus: BusChoice = args.bus.parse().map_err(Exit::Usage)?;
        let connection = bus
            .connect()
            .await
            .map_err(|e| Exit::Failed(anyhow!("{}: {e}", failure::unreachable(&bus))))?;
        let proxy = Agent1Proxy::builder(&connection)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(|e| Exit::Failed(anyhow!("cannot make a proxy for the agent: {e}")))?;
        Ok(Client { proxy, bus })
    }

    /// Turns a failed call into an error message for the operator.
    async fn fail(&self, error: Agent1Error, run_id: Option<&str>) -> Exit {
        let busy_with = match &error {
            Agent1Error::Busy(_) => self.proxy.current_run().await.ok(),
            _ => None,
        };
        Exit::Failed(anyhow!(failure::explain(
            &error,
            &self.bus,
            run_id,
            busy_with.as_deref()
        )))
    }

    async fn get_run(&self, run_id: &str) -> Result<(String, Option<RunRecord>), Exit> {
        match self.proxy.get_run(run_id).await {
            Ok(json) => {
                let record = serde_json::from_str(&json).ok();
                Ok((json, record))
            }
            Err(e) => Err(self.fail(e, Some(run_id)).await),
        }
    }
}

/// How a client command ends when it does not succeed.
enum Exit {
    Usage(String),
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for Exit {
    fn from(e: anyhow::Error) -> Self {
        Exit::Failed(e)
    }
}

/// Maps a command's outcome to the exit status, printing usage mistakes here so they
/// exit with 2; other failures go to the caller, which prints them and exits with 1.
fn finish(outcome: Result<i32, Exit>) -> anyhow::Result<i32> {
    match outcome {
        Ok(code) => Ok(code),
        Err(Exit::Usage(message)) => {
            eprintln!("tinyperf: {message}");
            Ok(EXIT_USAGE)
        }
        Err(Exit::Failed(e)) => Err(e),
    }
}

/// `tinyperf start`: asks the agent to start a run and prints its id, or with `--wait`
/// follows it to the end. Returns the exit status: 0 started (or, waiting, passed), 1 the
/// run did not pass, 2 a usage mistake; an unreachable or refusing agent is an error.
pub async fn start(args: &StartArgs) -> anyhow::Result<i32> {
    finish(start_inner(args).await)
}

async fn start_inner(args: &StartArgs) -> Result<i32, Exit> {
    let options = dbus_options(&args.options).map_err(Exit::Usage)?;
    let client = Client::connect(&args.client).await?;
    if !args.wait {
        let run_id = match client.proxy.start(&args.suite, &options).await {
            Ok(id) => id,
            Err(e) => return Err(client.fail(e, None).await),
        };
        if args.client.json {
            println!("{}", serde_json::json!({ "id": run_id }));
        } else {
            println!("{run_id}");
        }
        return Ok(EXIT_OK);
    }
    wait_for_run(&client, args, &options).await
}

/// Starts the run and follows it to the end: `RunFinished` is the normal way to learn
/// that, and `GetRun` polling covers a signal the bus dropped.
async fn wait_for_run(
    client: &Client,
    args: &StartArgs,
    options: &HashMap<String, Variant<'static>>,
) -> Result<i32, Exit> {
    // Subscribe before starting: a short run can finish before Start even returns.
    let subscribe =
        |e: zbus::Error| Exit::Failed(anyhow!("cannot subscribe to the agent's signals: {e}"));
    let mut finished = client
        .proxy
        .receive_run_finished()
        .await
        .map_err(subscribe)?;
    let mut stages = client
        .proxy
        .receive_stage_finished()
        .await
        .map_err(subscribe)?;
    let run_id = match client.proxy.start(&args.suite, options).await {
        Ok(id) => id,
        Err(e) => return Err(client.fail(e, None).await),
    };
    let readable = !args.client.json;
    if readable {
        println!("run {run_id} started ({})", args.suite);
    }
    let mut poll = tokio::time::interval(WAIT_POLL);
    poll.tick().await;
    loop {
        tokio::select! {
            Some(signal) = finished.next() => {
                if signal.args().is_ok_and(|a| a.run_id == run_id) {
                    break;
                }
            }
            Some(signal) = stages.next() => {
                if let Ok(a) = signal.args() {
                    if readable && a.run_id == run_id {
                        println!("  {:<24} {}", a.stage, a.verdict);
                    }
                }
            }
            _ = poll.tick() => {
                let (_, record) = client.get_run(&run_id).await?;
                if record.is_some_and(|r| r.state.is_final()) {
                    break;
                }
            }
        }
    }
    let (json, record) = client.get_run(&run_id).await?;
    let record =
        record.ok_or_else(|| anyhow!("the agent sent a run record that does not parse: {json}"))?;
    if args.client.json {
        println!("{json}");
    } else {
        let mut line = format!("run {run_id} {}", record.state);
        if let Some(message) = &record.summary.message {
            line.push_str(&format!(": {message}"));
        }
        println!("{line}");
    }
    Ok(if record.state == RunState::Passed {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}

/// Parses `-o KEY=VALUE` options into what `Start` takes.
fn dbus_options(pairs: &[String]) -> Result<HashMap<String, Variant<'static>>, String> {
    parse_pairs(pairs)?
        .into_iter()
        .map(|(key, value)| match json_to_variant(&value) {
            Some(v) => Ok((key, v)),
            None => Err(format!(
                "option {key}={value}: options must be numbers, strings or booleans"
            )),
        })
        .collect()
}

/// `tinyperf cancel`: asks the agent to cancel a run. Returns exit status 0 when the
/// request was accepted (2 for a usage mistake); a refusal, an unknown run or an
/// unreachable agent is an error.
pub async fn cancel(args: &RunIdArgs) -> anyhow::Result<i32> {
    finish(cancel_inner(args).await)
}

async fn cancel_inner(args: &RunIdArgs) -> Result<i32, Exit> {
    let client = Client::connect(&args.client).await?;
    if let Err(e) = client.proxy.cancel(&args.run_id).await {
        return Err(client.fail(e, Some(&args.run_id)).await);
    }
    if args.client.json {
        println!(
            "{}",
            serde_json::json!({ "id": args.run_id, "cancel": "requested" })
        );
    } else {
        println!("cancel requested for run {}", args.run_id);
    }
    Ok(EXIT_OK)
}

/// `tinyperf status`: prints the agent's state, current run and last run. Returns exit
/// status 0 (2 for a usage mistake); an unreachable agent is an error.
pub async fn status(args: &ClientArgs) -> anyhow::Result<i32> {
    finish(status_inner(args).await)
}

async fn status_inner(args: &ClientArgs) -> Result<i32, Exit> {
    let client = Client::connect(args).await?;
    // GetStatus gives the object HTTP's /api/v1/status gives, so both read the same.
    let json = match client.proxy.get_status().await {
        Ok(json) => json,
        Err(e) => return Err(client.fail(e, None).await),
    };
    if args.json {
        println!("{json}");
        return Ok(EXIT_OK);
    }
    let status: render::Status = serde_json::from_str(&json)
        .with_context(|| format!("the agent sent a status that does not parse: {json}"))?;
    print!("{}", render::status(&status));
    Ok(EXIT_OK)
}

/// `tinyperf runs`: prints the agent's recorded runs, newest first, up to `--limit`.
/// Returns exit status 0 (2 for a usage mistake); an unreachable agent is an error.
pub async fn runs(args: &RunsArgs) -> anyhow::Result<i32> {
    finish(runs_inner(args).await)
}

async fn runs_inner(args: &RunsArgs) -> Result<i32, Exit> {
    let client = Client::connect(&args.client).await?;
    let json = match client.proxy.list_runs(args.limit).await {
        Ok(json) => json,
        Err(e) => return Err(client.fail(e, None).await),
    };
    let records: Vec<RunBrief> = serde_json::from_str(&json)
        .with_context(|| format!("the agent sent a run list that does not parse: {json}"))?;
    if args.client.json {
        // The shape of HTTP's GET /api/v1/runs.
        println!("{}", serde_json::json!({ "runs": records }));
        return Ok(EXIT_OK);
    }
    print!("{}", render::runs(&records));
    Ok(EXIT_OK)
}

/// `tinyperf show`: prints one run's record. Returns exit status 0 (2 for a usage
/// mistake); an unknown run, an unparseable record or an unreachable agent is an error.
pub async fn show(args: &RunIdArgs) -> anyhow::Result<i32> {
    finish(show_inner(args).await)
}

async fn show_inner(args: &RunIdArgs) -> Result<i32, Exit> {
    let client = Client::connect(&args.client).await?;
    let (json, record) = client.get_run(&args.run_id).await?;
    match record {
        _ if args.client.json => println!("{json}"),
        Some(record) => print!("{}", render::record(&record)),
        None => Err(anyhow!(
            "the agent sent a run record that does not parse: {json}"
        ))?,
    }
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_become_variants_and_bad_ones_are_usage_errors() {
        let options = dbus_options(&["gemm_seconds=0.5".into(), "gemm_size=512".into()]).unwrap();
        assert_eq!(options["gemm_seconds"], Variant::from(0.5f64));
        assert_eq!(options["gemm_size"], Variant::from(512i64));
        assert!(dbus_options(&["sizes=[1,2]".into()])
            .unwrap_err()
            .contains("sizes"));
        assert!(dbus_options(&["novalue".into()]).is_err());
    }
}
