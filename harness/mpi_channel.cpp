#include "harness/mpi_channel.hpp"

#include <thread>
#include <vector>

#include "reference/comm_mpi.hpp"

namespace dsa::mpi {

const char* name(Tag t) {
  switch (t) {
    case Tag::hello: return "hello";
    case Tag::case_: return "case";
    case Tag::agree: return "agree";
    case Tag::go: return "go";
    case Tag::progress: return "progress";
    case Tag::output: return "output";
    case Tag::fault: return "fault";
    case Tag::end: return "end";
  }
  return "?";
}

void Backoff::idle() {
  std::this_thread::sleep_for(std::chrono::microseconds(us_));
  us_ = std::min(us_ * 2, 5000);
}

Channel::Channel() {
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

Channel::~Channel() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

// A message is its length (int64) and then its bytes, both under its tag: MPI keeps the order of
// two messages of one sender with one tag, and the length lets the bytes go as one MpiBlock
// whatever their size.
bool Channel::send(int to, Tag tag, const std::string& bytes, Clock::time_point deadline) {
  // Owned here until MPI is done with it; leaked if the receiver never takes it (the job is then
  // aborted: MPI may still read the buffer until it is).
  auto* payload = new std::string(bytes);
  auto* size = new int64_t(static_cast<int64_t>(bytes.size()));
  MpiBlock block(*size, MPI_BYTE);
  MPI_Request req[2];
  mpi_check(MPI_Isend(size, 1, MPI_INT64_T, to, static_cast<int>(tag), comm_, &req[0]), "MPI_Isend");
  mpi_check(MPI_Isend(payload->data(), 1, block.type(), to, static_cast<int>(tag), comm_, &req[1]), "MPI_Isend");
  Backoff backoff;
  for (;;) {
    int done = 0;
    mpi_check(MPI_Testall(2, req, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done) {
      delete payload;
      delete size;
      return true;
    }
    if (Clock::now() >= deadline) {
      MPI_Request_free(&req[0]);
      MPI_Request_free(&req[1]);
      return false;
    }
    backoff.idle();
  }
}

void Channel::send(int to, Tag tag, const std::string& bytes) {
  const int64_t size = static_cast<int64_t>(bytes.size());
  MpiBlock block(size, MPI_BYTE);
  mpi_check(MPI_Send(&size, 1, MPI_INT64_T, to, static_cast<int>(tag), comm_), "MPI_Send");
  mpi_check(MPI_Send(bytes.data(), 1, block.type(), to, static_cast<int>(tag), comm_), "MPI_Send");
}

std::optional<Message> Channel::poll(int from, Tag tag) {
  int flag = 0;
  MPI_Status st;
  mpi_check(MPI_Iprobe(from, static_cast<int>(tag), comm_, &flag, &st), "MPI_Iprobe");
  if (!flag) return std::nullopt;
  Message m;
  m.from = st.MPI_SOURCE;
  m.tag = tag;
  int64_t size = 0;
  mpi_check(MPI_Recv(&size, 1, MPI_INT64_T, m.from, static_cast<int>(tag), comm_, MPI_STATUS_IGNORE), "MPI_Recv");
  m.bytes.resize(static_cast<size_t>(size));
  MpiBlock block(size, MPI_BYTE);
  mpi_check(MPI_Recv(m.bytes.data(), 1, block.type(), m.from, static_cast<int>(tag), comm_, MPI_STATUS_IGNORE),
            "MPI_Recv");
  return m;
}

Message Channel::wait(int from, std::initializer_list<Tag> tags) {
  Backoff backoff;
  for (;;) {
    for (Tag t : tags)
      if (auto m = poll(from, t)) return *m;
    backoff.idle();
  }
}

}  // namespace dsa::mpi
