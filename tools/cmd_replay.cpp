// dsa-parity replay: every case file of a folder (edge/ first, then regressions/, then the rest).
#include <filesystem>

#include "harness/fuzz.hpp"
#include "harness/shard.hpp"
#include "core/errors.hpp"
#include "tools/command.hpp"
#include "tools/session_args.hpp"

namespace dsa::cli {
namespace {
namespace cmd_replay {  // its own names in a unity build (README "Layout of the source")

struct Flags {
  SessionFlags session;
  std::string dir, shard = "0/1";
};

Run setup(CLI::App& app) {
  auto f = std::make_shared<Flags>();
  add_positional(app, "DIR", f->dir, "the folder of case files (edge/ first, then regressions/, then the rest)");
  add_session_flags(app, f->session);
  add_shard_flag(app, f->shard, "the case files at positions i of the sorted list");
  return [f, &app] {
    expect_positional(app, "DIR", f->dir);
    SessionOptions o = session_options(f->session, "replay");
    o.random = false;
    o.shard = parse_shard(f->shard);
    o.case_files = corpus_files(f->dir, "DIR");
    o.case_root = std::filesystem::is_directory(f->dir) ? f->dir : std::filesystem::path(f->dir).parent_path().string();
    require(!o.case_files.empty(), "DIR", "'" + f->dir + "' holds no *.json case file");
    check_required_device(f->session);
    announce_backend(o);
    return run_session_over_comm(o);
  };
}

RegisterCommand reg({"replay", "run every case file under DIR (a regression corpus) on a backend",
                     "  dsa-parity replay cases --backend lowp --report r.json --junit j.xml", setup});

}  // namespace cmd_replay
}  // namespace
}  // namespace dsa::cli
