#pragma once
// PrefixStore: a view of another store in which every key is prefixed with
// "<prefix>/", so each process group (or each user of a shared store) has
// its own key space: PrefixStore("pg1", store).set("x", v) sets "pg1/x".
// Prefix stores nest: PrefixStore("b", PrefixStore("a", s)) uses "a/b/".
//
// The timeout starts as the wrapped store's and is this view's own from
// then on (See Note [Store interface]). num_keys() counts the whole
// underlying store, as in torch.

#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/store.h"

namespace ddp::dist {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& underlying() const { return store_; }

 protected:
  void do_set(const std::string& key, const Bytes& value) override;
  Bytes do_get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t do_add(const std::string& key, int64_t delta) override;
  Bytes do_compare_set(const std::string& key, const Bytes& expected,
                       const Bytes& desired) override;
  bool do_check(const std::vector<std::string>& keys) override;
  void do_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool do_delete_key(const std::string& key) override;
  int64_t do_num_keys() override;

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace ddp::dist
