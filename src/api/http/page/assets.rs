//! The pages' scripts, style sheet and the embedded chart library, served from the
//! agent itself so the pages' content security policy can refuse every other source.

use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_ENCODING, VARY};
use hyper::{HeaderMap, Response, StatusCode};

use crate::api::http::response::{self, ApiError, Body};

/// uPlot's files, from its pinned npm tarball (see build.rs).
pub struct UplotFiles {
    /// `uplot.min.js`.
    pub js: &'static [u8],
    /// `uplot.min.js`, gzipped.
    pub js_gzip: &'static [u8],
    /// `uplot.min.css`.
    pub css: &'static [u8],
    /// uPlot's licence.
    pub license: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/uplot.rs"));

const PAGE_JS: &str = include_str!("page.js");
const PAGE_CSS: &str = include_str!("page.css");
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The files under `/static/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asset {
    /// `page.js`: the live charts and the event stream.
    PageJs,
    /// `page.css`.
    PageCss,
    /// `uplot.min.js`.
    UplotJs,
    /// `uplot.min.css`.
    UplotCss,
    /// `uplot.LICENSE`.
    UplotLicense,
}

impl Asset {
    /// The asset served as `/static/{name}`, if any.
    pub fn from_name(name: &str) -> Option<Asset> {
        Some(match name {
            "page.js" => Asset::PageJs,
            "page.css" => Asset::PageCss,
            "uplot.min.js" => Asset::UplotJs,
            "uplot.min.css" => Asset::UplotCss,
            "uplot.LICENSE" => Asset::UplotLicense,
            _ => return None,
        })
    }
}

/// Whether the charts' library is in this build.
pub fn has_charts() -> bool {
    UPLOT.is_some()
}

/// The asset, gzipped when it is stored so and the client takes gzip.
pub fn respond(asset: Asset, request_headers: &HeaderMap) -> Result<Response<Body>, ApiError> {
    let takes_gzip = request_headers
        .get_all(hyper::header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|c| c.trim().starts_with("gzip")));
    let uplot = || {
        UPLOT.as_ref().ok_or_else(|| {
            ApiError::not_found(format!(
                "not implemented in this build: uPlot {UPLOT_VERSION} was not embedded \
                 (build with TINYPERF_REQUIRE_UPLOT=1 to require it)"
            ))
        })
    };
    let (content_type, bytes, gzipped): (&'static str, &'static [u8], bool) = match asset {
        Asset::PageJs => (JS, PAGE_JS.as_bytes(), false),
        Asset::PageCss => (CSS, PAGE_CSS.as_bytes(), false),
        Asset::UplotJs if takes_gzip => (JS, uplot()?.js_gzip, true),
        Asset::UplotJs => (JS, uplot()?.js, false),
        Asset::UplotCss => (CSS, uplot()?.css, false),
        Asset::UplotLicense => (response::TEXT, uplot()?.license, false),
    };
    let mut answer = response::bytes(StatusCode::OK, content_type, bytes);
    let headers = answer.headers_mut();
    // Versioned by the binary: a page names them with `?v=VERSION`.
    headers.insert(
        CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=86400"),
    );
    if asset == Asset::UplotJs {
        headers.insert(VARY, HeaderValue::from_static("accept-encoding"));
    }
    if gzipped {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    Ok(answer)
}
