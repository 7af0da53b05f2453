#include "common/host_id.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace gradsync {

std::string this_host_id() {
  if (const char* simulated = std::getenv(kHostIdEnv); simulated != nullptr && *simulated) {
    return simulated;
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  return std::string(host) + "/" + boot;
}

}  // namespace gradsync
