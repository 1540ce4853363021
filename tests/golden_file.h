#pragma once
// The tensors a generator in tests/golden/ (make_<name>_golden.py) wrote to
// golden/<name>.safetensors under DDP_TEST_DATA_DIR, read once per process
// and shared by every test of the suite.
#include <map>
#include <mutex>
#include <string>

#include "ddp/io/safetensors.h"

namespace ddp::test {

inline const nn::TensorDict& golden_file(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, nn::TensorDict> files;  // references stay valid on insert
  std::lock_guard<std::mutex> lock(mu);
  auto it = files.find(name);
  if (it == files.end())
    it = files
             .emplace(name, io::load_safetensors(std::string(DDP_TEST_DATA_DIR) + "/golden/" +
                                                 name + ".safetensors"))
             .first;
  return it->second;
}

}  // namespace ddp::test
