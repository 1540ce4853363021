#pragma once
// Moving a training state between the members of an elastic job
// (Note [Elastic membership] in ddp/parallel/elastic.h).

#include <cstdint>
#include <string>

#include "ddp/dist/process_group.h"
#include "ddp/io/checkpoint.h"

namespace ddp::parallel::detail {

// Rank `root` of `group` sends every section of `state`, its generators and
// `step`; every other rank loads them and gets root's step back. A
// collective of the whole group. ValueError (on the receiving rank) when a
// section refuses what it received.
int64_t broadcast_training_state(dist::ProcessGroup& group, io::Checkpoint& state, int64_t step,
                                 int root);

// One line per tensor of `section` ("name shape dtype"), in order: what a
// joiner's model must match. Empty when there is no such section.
std::string describe_section(const io::Checkpoint& state, const std::string& section);

// The first difference between two describe_section() texts, as a sentence
// naming the parameter and both shapes; empty when they are equal.
std::string first_difference(const std::string& ours, const std::string& theirs);

}  // namespace ddp::parallel::detail
