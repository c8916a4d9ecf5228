//! Stops a read that runs past the session's `statement_timeout`, or whose
//! client sent a PostgreSQL cancel request (on a second connection, with the
//! key the node gave at startup; see `foam-pgwire`).
//!
//! ```text
//!   SET statement_timeout = '5s' ── deadline ──┐
//!   CancelRequest (pgwire) ──── cancel signal ──┴─▶ Interrupt, one per query message
//!       until the first batch: select! { the query | the interrupt }  ─▶ 57014
//!       then every poll of the row stream checks the interrupt first  ─▶ 57014
//! ```
//! Stopping drops the query's stream, and with it datafusion-distributed's
//! streams from the workers, which then drop their tasks: the cluster stops
//! computing, not only the client waiting. (DataFusion stops a task when it
//! next yields; its scans and exchanges yield as rows arrive, and every join
//! yields after a number of output batches (`join_yield.rs`), but an operator
//! that loops over rows already in memory without emitting any, such as a
//! join whose filter drops every pair, runs on until it does.) Writes and DDL are not
//! interrupted: they end through their own commit protocol, so a timeout can
//! never leave one half-applied or report one failed that committed.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::error::Result;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream};
use foam_common::limits::STATEMENT_TIMEOUT_MS_MAX;
use foam_common::{FoamError, FoamResult};
use futures::channel::oneshot;
use futures::future::{BoxFuture, FutureExt, Shared};
use futures::{Future, Stream};

/// The session setting, as PostgreSQL names it.
pub const STATEMENT_TIMEOUT: &str = "statement_timeout";

/// Why a statement stops, in PostgreSQL's words ("canceling statement due to ...").
const BY_TIMEOUT: &str = "statement timeout";
const BY_CLIENT: &str = "user request";

/// Resolves, for every clone, once the statement must stop.
#[derive(Clone)]
pub struct Interrupt(Shared<BoxFuture<'static, &'static str>>);

impl Interrupt {
    /// Fires after `timeout`, or when `cancel` receives a signal. A cancel
    /// sender dropped without sending (the connection's next query replaced
    /// it) never fires.
    pub fn new(timeout: Option<Duration>, cancel: Option<oneshot::Receiver<()>>) -> Interrupt {
        let by_timeout = async move {
            match timeout {
                Some(timeout) => {
                    tokio::time::sleep(timeout).await;
                    BY_TIMEOUT
                }
                None => futures::future::pending().await,
            }
        };
        let by_client = async move {
            let signalled = match cancel {
                Some(cancel) => cancel.await.is_ok(),
                None => false,
            };
            if !signalled {
                futures::future::pending::<()>().await;
            }
            BY_CLIENT
        };
        let fired = async move {
            tokio::select! {
                reason = by_timeout => reason,
                reason = by_client => reason,
            }
        };
        Interrupt(fired.boxed().shared())
    }

    /// Runs `work` unless the interrupt fires first; then `work` is dropped.
    pub async fn guard<T>(&self, work: impl Future<Output = FoamResult<T>>) -> FoamResult<T> {
        tokio::select! {
            biased;
            reason = self.0.clone() => Err(FoamError::QueryCanceled { reason }),
            result = work => result,
        }
    }

    /// `stream`, ending with a 57014 error (and dropping `stream`) once the
    /// interrupt fires.
    pub fn guard_stream(&self, stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
        Box::pin(Guarded {
            schema: stream.schema(),
            inner: Some(stream),
            fired: self.0.clone(),
        })
    }
}

struct Guarded {
    schema: SchemaRef,
    /// `None` once the interrupt fired: the query's stream is dropped.
    inner: Option<SendableRecordBatchStream>,
    fired: Shared<BoxFuture<'static, &'static str>>,
}

impl Stream for Guarded {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.inner.is_none() {
            return Poll::Ready(None);
        }
        if let Poll::Ready(reason) = self.fired.poll_unpin(cx) {
            self.inner = None;
            return Poll::Ready(Some(Err(FoamError::QueryCanceled { reason }.into())));
        }
        self.inner.as_mut().map_or(Poll::Ready(None), |inner| inner.as_mut().poll_next(cx))
    }
}

impl RecordBatchStream for Guarded {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// Milliseconds of a `statement_timeout` value as PostgreSQL takes it: a
/// whole number, in milliseconds unless a unit follows (`us`, `ms`, `s`,
/// `min`, `h`, `d`); 0 turns the timeout off.
pub fn parse_statement_timeout(value: &str) -> FoamResult<u64> {
    let bad = |what: &str| FoamError::InvalidParameter {
        message: format!("{STATEMENT_TIMEOUT} must be {what}, not \"{value}\""),
    };
    let text = value.trim();
    if text.eq_ignore_ascii_case("default") {
        return Ok(0);
    }
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    const FORM: &str = "a whole number of milliseconds, or of us, ms, s, min, h or d (\"5s\")";
    let number: u64 = text[..digits].parse().map_err(|_| bad(FORM))?;
    let per_unit_us: u64 = match text[digits..].trim() {
        "" | "ms" => 1_000,
        "us" => 1,
        "s" => 1_000_000,
        "min" => 60_000_000,
        "h" => 3_600_000_000,
        "d" => 86_400_000_000,
        _ => return Err(bad(FORM)),
    };
    // Microseconds round up to a whole millisecond, so a nonzero value never turns the timeout off.
    let ms = number.checked_mul(per_unit_us).map(|us| us.div_ceil(1_000));
    match ms {
        Some(ms) if ms <= STATEMENT_TIMEOUT_MS_MAX => Ok(ms),
        _ => Err(bad(&format!("at most {STATEMENT_TIMEOUT_MS_MAX}ms"))),
    }
}

/// A timeout in milliseconds as `SHOW statement_timeout` gives it: `0`, or
/// the largest unit that divides it (`5s`, `2min`, `1500ms`).
pub fn show_statement_timeout(ms: u64) -> String {
    match ms {
        0 => "0".to_string(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}min", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        ms => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[test]
    fn timeouts_parse_as_postgresql_reads_them() {
        for (text, ms) in [
            ("0", 0),
            ("250", 250),
            ("250ms", 250),
            ("5s", 5_000),
            (" 5 s ", 5_000),
            ("2min", 120_000),
            ("1h", 3_600_000),
            ("1d", 86_400_000),
            ("1500us", 2),
            ("1us", 1),
            ("DEFAULT", 0),
        ] {
            assert_eq!(parse_statement_timeout(text).unwrap(), ms, "{text}");
        }
        for text in [
            "",
            "abc",
            "-1",
            "5 parsecs",
            "1.5s",
            "25d",
            "99999999999999999999",
        ] {
            let error = parse_statement_timeout(text).unwrap_err();
            assert_eq!(error.sqlstate(), "22023", "{text}: {error}");
            assert!(error.to_string().contains("statement_timeout"), "{error}");
        }
        for ms in [0, 250, 1_500, 5_000, 120_000, 3_600_000] {
            assert_eq!(
                parse_statement_timeout(&show_statement_timeout(ms)).unwrap(),
                ms
            );
        }
        assert_eq!(show_statement_timeout(5_000), "5s");
    }

    fn endless() -> SendableRecordBatchStream {
        let schema = Arc::new(arrow::datatypes::Schema::empty());
        let batches = futures::stream::repeat_with(|| {
            Ok(RecordBatch::new_empty(Arc::new(
                arrow::datatypes::Schema::empty(),
            )))
        });
        Box::pin(
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                schema,
                batches.then(|b| async {
                    tokio::task::yield_now().await;
                    b
                }),
            ),
        )
    }

    #[tokio::test]
    async fn a_timeout_ends_work_and_streams_with_57014() {
        let interrupt = Interrupt::new(Some(Duration::from_millis(20)), None);
        let error = interrupt
            .guard(futures::future::pending::<FoamResult<()>>())
            .await
            .unwrap_err();
        assert_eq!(
            (error.sqlstate().code(), error.to_string().as_str()),
            ("57014", "canceling statement due to statement timeout")
        );
        let items: Vec<_> = interrupt
            .guard_stream(endless())
            .take(1_000_000)
            .collect()
            .await;
        assert!(
            items.len() < 1_000_000,
            "the stream ended when the interrupt fired"
        );
        let error = FoamError::from(items.into_iter().last().unwrap().unwrap_err());
        assert_eq!(error.sqlstate(), "57014");
    }

    #[tokio::test]
    async fn a_cancel_signal_fires_and_a_dropped_sender_does_not() {
        let (cancel, receiver) = oneshot::channel();
        let interrupt = Interrupt::new(None, Some(receiver));
        cancel.send(()).unwrap();
        let error = interrupt
            .guard(futures::future::pending::<FoamResult<()>>())
            .await
            .unwrap_err();
        assert_eq!(error.to_string(), "canceling statement due to user request");

        let (cancel, receiver) = oneshot::channel::<()>();
        let interrupt = Interrupt::new(None, Some(receiver));
        drop(cancel);
        assert_eq!(interrupt.guard(async { Ok(7) }).await.unwrap(), 7);
        let waited = tokio::time::timeout(
            Duration::from_millis(50),
            interrupt.guard(futures::future::pending::<FoamResult<()>>()),
        )
        .await;
        assert!(
            waited.is_err(),
            "a replaced cancel sender must not stop the statement"
        );
    }
}
