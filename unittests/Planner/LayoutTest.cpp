#include "polymesh/Planner/Layout.h"
#include <gtest/gtest.h>
using namespace polymesh::planner;
TEST(Layout, Smoke) {
  Mesh mesh{{{"a", 2}, {"b", 4}}, {}};
  Sharding s = Sharding::replicatedOfRank(2);
  s.dims[0].axes.push_back(AxisRef::whole(mesh, 0));
  auto layout = TensorLayout::create(mesh, s, {5, 3});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->boxAtPosition(4).lo[0], 3);
}
