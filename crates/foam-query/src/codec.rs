//! Serializes FoamDB's plan nodes for shipping to workers: `FoamScanExec` and
//! the receiving end of a routed shuffle, `FoamRoutedExec`. Their specs are
//! plain data, so they travel as JSON inside DataFusion's extension-node bytes.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use crate::route::{FoamRoutedExec, RouteSpec};
use crate::scan_exec::{FoamScanExec, ScanSpec};

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum FoamNode {
    Scan(ScanSpec),
    Routed(RouteSpec),
}

#[derive(Debug, Default)]
pub struct FoamCodec;

impl PhysicalExtensionCodec for FoamCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let node: FoamNode = serde_json::from_slice(buf)
            .map_err(|e| DataFusionError::Internal(format!("cannot decode a FoamDB plan node: {e}")))?;
        match (node, inputs) {
            (FoamNode::Scan(spec), []) => Ok(Arc::new(FoamScanExec::try_new(spec)?)),
            (FoamNode::Routed(spec), [input]) => Ok(Arc::new(FoamRoutedExec::try_new(input.clone(), spec)?)),
            (_, inputs) => Err(DataFusionError::Internal(format!("FoamDB plan node with {} inputs", inputs.len()))),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let encoded = if let Some(scan) = node.downcast_ref::<FoamScanExec>() {
            FoamNode::Scan(scan.spec().clone())
        } else if let Some(routed) = node.downcast_ref::<FoamRoutedExec>() {
            FoamNode::Routed(routed.spec().clone())
        } else {
            return Err(DataFusionError::Internal(format!("FoamCodec cannot encode {}", node.name())));
        };
        serde_json::to_writer(buf, &encoded).map_err(|e| DataFusionError::Internal(format!("cannot encode {}: {e}", node.name())))
    }
}
