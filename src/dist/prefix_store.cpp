#include "ddp/dist/prefix_store.h"

#include "ddp/core/error.h"

namespace ddp::dist {

static std::shared_ptr<Store> checked(std::shared_ptr<Store> store) {
  DDP_CHECK(store != nullptr, "PrefixStore: the wrapped store is null");
  return store;
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : Store(checked(store)->timeout()), prefix_(std::move(prefix)), store_(std::move(store)) {}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::do_set(const std::string& key, const Bytes& value) {
  store_->set(full(key), value);
}

Bytes PrefixStore::do_get(const std::string& key, std::chrono::milliseconds timeout) {
  return store_->get(full(key), timeout);
}

int64_t PrefixStore::do_add(const std::string& key, int64_t delta) {
  return store_->add(full(key), delta);
}

Bytes PrefixStore::do_compare_set(const std::string& key, const Bytes& expected,
                                  const Bytes& desired) {
  return store_->compare_set(full(key), expected, desired);
}

bool PrefixStore::do_check(const std::vector<std::string>& keys) {
  return store_->check(full(keys));
}

void PrefixStore::do_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  store_->wait(full(keys), timeout);
}

bool PrefixStore::do_delete_key(const std::string& key) { return store_->delete_key(full(key)); }

int64_t PrefixStore::do_num_keys() { return store_->num_keys(); }

}  // namespace ddp::dist
