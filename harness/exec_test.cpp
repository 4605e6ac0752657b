// The exec:CMD protocol and backend, driven by small shell commands (the round trip through the
// dsa-parity binary is in tools/exec_roundtrip_test.cpp).
#include <chrono>
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "harness/backend.hpp"
#include "harness/exec_protocol.hpp"
#include "harness/generate.hpp"
#include "harness/run_case.hpp"
#include "core/errors.hpp"
#include "core/layout.hpp"

namespace dsa {
namespace {
namespace exec_test {  // its own names in a unity build (README "Layout of the source")

namespace fs = std::filesystem;
const std::string kData = std::string(DSA_SOURCE_DIR) + "/harness/testdata/";

struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "dsa-exec-test-XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

Case full_case() { return load_case(kData + "valid_full.json"); }

bool same_bits(const TensorD& a, const TensorD& b) {
  if (a.shape != b.shape) return false;
  for (size_t i = 0; i < a.data.size(); ++i)
    if (!(a.data[i] == b.data[i] || (std::isnan(a.data[i]) && std::isnan(b.data[i])))) return false;
  return true;
}

TEST(ExecProtocol, InputsCarryTheLayoutAndRoundTrip) {
  const Case c = full_case();  // cp 2 zigzag, masked, poisoned pads, injected indices
  const Inputs in = generate_inputs(c);
  const auto inj = injected_indices(c);
  const StreamLayout L = make_layout(c.problem.seqlens, c.problem.cp, c.problem.pad_rows);
  const st::File f = exec::inputs_file(c, in, inj);
  for (const char* n : {"q_nope", "q_pe", "c", "k_pe", "W_UK", "W_UV", "q_I", "k_I", "w", "dO"})
    EXPECT_EQ(f.tensors.at(n).dtype, st::DType::BF16) << n;
  const TensorI cu = st::to_ints(f.tensors.at("cu_padded"), "cu");
  EXPECT_EQ(cu.data, (TensorData<int32_t>{0, 8, 20}));
  const TensorI real = st::to_ints(f.tensors.at("real"), "real");
  ASSERT_EQ(real.size(), L.tp);
  for (int64_t g = 0; g < L.tp; ++g) EXPECT_EQ(real.data[g], L.is_real(g) ? 1 : 0);
  EXPECT_EQ(st::to_ints(f.tensors.at("indices"), "indices").data, inj->data);

  TempDir d;
  exec::write_inputs(d.path, c, in, inj);
  const exec::FolderInputs back = exec::read_inputs(d.path);
  EXPECT_EQ(to_json(back.c), to_json(c));
  in.for_each([&](const std::string& n, const TensorD& t) {
    back.in.for_each([&](const std::string& m, const TensorD& u) {
      if (m == n) { EXPECT_TRUE(same_bits(t, u)) << n; }
    });
  });
  ASSERT_TRUE(back.injected.has_value());
  EXPECT_EQ(back.injected->data, inj->data);
}

TEST(ExecProtocol, OutputsKeepF32WhereLosslessElseF64) {
  Result r;
  r.O = TensorD({1, 1, 1}, 0.5);
  r.lse = TensorD({1, 1}, 0.1);  // not a float
  r.topk = TensorI({1, 1}, -1);
  const st::File f = exec::outputs_file(r, exec::FloatOut::f32_when_exact);
  EXPECT_EQ(f.tensors.at("O").dtype, st::DType::F32);
  EXPECT_EQ(f.tensors.at("lse").dtype, st::DType::F64);
  EXPECT_EQ(f.tensors.at("topk").dtype, st::DType::I32);
  EXPECT_EQ(f.tensors.count("dc"), 0u);  // empty outputs are not written
  EXPECT_EQ(exec::outputs_file(r, exec::FloatOut::f64).tensors.at("O").dtype, st::DType::F64);
}

// An exec command that copies a prepared outputs file into the folder it is given.
std::string copy_command(const std::string& file) {
  return "sh -c 'test -s \"$0/case.json\" && test -s \"$0/inputs.safetensors\" && cp " + file +
         " \"$0/outputs.safetensors\"'";
}

void expect_failure(const std::string& cmd, const std::string& phrase, double timeout_s = 30) {
  const Case c = full_case();
  BackendOptions opt;
  opt.exec_timeout_s = timeout_s;
  auto b = make_backend("exec:" + cmd, opt);
  try {
    b->run(c, prepare_case(c));
    ADD_FAILURE() << cmd << " did not fail";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
}

TEST(ExecBackend, ReadsWhateverOutputsTheCommandWrites) {
  const Case c = full_case();
  const int64_t tp = 20;
  TempDir d;
  st::File f;
  TensorD O(exec::output_shape("O", c.problem, tp), 0.25);
  O.data[3] = -1.5;
  TensorD lse(exec::output_shape("lse", c.problem, tp), 1.0);
  lse.data[0] = -INFINITY;
  TensorI topk(exec::output_shape("topk", c.problem, tp), -1);
  topk.data[0] = 0;
  f.tensors["O"] = st::from_doubles(O, st::DType::BF16);
  f.tensors["lse"] = st::from_doubles(lse, st::DType::F32);
  f.tensors["topk"] = st::from_ints(topk);
  const std::string file = d.path + "/prepared.safetensors";
  st::write_file(file, f);
  auto b = make_backend("exec:" + copy_command(file));
  EXPECT_EQ(b->name(), "exec:" + copy_command(file));
  const BackendRun r = b->run(c, prepare_case(c));
  EXPECT_EQ(r.result.O.data, O.data);
  EXPECT_EQ(r.result.lse.data, lse.data);
  EXPECT_EQ(r.result.topk.data, topk.data);
  EXPECT_TRUE(r.result.dc.empty());  // not written: "not checked"
  EXPECT_TRUE(r.result.O_lat.empty());
  EXPECT_FALSE(r.result.scores.has_value());
  EXPECT_GE(r.seconds, 0);

  // Wrong shape, wrong dtype, unknown name: refused with the file's problem named.
  st::File bad = f;
  bad.tensors["O"] = st::from_doubles(TensorD({tp, 1}), st::DType::F32);
  st::write_file(file, bad);
  expect_failure(copy_command(file), "output 'O' has shape [20, 1], expected [20, 2, 8]");
  bad = f;
  bad.tensors["topk"] = st::from_doubles(TensorD(topk.shape), st::DType::F32);
  st::write_file(file, bad);
  expect_failure(copy_command(file), "expected dtype I32");
  bad = f;
  bad.tensors["dQ"] = st::from_doubles(TensorD({1}), st::DType::F32);
  st::write_file(file, bad);
  expect_failure(copy_command(file), "unknown output 'dQ'");
}

TEST(ExecBackend, FailuresCarryTheCommandsStderr) {
  expect_failure("sh -c 'echo kernel exploded at row 17 >&2; exit 3'", "exited with status 3; stderr (tail): kernel exploded at row 17");
  expect_failure("sh -c 'echo segv >&2; kill -SEGV $$'", "signal 11");
  expect_failure("true", "wrote no outputs file");
  expect_failure("sh -c 'printf garbage > \"$0/outputs.safetensors\"'", "malformed safetensors");
  const auto t0 = std::chrono::steady_clock::now();
  expect_failure("sh -c 'echo started >&2; sleep 20'", "timed out after 0.3 s; stderr (tail): started", 0.3);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10);
}

TEST(MakeBackend, NamesAndRefusals) {
  EXPECT_EQ(make_backend("reference")->name(), "reference");
  EXPECT_EQ(make_backend("lowp")->name(), "lowp");
  EXPECT_EQ(make_backend("mutant:kl_reversed")->name(), "mutant:kl_reversed");
  const std::string a = make_backend("auto")->name();
  EXPECT_TRUE(cuda_device_present() ? a != "lowp" : a == "lowp") << a;
  for (const char* bad : {"gpu", "mutant:nope", "exec:", ""}) {
    try {
      make_backend(bad);
      ADD_FAILURE() << bad;
    } catch (const InvalidInput& e) {
      EXPECT_EQ(e.field, "backend") << bad;
    }
  }
  if (!cuda_device_present()) { EXPECT_THROW(make_backend("cuda"), Unavailable); }
}

TEST(MakeBackend, ReferenceIsExactAndLowpAndMutantsDiffer) {
  Case c = random_case("smoke", 3, 0);
  c.problem.seqlens = {7, 9};
  c.problem.cp = {2, Layout::zigzag, 0};
  c.problem.loss = LossMode::sparse;
  c.problem.pad_rows = PadRows::attend;
  c.init = InitSpec{};
  const PreparedCase pc = prepare_case(c);
  const Result ex = make_backend("reference")->run(c, pc).result;
  const Result lo = make_backend("lowp")->run(c, pc).result;
  const Result mu = make_backend("mutant:kl_reversed")->run(c, pc).result;
  ASSERT_FALSE(ex.O.empty());
  EXPECT_NE(ex.O.data, lo.O.data);              // bf16 policy rounds
  EXPECT_EQ(lo.O.data, mu.O.data);              // the KL bug leaves the attention alone
  EXPECT_NE(lo.loss.data, mu.loss.data);        // ...and changes the loss
  for (double v : lo.O.data) EXPECT_EQ(double(float(v)), v);
}

}  // namespace exec_test
}  // namespace
}  // namespace dsa
