#pragma once
// What both of train_resnet's loops use: the data, the model, the layout,
// the optimizer and its schedule, and test-set evaluation (main.cpp: plain DDP; fault_tolerant.cpp: DDP on
// an ElasticGroup).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/data/data.h"
#include "ddp/dist/init.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/optim/lr_scheduler.h"
#include "ddp/optim/sgd.h"
#include "train_resnet/options.h"

namespace train_resnet {

struct Data {
  ddp::data::DatasetPtr train, test;
  std::vector<ddp::data::TransformPtr> train_transforms, test_transforms;
  int64_t channels = 3, classes = 10;
};

Data load_data(const Options& o);
std::shared_ptr<ddp::nn::models::ResNet> make_model(const std::string& name, int64_t channels,
                                                    int64_t classes);
std::optional<ddp::DType> amp_dtype(const std::string& amp);
// Note [Trainer memory format] in setup.cpp.
bool use_channels_last(const Options& o, const ddp::Device& device);

// The recipe: SGD (Nesterov momentum, weight decay on matrices and
// convolutions only) and warmup + cosine over --epochs epochs of
// steps_per_epoch steps, the warmup from --warmup-steps or else
// --warmup-epochs. The scheduler holds the optimizer, hence the pointers.
struct Recipe {
  int64_t schedule_steps = 0, warmup = 0;
  std::unique_ptr<ddp::optim::SGD> opt;
  std::unique_ptr<ddp::optim::WarmupCosineLR> sched;
};
Recipe make_recipe(const ddp::nn::Module& model, const Options& o, int64_t steps_per_epoch);

struct EvalResult {
  double accuracy = 0, loss = 0;
  int64_t examples = 0;
};
// The test split, sharded over the ranks of `world` (a collective).
EvalResult evaluate(ddp::nn::models::ResNet& model, const Data& d, const Options& o,
                    bool channels_last, ddp::dist::World& world);
// The test split on this process alone (no communication).
EvalResult evaluate_locally(ddp::nn::models::ResNet& model, const Data& d, const Options& o,
                            bool channels_last, const ddp::Device& device);

// train_resnet --fault-tolerant (docs/fault_tolerance.md).
int run_fault_tolerant(const Options& o);

}  // namespace train_resnet
