#pragma once
// Whether ops record history. Thread-local, like torch.no_grad().

namespace ddp::autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// RAII scope in which ops record no backward graph.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace ddp::autograd

namespace ddp {
using autograd::NoGradGuard;
}
