//! Functions clients call to learn what they talk to: `version()` answers
//! as PostgreSQL-compatible databases do ("PostgreSQL x.y (FoamDB v)"), since
//! drivers and ORMs read the PostgreSQL version from it (SQLAlchemy refuses
//! to connect when it finds none there).

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};

/// The PostgreSQL version FoamDB speaks for, as `SHOW server_version` gives it.
pub const POSTGRES_VERSION: &str = "16.0";

/// What `version()` answers.
pub fn version_text() -> String {
    format!("PostgreSQL {POSTGRES_VERSION} (FoamDB {}) on {}-{}", env!("CARGO_PKG_VERSION"), std::env::consts::ARCH, std::env::consts::OS)
}

/// `version()`, replacing DataFusion's ("Apache DataFusion 55.2.0, ...").
pub fn version_udf() -> ScalarUDF {
    let text = version_text();
    create_udf("version", vec![], DataType::Utf8, Volatility::Immutable, Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(text.clone()))))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn version_names_postgresql_first_as_drivers_parse_it() {
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.register_udf(version_udf());
        let batches = ctx.sql("SELECT version()").await.unwrap().collect().await.unwrap();
        let shown = arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string();
        assert!(shown.contains(&format!("PostgreSQL {POSTGRES_VERSION} (FoamDB ")), "{shown}");
        // SQLAlchemy's psycopg dialect reads the version with this pattern.
        let pattern = regex::Regex::new(r"PostgreSQL (\d+)\.?(\d+)?").unwrap();
        assert!(pattern.is_match(&version_text()));
    }
}
