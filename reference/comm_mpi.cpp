#include "reference/comm_mpi.hpp"

#include <climits>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsa {

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string(call) + " failed: " + std::string(text, len));
}

MpiBlock::MpiBlock(int64_t count, MPI_Datatype elem) {
  if (count <= INT_MAX) {
    mpi_check(MPI_Type_contiguous(static_cast<int>(count), elem, &type_), "MPI_Type_contiguous");
  } else {
    // chunks of 2^30 elements, then the rest; resized so that consecutive blocks tile memory.
    constexpr int64_t kChunk = int64_t{1} << 30;
    MPI_Aint lb = 0, extent = 0;
    mpi_check(MPI_Type_get_extent(elem, &lb, &extent), "MPI_Type_get_extent");
    MPI_Datatype chunk, chunks;
    mpi_check(MPI_Type_contiguous(static_cast<int>(kChunk), elem, &chunk), "MPI_Type_contiguous");
    mpi_check(MPI_Type_contiguous(static_cast<int>(count / kChunk), chunk, &chunks), "MPI_Type_contiguous");
    const int rest = static_cast<int>(count % kChunk);
    int lengths[2] = {1, rest};
    MPI_Aint at[2] = {0, static_cast<MPI_Aint>(count / kChunk * kChunk) * extent};
    MPI_Datatype types[2] = {chunks, elem};
    MPI_Datatype joined;
    mpi_check(MPI_Type_create_struct(rest ? 2 : 1, lengths, at, types, &joined), "MPI_Type_create_struct");
    mpi_check(MPI_Type_create_resized(joined, 0, static_cast<MPI_Aint>(count) * extent, &type_),
              "MPI_Type_create_resized");
    MPI_Type_free(&joined);
    MPI_Type_free(&chunks);
    MPI_Type_free(&chunk);
  }
  mpi_check(MPI_Type_commit(&type_), "MPI_Type_commit");
}

MpiBlock::~MpiBlock() {
  if (type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
}

class MpiHostComm::Scope {
 public:
  Scope(MpiHostComm& c, const char* what) : c_(c), what_(what) {
    ++c_.entered_;
    if (c_.observer) c_.observer(c_.entered_, what_, true);
  }
  ~Scope() {
    if (c_.observer) c_.observer(c_.entered_, what_, false);
  }

 private:
  MpiHostComm& c_;
  const char* what_;
};

MpiHostComm::MpiHostComm() {
  mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

void MpiHostComm::allgather(const double* send, double* recv, int64_t count) {
  Scope s(*this, "allgather");
  MpiBlock b(count, MPI_DOUBLE);
  mpi_check(MPI_Allgather(send, 1, b.type(), recv, 1, b.type(), MPI_COMM_WORLD), "MPI_Allgather");
}

void MpiHostComm::reduce_scatter(const double* send, double* recv, int64_t count) {
  Scope s(*this, "reduce_scatter");
  // Block q of every rank's send goes to rank q; this rank then holds block `rank` of every rank,
  // in rank order, and sums them the way LocalHostGroup does.
  std::vector<double> blocks(static_cast<size_t>(size_) * count);
  MpiBlock b(count, MPI_DOUBLE);
  mpi_check(MPI_Alltoall(send, 1, b.type(), blocks.data(), 1, b.type(), MPI_COMM_WORLD), "MPI_Alltoall");
  sum_in_rank_order(size_, count, [&](int r) { return blocks.data() + r * count; }, recv);
}

void MpiHostComm::allreduce_sum(double* buf, int64_t count) {
  Scope s(*this, "allreduce");
  std::vector<double> all(static_cast<size_t>(size_) * count);
  MpiBlock b(count, MPI_DOUBLE);
  mpi_check(MPI_Allgather(buf, 1, b.type(), all.data(), 1, b.type(), MPI_COMM_WORLD), "MPI_Allgather");
  sum_in_rank_order(size_, count, [&](int r) { return all.data() + r * count; }, buf);
}

}  // namespace dsa
