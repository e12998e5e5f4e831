// Measurement helpers shared by the qkv bench subcommands.
#pragma once
#include <vector>

namespace qkv::tool {

// Resident set now, in MiB (/proc/self/statm).
double rss_mb_now();
// The resident-set high-water mark of this process image (VmHWM), in MiB.
double peak_rss_mb();
// Resets VmHWM to the current resident set (Linux >= 4.0); false if not allowed.
bool reset_peak_rss();
// Median of v (the mean of the middle two for an even count); v non-empty.
double median(std::vector<double> v);

}  // namespace qkv::tool
