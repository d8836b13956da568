//! The D-Bus interface against a real dbus-daemon and a real `tinyperf agent`.

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{agent_command, Agent, AgentDirs, AgentOnBus, Bus};
use futures_util::StreamExt;
use serde_json::Value;
use tinyperf::api::dbus::{error_name, Agent1Error, Agent1Proxy, BUS_NAME, INTERFACE, OBJECT_PATH};
use zbus::{proxy::CacheProperties, Variant};

const SIGNAL_WAIT: Duration = Duration::from_secs(60);

async fn connect(bus: &Bus) -> (zbus::Connection, Agent1Proxy<'static>) {
    let conn = zbus::connection::Builder::address(bus.address.as_str())
        .build()
        .await
        .expect("connect to the test bus");
    let proxy = Agent1Proxy::builder(&conn)
        .cache_properties(CacheProperties::No)
        .build()
        .await
        .expect("proxy");
    (conn, proxy)
}

/// An agent on a fresh bus, and a connection and proxy to it.
async fn agent_and_proxy() -> (AgentOnBus, zbus::Connection, Agent1Proxy<'static>) {
    let running = AgentOnBus::start("");
    let (conn, proxy) = connect(&running.bus).await;
    (running, conn, proxy)
}

fn no_options() -> HashMap<String, Variant<'static>> {
    HashMap::new()
}

fn busctl(bus: &Bus, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("busctl")
        .arg(format!("--address={}", bus.address))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("busctl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `busctl [flags] call` of the agent's method `member` with `args`, its signature first.
fn busctl_call(bus: &Bus, flags: &[&str], member: &str, args: &[&str]) -> (bool, String, String) {
    let mut all = flags.to_vec();
    all.extend(["call", BUS_NAME, OBJECT_PATH, INTERFACE, member]);
    all.extend(args);
    busctl(bus, &all)
}

/// The D-Bus error name of a raw call's failure.
async fn raw_call_error<B>(conn: &zbus::Connection, member: &str, body: &B) -> String
where
    B: serde::Serialize + zbus::wire::DynamicType,
{
    let err = conn
        .call_method(Some(BUS_NAME), OBJECT_PATH, Some(INTERFACE), member, body)
        .await
        .expect_err("the call fails");
    error_name(&err).unwrap_or_else(|| panic!("no D-Bus error name in {err:?}"))
}

async fn next_within<S: futures_util::Stream + Unpin>(stream: &mut S, what: &str) -> S::Item {
    tokio::time::timeout(SIGNAL_WAIT, stream.next())
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .unwrap_or_else(|| panic!("{what}: stream ended"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn properties_and_read_methods_answer_when_idle() {
    let (_running, _conn, agent) = agent_and_proxy().await;

    assert_eq!(agent.state().await.unwrap(), "idle");
    assert_eq!(agent.current_run().await.unwrap(), "");
    assert_eq!(agent.current_stage().await.unwrap(), "");
    assert_eq!(agent.progress().await.unwrap(), 0.0);
    assert_eq!(
        agent.last_run().await.unwrap(),
        "",
        "no run has finished yet"
    );
    assert_eq!(agent.version().await.unwrap(), env!("CARGO_PKG_VERSION"));
    let sku = agent.sku().await.unwrap();
    assert!(!sku.is_empty());
    let hardware: Value = serde_json::from_str(&agent.hardware().await.unwrap()).unwrap();
    assert!(hardware.is_object(), "{hardware}");

    assert_eq!(agent.list_runs(10).await.unwrap(), "[]");
    let rescanned: Value = serde_json::from_str(&agent.rescan().await.unwrap()).unwrap();
    assert!(rescanned.is_object(), "{rescanned}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_run_emits_signals_and_property_changes() {
    let (_running, conn, agent) = agent_and_proxy().await;
    let properties = zbus::fdo::PropertiesProxy::builder(&conn)
        .destination(BUS_NAME)
        .path(OBJECT_PATH)
        .build()
        .await
        .unwrap();
    let mut changes = properties.receive_properties_changed().await.unwrap();
    let mut started = agent.receive_run_started().await.unwrap();
    let mut stages = agent.receive_stage_finished().await.unwrap();
    let mut finished = agent.receive_run_finished().await.unwrap();

    let run_id = agent.start("inventory", &no_options()).await.unwrap();

    let s = next_within(&mut started, "RunStarted").await;
    let args = s.args().unwrap();
    assert_eq!(
        (args.run_id.as_str(), args.suite.as_str()),
        (run_id.as_str(), "inventory")
    );

    let f = next_within(&mut finished, "RunFinished").await;
    let args = f.args().unwrap();
    assert_eq!(args.run_id, run_id);
    // This machine is no known tinybox: nothing to fail against, so the run passes.
    assert_eq!(args.state, "passed", "verdict {}", args.verdict);
    assert!(
        ["pass", "skip"].contains(&args.verdict.as_str()),
        "{}",
        args.verdict
    );

    let stage = next_within(&mut stages, "StageFinished").await;
    let args = stage.args().unwrap();
    assert_eq!(args.run_id, run_id);
    assert!(!args.stage.is_empty());
    assert!(["pass", "fail", "skip", "error"].contains(&args.verdict.as_str()));

    // PropertiesChanged: State went running then idle; Progress, Message, CurrentRun
    // and LastRun were announced; LastRun ends naming this run.
    let mut states = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut last_run = String::new();
    while !(states.last().is_some_and(|s| s == "idle") && seen.contains("LastRun")) {
        let signal = next_within(&mut changes, "PropertiesChanged").await;
        let args = signal.args().unwrap();
        assert_eq!(args.interface_name.as_str(), INTERFACE);
        for (name, value) in args.changed_properties() {
            seen.insert(name.to_string());
            match *name {
                "State" => states.push(String::try_from(value.try_clone().unwrap()).unwrap()),
                "LastRun" => last_run = String::try_from(value.try_clone().unwrap()).unwrap(),
                "Progress" => {
                    let p = f64::try_from(value.try_clone().unwrap()).unwrap();
                    assert!((0.0..=1.0).contains(&p), "progress {p}");
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        states.first().map(String::as_str),
        Some("running"),
        "{states:?}"
    );
    for name in ["State", "CurrentRun", "Progress", "Message", "LastRun"] {
        assert!(seen.contains(name), "{name} not announced; saw {seen:?}");
    }
    let brief: Value = serde_json::from_str(&last_run).unwrap();
    assert_eq!(brief["id"], run_id.as_str());
    assert_eq!(brief["state"], "passed");

    let record: Value = serde_json::from_str(&agent.get_run(&run_id).await.unwrap()).unwrap();
    assert_eq!(record["id"], run_id.as_str());
    assert_eq!(record["suite"], "inventory");
    assert_eq!(record["trigger"], "dbus");
    assert_eq!(record["state"], "passed");
    assert!(!record["stages"].as_array().unwrap().is_empty());

    let runs: Value = serde_json::from_str(&agent.list_runs(5).await.unwrap()).unwrap();
    assert_eq!(runs[0]["id"], run_id.as_str());
    assert_eq!(agent.state().await.unwrap(), "idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_runs_is_newest_first_and_limited() {
    let (_running, _conn, agent) = agent_and_proxy().await;
    let mut finished = agent.receive_run_finished().await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = agent.start("inventory", &no_options()).await.unwrap();
        loop {
            let f = next_within(&mut finished, "RunFinished").await;
            if f.args().unwrap().run_id == id {
                break;
            }
        }
        ids.push(id);
        // Run ids carry the start time to the second.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let runs: Vec<Value> = serde_json::from_str(&agent.list_runs(2).await.unwrap()).unwrap();
    let listed: Vec<&str> = runs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(listed, vec![ids[2].as_str(), ids[1].as_str()]);
    let all: Vec<Value> = serde_json::from_str(&agent.list_runs(0).await.unwrap()).unwrap();
    assert_eq!(all.len(), 3, "ListRuns(0) lists every run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_named_errors() {
    let (_running, conn, agent) = agent_and_proxy().await;

    match agent.start("no-such-suite", &no_options()).await {
        Err(Agent1Error::InvalidArgs(m)) => assert!(m.contains("no-such-suite"), "{m}"),
        other => panic!("expected InvalidArgs, got {other:?}"),
    }
    let mut options = no_options();
    options.insert("gemm_size".into(), Variant::from(vec![1u32, 2]));
    match agent.start("acceptance", &options).await {
        Err(Agent1Error::InvalidArgs(m)) => assert!(m.contains("gemm_size"), "{m}"),
        other => panic!("expected InvalidArgs for an array option, got {other:?}"),
    }
    let mut options = no_options();
    options.insert("gemm_size".into(), Variant::from("big"));
    assert!(
        matches!(
            agent.start("acceptance", &options).await,
            Err(Agent1Error::InvalidArgs(_))
        ),
        "a string where a number belongs"
    );
    let mut options = no_options();
    options.insert("gemm_size".into(), Variant::from(1u16));
    assert!(
        matches!(
            agent.start("acceptance", &options).await,
            Err(Agent1Error::InvalidArgs(_))
        ),
        "out of range"
    );

    match agent.get_run("20200101-000000-abcdef").await {
        Err(Agent1Error::NotFound(m)) => assert!(m.contains("20200101-000000-abcdef"), "{m}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(matches!(
        agent.get_run("../etc").await,
        Err(Agent1Error::InvalidArgs(_))
    ));
    assert!(matches!(
        agent.cancel("20200101-000000-abcdef").await,
        Err(Agent1Error::NotFound(_))
    ));

    // The names on the wire, as any client sees them.
    assert_eq!(
        raw_call_error(&conn, "GetRun", &("nope",)).await,
        "org.tinyperf.Agent1.Error.NotFound"
    );
    let empty: HashMap<String, Variant<'_>> = HashMap::new();
    assert_eq!(
        raw_call_error(&conn, "Start", &("nope", empty)).await,
        "org.tinyperf.Agent1.Error.InvalidArgs"
    );
    // Wrong argument types never reach the agent: zbus refuses them.
    assert_eq!(
        raw_call_error(&conn, "Start", &("inventory", "not-a-dict")).await,
        "org.freedesktop.DBus.Error.InvalidArgs"
    );
    assert_eq!(
        raw_call_error(&conn, "GetRun", &(7u32,)).await,
        "org.freedesktop.DBus.Error.InvalidArgs"
    );
    assert_eq!(
        raw_call_error(&conn, "ListRuns", &("ten",)).await,
        "org.freedesktop.DBus.Error.InvalidArgs"
    );
    // Properties are read-only.
    let set = conn
        .call_method(
            Some(BUS_NAME),
            OBJECT_PATH,
            Some("org.freedesktop.DBus.Properties"),
            "Set",
            &(INTERFACE, "State", &Variant::from("running")),
        )
        .await
        .expect_err("State cannot be set");
    assert!(
        error_name(&set).is_some_and(|n| n.starts_with("org.freedesktop.DBus.Error.")),
        "{set:?}"
    );
    assert_eq!(agent.state().await.unwrap(), "idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_start_is_busy_and_cancel_ends_the_run_cancelled() {
    let (_running, _conn, agent) = agent_and_proxy().await;
    let mut finished = agent.receive_run_finished().await.unwrap();

    let mut options = no_options();
    options.insert("gemm_seconds".into(), Variant::from(5.0f64));
    let run_id = agent.start("acceptance", &options).await.unwrap();
    assert_eq!(agent.state().await.unwrap(), "running");
    assert_eq!(agent.current_run().await.unwrap(), run_id);

    match agent.start("inventory", &no_options()).await {
        Err(Agent1Error::Busy(m)) => assert!(m.contains(&run_id), "{m}"),
        other => panic!("expected Busy, got {other:?}"),
    }

    agent.cancel(&run_id).await.unwrap();
    let f = next_within(&mut finished, "RunFinished").await;
    let args = f.args().unwrap();
    assert_eq!(args.run_id, run_id);
    assert_eq!(args.state, "cancelled");
    assert_eq!(args.verdict, "", "a cancelled run is not judged");
    let record: Value = serde_json::from_str(&agent.get_run(&run_id).await.unwrap()).unwrap();
    assert_eq!(record["state"], "cancelled");
    assert_eq!(record["summary"]["verdict"], Value::Null);
    assert_eq!(agent.state().await.unwrap(), "idle");
    assert_eq!(agent.current_run().await.unwrap(), "");

    // A finished run cannot be cancelled again.
    assert!(matches!(
        agent.cancel(&run_id).await,
        Err(Agent1Error::InvalidArgs(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busctl_reads_properties_and_calls_methods() {
    let running = AgentOnBus::start("");
    let bus = &running.bus;

    let (ok, out, err) = busctl(bus, &["introspect", BUS_NAME, OBJECT_PATH, INTERFACE]);
    assert!(ok, "{err}");
    for needle in [
        ".Start",
        "sa{sv}",
        ".Cancel",
        ".GetStatus",
        ".GetRun",
        ".ListRuns",
        ".Rescan",
        ".State",
        ".CurrentRun",
        ".CurrentStage",
        ".Progress",
        ".Message",
        ".LastRun",
        ".Hardware",
        ".Sku",
        ".Version",
        ".RunStarted",
        ".StageFinished",
        ".RunFinished",
        "emits-change",
    ] {
        assert!(
            out.contains(needle),
            "{needle} missing from introspection:\n{out}"
        );
    }

    let (ok, out, err) = busctl(
        bus,
        &[
            "get-property",
            BUS_NAME,
            OBJECT_PATH,
            INTERFACE,
            "State",
            "Version",
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(
        out,
        format!("s \"idle\"\ns \"{}\"\n", env!("CARGO_PKG_VERSION"))
    );

    let (ok, out, err) = busctl_call(bus, &[], "Start", &["sa{sv}", "inventory", "0"]);
    assert!(ok, "{err}");
    let run_id = out
        .trim()
        .strip_prefix("s ")
        .unwrap()
        .trim_matches('"')
        .to_string();
    assert!(tinyperf::record::store::is_valid_run_id(&run_id), "{out}");

    let (ok, out, err) = busctl_call(bus, &["--json=short"], "GetRun", &["s", &run_id]);
    assert!(ok, "{err}");
    let reply: Value = serde_json::from_str(&out).unwrap();
    let record: Value = serde_json::from_str(reply["data"][0].as_str().unwrap()).unwrap();
    assert_eq!(record["id"], run_id.as_str());
    assert_eq!(record["trigger"], "dbus");

    let (ok, out, err) = busctl_call(bus, &["--json=short"], "ListRuns", &["u", "1"]);
    assert!(ok, "{err}");
    let reply: Value = serde_json::from_str(&out).unwrap();
    let runs: Value = serde_json::from_str(reply["data"][0].as_str().unwrap()).unwrap();
    assert_eq!(runs[0]["id"], run_id.as_str());

    // Options of several D-Bus types in one call.
    common::wait_for(Duration::from_secs(60), "the run to finish", || {
        let (_, out, _) = busctl(
            bus,
            &["get-property", BUS_NAME, OBJECT_PATH, INTERFACE, "State"],
        );
        (out.trim() == "s \"idle\"").then_some(())
    });
    let (ok, _, err) = busctl_call(
        bus,
        &[],
        "Start",
        &[
            "sa{sv}",
            "acceptance",
            "2",
            "gemm_size",
            "u",
            "128",
            "gemm_seconds",
            "d",
            "0.1",
        ],
    );
    assert!(ok, "{err}");

    let (ok, _, err) = busctl_call(bus, &[], "GetRun", &["s", "nope"]);
    assert!(!ok);
    assert!(err.contains("no run with id"), "{err}");
}

#[test]
fn a_second_agent_cannot_take_the_name() {
    let bus = Bus::start();
    let first_dirs = AgentDirs::new("");
    let _first = Agent::start(&bus, &first_dirs);
    let second_dirs = AgentDirs::new("");
    let out = agent_command(&second_dirs.config(), &bus.address)
        .output()
        .expect("tinyperf agent runs");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "second agent must fail; log:\n{log}");
    assert!(log.contains("already owned"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_arguments_get_the_right_errors_with_bounded_echoes() {
    let (_running, conn, proxy) = agent_and_proxy().await;
    let huge = "z".repeat(1 << 20);
    let bounded = |e: Agent1Error, name: &str| {
        let text = format!("{e:?}");
        assert!(text.contains(name), "{text}");
        assert!(text.len() < 1024, "{} bytes echoed", text.len());
    };
    bounded(proxy.get_run(&huge).await.unwrap_err(), "InvalidArgs");
    bounded(proxy.cancel(&huge).await.unwrap_err(), "InvalidArgs");
    bounded(
        proxy.start(&huge, &no_options()).await.unwrap_err(),
        "InvalidArgs",
    );
    let mut options = no_options();
    options.insert(huge.clone(), Variant::from(1u32));
    bounded(
        proxy.start("acceptance", &options).await.unwrap_err(),
        "InvalidArgs",
    );

    let mut options = no_options();
    options.insert("gemm_seconds".into(), Variant::from(f64::NAN));
    let err = proxy.start("acceptance", &options).await.unwrap_err();
    let text = format!("{err:?}");
    assert!(
        text.contains("InvalidArgs") && text.contains("is NaN"),
        "{text}"
    );
    assert!(!text.contains("type d"), "{text}");

    let properties = zbus::fdo::PropertiesProxy::builder(&conn)
        .destination(BUS_NAME)
        .path(OBJECT_PATH)
        .cache_properties(CacheProperties::No)
        .build()
        .await
        .unwrap();
    let iface = zbus::names::InterfaceName::try_from(INTERFACE).unwrap();
    let err = properties
        .set(iface.clone(), "State", &Variant::from("running"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, zbus::fdo::Error::PropertyReadOnly(ref m) if m.contains("State is read-only")),
        "{err:?}"
    );
    let err = properties
        .set(iface, "Colour", &Variant::from("blue"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, zbus::fdo::Error::UnknownProperty(ref m) if m.contains("\"Colour\"")),
        "{err:?}"
    );
    assert_eq!(proxy.state().await.unwrap(), "idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_taken_by_large_calls_is_given_back() {
    const ROUNDS: usize = 8;
    let (running, _conn, proxy) = agent_and_proxy().await;
    let pid = running.agent.child.id();
    let before = common::rss_bytes(pid);
    let mut after_each = Vec::new();
    for round in 0..ROUNDS {
        // A fresh string each round, as a caller sending new data would.
        let large = char::from(b'a' + round as u8).to_string().repeat(20 << 20);
        let mut options = no_options();
        options.insert("dataset".into(), Variant::from(large.as_str()));
        assert!(proxy.start("acceptance", &options).await.is_err());
        assert!(proxy.get_run(&large).await.is_err());
        drop(options);
        drop(large);
        // The agent answers small calls between the large ones.
        proxy.get_status().await.unwrap();
        after_each.push(common::rss_bytes(pid) >> 20);
    }
    eprintln!(
        "agent RSS {} MiB before, after each round of 20 MiB calls: {after_each:?} MiB",
        before >> 20
    );
    let last = *after_each.last().unwrap();
    assert!(
        last < (before >> 20) + 48,
        "RSS {} MiB before, {after_each:?} MiB after each round",
        before >> 20
    );
}
