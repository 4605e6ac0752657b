// The control messages of `--comm mpi` between rank 0 (the driver) and the other ranks: the
// handshake, each case, the per-case agreement, progress notes, the rank outputs, fault notices
// and the end of the run (harness/mpi_session.cpp says who sends what when).
//
// They travel point to point on a communicator of their own (a duplicate of MPI_COMM_WORLD), so
// they never match the reference's collectives, and every wait polls: rank 0 waits with a
// deadline, so that a rank that never answers cannot block it, and an idle rank sleeps between
// polls instead of spinning on a core the others need.
#pragma once

#include <mpi.h>

#include <chrono>
#include <initializer_list>
#include <optional>
#include <string>

namespace dsa::mpi {

using Clock = std::chrono::steady_clock;

enum class Tag : int {
  hello = 1,     // rank → 0: who it is (build, backend), once at the start
  case_ = 2,     // 0 → rank: the case to run, as JSON
  agree = 3,     // rank → 0: the hashes of the case and of the inputs it generated
  go = 4,        // 0 → rank: run it (or not: a rank disagreed)
  progress = 5,  // rank → 0: it entered or left a collective (names the rank that hangs)
  output = 6,    // rank → 0: its RankResult (mpi_wire.hpp)
  fault = 7,     // rank → 0: it is crashing (signal, exit, exception): how
  end = 8,       // 0 → rank: the run is over
};
const char* name(Tag t);

struct Message {
  int from = -1;
  Tag tag = Tag::hello;
  std::string bytes;
};

class Channel {
 public:
  Channel();  // MPI must be initialized; duplicates MPI_COMM_WORLD
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Sends bytes to rank `to`. Waits (polling) until MPI has taken them, at most until `deadline`:
  // false when it had not by then (the receiver is not receiving; the send is cancelled).
  bool send(int to, Tag tag, const std::string& bytes, Clock::time_point deadline);
  // Sends without a deadline: what a rank other than 0 does (rank 0 always receives).
  void send(int to, Tag tag, const std::string& bytes);
  // One waiting message from `from` (MPI_ANY_SOURCE: any rank) with `tag`, received whole;
  // nullopt when none is waiting. Only one thread of a process receives.
  std::optional<Message> poll(int from, Tag tag);
  // Polls until a message from `from` with one of `tags` arrives, sleeping between polls (what an
  // idle rank does: no deadline, rank 0 drives).
  Message wait(int from, std::initializer_list<Tag> tags);

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

// Sleeps a little longer at each idle poll, from 50 µs up to 5 ms: a fast answer is seen at once,
// a long wait costs no core.
class Backoff {
 public:
  void idle();
  void reset() { us_ = 50; }

 private:
  int us_ = 50;
};

}  // namespace dsa::mpi
