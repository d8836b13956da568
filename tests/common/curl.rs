//! HTTP against an agent process through curl, as an operator's script would talk to
//! it: one request a call, blocking, the answer's status and body.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::{wait_for, Agent, TOKEN};

/// `curl -s` with `args`: the HTTP status (0 when no answer came) and the body.
pub fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.parse().unwrap_or(0), body.to_string())
}

/// [`curl`] with the body read as JSON, `Null` when it is none.
pub fn curl_json(args: &[&str]) -> (u16, Value) {
    let (code, body) = curl(args);
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

impl Agent {
    /// The address of `path` on this agent's HTTP socket.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    /// GET `path`, read as JSON.
    pub fn get_json(&self, path: &str) -> Value {
        curl_json(&[&self.url(path)]).1
    }

    /// POST to `path` with the test token, and `json` as the body when there is one.
    pub fn post_with_token(&self, path: &str, json: Option<&str>) -> (u16, Value) {
        let auth = format!("Authorization: Bearer {TOKEN}");
        let url = self.url(path);
        let mut args = vec!["-X", "POST", "-H", auth.as_str()];
        if let Some(json) = json {
            args.extend(["--json", json]);
        }
        args.push(&url);
        curl_json(&args)
    }

    /// Asks for a run with the request `body` (`{"suite": …, "options": …}`).
    pub fn post_run(&self, body: &str) -> (u16, Value) {
        self.post_with_token("/api/v1/runs", Some(body))
    }

    /// Starts a run with the request `body`, which must be accepted: its id.
    pub fn start_run(&self, body: &str) -> String {
        let (code, reply) = self.post_run(body);
        assert_eq!(code, 202, "{reply}");
        reply["id"].as_str().unwrap().to_string()
    }

    /// `GET /api/v1/status`.
    pub fn status(&self) -> Value {
        self.get_json("/api/v1/status")
    }

    /// The record of run `id` as the agent serves it.
    pub fn run_record(&self, id: &str) -> Value {
        self.get_json(&format!("/api/v1/runs/{id}"))
    }

    /// Polls run `id` until it is no longer `running`, for at most `limit`: its record.
    pub fn wait_run_ended(&self, id: &str, limit: Duration, what: &str) -> Value {
        wait_for(limit, what, || {
            let record = self.run_record(id);
            (record["state"] != "running").then_some(record)
        })
    }

    /// Waits (a minute at most) until the run in progress is in `stage`.
    pub fn wait_stage(&self, stage: &str) {
        wait_for(Duration::from_secs(60), stage, || {
            (self.status()["current_stage"] == stage).then_some(())
        });
    }
}
