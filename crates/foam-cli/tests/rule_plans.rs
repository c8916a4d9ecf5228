//! Plan-level tests of the distribution rules that had none: where
//! `early_replica_join.rs`, `regroup.rs` and `exec/replica_join.rs` change a
//! plan, and the neighbouring shapes where they must not, on a real 3-node
//! cluster. Each query's answer is checked against one computed here, with
//! the rule on and (where it has a switch) off.

mod common;

use common::{Cluster, explain, query_text};

/// Rows of the two distributed tables.
const ROWS: i64 = 6_000;
/// Rows of the replicated dimension (ids 0..DIM_ROWS).
const DIM_ROWS: i64 = 50;

async fn setup(client: &tokio_postgres::Client) {
    client
        .batch_execute(&format!(
            "CREATE TABLE f (k BIGINT, d BIGINT, v BIGINT) DISTRIBUTED BY (k);
             CREATE TABLE g (k BIGINT, w BIGINT) DISTRIBUTED BY (k);
             CREATE TABLE dim (id BIGINT, region BIGINT, name TEXT) DISTRIBUTED REPLICATED;
             INSERT INTO f SELECT value, value % {DIM_ROWS} + 3, value FROM generate_series(1, {ROWS});
             INSERT INTO g SELECT value, value % 7 FROM generate_series(1, {ROWS});
             INSERT INTO dim SELECT value, value % 5, 'n' || value FROM generate_series(0, {last});
             SET foam.scan_rows_per_task = 1;",
            last = DIM_ROWS - 1
        ))
        .await
        .expect("setup");
}

/// True when a line `lower` accepts is in the subtree of (indented under) a
/// line `upper` accepts.
fn below(plan: &str, upper: impl Fn(&str) -> bool, lower: impl Fn(&str) -> bool) -> bool {
    // Plan lines are drawn inside boxes: the depth is where the text starts.
    let indent = |line: &str| line.find(|c: char| c.is_ascii_alphanumeric() || c == '[').unwrap_or(0);
    let lines: Vec<&str> = plan.lines().collect();
    lines.iter().enumerate().filter(|(_, l)| upper(l)).any(|(i, top)| {
        lines[i + 1..].iter().take_while(|l| indent(l) > indent(top)).any(|l| lower(l))
    })
}

/// A join line whose condition reads column `column` (on either side).
fn join_on(column: &'static str) -> impl Fn(&str) -> bool {
    move |line: &str| {
        line.contains("Join")
            && line.split("on=[").nth(1).is_some_and(|on| on.split(']').next().unwrap_or_default().split(['(', ' ']).any(|c| c.starts_with(&format!("{column}@"))))
    }
}

/// Each stage's tasks and partitions, from its `Stage N ── tasks=T, partitions=P` line.
fn stages(plan: &str) -> Vec<(usize, usize)> {
    plan.lines()
        .filter_map(|line| {
            let rest = line.split("── tasks=").nth(1)?;
            let (tasks, partitions) = rest.split_once(", partitions=")?;
            Some((tasks.trim().parse().ok()?, partitions.trim().parse().ok()?))
        })
        .collect()
}

/// One row of text cells.
fn row(cells: &[i64]) -> Vec<Vec<Option<String>>> {
    vec![cells.iter().map(|c| Some(c.to_string())).collect()]
}

/// The dimension row `f`'s row `k` joins (`d = k % DIM_ROWS + 3`), if any.
fn dim_of(k: i64) -> Option<i64> {
    let id = k % DIM_ROWS + 3;
    (id < DIM_ROWS).then_some(id)
}

/// early_replica_join.rs: the join with a filtered replicated table moves
/// down to the input its key comes from, below the co-located join, and
/// stays where it is for the shapes next to that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_replicated_join_moves_to_its_key_and_no_further() {
    let cluster = Cluster::start(3);
    let client = cluster.client(0).await;
    setup(&client).await;
    let region = |k: i64| dim_of(k).map(|id| id % 5);
    let keys = || 1..=ROWS;

    // The shape it rewrites: f ⋈ g on the distribution key, then a filtered
    // dimension on f's column. The dimension join moves under f ⋈ g.
    let moved = "SELECT count(*), sum(f.v + g.w) FROM f JOIN g ON f.k = g.k JOIN dim ON f.d = dim.id WHERE dim.region = 2";
    let matched: Vec<i64> = keys().filter(|k| region(*k) == Some(2)).collect();
    let expected = row(&[matched.len() as i64, matched.iter().map(|k| k + k % 7).sum()]);
    for early in [true, false] {
        client.batch_execute(&format!("SET foam.early_replica_joins = {early}")).await.expect("set");
        assert_eq!(query_text(&client, moved).await, expected, "early_replica_joins = {early}");
        let plan = explain(&client, moved).await;
        let dim_under_fg = below(&plan, join_on("k"), join_on("id"));
        assert_eq!(dim_under_fg, early, "early_replica_joins = {early}: the dimension joins below f ⋈ g only with the rule:\n{plan}");
    }
    client.batch_execute("SET foam.early_replica_joins = true").await.expect("set");

    // An unfiltered dimension removes nothing: the rule leaves it last.
    let unfiltered = "SELECT count(*) FROM f JOIN g ON f.k = g.k JOIN dim ON f.d = dim.id";
    assert_eq!(query_text(&client, unfiltered).await, row(&[keys().filter(|k| dim_of(*k).is_some()).count() as i64]));
    let plan = explain(&client, unfiltered).await;
    assert!(!below(&plan, join_on("k"), join_on("id")), "an unfiltered dimension stays above the join:\n{plan}");

    // Through a FULL join the dimension may not move: that would drop the
    // padded rows of g before the join pads them.
    let full = "SELECT count(*), count(x.k), count(x.gk) FROM \
                (SELECT f.k, f.d, g.k AS gk FROM f FULL JOIN (SELECT * FROM g WHERE w = 0) g ON f.k = g.k) x \
                JOIN dim ON x.d = dim.id WHERE dim.region = 2";
    let gk = matched.iter().filter(|k| *k % 7 == 0).count() as i64;
    assert_eq!(query_text(&client, full).await, row(&[matched.len() as i64, matched.len() as i64, gk]));
    let plan = explain(&client, full).await;
    assert!(!below(&plan, |l| l.contains("join_type=Full"), join_on("id")), "no dimension join below a FULL join:\n{plan}");

    // Into a LEFT join it may move only into the preserved side: keyed by
    // the padded side (g's w), it stays above.
    let padded = "SELECT count(*) FROM f LEFT JOIN g ON f.k = g.k JOIN dim ON g.w = dim.id WHERE dim.region = 2";
    let expected_padded = keys().filter(|k| (k % 7) % 5 == 2 && k % 7 < DIM_ROWS).count() as i64;
    assert_eq!(query_text(&client, padded).await, row(&[expected_padded]));
    let plan = explain(&client, padded).await;
    assert!(!below(&plan, |l| l.contains("join_type=Left"), join_on("id")), "no dimension join into the padded side of a LEFT join:\n{plan}");
}

/// regroup.rs: a scan whose hash partitioning nothing above relies on is
/// read in fewer streams; a co-located join and an aggregate by the
/// distribution key keep one stream per partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_regroup_only_where_no_operator_needs_their_partitions() {
    let cluster = Cluster::start(3);
    let client = cluster.client(1).await;
    setup(&client).await;
    // Where an operator needs the scan's hash partitions, the plan is the
    // same with the rule on and off.
    client.batch_execute("SET datafusion.execution.target_partitions = 2").await.expect("set");
    let plans = async |sql: &str| {
        let mut shown = Vec::new();
        for regroup in [true, false] {
            client.batch_execute(&format!("SET foam.regroup_scans = {regroup}")).await.expect("set");
            shown.push(explain(&client, sql).await);
        }
        client.batch_execute("SET foam.regroup_scans = true").await.expect("set");
        shown
    };

    // Grouped by the distribution key: each partition's groups are final
    // where they are.
    let by_key = "SELECT count(*), sum(s) FROM (SELECT k, sum(v) AS s FROM f GROUP BY k) t";
    assert_eq!(query_text(&client, by_key).await, row(&[ROWS, (1..=ROWS).sum()]));
    let shown = plans(by_key).await;
    assert_eq!(shown[0], shown[1], "grouping by the key keeps the partitions");
    assert!(shown[0].contains("mode=SinglePartitioned, gby=[k@"), "{}", shown[0]);

    // A co-located join pairs the partitions of both scans.
    let co_located = "SELECT count(*), sum(v + w) FROM f JOIN g ON f.k = g.k";
    assert_eq!(query_text(&client, co_located).await, row(&[ROWS, (1..=ROWS).map(|k| k + k % 7).sum()]));
    let shown = plans(co_located).await;
    assert_eq!(shown[0], shown[1], "a co-located join keeps the partitions");
    assert!(shown[0].contains("exchange: co-located"), "{}", shown[0]);

    // Grouped by a column that is not the distribution key: the groups are
    // shuffled anyway, so the scan may regroup, to one stream a task here.
    client.batch_execute("SET datafusion.execution.target_partitions = 1").await.expect("set");
    let by_other = "SELECT count(*), sum(s) FROM (SELECT d, sum(v) AS s FROM f GROUP BY d) t";
    let expected = row(&[DIM_ROWS, (1..=ROWS).sum()]);
    for regroup in [true, false] {
        client.batch_execute(&format!("SET foam.regroup_scans = {regroup}")).await.expect("set");
        assert_eq!(query_text(&client, by_other).await, expected, "regroup_scans = {regroup}");
        let plan = explain(&client, by_other).await;
        let regrouped = stages(&plan).iter().any(|(tasks, partitions)| partitions == tasks);
        assert_eq!(regrouped, regroup, "regroup_scans = {regroup}: {:?}\n{plan}", stages(&plan));
    }
}

/// exec/replica_join.rs: a join whose collected side reads only replicated
/// tables runs against each node's own copy; a join that would emit the
/// replicated side's unmatched rows does not, and neither does one whose
/// collected side reads a distributed table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_build_sides_join_on_every_node_only_when_that_is_exact() {
    let cluster = Cluster::start(3);
    let client = cluster.client(2).await;
    setup(&client).await;
    let joined: Vec<i64> = (1..=ROWS).filter(|k| dim_of(*k).is_some()).collect();

    // Inner join with the dimension: every node joins with its own copy.
    let inner = "SELECT count(*), sum(f.v) FROM f JOIN dim ON f.d = dim.id";
    assert_eq!(query_text(&client, inner).await, row(&[joined.len() as i64, joined.iter().sum()]));
    let plan = explain(&client, inner).await;
    assert!(plan.contains("FoamReplicaJoinExec"), "{plan}");
    assert!(!plan.contains("NetworkBroadcastExec"), "the dimension is not broadcast:\n{plan}");

    // The dimension as the preserved side of an outer join: each node would
    // emit its unmatched dimension rows, so they are not joined per node.
    let preserved = "SELECT count(*), count(f.k) FROM dim LEFT JOIN f ON f.d = dim.id";
    let unmatched = (0..DIM_ROWS).filter(|id| !(1..=ROWS).any(|k| dim_of(k) == Some(*id))).count() as i64;
    assert_eq!(query_text(&client, preserved).await, row(&[joined.len() as i64 + unmatched, joined.len() as i64]));
    let plan = explain(&client, preserved).await;
    assert!(!plan.contains("FoamReplicaJoinExec"), "a preserved replicated side is not joined per node:\n{plan}");

    // Anti join keeping f's rows without a dimension row: exact per node.
    let anti = "SELECT count(*) FROM f WHERE NOT EXISTS (SELECT 1 FROM dim WHERE dim.id = f.d)";
    assert_eq!(query_text(&client, anti).await, row(&[ROWS - joined.len() as i64]));

    // A collected side that reads a distributed table is not a replica.
    let mixed = "SELECT count(*) FROM f JOIN (SELECT dim.id FROM dim JOIN g ON g.k = dim.id) x ON f.d = x.id";
    let expected_mixed = joined.iter().filter(|k| dim_of(**k).is_some_and(|id| (1..=ROWS).contains(&id))).count() as i64;
    assert_eq!(query_text(&client, mixed).await, row(&[expected_mixed]));
    let plan = explain(&client, mixed).await;
    let per_node_f_join = plan.lines().any(|l| l.contains("FoamReplicaJoinExec") && join_on("d")(l));
    assert!(!per_node_f_join, "no per-node join with a side that reads g:\n{plan}");
}
