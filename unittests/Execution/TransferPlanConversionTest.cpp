//===- TransferPlanConversionTest.cpp - polymesh.transfer to plans --------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// toPlannerPlan must give back the plan --polymesh-plan wrote into a
// polymesh.transfer: the sharded runs of polymesh-run execute what the IR
// holds, so a field lost on the way (a phase, a buffer, an accumulate flag,
// the reduced layout) would make them check something else. Each case plans
// a reshard with the pass, converts the transfer back, and compares it field
// by field with planReshard on the same layouts.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Dialect/Polymesh/PlannerConversion.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/InitAllDialects.h"
#include "polymesh/Planner/Planner.h"
#include "polymesh/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include "gtest/gtest.h"

#include <map>
#include <string>

using namespace mlir;
using namespace polymesh;

namespace {

// One reshard per function, each a pattern the executor carries differently.
constexpr const char *kReshards = R"mlir(
polymesh.mesh @m4 = <["x"=4]>
polymesh.mesh @m4b = <["y"=4]>
polymesh.mesh @m8 = <["x"=8]>
polymesh.mesh @m22 = <["x"=2, "y"=2]>
polymesh.mesh @stage0 = <["dp"=2, "tp"=2], device_ids=[0, 1, 2, 3]>
polymesh.mesh @stage1 = <["dp"=2, "tp"=2], device_ids=[4, 5, 6, 7]>
polymesh.mesh @rev = <["x"=4], device_ids=[3, 2, 1, 0]>
polymesh.mesh @dev3 = <[], device_ids=[3]>

func.func @all_gather(%a: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<16x8xf32> {
  %0 = polymesh.reshard %a <@m4, [{}, {}]> : tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}
func.func @all_to_all(%a: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<16x16xf32> {
  %0 = polymesh.reshard %a <@m4, [{}, {"x"}]> : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}
func.func @pipeline(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@stage0, [{"dp"}, {"tp"}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %a <@stage1, [{"dp"}, {"tp"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
func.func @reversed(%a: tensor<8x4xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<8x4xi32> {
  %0 = polymesh.reshard %a <@rev, [{"x"}, {}]> : tensor<8x4xi32>
  return %0 : tensor<8x4xi32>
}
func.func @uneven(%a: tensor<10x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {"x"}]>}) -> tensor<10x4xf32> {
  %0 = polymesh.reshard %a <@m4, [{"x"}, {}]> : tensor<10x4xf32>
  return %0 : tensor<10x4xf32>
}
func.func @sub_axis(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m8, [{"x":(1)2}, {}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %a <@m8, [{"x":(2)4}, {"x":(1)2}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
func.func @bf16(%a: tensor<8x8xbf16> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<8x8xbf16> {
  %0 = polymesh.reshard %a <@m4, [{}, {"x"}]> : tensor<8x8xbf16>
  return %0 : tensor<8x8xbf16>
}
func.func @i1(%a: tensor<8x8xi1> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<8x8xi1> {
  %0 = polymesh.reshard %a <@m4, [{}, {}]> : tensor<8x8xi1>
  return %0 : tensor<8x8xi1>
}
func.func @to_one_device(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %a <@dev3, [{}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
func.func @renamed_mesh(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %a <@m4b, [{"y"}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
func.func @no_elements(%a: tensor<0x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<0x8xf32> {
  %0 = polymesh.reshard %a <@stage1, [{}, {}]> : tensor<0x8xf32>
  return %0 : tensor<0x8xf32>
}
func.func @all_reduce(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}], unreduced={"y"}>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %a <@m22, [{"x"}, {}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
func.func @reduce_scatter(%a: tensor<8x8xi32> {polymesh.sharding = #polymesh.sharding<@m22, [{}, {}], unreduced={"x"}>}) -> tensor<8x8xi32> {
  %0 = polymesh.reshard %a <@m22, [{"x"}, {}]> : tensor<8x8xi32>
  return %0 : tensor<8x8xi32>
}
func.func @keeps_partials(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}], unreduced={"y"}>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %a <@m22, [{}, {}], unreduced={"y"}> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
func.func @reduce_across_meshes(%a: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}], unreduced={"y"}>}) -> tensor<8x8xf32> {
  %0 = polymesh.reshard %a <@stage1, [{"dp"}, {"tp"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}
)mlir";

class TransferPlanConversionTest : public ::testing::TestWithParam<int64_t> {
protected:
  TransferPlanConversionTest() {
    DialectRegistry registry;
    polymesh::registerPolymeshInputDialects(registry);
    context.appendDialectRegistry(registry);
    context.getDiagEngine().registerHandler([this](Diagnostic &diag) {
      diagnostics += diag.str() + "\n";
      return success();
    });
  }

  /// kReshards after --polymesh-plan under the parameter's memory limit
  /// (and `batchMinDevices`, else the pass's default); null on failure.
  OwningOpRef<ModuleOp>
  planReshards(std::optional<int64_t> batchMinDevices = std::nullopt) {
    OwningOpRef<ModuleOp> module =
        parseSourceString<ModuleOp>(kReshards, &context);
    if (!module)
      return {};
    PassManager pm(&context);
    PolymeshPlanOptions options;
    options.memoryLimitBytes = GetParam();
    if (batchMinDevices)
      options.batchMinDevices = *batchMinDevices;
    pm.addPass(createPolymeshPlan(options));
    if (failed(pm.run(*module)))
      return {};
    return module;
  }

  /// The op's source and destination layouts, as the lowerings make them.
  std::optional<std::pair<planner::TensorLayout, planner::TensorLayout>>
  layoutsOf(TransferOp op) {
    auto type = cast<RankedTensorType>(op.getResult().getType());
    auto emit = [&]() { return op.emitOpError(); };
    FailureOr<planner::TensorLayout> source =
        toTensorLayout(emit, op.getSource(),
                       lookupMesh(op, op.getSource().getMeshName()), type);
    FailureOr<planner::TensorLayout> destination =
        toTensorLayout(emit, op.getDestination(),
                       lookupMesh(op, op.getDestination().getMeshName()), type);
    if (failed(source) || failed(destination))
      return std::nullopt;
    return std::make_pair(std::move(*source), std::move(*destination));
  }

  MLIRContext context;
  std::string diagnostics;
};

void expectSameBox(const planner::Box &got, const planner::Box &want) {
  EXPECT_EQ(got.lo, want.lo);
  EXPECT_EQ(got.hi, want.hi);
}

/// Every field the IR carries or the conversion derives; not the memory
/// limit and the lower bounds, which the IR does not record.
void expectSamePlan(const planner::TransferPlan &got,
                    const planner::TransferPlan &want) {
  EXPECT_EQ(got.shape, want.shape);
  EXPECT_EQ(got.elementBytes, want.elementBytes);
  EXPECT_EQ(got.identity, want.identity);
  EXPECT_EQ(got.reducesInPlace, want.reducesInPlace);
  ASSERT_EQ(got.reducedLayout.has_value(), want.reducedLayout.has_value());
  if (want.reducedLayout) {
    EXPECT_EQ(got.reducedLayout->mesh(), want.reducedLayout->mesh());
    EXPECT_EQ(got.reducedLayout->sharding(), want.reducedLayout->sharding());
    EXPECT_EQ(got.reducedLayout->shape(), want.reducedLayout->shape());
  }
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (size_t s = 0; s < want.steps.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const planner::Step &g = got.steps[s], &w = want.steps[s];
    EXPECT_EQ(g.kind, w.kind);
    EXPECT_EQ(g.chunk, w.chunk);
    EXPECT_EQ(g.devices, w.devices);
    ASSERT_EQ(g.transfers.size(), w.transfers.size());
    for (size_t t = 0; t < w.transfers.size(); ++t) {
      SCOPED_TRACE("transfer " + std::to_string(t));
      const planner::Transfer &gt = g.transfers[t], &wt = w.transfers[t];
      EXPECT_EQ(gt.srcDevice, wt.srcDevice);
      EXPECT_EQ(gt.dstDevices, wt.dstDevices);
      expectSameBox(gt.box, wt.box);
      EXPECT_EQ(gt.bytes, wt.bytes);
      EXPECT_EQ(gt.srcBuffer, wt.srcBuffer);
      EXPECT_EQ(gt.dstBuffer, wt.dstBuffer);
      EXPECT_EQ(gt.accumulate, wt.accumulate);
      EXPECT_EQ(gt.phase, wt.phase);
    }
  }
  EXPECT_EQ(got.numChunks, want.numChunks);
  EXPECT_EQ(got.bytesMoved, want.bytesMoved);
  EXPECT_EQ(got.maxSendBytes, want.maxSendBytes);
  EXPECT_EQ(got.maxRecvBytes, want.maxRecvBytes);
  EXPECT_EQ(got.peakTempBytes, want.peakTempBytes);
  EXPECT_EQ(got.stepCounts, want.stepCounts);
  ASSERT_EQ(got.perDevice.size(), want.perDevice.size());
  for (size_t d = 0; d < want.perDevice.size(); ++d) {
    EXPECT_EQ(got.perDevice[d].device, want.perDevice[d].device);
    EXPECT_EQ(got.perDevice[d].sendBytes, want.perDevice[d].sendBytes);
    EXPECT_EQ(got.perDevice[d].recvBytes, want.perDevice[d].recvBytes);
    EXPECT_EQ(got.perDevice[d].peakTempBytes, want.perDevice[d].peakTempBytes);
  }
}

/// What the planner itself makes of `op`'s reshard under `options`: the
/// plan of the whole reshard, or for a batched op the expansion of the
/// cell it plans.
absl::StatusOr<planner::TransferPlan>
plannersPlan(TransferOp op, const planner::TensorLayout &source,
             const planner::TensorLayout &destination,
             const planner::PlanOptions &options) {
  int64_t elementBytes =
      elementByteSize(op.getResult().getType().getElementType());
  if (!op.getBatchAttr())
    return planner::planReshard(source, destination, elementBytes, options);
  absl::StatusOr<planner::ReshardBatch> batch = planner::makeReshardBatch(
      source, destination, toPlannerBatchAxes(op.getBatchAttr()));
  if (!batch.ok())
    return batch.status();
  absl::StatusOr<planner::TransferPlan> cell =
      planner::planCellReshard(*batch, elementBytes, options);
  if (!cell.ok())
    return cell.status();
  return planner::expandBatchedPlan(*cell, *batch, source, destination);
}

// The parameter is the pass's memory limit: 0 (one chunk) or small enough
// that most plans are cut into several chunks. Each reshard is planned
// whole (the default: these meshes are below batch-min-devices), then
// batched wherever it repeats (batch-min-devices=1).
TEST_P(TransferPlanConversionTest, GivesBackWhatThePlannerPlanned) {
  planner::PlanOptions plannerOptions;
  plannerOptions.memoryLimitBytes = GetParam();
  // As --polymesh-plan plans by default (exchange-tiles).
  plannerOptions.symbolicExchanges = true;
  int transfers = 0, batched = 0, symbolic = 0;
  for (std::optional<int64_t> batchMinDevices :
       {std::optional<int64_t>(), std::optional<int64_t>(1)}) {
    OwningOpRef<ModuleOp> module = planReshards(batchMinDevices);
    ASSERT_TRUE(module) << diagnostics;
    module->walk([&](TransferOp op) {
      ++transfers;
      batched += op.getBatchAttr() != nullptr;
      SCOPED_TRACE("@" +
                   op->getParentOfType<func::FuncOp>().getSymName().str());
      auto layouts = layoutsOf(op);
      ASSERT_TRUE(layouts) << diagnostics;
      const auto &[source, destination] = *layouts;
      absl::StatusOr<planner::TransferPlan> got =
          toPlannerPlan(op, source, destination);
      ASSERT_TRUE(got.ok()) << got.status();
      absl::StatusOr<planner::TransferPlan> want =
          plannersPlan(op, source, destination, plannerOptions);
      ASSERT_TRUE(want.ok()) << want.status();
      // The IR writes reductions as pieces and toPlannerPlan keeps them;
      // transfer for transfer, they are the planner's.
      symbolic += planner::hasSymbolicSteps(*got);
      planner::expandSymbolicSteps(*got);
      planner::expandSymbolicSteps(*want);
      expectSamePlan(*got, *want);
    });
  }
  EXPECT_EQ(transfers, 30);
  EXPECT_GE(batched, 4);
  EXPECT_GT(symbolic, 0);
}

// The derived fields on the cases that exercise them, so the comparison
// above cannot pass by both sides leaving them unset.
TEST_P(TransferPlanConversionTest, DerivesWhatTheIrDoesNotRecord) {
  OwningOpRef<ModuleOp> module = planReshards();
  ASSERT_TRUE(module) << diagnostics;

  std::map<std::string, planner::TransferPlan> plans;
  module->walk([&](TransferOp op) {
    auto layouts = layoutsOf(op);
    ASSERT_TRUE(layouts) << diagnostics;
    const auto &[source, destination] = *layouts;
    absl::StatusOr<planner::TransferPlan> plan =
        toPlannerPlan(op, source, destination);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plans.emplace(op->getParentOfType<func::FuncOp>().getSymName().str(),
                  std::move(*plan));
  });

  EXPECT_TRUE(plans.at("renamed_mesh").identity);
  EXPECT_TRUE(plans.at("renamed_mesh").steps.empty());
  // No elements between other devices: nothing moves, yet it is not an
  // identity (the destination devices hold no source tile).
  EXPECT_FALSE(plans.at("no_elements").identity);
  EXPECT_TRUE(plans.at("no_elements").steps.empty());
  EXPECT_FALSE(plans.at("all_gather").identity);
  EXPECT_FALSE(plans.at("all_gather").reducesInPlace);
  EXPECT_FALSE(plans.at("all_gather").reducedLayout);

  for (const char *name :
       {"all_reduce", "reduce_scatter", "reduce_across_meshes"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(plans.at(name).reducesInPlace);
    ASSERT_TRUE(plans.at(name).reducedLayout);
    EXPECT_TRUE(plans.at(name).reducedLayout->sharding().unreduced.empty());
  }
  EXPECT_GT(plans.at("all_reduce").count(planner::StepKind::AllReduce), 0);
  EXPECT_GT(plans.at("reduce_scatter").count(planner::StepKind::ReduceScatter),
            0);
  // Partials kept on the same mesh are not reduced.
  EXPECT_FALSE(plans.at("keeps_partials").reducesInPlace);
  EXPECT_FALSE(plans.at("keeps_partials").reducedLayout);
  EXPECT_EQ(plans.at("i1").elementBytes, 1);
  EXPECT_EQ(plans.at("bf16").elementBytes, 2);
}

INSTANTIATE_TEST_SUITE_P(MemoryLimits, TransferPlanConversionTest,
                         ::testing::Values(0, 64));

} // namespace
