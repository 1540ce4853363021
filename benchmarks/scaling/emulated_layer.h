#pragma once
// The GPU-regime twin's model (run.sh --compute emulated; docs/benchmarks.md,
// "GPU-regime twin"): a chain of layers read from a compute profile
// (benchmarks/scaling/profiles/*.json). Every layer registers the real
// model's parameters (names, shapes, f32) and buffers, so DDP builds the same
// buckets in the same order; its forward and its backward *take* the
// profile's seconds × the time stretch instead of computing, sleeping (not
// spinning) so that gloo and the network get the CPU, as on a GPU node.
//
//   auto profile = bench::load_profile("benchmarks/scaling/profiles/resnet50.json");
//   auto model = std::make_shared<bench::EmulatedModel>(profile, /*stretch=*/10.0, rank);
//   DistributedDataParallel<nn::UnaryModule> ddp_model(model, group);
//   ddp_model(bench::EmulatedModel::input()).backward();   // grads of every parameter
//
// Note [Emulated gradients]
// The backward of layer L runs, in the engine's thread and order, a node
// recorded with the public autograd API (autograd::record): its inputs are
// the activation and L's parameters (and the earlier parameters it uses
// again: a tied LM head), so each parameter's accumulator, and with it the
// DDP hook, fires when the real model's would. The node returns, for each
// parameter, a gradient of its shape filled with grad_value(rank) =
// (rank + 1) / 1024 (exact in f32; the mean over N ranks is exact too),
// made once at construction: on a GPU node producing it costs the CPU
// nothing, and a fresh 0.5 GB each step costs this CPU a page fault per
// 4 KiB. Neither engine stores it or writes to it (libddp's AccumulateGrad
// copies or adds it, Note [Gradient ownership]; torch's clones or adds a
// gradient someone else holds). Then the node sleeps out the layer's
// backward time. After a synchronised step every
// gradient is uses × (N + 1) / 2048, after a no_sync step uses × (rank + 1)
// / 1024: check_gradients() asserts it, so the twin proves the reduction
// ran. The activation is a 1-element tensor: only gradients travel.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/nn/module.h"
#include "ddp/tensor/tensor.h"

namespace bench {

struct ProfileTensor {
  std::string name;
  ddp::Shape shape;
  ddp::DType dtype = ddp::DType::f32;
};

struct ProfileLayer {
  std::string name;  // the real module path: "layer1.0.conv1"
  std::vector<ProfileTensor> params, buffers;
  std::vector<std::string> uses;  // full names of earlier layers' parameters
  double forward_s = 0, backward_s = 0;
};

struct Profile {
  std::string name, sample, path;
  int64_t samples_per_step = 0;
  double step_s = 0, optimizer_s = 0;
  std::vector<ProfileLayer> layers;
};

// Reads and checks a profile; ValueError naming the file and the problem
// (unreadable, not JSON, a missing or mistyped key, a negative time, a
// duplicate or unknown parameter name).
Profile load_profile(const std::string& path);

class EmulatedModel;

class EmulatedLayer : public ddp::nn::UnaryModule {
 public:
  EmulatedLayer(const ProfileLayer& layer, double stretch, float grad_value);
  ddp::Tensor forward(const ddp::Tensor& x) override;
  std::string extra_repr() const override;

 private:
  friend class EmulatedModel;
  void make_gradients();  // once inputs_ is complete
  std::string label_;
  ddp::Tensors inputs_;  // own parameters, then the used ones
  ddp::Tensors grads_;   // parallel to inputs_: what backward returns
  std::chrono::nanoseconds forward_, backward_;
  float grad_value_;
};

class EmulatedModel : public ddp::nn::UnaryModule {
 public:
  EmulatedModel(const Profile& profile, double stretch, int rank);
  // The chain's input: f32 [1] zeros.
  static ddp::Tensor input();
  ddp::Tensor forward(const ddp::Tensor& x) override;
  // (rank + 1) / 1024: what each layer's backward writes (Note [Emulated
  // gradients]).
  static float grad_value(int rank);
  // Checks the first and last element of every parameter's gradient against
  // `per_use` × the number of layers using it; returns the number of
  // mismatching parameters and the first one in *what.
  int64_t check_gradients(double per_use, std::string* what) const;

 private:
  std::vector<std::shared_ptr<EmulatedLayer>> chain_;
};

}  // namespace bench
