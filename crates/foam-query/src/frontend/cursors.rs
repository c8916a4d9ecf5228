//! SQL cursors: `DECLARE name CURSOR [WITH HOLD] FOR query`, `FETCH`,
//! `CLOSE`, which psycopg2's named cursors and psycopg 3's server-side
//! cursors stream large results with.
//!
//! ```text
//!   DECLARE ─▶ the query starts, its stream kept by name (nothing is read yet)
//!   FETCH [FORWARD] n | NEXT | ALL ─▶ the next rows pulled from the stream
//!   CLOSE name | ALL, the block's end (unless WITH HOLD) ─▶ the stream dropped
//! ```
//!
//! The query reads the snapshot it started with, so later FETCHes see what
//! DECLARE would have; its operators pull rows only as FETCH asks, so a
//! cursor over a large table holds a batch, not the result. Cursors move
//! forward only (`NO SCROLL`): a backward or absolute FETCH and `MOVE` are
//! refused with 0A000. As in PostgreSQL, a cursor without HOLD is declared
//! in a transaction block (25P01 outside one) and closes when it ends.

use std::collections::BTreeMap;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::sql::sqlparser::ast::{FetchDirection, Value};
use foam_common::{FoamError, FoamResult, SqlState};
use futures::StreamExt;

/// An open cursor: its query's rows, the unread part of the batch read last.
pub struct Cursor {
    pub schema: SchemaRef,
    stream: SendableRecordBatchStream,
    pending: Option<RecordBatch>,
    /// WITH HOLD: it outlives its transaction block.
    pub hold: bool,
}

/// A session's open cursors, by name.
#[derive(Default)]
pub struct Cursors {
    open: tokio::sync::Mutex<BTreeMap<String, Cursor>>,
}

/// How many rows a FETCH asks for; `None` for all the rest.
pub fn fetch_count(direction: &FetchDirection) -> FoamResult<Option<usize>> {
    let count = |value: &Value| -> FoamResult<i64> {
        match value {
            Value::Number(n, _) => n.parse::<i64>().map_err(|_| FoamError::Query { message: format!("invalid FETCH count {n}"), sqlstate: SqlState::SyntaxError }),
            other => Err(FoamError::Query { message: format!("invalid FETCH count {other}"), sqlstate: SqlState::SyntaxError }),
        }
    };
    let forward = |n: i64| -> FoamResult<Option<usize>> {
        if n < 0 {
            return Err(backward());
        }
        Ok(Some(n as usize))
    };
    match direction {
        FetchDirection::Next => Ok(Some(1)),
        FetchDirection::All | FetchDirection::ForwardAll => Ok(None),
        FetchDirection::Count { limit } => forward(count(limit)?),
        FetchDirection::Forward { limit: None } => Ok(Some(1)),
        FetchDirection::Forward { limit: Some(limit) } => forward(count(limit)?),
        _ => Err(backward()),
    }
}

fn backward() -> FoamError {
    FoamError::Query { message: "cursor can only scan forward (FoamDB cursors are NO SCROLL)".into(), sqlstate: SqlState::FeatureNotSupported }
}

fn missing(name: &str) -> FoamError {
    FoamError::Query { message: format!("cursor \"{name}\" does not exist"), sqlstate: SqlState::InvalidCursorName }
}

impl Cursors {
    /// Opens cursor `name` over `stream`.
    pub async fn declare(&self, name: String, schema: SchemaRef, stream: SendableRecordBatchStream, hold: bool) -> FoamResult<()> {
        let mut open = self.open.lock().await;
        if open.contains_key(&name) {
            return Err(FoamError::Query { message: format!("cursor \"{name}\" already exists"), sqlstate: SqlState::DuplicateCursor });
        }
        open.insert(name, Cursor { schema, stream, pending: None, hold });
        Ok(())
    }

    /// The next `count` rows of cursor `name` (all the rest for `None`), as
    /// one stream of the cursor's schema.
    pub async fn fetch(&self, name: &str, count: Option<usize>) -> FoamResult<(SchemaRef, SendableRecordBatchStream)> {
        let mut open = self.open.lock().await;
        let cursor = open.get_mut(name).ok_or_else(|| missing(name))?;
        let mut batches = Vec::new();
        let mut wanted = count.unwrap_or(usize::MAX);
        while wanted > 0 {
            let batch = match cursor.pending.take() {
                Some(batch) => batch,
                None => match cursor.stream.next().await {
                    Some(batch) => batch.map_err(FoamError::from)?,
                    None => break,
                },
            };
            if batch.num_rows() > wanted {
                cursor.pending = Some(batch.slice(wanted, batch.num_rows() - wanted));
                batches.push(batch.slice(0, wanted));
                wanted = 0;
            } else {
                wanted -= batch.num_rows();
                batches.push(batch);
            }
        }
        let schema = cursor.schema.clone();
        let stream = futures::stream::iter(batches.into_iter().map(Ok));
        Ok((schema.clone(), Box::pin(RecordBatchStreamAdapter::new(schema, stream))))
    }

    /// The schema of cursor `name`'s rows, if it is open.
    pub async fn schema(&self, name: &str) -> Option<SchemaRef> {
        self.open.lock().await.get(name).map(|c| c.schema.clone())
    }

    /// Closes cursor `name`, or every cursor for `None`.
    pub async fn close(&self, name: Option<&str>) -> FoamResult<()> {
        let mut open = self.open.lock().await;
        match name {
            None => open.clear(),
            Some(name) => {
                open.remove(name).ok_or_else(|| missing(name))?;
            }
        }
        Ok(())
    }

    /// A transaction block ended: its cursors without HOLD close.
    pub async fn end_block(&self) {
        self.open.lock().await.retain(|_, cursor| cursor.hold);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use datafusion::arrow::array::Int32Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn numbers(schema: &SchemaRef, from: i32, to: i32) -> RecordBatch {
        RecordBatch::try_new(schema.clone(), vec![Arc::new(Int32Array::from_iter_values(from..to))]).unwrap()
    }

    async fn fetched(cursors: &Cursors, count: Option<usize>) -> Vec<i32> {
        let (_, mut stream) = cursors.fetch("c", count).await.unwrap();
        let mut out = Vec::new();
        while let Some(batch) = stream.next().await {
            let batch = batch.unwrap();
            out.extend(batch.column(0).as_any().downcast_ref::<Int32Array>().unwrap().values().iter().copied());
        }
        out
    }

    #[tokio::test]
    async fn fetches_split_and_join_batches() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("n", DataType::Int32, false)]));
        let batches = vec![Ok(numbers(&schema, 0, 3)), Ok(numbers(&schema, 3, 5))];
        let stream = Box::pin(RecordBatchStreamAdapter::new(schema.clone(), futures::stream::iter(batches)));
        let cursors = Cursors::default();
        cursors.declare("c".into(), schema.clone(), stream, false).await.unwrap();
        assert_eq!(fetched(&cursors, Some(2)).await, vec![0, 1]);
        assert_eq!(fetched(&cursors, Some(2)).await, vec![2, 3]);
        assert_eq!(fetched(&cursors, None).await, vec![4]);
        assert_eq!(fetched(&cursors, Some(5)).await, Vec::<i32>::new());
        cursors.end_block().await;
        assert_eq!(cursors.fetch("c", Some(1)).await.err().unwrap().sqlstate().code(), "34000");
        assert!(matches!(fetch_count(&FetchDirection::Prior), Err(FoamError::Query { sqlstate: SqlState::FeatureNotSupported, .. })));
    }
}
