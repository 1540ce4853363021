#include "ddp/nn/loss.h"

namespace ddp::nn {

namespace {
const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::none:
      return "none";
    case Reduction::sum:
      return "sum";
    case Reduction::mean:
      break;
  }
  return "mean";
}
}  // namespace

CrossEntropyLoss::CrossEntropyLoss(Reduction reduction, double label_smoothing,
                                   int64_t ignore_index)
    : Module("CrossEntropyLoss"),
      reduction_(reduction),
      label_smoothing_(label_smoothing),
      ignore_index_(ignore_index) {
  DDP_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
            "CrossEntropyLoss: label_smoothing must be in [0, 1], got {}", label_smoothing);
}

Tensor CrossEntropyLoss::forward(const Tensor& logits, const Tensor& target) {
  return functional::cross_entropy(logits, target, reduction_, label_smoothing_, ignore_index_);
}

std::string CrossEntropyLoss::extra_repr() const {
  return fmt::format("reduction={}, label_smoothing={}, ignore_index={}",
                     reduction_name(reduction_), label_smoothing_, ignore_index_);
}

MSELoss::MSELoss(Reduction reduction) : Module("MSELoss"), reduction_(reduction) {}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return functional::mse_loss(input, target, reduction_);
}

}  // namespace ddp::nn
