// The exec2:CMD protocol v2 (persistent worker, JSON lines), driven by a fake python worker
// (harness/testdata/fake_exec2_worker.py): handshake, capability refusals, cannot-run and error
// answers, a crash, garbage and a hang mid-session, and the restart after each.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/catalogue.hpp"
#include "core/errors.hpp"
#include "harness/backend.hpp"
#include "harness/exec_protocol.hpp"
#include "harness/run_case.hpp"

namespace dsa {
namespace {
namespace exec2_test {  // its own names in a unity build (README "Layout of the source")

namespace fs = std::filesystem;
const std::string kData = std::string(DSA_SOURCE_DIR) + "/harness/testdata/";

bool have_python() { return std::system("python3 -c pass >/dev/null 2>&1") == 0; }

std::string fake(const std::string& flags = "") { return "python3 " + kData + "fake_exec2_worker.py " + flags; }

// A small case whose seed picks the fake's behaviour; only the loss stage is checked, so that the
// fake's zero `loss` and `kl` are a complete answer (loss off: L = 0).
Case small_case(uint64_t seed, int64_t cp = 1) {
  Case c;
  c.seed = seed;
  c.problem.seqlens = {3, 2};
  c.problem.cp.size = cp;
  c.problem.topk = 2;
  c.problem.dims = {2, 4, 2, 4, 4, 2, 4};
  c.problem.softmax_scale = 0.3;
  c.problem.loss = LossMode::off;
  c.stages = {Stage::loss};
  return c;
}

std::unique_ptr<Backend> exec2(const std::string& flags = "", double timeout_s = 20) {
  BackendOptions o;
  o.exec_timeout_s = timeout_s;
  return make_backend("exec2:" + fake(flags), o);
}

struct Log {
  std::string path = (fs::temp_directory_path() / ("dsa-exec2-log-" + std::to_string(getpid()))).string();
  Log() {
    fs::remove(path);
    setenv("FAKE_EXEC2_LOG", path.c_str(), 1);
  }
  ~Log() {
    unsetenv("FAKE_EXEC2_LOG");
    fs::remove(path);
  }
  int starts() const {
    std::ifstream in(path);
    int n = 0;
    for (std::string l; std::getline(in, l);) n += l.rfind("start", 0) == 0;
    return n;
  }
};

TEST(Exec2, HandshakeGivesPathsAndStages) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  auto b = exec2("--paths explicit --stages indexer,loss");
  EXPECT_EQ(b->paths(), std::vector<Path>{Path::explicit_});
  EXPECT_EQ(b->stages(), (std::vector<Stage>{Stage::indexer, Stage::loss}));
  EXPECT_EQ(b->name(), "exec2:" + fake("--paths explicit --stages indexer,loss"));
}

TEST(Exec2, ABadHandshakeIsUnavailable) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  for (const char* mode : {"die", "garbage", "bad_protocol"}) {
    SCOPED_TRACE(mode);
    try {
      exec2(std::string("--hello ") + mode);
      ADD_FAILURE() << "accepted";
    } catch (const Unavailable& e) {
      EXPECT_NE(std::string(e.what()).find("handshake"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(exec2("--hello hang", 0.5), Unavailable);
  EXPECT_THROW(exec2("--paths sideways"), Unavailable);
  EXPECT_THROW(exec2("--stages nonsense"), Unavailable);
}

TEST(Exec2, ACaseRunsAndTheWorkerPersists) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  Log log;
  auto b = exec2();
  for (uint64_t seed : {1, 8, 1}) {  // 8: 320 KB on stderr, drained while the harness waits
    const CaseVerdict v = run_case(small_case(seed), *b);
    EXPECT_EQ(v.verdict, Verdict::pass) << v.message;
  }
  EXPECT_EQ(log.starts(), 1);
}

TEST(Exec2, CapabilitiesRefuseCasesWithoutSendingThem) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  Log log;
  auto b = exec2("--cp 0 --max-tokens 4 --paths absorbed");
  // cp 2: refused by cp; Tp 5 > 4 refused by size; explicit refused by path. Seed 2 would crash.
  const CaseVerdict v1 = run_case(small_case(2, 2), *b);
  EXPECT_EQ(v1.verdict, Verdict::cannot_run);
  EXPECT_NE(v1.message.find("cp > 1"), std::string::npos) << v1.message;
  const CaseVerdict v2 = run_case(small_case(2), *b);
  EXPECT_EQ(v2.verdict, Verdict::cannot_run);
  EXPECT_NE(v2.message.find("at most 4 tokens"), std::string::npos) << v2.message;
  auto e = exec2("--paths absorbed");
  Case c = small_case(2);
  c.problem.path = Path::explicit_;
  const CaseVerdict v3 = run_case(c, *e);
  EXPECT_EQ(v3.verdict, Verdict::cannot_run);
  EXPECT_NE(v3.message.find("path explicit"), std::string::npos) << v3.message;
  EXPECT_EQ(log.starts(), 2);  // two backends, no restart: nothing was sent
}

// Declared layouts and pad-row modes: a case outside them is cannot-run, never sent; fuzz's draw
// limits carry them with cp and max_tokens (harness/draw_limits.hpp).
TEST(Exec2, DeclaredLayoutsAndPadRowsLimitTheCases) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  Log log;
  auto b = exec2("--layouts zigzag --pad-rows attend --max-tokens 64 --cp 1");
  const DrawLimits l = b->draw_limits();
  EXPECT_EQ(l.layouts, std::vector<Layout>{Layout::zigzag});
  EXPECT_EQ(l.pad_rows, std::vector<PadRows>{PadRows::attend});
  EXPECT_EQ(l.max_tokens, 64);
  EXPECT_EQ(l.max_cp, 0);
  Case contiguous = small_case(2, 2);  // seed 2 would crash: any case sent fails the test
  contiguous.problem.cp.layout = Layout::contiguous;
  const CaseVerdict v1 = run_case(contiguous, *b);
  EXPECT_EQ(v1.verdict, Verdict::cannot_run);
  EXPECT_NE(v1.message.find("its layout is contiguous, not zigzag"), std::string::npos) << v1.message;
  Case masked = small_case(2);
  masked.problem.pad_rows = PadRows::masked;
  const CaseVerdict v2 = run_case(masked, *b);
  EXPECT_EQ(v2.verdict, Verdict::cannot_run);
  EXPECT_NE(v2.message.find("its pad rows masked, not attend"), std::string::npos) << v2.message;
  const CaseVerdict v3 = run_case(small_case(1, 2), *b);  // zigzag, attend: within them, runs
  EXPECT_EQ(v3.verdict, Verdict::pass) << v3.message;
  EXPECT_EQ(log.starts(), 1);
  // Undeclared: every layout and mode; no CP: max_cp 1.
  const DrawLimits all = exec2("--cp 0")->draw_limits();
  EXPECT_EQ(all.layouts.size(), 2u);
  EXPECT_EQ(all.pad_rows.size(), 2u);
  EXPECT_EQ(all.max_cp, 1);
  // Bad declarations: the handshake fails naming the field.
  for (const char* flags : {"--layouts sideways", "--layouts none", "--pad-rows zigzag", "--layouts zigzag,zigzag"}) {
    SCOPED_TRACE(flags);
    try {
      exec2(flags);
      ADD_FAILURE() << "accepted";
    } catch (const Unavailable& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("layouts") != std::string::npos || what.find("pad_rows") != std::string::npos) << what;
    }
  }
}

TEST(Exec2, StagesOutsideTheCapabilitiesAreNotChecked) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  auto b = exec2("--stages indexer");
  const CaseVerdict none = run_case(small_case(1), *b);  // checks loss only
  EXPECT_EQ(none.verdict, Verdict::cannot_run);
  auto l = exec2("--stages loss");
  Case c = small_case(1);
  c.stages = {Stage::indexer, Stage::loss};
  const CaseVerdict v = run_case(c, *l);
  EXPECT_EQ(v.verdict, Verdict::pass) << v.message;
  EXPECT_NE(v.message.find("not checked: indexer"), std::string::npos) << v.message;
}

TEST(Exec2, CannotRunAndErrorAnswersKeepTheWorker) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  Log log;
  auto b = exec2();
  const CaseVerdict cr = run_case(small_case(4), *b);
  EXPECT_EQ(cr.verdict, Verdict::cannot_run);
  EXPECT_NE(cr.message.find("fake declines seed 4"), std::string::npos) << cr.message;
  const CaseVerdict er = run_case(small_case(5), *b);
  EXPECT_EQ(er.verdict, Verdict::fail);
  EXPECT_EQ(er.failure, Failure::crash);
  EXPECT_NE(er.message.find("fake error for seed 5"), std::string::npos) << er.message;
  EXPECT_EQ(run_case(small_case(1), *b).verdict, Verdict::pass);
  EXPECT_EQ(log.starts(), 1);
}

TEST(Exec2, CrashGarbageAndWrongIdFailTheCaseAndRestartTheWorker) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  Log log;
  auto b = exec2();
  EXPECT_EQ(run_case(small_case(1), *b).verdict, Verdict::pass);
  const CaseVerdict crash = run_case(small_case(2), *b);
  EXPECT_EQ(crash.failure, Failure::crash);
  EXPECT_NE(crash.message.find("died during the case (exited with status 3)"), std::string::npos) << crash.message;
  EXPECT_NE(crash.message.find("fake: crashing"), std::string::npos) << crash.message;  // its stderr
  EXPECT_EQ(run_case(small_case(1), *b).verdict, Verdict::pass);
  const CaseVerdict garbage = run_case(small_case(3), *b);
  EXPECT_EQ(garbage.failure, Failure::crash);
  EXPECT_NE(garbage.message.find("garbage on stdout"), std::string::npos) << garbage.message;
  EXPECT_EQ(run_case(small_case(1), *b).verdict, Verdict::pass);
  const CaseVerdict wrong = run_case(small_case(7), *b);
  EXPECT_EQ(wrong.failure, Failure::crash);
  EXPECT_NE(wrong.message.find("not an answer to request"), std::string::npos) << wrong.message;
  EXPECT_EQ(run_case(small_case(1), *b).verdict, Verdict::pass);
  EXPECT_EQ(log.starts(), 4);  // the first, then one restart after each of the three failures
}

TEST(Exec2, AHangTimesOutAndTheNextCaseRestarts) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  Log log;
  auto b = exec2("", 3.0);  // 3 s: the handshake itself must fit on a loaded 2-core machine
  const CaseVerdict hang = run_case(small_case(6), *b);
  EXPECT_EQ(hang.failure, Failure::timeout) << hang.message;
  EXPECT_EQ(run_case(small_case(1), *b).verdict, Verdict::pass);
  EXPECT_EQ(log.starts(), 2);
}

TEST(Exec2, OutputsInAnUndeclaredDtypeAreACrash) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  auto b = exec2("--dtypes F32,I32 --loss-dtype F64");
  const CaseVerdict v = run_case(small_case(1), *b);
  EXPECT_EQ(v.failure, Failure::crash);
  EXPECT_NE(v.message.find("do not list"), std::string::npos) << v.message;
  auto h = exec2("--dtypes F16,I32 --loss-dtype F16");  // F16 outputs are accepted
  EXPECT_EQ(run_case(small_case(1), *h).verdict, Verdict::pass);
}

TEST(ExecProtocol, FoldersCarryTheLayout) {
  Case c = small_case(1, 2);
  c.problem.cp.layout = Layout::zigzag;
  const std::string j = exec::layout_json(c);
  const auto parsed = nlohmann::json::parse(j);
  EXPECT_EQ(parsed["cp"], 2);
  EXPECT_EQ(parsed["layout"], "zigzag");
  EXPECT_EQ(parsed["rank_rows"].size(), 2u);
  EXPECT_EQ(parsed["tp"].get<int64_t>(), 8);  // seqlens 3, 2 padded to 4 each (2·cp)
  // The same rows in inputs.safetensors (v1 and v2 alike): rank_rows [cp, Tp/cp].
  const PreparedCase pc = prepare_case(c);
  const st::File f = exec::inputs_file(c, pc.inputs, pc.injected);
  const TensorI rr = st::to_ints(f.tensors.at("rank_rows"), "rank_rows");
  ASSERT_EQ(rr.shape, (Shape{2, 4}));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(rr.data[r * 4 + i], pc.layout.rank_rows[r][i]);
      EXPECT_EQ(parsed["rank_rows"][r][i].get<int64_t>(), pc.layout.rank_rows[r][i]);
    }
  EXPECT_EQ(f.metadata.at("cp"), "2");
  EXPECT_EQ(f.metadata.at("layout"), "zigzag");
  const auto cat = nlohmann::json::parse(exec::catalogue_json());
  EXPECT_EQ(cat["format"], "dsa-parity/catalogue/v1");
  EXPECT_EQ(cat["tensors"].size(), catalogue().size());
}

}  // namespace exec2_test
}  // namespace
}  // namespace dsa
