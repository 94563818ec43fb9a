//===- ReferenceRunnerTest.cpp - Unsharded reference on small programs ----===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//
//
// Each test parses a small program, runs it through the reference runner on
// the deterministic inputs, and compares every result bit for bit with the
// same computation done in C++ on the fill values.
//
//===----------------------------------------------------------------------===//

#include "polymesh/Execution/ReferenceRunner.h"
#include "polymesh/Dialect/Polymesh/PolymeshDialect.h"
#include "polymesh/Dialect/Polymesh/PolymeshOps.h"
#include "polymesh/Execution/InputFill.h"
#include "polymesh/InitAllDialects.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/APFloat.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <functional>

using namespace mlir;
using namespace polymesh::execution;

namespace {

class ReferenceRunnerTest : public ::testing::Test {
protected:
  ReferenceRunnerTest() {
    DialectRegistry registry;
    // What polymesh-opt and polymesh-run parse; the runner adds the rest.
    polymesh::registerPolymeshInputDialects(registry);
    context.appendDialectRegistry(registry);
    context.getDiagEngine().registerHandler([this](Diagnostic &diag) {
      diagnostics += diag.str() + "\n";
      return success();
    });
  }

  OwningOpRef<ModuleOp> parse(llvm::StringRef source) {
    OwningOpRef<ModuleOp> module =
        parseSourceString<ModuleOp>(source, &context);
    EXPECT_TRUE(module) << diagnostics;
    return module;
  }

  std::unique_ptr<ReferenceRunner>
  compile(llvm::StringRef source, llvm::ArrayRef<std::string> functions = {}) {
    module = parse(source);
    if (!module)
      return nullptr;
    auto runner = ReferenceRunner::create(*module, functions);
    if (!runner) {
      ADD_FAILURE() << llvm::toString(runner.takeError()) << "\n"
                    << diagnostics;
      return nullptr;
    }
    return std::move(*runner);
  }

  /// Runs `name` on the deterministic inputs (argument i is stream i).
  std::vector<HostTensor> runOnFill(ReferenceRunner &runner,
                                    llvm::StringRef name) {
    auto signature = runner.getSignature(name);
    if (!signature) {
      ADD_FAILURE() << llvm::toString(signature.takeError());
      return {};
    }
    std::vector<HostTensor> inputs;
    for (auto [i, arg] : llvm::enumerate(signature->arguments))
      inputs.push_back(makeInput(arg.elementType, arg.shape, i));
    auto results = runner.run(name, inputs);
    if (!results) {
      ADD_FAILURE() << llvm::toString(results.takeError());
      return {};
    }
    return std::move(*results);
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::string diagnostics;
};

/// A tensor of `shape` whose element e is `value(e)`, encoded as `type`.
HostTensor tensorOf(ElementType type, std::vector<int64_t> shape,
                    const std::function<double(int64_t)> &value) {
  HostTensor t(type, std::move(shape));
  for (int64_t e = 0; e < t.getNumElements(); ++e) {
    uint8_t *p = t.getData() + e * elementSize(type);
    double v = value(e);
    auto store = [&](auto x) { std::memcpy(p, &x, sizeof(x)); };
    switch (type) {
    case ElementType::F32:
      store(static_cast<float>(v));
      break;
    case ElementType::F64:
      store(v);
      break;
    case ElementType::F16:
    case ElementType::BF16: {
      // Round to nearest even, as the lowered code must.
      llvm::APFloat f(v);
      bool losesInfo = false;
      f.convert(type == ElementType::F16 ? llvm::APFloat::IEEEhalf()
                                         : llvm::APFloat::BFloat(),
                llvm::APFloat::rmNearestTiesToEven, &losesInfo);
      store(static_cast<uint16_t>(f.bitcastToAPInt().getZExtValue()));
      break;
    }
    case ElementType::I1:
      store(static_cast<uint8_t>(v != 0));
      break;
    case ElementType::I8:
      store(static_cast<int8_t>(v));
      break;
    case ElementType::I32:
      store(static_cast<int32_t>(v));
      break;
    case ElementType::I64:
      store(static_cast<int64_t>(v));
      break;
    }
  }
  return t;
}

/// Rounds a double to the nearest value of `type` (f16 or bf16), as a
/// double.
double roundTo(ElementType type, double v) {
  llvm::APFloat f(v);
  bool losesInfo = false;
  f.convert(type == ElementType::F16 ? llvm::APFloat::IEEEhalf()
                                     : llvm::APFloat::BFloat(),
            llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
            &losesInfo);
  return f.convertToDouble();
}

#define EXPECT_BIT_EXACT(expected, actual)                                     \
  do {                                                                         \
    std::optional<Mismatch> m = compareBitExact(expected, actual);             \
    EXPECT_FALSE(m) << m->message();                                           \
  } while (false)

double in(ElementType type, int64_t g, uint32_t stream) {
  return fillValue(type, g, stream);
}

TEST_F(ReferenceRunnerTest, ElementwiseF32) {
  auto runner = compile(R"mlir(
    func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
      %0 = arith.addf %a, %b : tensor<4x8xf32>
      %1 = arith.mulf %0, %a : tensor<4x8xf32>
      %2 = math.absf %1 : tensor<4x8xf32>
      %3 = arith.subf %2, %b : tensor<4x8xf32>
      return %3 : tensor<4x8xf32>
    })mlir");
  ASSERT_TRUE(runner);
  EXPECT_EQ(runner->getFunctionNames(), std::vector<std::string>{"f"});
  std::vector<HostTensor> results = runOnFill(*runner, "f");
  ASSERT_EQ(results.size(), 1u);
  auto A = [](int64_t e) { return float(in(ElementType::F32, e, 0)); };
  auto B = [](int64_t e) { return float(in(ElementType::F32, e, 1)); };
  EXPECT_BIT_EXACT(tensorOf(ElementType::F32, {4, 8},
                            [&](int64_t e) {
                              float v = std::fabs((A(e) + B(e)) * A(e));
                              return double(v - B(e));
                            }),
                   results[0]);
}

TEST_F(ReferenceRunnerTest, MatmulF32) {
  auto runner = compile(R"mlir(
    func.func @mm(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) -> tensor<4x3xf32> {
      %zero = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<4x3xf32>
      %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x3xf32>) -> tensor<4x3xf32>
      %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x3xf32>)
                         outs(%f : tensor<4x3xf32>) -> tensor<4x3xf32>
      return %m : tensor<4x3xf32>
    })mlir");
  ASSERT_TRUE(runner);
  std::vector<HostTensor> results = runOnFill(*runner, "mm");
  ASSERT_EQ(results.size(), 1u);
  EXPECT_BIT_EXACT(tensorOf(ElementType::F32, {4, 3},
                            [](int64_t e) {
                              int64_t i = e / 3, j = e % 3;
                              float sum = 0;
                              for (int64_t k = 0; k < 8; ++k)
                                sum +=
                                    float(in(ElementType::F32, i * 8 + k, 0)) *
                                    float(in(ElementType::F32, k * 3 + j, 1));
                              return double(sum);
                            }),
                   results[0]);
}

TEST_F(ReferenceRunnerTest, ShardingIsStrippedAndShapesReassociate) {
  auto runner = compile(R"mlir(
    polymesh.mesh @m = <["x"=2, "y"=2]>
    polymesh.mesh @d1 = <[], device_ids=[1]>
    func.func @f(%a: tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}, {}]>})
        -> (tensor<2x2x6xf32> {polymesh.leaf = "expanded"},
            tensor<4x6xf32> {polymesh.sharding = #polymesh.sharding<@d1, [{}, {}]>})
        attributes {polymesh.ambient_mesh = @m} {
      %c = polymesh.sharding_constraint %a <@m, [{"x"}, {"y"}]> : tensor<4x6xf32>
      %e = tensor.expand_shape %c [[0, 1], [2]] output_shape [2, 2, 6]
          : tensor<4x6xf32> into tensor<2x2x6xf32>
      %r = polymesh.reshard %e <@m, [{}, {}, {}]> : tensor<2x2x6xf32>
      %col = tensor.collapse_shape %r [[0, 1], [2]]
          : tensor<2x2x6xf32> into tensor<4x6xf32>
      %n = arith.negf %col {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>} : tensor<4x6xf32>
      %t = polymesh.reshard %n <@d1, [{}, {}]> : tensor<4x6xf32>
      return %r, %t : tensor<2x2x6xf32>, tensor<4x6xf32>
    })mlir");
  ASSERT_TRUE(runner);
  // The runner worked on a clone: the caller's module keeps its sharding.
  EXPECT_EQ(llvm::range_size(module->getOps<polymesh::MeshOp>()), 2u);
  std::vector<HostTensor> results = runOnFill(*runner, "f");
  ASSERT_EQ(results.size(), 2u);
  auto A = [](int64_t e) { return in(ElementType::F32, e, 0); };
  EXPECT_BIT_EXACT(tensorOf(ElementType::F32, {2, 2, 6}, A), results[0]);
  EXPECT_BIT_EXACT(
      tensorOf(ElementType::F32, {4, 6}, [&](int64_t e) { return -A(e); }),
      results[1]);
}

TEST_F(ReferenceRunnerTest, IntegersAndBooleans) {
  auto runner = compile(R"mlir(
    func.func @ints(%a: tensor<16xi32>, %b: tensor<16xi32>, %p: tensor<16xi1>,
                    %x: tensor<3x5xi64>, %y: tensor<3x5xi8>)
        -> (tensor<16xi1>, tensor<16xi32>, tensor<16xi1>, tensor<3x5xi64>, tensor<3x5xi8>) {
      %lt = arith.cmpi slt, %a, %b : tensor<16xi32>
      %sel = arith.select %lt, %a, %b : tensor<16xi1>, tensor<16xi32>
      %m = arith.muli %sel, %b : tensor<16xi32>
      %xor = arith.xori %lt, %p : tensor<16xi1>
      %xx = arith.muli %x, %x : tensor<3x5xi64>
      %yy = arith.subi %y, %y : tensor<3x5xi8>
      %y2 = arith.addi %yy, %y : tensor<3x5xi8>
      %y3 = arith.muli %y2, %y : tensor<3x5xi8>
      return %lt, %m, %xor, %xx, %y3 : tensor<16xi1>, tensor<16xi32>, tensor<16xi1>, tensor<3x5xi64>, tensor<3x5xi8>
    })mlir");
  ASSERT_TRUE(runner);
  std::vector<HostTensor> r = runOnFill(*runner, "ints");
  ASSERT_EQ(r.size(), 5u);
  auto A = [](int64_t e) { return int32_t(in(ElementType::I32, e, 0)); };
  auto B = [](int64_t e) { return int32_t(in(ElementType::I32, e, 1)); };
  auto P = [](int64_t e) { return in(ElementType::I1, e, 2) != 0; };
  EXPECT_BIT_EXACT(
      tensorOf(ElementType::I1, {16}, [&](int64_t e) { return A(e) < B(e); }),
      r[0]);
  EXPECT_BIT_EXACT(
      tensorOf(ElementType::I32, {16},
               [&](int64_t e) { return double(std::min(A(e), B(e)) * B(e)); }),
      r[1]);
  EXPECT_BIT_EXACT(tensorOf(ElementType::I1, {16},
                            [&](int64_t e) { return (A(e) < B(e)) != P(e); }),
                   r[2]);
  // Squares reach 2^62, beyond a double's exact integers: build directly.
  HostTensor squares(ElementType::I64, {3, 5});
  for (int64_t e = 0; e < 15; ++e) {
    int64_t x = int64_t(in(ElementType::I64, e, 3));
    int64_t square = x * x;
    std::memcpy(squares.getData() + 8 * e, &square, 8);
  }
  EXPECT_BIT_EXACT(squares, r[3]);
  EXPECT_BIT_EXACT(tensorOf(ElementType::I8, {3, 5},
                            [&](int64_t e) {
                              int v = int(in(ElementType::I8, e, 4));
                              return double(v * v);
                            }),
                   r[4]);
}

TEST_F(ReferenceRunnerTest, NarrowFloatsRoundOncePerOp) {
  // a * b is rounded to the narrow type, then a is added and the sum is
  // rounded again: the lowering must give exactly that, for bf16 and f16.
  auto runner = compile(R"mlir(
    func.func @bf16(%a: tensor<8x8xbf16>, %b: tensor<8x8xbf16>) -> tensor<8x8xbf16> {
      %p = arith.mulf %a, %b : tensor<8x8xbf16>
      %s = arith.addf %p, %a : tensor<8x8xbf16>
      return %s : tensor<8x8xbf16>
    }
    func.func @f16(%a: tensor<8x8xf16>, %b: tensor<8x8xf16>) -> tensor<8x8xf16> {
      %p = arith.mulf %a, %b : tensor<8x8xf16>
      %s = arith.addf %p, %a : tensor<8x8xf16>
      return %s : tensor<8x8xf16>
    }
    func.func @convert(%a: tensor<8xf32>) -> (tensor<8xbf16>, tensor<8xf64>) {
      %half = arith.constant dense<0.333333343> : tensor<8xf32>
      %x = arith.mulf %a, %half : tensor<8xf32>
      %t = arith.truncf %x : tensor<8xf32> to tensor<8xbf16>
      %w = arith.extf %x : tensor<8xf32> to tensor<8xf64>
      return %t, %w : tensor<8xbf16>, tensor<8xf64>
    })mlir");
  ASSERT_TRUE(runner);
  EXPECT_EQ(runner->getFunctionNames(),
            (std::vector<std::string>{"bf16", "f16", "convert"}));
  for (ElementType type : {ElementType::BF16, ElementType::F16}) {
    std::vector<HostTensor> r =
        runOnFill(*runner, type == ElementType::BF16 ? "bf16" : "f16");
    ASSERT_EQ(r.size(), 1u);
    EXPECT_BIT_EXACT(tensorOf(type, {8, 8},
                              [&](int64_t e) {
                                double a = in(type, e, 0), b = in(type, e, 1);
                                return roundTo(type, a * b) + a;
                              }),
                     r[0]);
  }
  std::vector<HostTensor> r = runOnFill(*runner, "convert");
  ASSERT_EQ(r.size(), 2u);
  auto X = [](int64_t e) {
    return float(in(ElementType::F32, e, 0)) * 0.333333343f;
  };
  EXPECT_BIT_EXACT(
      tensorOf(ElementType::BF16, {8}, [&](int64_t e) { return double(X(e)); }),
      r[0]);
  EXPECT_BIT_EXACT(
      tensorOf(ElementType::F64, {8}, [&](int64_t e) { return double(X(e)); }),
      r[1]);
}

TEST_F(ReferenceRunnerTest, TosaAddBroadcastAndReshape) {
  auto runner = compile(R"mlir(
    func.func @t(%a: tensor<4x8xf32>, %b: tensor<1x8xf32>) -> tensor<8x4xf32> {
      %0 = tosa.add %a, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
      %s = tosa.const_shape {values = dense<[8, 4]> : tensor<2xindex>} : () -> !tosa.shape<2>
      %1 = tosa.reshape %0, %s : (tensor<4x8xf32>, !tosa.shape<2>) -> tensor<8x4xf32>
      return %1 : tensor<8x4xf32>
    })mlir");
  ASSERT_TRUE(runner);
  std::vector<HostTensor> r = runOnFill(*runner, "t");
  ASSERT_EQ(r.size(), 1u);
  // The reshape keeps the row-major order: element e of the result is
  // element e of the sum.
  EXPECT_BIT_EXACT(tensorOf(ElementType::F32, {8, 4},
                            [](int64_t e) {
                              return double(
                                  float(in(ElementType::F32, e, 0)) +
                                  float(in(ElementType::F32, e % 8, 1)));
                            }),
                   r[0]);
}

TEST_F(ReferenceRunnerTest, ResultsAliasingArgumentsConstantsAndCalls) {
  auto runner = compile(R"mlir(
    func.func private @twice(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = arith.addf %x, %x : tensor<4xf32>
      return %0 : tensor<4xf32>
    }
    func.func @f(%a: tensor<4xf32>)
        -> (tensor<4xf32>, tensor<4xf32>, tensor<2x2xi32>, tensor<4xf32>) {
      %c = arith.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>
      %t = func.call @twice(%a) : (tensor<4xf32>) -> tensor<4xf32>
      return %a, %t, %c, %a : tensor<4xf32>, tensor<4xf32>, tensor<2x2xi32>, tensor<4xf32>
    })mlir");
  ASSERT_TRUE(runner);
  // Private functions are not entry points.
  EXPECT_EQ(runner->getFunctionNames(), std::vector<std::string>{"f"});
  std::vector<HostTensor> r = runOnFill(*runner, "f");
  ASSERT_EQ(r.size(), 4u);
  HostTensor a = makeInput(ElementType::F32, {4}, 0);
  EXPECT_BIT_EXACT(a, r[0]);
  EXPECT_BIT_EXACT(
      tensorOf(ElementType::F32, {4},
               [](int64_t e) { return 2 * in(ElementType::F32, e, 0); }),
      r[1]);
  EXPECT_BIT_EXACT(tensorOf(ElementType::I32, {2, 2},
                            [](int64_t e) { return double(e + 1); }),
                   r[2]);
  EXPECT_BIT_EXACT(a, r[3]);
}

TEST_F(ReferenceRunnerTest, StridedSliceAndRankZero) {
  // A strided slice returned as a result is a non-contiguous copy, which
  // the generated code hands to memrefCopy from the C runner utilities.
  auto runner = compile(R"mlir(
    func.func @slice(%a: tensor<4x8xf32>) -> tensor<3x3xf32> {
      %s = tensor.extract_slice %a[1, 1] [3, 3] [1, 2] : tensor<4x8xf32> to tensor<3x3xf32>
      return %s : tensor<3x3xf32>
    }
    func.func @scalar(%a: tensor<f64>, %b: tensor<f64>) -> tensor<f64> {
      %0 = arith.divf %a, %b : tensor<f64>
      return %0 : tensor<f64>
    })mlir");
  ASSERT_TRUE(runner);
  std::vector<HostTensor> r = runOnFill(*runner, "slice");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_BIT_EXACT(tensorOf(ElementType::F32, {3, 3},
                            [](int64_t e) {
                              int64_t i = 1 + e / 3, j = 1 + 2 * (e % 3);
                              return in(ElementType::F32, i * 8 + j, 0);
                            }),
                   r[0]);
  r = runOnFill(*runner, "scalar");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_BIT_EXACT(tensorOf(ElementType::F64, {},
                            [](int64_t) {
                              return in(ElementType::F64, 0, 0) /
                                     in(ElementType::F64, 0, 1);
                            }),
                   r[0]);
}

TEST_F(ReferenceRunnerTest, InputsAreNotWritten) {
  // Without read-only arguments, bufferization would fill %a in place.
  auto runner = compile(R"mlir(
    func.func @f(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
      %one = arith.constant 1.0 : f32
      %0 = linalg.fill ins(%one : f32) outs(%a : tensor<4x4xf32>) -> tensor<4x4xf32>
      return %0 : tensor<4x4xf32>
    })mlir");
  ASSERT_TRUE(runner);
  std::vector<HostTensor> inputs = {makeInput(ElementType::F32, {4, 4}, 0)};
  auto r = runner->run("f", inputs);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_BIT_EXACT(makeInput(ElementType::F32, {4, 4}, 0), inputs[0]);
  EXPECT_BIT_EXACT(
      tensorOf(ElementType::F32, {4, 4}, [](int64_t) { return 1.0; }), (*r)[0]);
  // Running again gives the same result.
  auto again = runner->run("f", inputs);
  ASSERT_TRUE(bool(again));
  EXPECT_BIT_EXACT((*r)[0], (*again)[0]);
}

TEST_F(ReferenceRunnerTest, RunChecksItsInputs) {
  auto runner = compile(R"mlir(
    func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
      return %a : tensor<4xf32>
    })mlir");
  ASSERT_TRUE(runner);
  auto wrongShape = runner->run("f", {HostTensor(ElementType::F32, {5})});
  ASSERT_FALSE(wrongShape);
  EXPECT_EQ(llvm::toString(wrongShape.takeError()),
            "argument #0 of @f must be 4xf32, got 5xf32");
  auto wrongCount = runner->run("f", {});
  ASSERT_FALSE(wrongCount);
  EXPECT_EQ(llvm::toString(wrongCount.takeError()),
            "@f takes 1 arguments, got 0");
  auto unknown = runner->run("g", {});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(llvm::toString(unknown.takeError()),
            "@g is not a function the reference compiled");
}

TEST_F(ReferenceRunnerTest, UnsupportedSignaturesAreReportedPerFunction) {
  // @dyn and @scalar cannot be run, but they do not keep @ok from running.
  // Each message starts where the argument is declared.
  auto runner = compile(R"mlir(
    func.func @dyn(%a: tensor<?xf32>) -> tensor<?xf32> {
      return %a : tensor<?xf32>
    }
    func.func @scalar(%a: f32) -> f32 {
      return %a : f32
    }
    func.func @ok(%a: tensor<2xf32>) -> tensor<2xf32> {
      return %a : tensor<2xf32>
    })mlir");
  ASSERT_TRUE(runner);
  EXPECT_EQ(runner->getFunctionNames(),
            (std::vector<std::string>{"dyn", "scalar", "ok"}));
  auto dyn = runner->getSignature("dyn");
  ASSERT_FALSE(dyn);
  EXPECT_EQ(llvm::toString(dyn.takeError()),
            "-:2:20: argument #0 of @dyn: type 'tensor<?xf32>' is not "
            "supported: "
            "only static shapes are");
  auto scalar = runner->getSignature("scalar");
  ASSERT_FALSE(scalar);
  EXPECT_EQ(llvm::toString(scalar.takeError()),
            "-:5:23: argument #0 of @scalar: type 'f32' is not supported: "
            "only "
            "ranked tensors are");
  std::vector<HostTensor> r = runOnFill(*runner, "ok");
  ASSERT_EQ(r.size(), 1u);
}

TEST_F(ReferenceRunnerTest, UnsupportedOpIsNamed) {
  const char *source = R"mlir(
    func.func @softmax(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
      %e = tensor.empty() : tensor<4x8xf32>
      %0 = linalg.softmax dimension(1) ins(%a : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
      return %0 : tensor<4x8xf32>
    }
    func.func @custom(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
      %0 = tosa.custom %a {operator_name = "foo", domain_name = "bar", implementation_attrs = ""} : (tensor<4x8xf32>) -> tensor<4x8xf32>
      return %0 : tensor<4x8xf32>
    }
    func.func @fine(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
      return %a : tensor<4x8xf32>
    })mlir";
  module = parse(source);
  ASSERT_TRUE(module);

  auto softmax = ReferenceRunner::create(*module, {"softmax"});
  ASSERT_FALSE(softmax);
  EXPECT_EQ(llvm::toString(softmax.takeError()),
            "the unsharded reference has ops that cannot be lowered to LLVM");
  EXPECT_NE(diagnostics.find("'linalg.softmax' is not supported by the "
                             "reference lowering"),
            std::string::npos)
      << diagnostics;

  diagnostics.clear();
  auto custom = ReferenceRunner::create(*module, {"custom"});
  ASSERT_FALSE(custom);
  EXPECT_EQ(llvm::toString(custom.takeError()),
            "lowering the unsharded reference to LLVM failed");
  EXPECT_NE(diagnostics.find("failed to legalize operation 'tosa.custom'"),
            std::string::npos)
      << diagnostics;

  // Selecting a function leaves the others out of the compilation.
  diagnostics.clear();
  auto fine = ReferenceRunner::create(*module, {"fine"});
  ASSERT_TRUE(bool(fine)) << llvm::toString(fine.takeError()) << diagnostics;
  EXPECT_EQ((*fine)->getFunctionNames(), std::vector<std::string>{"fine"});

  auto missing = ReferenceRunner::create(*module, {"nope"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(llvm::toString(missing.takeError()), "no function named @nope");
}

TEST_F(ReferenceRunnerTest, StripShardingRemovesEveryPolymeshOpAndAttr) {
  // All three value identities, meshes, and attributes on ops, arguments,
  // results, functions and the module.
  module = parse(R"mlir(
    module attributes {polymesh.ambient_mesh = @a} {
    polymesh.mesh @a = <["x"=2]>
    polymesh.mesh @train = <["dp"=2, "tp"=2]>
    polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
    func.func @f(%x: tensor<4x8xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>})
        -> (tensor<4x8xf32> {polymesh.leaf = "x"}) attributes {polymesh.ambient_mesh = @a} {
      %0 = polymesh.transfer %x <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
        local_copy chunk 0 devices [0, 1] {0 -> [0], [0, 0] : [4, 4]} {1 -> [1], [0, 4] : [4, 8]},
        broadcast chunk 0 devices [0, 2] {0 -> [2], [0, 0] : [4, 4]},
        broadcast chunk 0 devices [1, 3] {1 -> [3], [0, 4] : [4, 8]}
      ] : tensor<4x8xf32>
      %1 = polymesh.sharding_constraint %0 <@a, [{"x"}, {}]> : tensor<4x8xf32>
      %2 = polymesh.reshard %1 <@train, [{}, {"tp"}]> : tensor<4x8xf32>
      %3 = arith.addf %2, %x {polymesh.sharding = #polymesh.sharding<@train, [{}, {"tp"}]>} : tensor<4x8xf32>
      return %3 : tensor<4x8xf32>
    }
    })mlir");
  ASSERT_TRUE(module);
  ASSERT_TRUE(succeeded(stripSharding(*module)));
  ASSERT_TRUE(succeeded(verify(*module)));
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  EXPECT_EQ(text.find("polymesh"), std::string::npos) << text;
  // What is left adds the argument to itself.
  auto func = *module->getOps<func::FuncOp>().begin();
  auto add = cast<arith::AddFOp>(*func.getBody().front().begin());
  EXPECT_EQ(add.getLhs(), func.getArgument(0));
  EXPECT_EQ(add.getRhs(), func.getArgument(0));
}

} // namespace
