// The Prometheus text exposition format, version 0.0.4:
//   # HELP <name> <help, with \ and newline escaped>
//   # TYPE <name> counter|gauge|histogram
//   <name>{<label>="<value, with \ " and newline escaped>",...} <value>
// Histograms write <name>_bucket{...,le="<bound>"} cumulatively up to
// le="+Inf", then <name>_sum and <name>_count.

#include <charconv>
#include <cmath>

#include "ddp/metrics/registry.h"

namespace ddp::metrics {
namespace {

// Shortest text that reads back as the same double; Prometheus' spellings
// for the non-finite ones.
std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

void append_escaped(std::string& out, const std::string& s, bool quotes) {
  for (const char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (quotes && c == '"') out += "\\\"";
    else out += c;
  }
}

void append_labels(std::string& out, const Labels& labels, const char* le = nullptr) {
  if (labels.empty() && le == nullptr) return;
  out += '{';
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) out += ',';
    first = false;
    out += name;
    out += "=\"";
    append_escaped(out, value, /*quotes=*/true);
    out += '"';
  }
  if (le != nullptr) {
    if (!first) out += ',';
    out += "le=\"";
    out += le;
    out += '"';
  }
  out += '}';
}

void append_sample(std::string& out, const std::string& name, const Labels& labels,
                   const std::string& value, const char* le = nullptr) {
  out += name;
  append_labels(out, labels, le);
  out += ' ';
  out += value;
  out += '\n';
}

}  // namespace

namespace detail {

void FamilyBase::write_header(std::string& out) const {
  out += "# HELP " + name_ + ' ';
  append_escaped(out, help_, /*quotes=*/false);
  out += "\n# TYPE " + name_ + ' ' + type_ + '\n';
}

void write_samples(std::string& out, const std::string& name, const Labels& labels, const Counter& c) {
  append_sample(out, name, labels, format_value(c.value()));
}

void write_samples(std::string& out, const std::string& name, const Labels& labels, const Gauge& g) {
  append_sample(out, name, labels, format_value(g.value()));
}

void write_samples(std::string& out, const std::string& name, const Labels& labels,
                   const Histogram& h) {
  const Histogram::Snapshot s = h.snapshot();
  for (size_t i = 0; i < s.upper_bounds.size(); ++i)
    append_sample(out, name + "_bucket", labels, std::to_string(s.cumulative[i]),
                  format_value(s.upper_bounds[i]).c_str());
  append_sample(out, name + "_bucket", labels, std::to_string(s.cumulative.back()), "+Inf");
  append_sample(out, name + "_sum", labels, format_value(s.sum));
  append_sample(out, name + "_count", labels, std::to_string(s.count));
}

}  // namespace detail
}  // namespace ddp::metrics
