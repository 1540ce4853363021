#include "ddp/metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "ddp/core/error.h"

namespace ddp::metrics {

namespace {

bool valid_metric_name(const std::string& s) {  // [a-zA-Z_:][a-zA-Z0-9_:]*
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// [a-zA-Z_][a-zA-Z0-9_]*, and names starting with "__" are Prometheus' own.
bool valid_label_name(const std::string& s) {
  if (s.empty() || s.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

void check_label_names(const std::string& metric, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (!valid_label_name(n))
      DDP_THROW(ValueError, "metrics: '{}' is not a valid label name{} (letters, digits and _, "
                "not starting with a digit or __)", n, metric.empty() ? "" : " of '" + metric + "'");
  std::set<std::string> seen;
  for (const auto& n : names)
    if (!seen.insert(n).second)
      DDP_THROW(ValueError, "metrics: label '{}' appears twice{}", n,
                metric.empty() ? "" : " on '" + metric + "' (with the registry's constant labels)");
}

}  // namespace

void Counter::inc(double amount) {
  if (!(amount >= 0))  // also NaN
    DDP_THROW(ValueError, "metrics: a counter only goes up; inc({}) is not allowed", amount);
  value_.fetch_add(amount, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]))
      DDP_THROW(ValueError, "metrics: histogram bound {} is not finite (+Inf is always added)",
                bounds_[i]);
    if (i > 0 && !(bounds_[i - 1] < bounds_[i]))
      DDP_THROW(ValueError, "metrics: histogram bounds must increase strictly, got {} then {}",
                bounds_[i - 1], bounds_[i]);
  }
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  const size_t bucket =
      std::isnan(v) ? bounds_.size()
                    : size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.upper_bounds = bounds_;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = running;
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1)
    DDP_THROW(ValueError, "metrics: exponential_buckets({}, {}, {}) needs start > 0, factor > 1, "
              "count >= 1", start, factor, count);
  std::vector<double> b;
  for (int i = 0; i < count; ++i, start *= factor) b.push_back(start);
  return b;
}

std::vector<double> linear_buckets(double start, double width, int count) {
  if (!(width > 0) || count < 1 || !std::isfinite(start))
    DDP_THROW(ValueError, "metrics: linear_buckets({}, {}, {}) needs width > 0, count >= 1",
              start, width, count);
  std::vector<double> b;
  for (int i = 0; i < count; ++i) b.push_back(start + width * i);
  return b;
}

namespace detail {

FamilyBase::FamilyBase(std::string name, std::string help, std::string type,
                       std::vector<std::string> label_names, std::vector<double> upper_bounds)
    : name_(std::move(name)), help_(std::move(help)), type_(std::move(type)),
      label_names_(std::move(label_names)), upper_bounds_(std::move(upper_bounds)) {}

void FamilyBase::check_label_values(const std::vector<std::string>& values) const {
  if (values.size() != label_names_.size())
    DDP_THROW(ValueError, "metrics: '{}' has labels ({}) but got {} value(s)", name_,
              fmt::join(label_names_, ", "), values.size());
}

}  // namespace detail

Registry::Registry(Labels const_labels) : const_labels_(std::move(const_labels)) {
  std::vector<std::string> names;
  for (const auto& [n, v] : const_labels_) names.push_back(n);
  check_label_names("", names);
}

detail::FamilyBase* Registry::find_compatible(const std::string& name, const std::string& type,
                                              const std::vector<std::string>& label_names) const {
  for (const auto& f : families_) {
    if (f->name() != name) continue;
    if (f->type() != type || f->label_names() != label_names)
      DDP_THROW(ValueError, "metrics: '{}' is already registered as a {} with labels ({}); cannot "
                "register it again as a {} with labels ({})", name, f->type(),
                fmt::join(f->label_names(), ", "), type, fmt::join(label_names, ", "));
    return f.get();
  }
  return nullptr;
}

void Registry::check_new(const std::string& name, const std::vector<std::string>& label_names) const {
  if (!valid_metric_name(name))
    DDP_THROW(ValueError, "metrics: '{}' is not a valid metric name (letters, digits, _ and :, not "
              "starting with a digit)", name);
  std::vector<std::string> all;
  for (const auto& [n, v] : const_labels_) all.push_back(n);
  all.insert(all.end(), label_names.begin(), label_names.end());
  check_label_names(name, all);
}

Family<Counter>& Registry::counter(const std::string& name, const std::string& help,
                                   std::vector<std::string> label_names) {
  check_new(name, label_names);
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto* f = find_compatible(name, "counter", label_names)) return static_cast<Family<Counter>&>(*f);
  families_.push_back(std::make_unique<Family<Counter>>(
      name, help, "counter", std::move(label_names), std::vector<double>{},
      [] { return std::make_unique<Counter>(); }));
  return static_cast<Family<Counter>&>(*families_.back());
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help,
                               std::vector<std::string> label_names) {
  check_new(name, label_names);
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto* f = find_compatible(name, "gauge", label_names)) return static_cast<Family<Gauge>&>(*f);
  families_.push_back(std::make_unique<Family<Gauge>>(
      name, help, "gauge", std::move(label_names), std::vector<double>{},
      [] { return std::make_unique<Gauge>(); }));
  return static_cast<Family<Gauge>&>(*families_.back());
}

Family<Histogram>& Registry::histogram(const std::string& name, const std::string& help,
                                       std::vector<std::string> label_names,
                                       std::vector<double> upper_bounds) {
  check_new(name, label_names);
  for (const auto& [n, v] : const_labels_)
    if (n == "le") DDP_THROW(ValueError, "metrics: histogram '{}': the constant label 'le' is "
                             "reserved for bucket bounds", name);
  for (const auto& n : label_names)
    if (n == "le") DDP_THROW(ValueError, "metrics: histogram '{}': the label 'le' is reserved for "
                             "bucket bounds", name);
  Histogram probe(upper_bounds);  // validates the bounds before anything is registered
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto* f = find_compatible(name, "histogram", label_names)) {
    if (f->upper_bounds() != upper_bounds)
      DDP_THROW(ValueError, "metrics: histogram '{}' is already registered with bounds ({}), not "
                "({})", name, fmt::join(f->upper_bounds(), ", "), fmt::join(upper_bounds, ", "));
    return static_cast<Family<Histogram>&>(*f);
  }
  families_.push_back(std::make_unique<Family<Histogram>>(
      name, help, "histogram", std::move(label_names), upper_bounds,
      [upper_bounds] { return std::make_unique<Histogram>(upper_bounds); }));
  return static_cast<Family<Histogram>&>(*families_.back());
}

std::string Registry::expose() const {
  std::vector<const detail::FamilyBase*> families;
  {
    std::lock_guard<std::mutex> lock(mutex_);  // See Note [Metrics never block a step]
    for (const auto& f : families_) families.push_back(f.get());
  }
  std::string out;
  for (const auto* f : families) f->expose(out, const_labels_);
  return out;
}

}  // namespace ddp::metrics
