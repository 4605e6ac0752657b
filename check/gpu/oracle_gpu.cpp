#include "check/gpu/oracle_gpu.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <future>
#include <iterator>
#include <map>
#include <mutex>

#include "check/gpu/cuda_util.hpp"
#include "check/gpu/gpu_oracle.hpp"
#include "check/gpu/host_transfer.hpp"
#include "core/errors.hpp"
#include "core/trace.hpp"

namespace dsa {

namespace {

// The GPU computes every score anyway; returning them (fp64, Tp² of them) spares the judge the
// row-by-row recomputation on the CPU (the top-k test and e_l(I)), which at S 4096 took longer
// than every device stage together. Bounded by host memory: 1/64 of it per matrix, at most 2^28.
int64_t score_elements_budget() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const int64_t bytes = pages > 0 && page > 0 ? int64_t(pages) * page : int64_t{8} << 30;
  return std::clamp<int64_t>(bytes / 64 / int64_t(sizeof(double)), int64_t{1} << 22, int64_t{1} << 28);
}

// Scratch each run may plan its chunks in while the other precision runs beside it.
constexpr int64_t kSharedWorkspaceBytes = int64_t{6} << 30;

// Device bytes one exact run of case c holds besides its scratch, roughly: the inputs, the outputs
// (the gradients as large as the inputs, plus O and O_lat) and the returned score matrix.
int64_t exact_run_bytes(const PreparedCase& c) {
  int64_t n = 0;
  c.inputs.for_each([&](const std::string&, const TensorD& t) { n += 2 * t.size(); });
  const Dims& d = c.problem.dims;
  const int64_t tp = c.layout.tp;
  n += tp * d.H * (d.C + d.Dv) + std::min(tp * tp, score_elements_budget());
  return n * int64_t(sizeof(double));
}

class GpuOracle : public Oracle {
 public:
  explicit GpuOracle(int64_t hold_min_elements) : hold_min_elements_(hold_min_elements) {}
  std::string name() const override { return "gpu"; }

  double device_memory_bytes() const override { return double(gpu_oracle_total_bytes()); }

  // Both precisions at once when both runs and their scratch take at most half the free memory.
  bool runs_precisions_at_once(const PreparedCase& c) const override {
    const int64_t both = exact_run_bytes(c) * 3 / 2 + 2 * kSharedWorkspaceBytes;
    return both <= gpu_oracle_free_bytes() / 2;
  }

  // The score rows of a case too large to return its matrices, which the judge reads row by row (on
  // several threads, in nearly ascending order): computed on the device a block of rows at a time
  // and kept for the case (a few blocks per precision). Row by row on the CPU, a Tp of 27K took
  // two minutes; a block of ~2^25 scores takes milliseconds.
  std::vector<double> score_row(const PreparedCase& c, int64_t g, Precision precision) override {
    const StreamLayout& L = c.layout;
    const int64_t rows = std::clamp<int64_t>(kBlockScores / std::max<int64_t>(L.tp, 1), 1, L.tp);
    const int64_t r0 = g / rows * rows;
    std::lock_guard<std::mutex> lock(mu_);
    std::deque<Block>& cache = blocks_[precision == Precision::exact ? 0 : 1];
    auto it = std::find_if(cache.begin(), cache.end(), [&](const Block& b) { return b.r0 == r0; });
    if (it == cache.end()) {
      if (cache.size() == kBlocksKept) cache.pop_front();
      cache.push_back({r0, gpu_oracle_score_rows(c.problem, L, c.inputs, precision, r0, std::min(rows, L.tp - r0))});
      it = std::prev(cache.end());
    }
    const double* row = it->scores.row(g - r0);
    return {row + L.key_begin(g), row + L.key_end(g)};
  }

 protected:
  Result compute(const PreparedCase& c, Precision precision, const StageRequest& req) override {
    {
      std::lock_guard<std::mutex> lock(mu_);  // a new run: the cached rows may be another case's
      for (auto& cache : blocks_) cache.clear();
    }
    GpuOracleOptions opt;
    opt.precision = precision;
    opt.indexer = req.indexer;
    opt.attention = req.attention;
    opt.attention_indices = req.indices;
    opt.max_score_elements = score_elements_budget();
    // Beside the other precision's run, a fixed share of scratch: the automatic one is a third of
    // whatever is free when the run starts, which the other run may be about to take.
    if (runs_precisions_at_once(c)) opt.max_workspace_bytes = kSharedWorkspaceBytes;
    gpu::HeldOutputs held;
    if (req.hold && req.attention) opt.held = &held, opt.held_min_elements = hold_min_elements_;
    const std::shared_ptr<const DeviceInputs> inputs = req.keep_inputs ? kept_inputs(c) : nullptr;
    opt.kept_inputs = inputs.get();
    Result r = gpu_oracle_run(c.problem, c.layout, c.inputs, opt);
    if (opt.held) {
      std::lock_guard<std::mutex> lock(mu_);
      held_[precision == Precision::exact ? 0 : 1] = std::move(held);
    }
    return r;
  }

 public:
  bool holds_outputs() const override { return true; }

  std::optional<TensorCheck> compare_held(const std::string& name, const TensorD& fused, const StreamLayout& L,
                                          double floor_at_least) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto x = held_[0].find(name);
    if (x == held_[0].end()) return std::nullopt;
    const gpu::HeldTensor& exact = x->second;
    const auto l = held_[1].find(name);
    const gpu::HeldTensor* lowp = l != held_[1].end() && l->second.shape == exact.shape ? &l->second : nullptr;
    const ValueAt fused_at = [&](int64_t i) { return fused.data[i]; };
    const ValueAt exact_at = [&](int64_t i) { return gpu::value_at(exact, i); };
    const ValueAt lowp_at = [&](int64_t i) { return lowp ? gpu::value_at(*lowp, i) : std::nan(""); };
    if (fused.empty() || fused.shape != exact.shape)
      return compare_from_partials(name, fused.shape, exact.shape, {}, L, floor_at_least, fused_at, exact_at, lowp_at,
                                   !fused.empty(), true);
    // The backend's values go up once (fp64, as the host holds them), with the masked pad rows:
    // already on their way since upload_backend_outputs, else now.
    gpu::DeviceArray<double> up = take_upload(name, fused);
    if (!up.get()) {
      up.reset(fused.data.size());
      gpu::to_device<double>(fused.data.data(), up.get(), fused.data.size());
    }
    gpu::DeviceArray<uint8_t> pad;
    int64_t per_row = 0;
    if (pad_rows_zero(name, exact.shape, L)) {
      per_row = exact.size / std::max<int64_t>(exact.shape[0], 1);
      std::vector<uint8_t> rows(static_cast<size_t>(L.tp));
      for (int64_t g = 0; g < L.tp; ++g) rows[g] = !L.is_real(g);
      pad.upload(rows);
    }
    const std::vector<ComparePartial> parts =
        gpu::compare_partials(up.get(), exact, lowp, per_row ? pad.get() : nullptr, per_row);
    return compare_from_partials(name, fused.shape, exact.shape, parts, L, floor_at_least, fused_at, exact_at, lowp_at,
                                 true, true);
  }

  std::optional<int64_t> held_exact_nonfinite(const std::string& name, bool neg_inf_allowed) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto x = held_[0].find(name);
    if (x == held_[0].end()) return std::nullopt;
    return gpu::count_nonfinite(x->second, neg_inf_allowed);
  }

  std::optional<TensorD> fetch_held(const std::string& name, Precision precision) override {
    std::lock_guard<std::mutex> lock(mu_);
    const gpu::HeldOutputs& h = held_[precision == Precision::exact ? 0 : 1];
    const auto it = h.find(name);
    if (it == h.end()) return std::nullopt;
    return gpu::to_host(it->second);
  }

  // On a thread of its own (its own default stream and pinned staging), beside the two precisions'
  // runs: at DeepSeek-V3.2 S 4096 the tensors large enough to be held are 3 GB of fp64, which the
  // comparison uploaded after the runs. Only where they take at most 1/8 of the free memory.
  void upload_backend_outputs(const Result& fused) override {
    std::vector<std::pair<std::string, const TensorD*>> large;
    int64_t bytes = 0;
    fused.for_each_float([&](const std::string& n, const TensorD& t) {
      if (t.size() < hold_min_elements_) return;
      large.emplace_back(n, &t);
      bytes += t.size() * int64_t(sizeof(double));
    });
    wait_uploads();
    if (large.empty() || bytes > gpu_oracle_free_bytes() / 8) return;
    int device = 0;
    DSA_GPU_CUDA(cudaGetDevice(&device));
    uploads_ = std::async(std::launch::async, [large, device] {
      DSA_GPU_CUDA(cudaSetDevice(device));
      const TraceSpan span("upload backend outputs");
      Uploads up;
      for (const auto& [name, t] : large) {
        gpu::DeviceArray<double> d(t->data.size());
        gpu::to_device<double>(t->data.data(), d.get(), t->data.size());
        up.emplace(name, std::move(d));
      }
      return up;
    });
  }

  void release_held() override {
    wait_uploads();
    {
      std::lock_guard<std::mutex> lock(inputs_mu_);
      inputs_.reset(), inputs_case_ = nullptr, inputs_id_ = 0;
    }
    std::lock_guard<std::mutex> lock(mu_);
    held_[0].clear(), held_[1].clear();
    uploaded_.clear();
  }

 private:
  // Case c's inputs on the device: kept ahead (keep_inputs_ahead), else taken up by the first of its
  // runs (the other precision's run waits for them here); kept until release_held.
  std::shared_ptr<const DeviceInputs> kept_inputs(const PreparedCase& c) {
    std::lock_guard<std::mutex> lock(inputs_mu_);
    if (inputs_ && inputs_case_ == &c && inputs_id_ == c.id) return inputs_;
    const auto ahead = std::find_if(ahead_.begin(), ahead_.end(), [&](const auto& a) { return a.first == c.id; });
    if (c.id != 0 && ahead != ahead_.end()) {
      inputs_ = std::move(ahead->second);
      ahead_.erase(ahead);
    } else {
      inputs_ = gpu_keep_inputs(c.inputs);
    }
    inputs_case_ = &c, inputs_id_ = c.id;
    return inputs_;
  }

 public:
  void keep_inputs_ahead(const PreparedCase& c) override {
    if (c.id == 0) return;  // not from prepare(): no identity to find it by
    {
      std::lock_guard<std::mutex> lock(inputs_mu_);
      if (inputs_id_ == c.id || std::any_of(ahead_.begin(), ahead_.end(), [&](const auto& a) { return a.first == c.id; }))
        return;
    }
    std::shared_ptr<const DeviceInputs> kept;
    try {
      kept = gpu_keep_inputs(c.inputs);
    } catch (const std::exception&) {
      return;  // the case's own run takes them up, and reports what fails
    }
    std::lock_guard<std::mutex> lock(inputs_mu_);
    ahead_.emplace_back(c.id, std::move(kept));
    if (ahead_.size() > kKeptAhead) ahead_.pop_front();
  }

 private:
  using Uploads = std::map<std::string, gpu::DeviceArray<double>>;

  // The upload in flight, finished. Never throws (release_held runs in destructors): a failed
  // upload leaves nothing, and compare_held then uploads by itself, which reports the error.
  Uploads finished_uploads() noexcept {
    if (!uploads_.valid()) return {};
    try {
      return uploads_.get();
    } catch (...) {
      return {};
    }
  }
  void wait_uploads() {
    Uploads done = finished_uploads();
    std::lock_guard<std::mutex> lock(mu_);
    uploaded_ = std::move(done);
  }
  // `fused` already on the device under `name` (an empty array when it is not). mu_ is held.
  gpu::DeviceArray<double> take_upload(const std::string& name, const TensorD& fused) {
    if (uploads_.valid()) uploaded_ = finished_uploads();
    const auto it = uploaded_.find(name);
    if (it == uploaded_.end() || it->second.size() != fused.data.size()) return {};
    gpu::DeviceArray<double> d = std::move(it->second);
    uploaded_.erase(it);
    return d;
  }

  static constexpr int64_t kBlockScores = int64_t{1} << 25;  // 256 MiB of fp64 scores per block
  static constexpr size_t kBlocksKept = 4;
  struct Block {
    int64_t r0;
    TensorD scores;  // [rows, Tp]
  };
  std::mutex mu_;
  std::deque<Block> blocks_[2];  // exact, bf16
  gpu::HeldOutputs held_[2];     // exact, bf16: the last held run's
  std::mutex inputs_mu_;
  std::shared_ptr<const DeviceInputs> inputs_;  // kept_inputs's, of case inputs_case_ (id inputs_id_)
  const PreparedCase* inputs_case_ = nullptr;
  uint64_t inputs_id_ = 0;
  static constexpr size_t kKeptAhead = 2;  // the case the backend runs ahead and the one after it
  std::deque<std::pair<uint64_t, std::shared_ptr<const DeviceInputs>>> ahead_;  // keep_inputs_ahead's, by id
  std::future<Uploads> uploads_;  // upload_backend_outputs's, in flight
  Uploads uploaded_;              // ... and done, until compare_held takes them
  const int64_t hold_min_elements_;
};

}  // namespace

std::unique_ptr<Oracle> make_gpu_oracle(int64_t hold_min_elements) {
  if (!gpu_oracle_available()) throw Unavailable("--oracle gpu: no CUDA device");
  return std::make_unique<GpuOracle>(hold_min_elements);
}

}  // namespace dsa
