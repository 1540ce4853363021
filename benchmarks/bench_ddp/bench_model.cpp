#include "bench_model.h"

#include "ddp/nn/functional/loss.h"
#include "ddp/tensor/generator.h"

namespace bench {

namespace {

int64_t seq_len(const Options& o) { return o.seq_len > 0 ? o.seq_len : default_seq_len(o.model); }

int64_t image_side(const Options& o) {
  return o.image_size > 0 ? o.image_size : default_image_size(o.model);
}

}  // namespace

BenchModel make_bench_model(const Options& o) {
  ddp::manual_seed(1234);
  BenchModel m;
  if (is_gpt(o.model)) {
    const auto c = gpt_config(o.model, seq_len(o));
    m.module = std::make_shared<ddp::nn::models::GPT>(c);
    const int64_t vocab = c.vocab_size;
    m.loss = [vocab](const ddp::Tensor& out, const ddp::Tensor& y) {
      return ddp::nn::functional::cross_entropy(out.reshape({-1, vocab}), y.reshape({-1}));
    };
  } else {
    m.module = make_resnet(o.model);
    m.loss = [](const ddp::Tensor& out, const ddp::Tensor& y) {
      return ddp::nn::functional::cross_entropy(out, y);
    };
  }
  m.module->to(o.device);
  for (const ddp::Tensor& p : m.module->parameters()) {
    m.num_params += p.numel();
    m.grad_bytes += p.nbytes();
  }
  return m;
}

Batch make_batch(const Options& o, int rank) {
  const uint64_t seed = 99 + uint64_t(rank);
  if (is_gpt(o.model))
    return synthetic_tokens(o.batch_size, seq_len(o), gpt_config(o.model, seq_len(o)).vocab_size,
                            o.device, seed);
  return synthetic_images(o.batch_size, image_side(o), num_classes(o.model), o.device, seed);
}

}  // namespace bench
