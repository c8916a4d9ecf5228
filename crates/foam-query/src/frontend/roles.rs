//! `CREATE`, `ALTER` and `DROP ROLE` (and `USER`, PostgreSQL's role that
//! may log in) as catalog commands. A password becomes its SCRAM verifier
//! here, on the node the client is connected to: only the verifier reaches
//! the catalog and its Raft log (`foam_catalog::roles`).
//!
//! The options FoamDB keeps are `SUPERUSER`, `LOGIN` and `PASSWORD`; what
//! a role other than a superuser may do is what it owns and was granted
//! (`privileges.rs`). `CREATEDB`, `CREATEROLE`, `REPLICATION` and
//! `BYPASSRLS` are taken for a superuser, which has them anyway, and
//! refused with 0A000 for any other role, as are the rest.

use datafusion::sql::sqlparser::ast::{AlterRoleOperation, Expr, ObjectName, ObjectType, Password, RoleOption, Statement, Value};
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};
use foam_catalog::CatalogCommand;
use foam_catalog::roles::{RoleDef, ScramVerifier};
use foam_common::{FoamError, FoamResult};

use crate::frontend::ddl;
use crate::frontend::statement::keyword_is;

/// Whether `words` start a role statement: `CREATE`, `ALTER` or `DROP`
/// followed by `ROLE` or `USER`.
pub fn is_role_statement(words: &[&Token]) -> bool {
    words.len() >= 2
        && ["create", "alter", "drop"].iter().any(|verb| keyword_is(words[0], verb))
        && (keyword_is(words[1], "role") || keyword_is(words[1], "user"))
}

/// Whether `words` are `GRANT role TO role` or `REVOKE role FROM role`:
/// a GRANT or REVOKE without `ON` (which sqlparser cannot read).
pub fn is_role_membership(words: &[&Token]) -> bool {
    !words.is_empty() && (keyword_is(words[0], "grant") || keyword_is(words[0], "revoke")) && !words.iter().any(|w| keyword_is(w, "on"))
}

/// Rewrites `CREATE|ALTER USER` to the `ROLE` form sqlparser reads as
/// PostgreSQL's (it reads `USER` as Snowflake's), and says whether it was
/// `USER`, which may log in unless told otherwise.
pub fn user_as_role(tokens: &mut [TokenWithSpan]) -> bool {
    let mut words = tokens.iter_mut().filter(|t| !matches!(t.token, Token::Whitespace(_)));
    let _verb = words.next();
    match words.next() {
        Some(second) if keyword_is(&second.token, "user") => {
            second.token = Token::make_keyword("ROLE");
            true
        }
        _ => false,
    }
}

/// The catalog command of a parsed role statement and its command tag.
pub fn role_command(statement: &Statement, user: bool) -> FoamResult<(CatalogCommand, &'static str)> {
    match statement {
        Statement::CreateRole(create) => {
            let [name] = create.names.as_slice() else {
                return Err(unsupported("CREATE ROLE of several roles"));
            };
            let refused = [
                (create.connection_limit.is_some(), "CONNECTION LIMIT"),
                (create.valid_until.is_some(), "VALID UNTIL"),
                (!create.in_role.is_empty() || !create.in_group.is_empty(), "IN ROLE"),
                (!create.role.is_empty() || !create.user.is_empty() || !create.admin.is_empty(), "ROLE, USER and ADMIN members"),
                (create.authorization_owner.is_some(), "AUTHORIZATION"),
            ];
            if let Some((_, option)) = refused.iter().find(|(given, _)| *given) {
                return Err(unsupported(&format!("CREATE ROLE ... {option}")));
            }
            let superuser = create.superuser.unwrap_or(false);
            let superuser_only = [
                (create.create_db, "CREATEDB"),
                (create.create_role, "CREATEROLE"),
                (create.replication, "REPLICATION"),
                (create.bypassrls, "BYPASSRLS"),
            ];
            if let Some((_, option)) = superuser_only.iter().find(|(given, _)| *given == Some(true) && !superuser) {
                return Err(unsupported(&format!("{option} for a role that is not a superuser (GRANT CREATE ON DATABASE lets a role create tables)")));
            }
            let password = match &create.password {
                Some(password) => verifier(password)?,
                None => None,
            };
            let role = RoleDef { name: role_name(name)?, superuser, login: create.login.unwrap_or(user), password };
            Ok((CatalogCommand::CreateRole { role, if_not_exists: create.if_not_exists }, "CREATE ROLE"))
        }
        Statement::AlterRole { name, operation: AlterRoleOperation::WithOptions { options } } => {
            let (mut password, mut login, mut superuser) = (None, None, None);
            for option in options {
                match option {
                    RoleOption::Password(given) => password = Some(verifier(given)?),
                    RoleOption::Login(on) => login = Some(*on),
                    RoleOption::SuperUser(on) => superuser = Some(*on),
                    RoleOption::Inherit(true) => {}
                    other => return Err(unsupported(&format!("ALTER ROLE ... {other} (FoamDB keeps SUPERUSER, LOGIN and PASSWORD)"))),
                }
            }
            let name = ddl::normalize_ident(&name.value, name.quote_style);
            Ok((CatalogCommand::AlterRole { name, password, login, superuser }, "ALTER ROLE"))
        }
        Statement::AlterRole { .. } => Err(unsupported("this form of ALTER ROLE")),
        Statement::Drop { object_type: ObjectType::Role | ObjectType::User, names, if_exists, .. } => {
            let [name] = names.as_slice() else {
                return Err(unsupported("DROP ROLE of several roles"));
            };
            Ok((CatalogCommand::DropRole { name: role_name(name)?, if_exists: *if_exists }, "DROP ROLE"))
        }
        other => Err(unsupported(&format!("\"{other}\""))),
    }
}

fn unsupported(feature: &str) -> FoamError {
    FoamError::FeatureNotSupported { feature: feature.to_string() }
}

fn role_name(name: &ObjectName) -> FoamResult<String> {
    match name.0.as_slice() {
        [part] => part.as_ident().map(|i| ddl::normalize_ident(&i.value, i.quote_style)).ok_or_else(|| unsupported(&format!("role name {name}"))),
        _ => Err(unsupported(&format!("qualified role name {name}"))),
    }
}

/// A password clause's verifier; `PASSWORD NULL` removes the password.
fn verifier(password: &Password) -> FoamResult<Option<ScramVerifier>> {
    let text = match password {
        Password::NullPassword => return Ok(None),
        Password::Password(Expr::Value(value)) => match &value.value {
            Value::SingleQuotedString(text) => text,
            Value::Null => return Ok(None),
            other => return Err(FoamError::Syntax { message: format!("a password is a string literal, not {other}") }),
        },
        Password::Password(other) => return Err(FoamError::Syntax { message: format!("a password is a string literal, not {other}") }),
    };
    if text.starts_with("SCRAM-SHA-256$") || (text.len() == 35 && text.starts_with("md5")) {
        return Err(unsupported("a password given already hashed"));
    }
    if text.is_empty() {
        return Err(FoamError::InvalidParameter { message: "a password may not be empty".into() });
    }
    ScramVerifier::new(text).map(Some)
}

#[cfg(test)]
mod tests {
    use crate::frontend::statement::{FoamStatement, split};
    use foam_catalog::CatalogCommand;

    fn command(sql: &str) -> Result<CatalogCommand, String> {
        let statement = split(sql).unwrap().remove(0).parse(64).map_err(|e| format!("{} {e}", e.sqlstate()))?;
        match statement {
            FoamStatement::Role { command, .. } => Ok(command),
            other => Err(format!("not a role statement: {other:?}")),
        }
    }

    #[test]
    fn role_statements_become_catalog_commands_with_verifiers_only() {
        let Ok(CatalogCommand::CreateRole { role, if_not_exists: false }) = command("CREATE USER Admin WITH SUPERUSER PASSWORD 'pw'") else { panic!() };
        assert_eq!((role.name.as_str(), role.superuser, role.login), ("admin", true, true), "USER may log in");
        let verifier = role.password.expect("a verifier");
        assert_eq!(verifier, foam_catalog::roles::ScramVerifier::with_salt("pw", verifier.salt.clone()));
        assert!(!format!("{verifier:?}").contains("pw"));
        let Ok(CatalogCommand::CreateRole { role, if_not_exists: true }) = command("CREATE ROLE IF NOT EXISTS ops SUPERUSER") else { panic!() };
        assert!(!role.login && role.password.is_none(), "ROLE may not log in unless told");
        let Ok(CatalogCommand::AlterRole { name, password: Some(Some(_)), login: Some(false), superuser: None }) =
            command("ALTER USER ops WITH NOLOGIN PASSWORD 'x'")
        else {
            panic!()
        };
        assert_eq!(name, "ops");
        assert!(matches!(command("ALTER ROLE ops PASSWORD NULL"), Ok(CatalogCommand::AlterRole { password: Some(None), .. })));
        assert!(matches!(command("DROP USER IF EXISTS ops"), Ok(CatalogCommand::DropRole { if_exists: true, .. })));
        for refused in [
            "CREATE ROLE r SUPERUSER PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a:b'",
            "CREATE ROLE r SUPERUSER CONNECTION LIMIT 3",
            "CREATE ROLE r CREATEROLE",
            "ALTER ROLE r CREATEDB",
            "ALTER ROLE r RENAME TO s",
            "DROP ROLE a, b",
        ] {
            assert!(command(refused).unwrap_err().starts_with("0A000"), "{refused}");
        }
        assert!(command("CREATE ROLE r SUPERUSER PASSWORD ''").unwrap_err().starts_with("22023"));
        let Ok(CatalogCommand::CreateRole { role, .. }) = command("CREATE ROLE app LOGIN PASSWORD 'pw'") else { panic!() };
        assert!(!role.superuser && role.login);
        assert!(matches!(command("ALTER ROLE app NOSUPERUSER"), Ok(CatalogCommand::AlterRole { superuser: Some(false), .. })));
    }
}
