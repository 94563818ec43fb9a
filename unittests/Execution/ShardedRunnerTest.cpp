//===- ShardedRunnerTest.cpp - Partitioned programs run sharded -----------===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Each test compiles a small program for sharded runs (propagate, plan,
// partition, lower to the CPU, JIT), checks what the runner recorded of its
// class functions (devices, positions, exact local types), runs it on the
// loopback runtime and compares every device's result tiles with the
// unsharded reference bit for bit. test/Run/verify-compute.mlir covers the
// ops; these tests cover the runner's own bookkeeping and its errors.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/ShardedRunner.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Execution/InputFill.h"
#include "polymesh/Execution/ReferenceRunner.h"
#include "polymesh/Execution/SumBounds.h"
#include "polymesh/Execution/Tolerance.h"
#include "polymesh/InitAllDialects.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace mlir;
using namespace polymesh::execution;

namespace {

class ShardedRunnerTest : public ::testing::Test {
protected:
  ShardedRunnerTest() {
    // What polymesh-run registers, sharding models included, so that
    // propagation decides as it does there.
    DialectRegistry registry;
    polymesh::registerPolymeshInputDialects(registry);
    registerReferenceDialects(registry);
    context.appendDialectRegistry(registry);
    context.getDiagEngine().registerHandler([this](Diagnostic &diag) {
      diagnostics += diag.str() + "\n";
      return success();
    });
  }

  /// Parses `source` and compiles `functions` for sharded runs.
  std::unique_ptr<ShardedRunner>
  compile(llvm::StringRef source, llvm::ArrayRef<std::string> functions,
          const ShardedRunnerOptions &options = {}) {
    module = parseSourceString<ModuleOp>(source, &context);
    if (!module) {
      ADD_FAILURE() << diagnostics;
      return nullptr;
    }
    auto runner = ShardedRunner::create(*module, functions, options);
    if (!runner) {
      ADD_FAILURE() << llvm::toString(runner.takeError()) << "\n"
                    << diagnostics;
      return nullptr;
    }
    return std::move(*runner);
  }

  /// Runs `name` sharded and on the reference, and expects every device's
  /// tile of every result to match. Returns the sharded run.
  ShardedRun runAndCompare(ShardedRunner &sharded, const std::string &name) {
    auto reference = ReferenceRunner::create(*module, {name});
    if (!reference) {
      ADD_FAILURE() << llvm::toString(reference.takeError());
      return {};
    }
    auto signature = (*reference)->getSignature(name);
    if (!signature) {
      ADD_FAILURE() << llvm::toString(signature.takeError());
      return {};
    }
    std::vector<HostTensor> inputs;
    for (auto [i, argument] : llvm::enumerate(signature->arguments))
      inputs.push_back(makeInput(argument.elementType, argument.shape, i));
    auto expected = (*reference)->run(name, inputs);
    if (!expected) {
      ADD_FAILURE() << llvm::toString(expected.takeError());
      return {};
    }
    auto run = sharded.run(name);
    if (!run) {
      ADD_FAILURE() << llvm::toString(run.takeError());
      return {};
    }
    EXPECT_EQ(run->results.size(), expected->size());
    for (size_t r = 0; r < run->results.size() && r < expected->size(); ++r) {
      std::optional<TileMismatch> mismatch =
          compareWithReference((*expected)[r], run->results[r]);
      EXPECT_FALSE(mismatch) << "result #" << r << ": " << mismatch->message();
    }
    return std::move(*run);
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::string diagnostics;
};

TEST_F(ShardedRunnerTest, UnevenTilesMakeClassesWithExactLocalTypes) {
  // 10 rows over 4 devices: tiles of 3, 3, 3 and 1 rows, so two classes.
  auto runner = compile(R"mlir(
    polymesh.mesh @m4 = <["x"=4]>
    func.func @neg(%a: tensor<10x4xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) -> tensor<10x4xf32> {
      %0 = arith.negf %a : tensor<10x4xf32>
      return %0 : tensor<10x4xf32>
    }
  )mlir",
                        {"neg"});
  ASSERT_TRUE(runner);
  auto function = runner->getFunction("neg");
  ASSERT_TRUE(bool(function)) << llvm::toString(function.takeError());
  EXPECT_EQ(function->devices, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(function->bytesMoved, 0);
  ASSERT_EQ(function->classes.size(), 2u);
  EXPECT_EQ(function->classes[0].name, "neg__part0");
  EXPECT_EQ(function->classes[0].devices, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(function->classes[0].inputs[0].shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(function->classes[0].results[0].shape,
            (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(function->classes[1].devices, (std::vector<int64_t>{3}));
  EXPECT_EQ(function->classes[1].inputs[0].shape, (std::vector<int64_t>{1, 4}));

  ShardedRun run = runAndCompare(*runner, "neg");
  EXPECT_EQ(run.numDevices, 4);
  ASSERT_EQ(run.results.size(), 1u);
  // Result tiles are exact: the short tile is not padded.
  EXPECT_EQ(run.results[0].tiles.at(3).getShape(),
            (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(run.results[0].tiles.at(0).getShape(),
            (std::vector<int64_t>{3, 4}));
}

TEST_F(ShardedRunnerTest, DevicesOutsideAMeshHoldEmptyTiles) {
  // The argument lives on device 5 only; the result on devices 0-3.
  auto runner = compile(R"mlir(
    polymesh.mesh @m4 = <["x"=4]>
    polymesh.mesh @dev5 = <[], device_ids=[5]>
    func.func @move(%a: tensor<8x4xi32> {polymesh.sharding = #polymesh.sharding<@dev5, [{}, {}]>})
        -> (tensor<8x4xi32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) {
      %0 = arith.addi %a, %a : tensor<8x4xi32>
      return %0 : tensor<8x4xi32>
    }
  )mlir",
                        {"move"});
  ASSERT_TRUE(runner);
  auto function = runner->getFunction("move");
  ASSERT_TRUE(bool(function)) << llvm::toString(function.takeError());
  EXPECT_EQ(function->devices, (std::vector<int64_t>{0, 1, 2, 3, 5}));
  // Each of devices 0-3 receives its 2x4 tile from device 5: 4 * 8 * 4.
  EXPECT_EQ(function->bytesMoved, 128);
  for (const PartitionClass &partition : function->classes) {
    bool onDevice5 = partition.devices == std::vector<int64_t>{5};
    EXPECT_EQ(
        partition.inputs[0].shape,
        (onDevice5 ? std::vector<int64_t>{8, 4} : std::vector<int64_t>{0, 0}))
        << partition.name;
    EXPECT_EQ(
        partition.results[0].shape,
        (onDevice5 ? std::vector<int64_t>{0, 0} : std::vector<int64_t>{2, 4}))
        << partition.name;
  }
  ShardedRun run = runAndCompare(*runner, "move");
  EXPECT_EQ(run.numDevices, 5);
  EXPECT_EQ(run.bytesMoved, 128);
}

TEST_F(ShardedRunnerTest, PartialSumsAreReducedOrComparedAsSums) {
  // The contracting dimension is sharded: @reduced all-reduces the partial
  // sums, @partial returns them and is compared per reduction group.
  auto runner = compile(R"mlir(
    polymesh.mesh @m22 = <["x"=2, "y"=2]>
    func.func @reduced(%a: tensor<4x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {"y"}]>}, %b: tensor<8x4xf32>)
        -> (tensor<4x4xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{}, {}]>}) {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<4x4xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
      %r = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
      return %r : tensor<4x4xf32>
    }
    func.func @partial(%a: tensor<4x8xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {"y"}]>}, %b: tensor<8x4xf32>)
        -> (tensor<4x4xf32> {polymesh.sharding = #polymesh.sharding<@m22, [{"x"}, {}], unreduced={"y"}>}) {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<4x4xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
      %r = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
      return %r : tensor<4x4xf32>
    }
  )mlir",
                        {"reduced", "partial"});
  ASSERT_TRUE(runner);
  ShardedRun reduced = runAndCompare(*runner, "reduced");
  EXPECT_GT(reduced.bytesMoved, 0);
  ShardedRun partial = runAndCompare(*runner, "partial");
  EXPECT_EQ(partial.bytesMoved, 0);
  ASSERT_EQ(partial.results.size(), 1u);
  EXPECT_EQ(partial.results[0].tiles.size(), 4u);
}

TEST_F(ShardedRunnerTest, AFunctionThatDoesNotPartitionFailsAlone) {
  auto runner = compile(R"mlir(
    polymesh.mesh @m = <["x"=2]>
    func.func @init_not_zero(%a: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"x"}]>},
                             %b: tensor<6x4xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>},
                             %c: tensor<4x4xf32>) -> tensor<4x4xf32> {
      %r = linalg.matmul {polymesh.sharding = #polymesh.sharding<@m, [{}, {}], unreduced={"x"}>} ins(%a, %b : tensor<4x6xf32>, tensor<6x4xf32>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
      return %r : tensor<4x4xf32>
    }
    func.func @fine(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<8xf32> {
      %0 = arith.negf %a : tensor<8xf32>
      return %0 : tensor<8xf32>
    }
  )mlir",
                        {"init_not_zero", "fine"});
  ASSERT_TRUE(runner);
  // Partitioning refuses a partial sum over a non-zero init (calls, the
  // case this used to show, are now specialized by propagation).
  auto refused = runner->run("init_not_zero");
  ASSERT_FALSE(bool(refused));
  std::string message = llvm::toString(refused.takeError());
  EXPECT_NE(message.find("--polymesh-partition failed"), std::string::npos)
      << message;
  EXPECT_NE(message.find("its init is not zero"), std::string::npos) << message;
  runAndCompare(*runner, "fine");

  auto unknown = runner->run("missing");
  ASSERT_FALSE(bool(unknown));
  EXPECT_NE(llvm::toString(unknown.takeError()).find("not a function"),
            std::string::npos);
}

TEST_F(ShardedRunnerTest, UnknownFunctionsAreRejected) {
  module = parseSourceString<ModuleOp>(R"mlir(
    polymesh.mesh @m = <["x"=2]>
    func.func @f(%a: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<8xf32> {
      return %a : tensor<8xf32>
    }
  )mlir",
                                       &context);
  ASSERT_TRUE(module);
  auto runner = ShardedRunner::create(*module, {"g"});
  ASSERT_FALSE(bool(runner));
  EXPECT_NE(llvm::toString(runner.takeError()).find("no function named @g"),
            std::string::npos);
}

TEST_F(ShardedRunnerTest, ReorderedSumsAndTheirMagnitudes) {
  // @mm sums over a sharded contracting dimension (16 terms) and returns a
  // negation beside it; @rows shards the rows only, so its sums keep the
  // reference's order.
  auto runner = compile(R"mlir(
    polymesh.mesh @m4 = <["x"=4]>
    func.func @mm(%a: tensor<8x16xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {"x"}]>},
                  %b: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
        -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}, tensor<8x16xf32>) {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<8x8xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
      %r = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
      %n = arith.negf %a : tensor<8x16xf32>
      return %r, %n : tensor<8x8xf32>, tensor<8x16xf32>
    }
    func.func @rows(%a: tensor<8x16xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>},
                    %b: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {}]>}) -> tensor<8x8xf32> {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<8x8xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
      %r = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
      return %r : tensor<8x8xf32>
    }
  )mlir",
                        {"mm", "rows"});
  ASSERT_TRUE(runner);
  auto mm = runner->getFunction("mm");
  ASSERT_TRUE(bool(mm)) << llvm::toString(mm.takeError());
  ASSERT_EQ(mm->reorderedSums.size(), 2u);
  ASSERT_TRUE(mm->reorderedSums[0]);
  EXPECT_EQ(mm->reorderedSums[0]->terms, 16);
  EXPECT_EQ(mm->reorderedSums[0]->resultNumber, 0u);
  EXPECT_FALSE(mm->reorderedSums[1]);
  auto rows = runner->getFunction("rows");
  ASSERT_TRUE(bool(rows)) << llvm::toString(rows.takeError());
  ASSERT_EQ(rows->reorderedSums.size(), 1u);
  EXPECT_FALSE(rows->reorderedSums[0]);

  // The magnitudes are sum_k |a_ik b_kj|: exact here (products of fill
  // values are multiples of 2^-12 below 64, 16 of them fit in f32).
  HostTensor a = makeInput(ElementType::F32, {8, 16}, 0);
  HostTensor b = makeInput(ElementType::F32, {16, 8}, 1);
  auto bounds = computeSumBounds(*module, "mm", mm->reorderedSums, {a, b});
  ASSERT_TRUE(bool(bounds)) << llvm::toString(bounds.takeError());
  ASSERT_EQ(bounds->size(), 2u);
  ASSERT_TRUE((*bounds)[0]);
  EXPECT_FALSE((*bounds)[1]);
  EXPECT_EQ((*bounds)[0]->terms, 16);
  const float *pa = reinterpret_cast<const float *>(a.getData());
  const float *pb = reinterpret_cast<const float *>(b.getData());
  const float *s =
      reinterpret_cast<const float *>((*bounds)[0]->magnitudes.getData());
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      double expected = 0;
      for (int k = 0; k < 16; ++k)
        expected += std::fabs(double(pa[i * 16 + k]) * pb[k * 8 + j]);
      EXPECT_EQ(s[i * 8 + j], expected) << "at [" << i << ", " << j << "]";
    }
  // The module is not changed: the reference still computes the matmul.
  auto func = module->lookupSymbol<func::FuncOp>("mm");
  EXPECT_FALSE(func.getBody().front().getOps<linalg::MatmulOp>().empty());
  runAndCompare(*runner, "rows");
}

TEST_F(ShardedRunnerTest, LockStepContinuesFromTheShardedSums) {
  // A sum over a sharded contracting dimension (4 partials of 16 terms)
  // that feeds more arithmetic: squared, it is compared bit for bit against
  // a reference that continued from the sharded sum, and the sum itself
  // within its bound. A wrong sum, or a device that holds another copy of
  // it, is caught.
  const char *source = R"mlir(
    polymesh.mesh @m4 = <["x"=4]>
    func.func @mm_sq(%a: tensor<8x16xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{}, {"x"}]>},
                     %b: tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>})
        -> (tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@m4, [{"x"}, {}]>}) {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<8x8xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x8xf32>) -> tensor<8x8xf32>
      %r = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x8xf32>) outs(%f : tensor<8x8xf32>) -> tensor<8x8xf32>
      %sq = arith.mulf %r, %r : tensor<8x8xf32>
      return %sq : tensor<8x8xf32>
    }
  )mlir";
  auto plain = compile(source, {"mm_sq"});
  ASSERT_TRUE(plain);
  auto plainFunction = plain->getFunction("mm_sq");
  ASSERT_TRUE(bool(plainFunction));
  EXPECT_TRUE(plainFunction->partialSums.empty());
  int64_t programBytes = plainFunction->bytesMoved;

  ShardedRunnerOptions options;
  options.returnPartialSums = true;
  auto runner = compile(source, {"mm_sq"}, options);
  ASSERT_TRUE(runner);
  auto function = runner->getFunction("mm_sq");
  ASSERT_TRUE(bool(function)) << llvm::toString(function.takeError());
  ASSERT_EQ(function->partialSums.size(), 1u);
  EXPECT_EQ(function->partialSums[0].terms, 16);
  EXPECT_EQ(function->numProgramResults, 1u);
  // The check's all-reduce is not the program's.
  EXPECT_EQ(function->bytesMoved, programBytes);

  auto run = runner->run("mm_sq");
  ASSERT_TRUE(bool(run)) << llvm::toString(run.takeError());
  ASSERT_EQ(run->results.size(), 2u);
  HostTensor a = makeInput(ElementType::F32, {8, 16}, 0);
  HostTensor b = makeInput(ElementType::F32, {16, 8}, 1);
  auto sum = assembleReplicas(run->results[1]);
  ASSERT_TRUE(bool(sum)) << llvm::toString(sum.takeError());

  auto check = [&](const HostTensor &shardedSum, const ShardedTensor &squares,
                   const ShardedTensor &sums) {
    auto continued = continueFromPartialSums(
        *module, "mm_sq", function->partialSums, 1, {shardedSum}, {a, b});
    EXPECT_TRUE(bool(continued)) << llvm::toString(continued.takeError());
    if (!continued)
      return std::pair{false, false};
    EXPECT_EQ(continued->results.size(), 2u);
    EXPECT_FALSE(continued->bounds[0]);
    EXPECT_TRUE(continued->bounds[1]);
    bool squaresMatch =
        !compareWithReference(continued->results[0], squares).has_value();
    bool sumWithinBound =
        compareLeaf(continued->results[1], sums, &*continued->bounds[1])
            .passed();
    return std::pair{squaresMatch, sumWithinBound};
  };
  EXPECT_EQ(check(*sum, run->results[0], run->results[1]),
            std::pair(true, true));

  // One element of the sum off by 1 on every device: the sum is beyond its
  // bound, and the reference continued from it squares another value.
  ShardedTensor wrong = run->results[1];
  for (auto &[device, tile] : wrong.tiles)
    reinterpret_cast<float *>(tile.getData())[5] += 1.0f;
  auto wrongSum = assembleReplicas(wrong);
  ASSERT_TRUE(bool(wrongSum));
  EXPECT_EQ(check(*wrongSum, run->results[0], wrong), std::pair(false, false));

  // Devices that went on with different copies of the sum.
  ShardedTensor split = run->results[1];
  reinterpret_cast<float *>(split.tiles.begin()->second.getData())[0] += 1.0f;
  auto disagreeing = assembleReplicas(split);
  ASSERT_FALSE(bool(disagreeing));
  EXPECT_NE(llvm::toString(disagreeing.takeError())
                .find("devices hold different copies of the element at [0, 0]"),
            std::string::npos);
}

} // namespace
