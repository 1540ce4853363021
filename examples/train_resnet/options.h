#pragma once
// train_resnet's command line (docs/examples.md lists every flag).

#include <cstdint>
#include <string>

#include "ddp/data/device_decode.h"

namespace train_resnet {

struct Options {
  std::string model = "resnet20";
  std::string data = "fashion-mnist";
  std::string data_dir;            // empty: the default folder of --data
  int64_t holdout_every = 10;      // imagefolder: without PATH/val, the test part
  bool no_dct_scaling = false;     // imagefolder/packed: decode every JPEG at full size
  // imagefolder/packed: cuda decodes the training JPEGs on the GPU (DeviceDecodeLoader)
  ddp::data::DecodeDevice decode_device = ddp::data::DecodeDevice::cpu;
  int64_t epochs = 2;
  int64_t max_steps = 0;           // 0: run every epoch
  int64_t batch_size = 128;        // global, over all ranks
  double lr = 0.1;                 // for the global batch
  double momentum = 0.9;
  double weight_decay = 5e-4;      // not on biases and BatchNorm parameters
  int64_t warmup_steps = -1;       // -1: from warmup_epochs
  double warmup_epochs = 0.2;
  double min_lr = 0.0;
  std::string amp = "off";         // off, bf16, f16
  std::string memory_format = "auto";  // auto, contiguous, channels-last (memory_format.h)
  bool sync_bn = false;
  double bucket_cap_mb = 25.0;
  std::string comm_hook = "allreduce";  // allreduce, fp16, bf16, powersgd
  int64_t powersgd_rank = 1;
  int64_t powersgd_start_iter = 100;    // plain allreduce for the first steps
  std::string backend;             // empty: the device's default
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;    // steps; 0: only at the end
  bool async_checkpoint = false;   // write checkpoints in the background
  bool resume = false;
  bool fault_tolerant = false;     // DDP on an ElasticGroup (fault_tolerant.cpp)
  bool check_replicas = false;     // --fault-tolerant: compare replicas after each change
  std::string metrics;
  int64_t metrics_port = 0;       // 0: off; rank r serves PORT + local rank
  std::string job_name;            // Prometheus `job` label; empty: the program's name
  int64_t straggler_every = 10;   // steps between straggler checks (0: off; docs/ddp.md)
  std::string tensorboard;         // event-file folder (rank 0); empty: off
  int64_t log_every = 20;
  bool print_params = false;
  int64_t seed = 0;
  int64_t workers = 1;
  int64_t eval_limit = 0;          // 0: the whole test split
  int64_t synthetic_size = 12800;  // training examples of --data synthetic
  int64_t image_size = 0;          // synthetic only; 0: 32 for CIFAR-style models, else 224
};

// Parses argv; exits 2 on a bad flag (naming it) and 0 after --help.
// --data imagefolder:PATH or packed:PATH, and its PATH.
bool is_image_data(const std::string& data);
std::string image_data_path(const std::string& data);

Options parse_options(int argc, char** argv);

}  // namespace train_resnet
