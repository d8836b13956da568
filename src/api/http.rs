//! The HTTP API and status page. (Placeholder: not implemented yet.)

use crate::agent::AgentHandle;

pub async fn serve(
    _handle: AgentHandle,
    _listener: tokio::net::TcpListener,
    _token: Option<String>,
) {
    tracing::error!("HTTP server not implemented");
}
