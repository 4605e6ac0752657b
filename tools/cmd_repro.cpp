// dsa-parity repro: one case file on one backend, every checked tensor's metrics printed.
#include <filesystem>

#include "harness/fuzz.hpp"
#include "tools/command.hpp"
#include "tools/session_args.hpp"

namespace dsa::cli {
namespace {
namespace cmd_repro {  // its own names in a unity build (README "Layout of the source")

struct Flags {
  SessionFlags session;
  std::string file;
};

Run setup(CLI::App& app) {
  auto f = std::make_shared<Flags>();
  add_positional(app, "CASE.json", f->file, "the case file to run");
  add_session_flags(app, f->session);
  return [f, &app] {
    expect_positional(app, "CASE.json", f->file);
    SessionOptions o = session_options(f->session, "repro");
    o.random = false;
    o.case_files = {f->file};
    corpus_files(o.case_files[0], "CASE.json");  // exists?
    // Its JUnit name (kept in the report's record) is the file's name, not a path of this machine.
    o.case_root = std::filesystem::path(f->file).parent_path().string();
    o.verbose = true;
    o.progress = false;
    check_required_device(f->session);
    announce_backend(o);
    return run_session_over_comm(o);
  };
}

RegisterCommand reg({"repro", "run one case file and print the metrics of every checked tensor",
                     "  dsa-parity repro cases/edge/shorter_than_k.json --backend lowp --report r.json", setup});

}  // namespace cmd_repro
}  // namespace
}  // namespace dsa::cli
