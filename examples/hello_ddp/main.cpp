// hello_ddp: a small end-to-end program that exercises the foundation.
// It fits a linear classifier to a synthetic two-class problem with plain
// gradient descent written against libddp's tensors and autograd, on the GPU
// when one is usable and on the CPU otherwise, and prints the loss curve.
// (Later issues replace it with a 2-rank data-parallel training run.)

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "ddp/ddp.h"

int main(int argc, char** argv) {
  using namespace ddp;
  try {
    const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
    Device device = cuda::is_available() ? Device::cuda(0) : Device::cpu();
    std::string why = cuda::is_available() ? "" : " (no GPU: " + cuda::unavailable_reason() + ")";
    std::printf("libddp %s on %s%s\n", DDP_VERSION_STRING, device.str().c_str(), why.c_str());

    // Two Gaussian blobs in 16 dims: class c has mean +-1 along every axis.
    const int64_t n = 512, d = 16, classes = 2;
    Generator gen(42);
    TensorOptions opts = TensorOptions(kFloat32).device(device);
    Tensor labels = gt(rand({n}, opts, &gen), 0.5).to(kInt64);             // [n] in {0, 1}
    Tensor sign = labels.to(kFloat32) * 2.0 - 1.0;                         // +-1
    Tensor x = randn({n, d}, opts, &gen) + sign.unsqueeze(1).expand({n, d});
    Tensor target = one_hot(labels, classes).to(kFloat32);                 // [n, 2]

    Tensor w = (randn({d, classes}, opts, &gen) * 0.01).detach().set_requires_grad();
    Tensor b = Tensor::zeros({classes}, opts.requires_grad());
    const double lr = 0.5;
    double loss_value = 0;
    for (int step = 0; step <= steps; ++step) {
      Tensor logits = matmul(x, w) + b;
      Tensor loss = -mean(sum(log_softmax(logits, 1) * target, {1}));  // cross-entropy
      loss.backward();
      loss_value = loss.item<float>();
      {
        NoGradGuard no_grad;
        w.add_(w.grad(), -lr);
        b.add_(b.grad(), -lr);
        w.grad().zero_();
        b.grad().zero_();
      }
      if (step % 50 == 0) std::printf("step %4d  loss %.4f\n", step, loss_value);
    }
    Tensor predicted = argmax(matmul(x, w) + b, 1);
    double accuracy = mean(eq(predicted, labels).to(kFloat32)).item<float>();
    std::printf("final loss %.4f  train accuracy %.1f%%\n", loss_value, 100 * accuracy);
    std::printf("{\"loss\": %.6f, \"accuracy\": %.4f, \"device\": \"%s\"}\n", loss_value, accuracy,
                device.str().c_str());
    return accuracy > 0.9 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hello_ddp: %s\n", e.what());
    return 1;
  }
}
