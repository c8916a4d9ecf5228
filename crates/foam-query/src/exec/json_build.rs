//! `json_build_object(key, value, ...)`, as PostgreSQL writes it
//! (`{"a" : 1, "b" : "x"}`): keys are text, values keep their JSON kind
//! (numbers, booleans, `null`; anything else a string of its text).
//! FoamDB has no `json` type of its own: the value is text, described to
//! the client as `json` (OID 114, through the [`PG_TYPE_METADATA`] mark on
//! its field) where a result column is the call itself, so drivers parse it
//! (SQLAlchemy's reflection reads identity options and collations so).
//!
//! `to_json(x)` is one value as JSON, `json_build_array(a, b)` an array
//! of them, `json_object_agg(k, v)` (written as
//! `foam_json_object(array_agg(struct(k, v)))`) a group's pairs as an
//! object, and `json_agg(x)` (written by
//! `frontend/spellings.rs` as `foam_json_array(array_agg(x))`, its
//! ORDER BY, DISTINCT and FILTER kept) the values of a group as a JSON
//! array, `[1, 2]`, NULL for no rows, as PostgreSQL's.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringBuilder};
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility};

use crate::exec::function_values::{answered, per_value};

/// The field metadata key that names a result column's PostgreSQL type
/// where its Arrow type would name another (`json`, `int2vector`,
/// `oidvector`); read by the protocol layer.
pub const PG_TYPE_METADATA: &str = "foam.pg_type";

/// `json_build_object` (see the module documentation); workers run it too.
pub fn json_build_object_udf() -> ScalarUDF {
    let signature = Signature::one_of(vec![TypeSignature::VariadicAny, TypeSignature::Nullary], Volatility::Immutable);
    ScalarUDF::new_from_impl(JsonBuildObject { signature })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: Signature,
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        if args.arg_fields.len() % 2 != 0 {
            return Err(DataFusionError::Execution("argument list must have even number of elements".into()));
        }
        let metadata = HashMap::from([(PG_TYPE_METADATA.to_string(), "json".to_string())]);
        Ok(Arc::new(Field::new(self.name(), DataType::Utf8, false).with_metadata(metadata)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args.args.iter().all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let arrays: Vec<ArrayRef> = args.args.iter().map(|arg| arg.to_array(rows)).collect::<Result<_>>()?;
        let mut built = StringBuilder::new();
        for row in 0..rows {
            let mut members = Vec::with_capacity(arrays.len() / 2);
            for pair in arrays.chunks(2) {
                let [key, value] = pair else { return Err(DataFusionError::Execution("argument list must have even number of elements".into())) };
                if key.is_null(row) {
                    return Err(DataFusionError::Execution("null value not allowed for object key".into()));
                }
                let key = text_of(&ScalarValue::try_from_array(key, row)?);
                members.push(format!("{} : {}", json_string(&key), json_value(&ScalarValue::try_from_array(value, row)?)));
            }
            built.append_value(format!("{{{}}}", members.join(", ")));
        }
        answered(Arc::new(built.finish()), scalar)
    }
}

/// The JSON functions (`json_build_object`, `to_json`, `foam_json_array`);
/// workers run them too.
pub fn json_udfs() -> Vec<ScalarUDF> {
    vec![
        json_build_object_udf(),
        ScalarUDF::new_from_impl(JsonBuildArray { signature: Signature::one_of(vec![TypeSignature::VariadicAny, TypeSignature::Nullary], Volatility::Immutable) }),
        ScalarUDF::new_from_impl(JsonObject { signature: Signature::any(1, Volatility::Immutable) }),
        ScalarUDF::new_from_impl(ToJson { signature: Signature::any(1, Volatility::Immutable) }),
        ScalarUDF::new_from_impl(JsonArray { signature: Signature::any(1, Volatility::Immutable) }),
    ]
}

/// The name `json_agg` is written with (see the module documentation).
pub const JSON_ARRAY: &str = "foam_json_array";

/// A result field described as `json`.
fn json_field(name: &str, nullable: bool) -> FieldRef {
    let metadata = HashMap::from([(PG_TYPE_METADATA.to_string(), "json".to_string())]);
    Arc::new(Field::new(name, DataType::Utf8, nullable).with_metadata(metadata))
}

/// `to_json(x)`: `x` as a JSON value; NULL for NULL.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ToJson {
    signature: Signature,
}

impl ScalarUDFImpl for ToJson {
    fn name(&self) -> &str {
        "to_json"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(json_field(self.name(), true))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = args.args.as_slice() else { return Err(DataFusionError::Internal("to_json takes one argument".into())) };
        per_value(value, args.number_rows, |values| {
            let mut built = StringBuilder::new();
            for row in 0..values.len() {
                let value = ScalarValue::try_from_array(values, row)?;
                built.append_option((!value.is_null()).then(|| json_value(&value)));
            }
            Ok(Arc::new(built.finish()) as ArrayRef)
        })
    }
}

/// `json_build_array(a, b, ...)`: `[a, b]`, each a JSON value.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildArray {
    signature: Signature,
}

impl ScalarUDFImpl for JsonBuildArray {
    fn name(&self) -> &str {
        "json_build_array"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(json_field(self.name(), false))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args.args.iter().all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let arrays: Vec<ArrayRef> = args.args.iter().map(|arg| arg.to_array(rows)).collect::<Result<_>>()?;
        let mut built = StringBuilder::new();
        for row in 0..rows {
            let values = arrays.iter().map(|array| ScalarValue::try_from_array(array, row).map(|value| json_value(&value))).collect::<Result<Vec<_>>>()?;
            built.append_value(format!("[{}]", values.join(", ")));
        }
        answered(Arc::new(built.finish()), scalar)
    }
}

/// The name `json_object_agg` is written with (`frontend/spellings.rs`).
pub const JSON_OBJECT: &str = "foam_json_object";

/// `foam_json_object(list)`: a list of (key, value) structs as a JSON
/// object `{ "k" : v, ... }` (json_object_agg's text); NULL for a NULL
/// list, 22023 for a NULL key.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonObject {
    signature: Signature,
}

impl ScalarUDFImpl for JsonObject {
    fn name(&self) -> &str {
        JSON_OBJECT
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(json_field("json_object_agg", true))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = args.args.as_slice() else { return Err(DataFusionError::Internal(format!("{JSON_OBJECT} takes one argument"))) };
        per_value(value, args.number_rows, |lists| {
            let mut built = StringBuilder::new();
            for row in 0..lists.len() {
                let list = ScalarValue::try_from_array(lists, row)?;
                if list.is_null() {
                    built.append_null();
                    continue;
                }
                let pairs = match &list {
                    ScalarValue::List(list) => list.value(0),
                    other => return Err(DataFusionError::Internal(format!("{JSON_OBJECT} of {}", other.data_type()))),
                };
                let mut members = Vec::with_capacity(pairs.len());
                for i in 0..pairs.len() {
                    let ScalarValue::Struct(pair) = ScalarValue::try_from_array(&pairs, i)? else { return Err(DataFusionError::Internal(format!("{JSON_OBJECT} of non-pairs"))) };
                    let key = ScalarValue::try_from_array(pair.column(0), 0)?;
                    if key.is_null() {
                        return Err(DataFusionError::from(foam_common::FoamError::Query {
                            message: "field name must not be null".into(),
                            sqlstate: foam_common::SqlState::InvalidParameterValue,
                        }));
                    }
                    let value = ScalarValue::try_from_array(pair.column(1), 0)?;
                    members.push(format!("{} : {}", json_string(&text_of(&key)), json_value(&value)));
                }
                built.append_value(format!("{{ {} }}", members.join(", ")));
            }
            Ok(Arc::new(built.finish()) as ArrayRef)
        })
    }
}

/// `foam_json_array(list)`: a list of values as a JSON array, a NULL
/// element `null`; NULL for a NULL list.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonArray {
    signature: Signature,
}

impl ScalarUDFImpl for JsonArray {
    fn name(&self) -> &str {
        JSON_ARRAY
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(json_field("json_agg", true))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = args.args.as_slice() else { return Err(DataFusionError::Internal(format!("{JSON_ARRAY} takes one argument"))) };
        per_value(value, args.number_rows, |lists| {
            let mut built = StringBuilder::new();
            for row in 0..lists.len() {
                match ScalarValue::try_from_array(lists, row)? {
                    value if value.is_null() => built.append_null(),
                    value => built.append_value(json_elements(&value, ", ", json_value)?),
                }
            }
            Ok(Arc::new(built.finish()) as ArrayRef)
        })
    }
}

/// The elements of the list `value` as a JSON array, each written by
/// `write` (a NULL one `null`), `separator` between.
fn json_elements(value: &ScalarValue, separator: &str, write: impl Fn(&ScalarValue) -> String) -> Result<String> {
    let values = match value {
        ScalarValue::List(list) => list.value(0),
        ScalarValue::LargeList(list) => list.value(0),
        ScalarValue::FixedSizeList(list) => list.value(0),
        other => return Err(DataFusionError::Internal(format!("a JSON array of {}", other.data_type()))),
    };
    let mut elements = Vec::with_capacity(values.len());
    for i in 0..values.len() {
        let element = ScalarValue::try_from_array(&values, i)?;
        elements.push(if element.is_null() { "null".to_string() } else { write(&element) });
    }
    Ok(format!("[{}]", elements.join(separator)))
}

/// A value's text as PostgreSQL's output function writes it.
fn text_of(value: &ScalarValue) -> String {
    match value {
        ScalarValue::Utf8(Some(text)) | ScalarValue::Utf8View(Some(text)) | ScalarValue::LargeUtf8(Some(text)) => text.clone(),
        ScalarValue::Boolean(Some(b)) => if *b { "true" } else { "false" }.to_string(),
        other => other.to_string(),
    }
}

/// A value as a JSON value: numbers and booleans as themselves, NULL as
/// `null`, a float that JSON cannot hold and anything else as a string.
fn json_value(value: &ScalarValue) -> String {
    if value.is_null() {
        return "null".into();
    }
    match value {
        ScalarValue::Boolean(Some(b)) => b.to_string(),
        ScalarValue::Int8(_) | ScalarValue::Int16(_) | ScalarValue::Int32(_) | ScalarValue::Int64(_) => value.to_string(),
        ScalarValue::UInt8(_) | ScalarValue::UInt16(_) | ScalarValue::UInt32(_) | ScalarValue::UInt64(_) => value.to_string(),
        ScalarValue::Decimal128(..) => value.to_string(),
        ScalarValue::Float32(Some(f)) if f.is_finite() => crate::exec::pg_text::float4(*f),
        ScalarValue::Float64(Some(f)) if f.is_finite() => crate::exec::pg_text::float8(*f, 15),
        ScalarValue::List(_) | ScalarValue::LargeList(_) | ScalarValue::FixedSizeList(_) => json_elements(value, ",", json_value).unwrap_or_else(|_| "null".into()),
        other => {
            let text = pg_text_of(other);
            // A timestamp in JSON is ISO 8601: a `T`, an offset with minutes.
            if matches!(other.data_type(), DataType::Timestamp(_, zone) if zone.is_some()) {
                json_string(&iso_offset(&text.replacen(' ', "T", 1)))
            } else if matches!(other.data_type(), DataType::Timestamp(..)) {
                json_string(&text.replacen(' ', "T", 1))
            } else {
                json_string(&text)
            }
        }
    }
}

/// A value's text as PostgreSQL prints it (`exec/pg_text.rs`: `Infinity`,
/// `1 day 02:00:00`, `10:00:00.5`), else as `text_of`.
fn pg_text_of(value: &ScalarValue) -> String {
    let printed = value.to_array().ok().and_then(|array| crate::exec::pg_text::values_as_text(&array));
    match printed {
        Some(texts) if !texts.is_null(0) => texts.as_any().downcast_ref::<arrow::array::StringArray>().map_or_else(|| text_of(value), |texts| texts.value(0).to_string()),
        _ => text_of(value),
    }
}

/// A timestamptz's text with its offset as `+hh:mm` (PostgreSQL's text
/// writes `+05`, its JSON `+05:00`).
fn iso_offset(text: &str) -> String {
    let bytes = text.as_bytes();
    let hours_only = bytes.len() >= 3 && matches!(bytes[bytes.len() - 3], b'+' | b'-') && bytes[bytes.len() - 2..].iter().all(u8::is_ascii_digit);
    if hours_only { format!("{text}:00") } else { text.to_string() }
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    serde_json::Value::String(text.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(args: Vec<ScalarValue>) -> Result<String> {
        let arg_fields = args.iter().map(|a| Arc::new(Field::new("a", a.data_type(), true))).collect();
        let args = ScalarFunctionArgs {
            args: args.into_iter().map(ColumnarValue::Scalar).collect(),
            arg_fields,
            number_rows: 1,
            return_field: Arc::new(Field::new("json_build_object", DataType::Utf8, false)),
            config_options: Arc::new(Default::default()),
        };
        match json_build_object_udf().invoke_with_args(args)? {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(text))) => Ok(text),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn objects_are_written_as_postgresql_writes_them() {
        let text = |s: &str| ScalarValue::Utf8(Some(s.into()));
        let built = build(vec![text("a"), ScalarValue::Int64(Some(1)), text("b"), text("x\"y"), text("c"), ScalarValue::Boolean(Some(true)), text("d"), ScalarValue::Int32(None)]).unwrap();
        assert_eq!(built, r#"{"a" : 1, "b" : "x\"y", "c" : true, "d" : null}"#);
        assert_eq!(build(vec![]).unwrap(), "{}");
        assert!(build(vec![ScalarValue::Utf8(None), ScalarValue::Int64(Some(1))]).is_err());
    }
}
