//! Requests in flight, counted from their arrival until the last byte of
//! their answer is handed to the connection: what a graceful stop waits
//! for.
//!
//! actix-server's own graceful stop waits for every open *connection*
//! (an idle keep-alive one included) and looks only once a second, so an
//! agent with any client connected took at least a second to stop. The
//! agent instead stops accepting, waits for the requests counted here,
//! then closes the idle connections at once.

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::web::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The count of requests in flight; cheap to clone.
#[derive(Clone, Debug)]
pub struct InFlight {
    count: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight {
            count: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }
}

/// One request in flight; dropped with its answer's body.
struct Entered {
    count: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        self.count.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl InFlight {
    fn enter(&self) -> Entered {
        self.count.send_modify(|n| *n += 1);
        Entered {
            count: self.count.clone(),
        }
    }

    /// Resolves when no request is in flight.
    pub async fn idle(&self) {
        let mut watch = self.count.subscribe();
        let _ = watch.wait_for(|n| *n == 0).await;
    }

    /// The middleware (`App::wrap_fn`): counts the request until its
    /// answer's body has been sent or dropped.
    pub fn track<S, B>(
        &self,
        req: ServiceRequest,
        service: &S,
    ) -> impl Future<Output = Result<ServiceResponse<Tracked>, actix_web::Error>>
    where
        S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
        B: MessageBody + 'static,
    {
        let entered = self.enter();
        let answer = service.call(req);
        async move {
            let response = answer.await?;
            Ok(response.map_body(move |_, body| Tracked {
                body: body.boxed(),
                _entered: entered,
            }))
        }
    }
}

/// An answer's body that keeps its request counted until it is done.
pub struct Tracked {
    body: BoxBody,
    _entered: Entered,
}

impl MessageBody for Tracked {
    type Error = Box<dyn std::error::Error>;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_next(cx)
    }
}
