//! FoamDB's own execution plan nodes: the partition scan, the routed
//! shuffle and the join against each node's replica, and the adapter that
//! turns an operator's panic into the statement's error.

pub mod panic_safe;
pub mod replica_join;
pub mod route;
pub mod scan;
