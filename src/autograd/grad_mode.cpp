// The grad-mode switch. It is thread_local so that a data-loader or
// communication thread running under NoGradGuard never turns recording off
// for the training thread (and vice versa).

#include "ddp/autograd/grad_mode.h"

namespace ddp::autograd {

namespace {
thread_local bool t_grad_enabled = true;
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

}  // namespace ddp::autograd
