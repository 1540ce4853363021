#pragma once
// Runs one OpInfo::bad_inputs case: the call must raise the named
// ddp::Error subclass with the given text in its message.

#include <gtest/gtest.h>

#include <string>

#include "op_consistency_util.h"

namespace ddp::op_consistency {

inline void expect_refused(const OpInfo& op, const BadInputCase& c, Device device) {
  SCOPED_TRACE(op.name + ": " + c.description + " on " + device.str());
  ASSERT_TRUE(c.call && c.is_expected_type) << "incomplete case";
  ASSERT_FALSE(c.message_contains.empty()) << "a case must name the text its message holds";
  try {
    c.call(device);
  } catch (const Error& e) {
    EXPECT_TRUE(c.is_expected_type(e)) << "expected " << c.error_name << ", got: " << e.what();
    EXPECT_NE(std::string(e.what()).find(c.message_contains), std::string::npos)
        << "expected the message to contain \"" << c.message_contains << "\", got: " << e.what();
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected " << c.error_name << ", got a non-ddp error: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected " << c.error_name << ", nothing was raised";
}

}  // namespace ddp::op_consistency
