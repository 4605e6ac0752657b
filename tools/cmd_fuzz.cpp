// dsa-parity fuzz: the corpus, then seeded random cases of a profile, through one backend.
#include <filesystem>

#include "harness/fuzz.hpp"
#include "harness/shard.hpp"
#include "core/errors.hpp"
#include "tools/command.hpp"
#include "tools/session_args.hpp"

namespace dsa::cli {
namespace {
namespace cmd_fuzz {  // its own names in a unity build (README "Layout of the source")

struct Flags {
  SessionFlags session;
  std::string seed = "1", cases, time_budget, profile = "default", corpus, path = "auto", shard = "0/1", cp;
  bool shrink = false;
};

Run setup(CLI::App& app) {
  auto f = std::make_shared<Flags>();
  add_session_flags(app, f->session);
  add_value(app, "--seed", f->seed, "the master seed of the random cases (any uint64, as in case files)", "S")
      ->check(uint64_value());
  CLI::Option* cases =
      add_value(app, "--cases", f->cases,
                "run N random cases (default: the profile's); with --shard, N is the total over all shards", "N")
          ->check(integer_at_least(1, "must be \u2265 1 (a run of no case proves nothing)"));
  CLI::Option* budget = add_value(app, "--time-budget", f->time_budget,
                                  "run random cases until SEC seconds have passed (instead of --cases)", "SEC")
                            ->check(seconds_value());
  cases->excludes(budget);
  add_value(app, "--profile", f->profile,
            "the shapes and features of random cases, and their default number: smoke 32, default 300, "
            "nightly 5000, production 4",
            "smoke|default|nightly|production")
      ->check(one_of({"smoke", "default", "nightly", "production"}));
  add_value(app, "--corpus", f->corpus,
            "the case files replayed before the random cases (failing shrunk cases go to DIR/regressions); "
            "none skips them",
            "DIR|none", "the source tree's cases/");
  add_value(app, "--path", f->path,
            "the MLA paths of random cases; auto: those the backend implements (cuda: absorbed only)",
            "absorbed|explicit|any|auto")
      ->check(one_of({"absorbed", "explicit", "any", "auto"}));
  add_value(app, "--cp", f->cp,
            "the CP size of every random case (corpus cases of another size are not selected); default: the "
            "profile's mix",
            "N")
      ->check(integer_at_least(1));
  add_switch(app, "--shrink", f->shrink, "shrink every failing case while its failure holds, and write it");
  add_shard_flag(app, f->shard,
                 "the random cases i (of --cases, or until this shard's --time-budget) and the corpus files at "
                 "positions i");
  return [f, &app] {
    expect_no_extras(app);
    SessionOptions o = session_options(f->session, "fuzz");
    o.seed = parse_uint64(f->seed, "--seed");
    o.profile = f->profile;
    // Which MLA paths random cases take; auto = those the backend implements (checked against it
    // once the backend is made).
    o.paths = parse_path_flag(f->path);
    if (!f->cp.empty()) o.cp = parse_int(f->cp, "--cp");
    if (!f->cases.empty()) o.cases = parse_int(f->cases, "--cases");
    if (!f->time_budget.empty()) o.time_budget_s = parse_double(f->time_budget, "--time-budget");
    o.shrink = f->shrink;
    o.shard = parse_shard(f->shard);
    // The corpus is replayed first; "none" skips it. Shrunk cases of real backends go to its regressions/.
    std::string corpus = app.count("--corpus") ? f->corpus : default_corpus();
    if (corpus == "none") corpus.clear();
    if (!corpus.empty()) {
      o.case_files = corpus_files(corpus, "--corpus");
      o.case_root = std::filesystem::is_directory(corpus) ? corpus : std::filesystem::path(corpus).parent_path().string();
      o.regressions_dir = corpus + "/regressions";
    }
    check_required_device(f->session);
    announce_backend(o);
    return run_session_over_comm(o);
  };
}

RegisterCommand reg({"fuzz",
                     "replay the corpus, then run seeded random cases on a backend; report every failure with a repro line",
                     "  dsa-parity fuzz --backend lowp --profile smoke --seed 1 --report r.json --junit j.xml\n"
                     "  dsa-parity fuzz --backend cuda --require-device --time-budget 600 --shrink\n"
                     "  dsa-parity fuzz --backend lowp --profile nightly --seed 7 --cases 2000 --shard 1/4 --report r1.json",
                     setup});

}  // namespace cmd_fuzz
}  // namespace
}  // namespace dsa::cli
