//! A FoamDB connection as a sqllogictest database, shared by the runners of
//! the project's own `.slt` files and of SQLite's corpus: statements go over
//! the simple query protocol, errors keep their SQLSTATE, and each runner
//! says how a value prints and which engine name `skipif`/`onlyif` see.

use std::time::Duration;

use async_trait::async_trait;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};

/// NULL as "NULL", the empty string as "(empty)", anything else as sent.
pub fn plain_value(value: Option<&str>) -> String {
    match value {
        None => "NULL".into(),
        Some("") => "(empty)".into(),
        Some(text) => text.to_string(),
    }
}

pub struct SltDb {
    pub client: tokio_postgres::Client,
    /// How a value prints in the files (`None` is NULL).
    pub format_value: fn(Option<&str>) -> String,
    /// The engine name conditions in the files test.
    pub engine: &'static str,
}

#[derive(Debug)]
pub struct DbError {
    pub sqlstate: Option<String>,
    pub message: String,
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for DbError {}

#[async_trait]
impl AsyncDB for SltDb {
    type Error = DbError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DbError> {
        let messages = self.client.simple_query(sql).await.map_err(|e| DbError {
            sqlstate: e.as_db_error().map(|d| d.code().code().to_string()),
            message: e.as_db_error().map(|d| d.message().to_string()).unwrap_or_else(|| e.to_string()),
        })?;
        let mut rows = Vec::new();
        let mut columns = None;
        let mut affected = 0;
        for message in messages {
            match message {
                tokio_postgres::SimpleQueryMessage::RowDescription(description) => columns = Some(description.len()),
                tokio_postgres::SimpleQueryMessage::Row(row) => {
                    columns = Some(row.len());
                    rows.push((0..row.len()).map(|i| (self.format_value)(row.get(i))).collect());
                }
                tokio_postgres::SimpleQueryMessage::CommandComplete(count) => affected = count,
                _ => {}
            }
        }
        match columns {
            Some(count) => Ok(DBOutput::Rows { types: vec![DefaultColumnType::Any; count], rows }),
            None => Ok(DBOutput::StatementComplete(affected)),
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        self.engine
    }

    async fn sleep(duration: Duration) {
        tokio::time::sleep(duration).await;
    }

    fn error_sql_state(error: &DbError) -> Option<String> {
        error.sqlstate.clone()
    }
}
