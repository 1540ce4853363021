// model_info: prints the parameter count (and with --names, the state_dict
// names and shapes) of libddp's models, like torchinfo's summary line.
//
//   model_info resnet50                   # resnet50: 25,557,032 parameters
//   model_info resnet20 --in-channels 1 --classes 10
//   model_info gpt2_124m --names
//
// Exit status 2 for an unknown model or a bad option.

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "ddp/core/error.h"
#include "ddp/nn/models/gpt.h"
#include "ddp/nn/models/resnet.h"

namespace {

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return s;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "model_info: %s\nusage: model_info MODEL [--in-channels N] [--classes N] [--names]\n"
               "models: resnet18 resnet34 resnet50 resnet101 resnet20 resnet32 resnet56 gpt2_124m\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddp::nn::models;
  if (argc < 2) return usage("no model given");
  const std::string name = argv[1];
  ResNetOptions imagenet, cifar{3, 10};
  bool names = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> int64_t {
      if (i + 1 >= argc) std::exit(usage((a + " needs a value").c_str()));
      char* end = nullptr;
      const long long v = std::strtoll(argv[++i], &end, 10);
      if (!end || *end || v < 1) std::exit(usage((a + " needs a positive integer").c_str()));
      return v;
    };
    if (a == "--in-channels")
      imagenet.in_channels = cifar.in_channels = value();
    else if (a == "--classes")
      imagenet.num_classes = cifar.num_classes = value();
    else if (a == "--names")
      names = true;
    else
      return usage(("unknown option " + a).c_str());
  }
  const std::map<std::string, std::function<std::shared_ptr<ddp::nn::Module>()>> models = {
      {"resnet18", [&] { return resnet18(imagenet); }},
      {"resnet34", [&] { return resnet34(imagenet); }},
      {"resnet50", [&] { return resnet50(imagenet); }},
      {"resnet101", [&] { return resnet101(imagenet); }},
      {"resnet20", [&] { return resnet20(cifar); }},
      {"resnet32", [&] { return resnet32(cifar); }},
      {"resnet56", [&] { return resnet56(cifar); }},
      {"gpt2_124m", [] { return gpt2_124m(); }},
  };
  auto it = models.find(name);
  if (it == models.end()) return usage(("unknown model " + name).c_str());
  try {
    auto m = it->second();
    if (names)
      for (const auto& [k, t] : m->state_dict())
        std::printf("%-50s %s\n", k.c_str(), t.describe().c_str());
    std::printf("%s: %s parameters\n", name.c_str(), with_commas(m->num_parameters()).c_str());
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "model_info: %s\n", e.what());
    return 1;
  }
  return 0;
}
