//! Roles: who may connect, and what the node keeps of each one's password —
//! a SCRAM-SHA-256 salted password (RFC 5802's `SaltedPassword`), never the
//! password itself. Roles live in the catalog, so every node checks the same
//! credentials and a change goes through Raft like any other command.
//!
//! What a role may do besides logging in is what it owns and was granted
//! (`privileges.rs`), or everything for a superuser.

use foam_common::{FoamError, FoamResult};
use serde::{Deserialize, Serialize};

/// PBKDF2 iterations of a SCRAM salted password: PostgreSQL's default and
/// the least RFC 7677 allows. The node advertises this count to clients.
pub const SCRAM_ITERATIONS: u32 = 4096;

/// Salt bytes of a new salted password (PostgreSQL uses 16).
const SCRAM_SALT_BYTES: usize = 16;

/// Length of a password FoamDB generates: 24 characters of 62, about 143 bits.
const GENERATED_PASSWORD_CHARS: usize = 24;

/// A role that may log in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoleDef {
    pub name: String,
    pub superuser: bool,
    pub login: bool,
    /// Without a password the role cannot log in over the network.
    pub password: Option<ScramVerifier>,
}

/// What the server needs to check a SCRAM-SHA-256 exchange.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ScramVerifier {
    pub salt: Vec<u8>,
    pub iterations: u32,
    /// `Hi(Normalize(password), salt, iterations)`.
    pub salted_password: Vec<u8>,
}

impl std::fmt::Debug for ScramVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScramVerifier(..)")
    }
}

impl ScramVerifier {
    /// The verifier of `password` under a fresh random salt.
    pub fn new(password: &str) -> FoamResult<ScramVerifier> {
        let mut salt = vec![0u8; SCRAM_SALT_BYTES];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut salt)
            .map_err(|_| FoamError::internal("the system's random number generator failed"))?;
        Ok(ScramVerifier::with_salt(password, salt))
    }

    /// The verifier of `password` under `salt`, as a client computes it.
    pub fn with_salt(password: &str, salt: Vec<u8>) -> ScramVerifier {
        // RFC 5802 normalizes with SASLprep; like PostgreSQL, a password
        // SASLprep refuses is used as it is.
        let normalized = stringprep::saslprep(password).map(|p| p.into_owned()).unwrap_or_else(|_| password.to_string());
        let mut salted_password = vec![0u8; ring::digest::SHA256_OUTPUT_LEN];
        let iterations = std::num::NonZeroU32::new(SCRAM_ITERATIONS).expect("nonzero");
        ring::pbkdf2::derive(ring::pbkdf2::PBKDF2_HMAC_SHA256, iterations, &salt, normalized.as_bytes(), &mut salted_password);
        ScramVerifier { salt, iterations: SCRAM_ITERATIONS, salted_password }
    }

    /// Whether `password` is the one this verifier was made from, for a
    /// protocol that sends the password itself (Flight SQL's basic
    /// authentication, over TLS). Compares in time independent of where
    /// the bytes differ.
    pub fn accepts(&self, password: &str) -> bool {
        let candidate = ScramVerifier::with_salt(password, self.salt.clone());
        self.iterations == candidate.iterations
            && candidate.salted_password.len() == self.salted_password.len()
            && candidate.salted_password.iter().zip(&self.salted_password).fold(0u8, |differ, (a, b)| differ | (a ^ b)) == 0
    }
}

/// A random password of letters and digits, safe in a connection URL.
pub fn generate_password() -> FoamResult<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let random = ring::rand::SystemRandom::new();
    let mut password = String::with_capacity(GENERATED_PASSWORD_CHARS);
    while password.len() < GENERATED_PASSWORD_CHARS {
        let mut byte = [0u8; 1];
        ring::rand::SecureRandom::fill(&random, &mut byte).map_err(|_| FoamError::internal("the system's random number generator failed"))?;
        // 248 = 4 * 62: rejecting the rest keeps every character equally likely.
        if (byte[0] as usize) < 4 * ALPHABET.len() {
            password.push(ALPHABET[byte[0] as usize % ALPHABET.len()] as char);
        }
    }
    Ok(password)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_salted_password_is_rfc_7677s() {
        // RFC 7677's example exchange: password "pencil", salt
        // "W22ZaJ0SNY7soEsUEjb6gQ==", 4096 iterations. Its client proof
        // "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=" follows from this
        // SaltedPassword.
        let salt = [0x5b, 0x6d, 0x99, 0x68, 0x9d, 0x12, 0x35, 0x8e, 0xec, 0xa0, 0x4b, 0x14, 0x12, 0x36, 0xfa, 0x81].to_vec();
        let verifier = ScramVerifier::with_salt("pencil", salt.clone());
        let hex: String = verifier.salted_password.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "c4a49510323ab4f952cac1fa99441939e78ea74d6be81ddf7096e87513dc615d");
        assert_eq!(verifier, ScramVerifier::with_salt("pencil", salt));
        assert_ne!(ScramVerifier::new("pencil").unwrap().salt, ScramVerifier::new("pencil").unwrap().salt);
    }

    #[test]
    fn a_verifier_accepts_its_password_only() {
        let verifier = ScramVerifier::new("pencil").unwrap();
        assert!(verifier.accepts("pencil"));
        // SASLprep maps a soft hyphen to nothing, as a SCRAM client does.
        assert!(verifier.accepts("pen\u{ad}cil"));
        for other in ["Pencil", "pencil ", "", "pencil2"] {
            assert!(!verifier.accepts(other), "{other:?}");
        }
    }

    #[test]
    fn generated_passwords_are_long_url_safe_and_differ() {
        let (a, b) = (generate_password().unwrap(), generate_password().unwrap());
        assert_eq!(a.len(), GENERATED_PASSWORD_CHARS);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }
}
