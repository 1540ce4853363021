#pragma once
// train_gpt's command line (docs/examples.md lists every flag).

#include <cstdint>
#include <string>

namespace train_gpt {

struct Options {
  std::string model = "gpt-tiny";  // gpt-tiny, gpt-mini, gpt2-124m, custom
  int64_t n_layer = 0, n_head = 0, n_embd = 0, block_size = 0;  // 0: the model's value
  double dropout = 0.0;
  std::string data = "text";       // text, synthetic
  std::string data_dir = "/usr/share/games/fortunes";
  int64_t stride = 1;              // between training windows
  int64_t steps = 200;             // optimizer steps of the run (the lr schedule)
  int64_t max_steps = -1;          // stop early at this step; -1: run every step; 0: none
  int64_t batch_size = 32;         // global sequences per optimizer step
  int64_t grad_accum = 1;
  double lr = 1e-3;
  double min_lr = -1;              // -1: lr / 10
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95;
  int64_t warmup_steps = -1;       // -1: 10% of the run
  double grad_clip = 1.0;          // 0: off
  std::string amp = "off";
  double bucket_cap_mb = 25.0;
  std::string comm_hook = "allreduce";  // allreduce, fp16, bf16, powersgd (docs/powersgd.md)
  int64_t powersgd_rank = 4, powersgd_start_iter = 10;
  std::string backend;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool async_checkpoint = false;   // write checkpoints in the background
  bool resume = false;
  bool fault_tolerant = false;     // DDP on an ElasticGroup (fault_tolerant.cpp)
  bool check_replicas = false;     // --fault-tolerant: compare replicas after each change
  std::string metrics;             // --fault-tolerant: one line per committed step
  int64_t metrics_port = 0;       // 0: off; rank r serves PORT + local rank
  std::string job_name;            // Prometheus `job` label; empty: the program's name
  int64_t straggler_every = 10;   // steps between straggler checks (0: off; docs/ddp.md)
  std::string tensorboard;         // event-file folder (rank 0); empty: off
  int64_t log_every = 10;
  int64_t eval_every = 0;          // 0: only at the end
  int64_t val_batches = 20;        // per rank
  bool print_params = false;
  int64_t seed = 0;
  int64_t workers = 1;
  std::string init_from_hf;        // a Hugging Face GPT-2 model.safetensors to start from
  int64_t sample = 0;              // bytes to generate at the end (0: none)
  std::string prompt = "\n";
  double temperature = 1.0;
  int64_t top_k = 0;               // 0: every token
};

Options parse_options(int argc, char** argv);

}  // namespace train_gpt
