//! COPY statements before they run: their options, and `COPY ... TO
//! STDOUT` turned into the query whose rows it sends (the protocol side,
//! which writes the rows in COPY's formats, is foam-pgwire's `copy_out.rs`).

use datafusion::sql::sqlparser::ast::{CopyLegacyOption, CopyOption, CopySource, CopyTarget, Statement};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use foam_common::{FoamError, FoamResult};

use crate::write::copy::{CopyFormat, CopyOptions};

/// `COPY table [(columns)] TO STDOUT` or `COPY (query) TO STDOUT`: the
/// query whose rows it sends, and how they are to be written. A file or a
/// program on the server as the target is refused: the client receives the
/// rows (psql: `\copy ... to 'file'`).
pub fn copy_out_query(statement: &Statement) -> FoamResult<Option<(Statement, CopyOptions)>> {
    let Statement::Copy { source, to: true, target, options, legacy_options, .. } = statement else { return Ok(None) };
    match target {
        CopyTarget::Stdout => {}
        CopyTarget::File { .. } => {
            return Err(FoamError::FeatureNotSupported {
                feature: "COPY ... TO a file on the server (use COPY ... TO STDOUT; psql: \\copy ... to 'file')".into(),
            });
        }
        other => return Err(FoamError::FeatureNotSupported { feature: format!("COPY ... TO {other}") }),
    }
    let options = copy_options(options, legacy_options)?;
    if options.format == CopyFormat::Parquet {
        return Err(FoamError::FeatureNotSupported { feature: "COPY ... TO in Parquet format".into() });
    }
    let query = match source {
        CopySource::Query(query) => Statement::Query(query.clone()),
        CopySource::Table { table_name, columns } => {
            let list = if columns.is_empty() { "*".to_string() } else { columns.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ") };
            let text = format!("SELECT {list} FROM {table_name}");
            let mut parsed = Parser::parse_sql(&PostgreSqlDialect {}, &text).map_err(|e| FoamError::Syntax { message: e.to_string() })?;
            match (parsed.pop(), parsed.is_empty()) {
                (Some(query), true) => query,
                _ => return Err(FoamError::internal(format!("COPY's query is not one statement: {text}"))),
            }
        }
    };
    Ok(Some((query, options)))
}

fn single_char(value: char, option: &str) -> FoamResult<u8> {
    if value.is_ascii() {
        Ok(value as u8)
    } else {
        Err(FoamError::InvalidParameter { message: format!("COPY {option} must be a single one-byte character") })
    }
}

/// The options of a COPY statement, either direction.
pub fn copy_options(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> FoamResult<CopyOptions> {
    let mut result = CopyOptions::default();
    let mut format = CopyFormat::Text;
    for option in options {
        if let CopyOption::Format(ident) = option {
            format = match ident.value.to_lowercase().as_str() {
                "csv" => CopyFormat::Csv,
                "text" => CopyFormat::Text,
                "parquet" => CopyFormat::Parquet,
                "binary" => CopyFormat::Binary,
                other => return Err(FoamError::InvalidParameter { message: format!("COPY format \"{other}\" not recognized") }),
            };
        }
    }
    for option in legacy {
        match option {
            CopyLegacyOption::Csv(_) => format = CopyFormat::Csv,
            CopyLegacyOption::Parquet => format = CopyFormat::Parquet,
            CopyLegacyOption::Binary => format = CopyFormat::Binary,
            _ => {}
        }
    }
    if format == CopyFormat::Csv {
        result = CopyOptions { format, header: false, delimiter: b',', quote: b'"', escape: None, null: None, columns: None, defaults: Vec::new(), time_zone: None, checks: None };
    }
    result.format = format;
    for option in options {
        match option {
            CopyOption::Format(_) => {}
            CopyOption::Header(header) => result.header = *header,
            CopyOption::Delimiter(c) => result.delimiter = single_char(*c, "delimiter")?,
            CopyOption::Quote(c) => result.quote = single_char(*c, "quote")?,
            CopyOption::Escape(c) => result.escape = Some(single_char(*c, "escape")?),
            CopyOption::Null(text) => result.null = Some(text.clone()),
            // PostgreSQL's way to skip vacuuming freshly loaded rows; FoamDB
            // has no vacuum, and the rows are visible once COPY commits.
            CopyOption::Freeze(_) => {}
            other => return Err(FoamError::FeatureNotSupported { feature: format!("COPY option {other}") }),
        }
    }
    for option in legacy {
        match option {
            CopyLegacyOption::Csv(csv_options) => {
                for csv_option in csv_options {
                    let text = csv_option.to_string();
                    if text.eq_ignore_ascii_case("HEADER") {
                        result.header = true;
                    } else {
                        return Err(FoamError::FeatureNotSupported { feature: format!("COPY option {text}") });
                    }
                }
            }
            CopyLegacyOption::Parquet | CopyLegacyOption::Binary => {}
            CopyLegacyOption::Delimiter(c) => result.delimiter = single_char(*c, "delimiter")?,
            CopyLegacyOption::Header => result.header = true,
            CopyLegacyOption::Null(text) => result.null = Some(text.clone()),
            other => return Err(FoamError::FeatureNotSupported { feature: format!("COPY option {other}") }),
        }
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().remove(0)
    }

    #[test]
    fn copy_to_stdout_becomes_its_query() {
        let (query, options) = copy_out_query(&parse("COPY t (a, \"B\") TO STDOUT WITH (FORMAT csv, HEADER)")).unwrap().unwrap();
        assert_eq!(query.to_string(), "SELECT a, \"B\" FROM t");
        assert_eq!((options.format, options.header, options.delimiter, options.null.as_deref()), (CopyFormat::Csv, true, b',', None));
        let (query, options) = copy_out_query(&parse("COPY (SELECT 1 AS x) TO STDOUT")).unwrap().unwrap();
        assert_eq!(query.to_string(), "SELECT 1 AS x");
        assert_eq!((options.format, options.null.as_deref()), (CopyFormat::Text, Some("\\N")));
        let (_, options) = copy_out_query(&parse("COPY t TO STDOUT (FORMAT binary)")).unwrap().unwrap();
        assert_eq!(options.format, CopyFormat::Binary);
        assert!(copy_out_query(&parse("COPY t FROM STDIN")).unwrap().is_none());
        for refused in ["COPY t TO '/etc/passwd'", "COPY t TO STDOUT (FORMAT parquet)"] {
            assert_eq!(copy_out_query(&parse(refused)).unwrap_err().sqlstate(), foam_common::SqlState::FeatureNotSupported, "{refused}");
        }
    }
}
