#include "worker/run_folder.h"

#include <ctime>
#include <filesystem>

#include "common/error.h"

namespace gradsync {
namespace fs = std::filesystem;

std::string fresh_results_folder(const std::string& root, const std::string& preset) {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  fs::path dir = fs::path(root) / (preset + "-" + stamp);
  for (int i = 2; fs::exists(dir); ++i) {
    dir = fs::path(root) / (preset + "-" + stamp + "-" + std::to_string(i));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create results folder: " + ec.message());
  return dir.string();
}

void point_latest_at(const std::string& root, const std::string& folder) {
  const fs::path link = fs::path(root) / "latest";
  std::error_code ec;
  if (fs::is_symlink(link, ec)) fs::remove(link, ec);
  if (!fs::exists(link, ec)) {
    fs::create_directory_symlink(fs::path(folder).filename(), link, ec);
  }
}

}  // namespace gradsync
