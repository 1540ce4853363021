#pragma once
// safetensors files (the Hugging Face format): named tensors with no code in
// them, readable by PyTorch, JAX and others. Layout:
//
//   8 bytes     N, the header length, unsigned little-endian
//   N bytes     a JSON object: for each tensor
//                 "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
//               and optionally "__metadata__": {string: string}
//   the rest    the tensors' bytes, row-major, little-endian; offsets count
//               from the start of this part
//
// Supported dtypes: F32, F64, F16, BF16, I32, I64, U8, BOOL (the dtypes of
// ddp::Tensor); files with others (I8, F8_E4M3, ...) are refused by name.
//
// Note [Layering of io]
// io sits below nn in the layer table, so it may use nn's TensorDict and
// Module; nn knows nothing of files. Hence the module helpers
// (save_state_dict / load_state_dict) live here, not as Module methods.

#include <map>
#include <string>

#include "ddp/nn/module.h"
#include "ddp/tensor/ordered_dict.h"

namespace ddp::io {

using Metadata = std::map<std::string, std::string>;

// Writes the tensors in the dict's order, from any device (each is copied
// to the host in turn) and any layout (written contiguously). The file is
// written beside `path` and renamed over it at the end, so a reader never
// sees a half-written file. Raises ValueError for an undefined tensor or the
// reserved name "__metadata__", IoError when the file cannot be written.
void save_safetensors(const std::string& path, const TensorDict& tensors,
                      const Metadata& metadata = {});

// Reads every tensor to the CPU, in the order of the file's header. With
// `metadata`, also returns the "__metadata__" strings. Any malformed file
// raises IoError naming the file and, where one is at fault, the tensor;
// see Note [Validating safetensors files] in safetensors.cpp.
TensorDict load_safetensors(const std::string& path, Metadata* metadata = nullptr);

// The safetensors name of a dtype ("F32", "BF16", "BOOL", ...).
const char* safetensors_dtype_name(DType dtype);

// A module's state_dict() to a file, and a file into a module with
// Module::load_state_dict (same strictness, checks and in-place copies).
void save_state_dict(const std::string& path, const nn::Module& module,
                     const Metadata& metadata = {});
nn::LoadResult load_state_dict(const std::string& path, nn::Module& module, bool strict = true);

}  // namespace ddp::io
