// The Prometheus text format 0.0.4 as written by Registry::expose(), and the
// registry's checks of names, labels and re-registration.

#include <gtest/gtest.h>

#include "ddp/core/error.h"
#include "ddp/metrics/registry.h"

namespace ddp::metrics {
namespace {

TEST(Exposition, ExactTextOfASmallRegistry) {
  Registry r(Labels{{"job", "j"}});
  auto& requests = r.counter("requests_total", "Requests \\ served.\nSecond line", {"code"});
  requests.labels({"200"}).inc(3);
  requests.labels({"a\"b\\c\nd"}).inc(0.5);
  r.gauge("temperature", "T.").get().set(-1.5);
  auto& latency = r.histogram("latency_seconds", "L.", {}, {0.25, 1}).get();
  latency.observe(0.25);  // on a bound: counted in that bucket (le is inclusive)
  latency.observe(0.5);
  latency.observe(2);
  EXPECT_EQ(r.expose(),
            "# HELP requests_total Requests \\\\ served.\\nSecond line\n"
            "# TYPE requests_total counter\n"
            "requests_total{job=\"j\",code=\"200\"} 3\n"
            "requests_total{job=\"j\",code=\"a\\\"b\\\\c\\nd\"} 0.5\n"
            "# HELP temperature T.\n"
            "# TYPE temperature gauge\n"
            "temperature{job=\"j\"} -1.5\n"
            "# HELP latency_seconds L.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{job=\"j\",le=\"0.25\"} 1\n"
            "latency_seconds_bucket{job=\"j\",le=\"1\"} 2\n"
            "latency_seconds_bucket{job=\"j\",le=\"+Inf\"} 3\n"
            "latency_seconds_sum{job=\"j\"} 2.75\n"
            "latency_seconds_count{job=\"j\"} 3\n");
}

TEST(Exposition, NoLabelsMeansNoBracesAndUnlabelledMetricsStartAtZero) {
  Registry r;
  r.counter("restarts_total", "R.");
  r.gauge("ratio", "Q.").get().set(1e-7);
  EXPECT_EQ(r.expose(),
            "# HELP restarts_total R.\n# TYPE restarts_total counter\nrestarts_total 0\n"
            "# HELP ratio Q.\n# TYPE ratio gauge\nratio 1e-07\n");
}

TEST(Exposition, LabelledFamilyWithoutChildrenWritesOnlyItsHeader) {
  Registry r;
  r.gauge("queue_depth", "D.", {"queue"});
  EXPECT_EQ(r.expose(), "# HELP queue_depth D.\n# TYPE queue_depth gauge\n");
}

TEST(Exposition, NonFiniteValuesUsePrometheusSpelling) {
  Registry r;
  auto& g = r.gauge("g", "G.", {"k"});
  g.labels({"a"}).set(std::numeric_limits<double>::infinity());
  g.labels({"b"}).set(-std::numeric_limits<double>::infinity());
  g.labels({"c"}).set(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(r.expose(), "# HELP g G.\n# TYPE g gauge\ng{k=\"a\"} +Inf\ng{k=\"b\"} -Inf\n"
                        "g{k=\"c\"} NaN\n");
}

TEST(Registry, SameNameSameShapeReturnsTheSameFamily) {
  Registry r;
  auto& a = r.counter("x_total", "X.", {"k"});
  auto& b = r.counter("x_total", "X again.", {"k"});
  EXPECT_EQ(&a, &b);
  a.labels({"1"}).inc();
  EXPECT_EQ(&a.labels({"1"}), &b.labels({"1"}));
  EXPECT_EQ(b.labels({"1"}).value(), 1);
  auto& h1 = r.histogram("h", "H.", {}, {1, 2});
  EXPECT_EQ(&h1, &r.histogram("h", "H.", {}, {1, 2}));
}

TEST(Registry, RejectsConflictsAndBadNames) {
  Registry r(Labels{{"rank", "0"}});
  r.counter("x_total", "X.", {"k"});
  EXPECT_THROW(r.gauge("x_total", "X."), ValueError);
  EXPECT_THROW(r.counter("x_total", "X.", {"other"}), ValueError);
  r.histogram("h", "H.", {}, {1, 2});
  EXPECT_THROW(r.histogram("h", "H.", {}, {1, 3}), ValueError);
  EXPECT_THROW(r.counter("1abc", "bad name"), ValueError);
  EXPECT_THROW(r.counter("a-b", "bad name"), ValueError);
  EXPECT_THROW(r.counter("", "empty"), ValueError);
  EXPECT_THROW(r.counter("c", "bad label", {"a:b"}), ValueError);
  EXPECT_THROW(r.counter("c", "reserved label", {"__name"}), ValueError);
  EXPECT_THROW(r.counter("c", "twice", {"k", "k"}), ValueError);
  EXPECT_THROW(r.counter("c", "clashes with a constant label", {"rank"}), ValueError);
  EXPECT_THROW(r.histogram("h2", "le is reserved", {"le"}, {1}), ValueError);
  EXPECT_THROW((void)Registry(Labels{{"le", "1"}}).histogram("h", "H.", {}, {1}), ValueError);
  EXPECT_THROW((void)Registry(Labels{{"bad-name", "1"}}), ValueError);
  EXPECT_THROW((void)Registry(Labels{{"a", "1"}, {"a", "2"}}), ValueError);
  // Colons are allowed in metric names (recording rules use them).
  EXPECT_NO_THROW(r.counter("job:x:rate", "ok"));
}

TEST(Registry, ConflictMessageNamesTheMetric) {
  Registry r;
  r.counter("steps_total", "S.");
  try {
    r.gauge("steps_total", "S.");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'steps_total' is already registered as a counter"),
              std::string::npos) << e.what();
  }
}

TEST(Registry, WrongNumberOfLabelValuesThrows) {
  Registry r;
  auto& f = r.counter("c_total", "C.", {"a", "b"});
  EXPECT_THROW(f.labels({"1"}), ValueError);
  EXPECT_THROW(f.get(), ValueError);
  EXPECT_NO_THROW(f.labels({"1", "2"}));
}

TEST(Counter, OnlyGoesUp) {
  Counter c;
  c.inc();
  c.inc(2.5);
  EXPECT_EQ(c.value(), 3.5);
  EXPECT_THROW(c.inc(-1), ValueError);
  EXPECT_THROW(c.inc(std::numeric_limits<double>::quiet_NaN()), ValueError);
  EXPECT_EQ(c.value(), 3.5);
}

TEST(Gauge, SetIncDec) {
  Gauge g;
  g.set(10);
  g.inc(2);
  g.dec(0.5);
  EXPECT_EQ(g.value(), 11.5);
  g.dec(20);
  EXPECT_EQ(g.value(), -8.5);
}

}  // namespace
}  // namespace ddp::metrics
