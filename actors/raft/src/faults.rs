//! Transport faults on the HTTP path, for tests: what [`router`] does for
//! the in-process Raft RPCs, done to every signed exchange a real cluster
//! makes ([`SignedClient`]: the Raft RPCs, forwarded writes, status,
//! read-index and membership calls, and the server crate's leader calls).
//!
//! One [`Faults`] handle is shared by the servers of a test (or each gets
//! its own) and changed while they run:
//!
//! - a fraction of requests is lost before it is sent, as a connection
//!   that failed ([`HttpError::Unreachable`]: the caller knows it never
//!   arrived);
//! - a fraction of answers is lost after the server handled the request
//!   ([`HttpError::Lost`]: the case that tests that nothing is applied
//!   twice);
//! - each exchange waits a random time in a range before it is sent;
//! - a partitioned address neither sends nor receives anything, until
//!   [`Faults::heal`]. A partition raised while an exchange is under way
//!   loses its answer, as a real one would.
//!
//! The client is bound to its own server's address
//! ([`SignedClient::with_faults`]), so a partition is enforced on both
//! sides of every link by the senders alone. A client without faults pays
//! one `Option` check per exchange, and takes no lock.
//!
//! The draws come from a seeded generator, so a failing run's fault
//! pattern can be told apart from luck (the interleaving of tasks and
//! threads is still the runtime's).
//!
//! [`router`]: crate::router
//! [`SignedClient`]: crate::http::SignedClient
//! [`SignedClient::with_faults`]: crate::http::SignedClient::with_faults

use crate::http_error::HttpError;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The faults of a test's network. Clones share them.
#[derive(Clone)]
pub struct Faults {
    state: Arc<Mutex<FaultState>>,
}

struct FaultState {
    drop_requests: f64,
    drop_answers: f64,
    delay: Option<(Duration, Duration)>,
    partitioned: BTreeSet<String>,
    rng: SmallRng,
    counts: FaultCounts,
}

/// How many exchanges each fault has hit so far: a test checks that its
/// faults really happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Requests lost before they were sent.
    pub requests_dropped: u64,
    /// Answers lost after the server handled the request.
    pub answers_dropped: u64,
    /// Exchanges refused, or answers lost, because of a partition.
    pub partitioned: u64,
    /// Exchanges that waited before being sent.
    pub delayed: u64,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("Faults")
            .field("drop_requests", &state.drop_requests)
            .field("drop_answers", &state.drop_answers)
            .field("delay", &state.delay)
            .field("partitioned", &state.partitioned)
            .finish()
    }
}

impl Faults {
    /// No faults yet; `seed` drives the random draws.
    pub fn new(seed: u64) -> Faults {
        Faults {
            state: Arc::new(Mutex::new(FaultState {
                drop_requests: 0.0,
                drop_answers: 0.0,
                delay: None,
                partitioned: BTreeSet::new(),
                rng: SmallRng::seed_from_u64(seed),
                counts: FaultCounts::default(),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, FaultState> {
        // Each change under the lock is one assignment or insertion.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Loses each request, before it is sent, with `probability`.
    pub fn drop_requests(&self, probability: f64) {
        self.state().drop_requests = probability.clamp(0.0, 1.0);
    }

    /// Loses each answer, after the server handled the request, with
    /// `probability`.
    pub fn drop_answers(&self, probability: f64) {
        self.state().drop_answers = probability.clamp(0.0, 1.0);
    }

    /// Delays each exchange by a random time in `min..=max`.
    pub fn delay(&self, min: Duration, max: Duration) {
        self.state().delay = Some((min, max.max(min)));
    }

    /// Cuts the server at `addr` (its RPC address) off from every other,
    /// both ways.
    pub fn partition(&self, addr: &str) {
        self.state().partitioned.insert(addr.to_string());
    }

    /// Ends every partition (drops and delays stay).
    pub fn heal(&self) {
        self.state().partitioned.clear();
    }

    /// Ends every fault: partitions, drops and delays.
    pub fn clear(&self) {
        let mut state = self.state();
        state.partitioned.clear();
        state.drop_requests = 0.0;
        state.drop_answers = 0.0;
        state.delay = None;
    }

    /// How many exchanges the faults have hit so far.
    pub fn counts(&self) -> FaultCounts {
        self.state().counts
    }

    /// The faults as seen by the client of the server at `from`.
    pub fn link(&self, from: &str) -> FaultLink {
        FaultLink {
            faults: self.clone(),
            from: from.to_string(),
        }
    }
}

impl FaultState {
    fn cut(&self, from: &str, to: &str) -> bool {
        self.partitioned.contains(from) || self.partitioned.contains(to)
    }
}

/// The faults one server's client applies to its exchanges.
#[derive(Clone, Debug)]
pub struct FaultLink {
    faults: Faults,
    from: String,
}

/// What is decided for one exchange before it is sent.
#[derive(Clone, Copy, Debug)]
#[must_use = "the answer's fate is checked after the exchange"]
pub struct Exchange {
    drop_answer: bool,
}

impl FaultLink {
    /// Decides the fate of an exchange with `to`, and waits its delay:
    /// an error when the request is not to be sent at all.
    pub async fn before_sending(&self, to: &str, url: &str) -> Result<Exchange, HttpError> {
        let (delay, drop_answer) = {
            let mut state = self.faults.state();
            if state.cut(&self.from, to) {
                state.counts.partitioned += 1;
                return Err(not_sent(url, "partitioned (injected fault)"));
            }
            let drop_requests = state.drop_requests;
            if drop_requests > 0.0 && state.rng.gen_bool(drop_requests) {
                state.counts.requests_dropped += 1;
                return Err(not_sent(url, "request dropped (injected fault)"));
            }
            let drop_answers = state.drop_answers;
            let drop_answer = drop_answers > 0.0 && state.rng.gen_bool(drop_answers);
            let delay = state.delay.map(|(min, max)| state.rng.gen_range(min..=max));
            if delay.is_some() {
                state.counts.delayed += 1;
            }
            (delay, drop_answer)
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        // A partition raised during the delay stops the request too.
        let mut state = self.faults.state();
        if state.cut(&self.from, to) {
            state.counts.partitioned += 1;
            return Err(not_sent(url, "partitioned (injected fault)"));
        }
        Ok(Exchange { drop_answer })
    }

    /// After the server answered: an error when the answer is lost.
    pub fn after_answer(&self, to: &str, url: &str, exchange: Exchange) -> Result<(), HttpError> {
        let mut state = self.faults.state();
        if state.cut(&self.from, to) {
            state.counts.partitioned += 1;
            return Err(lost(
                url,
                "partitioned while the request was handled (injected fault)",
            ));
        }
        if exchange.drop_answer {
            state.counts.answers_dropped += 1;
            return Err(lost(url, "answer dropped (injected fault)"));
        }
        Ok(())
    }
}

fn not_sent(url: &str, reason: &str) -> HttpError {
    HttpError::Unreachable {
        url: url.to_string(),
        reason: reason.to_string(),
    }
}

fn lost(url: &str, reason: &str) -> HttpError {
    HttpError::Lost {
        url: url.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://b/v1/raft/vote";

    #[tokio::test]
    async fn a_partitioned_address_neither_sends_nor_receives_until_healed() {
        let faults = Faults::new(1);
        let (a, b, c) = (faults.link("a"), faults.link("b"), faults.link("c"));
        faults.partition("a");
        assert!(matches!(
            a.before_sending("b", URL).await,
            Err(HttpError::Unreachable { .. })
        ));
        assert!(matches!(
            b.before_sending("a", URL).await,
            Err(HttpError::Unreachable { .. })
        ));
        let exchange = b.before_sending("c", URL).await.unwrap();
        assert!(c.after_answer("b", URL, exchange).is_ok());
        assert_eq!(faults.counts().partitioned, 2);
        faults.heal();
        let exchange = a.before_sending("b", URL).await.unwrap();
        assert!(a.after_answer("b", URL, exchange).is_ok());
    }

    #[tokio::test]
    async fn a_partition_raised_during_an_exchange_loses_its_answer() {
        let faults = Faults::new(2);
        let a = faults.link("a");
        let exchange = a.before_sending("b", URL).await.unwrap();
        faults.partition("b");
        assert!(matches!(
            a.after_answer("b", URL, exchange),
            Err(HttpError::Lost { .. })
        ));
    }

    #[tokio::test]
    async fn drops_hit_about_their_fraction_of_requests_and_answers() {
        let faults = Faults::new(3);
        faults.drop_requests(0.1);
        faults.drop_answers(0.1);
        let a = faults.link("a");
        let (mut unsent, mut lost_answers) = (0, 0);
        for _ in 0..2000 {
            match a.before_sending("b", URL).await {
                Err(HttpError::Unreachable { .. }) => unsent += 1,
                Err(e) => panic!("{e}"),
                Ok(exchange) => {
                    if let Err(HttpError::Lost { .. }) = a.after_answer("b", URL, exchange) {
                        lost_answers += 1;
                    }
                }
            }
        }
        assert!((120..280).contains(&unsent), "{unsent} requests dropped");
        assert!(
            (100..260).contains(&lost_answers),
            "{lost_answers} answers dropped"
        );
        let counts = faults.counts();
        assert_eq!(counts.requests_dropped, unsent);
        assert_eq!(counts.answers_dropped, lost_answers);
        faults.clear();
        for _ in 0..100 {
            let exchange = a.before_sending("b", URL).await.unwrap();
            a.after_answer("b", URL, exchange).unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_exchange_waits_a_delay_in_the_range() {
        let faults = Faults::new(4);
        faults.delay(Duration::from_millis(10), Duration::from_millis(30));
        let a = faults.link("a");
        for _ in 0..20 {
            let started = tokio::time::Instant::now();
            let _ = a.before_sending("b", URL).await.unwrap();
            let waited = started.elapsed();
            assert!(
                (Duration::from_millis(10)..=Duration::from_millis(31)).contains(&waited),
                "{waited:?}"
            );
        }
        assert_eq!(faults.counts().delayed, 20);
    }
}
