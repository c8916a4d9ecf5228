//! Serializes FoamDB's plan nodes for shipping to workers: `FoamScanExec`, the
//! receiving end of a routed shuffle, `FoamRoutedExec`, and a join against
//! each node's copy of a replicated table, `FoamReplicaJoinExec`. Specs are
//! plain data, so they travel as JSON inside DataFusion's extension-node
//! bytes; the replica join carries its hash join (with the build side the
//! distributed planner does not see) as datafusion-proto bytes, its probe side
//! replaced by an empty placeholder since that travels as the node's input.
//! `ClaimsDroppedExec` carries nothing but its input.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion_proto::physical_plan::{AsExecutionPlan, PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use datafusion_proto::protobuf::PhysicalPlanNode;

use crate::optimizer::physical::output_claims::ClaimsDroppedExec;
use crate::exec::replica_join::FoamReplicaJoinExec;
use crate::exec::route::{FoamRoutedExec, RouteSpec};
use crate::exec::scan::{FoamScanExec, ScanSpec};

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum FoamNode {
    Scan(ScanSpec),
    Routed(RouteSpec),
    ReplicaJoin(Vec<u8>),
    ClaimsDropped,
}

#[derive(Debug, Default)]
pub struct FoamCodec;

impl PhysicalExtensionCodec for FoamCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let node: FoamNode = serde_json::from_slice(buf)
            .map_err(|e| DataFusionError::Internal(format!("cannot decode a FoamDB plan node: {e}")))?;
        match (node, inputs) {
            (FoamNode::Scan(spec), []) => Ok(Arc::new(FoamScanExec::try_new(spec)?)),
            (FoamNode::Routed(spec), [input]) => Ok(Arc::new(FoamRoutedExec::try_new(input.clone(), spec)?)),
            (FoamNode::ReplicaJoin(bytes), [probe]) => {
                let join = PhysicalPlanNode::try_decode(&bytes)?.try_into_physical_plan(ctx, self)?;
                let build = join.children().first().map(|b| (*b).clone()).ok_or_else(|| DataFusionError::Internal("replica join without a build side".into()))?;
                Ok(Arc::new(FoamReplicaJoinExec::try_new(join.replace_children(vec![build, probe.clone()], ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?)?))
            }
            (FoamNode::ClaimsDropped, [input]) => Ok(Arc::new(ClaimsDroppedExec::new(input.clone()))),
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
        } else if let Some(replica_join) = node.downcast_ref::<FoamReplicaJoinExec>() {
            let join = replica_join.join();
            let children: Vec<Arc<dyn ExecutionPlan>> = join.children().into_iter().cloned().collect();
            let placeholder: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(children[1].schema()));
            let without_probe =
                join.clone().replace_children(vec![children[0].clone(), placeholder], ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?;
            let mut bytes = Vec::new();
            PhysicalPlanNode::try_from_physical_plan(without_probe, self)?.try_encode(&mut bytes)?;
            FoamNode::ReplicaJoin(bytes)
        } else if node.is::<ClaimsDroppedExec>() {
            FoamNode::ClaimsDropped
        } else {
            return Err(DataFusionError::Internal(format!("FoamCodec cannot encode {}", node.name())));
        };
        serde_json::to_writer(buf, &encoded).map_err(|e| DataFusionError::Internal(format!("cannot encode {}: {e}", node.name())))
    }
}
