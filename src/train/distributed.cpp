// The job of a data-parallel run (qkv/train/distributed.h): world(), start and stop, the
// collectives train/ needs (barrier, broadcast, all-gather) built on the message layer's
// point-to-point messages (comm.h) so every wait names the rank it waits for, and the
// start-up check that every rank runs the same thing.
#include "qkv/train/distributed.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include <nlohmann/json.hpp>

#include "comm.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/files.h"

namespace qkv::train {

using detail::Comm;
using detail::Request;
using detail::Tag;

// ---------------------------------------------------------------- collectives on Comm

namespace detail {
namespace {

constexpr std::size_t kChunk = std::size_t{1} << 30;  // messages are at most 1 GiB

void put_u64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
std::uint64_t get_u64(const std::string& s, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)]);
  return v;
}

// Length-prefixed pieces in one string, and back.
std::string pack(const std::vector<std::string>& parts) {
  std::string out;
  put_u64(out, parts.size());
  for (const std::string& p : parts) {
    put_u64(out, p.size());
    out += p;
  }
  return out;
}
std::vector<std::string> unpack(const std::string& s, const std::string& what) {
  auto bad = [&] { return DistributedError("distributed: a malformed message while exchanging " + what, false); };
  if (s.size() < 8) throw bad();
  const std::uint64_t n = get_u64(s, 0);
  if (n > s.size() / 8) throw bad();
  std::vector<std::string> parts;
  std::size_t at = 8;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (s.size() - at < 8) throw bad();
    const std::uint64_t len = get_u64(s, at);
    at += 8;
    if (len > s.size() - at) throw bad();
    parts.emplace_back(s, at, len);
    at += len;
  }
  return parts;
}

}  // namespace

void Comm::barrier(const std::string& what) {
  static const char kByte = 0;
  static char sink[1 << 10];
  std::vector<Request> reqs;
  if (rank_ == 0) {
    for (int p = 1; p < size_; ++p) reqs.push_back(irecv(&sink[p % sizeof sink], 1, p, Tag::Control));
    wait(reqs, what);
    reqs.clear();
    for (int p = 1; p < size_; ++p) reqs.push_back(isend(&kByte, 1, p, Tag::Control));
    wait(reqs, what);
  } else {
    char in = 0;
    reqs.push_back(isend(&kByte, 1, 0, Tag::Control));
    reqs.push_back(irecv(&in, 1, 0, Tag::Control));
    wait(reqs, what);
  }
}

void Comm::broadcast(std::string& bytes, const std::string& what) {
  if (size_ == 1) return;
  std::string head;
  std::vector<Request> reqs;
  if (rank_ == 0) {
    put_u64(head, bytes.size());
    for (int p = 1; p < size_; ++p) {
      reqs.push_back(isend(head.data(), 8, p, Tag::Control));
      for (std::size_t at = 0; at < bytes.size(); at += kChunk)
        reqs.push_back(isend(bytes.data() + at, std::min(kChunk, bytes.size() - at), p, Tag::Control));
    }
    wait(reqs, what);
    return;
  }
  head.resize(8);
  reqs.push_back(irecv(head.data(), 8, 0, Tag::Control));
  wait(reqs, what);
  reqs.clear();
  bytes.assign(get_u64(head, 0), '\0');
  for (std::size_t at = 0; at < bytes.size(); at += kChunk)
    reqs.push_back(irecv(bytes.data() + at, std::min(kChunk, bytes.size() - at), 0, Tag::Control));
  wait(reqs, what);
}

std::vector<std::string> Comm::allgather(const std::string& mine, const std::string& what) {
  // Gathered at rank 0 (sizes, then bytes), then broadcast as one packed string.
  std::string all;
  if (rank_ == 0) {
    std::vector<std::string> heads(static_cast<std::size_t>(size_), std::string(8, '\0'));
    std::vector<Request> reqs;
    for (int p = 1; p < size_; ++p) reqs.push_back(irecv(heads[p].data(), 8, p, Tag::Control));
    wait(reqs, what);
    reqs.clear();
    std::vector<std::string> parts(static_cast<std::size_t>(size_));
    parts[0] = mine;
    for (int p = 1; p < size_; ++p) {
      parts[p].assign(get_u64(heads[p], 0), '\0');
      for (std::size_t at = 0; at < parts[p].size(); at += kChunk)
        reqs.push_back(irecv(parts[p].data() + at, std::min(kChunk, parts[p].size() - at), p, Tag::Control));
    }
    wait(reqs, what);
    all = pack(parts);
  } else {
    std::string head;
    put_u64(head, mine.size());
    std::vector<Request> reqs{isend(head.data(), 8, 0, Tag::Control)};
    for (std::size_t at = 0; at < mine.size(); at += kChunk)
      reqs.push_back(isend(mine.data() + at, std::min(kChunk, mine.size() - at), 0, Tag::Control));
    wait(reqs, what);
  }
  broadcast(all, what);
  std::vector<std::string> parts = unpack(all, what);
  if (parts.size() != static_cast<std::size_t>(size_))
    throw DistributedError("distributed: a malformed message while exchanging " + what, false);
  return parts;
}

}  // namespace detail

// ---------------------------------------------------------------- World

namespace {
World g_world;
}  // namespace

World& world() { return g_world; }
bool built_with_mpi() { return Comm::built_with_mpi(); }

int World::rank() const { return comm_ ? comm_->rank() : 0; }
int World::size() const { return comm_ ? comm_->size() : 1; }
int World::local_size() const { return comm_ ? comm_->local_size() : 1; }
std::int64_t World::bucket_bytes() const {
  return o_.bucket_bytes > 0 ? o_.bucket_bytes : std::max<std::int64_t>(std::int64_t{1} << 20, size() * (std::int64_t{256} << 10));
}

void World::barrier(const std::string& what) {
  if (distributed()) comm_->barrier(what);
}
void World::broadcast(std::string& bytes, const std::string& what) {
  if (distributed()) comm_->broadcast(bytes, what);
}
std::vector<std::string> World::allgather(const std::string& mine, const std::string& what) {
  if (!distributed()) return {mine};
  return comm_->allgather(mine, what);
}

void World::check_same(const Fields& fields, const std::string& what) {
  if (!distributed()) return;
  std::vector<std::string> flat;
  for (const auto& [k, v] : fields) {
    flat.push_back(k);
    flat.push_back(v);
  }
  const std::vector<std::string> all = allgather(detail::pack(flat), what);
  std::vector<Fields> by_rank;
  for (const std::string& s : all) {
    const std::vector<std::string> parts = detail::unpack(s, what);
    Fields f;
    for (std::size_t i = 0; i + 1 < parts.size(); i += 2) f.emplace_back(parts[i], parts[i + 1]);
    by_rank.push_back(std::move(f));
  }
  const std::string diff = describe_disagreement(by_rank);
  if (!diff.empty()) throw DistributedError("ranks disagree on " + what + ": " + diff, true);
}

void World::fail_together(const std::function<void()>& f, const std::string& what) {
  if (!distributed()) return f();
  std::string mine;
  const bool failed_before = local_failure_;
  try {
    const Busy busy(*this);  // the others wait meanwhile
    f();
  } catch (const Error& e) {
    mine = e.what();
    if (mine.empty()) mine = "failed";
  }
  local_failure_ = failed_before;  // a failure caught here: every rank learns of it below
  const std::vector<std::string> all = allgather(mine, what);
  for (std::size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) {
      const std::string who = r == 0 ? "" : "rank " + std::to_string(r) + " of " + std::to_string(all.size()) + ": ";
      throw DistributedError(who + all[r], true);
    }
}

World::Busy::Busy(World& w) : w_(w), exceptions_(std::uncaught_exceptions()) {
  if (w_.distributed()) w_.comm()->set_busy(true);
}
World::Busy::~Busy() {
  if (std::uncaught_exceptions() > exceptions_) w_.local_failure_ = true;
  if (w_.distributed()) w_.comm()->set_busy(false);
}

World& start_distributed(const DistributedOptions& o) {
  World& w = g_world;
  if (w.comm_) throw Error("start_distributed: already started");
  w.o_ = o;
  if (const char* v = std::getenv("QKV_DP_OVERLAP"); v && std::string(v) == "0") w.o_.overlap = false;
  if (const char* v = std::getenv("QKV_DP_BUCKET_KIB"); v && std::atoll(v) > 0) w.o_.bucket_bytes = std::atoll(v) * 1024;
  if (!(o.collective_timeout_s > 0))
    throw ValueError("distributed: the collective timeout must be > 0 seconds, got " + std::to_string(o.collective_timeout_s));
  if (o.bucket_bytes < 0) throw ValueError("distributed: the bucket size must be >= 0 bytes (0: automatic)");
  w.comm_ = Comm::start(o.collective_timeout_s);
  return w;
}

void stop_distributed() {
  World& w = g_world;
  if (!w.comm_) return;
  w.comm_->finish();
  w.comm_.reset();
}

void abort_distributed(int code) {
  if (g_world.comm()) g_world.comm()->abort(code);
}

io::Checkpoint shared_checkpoint(const std::string& path) {
  World& w = g_world;
  if (!w.distributed()) return io::load_checkpoint(path);
  std::string bytes;
  w.fail_together(
      [&] {
        if (w.root()) bytes = io::read_file(path, "checkpoint");
      },
      "rank 0 to read " + path);
  w.broadcast(bytes, "rank 0's " + path);
  io::Checkpoint c;  // a damaged file fails on every rank alike: rank 0 reports it
  w.fail_together([&] { c = io::load_checkpoint_bytes(std::vector<std::uint8_t>(bytes.begin(), bytes.end()), path); },
                  "the ranks to read " + path);
  return c;
}

// ---------------------------------------------------------------- checks

std::string describe_disagreement(const std::vector<Fields>& by_rank) {
  if (by_rank.empty()) return "";
  const Fields& ref = by_rank[0];
  auto find = [](const Fields& f, const std::string& key) -> const std::string* {
    for (const auto& [k, v] : f)
      if (k == key) return &v;
    return nullptr;
  };
  auto shown = [](const std::string& v) { return v.size() > 120 ? v.substr(0, 117) + "..." : v; };
  for (std::size_t r = 1; r < by_rank.size(); ++r) {
    const std::string rank = "rank " + std::to_string(r);
    for (const auto& [k, v] : ref) {
      const std::string* other = find(by_rank[r], k);
      if (!other) return k + " is '" + shown(v) + "' on rank 0 but not given on " + rank;
      if (*other != v) return k + " is '" + shown(*other) + "' on " + rank + " but '" + shown(v) + "' on rank 0";
    }
    for (const auto& [k, v] : by_rank[r])
      if (!find(ref, k)) return k + " is '" + shown(v) + "' on " + rank + " but not given on rank 0";
  }
  return "";
}

Fields json_fields(const std::string& json, const std::string& prefix) {
  Fields f;
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(json);
  for (const auto& [k, v] : j.items()) f.emplace_back(prefix + k, v.dump());
  return f;
}

std::string weights_digest(const nn::Module& m) {
  std::uint64_t h = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    h = io::digest64(name.data(), name.size(), h);
    const std::string shape = p.shape_str();
    h = io::digest64(shape.data(), shape.size(), h);
    const Tensor c = p.contiguous();
    h = io::digest64(c.raw_data(), static_cast<std::size_t>(c.numel()) * dtype_size(c.dtype()), h);
  }
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

}  // namespace qkv::train
