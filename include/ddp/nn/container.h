#pragma once
// Containers: Sequential chains unary modules, ModuleList holds any modules,
// Functional wraps a tensor function as a unary module. Children are named
// by their index ("0", "1", ...) unless given a name, as in PyTorch, so a
// Sequential's parameters are "0.weight", "2.bias", ...

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ddp/nn/module.h"

namespace ddp::nn {

namespace detail {
// The child at index i as an M; IndexError or ValueError naming the container.
template <class M, class Base>
std::shared_ptr<M> checked_cast(const Module& owner, const std::vector<std::shared_ptr<Base>>& v,
                                size_t i) {
  DDP_CHECK_T(IndexError, i < v.size(), "{}: index {} out of range for {} modules",
              owner.describe(), i, v.size());
  auto m = std::dynamic_pointer_cast<M>(v[i]);
  DDP_CHECK(m != nullptr, "{}: module {} is a {}, not the requested type", owner.describe(), i,
            v[i]->name());
  return m;
}
}  // namespace detail

// Applies its modules in order: forward(x) = m[n-1](...m[0](x)); an empty
// Sequential returns x. A Sequential is itself a UnaryModule, so they nest.
class Sequential : public UnaryModule {
 public:
  Sequential() : UnaryModule("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules);

  // Appends a module named by its index; returns it.
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    return push_back(std::to_string(modules_.size()), std::move(module));
  }
  // Appends a module under a chosen name (like an OrderedDict in PyTorch).
  template <class M>
  std::shared_ptr<M> push_back(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<UnaryModule, M>,
                  "Sequential chains UnaryModules (see Note [Forward convention])");
    register_module(name, module);
    modules_.push_back(module);
    return module;
  }

  Tensor forward(const Tensor& x) override;

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  std::shared_ptr<UnaryModule> operator[](size_t i) const { return at<UnaryModule>(i); }
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    return detail::checked_cast<M>(*this, modules_, i);
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<UnaryModule>> modules_;
};

// A list of modules of any kind (e.g. the blocks of a transformer), named by
// index. It has no forward(): the owner iterates it.
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}

  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(module);
    return module;
  }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  std::shared_ptr<Module> operator[](size_t i) const { return at<Module>(i); }
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    return detail::checked_cast<M>(*this, modules_, i);
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// A unary module from a function without parameters, e.g.
//   seq.push_back(std::make_shared<Functional>([](const Tensor& x) { return relu(x); }, "ReLU"));
class Functional : public UnaryModule {
 public:
  using Fn = std::function<Tensor(const Tensor&)>;
  explicit Functional(Fn fn, std::string name = "Functional");
  Tensor forward(const Tensor& x) override { return fn_(x); }

 private:
  Fn fn_;
};

}  // namespace ddp::nn
