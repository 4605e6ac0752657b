#include "harness/exec_protocol.hpp"

#include "core/catalogue.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "core/layout.hpp"
#include "harness/bounds.hpp"
#include "harness/safe_file.hpp"
#include "harness/text.hpp"

namespace dsa::exec {

namespace {

StreamLayout layout_of(const Case& c) {
  return make_layout(c.problem.seqlens, c.problem.cp, c.problem.pad_rows);
}

TensorI to_tensor(const std::vector<int64_t>& v) {
  TensorI t({int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data[i] = int32_t(v[i]);
  return t;
}

}  // namespace

const std::vector<std::string>& output_names() {
  static const std::vector<std::string> n = [] {
    std::vector<std::string> v;
    for (const TensorSpec* t : result_specs()) v.emplace_back(t->name);
    return v;
  }();
  return n;
}

Shape output_shape(const std::string& n, const Problem& p, int64_t tp) {
  const TensorSpec* t = find_tensor(n);
  if (!t || !t->is_result()) throw std::invalid_argument("not an output: " + n);
  return shape_of(*t, p.dims, tp, p.topk);
}

st::File inputs_file(const Case& c, const Inputs& in, const std::optional<TensorI>& injected) {
  const StreamLayout L = layout_of(c);
  st::File f;
  in.for_each([&](const std::string& n, const TensorD& t) { f.tensors[n] = st::from_doubles(t, st::DType::BF16); });
  f.tensors["cu_padded"] = st::from_ints(to_tensor(L.cu));
  TensorI real({L.tp});
  for (int64_t g = 0; g < L.tp; ++g) real.data[g] = L.is_real(g);
  f.tensors["real"] = st::from_ints(real);
  if (injected) f.tensors["indices"] = st::from_ints(*injected);
  TensorI rr({L.cp, L.rows_per_rank()});
  for (int64_t r = 0; r < L.cp; ++r)
    for (int64_t i = 0; i < L.rows_per_rank(); ++i) rr.data[r * L.rows_per_rank() + i] = int32_t(L.rank_rows[r][i]);
  f.tensors["rank_rows"] = st::from_ints(rr);
  f.metadata["cp"] = std::to_string(L.cp);
  f.metadata["layout"] = name(L.kind);
  f.metadata["pad_rows"] = name(L.pad_rows);
  f.metadata["format"] = "dsa-parity/exec-inputs/v1";
  f.metadata["case"] = describe(c);
  return f;
}

std::string layout_json(const Case& c) {
  const StreamLayout L = layout_of(c);
  nlohmann::json j;
  j["format"] = "dsa-parity/exec-layout/v1";
  j["tp"] = L.tp;
  j["cp"] = L.cp;
  j["layout"] = name(L.kind);
  j["pad_multiple"] = c.problem.cp.effective_pad_multiple();
  j["pad_rows"] = name(L.pad_rows);
  j["rows_per_rank"] = L.rows_per_rank();
  j["cu_padded"] = L.cu;
  j["lengths"] = L.lengths;
  std::vector<int> real(L.real.begin(), L.real.end());
  j["real"] = real;
  j["rank_rows"] = L.rank_rows;
  return j.dump() + "\n";
}

std::string catalogue_json() {
  auto role = [](Role r) {
    switch (r) {
      case Role::input: return "input";
      case Role::injected: return "injected";
      case Role::output: return "output";
      case Role::gradient: return "gradient";
    }
    return "?";
  };
  static const char* const extents[] = {"Tp", "K'", "H", "Dn", "R", "C", "Dv", "HI", "DI", "1"};
  nlohmann::json j;
  j["format"] = "dsa-parity/catalogue/v1";
  j["stages"] = nlohmann::json::array();
  for (Stage s : kStages) j["stages"].push_back(name(s));
  j["extents"] = {{"Tp", "padded stream length"}, {"K'", "min(topk, Tp)"}, {"H", "dims.H"},
                  {"Dn", "dims.Dn"}, {"R", "dims.R"}, {"C", "dims.C"}, {"Dv", "dims.Dv"},
                  {"HI", "dims.HI"}, {"DI", "dims.DI"}, {"1", "one"}};
  j["tensors"] = nlohmann::json::array();
  for (const TensorSpec& t : catalogue()) {
    nlohmann::json shape = nlohmann::json::array();
    for (Extent e : t.shape) shape.push_back(extents[static_cast<int>(e)]);
    j["tensors"].push_back({{"name", std::string(t.name)},
                            {"role", role(t.role)},
                            {"stage", name(t.stage)},
                            {"dtype", name(t.dtype)},
                            {"shape", shape},
                            {"optional", t.optional},
                            {"alpha", t.alpha()},
                            {"meaning", std::string(t.meaning)}});
  }
  // What the exec protocols write and accept (safetensors dtype names).
  j["exec"] = {{"input_dtype", "BF16"},
               {"index_dtypes", {"I32", "I64"}},
               {"float_dtypes", {"F32", "BF16", "F16", "F64"}},
               {"extra_inputs", {{"cu_padded", "I32 [segments+1]"}, {"real", "I32 [Tp]"},
                                 {"rank_rows", "I32 [cp, Tp/cp]"}, {"indices", "I32 [Tp, K'] (injected only)"}}}};
  return j.dump(1) + "\n";
}

void write_inputs(const std::string& folder, const Case& c, const Inputs& in, const std::optional<TensorI>& injected) {
  save_case(c, folder + "/case.json");
  {
    std::ofstream o(folder + "/layout.json");
    o << layout_json(c);
    if (!o.good()) throw std::runtime_error(folder + "/layout.json: cannot write");
  }
  st::write_file(folder + "/inputs.safetensors", inputs_file(c, in, injected));
}

FolderInputs read_inputs(const std::string& folder) {
  FolderInputs r{load_case(folder + "/case.json"), {}, std::nullopt};
  const std::string path = folder + "/inputs.safetensors";
  SafeRead opt;
  opt.max_bytes = max_inputs_file_bytes(r.c.problem);
  opt.confine_to = folder;
  const st::File f = st::read_file(path, opt);
  const StreamLayout L = layout_of(r.c);
  auto get = [&](const std::string& n) -> const st::Entry& {
    auto it = f.tensors.find(n);
    if (it == f.tensors.end()) throw std::runtime_error(path + ": input '" + n + "' is missing");
    return it->second;
  };
  r.in.for_each([&](const std::string& n, TensorD& t) { t = st::to_doubles(get(n), path + ": " + n); });
  try {
    check_shapes(r.in, r.c.problem.dims, L.tp);
  } catch (const InvalidInput& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  if (f.tensors.count("indices")) {
    r.injected = st::to_ints(get("indices"), path + ": indices");
    const Shape want{L.tp, topk_width(r.c.problem.topk, L.tp)};
    if (r.injected->shape != want)
      throw std::runtime_error(path + ": indices has shape " + shape_str(r.injected->shape) + ", expected " +
                               shape_str(want));
  }
  return r;
}

st::File outputs_file(const Result& r, FloatOut policy) {
  st::File f;
  auto put = [&](const std::string& n, const TensorD& t) {
    if (t.empty()) return;
    bool f32 = policy == FloatOut::f32_when_exact;
    for (size_t i = 0; f32 && i < t.data.size(); ++i)
      f32 = std::isnan(t.data[i]) || double(float(t.data[i])) == t.data[i];
    f.tensors[n] = st::from_doubles(t, f32 ? st::DType::F32 : st::DType::F64);
  };
  if (r.scores) put("scores", *r.scores);
  if (!r.topk.empty()) f.tensors["topk"] = st::from_ints(r.topk);
  r.for_each_float(put);
  f.metadata["format"] = "dsa-parity/exec-outputs/v1";
  return f;
}

Result read_outputs(const std::string& path, const Case& c,
                    std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec)))
    throw std::runtime_error(path + ": the command wrote no outputs file");
  SafeRead opt;
  opt.max_bytes = max_outputs_file_bytes(c.problem);
  opt.confine_to = std::filesystem::path(path).parent_path().string();
  opt.deadline = deadline;
  const st::File f = st::read_file(path, opt);
  const int64_t tp = layout_of(c).tp;
  Result r;
  for (auto& kv : f.tensors) {
    const std::string& n = kv.first;  // (no structured binding: clang < 16 cannot capture one)
    const st::Entry& e = kv.second;
    const auto& names = output_names();
    if (std::find(names.begin(), names.end(), n) == names.end()) {
      std::string all;
      for (auto& x : names) all += (all.empty() ? "" : ", ") + x;
      throw std::runtime_error(path + ": unknown output " + text::quoted(n) + " (outputs are " + all + ")");
    }
    const Shape want = output_shape(n, c.problem, tp);
    if (e.shape != want)
      throw std::runtime_error(path + ": output '" + n + "' has shape " + shape_str(e.shape) + ", expected " +
                               shape_str(want));
    const std::string what = path + ": output '" + n + "'";
    if (n == "topk") {
      r.topk = st::to_ints(e, what);
    } else if (n == "scores") {
      r.scores = st::to_doubles(e, what);
    } else {
      r.for_each_float([&](const std::string& m, TensorD& t) {
        if (m == n) t = st::to_doubles(e, what);
      });
    }
  }
  return r;
}

}  // namespace dsa::exec
