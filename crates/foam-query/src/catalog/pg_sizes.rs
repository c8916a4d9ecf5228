//! Sizes, as psql's `\dt+` and administration tools read them:
//! `pg_table_size(oid)`, `pg_relation_size(oid)` and
//! `pg_total_relation_size(oid)` are the bytes a FoamDB table stores (each
//! partition's copy that queries read, asked of its node; one copy, not
//! every replica), NULL for an OID of no FoamDB table (catalog tables, which
//! are made when read, included); `pg_size_pretty(bigint)` prints a size in
//! PostgreSQL 15's units and rounding.
//!
//! The size functions ask other nodes, so they are asynchronous functions
//! (DataFusion's `AsyncFuncExec` runs them); an OID is looked up in
//! `pg_class` as the session's `pg_catalog` lists it.

use std::sync::Arc;

use arrow::array::{AsArray, Int64Array, StringArray};
use arrow::datatypes::{DataType, Int64Type};
use datafusion::catalog::SchemaProvider;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility, create_udf};

use crate::context::NodeContext;
use super::Handle;

/// The functions, for a session whose `pg_catalog` schema is `pg_catalog`.
pub fn size_udfs(node: Arc<NodeContext>, pg_catalog: Arc<dyn SchemaProvider>) -> Vec<ScalarUDF> {
    let size = |name: &'static str| {
        let table_size = TableSize { name, signature: Signature::any(1, Volatility::Volatile), node: Handle(node.clone()), pg_catalog: Handle(pg_catalog.clone()) };
        AsyncScalarUDF::new(Arc::new(table_size)).into_scalar_udf()
    };
    vec![
        size("pg_table_size"),
        size("pg_relation_size"),
        size("pg_total_relation_size"),
        create_udf("pg_size_pretty", vec![DataType::Int64], DataType::Utf8, Volatility::Immutable, Arc::new(size_pretty_values)),
    ]
}

/// `pg_table_size(oid)` and its kin (see the module documentation).
#[derive(Debug, PartialEq, Eq, Hash)]
struct TableSize {
    name: &'static str,
    signature: Signature,
    node: Handle<NodeContext>,
    pg_catalog: Handle<dyn SchemaProvider>,
}

impl ScalarUDFImpl for TableSize {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Err(DataFusionError::Internal(format!("{} runs asynchronously", self.name)))
    }
}

#[async_trait::async_trait]
impl AsyncScalarUDFImpl for TableSize {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let oids = args.args[0].to_array(args.number_rows)?;
        let oids = arrow::compute::cast(&oids, &DataType::Int64)?;
        let oids = oids.as_primitive::<Int64Type>();
        let relations = crate::catalog::pg_columns::relations(&self.pg_catalog.0).await?;
        let catalog = self.node.catalog.current();
        let mut sizes = Vec::with_capacity(oids.len());
        for oid in oids.iter() {
            let table = oid.and_then(|oid| relations.foam.get(&oid)).and_then(|name| catalog.tables.get(name));
            sizes.push(match table {
                Some(table) => Some(crate::catalog::system_tables::table_bytes(&self.node.0, table).await.map_err(DataFusionError::from)? as i64),
                None => None,
            });
        }
        Ok(ColumnarValue::Array(Arc::new(Int64Array::from(sizes))))
    }
}

fn size_pretty_values(args: &[ColumnarValue]) -> Result<ColumnarValue> {
    let sizes = ColumnarValue::values_to_arrays(args)?;
    let sizes = sizes[0].as_primitive::<Int64Type>();
    let pretty: StringArray = sizes.iter().map(|size| size.map(size_pretty)).collect();
    Ok(ColumnarValue::Array(Arc::new(pretty)))
}

/// A size as PostgreSQL 15's `pg_size_pretty` prints it: bytes below 10 kB,
/// then the largest unit (kB to PB) below 20 of the next, rounded half away
/// from zero.
fn size_pretty(size: i64) -> String {
    /// Name, limit, whether it rounds, and the bits of its divisor.
    const UNITS: [(&str, i64, bool, u32); 6] =
        [("bytes", 10 * 1024, false, 0), ("kB", 20 * 1024 - 1, true, 10), ("MB", 20 * 1024 - 1, true, 20), ("GB", 20 * 1024 - 1, true, 30), ("TB", 20 * 1024 - 1, true, 40), ("PB", 20 * 1024 - 1, true, 50)];
    let mut size = size;
    for (at, (name, limit, round, bits)) in UNITS.iter().enumerate() {
        let Some((_, _, next_round, next_bits)) = UNITS.get(at + 1) else {
            return format!("{} {name}", if *round { half_rounded(size) } else { size });
        };
        if size.unsigned_abs() < *limit as u64 {
            return format!("{} {name}", if *round { half_rounded(size) } else { size });
        }
        size /= 1 << (next_bits - bits - u32::from(*next_round) + u32::from(*round));
    }
    unreachable!("the last unit returns")
}

fn half_rounded(x: i64) -> i64 {
    (x + if x < 0 { -1 } else { 1 }) / 2
}

#[cfg(test)]
mod tests {
    use super::size_pretty;

    #[test]
    fn sizes_print_as_postgresql_15_prints_them() {
        for (size, pretty) in [
            (0, "0 bytes"),
            (10239, "10239 bytes"),
            (10240, "10 kB"),
            (1048575, "1024 kB"),
            (123456789, "118 MB"),
            (-5000000, "-4883 kB"),
            (99999999999999, "91 TB"),
            (206630, "202 kB"),
            (i64::MAX, "8192 PB"),
        ] {
            assert_eq!(size_pretty(size), pretty, "{size}");
        }
    }
}
