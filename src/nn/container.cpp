// Sequential and Functional (container.h).

#include "ddp/nn/container.h"

namespace ddp::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules)
    : UnaryModule("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& m : modules_) y = (*m)(y);
  return y;
}

Functional::Functional(Fn fn, std::string name) : UnaryModule(std::move(name)), fn_(std::move(fn)) {
  DDP_CHECK(fn_ != nullptr, "{}: empty function", describe());
}

}  // namespace ddp::nn
