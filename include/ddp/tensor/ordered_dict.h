#pragma once
// OrderedDict: string keys in insertion order with O(1) lookup. It lives in
// the tensor layer so that nn, optim, amp and io all share it. Modules keep
// their parameters, buffers and children in one, and state dicts and
// safetensors files are TensorDicts: their order is part of their meaning
// (it is the order of parameters() and of a file's header).

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/tensor/tensor.h"

namespace ddp {

template <class V>
class OrderedDict {
 public:
  using Item = std::pair<std::string, V>;
  using iterator = typename std::vector<Item>::iterator;
  using const_iterator = typename std::vector<Item>::const_iterator;

  OrderedDict() = default;
  OrderedDict(std::initializer_list<Item> items) {
    for (const Item& it : items) insert(it.first, it.second);
  }

  // Adds a new key at the end; a key that exists already raises ValueError.
  V& insert(const std::string& key, V value) {
    DDP_CHECK(!contains(key), "OrderedDict: key '{}' exists already", key);
    index_.emplace(key, items_.size());
    items_.emplace_back(key, std::move(value));
    return items_.back().second;
  }
  // Replaces the value of an existing key in place (keeping its position), or
  // adds it at the end.
  V& set(const std::string& key, V value) {
    if (V* v = find(key)) return *v = std::move(value);
    return insert(key, std::move(value));
  }
  // Removes a key (O(n): later items move up); false when it was absent.
  bool erase(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    size_t pos = it->second;
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(pos));
    index_.erase(it);
    for (auto& [k, i] : index_)
      if (i > pos) --i;
    return true;
  }

  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  V* find(const std::string& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  const V* find(const std::string& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  // The value of a key; a missing key raises ValueError naming it.
  V& at(const std::string& key) {
    V* v = find(key);
    if (!v) DDP_THROW(ValueError, "OrderedDict: no key '{}'", key);
    return *v;
  }
  const V& at(const std::string& key) const {
    const V* v = find(key);
    if (!v) DDP_THROW(ValueError, "OrderedDict: no key '{}'", key);
    return *v;
  }
  V& operator[](const std::string& key) { return at(key); }
  const V& operator[](const std::string& key) const { return at(key); }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  void clear() {
    items_.clear();
    index_.clear();
  }
  const std::vector<Item>& items() const { return items_; }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    out.reserve(items_.size());
    for (const Item& it : items_) out.push_back(it.first);
    return out;
  }
  std::vector<V> values() const {
    std::vector<V> out;
    out.reserve(items_.size());
    for (const Item& it : items_) out.push_back(it.second);
    return out;
  }

  // Iteration in insertion order. Change values through iterators, never
  // keys: the lookup index would no longer match.
  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

// name -> tensor, ordered: what state_dict() returns and what safetensors
// files hold.
using TensorDict = OrderedDict<Tensor>;

}  // namespace ddp
