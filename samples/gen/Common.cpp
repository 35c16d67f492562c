//===- samples/gen/Common.cpp - Helpers shared by the generators ----------===//
#include "samples/gen/Models.h"

namespace pipec::samples {

Status checkSize(const char *option, int64_t value, int64_t max) {
  if (value < 1 || value > max)
    return errorf(option, " must be between 1 and ", max, ", got ", value);
  return Status::ok();
}

std::vector<std::pair<std::string, std::string>> commonMetadata(const std::string &model,
                                                                const CommonOptions &c) {
  std::vector<std::pair<std::string, std::string>> md = {
      {"pipec.sample", model},
      {"pipec.sample.seed", std::to_string(c.seed)},
  };
  if (!c.command.empty())
    md.emplace_back("pipec.sample.command", c.command);
  return md;
}

} // namespace pipec::samples
