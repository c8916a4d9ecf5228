//! Every limit FoamDB enforces, in one place, with the reason for its value.
//! Relationships between limits are checked at compile time.

/// Hash partitions per node when `CREATE TABLE` gives no `PARTITIONS n`, on
/// nodes that run several worker threads. A multiple
/// of the node count keeps every node's share equal, and more than one partition
/// per node lets a node scan its share on several cores. Each partition costs
/// every query that reads it: a segment to open and, in a join or aggregate on
/// the distribution key, a hash table (or perfect-hash array over the whole key
/// range) of its own. Measured on 4 local SF1 nodes against 4 per node, 2 per
/// node took 0.95x the time over the 22 TPC-H queries (Q13 0.87x, Q22 0.80x)
/// and 0.92x in the self-join of the benchmark.
pub const PARTITIONS_PER_NODE_DEFAULT: u32 = 2;

/// Hash partitions per node by default on nodes that run one worker thread
/// (`foam local` on a machine with fewer cores than twice its nodes): such a
/// node reads and joins its partitions one after another anyway, so a second
/// one only adds its costs. Measured on 4 local SF1 nodes with one thread
/// each, the same data in tables of 1 partition per node against 2, in
/// interleaved runs: the 22 TPC-H queries took 0.955x the time (Q13 0.94,
/// Q14 0.83, Q18 1.09) and 0.96x the CPU; the self-join of the benchmark
/// 0.92x the CPU, the same join co-located 0.82x.
pub const PARTITIONS_PER_SINGLE_THREADED_NODE: u32 = 1;

/// The fewest partitions a table gets by default, however few the nodes: one
/// node still reads and joins in several streams, which balance its cores
/// better than two (on one SF1 node, 2 partitions took 1.03x the time of 4).
/// Rounded up to a multiple of the node count, so every node gets an equal
/// share.
pub const PARTITIONS_PER_TABLE_MIN_DEFAULT: u32 = 4;

/// Worker threads assumed for nodes whose count is not known: a table gets
/// [`PARTITIONS_PER_NODE_DEFAULT`] per node.
pub const WORKER_THREADS_UNKNOWN: u32 = u32::MAX;

/// Partitions of a table created without `PARTITIONS n` on `nodes` nodes
/// that each run `worker_threads` threads: their per-node share, and at least
/// [`PARTITIONS_PER_TABLE_MIN_DEFAULT`] rounded up to a multiple of `nodes`.
pub const fn default_partition_count(nodes: u32, worker_threads: u32) -> u32 {
    let nodes = if nodes == 0 { 1 } else { nodes };
    let per_node = if worker_threads <= 1 { PARTITIONS_PER_SINGLE_THREADED_NODE } else { PARTITIONS_PER_NODE_DEFAULT };
    let share = nodes.saturating_mul(per_node);
    let floor = PARTITIONS_PER_TABLE_MIN_DEFAULT.div_ceil(nodes).saturating_mul(nodes);
    if share > floor { share } else { floor }
}

/// Copies of each partition when `CREATE TABLE` gives no `REPLICAS n` (capped
/// at the node count): losing any one node loses no data.
pub const REPLICAS_DEFAULT: u32 = 2;

/// How many nodes hold the catalog with Raft (the lowest node ids): any one
/// of three may fail, and a majority (two) keeps the cluster writable.
pub const META_NODES: usize = 3;

/// How many of the meta nodes of a cluster of `nodes` vote in the catalog's
/// Raft group: all of them when they are odd in number, one fewer when even
/// (the highest of them follows as a learner). Two voters are no safer than
/// one and less available: a majority of two is both, so losing either stops
/// the catalog, where one voter stops it only when that node is lost.
pub const fn meta_voters(nodes: usize) -> usize {
    let meta = if nodes < META_NODES { nodes } else { META_NODES };
    if meta % 2 == 0 { meta.saturating_sub(1) } else { meta }
}

/// How long a catalog request waits for a leader of the meta nodes (an
/// election takes about a second) before it fails with 57P03.
pub const CATALOG_LEADER_WAIT_MS: u64 = 5_000;

/// How often the leader of the meta nodes pings every node.
pub const HEARTBEAT_INTERVAL_MS: u64 = 250;

/// How long a node may go without word from the leader of the meta nodes (or,
/// on the leader, without a majority of them answering) before it takes
/// itself to be cut off with a minority: it then refuses writes and reads at
/// once (57P03) instead of waiting on peers it cannot reach or serving a
/// catalog the majority may have changed. Longer than an election (at most
/// 1.2 s) plus a few heartbeats, so a change of leader is not taken for a cut.
pub const CUT_OFF_AFTER_MS: u64 = 3_000;

/// Longest wait for one heartbeat's answer.
pub const HEARTBEAT_TIMEOUT_MS: u64 = 1_000;

/// How long a node may miss heartbeats before it is marked down (`foam start
/// --node-dead-after-ms`): long enough to ride out a GC-like stall, short
/// enough that writes to its partitions resume within seconds.
pub const NODE_DEAD_AFTER_MS_DEFAULT: u64 = 3_000;

/// How long a node stays down before its partitions get new copies elsewhere
/// (`foam start --reprotect-after-ms`).
pub const REPROTECT_AFTER_MS_DEFAULT: u64 = 30_000;

/// Longest a request to a peer (stage, prepare, commit, catalog) may take; a
/// stopped (not crashed) peer then fails the call instead of hanging it.
/// Generous: a prepare may finish and fsync a large staged segment.
pub const RPC_REQUEST_TIMEOUT_MS: u64 = 30_000;

/// Longest `ALTER TABLE ... ADD PRIMARY KEY | UNIQUE` waits on a copy for
/// the transactions prepared there before the key was added to be decided.
pub const KEY_VALIDATION_WAIT_MS: u64 = 20_000;

/// Longest a write fence waits for prepared transactions on its partition to
/// finish before the catch-up that set it gives up and tries again later.
pub const FENCE_DRAIN_TIMEOUT_MS: u64 = 5_000;

/// The longest `statement_timeout` a session may set, in milliseconds:
/// PostgreSQL's own bound (a 32-bit count of milliseconds, about 24 days).
pub const STATEMENT_TIMEOUT_MS_MAX: u64 = i32::MAX as u64;

/// Bytes per message when a segment file is copied to a new replica.
pub const REPLICA_COPY_CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// The most partitions one table may have; each partition is a directory, a
/// manifest and at least one scan task, so the cost of a scan grows with it.
pub const PARTITIONS_PER_TABLE_MAX: u32 = 4096;

/// Rows per Arrow batch read from CSV during COPY and produced by scans.
pub const BATCH_ROWS: usize = 8192;

/// Rows a scan should have per task before it is spread over more of its
/// owner nodes: a small table read by one task (pulling the other owners'
/// partitions) costs less than a stage fanned out to every node.
pub const SCAN_ROWS_PER_TASK: u64 = 50_000;

/// Rows a coordinator buffers for one partition before it ships them to the
/// owner node; large messages amortize per-message network and fsync cost.
pub const WRITE_SHIP_ROWS: usize = 65_536;

/// Bytes a coordinator buffers over all partitions of one statement; past it
/// the largest partition buffer is shipped early, so memory stays bounded
/// however many partitions a table has.
pub const WRITE_BUFFER_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Bytes of one partition's rows in one transaction kept in memory (and written
/// inline into the WAL at prepare). Beyond this the participant streams them into
/// a staged Parquet segment instead, so a large COPY is written once, not twice.
pub const STAGE_INLINE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Bytes of rows one transaction may delete (DELETE, UPDATE's old rows) on
/// one node. They are held in memory and written inline into the WAL at
/// prepare; a larger deletion is refused with 54000 rather than spilled.
pub const STAGE_DELETE_BYTES_PER_TXN_MAX: usize = 256 * 1024 * 1024;

/// Inline (in-memory, WAL-bound) bytes one transaction may stage on one node
/// over all its partitions; past it the largest partitions spill to staged files.
pub const STAGE_INLINE_BYTES_PER_TXN_MAX: usize = 64 * 1024 * 1024;

/// Rows a partition's memtable (committed WAL rows not yet in a segment) may hold
/// before it is flushed to a Parquet segment.
pub const MEMTABLE_FLUSH_ROWS: usize = 131_072;

/// Rows a partition may hold for prepare and commit to find a change's rows
/// through an index by a unique key (`foam-storage/src/key_index.rs`, some
/// tens of bytes of memory a row); a larger one is read whole.
pub const KEY_INDEX_ROWS_MAX: usize = 4_000_000;

/// Batches a partition's memtable may hold before it is flushed: each small
/// commit adds one, and every scan handles each batch on its own.
pub const MEMTABLE_FLUSH_BATCHES: usize = 512;

/// Segments of fewer live rows may be merged into the segment a flush writes
/// (`Partition::flush`), so small changes leave few files.
pub const SEGMENT_MERGE_ROWS_MAX: usize = MEMTABLE_FLUSH_ROWS / 4;

/// A segment whose deletion vector covers this share of its rows
/// (numerator over 100), and at least [`SEGMENT_DELETED_ROWS_MIN`] rows, is
/// rewritten without them after the commit that got it there; smaller ones
/// wait for the next flush (a rewrite per commit of a tiny hot table would
/// cost more than the rows it drops).
pub const SEGMENT_DELETED_PERCENT_MAX: u64 = 25;
pub const SEGMENT_DELETED_ROWS_MIN: usize = 1024;

/// WAL bytes after which the node checkpoints: flushes every memtable and starts
/// a fresh WAL file, so restart replay time stays bounded.
pub const WAL_CHECKPOINT_BYTES: u64 = 256 * 1024 * 1024;

/// Largest single gRPC message between nodes (Flight frames carry one batch each).
pub const RPC_MESSAGE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Largest HTTP/2 frame a node accepts from a peer. The protocol's default,
/// 16 KiB, splits every 64 KiB exchange batch into four frames, and the
/// receiver then reads its socket 16 KiB at a time; a frame as big as a
/// typical batch lets one read take a whole batch.
pub const RPC_FRAME_BYTES_MAX: u32 = 1024 * 1024;

/// Batches in flight on one coordinator→participant write stream. Bounded so a
/// slow node applies back-pressure instead of growing the coordinator's memory.
pub const WRITE_STREAM_BATCHES_IN_FLIGHT: usize = 8;

/// Largest segment file a bulk loader may stream to a node (the loader's
/// segments hold about a million rows: tens of MB).
pub const RECEIVED_SEGMENT_BYTES_MAX: u64 = 4 * 1024 * 1024 * 1024;

/// How long a participant keeps an unprepared transaction with no activity
/// before it assumes the coordinator is gone and discards it.
pub const TXN_IDLE_TIMEOUT_MS: u64 = 120_000;

/// How often the coordinator of an open transaction block tells its
/// participants it still holds the block, well within `TXN_IDLE_TIMEOUT_MS`.
pub const TXN_KEEPALIVE_MS: u64 = TXN_IDLE_TIMEOUT_MS / 4;

/// How long a participant waits on a prepared transaction whose coordinator
/// it cannot reach before it settles the outcome through the catalog leader
/// (recording ABORT unless the coordinator decided first).
pub const IN_DOUBT_ABANDON_MS: u64 = 2_000;

/// How often a node sends the leader the transaction outcomes its
/// participants have on disk, so the records can go.
pub const SETTLED_TXNS_FLUSH_MS: u64 = 200;

/// Outcomes a node keeps queued for the leader while it is unreachable; past
/// it, records stay until their participants ask again or are removed.
pub const SETTLED_TXNS_PENDING_MAX: usize = 100_000;

/// How often a participant asks coordinators about prepared transactions whose
/// outcome it does not know (after its own restart or a coordinator crash).
pub const IN_DOUBT_RESOLVE_INTERVAL_MS: u64 = 1_000;

/// How long a partition keeps the versions a change replaced, for snapshots
/// taken before it (MVCC). A statement or REPEATABLE READ transaction whose
/// snapshot is older than a version it needs gets 40001 and is run again.
pub const SNAPSHOT_RETENTION_MS: u64 = 300_000;

/// Memory and disk the replaced versions of one partition may hold of their
/// own (memtables, replaced segment files); past it the oldest go before
/// their retention ends (their snapshots get 40001), so a burst of writes or
/// updates cannot hold gigabytes for minutes.
pub const SNAPSHOT_HISTORY_BYTES_MAX: usize = 256 * 1024 * 1024;

/// How often a node drops partition versions past their retention.
pub const VERSION_COLLECT_INTERVAL_MS: u64 = 1_000;

/// How long a read waits for a transaction prepared on its partition (whose
/// commit timestamp may be below the read's snapshot) to be decided, before
/// it fails with 40001; and how long a commit waits for earlier commits on
/// its partitions to be applied first.
pub const SNAPSHOT_WAIT_MS_MAX: u64 = 10_000;

/// How far ahead of the timestamps it hands out the timestamp oracle reserves
/// in the Raft log, so a new leader starts above every timestamp handed out.
pub const TIMESTAMP_WINDOW_MICROS: u64 = 60_000_000;

/// How long a new node keeps retrying to reach the node it joins through (and
/// the first node to elect itself) when it starts,
/// so a whole cluster can be started in any order.
pub const JOIN_RETRY_FOR_MS: u64 = 60_000;

/// Timeout for connecting to a peer; an unreachable node fails fast with a clear
/// error instead of hanging the statement.
pub const PEER_CONNECT_TIMEOUT_MS: u64 = 3_000;

/// How often an idle connection to a peer is probed with an HTTP/2 ping, and
/// how long the answer may take: a peer that vanished without closing its
/// connections (a cut cable, a stopped process) then fails the calls in flight
/// within seconds instead of at their request timeout. Generous enough for a
/// peer whose cores are busy with a query.
pub const PEER_KEEPALIVE_INTERVAL_MS: u64 = 2_000;
pub const PEER_KEEPALIVE_TIMEOUT_MS: u64 = 5_000;

/// Longest accepted identifier (table, column, view names), as in PostgreSQL.
pub const IDENTIFIER_BYTES_MAX: usize = 63;

/// Stack of each thread of a node's runtime. Statements are parsed,
/// planned and run on these threads, and an expression nests as deep as
/// the statement says: sqlparser's derived clone, drop and visitors and
/// DataFusion's evaluation recurse once per level. At the 2 MiB default
/// a `SELECT 1+1+...` of 20,000 terms overflowed the stack and aborted
/// the node. The memory is reserved, not committed: pages are used only as
/// deep as a statement goes.
pub const NODE_THREAD_STACK_BYTES: usize = 64 << 20;

/// How deep a statement's expressions may nest, estimated from its tokens
/// (`frontend/statement.rs`): deeper ones are refused with 54001, as
/// PostgreSQL refuses what passes its `max_stack_depth`. Sized so the
/// deepest allowed statement runs within [`NODE_THREAD_STACK_BYTES`] in a
/// debug build with room to spare.
pub const EXPRESSION_DEPTH_MAX: usize = 10_000;

const _: () = assert!(BATCH_ROWS <= WRITE_SHIP_ROWS);
const _: () = assert!(WRITE_SHIP_ROWS <= MEMTABLE_FLUSH_ROWS);
const _: () = assert!(STAGE_INLINE_BYTES_MAX < RPC_MESSAGE_BYTES_MAX);
const _: () = assert!(STAGE_INLINE_BYTES_MAX <= STAGE_INLINE_BYTES_PER_TXN_MAX);
const _: () = assert!(PARTITIONS_PER_NODE_DEFAULT >= 1);
const _: () = assert!(REPLICAS_DEFAULT >= 1);
const _: () = assert!(HEARTBEAT_INTERVAL_MS * 4 <= NODE_DEAD_AFTER_MS_DEFAULT);
const _: () = assert!(HEARTBEAT_TIMEOUT_MS < NODE_DEAD_AFTER_MS_DEFAULT);
const _: () = assert!(HEARTBEAT_INTERVAL_MS * 8 <= CUT_OFF_AFTER_MS);
const _: () = assert!(PEER_KEEPALIVE_INTERVAL_MS + PEER_KEEPALIVE_TIMEOUT_MS < RPC_REQUEST_TIMEOUT_MS);
const _: () = assert!(REPLICA_COPY_CHUNK_BYTES < RPC_MESSAGE_BYTES_MAX);
// HTTP/2 allows frames of 16 KiB up to 16 MiB - 1 (RFC 9113, 6.5.2).
const _: () = assert!(RPC_FRAME_BYTES_MAX >= 16 * 1024 && RPC_FRAME_BYTES_MAX < 16 * 1024 * 1024);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_partitions_give_every_node_an_equal_share() {
        // (nodes, worker threads per node) -> partitions
        let cases = [((1, 2), 4), ((2, 2), 4), ((3, 2), 6), ((4, 2), 8), ((5, 8), 10), ((1, 1), 4), ((2, 1), 4), ((3, 1), 6), ((4, 1), 4), ((5, 1), 5), ((8, 1), 8), ((0, 1), 4)];
        for ((nodes, threads), partitions) in cases {
            assert_eq!(default_partition_count(nodes, threads), partitions, "{nodes} nodes of {threads} threads");
            assert_eq!(default_partition_count(nodes, threads) % nodes.max(1), 0);
        }
        assert_eq!(default_partition_count(4, WORKER_THREADS_UNKNOWN), 8);
    }

    #[test]
    fn the_meta_voters_are_odd_in_number_and_at_most_the_meta_nodes() {
        let voters: Vec<usize> = (0..=6).map(meta_voters).collect();
        assert_eq!(voters, [0, 1, 1, 3, 3, 3, 3]);
    }
}

/// Client connections a node serves at once unless `--max-connections`
/// says otherwise (PostgreSQL's default is 100). Each holds a session and
/// its buffers; past the limit a new client gets 53300 and the sessions
/// already open go on.
pub const MAX_CONNECTIONS_DEFAULT: usize = 200;

/// Flight SQL sessions (one per successful handshake) a node holds at once;
/// past it a handshake gets 53300 once sessions idle longer than
/// [`FLIGHT_SQL_SESSION_IDLE_SECS`] are gone.
pub const FLIGHT_SQL_SESSIONS_MAX: usize = 200;

/// A Flight SQL session unused this long ends (its bearer token with it):
/// the protocol has no disconnect to end it by.
pub const FLIGHT_SQL_SESSION_IDLE_SECS: u64 = 30 * 60;

/// Results a Flight SQL session ran and keeps for their tickets' `DoGet`.
/// A client asking for more drops the oldest, whose ticket then gets an
/// error naming it.
pub const FLIGHT_SQL_RESULTS_PENDING_MAX: usize = 16;

/// Prepared statements one Flight SQL session holds at once.
pub const FLIGHT_SQL_PREPARED_MAX: usize = 1024;
