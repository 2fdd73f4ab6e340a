//! The simulated nodes' HTTP client: one `awc` client per shard (a
//! single-threaded runtime), pooled connections without a count limit (each
//! node's long-poll holds one), and a bound on the other requests in
//! flight so that registering thousands of nodes at once neither opens
//! thousands more connections nor floods the server.

use super::mock_alloc::AllocView;
use awc::http::StatusCode;
use herder_client::node_protocol::Failure;
use serde::Serialize;
use serde_json::Value;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Largest answer read (a node's allocation list with every job).
const MAX_BODY: usize = 512 * 1024 * 1024;

pub struct SimHttp {
    client: awc::Client,
    /// Requests other than long-polls in flight.
    writes: Semaphore,
    /// How long a request may take (a long-poll's wait plus its jitter and
    /// some slack).
    timeout: Duration,
}

impl SimHttp {
    pub fn new(max_in_flight: usize, long_poll: Duration) -> SimHttp {
        let connector = awc::Connector::new()
            .limit(0)
            .timeout(Duration::from_secs(10))
            // Under actix-web's 5 s server keep-alive, so an idle pooled
            // connection is never reused after the server closed it.
            .conn_keep_alive(Duration::from_secs(4))
            .conn_lifetime(Duration::from_secs(3600));
        let timeout = long_poll + long_poll / 8 + Duration::from_secs(15);
        SimHttp {
            client: awc::Client::builder()
                .connector(connector)
                .timeout(timeout)
                .disable_redirects()
                .finish(),
            writes: Semaphore::new(max_in_flight.max(1)),
            timeout,
        }
    }

    /// A PUT with a JSON body; answers the status and JSON body of a 2xx.
    pub async fn put<T: Serialize>(
        &self,
        url: &str,
        token: Option<&str>,
        body: &T,
    ) -> Result<(u64, Value), Failure> {
        let _permit = self
            .writes
            .acquire()
            .await
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        let mut request = self.client.put(url).timeout(self.timeout);
        if let Some(token) = token {
            request = request.insert_header(("X-Nomad-Token", token));
        }
        let mut response = request
            .send_json(body)
            .await
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        let bytes = response
            .body()
            .limit(MAX_BODY)
            .await
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        check(response.status(), &bytes)?;
        let value =
            serde_json::from_slice(&bytes).map_err(|e| Failure::BadAnswer(e.to_string()))?;
        Ok((index_of(&response), value))
    }

    /// The blocking query on a node's allocations: the answer's index and
    /// the allocations.
    pub async fn get_allocs(
        &self,
        url: &str,
        token: &str,
    ) -> Result<(u64, Vec<AllocView>), Failure> {
        let mut response = self
            .client
            .get(url)
            .timeout(self.timeout)
            .insert_header(("X-Nomad-Token", token))
            .send()
            .await
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        let bytes = response
            .body()
            .limit(MAX_BODY)
            .await
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        check(response.status(), &bytes)?;
        let allocs =
            serde_json::from_slice(&bytes).map_err(|e| Failure::BadAnswer(e.to_string()))?;
        Ok((index_of(&response), allocs))
    }
}

fn check(status: StatusCode, body: &[u8]) -> Result<(), Failure> {
    if status.is_success() {
        return Ok(());
    }
    Err(Failure::Status(
        status.as_u16(),
        String::from_utf8_lossy(body).chars().take(200).collect(),
    ))
}

fn index_of<S>(response: &awc::ClientResponse<S>) -> u64 {
    response
        .headers()
        .get("X-Nomad-Index")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
