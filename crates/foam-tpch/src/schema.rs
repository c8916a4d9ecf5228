//! The TPC-H tables as FoamDB creates them. lineitem and orders are both
//! distributed by order key (so they join without moving data); nation and
//! region are small and replicated to every node.

use arrow::record_batch::RecordBatch;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator, PartSuppGenerator,
    RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow, SupplierArrow,
};

/// Rows per generated batch.
const GENERATOR_BATCH_ROWS: usize = 8192;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TpchTable {
    Nation,
    Region,
    Part,
    Supplier,
    PartSupp,
    Customer,
    Orders,
    LineItem,
}

pub const ALL_TABLES: [TpchTable; 8] = [
    TpchTable::Nation,
    TpchTable::Region,
    TpchTable::Part,
    TpchTable::Supplier,
    TpchTable::PartSupp,
    TpchTable::Customer,
    TpchTable::Orders,
    TpchTable::LineItem,
];

impl TpchTable {
    pub fn name(self) -> &'static str {
        match self {
            TpchTable::Nation => "nation",
            TpchTable::Region => "region",
            TpchTable::Part => "part",
            TpchTable::Supplier => "supplier",
            TpchTable::PartSupp => "partsupp",
            TpchTable::Customer => "customer",
            TpchTable::Orders => "orders",
            TpchTable::LineItem => "lineitem",
        }
    }

    pub fn create_sql(self) -> &'static str {
        match self {
            TpchTable::Nation => {
                "CREATE TABLE nation (n_nationkey BIGINT NOT NULL, n_name CHAR(25), n_regionkey BIGINT, n_comment VARCHAR(152)) DISTRIBUTED REPLICATED"
            }
            TpchTable::Region => {
                "CREATE TABLE region (r_regionkey BIGINT NOT NULL, r_name CHAR(25), r_comment VARCHAR(152)) DISTRIBUTED REPLICATED"
            }
            TpchTable::Part => {
                "CREATE TABLE part (p_partkey BIGINT NOT NULL, p_name VARCHAR(55), p_mfgr CHAR(25), p_brand CHAR(10), \
                 p_type VARCHAR(25), p_size INT, p_container CHAR(10), p_retailprice DECIMAL(15,2), p_comment VARCHAR(23)) \
                 DISTRIBUTED BY (p_partkey)"
            }
            TpchTable::Supplier => {
                "CREATE TABLE supplier (s_suppkey BIGINT NOT NULL, s_name CHAR(25), s_address VARCHAR(40), s_nationkey BIGINT, \
                 s_phone CHAR(15), s_acctbal DECIMAL(15,2), s_comment VARCHAR(101)) DISTRIBUTED BY (s_suppkey)"
            }
            TpchTable::PartSupp => {
                "CREATE TABLE partsupp (ps_partkey BIGINT NOT NULL, ps_suppkey BIGINT NOT NULL, ps_availqty INT, \
                 ps_supplycost DECIMAL(15,2), ps_comment VARCHAR(199)) DISTRIBUTED BY (ps_partkey)"
            }
            TpchTable::Customer => {
                "CREATE TABLE customer (c_custkey BIGINT NOT NULL, c_name VARCHAR(25), c_address VARCHAR(40), c_nationkey BIGINT, \
                 c_phone CHAR(15), c_acctbal DECIMAL(15,2), c_mktsegment CHAR(10), c_comment VARCHAR(117)) \
                 DISTRIBUTED BY (c_custkey)"
            }
            TpchTable::Orders => {
                "CREATE TABLE orders (o_orderkey BIGINT NOT NULL, o_custkey BIGINT, o_orderstatus CHAR(1), o_totalprice DECIMAL(15,2), \
                 o_orderdate DATE, o_orderpriority CHAR(15), o_clerk CHAR(15), o_shippriority INT, o_comment VARCHAR(79)) \
                 DISTRIBUTED BY (o_orderkey)"
            }
            TpchTable::LineItem => {
                "CREATE TABLE lineitem (l_orderkey BIGINT NOT NULL, l_partkey BIGINT, l_suppkey BIGINT, l_linenumber INT, \
                 l_quantity DECIMAL(15,2), l_extendedprice DECIMAL(15,2), l_discount DECIMAL(15,2), l_tax DECIMAL(15,2), \
                 l_returnflag CHAR(1), l_linestatus CHAR(1), l_shipdate DATE, l_commitdate DATE, l_receiptdate DATE, \
                 l_shipinstruct CHAR(25), l_shipmode CHAR(10), l_comment VARCHAR(44)) DISTRIBUTED BY (l_orderkey)"
            }
        }
    }

    /// How many independent generator parts a table splits into at this scale:
    /// enough for every core, never so many that parts are tiny.
    pub fn parts(self, scale_factor: f64, workers: usize) -> i32 {
        match self {
            TpchTable::Nation | TpchTable::Region => 1,
            _ => ((scale_factor * 4.0).ceil() as i32).clamp(1, 4 * workers.max(1) as i32),
        }
    }

    /// Generates part `part` of `parts` of this table as Arrow batches.
    pub fn generate(self, scale_factor: f64, part: i32, parts: i32) -> Box<dyn Iterator<Item = Result<RecordBatch, arrow::error::ArrowError>> + Send> {
        let (sf, p, n, rows) = (scale_factor, part + 1, parts, GENERATOR_BATCH_ROWS);
        match self {
            TpchTable::Nation => Box::new(NationArrow::new(NationGenerator::new(sf, p, n)).with_batch_size(rows)),
            TpchTable::Region => Box::new(RegionArrow::new(RegionGenerator::new(sf, p, n)).with_batch_size(rows)),
            TpchTable::Part => Box::new(PartArrow::new(PartGenerator::new(sf, p, n)).with_batch_size(rows)),
            TpchTable::Supplier => Box::new(SupplierArrow::new(SupplierGenerator::new(sf, p, n)).with_batch_size(rows)),
            TpchTable::PartSupp => Box::new(PartSuppArrow::new(PartSuppGenerator::new(sf, p, n)).with_batch_size(rows)),
            TpchTable::Customer => Box::new(CustomerArrow::new(CustomerGenerator::new(sf, p, n)).with_batch_size(rows)),
            TpchTable::Orders => Box::new(OrderArrow::new(OrderGenerator::new(sf, p, n)).with_batch_size(rows)),
            TpchTable::LineItem => Box::new(LineItemArrow::new(LineItemGenerator::new(sf, p, n)).with_batch_size(rows)),
        }
    }
}

/// Casts a generated batch to a table's column types where they differ.
pub fn conform(batch: &RecordBatch, schema: &arrow::datatypes::SchemaRef) -> Result<RecordBatch, arrow::error::ArrowError> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| arrow::compute::cast(column, field.data_type()))
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(schema.clone(), columns)
}
