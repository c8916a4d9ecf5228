//! FoamDB's own execution plan nodes: the partition scan, the routed
//! shuffle and the join against each node's replica.

pub mod replica_join;
pub mod route;
pub mod scan;
