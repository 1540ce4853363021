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

#include "command_line.h"
#include "ddp/core/error.h"
#include "ddp/nn/models/gpt.h"
#include "ddp/nn/models/resnet.h"

namespace {

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return s;
}

constexpr const char* kUsage =
    "usage: model_info MODEL [--in-channels N] [--classes N] [--names]\n"
    "models: resnet18 resnet34 resnet50 resnet101 resnet20 resnet32 resnet56 gpt2_124m\n";

int usage(const std::string& why) {
  std::fprintf(stderr, "model_info: %s\n%s", why.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddp::nn::models;
  if (argc < 2) return usage("no model given");
  const std::string name = argv[1];
  ResNetOptions imagenet, cifar{3, 10};
  bool names = false;
  int64_t in_channels = imagenet.in_channels, classes = imagenet.num_classes;
  ddp_cli::CommandLine cli("model_info", "");
  cli.set_usage(kUsage);
  cli.usage_on_error();
  cli.add_int("--in-channels", &in_channels, "", 1);
  cli.add_int("--classes", &classes, "", 1);
  cli.add_flag("--names", &names, "");
  try {
    cli.parse(argc - 1, argv + 1);  // after MODEL
  } catch (const ddp_cli::UsageExit& e) {
    std::fputs(e.what(), e.code == 0 ? stdout : stderr);
    return e.code;
  }
  if (cli.given("--in-channels")) imagenet.in_channels = cifar.in_channels = in_channels;
  if (cli.given("--classes")) imagenet.num_classes = cifar.num_classes = classes;
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
