//! Serializes `FoamScanExec` for shipping to workers. The scan's whole spec is
//! plain data, so it travels as JSON inside DataFusion's extension-node bytes.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use crate::scan_exec::{FoamScanExec, ScanSpec};

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
        if !inputs.is_empty() {
            return Err(DataFusionError::Internal(format!("FoamScanExec has no inputs, got {}", inputs.len())));
        }
        let spec: ScanSpec = serde_json::from_slice(buf)
            .map_err(|e| DataFusionError::Internal(format!("cannot decode FoamScanExec: {e}")))?;
        Ok(Arc::new(FoamScanExec::try_new(spec)?))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(scan) = node.downcast_ref::<FoamScanExec>() else {
            return Err(DataFusionError::Internal(format!("FoamCodec cannot encode {}", node.name())));
        };
        serde_json::to_writer(buf, scan.spec())
            .map_err(|e| DataFusionError::Internal(format!("cannot encode FoamScanExec: {e}")))
    }
}
