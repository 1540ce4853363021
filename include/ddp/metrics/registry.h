#pragma once
// Prometheus metrics: counters, gauges and histograms with labels, kept in a
// Registry that renders them in the Prometheus text exposition format
// (version 0.0.4). Serve a registry over HTTP with MetricsServer
// (ddp/metrics/server.h). docs/metrics.md documents the API.
//
//   ddp::metrics::Registry registry(ddp::metrics::Labels{{"rank", "0"}, {"job", "resnet"}});
//   auto& steps = registry.histogram("ddp_step_seconds", "Wall time of one step.", {},
//                                    ddp::metrics::exponential_buckets(0.001, 2, 16));
//   ddp::metrics::Histogram& step_seconds = steps.get();   // keep the reference
//   step_seconds.observe(0.25);                            // lock-free, any thread
//
// Note [Metrics never block a step]
// A training step must never wait for a scrape. Every update (inc, set,
// observe) is a relaxed atomic on the metric itself, with no lock. Locks
// guard only the *sets* of families and children: taken when a metric or a
// label combination is created and, briefly, when a scrape copies the list
// of children (children are never removed, so their addresses stay valid
// and rendering runs unlocked). A step that keeps its Counter&/Gauge&/
// Histogram& references therefore never meets a lock. The price: a scrape
// may see a histogram mid-observe (its _sum one observation ahead of its
// buckets); _count is always the +Inf bucket, as the format requires.
//
// There is no process-global registry: a program creates as many as it
// needs, and the registry must outlive the references it handed out and
// any server that serves it.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ddp::metrics {

// Label (name, value) pairs in the order they are written.
using Labels = std::vector<std::pair<std::string, std::string>>;

// The Content-Type of the text format this library writes.
inline constexpr const char* kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

// A value that only goes up (and restarts at 0 with the process).
class Counter {
 public:
  // Raises ValueError for a negative or NaN amount.
  void inc(double amount = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double amount = 1.0) { value_.fetch_add(amount, std::memory_order_relaxed); }
  void dec(double amount = 1.0) { value_.fetch_sub(amount, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into buckets with inclusive upper bounds
// (Prometheus' `le`), plus their sum and count.
class Histogram {
 public:
  // upper_bounds: finite and strictly increasing (ValueError otherwise); a
  // last +Inf bucket is always added.
  explicit Histogram(std::vector<double> upper_bounds);
  // v lands in the first bucket whose bound is >= v; NaN lands in +Inf only
  // (and makes the sum NaN), as in the Go client.
  void observe(double v);

  struct Snapshot {
    std::vector<double> upper_bounds;    // without +Inf
    std::vector<uint64_t> cumulative;    // per bound, then +Inf (size bounds + 1)
    double sum = 0;
    uint64_t count = 0;                  // == cumulative.back()
  };
  Snapshot snapshot() const;
  const std::vector<double>& upper_bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative
  std::atomic<double> sum_{0.0};
};

// Bucket bounds: start, start*factor, ... (count of them); start > 0,
// factor > 1, count >= 1, else ValueError.
std::vector<double> exponential_buckets(double start, double factor, int count);
// start, start+width, ... (count of them); width > 0, count >= 1.
std::vector<double> linear_buckets(double start, double width, int count);

namespace detail {

// One metric name with its HELP, TYPE and label names; the children are
// the label-value combinations.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, std::string type,
             std::vector<std::string> label_names, std::vector<double> upper_bounds);
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  const std::string& type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }  // histograms only
  // Appends HELP, TYPE and one line per sample.
  virtual void expose(std::string& out, const Labels& const_labels) const = 0;

 protected:
  void check_label_values(const std::vector<std::string>& values) const;  // count
  void write_header(std::string& out) const;

 private:
  std::string name_, help_, type_;
  std::vector<std::string> label_names_;
  std::vector<double> upper_bounds_;
};

// The sample lines of one child; labels already hold the constant labels.
void write_samples(std::string& out, const std::string& name, const Labels& labels, const Counter& c);
void write_samples(std::string& out, const std::string& name, const Labels& labels, const Gauge& g);
void write_samples(std::string& out, const std::string& name, const Labels& labels,
                   const Histogram& h);

}  // namespace detail

template <class Metric>
class Family : public detail::FamilyBase {
 public:
  // `make` builds each new child (histograms need their bounds).
  Family(std::string name, std::string help, std::string type,
         std::vector<std::string> label_names, std::vector<double> upper_bounds,
         std::function<std::unique_ptr<Metric>()> make)
      : FamilyBase(std::move(name), std::move(help), std::move(type), std::move(label_names),
                   std::move(upper_bounds)),
        make_(std::move(make)) {
    if (this->label_names().empty()) labels({});  // an unlabelled metric shows 0 from the start
  }

  // The child for these label values (in label_names() order), created on
  // first use; ValueError for the wrong number of values. Takes a lock:
  // keep the reference instead of calling this every step. The reference
  // stays valid for the registry's lifetime.
  Metric& labels(const std::vector<std::string>& values) {
    check_label_values(values);
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = children_[values];
    if (!slot) slot = make_();
    return *slot;
  }
  // The child of a family without labels.
  Metric& get() { return labels({}); }

  void expose(std::string& out, const Labels& const_labels) const override {
    std::vector<std::pair<const std::vector<std::string>*, const Metric*>> children;
    {
      std::lock_guard<std::mutex> lock(mutex_);  // See Note [Metrics never block a step]
      for (const auto& [values, metric] : children_) children.emplace_back(&values, metric.get());
    }
    write_header(out);
    for (const auto& [values, metric] : children) {
      Labels labels = const_labels;
      for (size_t i = 0; i < values->size(); ++i)
        labels.emplace_back(label_names()[i], (*values)[i]);
      detail::write_samples(out, name(), labels, *metric);
    }
  }

 private:
  std::function<std::unique_ptr<Metric>()> make_;
  mutable std::mutex mutex_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> children_;
};

class Registry {
 public:
  // const_labels are written on every sample (rank, job, ...); their names
  // must be valid label names and distinct, else ValueError.
  explicit Registry(Labels const_labels = {});
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registers a family, or returns the one already registered under `name`
  // when its type, label names (and bounds) are the same; ValueError for an
  // invalid metric or label name, a label name used twice (with the
  // constant labels too), "le" on a histogram, or a different family of the
  // same name.
  Family<Counter>& counter(const std::string& name, const std::string& help,
                           std::vector<std::string> label_names = {});
  Family<Gauge>& gauge(const std::string& name, const std::string& help,
                       std::vector<std::string> label_names = {});
  Family<Histogram>& histogram(const std::string& name, const std::string& help,
                               std::vector<std::string> label_names,
                               std::vector<double> upper_bounds);

  // Every family in registration order, in the text exposition format.
  std::string expose() const;
  const Labels& const_labels() const { return const_labels_; }

 private:
  detail::FamilyBase* find_compatible(const std::string& name, const std::string& type,
                                      const std::vector<std::string>& label_names) const;
  void check_new(const std::string& name, const std::vector<std::string>& label_names) const;

  Labels const_labels_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<detail::FamilyBase>> families_;
};

}  // namespace ddp::metrics
