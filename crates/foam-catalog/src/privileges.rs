//! Privileges: who owns each table, view and sequence, what other roles
//! were granted on it, and who may create tables. The front end decides what a statement
//! needs (`foam-query`'s `frontend/privileges.rs`) and asks these; the
//! catalog only records ownership and grants, through Raft like every other
//! change, so every node answers alike.
//!
//! As in PostgreSQL: a superuser may do anything; the owner of a relation
//! (the role that created it) holds every privilege on it and alone may
//! drop, alter or grant on it; `PUBLIC` stands for every role. FoamDB has
//! one database with one schema, so `CREATE` on the database and on schema
//! `public` are one privilege: creating tables and views.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The grantee that stands for every role (`GRANT ... TO PUBLIC`).
pub const PUBLIC: &str = "public";

/// A privilege on a table or view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Privilege {
    Select,
    Insert,
    Update,
    Delete,
    Truncate,
    /// On a sequence: `nextval` and `currval`.
    Usage,
}

impl Privilege {
    /// What `GRANT ALL` grants.
    pub const ALL: [Privilege; 5] = [Privilege::Select, Privilege::Insert, Privilege::Update, Privilege::Delete, Privilege::Truncate];
    /// What a sequence takes, and `GRANT ALL` on one grants.
    pub const SEQUENCE: [Privilege; 3] = [Privilege::Usage, Privilege::Select, Privilege::Update];

    pub fn name(self) -> &'static str {
        match self {
            Privilege::Select => "SELECT",
            Privilege::Insert => "INSERT",
            Privilege::Update => "UPDATE",
            Privilege::Delete => "DELETE",
            Privilege::Truncate => "TRUNCATE",
            Privilege::Usage => "USAGE",
        }
    }
}

/// A relation's owner and grants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Acl {
    /// The role that created the relation; `None` for relations created
    /// before privileges existed, which only superusers own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Privileges granted to roles other than the owner ([`PUBLIC`] included).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grants: BTreeMap<String, BTreeSet<Privilege>>,
}

impl Acl {
    pub fn owned_by(owner: &str) -> Acl {
        Acl { owner: Some(owner.to_string()), grants: BTreeMap::new() }
    }

    pub fn is_owner(&self, role: &str) -> bool {
        self.owner.as_deref() == Some(role)
    }

    /// Whether `role` (not a superuser) holds `privilege`: as the owner, by
    /// a grant to it, or by a grant to PUBLIC.
    pub fn allows(&self, role: &str, privilege: Privilege) -> bool {
        self.is_owner(role) || [role, PUBLIC].iter().any(|r| self.grants.get(*r).is_some_and(|held| held.contains(&privilege)))
    }

    /// Adds (or, with `revoke`, removes) `privileges` for `grantees`.
    /// Grants to the owner change nothing: the owner holds everything.
    pub fn change(&mut self, privileges: &[Privilege], grantees: &[String], revoke: bool) {
        for grantee in grantees {
            if self.is_owner(grantee) {
                continue;
            }
            let held = self.grants.entry(grantee.clone()).or_default();
            for privilege in privileges {
                if revoke {
                    held.remove(privilege);
                } else {
                    held.insert(*privilege);
                }
            }
            if held.is_empty() {
                self.grants.remove(grantee);
            }
        }
    }

    /// Whether the relation depends on `role`: owned by it, or granting it
    /// something.
    pub fn mentions(&self, role: &str) -> bool {
        self.is_owner(role) || self.grants.contains_key(role)
    }
}

/// What a grant or revoke is on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GrantObject {
    /// Tables or views, by name.
    Relations { names: Vec<String>, privileges: Vec<Privilege> },
    /// `CREATE` on the database (or on schema `public`): creating tables and views.
    Create,
    /// Sequences, by name.
    Sequences { names: Vec<String>, privileges: Vec<Privilege> },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_hold_everything_and_grants_add_and_remove() {
        let mut acl = Acl::owned_by("alice");
        assert!(Privilege::ALL.iter().all(|p| acl.allows("alice", *p)));
        assert!(!acl.allows("bob", Privilege::Select));
        acl.change(&[Privilege::Select, Privilege::Insert], &["bob".into(), "alice".into()], false);
        assert!(acl.allows("bob", Privilege::Insert) && !acl.allows("bob", Privilege::Delete));
        assert!(!acl.grants.contains_key("alice"), "the owner needs no grant");
        acl.change(&[Privilege::Select], &[PUBLIC.into()], false);
        assert!(acl.allows("carol", Privilege::Select) && !acl.allows("carol", Privilege::Insert));
        acl.change(&Privilege::ALL, &["bob".into()], true);
        assert!(!acl.allows("bob", Privilege::Insert) && acl.allows("bob", Privilege::Select), "PUBLIC's grant stays");
        assert!(!acl.mentions("bob") && acl.mentions("alice") && acl.mentions(PUBLIC));
        assert!(!Acl::default().allows("alice", Privilege::Select), "relations from before privileges: superusers only");
    }
}
