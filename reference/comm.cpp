#include "reference/comm.hpp"

#include <algorithm>

namespace dsa {

// Each collective publishes this rank's buffers, waits for every rank, does its own part, and
// waits again so no rank reuses a buffer another rank is still reading.
class LocalHostGroup::Member final : public HostComm {
 public:
  Member(LocalHostGroup& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size_; }

  void allgather(const double* send, double* recv, int64_t count) override {
    publish(send, recv);
    for (int r = 0; r < g_.size_; ++r) std::copy(g_.send_[r], g_.send_[r] + count, recv + r * count);
    g_.barrier_.arrive_and_wait();
  }

  void reduce_scatter(const double* send, double* recv, int64_t count) override {
    publish(send, recv);
    sum_in_rank_order(g_.size_, count, [&](int r) { return g_.send_[r] + rank_ * count; }, recv);
    g_.barrier_.arrive_and_wait();
  }

  void allreduce_sum(double* buf, int64_t count) override {
    std::vector<double> mine(buf, buf + count);
    publish(mine.data(), buf);
    sum_in_rank_order(g_.size_, count, [&](int r) { return g_.send_[r]; }, buf);
    g_.barrier_.arrive_and_wait();
  }

 private:
  void publish(const double* send, double* recv) {
    g_.send_[rank_] = send;
    g_.recv_[rank_] = recv;
    g_.barrier_.arrive_and_wait();
  }
  LocalHostGroup& g_;
  int rank_;
};

LocalHostGroup::LocalHostGroup(int size) : size_(size), barrier_(size), send_(size), recv_(size) {
  for (int r = 0; r < size; ++r) members_.push_back(new Member(*this, r));
}

LocalHostGroup::~LocalHostGroup() {
  for (auto* m : members_) delete m;
}

HostComm& LocalHostGroup::comm(int rank) { return *members_.at(rank); }

}  // namespace dsa
