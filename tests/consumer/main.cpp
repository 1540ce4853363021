// Links against an installed libddp: a matmul followed by backward.
#include <cmath>
#include <cstdio>

#include "ddp/ddp.h"

int main() {
  using namespace ddp;
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad();
  Tensor b = Tensor::from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2}).set_requires_grad();
  Tensor c = matmul(a, b);  // [[4, 5], [10, 11]]
  sum(c).backward();
  auto cv = c.to_vector<float>();
  auto ga = a.grad().to_vector<float>();  // row sums of b: 1, 1, 2 per row of a
  auto gb = b.grad().to_vector<float>();  // column sums of a: 5, 7, 9 per row of b
  bool ok = cv == std::vector<float>{4, 5, 10, 11} &&
            ga == std::vector<float>{1, 1, 2, 1, 1, 2} &&
            gb == std::vector<float>{5, 5, 7, 7, 9, 9};
  std::printf("libddp %s consumer: matmul+backward %s\n", DDP_VERSION_STRING, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
