#include "bench_model.h"

#include "ddp/nn/functional/loss.h"
#include "ddp/nn/models/gpt.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"

namespace bench {

namespace {

bool is_gpt(const Options& o) { return o.model.rfind("gpt", 0) == 0; }

ddp::nn::models::GPTConfig gpt_config(const Options& o) {
  ddp::nn::models::GPTConfig c;  // GPT-2 124M
  if (o.model == "gpt-tiny") {
    c.vocab_size = 256;
    c.block_size = 64;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 128;
  }
  if (o.seq_len > 0) c.block_size = std::max<int64_t>(c.block_size, o.seq_len);
  return c;
}

int image_side(const Options& o) {
  if (o.image_size > 0) return o.image_size;
  return o.model == "resnet20" ? 32 : 224;
}

int seq_len(const Options& o) {
  if (o.seq_len > 0) return o.seq_len;
  return o.model == "gpt-tiny" ? 64 : 1024;
}

}  // namespace

BenchModel make_bench_model(const Options& o) {
  ddp::manual_seed(1234);
  BenchModel m;
  if (is_gpt(o)) {
    auto c = gpt_config(o);
    m.module = std::make_shared<ddp::nn::models::GPT>(c);
    const int64_t vocab = c.vocab_size;
    m.loss = [vocab](const ddp::Tensor& out, const ddp::Tensor& y) {
      return ddp::nn::functional::cross_entropy(out.reshape({-1, vocab}), y.reshape({-1}));
    };
  } else {
    if (o.model == "resnet20")
      m.module = ddp::nn::models::resnet20({.in_channels = 3, .num_classes = 10});
    else
      m.module = ddp::nn::models::resnet50();
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
  ddp::Generator gen(99 + uint64_t(rank));
  Batch b;
  const int64_t n = o.batch_size;
  if (is_gpt(o)) {
    const double vocab = double(gpt_config(o).vocab_size) - 0.001;
    b.x = ddp::mul(ddp::rand({n, seq_len(o)}, {}, &gen), vocab).to(ddp::DType::i64);
    b.y = ddp::mul(ddp::rand({n, seq_len(o)}, {}, &gen), vocab).to(ddp::DType::i64);
  } else {
    const int64_t side = image_side(o);
    const double classes = (o.model == "resnet20" ? 10 : 1000) - 0.001;
    b.x = ddp::randn({n, 3, side, side}, {}, &gen);
    b.y = ddp::mul(ddp::rand({n}, {}, &gen), classes).to(ddp::DType::i64);
  }
  b.x = b.x.to(o.device);
  b.y = b.y.to(o.device);
  return b;
}

}  // namespace bench
