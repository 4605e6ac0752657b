// The MPI layer of --comm mpi, run under `mpirun -np N` (N = 2, 3, 4; tools/mpi_cli_test.cpp
// launches it): MpiHostComm's collectives give the bits of LocalHostGroup's, one rank of the
// reference core over MPI gives the rows of the in-process sharded run bit for bit, and its
// RankResult survives the wire and the channel to rank 0, which assembles the in-process Result.
// Every rank runs every test; the exit code is the worst over the ranks. Only non-fatal EXPECTs
// around collectives: a rank leaving a test early would leave the others waiting.
#include <mpi.h>
#include <omp.h>

#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "harness/generate.hpp"
#include "harness/mpi_channel.hpp"
#include "harness/mpi_wire.hpp"
#include "harness/run_case.hpp"
#include "reference/comm_mpi.hpp"
#include "reference/core.hpp"

namespace dsa {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

template <class T>
::testing::AssertionResult same_bits(const std::string& what, const Tensor<T>& a, const Tensor<T>& b) {
  if (a.shape != b.shape) return ::testing::AssertionFailure() << what << ": shape " << shape_str(a.shape) << " vs " << shape_str(b.shape);
  if (!a.data.empty() && std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(T)) != 0)
    return ::testing::AssertionFailure() << what << ": values differ";
  return ::testing::AssertionSuccess();
}

// Rank r's send buffer: magnitudes whose sums depend on the order of additions (1e16 + 1 − 1e16).
std::vector<double> send_of(int r, int64_t n) {
  std::vector<double> v(n);
  const double scale[] = {1e16, 1.0, -1e16, 0.5, 3e-5};
  for (int64_t i = 0; i < n; ++i) v[i] = scale[(r + i) % 5] * (1.0 + 0.001 * i) + (r % 2 ? -0.0 : 0.0);
  return v;
}

TEST(MpiHostComm, CollectivesGiveTheBitsOfTheLocalGroup) {
  MpiHostComm comm;
  const int n = comm.size(), me = comm.rank();
  EXPECT_EQ(me, world_rank());
  for (int64_t count : {0, 1, 7, 1000}) {
    // What LocalHostGroup gives every rank, computed here with one thread per rank.
    LocalHostGroup group(n);
    std::vector<std::vector<double>> gathered(n, std::vector<double>(n * count)), scattered(n, std::vector<double>(count)),
        reduced(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        const std::vector<double> mine = send_of(r, count), all = send_of(r, n * count);
        group.comm(r).allgather(mine.data(), gathered[r].data(), count);
        group.comm(r).reduce_scatter(all.data(), scattered[r].data(), count);
        reduced[r] = mine;
        group.comm(r).allreduce_sum(reduced[r].data(), count);
      });
    for (auto& t : threads) t.join();

    const std::vector<double> mine = send_of(me, count), all = send_of(me, n * count);
    std::vector<double> g(n * count), s(count), a = mine;
    comm.allgather(mine.data(), g.data(), count);
    comm.reduce_scatter(all.data(), s.data(), count);
    comm.allreduce_sum(a.data(), count);
    EXPECT_EQ(std::memcmp(g.data(), gathered[me].data(), g.size() * 8), 0) << "allgather, count " << count;
    EXPECT_EQ(std::memcmp(s.data(), scattered[me].data(), s.size() * 8), 0) << "reduce_scatter, count " << count;
    EXPECT_EQ(std::memcmp(a.data(), reduced[me].data(), a.size() * 8), 0) << "allreduce, count " << count;
  }
  EXPECT_EQ(comm.entered(), 12);
}

TEST(MpiHostComm, ObserverSeesEveryCollectiveEnteredAndLeft) {
  MpiHostComm comm;
  std::vector<std::string> seen;
  comm.observer = [&](int64_t entered, const char* what, bool inside) {
    seen.push_back(std::to_string(entered) + what + (inside ? "+" : "-"));
  };
  double x = 1;
  comm.allreduce_sum(&x, 1);
  EXPECT_EQ(x, double(comm.size()));
  EXPECT_EQ(seen, (std::vector<std::string>{"1allreduce+", "1allreduce-"}));
}

// Every rank runs its part of the case over MPI; its rows equal those of run_core_sharded (in
// process, computed by every rank); rank 0 then assembles the ranks' results, sent over the
// channel as on the wire, into the in-process Result.
void expect_rank_equals_in_process(const Case& c, RunOptions opt, const std::string& what) {
  SCOPED_TRACE(what + ": " + describe(c));
  const PreparedCase pc = prepare_case(c);
  opt.attention_indices = pc.injected;
  const int cp = world_size(), me = world_rank();
  omp_set_num_threads(std::max(1, omp_get_max_threads() / cp));  // what an in-process rank gets
  const Result local = run_core_sharded(pc.problem, pc.inputs, opt);
  MpiHostComm comm;
  const RankResult mine = run_core_rank(pc.problem, pc.layout, pc.inputs, opt, comm);

  mpi::Channel ch;
  if (me != 0) {
    ch.send(0, mpi::Tag::output, mpi::pack_rank_result(mine));
    return;
  }
  std::vector<RankResult> ranks(cp);
  ranks[0] = mine;
  for (int r = 1; r < cp; ++r) ranks[r] = mpi::unpack_rank_result(ch.wait(r, {mpi::Tag::output}).bytes);
  const Result assembled = assemble_ranks(pc.layout, ranks);
  EXPECT_TRUE(same_bits("topk", assembled.topk, local.topk));
  ASSERT_EQ(assembled.scores.has_value(), local.scores.has_value());
  if (local.scores) {
    EXPECT_TRUE(same_bits("scores", *assembled.scores, *local.scores));
  }
  int floats = 0;
  local.for_each_float([&](const std::string& name, const TensorD& t) {
    TensorD other;
    assembled.for_each_float([&](const std::string& n2, const TensorD& t2) {
      if (n2 == name) other = t2;
    });
    EXPECT_TRUE(same_bits(name, other, t));
    floats += !t.data.empty();
  });
  EXPECT_GT(floats, 3);
}

TEST(RunCoreRank, OverMpiGivesTheBitsOfTheInProcessRun) {
  const int cp = world_size();
  RunOptions exact, lowp;
  lowp.precision = Precision::bf16;
  for (int64_t i = 0; i < 12; ++i) {
    const Case c = random_case("smoke", 5, i, all_paths(), cp);
    ASSERT_EQ(c.problem.cp.size, cp);
    expect_rank_equals_in_process(c, i % 3 ? lowp : exact, i % 3 ? "lowp" : "exact");
  }
  // The exchange's planted bugs act the same over MPI as on threads.
  for (Mutant m : {Mutant::allgather_rank_order_scrambled, Mutant::zigzag_send_halves_swapped,
                   Mutant::loss_count_rank_left_out, Mutant::zigzag_chunk_swap, Mutant::no_key_grad_reduce_scatter}) {
    RunOptions o = lowp;
    o.mutant = m;
    expect_rank_equals_in_process(random_case("smoke", 6, static_cast<int64_t>(m), all_paths(), cp), o, name(m));
  }
}

TEST(RankWire, PackedResultsUnpackToTheSameBits) {
  const Case c = random_case("smoke", 7, 0, all_paths(), 1);
  const PreparedCase pc = prepare_case(c);
  LocalHostGroup one(1);
  const RankResult r = run_core_rank(pc.problem, pc.layout, pc.inputs, RunOptions{}, one.comm(0));
  const std::string bytes = mpi::pack_rank_result(r);
  const RankResult back = mpi::unpack_rank_result(bytes);
  EXPECT_TRUE(same_bits("O", back.O, r.O));
  EXPECT_TRUE(same_bits("topk", back.topk, r.topk));
  EXPECT_TRUE(same_bits("scores", back.scores, r.scores));
  EXPECT_TRUE(same_bits("dW_UK", back.dW_UK, r.dW_UK));
  EXPECT_EQ(std::memcmp(&back.loss, &r.loss, sizeof r.loss), 0);
  EXPECT_THROW(mpi::unpack_rank_result(bytes.substr(0, bytes.size() - 1)), std::runtime_error);
  EXPECT_THROW(mpi::unpack_rank_result(bytes + "x"), std::runtime_error);
  // The inputs digest tells two seeds apart, and one seed from itself not.
  Case other = c;
  other.seed += 1;
  EXPECT_EQ(mpi::inputs_digest(pc), mpi::inputs_digest(prepare_case(c)));
  EXPECT_NE(mpi::inputs_digest(pc), mpi::inputs_digest(prepare_case(other)));
}

TEST(Channel, ASendNobodyReceivesByItsDeadlineReportsFalse) {
  mpi::Channel ch;
  const std::string big(8 << 20, 'x');  // past any eager limit: the send waits for its receiver
  if (ch.rank() == 0 && ch.size() > 1) {
    EXPECT_TRUE(ch.send(1, mpi::Tag::hello, "small", mpi::Clock::now() + std::chrono::seconds(30)));
    EXPECT_FALSE(ch.send(1, mpi::Tag::fault, big, mpi::Clock::now() + std::chrono::milliseconds(200)));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (ch.rank() == 1) {  // received late, whole: the abandoned send still owns its buffer
    EXPECT_EQ(ch.wait(0, {mpi::Tag::hello}).bytes, "small");
    EXPECT_EQ(ch.wait(0, {mpi::Tag::fault}).bytes.size(), big.size());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace dsa

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (dsa::world_rank() != 0) GTEST_FLAG_SET(brief, true);  // the other ranks print only failures (read by Init)
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
