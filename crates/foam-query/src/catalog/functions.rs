//! Functions clients call to learn what they talk to: `version()` answers
//! as PostgreSQL-compatible databases do ("PostgreSQL x.y (FoamDB v)"), since
//! drivers and ORMs read the PostgreSQL version from it (SQLAlchemy refuses
//! to connect when it finds none there); `pg_function_is_visible` and
//! `pg_type_is_visible` and `pg_collation_is_visible`, which psql's `\df`
//! and `\dT` and SQLAlchemy's reflection filter by (FoamDB's
//! search path is `pg_catalog, public`, the only schemas that hold
//! functions, types and collations, so every one that exists is visible; NULL for a
//! NULL OID, as in PostgreSQL; they do not look the OID up, so an OID of
//! no object reads as visible too, where PostgreSQL answers NULL); `obj_description` and `col_description`,
//! NULL for every object, as FoamDB refuses `COMMENT ON` (0A000);
//! `to_regtype`, the OID of a built-in type by any of its names;
//! `pg_get_triggerdef`, NULL for every OID, as FoamDB has no triggers
//! (CREATE TRIGGER is refused); `pg_is_in_recovery()`, false: every node
//! takes writes, none is a standby replaying another's log (pg_dump asks);
//! `acldefault`, NULL: FoamDB's privileges are not `aclitem`s, and no
//! catalog row holds one (pg_dump compares the two); `quote_literal`, as
//! PostgreSQL quotes a string literal; `pg_typeof`, the SQL name of its
//! argument's type (`integer`, `double precision`), as text where
//! PostgreSQL's is a `regtype` that prints so.

use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility, create_udf};

/// The PostgreSQL version FoamDB speaks for, as `SHOW server_version` gives it.
pub const POSTGRES_VERSION: &str = "15.0";
/// The same as `server_version_num` gives it (major * 10000 + minor).
pub const POSTGRES_VERSION_NUM: &str = "150000";

/// What `version()` answers.
pub fn version_text() -> String {
    format!("PostgreSQL {POSTGRES_VERSION} (FoamDB {}) on {}-{}", env!("CARGO_PKG_VERSION"), std::env::consts::ARCH, std::env::consts::OS)
}

/// `version()`, replacing DataFusion's ("Apache DataFusion 55.2.0, ...").
pub fn version_udf() -> ScalarUDF {
    let text = version_text();
    create_udf("version", vec![], DataType::Utf8, Volatility::Immutable, Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(text.clone()))))))
}

/// `pg_typeof(x)` (see the module documentation); workers run it too.
pub fn pg_typeof_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(PgTypeof { signature: Signature::any(1, Volatility::Immutable) })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTypeof {
    signature: Signature,
}

impl ScalarUDFImpl for PgTypeof {
    fn name(&self) -> &str {
        "pg_typeof"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = match args.arg_fields.first().map(|field| field.data_type()) {
            Some(DataType::Null) | None => "unknown".to_string(),
            Some(data_type) => match arrow_pg::datatypes::into_pg_type(data_type) {
                Ok(pg_type) => crate::catalog::pg_functions::sql_type_name(pg_type.name()),
                Err(_) => data_type.to_string(),
            },
        };
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

/// `pg_function_is_visible(oid)`, `pg_type_is_visible(oid)`,
/// `obj_description(oid [, catalog])` and `col_description(oid, column)`
/// (see the module documentation).
pub fn catalog_inquiry_udfs() -> Vec<ScalarUDF> {
    let udf = |name, arguments, answer| ScalarUDF::new_from_impl(CatalogInquiry { name, signature: Signature::any(arguments, Volatility::Stable), answer });
    vec![
        udf("pg_function_is_visible", 1, Answer::Visible),
        udf("pg_type_is_visible", 1, Answer::Visible),
        udf("pg_collation_is_visible", 1, Answer::Visible),
        ScalarUDF::new_from_impl(CatalogInquiry {
            name: "obj_description",
            signature: Signature::one_of(vec![TypeSignature::Any(1), TypeSignature::Any(2)], Volatility::Stable),
            answer: Answer::Null,
        }),
        udf("col_description", 2, Answer::Null),
        ScalarUDF::new_from_impl(CatalogInquiry {
            name: "pg_get_triggerdef",
            signature: Signature::one_of(vec![TypeSignature::Any(1), TypeSignature::Any(2)], Volatility::Stable),
            answer: Answer::Null,
        }),
        udf("acldefault", 2, Answer::Null),
        create_udf("quote_literal", vec![DataType::Utf8], DataType::Utf8, Volatility::Immutable, Arc::new(quote_literal_values)),
        create_udf("pg_is_in_recovery", vec![], DataType::Boolean, Volatility::Stable, Arc::new(|_| Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(false)))))),
        ScalarUDF::new_from_impl(ToRegtype { signature: Signature::exact(vec![DataType::Utf8], Volatility::Stable) }),
        pg_typeof_udf(),
    ]
}

/// `quote_literal(text)` of each value: quotes doubled, and with a
/// backslash, backslashes doubled and an `E` before the literal.
fn quote_literal_values(args: &[ColumnarValue]) -> Result<ColumnarValue> {
    let arrays = ColumnarValue::values_to_arrays(args)?;
    let texts = datafusion::common::cast::as_string_array(&arrays[0])?;
    let quoted: datafusion::arrow::array::StringArray = texts.iter().map(|text| text.map(quote_literal)).collect();
    Ok(ColumnarValue::Array(Arc::new(quoted)))
}

pub fn quote_literal(text: &str) -> String {
    let body = text.replace('\'', "''");
    if text.contains('\\') { format!("E'{}'", body.replace('\\', "\\\\")) } else { format!("'{body}'") }
}

/// PostgreSQL's OIDs of the built-in types `to_regtype` resolves, by
/// `pg_type.typname` (an array type is `_` and its element's name).
const TYPE_OIDS: [(&str, i32); 34] = [
    ("bool", 16), ("bytea", 17), ("char", 18), ("name", 19), ("int8", 20), ("int2", 21), ("int4", 23), ("regproc", 24),
    ("text", 25), ("oid", 26), ("json", 114), ("xml", 142), ("float4", 700), ("float8", 701), ("unknown", 705),
    ("bpchar", 1042), ("varchar", 1043), ("date", 1082), ("time", 1083), ("timestamp", 1114), ("timestamptz", 1184),
    ("interval", 1186), ("numeric", 1700), ("uuid", 2950), ("jsonb", 3802), ("regclass", 2205), ("regtype", 2206),
    ("_bool", 1000), ("_int2", 1005), ("_int4", 1007), ("_text", 1009), ("_varchar", 1015), ("_int8", 1016), ("_float8", 1022),
];

/// SQL's names for types whose `typname` differs.
const TYPE_ALIASES: [(&str, &str); 14] = [
    ("boolean", "bool"), ("smallint", "int2"), ("integer", "int4"), ("int", "int4"), ("bigint", "int8"), ("real", "float4"),
    ("double precision", "float8"), ("character varying", "varchar"), ("character", "bpchar"), ("decimal", "numeric"),
    ("timestamp without time zone", "timestamp"), ("timestamp with time zone", "timestamptz"), ("time without time zone", "time"),
    ("\"char\"", "char"),
];

/// The OID of the type `name` names (`integer`, `pg_catalog.int4`,
/// `character varying(20)`, `text[]`), or `None` for no such type.
pub fn type_oid(name: &str) -> Option<i32> {
    let name = name.trim().to_lowercase();
    let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
    let (name, array) = match name.strip_suffix("[]") {
        Some(element) => (element.trim(), true),
        None => (name, false),
    };
    // A type modifier names the same type: numeric(12,2), varchar(20).
    let name = name.split('(').next().unwrap_or(name).trim();
    let name = TYPE_ALIASES.iter().find(|(alias, _)| *alias == name).map_or(name, |(_, typname)| typname);
    let name = if array { format!("_{name}") } else { name.to_string() };
    TYPE_OIDS.iter().find(|(typname, _)| *typname == name).map(|(_, oid)| *oid)
}

/// `to_regtype(name)`: the type's OID, NULL when there is none (psycopg 3
/// looks types up with it as it connects).
#[derive(Debug, PartialEq, Eq, Hash)]
struct ToRegtype {
    signature: Signature,
}

impl ScalarUDFImpl for ToRegtype {
    fn name(&self) -> &str {
        "to_regtype"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let names = datafusion::common::cast::as_string_array(&arrays[0])?;
        let oids: datafusion::arrow::array::Int32Array = names.iter().map(|name| name.and_then(type_oid)).collect();
        Ok(ColumnarValue::Array(Arc::new(oids)))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
enum Answer {
    /// True for an object's OID (NULL for NULL).
    Visible,
    /// NULL: no object has a comment, no column owns a sequence, there
    /// is no trigger.
    Null,
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
            Answer::Null => DataType::Utf8,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if self.answer == Answer::Null {
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

    #[test]
    fn literals_quote_as_in_postgresql() {
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal("a\\b"), "E'a\\\\b'");
        assert_eq!(quote_literal(""), "''");
    }

    #[test]
    fn type_names_resolve_to_postgres_oids() {
        assert_eq!(type_oid("integer"), Some(23));
        assert_eq!(type_oid("pg_catalog.INT4"), Some(23));
        assert_eq!(type_oid("character varying(20)"), Some(1043));
        assert_eq!(type_oid("text[]"), Some(1009));
        assert_eq!(type_oid("hstore"), None);
    }

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
