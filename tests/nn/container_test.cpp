// Tests of the containers (ddp/nn/container.h): Sequential chaining, index
// names and nesting, typed access, ModuleList, Functional.
#include <memory>
#include <string>
#include <vector>

#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

using ::testing::ElementsAre;

std::shared_ptr<nn::Functional> affine(double mul, double add) {
  return std::make_shared<nn::Functional>([=](const Tensor& x) { return x * mul + add; }, "Affine");
}

TEST(Sequential, ChainsModulesInOrder) {
  nn::Sequential seq;
  seq.push_back(affine(2.0, 0.0));  // x * 2
  seq.push_back(affine(1.0, 3.0));  // then + 3
  Tensor x = Tensor::from_vector<float>({1, 2}, {2});
  EXPECT_EQ(values(seq.forward(x)), (std::vector<double>{5, 7}));
  EXPECT_EQ(values(seq(x)), (std::vector<double>{5, 7}));
  EXPECT_EQ(seq.size(), 2u);
}

TEST(Sequential, EmptySequentialReturnsItsInput) {
  nn::Sequential seq;
  Tensor x = Tensor::ones({3});
  EXPECT_TRUE(seq.forward(x).is_same(x));
  EXPECT_TRUE(seq.empty());
}

TEST(Sequential, ChildrenAreNamedByIndexAndNest) {
  manual_seed(0);
  auto inner =
      std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
          relu_module(), std::make_shared<TestLinear>(2, 2)});
  nn::Sequential outer{std::make_shared<TestLinear>(3, 2), inner};
  EXPECT_THAT(outer.named_children().keys(), ElementsAre("0", "1"));
  EXPECT_THAT(outer.named_parameters().keys(),
              ElementsAre("0.weight", "0.bias", "1.1.weight", "1.1.bias"));
  EXPECT_EQ(outer.at<TestLinear>(0)->path(), "0");
  EXPECT_EQ(inner->at<TestLinear>(1)->path(), "1.1");
}

TEST(Sequential, NamedChildren) {
  nn::Sequential seq;
  seq.push_back("conv0", std::make_shared<TestLinear>(2, 2));
  seq.push_back(relu_module());  // index names still count positions
  EXPECT_THAT(seq.named_children().keys(), ElementsAre("conv0", "1"));
  EXPECT_DDP_ERROR(seq.push_back("conv0", relu_module()), ValueError, "already a submodule");
}

TEST(Sequential, TypedAccessChecksIndexAndType) {
  nn::Sequential seq;
  seq.push_back(std::make_shared<TestLinear>(2, 2));
  EXPECT_NE(seq.at<TestLinear>(0), nullptr);
  EXPECT_EQ(seq[0]->name(), "Linear");
  EXPECT_DDP_ERROR(seq.at<TestBatchNorm1d>(0), ValueError,
                   "module 0 is a Linear, not the requested type");
  EXPECT_DDP_ERROR(seq.at<TestLinear>(1), IndexError, "index 1 out of range for 1 modules");
  EXPECT_DDP_ERROR(seq[5], IndexError, "index 5 out of range");
  int n = 0;
  for (const auto& m : seq) n += m->name() == "Linear";
  EXPECT_EQ(n, 1);
}

TEST(Sequential, GradientsFlowThroughTheChain) {
  manual_seed(1);
  auto mlp = make_mlp();
  Tensor loss = sum(mlp->forward(randn({5, 4})));
  loss.backward();
  for (const auto& [name, p] : mlp->named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
}

TEST(ModuleList, HoldsAnyModulesByIndex) {
  nn::ModuleList list;
  list.push_back(std::make_shared<TestLinear>(2, 3));
  list.push_back(std::make_shared<TestBatchNorm1d>(3));
  EXPECT_EQ(list.size(), 2u);
  EXPECT_THAT(list.state_dict().keys(),
              ElementsAre("0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                          "1.running_var", "1.num_batches_tracked"));
  EXPECT_EQ(list.at<TestBatchNorm1d>(1)->name(), "BatchNorm1d");
  EXPECT_EQ(list[0]->name(), "Linear");
  // The owner runs the layers itself.
  Tensor x = randn({4, 2});
  for (const auto& m : list) x = std::dynamic_pointer_cast<nn::UnaryModule>(m)->forward(x);
  EXPECT_EQ(x.shape(), (Shape{4, 3}));
}

TEST(Functional, NeedsAFunction) {
  EXPECT_DDP_ERROR(nn::Functional(nullptr, "Nothing"), ValueError, "Nothing: empty function");
  nn::Functional f([](const Tensor& x) { return x + 1.0; });
  EXPECT_EQ(f.name(), "Functional");
  EXPECT_EQ(f.num_parameters(), 0);
}

}  // namespace
}  // namespace ddp::test
