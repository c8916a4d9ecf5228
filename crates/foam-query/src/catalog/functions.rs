//! Functions clients call to learn what they talk to: `version()` answers
//! as PostgreSQL-compatible databases do ("PostgreSQL x.y (FoamDB v)"), since
//! drivers and ORMs read the PostgreSQL version from it (SQLAlchemy refuses
//! to connect when it finds none there); `pg_function_is_visible` and
//! `pg_type_is_visible`, which psql's `\df` and `\dT` filter by (FoamDB's
//! search path is `pg_catalog, public`, the only schemas that hold
//! functions and types, so every one that exists is visible; NULL for a
//! NULL OID, as in PostgreSQL; they do not look the OID up, so an OID of
//! no object reads as visible too, where PostgreSQL answers NULL); `obj_description` and `col_description`,
//! NULL for every object, as FoamDB refuses `COMMENT ON` (0A000).

use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility, create_udf};

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

/// `pg_function_is_visible(oid)`, `pg_type_is_visible(oid)`,
/// `obj_description(oid [, catalog])` and `col_description(oid, column)`
/// (see the module documentation).
pub fn catalog_inquiry_udfs() -> Vec<ScalarUDF> {
    let udf = |name, arguments, answer| ScalarUDF::new_from_impl(CatalogInquiry { name, signature: Signature::any(arguments, Volatility::Stable), answer });
    vec![
        udf("pg_function_is_visible", 1, Answer::Visible),
        udf("pg_type_is_visible", 1, Answer::Visible),
        ScalarUDF::new_from_impl(CatalogInquiry {
            name: "obj_description",
            signature: Signature::one_of(vec![TypeSignature::Any(1), TypeSignature::Any(2)], Volatility::Stable),
            answer: Answer::NoComment,
        }),
        udf("col_description", 2, Answer::NoComment),
    ]
}

#[derive(Debug, PartialEq, Eq, Hash)]
enum Answer {
    /// True for an object's OID (NULL for NULL).
    Visible,
    /// NULL: no object has a comment.
    NoComment,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CatalogInquiry {
    name: &'static str,
    signature: Signature,
    answer: Answer,
}

impl ScalarUDFImpl for CatalogInquiry {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(match self.answer {
            Answer::Visible => DataType::Boolean,
            Answer::NoComment => DataType::Utf8,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if self.answer == Answer::NoComment {
            return Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)));
        }
        Ok(match &args.args[0] {
            ColumnarValue::Scalar(oid) => ColumnarValue::Scalar(ScalarValue::Boolean((!oid.is_null()).then_some(true))),
            ColumnarValue::Array(oids) => ColumnarValue::Array(Arc::new((0..oids.len()).map(|i| oids.is_valid(i).then_some(true)).collect::<BooleanArray>())),
        })
    }
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
