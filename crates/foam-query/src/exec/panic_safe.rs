//! A result stream that turns a panic inside an operator into the
//! statement's error. Some of DataFusion 55's operators panic on plans they
//! do not expect (a repartition's "partition not used yet"); DataFusion
//! re-raises a task's panic in whoever polls its output, which on the
//! coordinating node is the client's connection. Caught here, the client
//! gets XX000 naming the panic and keeps its connection and session, as
//! PostgreSQL answers an internal error.

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream};
use futures::{Stream, StreamExt};

/// `stream` with a panic while it is polled ending it with an error.
pub fn panic_safe(stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
    Box::pin(PanicSafe { inner: stream, ended: false })
}

/// The words of a caught panic, as the statement's error.
pub fn panic_error(payload: &(dyn std::any::Any + Send)) -> DataFusionError {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    DataFusionError::Internal(format!("an operator panicked: {message}"))
}

struct PanicSafe {
    inner: SendableRecordBatchStream,
    /// After a panic the inner stream is not polled again.
    ended: bool,
}

impl Stream for PanicSafe {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let this = &mut *self;
        match std::panic::catch_unwind(AssertUnwindSafe(|| this.inner.poll_next_unpin(cx))) {
            Ok(poll) => poll,
            Err(payload) => {
                this.ended = true;
                Poll::Ready(Some(Err(panic_error(payload.as_ref()))))
            }
        }
    }
}

impl RecordBatchStream for PanicSafe {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

    #[tokio::test]
    async fn a_panic_ends_the_stream_with_an_error_naming_it() {
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::empty());
        let batch = RecordBatch::new_empty(schema.clone());
        let mut polls = 0;
        let panicking = futures::stream::poll_fn(move |_| {
            polls += 1;
            if polls == 1 { Poll::Ready(Some(Ok(batch.clone()))) } else { panic!("partition not used yet") }
        });
        let mut stream = panic_safe(Box::pin(RecordBatchStreamAdapter::new(schema, panicking)));
        assert!(matches!(stream.next().await, Some(Ok(_))));
        let error = stream.next().await.expect("an item").expect_err("the panic as an error");
        assert!(error.to_string().contains("an operator panicked: partition not used yet"), "{error}");
        assert!(stream.next().await.is_none(), "nothing after the panic");
    }
}
