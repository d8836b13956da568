//! Which endpoint a request path names, and which methods it takes.
//!
//! Paths are matched on their raw, still percent-encoded form. A run id must be a
//! valid store id as written, so `%2e%2e`, `%2f` and `..` are refused here, before
//! anything reaches the store.

use hyper::{Method, StatusCode};

use super::page::assets::Asset;
use super::response::ApiError;
use crate::record::store::is_valid_run_id;

/// A known path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Page,
    RunPage(String),
    Static(Asset),
    Status,
    Hardware,
    Box,
    Image,
    ImageFactoryReset,
    /// `POST /api/v1/image/update`.
    ImageUpdate,
    Live,
    Runs,
    Run(String),
    RunMllog(String),
    RunTelemetry(String),
    RunTrain(String),
    RunCancel(String),
    Events,
    OpenApi,
    Metrics,
    Healthz,
}

/// Every path template with the methods it takes; the OpenAPI document must list
/// exactly these.
#[cfg(test)]
pub const ROUTES: &[(&str, &[Method])] = &[
    ("/", GET),
    ("/runs/{id}", GET),
    ("/static/{asset}", GET),
    ("/api/v1/status", GET),
    ("/api/v1/hardware", GET),
    ("/api/v1/box", GET),
    ("/api/v1/image", GET),
    ("/api/v1/image/factory-reset", POST),
    ("/api/v1/image/update", POST),
    ("/api/v1/live", GET),
    ("/api/v1/runs", GET_POST),
    ("/api/v1/runs/{id}", GET),
    ("/api/v1/runs/{id}/mllog", GET),
    ("/api/v1/runs/{id}/telemetry", GET),
    ("/api/v1/runs/{id}/train", GET),
    ("/api/v1/runs/{id}/cancel", POST),
    ("/api/v1/events", GET),
    ("/api/v1/openapi.json", GET),
    ("/metrics", GET),
    ("/healthz", GET),
];

const GET: &[Method] = &[Method::GET, Method::HEAD];
const POST: &[Method] = &[Method::POST];
const GET_POST: &[Method] = &[Method::GET, Method::HEAD, Method::POST];

impl Endpoint {
    /// Matches a raw request path.
    pub fn from_path(path: &str) -> Result<Endpoint, ApiError> {
        let endpoint = match path {
            "/" => Endpoint::Page,
            "/api/v1/status" => Endpoint::Status,
            "/api/v1/hardware" => Endpoint::Hardware,
            "/api/v1/box" => Endpoint::Box,
            "/api/v1/image" => Endpoint::Image,
            "/api/v1/image/factory-reset" => Endpoint::ImageFactoryReset,
            "/api/v1/image/update" => Endpoint::ImageUpdate,
            "/api/v1/live" => Endpoint::Live,
            "/api/v1/runs" => Endpoint::Runs,
            "/api/v1/events" => Endpoint::Events,
            "/api/v1/openapi.json" => Endpoint::OpenApi,
            "/metrics" => Endpoint::Metrics,
            "/healthz" => Endpoint::Healthz,
            _ => {
                if let Some(name) = path.strip_prefix("/static/") {
                    return Asset::from_name(name)
                        .map(Endpoint::Static)
                        .ok_or_else(|| no_route(path));
                }
                if let Some(id) = path.strip_prefix("/runs/") {
                    if !is_valid_run_id(id) {
                        return Err(invalid_run_id(id));
                    }
                    return Ok(Endpoint::RunPage(id.to_string()));
                }
                return Endpoint::run_path(path);
            }
        };
        Ok(endpoint)
    }

    /// `/api/v1/runs/{id}` and the paths below it.
    fn run_path(path: &str) -> Result<Endpoint, ApiError> {
        let Some(rest) = path.strip_prefix("/api/v1/runs/") else {
            return Err(no_route(path));
        };
        let (id, tail) = match rest.split_once('/') {
            Some((id, tail)) => (id, Some(tail)),
            None => (rest, None),
        };
        let make: fn(String) -> Endpoint = match tail {
            None => Endpoint::Run,
            Some("mllog") => Endpoint::RunMllog,
            Some("telemetry") => Endpoint::RunTelemetry,
            Some("train") => Endpoint::RunTrain,
            Some("cancel") => Endpoint::RunCancel,
            Some(_) => return Err(no_route(path)),
        };
        if !is_valid_run_id(id) {
            return Err(invalid_run_id(id));
        }
        Ok(make(id.to_string()))
    }

    /// The methods this endpoint takes.
    pub fn methods(&self) -> &'static [Method] {
        match self {
            Endpoint::Runs => GET_POST,
            Endpoint::RunCancel(_) | Endpoint::ImageFactoryReset | Endpoint::ImageUpdate => POST,
            _ => GET,
        }
    }

    /// Refuses `method` with 405 and an `Allow` header unless the endpoint takes it.
    pub fn check_method(&self, method: &Method) -> Result<(), ApiError> {
        let methods = self.methods();
        if methods.contains(method) {
            return Ok(());
        }
        let allow = methods
            .iter()
            .map(Method::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{} is not allowed here; use {allow}", echo(method.as_str())),
        )
        .with_header("allow", allow))
    }
}

fn no_route(path: &str) -> ApiError {
    ApiError::not_found(format!(
        "no such endpoint: {}; see /api/v1/openapi.json",
        echo(path)
    ))
}

pub fn invalid_run_id(id: &str) -> ApiError {
    ApiError::bad_request(
        "invalid_run_id",
        format!(
            "{} is not a run id (letters, digits and '-', at most 64)",
            echo(id)
        ),
    )
}

use crate::echo::quoted as echo;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_paths_and_run_paths_match() {
        assert_eq!(Endpoint::from_path("/").unwrap(), Endpoint::Page);
        assert_eq!(Endpoint::from_path("/healthz").unwrap(), Endpoint::Healthz);
        assert_eq!(
            Endpoint::from_path("/runs/20261129-210512-3fa9c2").unwrap(),
            Endpoint::RunPage("20261129-210512-3fa9c2".into())
        );
        assert_eq!(
            Endpoint::from_path("/static/uplot.min.js").unwrap(),
            Endpoint::Static(Asset::UplotJs)
        );
        for path in ["/static/../page.js", "/static/", "/static/other.js"] {
            assert_eq!(
                Endpoint::from_path(path).unwrap_err().status,
                StatusCode::NOT_FOUND,
                "{path}"
            );
        }
        assert_eq!(
            Endpoint::from_path("/runs/..").unwrap_err().code,
            "invalid_run_id"
        );
        let id = "20261129-210512-3fa9c2";
        assert_eq!(
            Endpoint::from_path(&format!("/api/v1/runs/{id}")).unwrap(),
            Endpoint::Run(id.into())
        );
        assert_eq!(
            Endpoint::from_path(&format!("/api/v1/runs/{id}/telemetry")).unwrap(),
            Endpoint::RunTelemetry(id.into())
        );
        assert_eq!(
            Endpoint::from_path(&format!("/api/v1/runs/{id}/train")).unwrap(),
            Endpoint::RunTrain(id.into())
        );
        assert_eq!(
            Endpoint::from_path(&format!("/api/v1/runs/{id}/cancel")).unwrap(),
            Endpoint::RunCancel(id.into())
        );
    }

    #[test]
    fn traversal_and_encoded_ids_are_refused_before_the_store() {
        for path in [
            "/api/v1/runs/..",
            "/api/v1/runs/%2e%2e",
            "/api/v1/runs/..%2f..%2fetc",
            "/api/v1/runs/a%2Fb/mllog",
            "/api/v1/runs/../mllog",
            "/api/v1/runs/-rf",
            "/api/v1/runs/",
        ] {
            let err = Endpoint::from_path(path).unwrap_err();
            assert_eq!(err.status, StatusCode::BAD_REQUEST, "{path}");
            assert_eq!(err.code, "invalid_run_id", "{path}");
        }
        for path in ["/api/v1/runs/../../etc/passwd", "/api/v2/status", "/x"] {
            let err = Endpoint::from_path(path).unwrap_err();
            assert_eq!(err.status, StatusCode::NOT_FOUND, "{path}");
        }
    }

    #[test]
    fn wrong_method_lists_the_allowed_ones() {
        let err = Endpoint::Status.check_method(&Method::POST).unwrap_err();
        assert_eq!(err.status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(err.headers, vec![("allow", "GET, HEAD".to_string())]);
        assert!(Endpoint::Runs.check_method(&Method::POST).is_ok());
        assert!(Endpoint::RunCancel("a".into())
            .check_method(&Method::GET)
            .is_err());
    }

    #[test]
    fn route_table_agrees_with_the_matcher() {
        for (template, methods) in ROUTES {
            let path = template
                .replace("{id}", "20261129-210512-3fa9c2")
                .replace("{asset}", "page.js");
            let endpoint = Endpoint::from_path(&path).unwrap();
            assert_eq!(endpoint.methods(), *methods, "{template}");
        }
    }
}
