#include "harness/mpi_wire.hpp"

#include <cstring>
#include <stdexcept>
#include <string_view>

#include "harness/philox.hpp"

namespace dsa::mpi {

namespace {

using philox::name_hash;

class Writer {
 public:
  void raw(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
  void i64(int64_t v) { raw(&v, sizeof v); }
  template <class T>
  void tensor(const Tensor<T>& t) {
    i64(static_cast<int64_t>(t.shape.size()));
    for (int64_t d : t.shape) i64(d);
    i64(t.size());
    raw(t.data.data(), t.data.size() * sizeof(T));
  }
  std::string out;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  void raw(void* p, size_t n) {
    if (n > s_.size() - at_) throw std::runtime_error("rank result: truncated");
    std::memcpy(p, s_.data() + at_, n);
    at_ += n;
  }
  int64_t i64() {
    int64_t v = 0;
    raw(&v, sizeof v);
    return v;
  }
  template <class T>
  Tensor<T> tensor() {
    Tensor<T> t;
    const int64_t ndim = i64();
    if (ndim < 0 || ndim > 8) throw std::runtime_error("rank result: bad rank");
    for (int64_t k = 0; k < ndim; ++k) t.shape.push_back(i64());
    const int64_t n = i64();
    if (n < 0 || static_cast<uint64_t>(n) > (s_.size() - at_) / sizeof(T) || (ndim > 0 && n != numel(t.shape)))
      throw std::runtime_error("rank result: bad size");
    t.data.resize(static_cast<size_t>(n));
    raw(t.data.data(), t.data.size() * sizeof(T));
    return t;
  }
  void end() const {
    if (at_ != s_.size()) throw std::runtime_error("rank result: trailing bytes");
  }

 private:
  const std::string& s_;
  size_t at_ = 0;
};

// The float tensors of a RankResult, in the one order both sides use.
template <class R, class F>
void for_each_float(R& r, F f) {
  for (auto* t : {&r.scores, &r.O, &r.O_lat, &r.lse, &r.kl, &r.dq_nope, &r.dq_pe, &r.dq_I, &r.dw, &r.dc, &r.dk_pe,
                  &r.dk_I, &r.dW_UK, &r.dW_UV})
    f(*t);
}

template <class T>
std::string_view bytes_of(const Tensor<T>& t) {
  return {reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(T)};
}

}  // namespace

std::string pack_rank_result(const RankResult& r) {
  Writer w;
  w.tensor(r.topk);
  for_each_float(r, [&](const TensorD& t) { w.tensor(t); });
  w.raw(&r.loss, sizeof r.loss);
  return std::move(w.out);
}

RankResult unpack_rank_result(const std::string& bytes) {
  Reader rd(bytes);
  RankResult r;
  r.topk = rd.tensor<int32_t>();
  for_each_float(r, [&](TensorD& t) { t = rd.tensor<double>(); });
  rd.raw(&r.loss, sizeof r.loss);
  rd.end();
  return r;
}

uint64_t inputs_digest(const Inputs& in, const std::optional<TensorI>& injected) {
  std::string hashes;  // one FNV-1a per tensor, then one over them all
  auto add = [&](uint64_t h) { hashes.append(reinterpret_cast<const char*>(&h), sizeof h); };
  in.for_each([&](const std::string& name, const TensorD& t) {
    add(name_hash(name));
    add(name_hash(bytes_of(t)));
  });
  if (injected) add(name_hash(bytes_of(*injected)));
  return name_hash(hashes);
}

uint64_t inputs_digest(const PreparedCase& pc) { return inputs_digest(pc.inputs, pc.injected); }

uint64_t text_digest(const std::string& text) { return name_hash(text); }

}  // namespace dsa::mpi
