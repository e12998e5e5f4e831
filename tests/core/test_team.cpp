// parallel_team (core/parallel.h): members run at once and meet at barriers; part() splits a
// range exactly; an exception in one member unwinds the others and reaches the caller; a team
// inside a parallel call, with one thread, or while another caller holds the pool, is a team
// of one; several outside threads may call at once.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "qkv/core/parallel.h"
#include "testing/guards.h"

namespace {

using i64 = std::int64_t;
using qkv::testing::ThreadsGuard;

// Steps separated by barriers: in step s every member writes its slot, then (after the barrier)
// checks every slot holds s. A missing or early barrier shows as a stale slot.
int run_steps(int steps) {
  std::vector<std::atomic<int>> slot(16);
  std::atomic<int> bad{0}, size_seen{0};
  qkv::parallel_team(16, [&](qkv::Team& team) {
    size_seen = team.size();
    EXPECT_EQ(qkv::thread_index(), team.rank());
    for (int s = 1; s <= steps; ++s) {
      slot[static_cast<std::size_t>(team.rank())].store(s, std::memory_order_relaxed);
      team.barrier();
      for (int r = 0; r < team.size(); ++r)
        if (slot[static_cast<std::size_t>(r)].load(std::memory_order_relaxed) != s) ++bad;
      team.barrier();
    }
  });
  EXPECT_EQ(bad.load(), 0);
  return size_seen.load();
}

TEST(Team, MembersRunAtOnceAndMeetAtBarriers) {
  ThreadsGuard guard;
  qkv::set_num_threads(2);
  EXPECT_EQ(run_steps(2000), 2);
  qkv::set_num_threads(3);  // more members than cores: they still meet (sleeping after the spin)
  EXPECT_EQ(run_steps(200), 3);
  qkv::set_num_threads(1);
  EXPECT_EQ(run_steps(10), 1);
}

TEST(Team, PartSplitsARangeExactlyAndAligned) {
  ThreadsGuard guard;
  qkv::set_num_threads(3);
  for (i64 n : {0, 1, 2, 5, 31, 32, 33, 1000})
    for (i64 align : {1, 14, 32}) {
      std::vector<std::atomic<int>> hit(static_cast<std::size_t>(n));
      qkv::parallel_team(3, [&](qkv::Team& team) {
        const auto [b, e] = team.part(7, 7 + n, align);
        EXPECT_LE(b, e);
        if (b < 7 + n && b > 7) {
          EXPECT_EQ((b - 7) % align, 0) << "n " << n << " align " << align;
        }
        for (i64 i = b; i < e; ++i) ++hit[static_cast<std::size_t>(i - 7)];
      });
      for (i64 i = 0; i < n; ++i) EXPECT_EQ(hit[static_cast<std::size_t>(i)].load(), 1) << "n " << n << " item " << i;
    }
}

TEST(Team, AnExceptionUnwindsTheOtherMembersAndReachesTheCaller) {
  ThreadsGuard guard;
  qkv::set_num_threads(2);
  for (int thrower : {0, 1}) {
    std::atomic<int> after{0};
    try {
      qkv::parallel_team(2, [&](qkv::Team& team) {
        team.barrier();
        if (team.rank() == thrower) throw std::runtime_error("member " + std::to_string(thrower));
        team.barrier();  // the other member waits here: it must be released, not hang
        ++after;
      });
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "member " + std::to_string(thrower));
    }
    EXPECT_EQ(after.load(), 0);
    EXPECT_EQ(run_steps(50), 2);  // the pool works afterwards
  }
}

TEST(Team, InsideAParallelCallOrWhileThePoolIsTakenItIsATeamOfOne) {
  ThreadsGuard guard;
  qkv::set_num_threads(2);
  std::atomic<int> sizes{0};
  qkv::parallel_for(0, 2, 1, [&](i64, i64) {
    qkv::parallel_team(2, [&](qkv::Team& team) {
      team.barrier();
      sizes += team.size();
    });
  });
  EXPECT_EQ(sizes.load(), 2);  // two teams of one
  // Several outside threads at once: whoever finds the pool taken runs alone, and every call
  // still does all its steps.
  std::vector<std::thread> th;
  std::atomic<int> done{0};
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&] {
      for (int r = 0; r < 50; ++r) {
        const int size = run_steps(20);
        EXPECT_TRUE(size == 1 || size == 2) << size;
      }
      ++done;
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(done.load(), 4);
}

}  // namespace
