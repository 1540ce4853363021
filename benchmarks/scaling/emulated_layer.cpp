#include "emulated_layer.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "ddp/autograd/node.h"
#include "ddp/core/error.h"
#include "ddp/io/json.h"

namespace bench {
namespace {

namespace json = ddp::io::json;
using Clock = std::chrono::steady_clock;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw ddp::ValueError(fmt::format("profile {}: {}", path, what));
}

const json::Value& member(const std::string& path, const json::Value& obj, const char* key,
                          json::Value::Kind kind, const std::string& where) {
  const json::Value* v = obj.is_object() ? obj.find(key) : nullptr;
  if (!v) bad(path, fmt::format("{}: no key \"{}\"", where, key));
  if (v->kind() != kind)
    bad(path, fmt::format("{}: \"{}\" is {}, expected {}", where, key, json::kind_name(v->kind()),
                          json::kind_name(kind)));
  return *v;
}

double seconds(const std::string& path, const json::Value& obj, const char* key,
               const std::string& where) {
  const double s = member(path, obj, key, json::Value::Kind::number, where).as_double();
  if (!(s >= 0) || !std::isfinite(s))
    bad(path, fmt::format("{}: \"{}\" must be a finite number >= 0, got {}", where, key, s));
  return s;
}

// [name, [d0, d1, ...]] or [name, [...], "f32" | "i64"]
ProfileTensor tensor_entry(const std::string& path, const json::Value& v,
                           const std::string& where) {
  if (!v.is_array() || v.as_array().size() < 2 || v.as_array().size() > 3 ||
      !v.as_array()[0].is_string() || !v.as_array()[1].is_array())
    bad(path,
        fmt::format("{}: a tensor is [name, [shape...]] or [name, [shape...], dtype]", where));
  const auto& a = v.as_array();
  ProfileTensor t;
  t.name = a[0].as_string();
  if (t.name.empty() || t.name.find('.') != std::string::npos)
    bad(path,
        fmt::format("{}: tensor name \"{}\" must be non-empty and without '.'", where, t.name));
  for (const json::Value& d : a[1].as_array()) {
    const auto n = d.is_number() ? d.as_uint64() : std::nullopt;
    if (!n || *n == 0 || *n > (uint64_t(1) << 40))
      bad(path, fmt::format("{}: tensor {}: dimensions must be positive integers", where, t.name));
    t.shape.push_back(int64_t(*n));
  }
  if (a.size() == 3) {
    const std::string d = a[2].is_string() ? a[2].as_string() : "";
    if (d == "f32")
      t.dtype = ddp::DType::f32;
    else if (d == "i64")
      t.dtype = ddp::DType::i64;
    else
      bad(path, fmt::format("{}: tensor {}: dtype must be \"f32\" or \"i64\"", where, t.name));
  }
  return t;
}

void sleep_until(Clock::time_point deadline) {
  if (Clock::now() < deadline) std::this_thread::sleep_until(deadline);
}

}  // namespace

Profile load_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path, "cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  json::Value root;
  try {
    root = json::parse(ss.str());
  } catch (const ddp::ValueError& e) {
    bad(path, fmt::format("not JSON: {}", e.what()));
  }
  if (!root.is_object()) bad(path, "the top level must be an object");
  using K = json::Value::Kind;
  Profile p;
  p.path = path;
  p.name = member(path, root, "name", K::string, "top level").as_string();
  p.sample = member(path, root, "sample", K::string, "top level").as_string();
  const auto sps = member(path, root, "samples_per_step", K::number, "top level").as_uint64();
  if (!sps || *sps == 0) bad(path, "\"samples_per_step\" must be a positive integer");
  p.samples_per_step = int64_t(*sps);
  p.step_s = seconds(path, root, "step_s", "top level");
  p.optimizer_s = seconds(path, root, "optimizer_s", "top level");
  std::set<std::string> names;  // full parameter and buffer names
  for (const json::Value& l : member(path, root, "layers", K::array, "top level").as_array()) {
    const std::string where = fmt::format("layer {}", p.layers.size());
    ProfileLayer layer;
    layer.name = member(path, l, "name", K::string, where).as_string();
    const std::string lw = fmt::format("layer \"{}\"", layer.name);
    if (layer.name.empty() || layer.name.front() == '.' || layer.name.back() == '.' ||
        layer.name.find("..") != std::string::npos)
      bad(path, fmt::format("{}: a layer name is a dotted module path", lw));
    for (const json::Value& t : member(path, l, "params", K::array, lw).as_array()) {
      layer.params.push_back(tensor_entry(path, t, lw));
      if (layer.params.back().dtype != ddp::DType::f32)
        bad(path, fmt::format("{}: parameters are f32", lw));
    }
    if (const json::Value* b = l.find("buffers"); b && !b->is_null()) {
      if (!b->is_array()) bad(path, fmt::format("{}: \"buffers\" must be an array", lw));
      for (const json::Value& t : b->as_array()) layer.buffers.push_back(tensor_entry(path, t, lw));
    }
    if (const json::Value* u = l.find("uses"); u && !u->is_null()) {
      if (!u->is_array()) bad(path, fmt::format("{}: \"uses\" must be an array", lw));
      for (const json::Value& n : u->as_array()) {
        if (!n.is_string() || !names.count(n.as_string()))
          bad(path, fmt::format("{}: \"uses\" names a parameter no earlier layer has", lw));
        layer.uses.push_back(n.as_string());
      }
    }
    for (const auto* list : {&layer.params, &layer.buffers})
      for (const ProfileTensor& t : *list)
        if (!names.insert(layer.name + "." + t.name).second)
          bad(path, fmt::format("{}: duplicate name {}.{}", lw, layer.name, t.name));
    layer.forward_s = seconds(path, l, "forward_s", lw);
    layer.backward_s = seconds(path, l, "backward_s", lw);
    p.layers.push_back(std::move(layer));
  }
  bool any_param = false;
  for (const auto& l : p.layers) any_param |= !l.params.empty();
  if (!any_param) bad(path, "no layer has parameters");
  return p;
}

// ---- EmulatedLayer -----------------------------------------------------------

static std::chrono::nanoseconds stretched(double s, double stretch) {
  return std::chrono::nanoseconds(int64_t(std::llround(s * stretch * 1e9)));
}

EmulatedLayer::EmulatedLayer(const ProfileLayer& layer, double stretch, float grad_value)
    : UnaryModule("EmulatedLayer"),
      label_("emulated:" + layer.name),
      forward_(stretched(layer.forward_s, stretch)),
      backward_(stretched(layer.backward_s, stretch)),
      grad_value_(grad_value) {
  for (const ProfileTensor& t : layer.params)
    inputs_.push_back(register_parameter(t.name, ddp::Tensor::zeros(t.shape)));
  for (const ProfileTensor& t : layer.buffers)
    register_buffer(t.name, ddp::Tensor::zeros(t.shape, t.dtype));
}

void EmulatedLayer::make_gradients() {
  grads_.clear();
  for (const ddp::Tensor& p : inputs_) grads_.push_back(ddp::Tensor::full(p.shape(), grad_value_));
}

std::string EmulatedLayer::extra_repr() const {
  return fmt::format("forward={}us, backward={}us", forward_.count() / 1000,
                     backward_.count() / 1000);
}

// See Note [Emulated gradients].
ddp::Tensor EmulatedLayer::forward(const ddp::Tensor& x) {
  const auto start = Clock::now();
  ddp::Tensor y = ddp::Tensor::zeros({1});
  ddp::Tensors in{x};
  in.insert(in.end(), inputs_.begin(), inputs_.end());
  const bool need_x = x.requires_grad();
  ddp::autograd::record(label_.c_str(), in, {y},
                        [grads = grads_, bwd = backward_, need_x](const ddp::Tensors& g) {
                          const auto t0 = Clock::now();
                          ddp::Tensors out;
                          out.reserve(grads.size() + 1);
                          out.push_back(need_x ? g[0] : ddp::Tensor());
                          out.insert(out.end(), grads.begin(), grads.end());
                          if (bwd.count() > 0) sleep_until(t0 + bwd);
                          return out;
                        });
  if (forward_.count() > 0) sleep_until(start + forward_);
  return y;
}

// ---- EmulatedModel -----------------------------------------------------------

EmulatedModel::EmulatedModel(const Profile& profile, double stretch, int rank)
    : UnaryModule("EmulatedModel") {
  DDP_CHECK(stretch > 0, "EmulatedModel: stretch must be positive, got {}", stretch);
  // Containers for the dotted prefixes, so parameters keep the real model's
  // names ("layer1.0.conv1.weight") and, pre-order, its order.
  std::map<std::string, Module*> containers{{"", this}};
  for (const ProfileLayer& l : profile.layers) {
    std::string parent;
    size_t pos = 0;
    for (size_t dot; (dot = l.name.find('.', pos)) != std::string::npos; pos = dot + 1) {
      const std::string path = l.name.substr(0, dot);
      if (!containers.count(path)) {
        auto c = std::make_shared<Module>("Module");
        containers[parent]->register_module(path.substr(parent.empty() ? 0 : parent.size() + 1), c);
        containers[path] = c.get();
      }
      parent = path;
    }
    auto layer = std::make_shared<EmulatedLayer>(l, stretch, grad_value(rank));
    containers[parent]->register_module(l.name.substr(pos), layer);
    for (const std::string& u : l.uses) layer->inputs_.push_back(parameter(u));
    layer->make_gradients();
    chain_.push_back(std::move(layer));
  }
}

ddp::Tensor EmulatedModel::input() { return ddp::Tensor::zeros({1}); }

ddp::Tensor EmulatedModel::forward(const ddp::Tensor& x) {
  ddp::Tensor y = x;
  for (auto& l : chain_) y = (*l)(y);  // through the call operator: its hooks run
  return y;
}

float EmulatedModel::grad_value(int rank) { return float(rank + 1) / 1024.0f; }

int64_t EmulatedModel::check_gradients(double per_use, std::string* what) const {
  std::unordered_map<const ddp::TensorImpl*, int> uses;
  for (const auto& l : chain_)
    for (const ddp::Tensor& p : l->inputs_) ++uses[p.impl()];
  int64_t bad_params = 0;
  for (const auto& [name, p] : named_parameters()) {
    const double want = per_use * uses[p.impl()];
    const ddp::Tensor g = p.grad().defined() ? p.grad().contiguous() : ddp::Tensor();
    std::string problem;
    if (!g.defined()) {
      problem = "no gradient";
    } else {
      const float* d = g.data<float>();
      for (float got : {d[0], d[g.numel() - 1]})
        if (std::abs(double(got) - want) > 1e-6 * std::abs(want))
          problem = fmt::format("gradient {} where {} was expected", got, want);
    }
    if (!problem.empty() && bad_params++ == 0 && what) *what = name + ": " + problem;
  }
  return bad_params;
}

}  // namespace bench
