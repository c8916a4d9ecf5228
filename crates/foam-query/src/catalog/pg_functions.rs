//! `pg_get_function_result(oid)` and `pg_get_function_arguments(oid)`, as
//! psql's `\df` reads a function's types: from the function's `pg_proc`
//! row (datafusion-pg-catalog's holds PostgreSQL's built-in functions), its
//! types named as `format_type` names them without a modifier (`integer`,
//! `double precision`), `SETOF` before a set's. Argument modes and defaults
//! are not in that `pg_proc`: each argument is its name, if it has one, and
//! its type. NULL for an OID of no function.
//!
//! They read `pg_proc` and `pg_type` of the session's `pg_catalog`, so they
//! are asynchronous functions, as the size functions (`pg_sizes.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, StringArray};
use arrow::datatypes::{DataType, Int64Type};
use datafusion::catalog::SchemaProvider;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};

use crate::catalog::pg_columns::{oid_column, rows};
use super::Handle;

/// The two functions, for a session whose `pg_catalog` schema is `pg_catalog`.
pub fn function_udfs(pg_catalog: Arc<dyn SchemaProvider>) -> Vec<ScalarUDF> {
    [Part::Result, Part::Arguments]
        .into_iter()
        .map(|part| {
            let udf = FunctionPart { part, signature: Signature::any(1, Volatility::Stable), pg_catalog: Handle(pg_catalog.clone()) };
            AsyncScalarUDF::new(Arc::new(udf)).into_scalar_udf()
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Part {
    Result,
    Arguments,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct FunctionPart {
    part: Part,
    signature: Signature,
    pg_catalog: Handle<dyn SchemaProvider>,
}

impl ScalarUDFImpl for FunctionPart {
    fn name(&self) -> &str {
        match self.part {
            Part::Result => "pg_get_function_result",
            Part::Arguments => "pg_get_function_arguments",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Err(DataFusionError::Internal(format!("{} runs asynchronously", self.name())))
    }
}

#[async_trait::async_trait]
impl AsyncScalarUDFImpl for FunctionPart {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let oids = arrow::compute::cast(&args.args[0].to_array(args.number_rows)?, &DataType::Int64)?;
        let (functions, types) = (self.functions().await?, self.type_names().await?);
        let name_of = |oid: &str| oid.parse::<i64>().ok().and_then(|oid| types.get(&oid)).cloned().unwrap_or_else(|| "-".to_string());
        let answers: StringArray = oids
            .as_primitive::<Int64Type>()
            .iter()
            .map(|oid| {
                let function = functions.get(&oid?)?;
                Some(match self.part {
                    Part::Result if function.returns_set => format!("SETOF {}", name_of(&function.result)),
                    Part::Result => name_of(&function.result),
                    Part::Arguments => {
                        let names: Vec<&str> = function.argument_names.as_deref().map(|n| n.trim_matches(['{', '}']).split(',').collect()).unwrap_or_default();
                        let arguments = function.arguments.split_whitespace().enumerate().map(|(i, oid)| match names.get(i).filter(|n| !n.is_empty()) {
                            Some(name) => format!("{name} {}", name_of(oid)),
                            None => name_of(oid),
                        });
                        arguments.collect::<Vec<_>>().join(", ")
                    }
                })
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(answers)))
    }
}

/// What `pg_proc` says of a function.
struct Function {
    result: String,
    returns_set: bool,
    /// `proargtypes`: type OIDs separated by spaces.
    arguments: String,
    /// `proargnames`, `{a,b}`, if any.
    argument_names: Option<String>,
}

impl FunctionPart {
    async fn functions(&self) -> Result<HashMap<i64, Function>> {
        let mut functions = HashMap::new();
        let Some(table) = self.pg_catalog.table("pg_proc").await? else { return Ok(functions) };
        for batch in rows(&table).await? {
            let (oids, results) = (oid_column(&batch, "oid")?, oid_column(&batch, "prorettype")?);
            let text = |name: &str| batch.column_by_name(name).and_then(|c| arrow::compute::cast(c, &DataType::Utf8).ok());
            let (arguments, names) = (text("proargtypes"), text("proargnames"));
            let sets = batch.column_by_name("proretset").and_then(|c| c.as_boolean_opt().cloned());
            for i in 0..batch.num_rows() {
                let Some(oid) = oids[i] else { continue };
                let string = |column: &Option<arrow::array::ArrayRef>| {
                    column.as_ref().map(|c| c.as_string::<i32>()).filter(|c| c.is_valid(i)).map(|c| c.value(i).to_string())
                };
                functions.insert(oid, Function {
                    result: results[i].map(|r| r.to_string()).unwrap_or_default(),
                    returns_set: sets.as_ref().is_some_and(|s| s.is_valid(i) && s.value(i)),
                    arguments: string(&arguments).unwrap_or_default(),
                    argument_names: string(&names),
                });
            }
        }
        Ok(functions)
    }

    /// Each type's name as `format_type` gives it without a modifier.
    async fn type_names(&self) -> Result<HashMap<i64, String>> {
        let mut names = HashMap::new();
        let Some(table) = self.pg_catalog.table("pg_type").await? else { return Ok(names) };
        for batch in rows(&table).await? {
            let oids = oid_column(&batch, "oid")?;
            let Some(typnames) = batch.column_by_name("typname").map(|c| c.as_string::<i32>().clone()) else { continue };
            for i in 0..batch.num_rows() {
                if let Some(oid) = oids[i]
                    && typnames.is_valid(i)
                {
                    names.insert(oid, sql_type_name(typnames.value(i)));
                }
            }
        }
        Ok(names)
    }
}

/// The SQL name `format_type` gives a type without a modifier.
pub(crate) fn sql_type_name(typname: &str) -> String {
    let name = match typname {
        "int2" => "smallint",
        "int4" => "integer",
        "int8" => "bigint",
        "float4" => "real",
        "float8" => "double precision",
        "bool" => "boolean",
        "varchar" => "character varying",
        "bpchar" => "character",
        "timestamp" => "timestamp without time zone",
        "timestamptz" => "timestamp with time zone",
        "time" => "time without time zone",
        "timetz" => "time with time zone",
        "varbit" => "bit varying",
        array if array.starts_with('_') => return format!("{}[]", sql_type_name(&array[1..])),
        other => other,
    };
    name.to_string()
}
