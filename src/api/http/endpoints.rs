//! What each endpoint answers.

use std::sync::Arc;

use chrono::Utc;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_SECURITY_POLICY, LOCATION};
use hyper::{Method, Request, Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio::sync::Semaphore;

use super::admission::{Admission, Refusal};
use super::auth::TokenGuard;
use super::body::{parse_json, read_json_bytes, read_limited};
use super::log_limit::LineLimit;
use super::page::{HealthVerdicts, PageState};
use super::response::{self, ApiError, Body};
use super::router::Endpoint;
use super::{metrics, page, sse, Limits};
use crate::agent::{AgentHandle, AgentState};
use crate::record::store::Artifact;
use crate::record::{RunBrief, RunRecord, Trigger};

const OPENAPI: &str = include_str!("openapi.json");
/// The pages load scripts and styles from the agent only: no inline script, no
/// inline style, nothing from elsewhere.
const PAGE_POLICY: &str = "default-src 'none'; style-src 'self'; script-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";
/// Runs listed when `?limit=` is not given, and the most a client may ask for.
const DEFAULT_RUN_LIMIT: usize = 50;
const MAX_RUN_LIMIT: usize = 1000;
/// Runs shown in the page's history.
const PAGE_HISTORY: usize = 25;
/// Runs the pages draw trends and the box's best figures from.
const PAGE_TREND_RUNS: usize = 200;

/// Everything a request needs, shared by all connections.
pub struct App {
    pub handle: AgentHandle,
    pub tokens: TokenGuard,
    /// Server errors a client can cause again and again, logged once per interval.
    pub error_lines: LineLimit,
    pub limits: Limits,
    pub event_streams: Arc<Semaphore>,
    /// Each client address's share of them.
    pub stream_shares: Arc<super::stream_shares::StreamShares>,
    pub admission: Arc<Admission>,
    pub pages: PageState,
}

/// `POST /api/v1/runs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// The suite to run.
    pub suite: String,
    /// Its options, checked by the suite's preflight.
    #[serde(default)]
    pub options: Map<String, Value>,
}

/// `POST /api/v1/image/factory-reset`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FactoryResetRequest {
    /// The box's host name, as a confirmation.
    #[serde(default)]
    confirm: Option<String>,
}

/// `POST /api/v1/image/update`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateRequestBody {
    /// The version; the newest newer one when absent or empty.
    #[serde(default)]
    version: Option<String>,
    /// Reboot into it once written.
    #[serde(default)]
    reboot: bool,
}

#[derive(Serialize)]
struct RunsPage {
    runs: Vec<RunBrief>,
}

impl App {
    /// Answers one request; every failure becomes a JSON error response.
    pub async fn respond(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let mut response = match self.route(request).await {
            Ok(response) => response,
            Err(error) => {
                // Refusals for load are counted and summed up by the admission log.
                if error.status.is_server_error() && error.status != StatusCode::SERVICE_UNAVAILABLE
                {
                    let kind = format!("{} {}", error.status.as_u16(), error.code);
                    if let Some(held) = self.error_lines.due(&kind) {
                        tracing::error!(
                            status = %error.status,
                            message = %error.message,
                            like_it_since_last_line = held,
                            "HTTP request failed (at most one line of its kind per interval)"
                        );
                    }
                } else {
                    tracing::debug!(status = %error.status, message = %error.message, "HTTP request refused");
                }
                error.into_response()
            }
        };
        response.headers_mut().insert(
            "x-content-type-options",
            HeaderValue::from_static("nosniff"),
        );
        response
    }

    async fn route(&self, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
        check_head_size(&request, &self.limits)?;
        let endpoint = Endpoint::from_path(request.uri().path())?;
        endpoint.check_method(request.method())?;
        let is_post = request.method() == Method::POST;
        match endpoint {
            Endpoint::Static(asset) => page::assets::respond(asset, request.headers()),
            Endpoint::RunPage(id) => self.run_page(id).await,
            Endpoint::Healthz => Ok(response::json(StatusCode::OK, &json!({"status": "ok"}))),
            Endpoint::Status => Ok(response::json(StatusCode::OK, &self.handle.status())),
            Endpoint::Hardware => Ok(response::json(StatusCode::OK, &self.handle.hardware())),
            Endpoint::Box => Ok(response::json(
                StatusCode::OK,
                &*self.handle.box_record().await?,
            )),
            Endpoint::Image => Ok(response::json(StatusCode::OK, &self.handle.image().await)),
            Endpoint::ImageFactoryReset => self.factory_reset(request).await,
            Endpoint::ImageUpdate => self.image_update(request).await,
            Endpoint::Live => Ok(self
                .handle
                .with_live(|live| response::json(StatusCode::OK, live))),
            Endpoint::Runs if is_post => self.start_run(request).await,
            Endpoint::Runs => self.list_runs(request.uri().query()).await,
            Endpoint::Run(id) => {
                let record = self.load_run(id).await?;
                Ok(response::json(StatusCode::OK, &*record))
            }
            Endpoint::RunMllog(id) => self.artifact(id, Artifact::Mllog, response::TEXT).await,
            Endpoint::RunTelemetry(id) => {
                self.artifact(id, Artifact::Telemetry, response::CSV).await
            }
            Endpoint::RunTrain(id) => {
                self.artifact(id, Artifact::TrainFigures, response::NDJSON)
                    .await
            }
            Endpoint::RunCancel(id) => self.cancel_run(request, id).await,
            Endpoint::Events => self.events(peer_of(&request)),
            Endpoint::OpenApi => Ok(response::bytes(
                StatusCode::OK,
                response::JSON,
                openapi_document().as_bytes(),
            )),
            Endpoint::Metrics => self.metrics().await,
            Endpoint::Page => self.page().await,
        }
    }

    async fn start_run(&self, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
        self.tokens.check(request.headers(), peer_of(&request))?;
        let bytes = read_json_bytes(request, self.limits.max_body_bytes).await?;
        let start: StartRequest = parse_json(&bytes)?;
        let id = self
            .handle
            .start(&start.suite, start.options, Trigger::Http)
            .await?;
        tracing::info!(run = %id, suite = %start.suite, "run started over HTTP");
        let mut response = response::json(StatusCode::ACCEPTED, &json!({ "id": id }));
        if let Ok(location) = HeaderValue::from_str(&format!("/api/v1/runs/{id}")) {
            response.headers_mut().insert(LOCATION, location);
        }
        Ok(response)
    }

    /// `POST /api/v1/image/factory-reset`: the body must confirm the box's host name,
    /// so that a reset meant for one box never erases another.
    async fn factory_reset(&self, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
        let peer = peer_of(&request);
        self.tokens.check(request.headers(), peer)?;
        let bytes = read_json_bytes(request, self.limits.max_body_bytes).await?;
        let confirm = if bytes.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            parse_json::<FactoryResetRequest>(&bytes)?.confirm
        };
        let hostname = metrics::hostname();
        if hostname.is_empty() || confirm.as_deref() != Some(hostname.as_str()) {
            let given = match &confirm {
                Some(given) => format!("confirm is {}", crate::echo::quoted(given)),
                None => "no confirm was given".to_string(),
            };
            return Err(ApiError::bad_request(
                "confirm_mismatch",
                format!(
                    "a factory reset erases this box's state partition; send                      {{\"confirm\": {}}}, the box's host name ({given})",
                    serde_json::Value::String(hostname)
                ),
            ));
        }
        self.handle
            .request_factory_reset(&format!("http {peer}"))
            .await?;
        Ok(response::json(
            StatusCode::ACCEPTED,
            &json!({
                "factory_reset": "requested",
                "message": "the box reboots and erases its state partition",
            }),
        ))
    }

    /// `POST /api/v1/image/update`: the agent writes its request and a root service
    /// writes the other slot; `GET /api/v1/image` and the `update` events follow it.
    async fn image_update(&self, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
        let peer = peer_of(&request);
        self.tokens.check(request.headers(), peer)?;
        let bytes = read_json_bytes(request, self.limits.max_body_bytes).await?;
        let body = if bytes.iter().all(u8::is_ascii_whitespace) {
            UpdateRequestBody {
                version: None,
                reboot: false,
            }
        } else {
            parse_json::<UpdateRequestBody>(&bytes)?
        };
        let version = body.version.unwrap_or_default();
        let asked = self
            .handle
            .request_update(&version, body.reboot, &format!("http {peer}"))
            .await?;
        Ok(response::json(
            StatusCode::ACCEPTED,
            &json!({
                "update": "requested",
                "version": asked.version,
                "reboot": asked.reboot,
                "message": "the update is verified and written into the other slot; follow it at GET /api/v1/image",
            }),
        ))
    }

    async fn cancel_run(
        &self,
        request: Request<Incoming>,
        id: String,
    ) -> Result<Response<Body>, ApiError> {
        self.tokens.check(request.headers(), peer_of(&request))?;
        // The body carries nothing, but an oversized one is still refused.
        read_limited(request, self.limits.max_body_bytes).await?;
        self.handle.cancel(&id).await?;
        tracing::info!(run = %id, "cancel requested over HTTP");
        Ok(response::json(
            StatusCode::ACCEPTED,
            &json!({ "id": id, "state": "cancelling" }),
        ))
    }

    async fn list_runs(&self, query: Option<&str>) -> Result<Response<Body>, ApiError> {
        let limit = run_limit(query)?;
        let page = RunsPage {
            runs: self.handle.list_runs(limit),
        };
        Ok(response::json(StatusCode::OK, &page))
    }

    async fn load_run(&self, id: String) -> Result<Arc<RunRecord>, ApiError> {
        Ok(self.handle.get_run(&id).await?)
    }

    async fn artifact(
        &self,
        id: String,
        artifact: Artifact,
        content_type: &'static str,
    ) -> Result<Response<Body>, ApiError> {
        let (file, len) = self.handle.open_run_artifact(&id, artifact).await?;
        Ok(super::file_body::response(file, len, content_type))
    }

    fn events(&self, peer: std::net::IpAddr) -> Result<Response<Body>, ApiError> {
        let share = self.stream_shares.take(peer).ok_or_else(|| {
            self.admission.log().refused(Refusal::EventStreams);
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_streams",
                format!(
                    "this address holds {} event streams already, its share; close one",
                    self.stream_shares.per_peer()
                ),
            )
            .with_header("retry-after", "10")
        })?;
        let permit = self
            .event_streams
            .clone()
            .try_acquire_owned()
            .map_err(|_| {
                self.admission.log().refused(Refusal::EventStreams);
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too_many_streams",
                    format!(
                        "{} event streams are open already; try again later",
                        self.limits.max_event_streams
                    ),
                )
                .with_header("retry-after", "10")
            })?;
        Ok(sse::response(
            self.handle.clone(),
            self.limits.keep_alive,
            self.limits.max_event_stream_age,
            (permit, share),
        ))
    }

    async fn metrics(&self) -> Result<Response<Body>, ApiError> {
        let status = self.handle.status();
        let suite_runs = self.handle.suite_latest_runs();
        let latest = self.handle.latest_results();
        let live_sample = self.handle.with_live(|live| live.latest_sample().cloned());
        let process = metrics::process::read();
        let counters = self.handle.counters();
        let hostname = metrics::hostname();
        let runs_stored = self.handle.runs_stored();
        let image = self.handle.image().await;
        let text = self.handle.with_hardware(|hardware| {
            metrics::render(&metrics::Snapshot {
                status: &status,
                counters: &counters,
                hardware,
                hostname: &hostname,
                latest: &latest,
                suite_runs: &suite_runs,
                live_sample: live_sample.as_ref(),
                process: process.as_ref(),
                runs_stored,
                tokens: self.tokens.figures(),
                image: Some(&image),
            })
        });
        Ok(response::bytes(StatusCode::OK, response::PROMETHEUS, text))
    }

    async fn page(&self) -> Result<Response<Body>, ApiError> {
        let status = self.handle.status();
        let current = match status.state {
            AgentState::Running => self.handle.current_run(),
            AgentState::Idle => None,
        };
        // What the page shows of the stored runs is made again only when they change.
        let newest = self.handle.list_runs(1);
        let key = format!(
            "{} {}",
            self.handle.runs_stored(),
            newest
                .first()
                .map(|r| serde_json::to_string(r).unwrap_or_default())
                .unwrap_or_default()
        );
        let mut trend_runs = None;
        let history = self.pages.history(&key, || {
            let runs = self.handle.list_runs(PAGE_TREND_RUNS);
            let parts = page::history_parts(
                &status.sku,
                &runs[..runs.len().min(PAGE_HISTORY)],
                &runs,
                &self.pages.prices,
            );
            trend_runs = Some(runs);
            parts
        });
        let health = self.health_verdicts(trend_runs).await;
        let hardware = self.handle.hardware();
        let box_record = self.handle.box_summary();
        let image = self.handle.image().await;
        let html = self.handle.with_live(|live| {
            page::home::render(&page::home::PageData {
                status: &status,
                hardware: &hardware,
                history: &history,
                current: current.as_deref(),
                live,
                health: &health,
                charts: page::assets::has_charts(),
                now: Utc::now(),
                box_record: box_record.as_ref(),
                image: Some(&image),
            })
        });
        Ok(page_response(html.into()))
    }

    /// Each GPU's verdict in the newest health run: read from disk once per new
    /// health run, then kept. `runs` are the stored runs when they changed since the
    /// last look, else the verdicts kept are still the newest.
    async fn health_verdicts(&self, runs: Option<Vec<RunBrief>>) -> Arc<HealthVerdicts> {
        let Some(runs) = runs else {
            return self.pages.newest_health();
        };
        let Some(newest) = runs
            .iter()
            .find(|r| r.suite == "health" && r.state.is_final())
        else {
            return self.pages.forget_health();
        };
        if let Some(kept) = self.pages.health(&newest.id) {
            return kept;
        }
        match self.handle.get_run(&newest.id).await {
            Ok(record) => self.pages.keep_health(&record),
            Err(e) => {
                tracing::warn!(run = %newest.id, error = %e, "cannot read the newest health run");
                Arc::default()
            }
        }
    }

    async fn run_page(&self, id: String) -> Result<Response<Body>, ApiError> {
        let newest = self
            .handle
            .list_runs(1)
            .first()
            .map(|r| r.id.clone())
            .unwrap_or_default();
        if let Some(page) = self.pages.run_page(&id, &newest) {
            return Ok(page_response(page));
        }
        let _drawing = self
            .pages
            .drawing
            .acquire()
            .await
            .map_err(|_| ApiError::internal("the page drawer is closed"))?;
        if let Some(page) = self.pages.run_page(&id, &newest) {
            return Ok(page_response(page));
        }
        let runs = self.handle.list_runs(PAGE_TREND_RUNS);
        let record = self.load_run(id.clone()).await?;
        // A run without telemetry or an MLLOG has a page without those figures.
        let telemetry = self
            .handle
            .run_artifact(&id, Artifact::Telemetry)
            .await
            .ok();
        let mllog = self.handle.run_artifact(&id, Artifact::Mllog).await.ok();
        let train = self
            .handle
            .run_artifact(&id, Artifact::TrainFigures)
            .await
            .ok();
        let status = self.handle.status();
        let html = page::run::render(&page::run::RunPageData {
            record: &record,
            sku: &status.sku,
            version: &status.version,
            telemetry: telemetry.as_deref(),
            mllog: mllog.as_deref(),
            train: train.as_deref(),
            runs: &runs,
            prices: &self.pages.prices,
            charts: page::assets::has_charts(),
        });
        let page = bytes::Bytes::from(html);
        if record.state.is_final() {
            self.pages.keep_run_page(&id, &newest, page.clone());
        }
        Ok(page_response(page))
    }
}

/// The client's address, as the server noted it on accepting the connection.
fn peer_of<B>(request: &Request<B>) -> std::net::IpAddr {
    request
        .extensions()
        .get::<super::Peer>()
        .map(|p| p.0)
        .unwrap_or(std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED))
}

fn page_response(html: bytes::Bytes) -> Response<Body> {
    let mut response = response::bytes(StatusCode::OK, response::HTML, html);
    response.headers_mut().insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(PAGE_POLICY),
    );
    response
}

/// The API description with the run options' schema made from the agent's own option
/// tables, built once.
fn openapi_document() -> &'static str {
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut doc: Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
        doc["components"]["schemas"]["RunOptions"] = crate::suite::option_schema::schema();
        doc.to_string()
    })
}

/// Refuses a request whose head is over the limits with a JSON 431.
fn check_head_size(request: &Request<Incoming>, limits: &Limits) -> Result<(), ApiError> {
    let headers = request.headers();
    if headers.len() > limits.max_headers {
        return Err(ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!(
                "{} request headers are over the limit of {}",
                headers.len(),
                limits.max_headers
            ),
        ));
    }
    // Request line plus each `name: value\r\n`.
    let size = request.method().as_str().len()
        + request.uri().to_string().len()
        + 12
        + headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 4)
            .sum::<usize>();
    if size > limits.max_header_bytes {
        return Err(ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!(
                "the request head is about {size} bytes, over the limit of {}",
                limits.max_header_bytes
            ),
        ));
    }
    Ok(())
}

/// `?limit=N`, 1..=1000; any other parameter is refused.
pub fn run_limit(query: Option<&str>) -> Result<usize, ApiError> {
    let mut limit = DEFAULT_RUN_LIMIT;
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "limit" {
            return Err(ApiError::bad_request(
                "invalid_query",
                format!(
                    "unknown query parameter {:?}; this endpoint takes only limit",
                    key.chars().take(40).collect::<String>()
                ),
            ));
        }
        limit = value
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_RUN_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_query",
                    format!(
                        "limit must be a whole number from 1 to {MAX_RUN_LIMIT}, got {:?}",
                        value.chars().take(40).collect::<String>()
                    ),
                )
            })?;
    }
    Ok(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_limit_parses_and_refuses() {
        assert_eq!(run_limit(None).unwrap(), DEFAULT_RUN_LIMIT);
        assert_eq!(run_limit(Some("limit=3")).unwrap(), 3);
        assert_eq!(run_limit(Some("")).unwrap(), DEFAULT_RUN_LIMIT);
        for bad in [
            "limit=0",
            "limit=-1",
            "limit=x",
            "limit=1001",
            "limit",
            "foo=1",
        ] {
            assert_eq!(
                run_limit(Some(bad)).unwrap_err().code,
                "invalid_query",
                "{bad}"
            );
        }
    }

    #[test]
    fn openapi_document_lists_every_route() {
        let doc: Value = serde_json::from_str(openapi_document()).unwrap();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.0"));
        let options = &doc["components"]["schemas"]["RunOptions"]["properties"];
        assert_eq!(options["dynamic_loss_scale"]["type"], "boolean");
        assert_eq!(options["gemm_size"]["type"], "integer");
        let paths = doc["paths"].as_object().unwrap();
        for (template, methods) in super::super::router::ROUTES {
            let path = paths
                .get(*template)
                .unwrap_or_else(|| panic!("{template} missing from openapi.json"));
            for method in methods.iter().filter(|m| **m != Method::HEAD) {
                let key = method.as_str().to_lowercase();
                assert!(path.get(&key).is_some(), "{method} {template} undocumented");
            }
        }
        assert_eq!(paths.len(), super::super::router::ROUTES.len());
    }
}
