//! FoamDB's errors as gRPC statuses: the message names the problem and its
//! PostgreSQL SQLSTATE (also in the `x-foam-sqlstate` trailer), and the
//! gRPC code is the nearest to the SQLSTATE's class.

use foam_common::FoamError;
use tonic::{Code, Status};

/// The metadata key carrying the SQLSTATE.
pub(crate) const SQLSTATE_KEY: &str = "x-foam-sqlstate";

/// `error` as the client gets it.
pub(crate) fn status(error: &FoamError) -> Status {
    let sqlstate = error.sqlstate();
    let code = sqlstate.code();
    let mut status = Status::new(grpc_code(code), format!("{error} (SQLSTATE {code})"));
    if let Ok(value) = code.parse() {
        status.metadata_mut().insert(SQLSTATE_KEY, value);
    }
    status
}

/// The gRPC code for a SQLSTATE.
fn grpc_code(sqlstate: &str) -> Code {
    match sqlstate {
        "42501" => Code::PermissionDenied,
        "57014" => Code::Cancelled,
        "42P01" | "42704" | "42883" | "42703" | "26000" | "34000" | "3D000" | "3F000" => Code::NotFound,
        "42P07" | "42710" | "23505" => Code::AlreadyExists,
        _ => match &sqlstate[..2] {
            "28" => Code::Unauthenticated,
            "0A" => Code::Unimplemented,
            "53" | "54" => Code::ResourceExhausted,
            "40" => Code::Aborted,
            "23" | "25" => Code::FailedPrecondition,
            "08" | "57" => Code::Unavailable,
            "22" | "42" | "21" | "2B" | "3B" => Code::InvalidArgument,
            _ => Code::Internal,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foam_common::SqlState;

    #[test]
    fn the_status_names_the_sqlstate_and_the_nearest_code() {
        let cases = [
            (FoamError::UndefinedTable { name: "nope".into() }, Code::NotFound, "42P01"),
            (FoamError::Syntax { message: "at or near \"SELEC\"".into() }, Code::InvalidArgument, "42601"),
            (FoamError::FeatureNotSupported { feature: "COPY over Flight SQL".into() }, Code::Unimplemented, "0A000"),
            (FoamError::Query { message: "password authentication failed".into(), sqlstate: SqlState::InvalidPassword }, Code::Unauthenticated, "28P01"),
            (FoamError::Query { message: "duplicate key".into(), sqlstate: SqlState::UniqueViolation }, Code::AlreadyExists, "23505"),
            (FoamError::internal("oops"), Code::Internal, "XX000"),
        ];
        for (error, code, sqlstate) in cases {
            let status = status(&error);
            assert_eq!(status.code(), code, "{error}");
            assert!(status.message().ends_with(&format!("(SQLSTATE {sqlstate})")), "{}", status.message());
            assert_eq!(status.metadata().get(SQLSTATE_KEY).unwrap().to_str().unwrap(), sqlstate);
        }
    }
}
