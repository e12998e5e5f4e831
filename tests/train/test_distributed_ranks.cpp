// The data-parallel machinery inside an MPI job: this binary runs as every rank of
// `mpiexec -np 3 test_distributed_ranks` (CTest), each rank running the same tests.
//  - the collectives carry any size (empty, 1 byte, several MiB, different sizes per rank);
//  - the gradient exchange on 3 ranks is BITWISE the one-process fold in micro-batch order
//    ((G_0 + G_1) + G_2) + ..., for awkward bucket sizes (empty shards, many buckets), with
//    and without overlap, 2 rounds per rank, parameters with no gradient; the test data are
//    chosen so that another association differs (the check can fail);
//  - the start-up check throws the same collective error on every rank, naming the rank;
//    so does a check that fails on one rank (World::fail_together);
//  - a stop request (Ctrl-C) on one rank is every rank's (stop_requested_by_any_rank);
//  - a rank busy (World::Busy) for longer than the collective timeout is not a fault: its
//    heartbeats keep the others waiting; a rank silent for that long is named (last test).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "qkv/core/rng.h"
#include "qkv/qkv.h"
#include "qkv/train/distributed.h"
#include "train/grad_exchange.h"

namespace qkv {
namespace {

using train::world;
constexpr double kTimeout = 1.0;  // short, yet far above a scheduling delay of 3 ranks on 2 busy cores

TEST(Ranks, CollectivesCarryAnySize) {
  train::World& w = world();
  ASSERT_EQ(w.size(), 3) << "run under mpiexec -np 3";
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3} << 20}) {
    std::string b;
    if (w.root()) {
      b.resize(n);
      for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<char>(i * 7 + 3);
    }
    w.broadcast(b, "a test broadcast");
    ASSERT_EQ(b.size(), n);
    for (std::size_t i = 0; i < n; i += 997) EXPECT_EQ(b[i], static_cast<char>(i * 7 + 3));
  }
  const std::vector<std::string> all = w.allgather(std::string(static_cast<std::size_t>(w.rank()) * 1000, 'a' + static_cast<char>(w.rank())), "x");
  ASSERT_EQ(all.size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(all[r], std::string(static_cast<std::size_t>(r) * 1000, 'a' + static_cast<char>(r)));
  w.barrier("a test barrier");
}

// Micro-batch k's gradient of parameter i: values over many orders of magnitude, so that
// float sums depend on their association.
std::vector<float> grad_of(std::int64_t k, std::size_t i, std::int64_t n) {
  std::vector<float> g(static_cast<std::size_t>(n));
  for (std::int64_t e = 0; e < n; ++e) {
    const double u = uniform_at(1000 * static_cast<std::uint64_t>(k) + i, static_cast<std::uint64_t>(e));
    g[static_cast<std::size_t>(e)] = static_cast<float>((u - 0.5) * std::pow(10.0, 8 * u - 4));
  }
  return g;
}

void check_exchange(std::int64_t bucket_bytes, bool overlap) {
  SCOPED_TRACE("bucket " + std::to_string(bucket_bytes) + (overlap ? " overlapped" : " after the backward"));
  train::World& w = world();
  const std::int64_t N = w.size(), A = 2, K = N * A;
  // Parameters; number 3 never gets a gradient, number 1 only from micro-batch 4.
  std::vector<Tensor> params{Tensor::zeros({7}), Tensor::zeros({3, 5}), Tensor::zeros({1000}), Tensor::zeros({2}),
                             Tensor::zeros({1})};
  for (Tensor& p : params) p.requires_grad_();
  train::detail::GradExchange ex(params, w.comm(), K, bucket_bytes, overlap);
  auto gets = [](std::int64_t k, std::size_t i) { return i != 3 && (i != 1 || k == 4); };
  for (std::int64_t step = 0; step < 2; ++step) {
    ex.begin_step(step);
    std::vector<double> losses;
    for (std::int64_t j = 0; j < A; ++j) {
      const std::int64_t k = j * N + w.rank();
      ex.begin_micro(j);
      const autograd::LeafReadyHook hook = ex.hook();
      // "Backward": gradients become ready from the last parameter to the first.
      for (std::size_t i = params.size(); i-- > 0;) {
        if (gets(k + step, i)) {
          const std::vector<float> g = grad_of(k + step, i, params[i].numel());
          params[i].set_grad(Tensor::from_vector(g, params[i].shape()));
        }
        hook(params[i].impl_ptr());
      }
      ex.end_micro();
      losses.push_back(static_cast<double>(k) + 0.25);
    }
    const std::vector<double> all = ex.finish(losses);
    ASSERT_EQ(all.size(), static_cast<std::size_t>(K));
    for (std::int64_t k = 0; k < K; ++k) EXPECT_EQ(all[static_cast<std::size_t>(k)], static_cast<double>(k) + 0.25);
    // The one-process fold, micro-batch by micro-batch, and another association.
    bool association_matters = false;
    for (std::size_t i = 0; i < params.size(); ++i) {
      std::vector<float> fold;
      bool any = false;
      for (std::int64_t k = 0; k < K; ++k) {
        const std::vector<float> g = gets(k + step, i) ? grad_of(k + step, i, params[i].numel())
                                                       : std::vector<float>(static_cast<std::size_t>(params[i].numel()), 0.f);
        any = any || gets(k + step, i);
        if (k == 0) fold = g;
        else
          for (std::size_t e = 0; e < g.size(); ++e) fold[e] = fold[e] + g[e];
      }
      if (!any) {
        EXPECT_FALSE(params[i].grad().defined()) << i;
        continue;
      }
      ASSERT_TRUE(params[i].grad().defined()) << i;
      EXPECT_EQ(params[i].grad().to_vector<float>(), fold) << "parameter " << i << " step " << step;  // bitwise
      // ((G0 + G2) + G4) + ((G1 + G3) + G5): what summing per rank first would give.
      std::vector<float> by_rank(fold.size(), 0.f);
      for (std::int64_t r = 0; r < N; ++r) {
        std::vector<float> part;
        for (std::int64_t j = 0; j < A; ++j) {
          const std::int64_t k = j * N + r;
          const std::vector<float> g = gets(k + step, i) ? grad_of(k + step, i, params[i].numel())
                                                         : std::vector<float>(fold.size(), 0.f);
          if (j == 0) part = g;
          else
            for (std::size_t e = 0; e < g.size(); ++e) part[e] = part[e] + g[e];
        }
        for (std::size_t e = 0; e < fold.size(); ++e) by_rank[e] = r == 0 ? part[e] : by_rank[e] + part[e];
      }
      association_matters = association_matters || by_rank != fold;
    }
    EXPECT_TRUE(association_matters) << "the test data do not tell two summation orders apart";
  }
  EXPECT_EQ(ex.parameter_bytes(), 4 * (7 + 15 + 1000 + 2 + 1));
  EXPECT_GT(ex.bytes_sent_per_step(), 0);
}

TEST(Ranks, ExchangeIsTheOneProcessFoldInMicroBatchOrder) {
  for (const std::int64_t bucket : {std::int64_t{4}, std::int64_t{64}, std::int64_t{1} << 20})
    for (const bool overlap : {true, false}) check_exchange(bucket, overlap);
}

TEST(Ranks, RanksThatDisagreeAllThrowTheSameErrorNamingTheRank) {
  train::World& w = world();
  try {
    w.check_same({{"option --lr", w.rank() == 2 ? "0.002" : "0.001"}, {"the data", "x"}}, "the test");
    FAIL() << "no error";
  } catch (const train::DistributedError& e) {
    EXPECT_TRUE(e.collective());
    EXPECT_STREQ(e.what(), "ranks disagree on the test: option --lr is '0.002' on rank 2 but '0.001' on rank 0");
  }
  w.check_same({{"option --lr", "0.001"}}, "the test");  // and the job goes on
}

TEST(Ranks, ACheckThatFailsOnOneRankFailsOnEveryRankNamingIt) {
  train::World& w = world();
  for (const int failing : {0, 2}) {
    try {
      w.fail_together(
          [&] {
            if (w.rank() == failing) throw IOError("train lm: --text t.txt: no such file");
          },
          "the test's checks");
      FAIL() << "no error";
    } catch (const train::DistributedError& e) {
      EXPECT_TRUE(e.collective());
      EXPECT_FALSE(w.local_failure());
      EXPECT_EQ(std::string(e.what()),
                (failing == 0 ? "" : "rank 2 of 3: ") + std::string("train lm: --text t.txt: no such file"));
    }
  }
  // The lowest failing rank speaks; no failure: no error.
  try {
    w.fail_together([&] { throw ValueError("on rank " + std::to_string(w.rank())); }, "the test's checks");
    FAIL() << "no error";
  } catch (const train::DistributedError& e) {
    EXPECT_STREQ(e.what(), "on rank 0");
  }
  int ran = 0;
  w.fail_together([&] { ++ran; }, "the test's checks");
  EXPECT_EQ(ran, 1);
}

TEST(Ranks, AStopRequestedOnOneRankStopsEveryRank) {
  train::World& w = world();
  train::clear_stop_request();
  EXPECT_FALSE(train::stop_requested_by_any_rank("in a test"));
  if (w.rank() == 1) train::request_stop();  // Ctrl-C reached rank 1 alone
  EXPECT_TRUE(train::stop_requested_by_any_rank("in a test"));
  EXPECT_TRUE(train::stop_requested());  // now every rank's own request
  train::clear_stop_request();
}

TEST(Ranks, ABusyRankIsNotAFault) {
  train::World& w = world();
  const auto t0 = std::chrono::steady_clock::now();
  if (w.root()) {
    const train::World::Busy busy(w);
    std::this_thread::sleep_for(std::chrono::duration<double>(3 * kTimeout));
  }
  w.barrier("rank 0's long work");  // the others wait ~3 timeouts, hearing rank 0's heartbeats
  // Every rank waited well past one timeout without a fault. (Not 3 timeouts exactly: the ranks
  // enter the test a few milliseconds apart, so a rank's own clock may see slightly less.)
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2 * kTimeout);
}

TEST(Ranks, ASilentRankIsNamedAfterTheTimeout) {
  train::World& w = world();
  if (w.root()) {
    std::this_thread::sleep_for(std::chrono::duration<double>(2 * kTimeout));  // no heartbeats
    w.barrier("the end of the test");  // the others gave up: its release reaches nobody yet
    const train::World::Busy busy(w);  // and lets them take it before the next collective
    std::this_thread::sleep_for(std::chrono::duration<double>(3 * kTimeout));
    return;
  }
  try {
    w.barrier("rank 0 in a test");
    FAIL() << "no error";
  } catch (const train::DistributedError& e) {
    EXPECT_FALSE(e.collective());
    EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(w.rank()) +
                                         " of 3: rank 0 sent nothing for 1 s while this rank waited for rank 0 in a "
                                         "test (--collective-timeout 1): it died, hangs or cannot be reached");
  }
  // Back in step for the next tests: take rank 0's release, sent after this rank gave up.
  std::this_thread::sleep_for(std::chrono::duration<double>(3 * kTimeout));
  char release = 0;
  std::vector<train::detail::Request> q{w.comm()->irecv(&release, 1, 0, train::detail::Tag::Control)};
  w.comm()->wait(q, "rank 0's late release");
}

}  // namespace
}  // namespace qkv

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  qkv::train::World& w = qkv::train::start_distributed({.collective_timeout_s = qkv::kTimeout});
  int rc = RUN_ALL_TESTS();
  for (const std::string& r : w.allgather(std::to_string(rc), "the results"))  // every rank fails if one does
    if (r != "0") rc = 1;
  qkv::train::stop_distributed();
  return rc;
}
