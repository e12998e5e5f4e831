// Measurement helpers shared by the qkv bench subcommands (see bench_util.h).
#include "bench_util.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace qkv::tool {

double rss_mb_now() {
  std::ifstream f("/proc/self/statm");
  long pages_total = 0, pages_rss = 0;
  f >> pages_total >> pages_rss;
  return static_cast<double>(pages_rss) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

// The resident-set high-water mark of this process image (VmHWM). Not
// getrusage's ru_maxrss: Linux carries that across fork + exec, so under
// bench/compare_pytorch.py it would report the Python parent's ~500 MB.
double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // "VmHWM:  1234 kB"
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

// Resets VmHWM to the current resident set (Linux >= 4.0); false if not allowed.
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace qkv::tool
