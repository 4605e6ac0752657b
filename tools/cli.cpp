// The CLI11 application of dsa-parity (tools/command.hpp): the subcommands registered by the
// cmd_*.cpp files, `help [NAME]`, `--help` anywhere, `--version`, and bad usage as one line
// `dsa-parity NAME: error: --flag: rule` on stderr (exit 2).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/errors.hpp"
#include "harness/build_info.hpp"
#include "harness/shard.hpp"
#include "harness/text.hpp"
#include "tools/command.hpp"

namespace dsa::cli {

std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}

namespace {
std::vector<std::string>& line_storage() {
  static std::vector<std::string> v;
  return v;
}

const char* const kExitCodes =
    "exit codes: 0 all passed, 1 parity failure, 2 bad usage or input, 3 environment cannot run it, "
    "4 internal error, 130/143 interrupted by SIGINT/SIGTERM (the partial report and JUnit are written)";

// The rule of an InvalidInput thrown by a parser given an empty field: what a validator returns.
template <class F>
std::string rule_of(F&& parse) {
  try {
    parse();
    return "";
  } catch (const InvalidInput& e) {
    return e.rule;
  }
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// CLI11's message of a parse error, as `--flag: rule`.
std::string usage_message(const CLI::Error& e) {
  std::string m = e.what();
  auto is = [&e](auto* type) { return dynamic_cast<decltype(type)>(&e) != nullptr; };
  if (is((const CLI::ArgumentMismatch*)nullptr)) {
    // "--backend: 1 required TEXT missing": the flag came last, without its value.
    const auto colon = m.find(": ");
    if (colon != std::string::npos && m.find(" missing", colon) != std::string::npos)
      return m.substr(0, colon) + ": needs a value";
    const auto flag = m.find(" was given a disallowed flag override");
    if (flag != std::string::npos)  // CLI11 names it without its dashes
      return (m[0] == '-' ? "" : "--") + m.substr(0, flag) + ": is a switch and takes no value";
  } else if (is((const CLI::ExcludesError*)nullptr)) {
    const auto at = m.find(" excludes ");  // "--cases excludes --time-budget"
    if (at != std::string::npos)
      return m.substr(0, at) + ": give either " + m.substr(0, at) + " or " + m.substr(at + 10) + ", not both";
  } else if (is((const CLI::RequiredError*)nullptr)) {
    const auto at = m.find(" is required");
    if (at != std::string::npos) return m.substr(0, at) + ": is required";
  } else if (is((const CLI::ExtrasError*)nullptr)) {
    // Only the root has no allow_extras: "The following argument was not expected: --bogus".
    const auto at = m.find(": ");
    if (at != std::string::npos) return m.substr(at + 2) + ": unknown flag (see dsa-parity --help)";
  } else if (is((const CLI::ConversionError*)nullptr) && m.find("--") != std::string::npos) {
    // "Could not convert: --json = x" (a switch given a value that is not a boolean).
    const auto at = m.find("--"), eq = m.find(" = ", at);
    if (eq != std::string::npos) return m.substr(at, eq - at) + ": is a switch and takes no value";
  }
  return m;
}

void print_error(const std::string& who, const std::string& what) {
  std::fprintf(stderr, "%s: error: %s\n", who.c_str(), text::one_line(what, 1000).c_str());
}

}  // namespace

const std::vector<std::string>& command_line() { return line_storage(); }

std::string version_text() {
  const char* given = std::getenv("DSA_GIT_SHA");
  std::string sha = given && *given ? given : build_info::git_sha();
  if (sha.empty()) sha = "unknown";
  return std::string("dsa-parity ") + build_info::version() + " (git " + text::one_line(sha, 100) + ")";
}

// ---- values

int64_t parse_int(const std::string& text, const std::string& field) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  require(ec == std::errc() && end == text.data() + text.size() && !text.empty(), field,
          "must be an integer, got " + text::quoted(text));
  return v;
}

uint64_t parse_uint64(const std::string& text, const std::string& field) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  require(ec == std::errc() && end == text.data() + text.size() && !text.empty(), field,
          "must be an integer from 0 to 18446744073709551615, got " + text::quoted(text));
  return v;
}

double parse_double(const std::string& text, const std::string& field) {
  // from_chars, not stod: a plain decimal number only (no leading space, no hex like 0x1p4).
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  require(ec == std::errc() && end == text.data() + text.size() && !text.empty(), field,
          "must be a number, got " + text::quoted(text));
  return v;
}

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& field) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    out.push_back(parse_int(text.substr(start, comma - start), field));
    start = comma + 1;
  }
  return out;
}

CLI::Validator one_of(const std::vector<std::string>& values) {
  const std::string all = join(values, "|");
  return CLI::Validator(
      [values, all](std::string& s) -> std::string {
        for (auto& v : values)
          if (s == v) return "";
        return "must be one of " + all + ", got " + text::quoted(s);
      },
      "");
}

CLI::Validator integer_at_least(int64_t min_value, const std::string& rule) {
  return CLI::Validator(
      [min_value, rule](std::string& s) -> std::string {
        std::string r = rule_of([&] { parse_int(s, ""); });
        if (!r.empty()) return r;
        if (parse_int(s, "") < min_value) return rule.empty() ? "must be at least " + std::to_string(min_value) : rule;
        return "";
      },
      "");
}

CLI::Validator uint64_value() {
  return CLI::Validator([](std::string& s) { return rule_of([&] { parse_uint64(s, ""); }); }, "");
}

CLI::Validator seconds_value() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::string r = rule_of([&] { parse_double(s, ""); });
        if (!r.empty()) return r;
        const double t = parse_double(s, "");
        return std::isfinite(t) && t > 0 ? "" : "must be a number of seconds > 0";
      },
      "");
}

CLI::Validator int_list_value() {
  return CLI::Validator([](std::string& s) { return rule_of([&] { parse_int_list(s, ""); }); }, "");
}

CLI::Validator shard_value() {
  return CLI::Validator([](std::string& s) { return rule_of([&] { parse_shard(s, ""); }); }, "");
}

CLI::Option* add_value(CLI::App& app, const std::string& flag, std::string& into, const std::string& help,
                       const std::string& type, const std::string& shown_default) {
  CLI::Option* o = app.add_option(flag, into, help)->type_name(type);
  if (!shown_default.empty())
    o->default_str(shown_default);
  else if (!into.empty())
    o->default_str(into);
  return o;
}

CLI::Option* add_switch(CLI::App& app, const std::string& flag, bool& into, const std::string& help) {
  return app.add_flag(flag, into, help)->disable_flag_override();
}

CLI::Option* add_positional(CLI::App& app, const std::string& name, std::string& into, const std::string& help) {
  return app.add_option(name, into, help + " (required)")->type_name("");
}

void expect_no_extras(const CLI::App& app) {
  const std::vector<std::string> rest = app.remaining();
  if (rest.empty()) return;
  const std::string& a = rest.front();
  if (a.size() > 1 && a[0] == '-') {
    const std::string flag = a.substr(0, a.find('='));
    throw InvalidInput(flag, "unknown flag for this subcommand (see dsa-parity help " + app.get_name() + ")");
  }
  std::vector<std::string> positionals;
  for (const CLI::Option* o : app.get_options([](const CLI::Option* o) { return o->get_positional(); }))
    positionals.push_back(o->get_name(true));
  throw InvalidInput(positionals.empty() ? "arguments" : positionals.front(),
                     "unexpected argument " + text::quoted(a) + " (expected exactly: " +
                         (positionals.empty() ? std::string("no positional arguments") : join(positionals, " ")) + ")");
}

void expect_positional(const CLI::App& app, const std::string& name, const std::string& value) {
  expect_no_extras(app);
  require(!value.empty(), name, "expected exactly: " + name);
}

// ---- the application

Cli make_cli() {
  Cli c;
  c.app = std::make_unique<CLI::App>(
      "dsa-parity: verify fused DeepSeek Sparse Attention kernels against an exact reference", "dsa-parity");
  CLI::App& app = *c.app;
  app.set_version_flag("--version", [] { return version_text(); }, "print the version and the git sha, and exit");
  app.set_help_flag("-h,--help", "print this help (and `dsa-parity help NAME` or `dsa-parity NAME --help` a "
                                 "subcommand's, with every flag), and exit");
  app.require_subcommand(0, 1);
  app.footer(std::string("Run `dsa-parity help NAME` for a subcommand's flags.\n") + kExitCodes);
  app.get_formatter()->column_width(34);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (const Command& cmd : commands()) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.summary);
    sub->set_help_flag("-h,--help", "print this help (every flag of " + cmd.name + ") and exit");
    sub->allow_extras();  // unknown flags and extra positionals: expect_no_extras names them
    sub->footer("Example:\n" + cmd.example + "\n\n" + kExitCodes);
    c.runs[sub] = cmd.setup(*sub);
  }
  // help [NAME]: the same text as `dsa-parity NAME --help`.
  CLI::App* help = app.add_subcommand("help", "print the help of a subcommand (every flag), or this list");
  auto topic = std::make_shared<std::string>();
  help->set_help_flag("-h,--help", "print this help and exit");
  help->add_option("NAME", *topic, "the subcommand")->type_name("");
  help->footer("Example:\n  dsa-parity help fuzz");
  CLI::App* root = c.app.get();
  c.runs[help] = [root, help, topic] {
    expect_no_extras(*help);
    if (topic->empty()) {
      // (root->help() would print help's own: it is the selected subcommand)
      std::fputs(root->get_formatter()->make_help(root, "dsa-parity", CLI::AppFormatMode::Normal).c_str(), stdout);
      return 0;
    }
    for (const CLI::App* s : root->get_subcommands({}))
      if (s->get_name() == *topic) {
        std::fputs(s->help("dsa-parity").c_str(), stdout);
        return 0;
      }
    throw InvalidInput("NAME", "unknown subcommand " + text::quoted(*topic) + " (see dsa-parity --help)");
  };
  return c;
}

Parsed parse(int argc, char** argv) {
  Parsed p;
  p.cli = std::make_shared<Cli>(make_cli());
  CLI::App& app = *p.cli->app;
  line_storage().assign(argv + (argc > 0), argv + argc);
  if (argc < 2) {
    std::fputs(app.help().c_str(), stderr);
    p.exit_code = 2;
    return p;
  }
  // An unknown first word is an unknown subcommand (CLI11 would call it an unexpected argument).
  if (argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* s : app.get_subcommands({})) known = known || s->get_name() == argv[1];
    if (!known) {
      print_error("dsa-parity", "subcommand: unknown " + text::quoted(argv[1]) + " (see dsa-parity --help)");
      p.exit_code = 2;
      return p;
    }
  }
  // --help anywhere (before a "--") prints the help of the subcommand named first, whatever else
  // the line holds: CLI11 would check the values of flags given before it first.
  for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    if (std::strcmp(argv[i], "--help") != 0 && std::strcmp(argv[i], "-h") != 0) continue;
    const CLI::App* sub = nullptr;
    for (const CLI::App* s : app.get_subcommands({}))
      if (argv[1] == s->get_name()) sub = s;
    std::fputs(sub ? sub->help("dsa-parity").c_str() : app.help().c_str(), stdout);
    p.exit_code = 0;
    return p;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    p.exit_code = app.exit(e);  // the help of the subcommand being parsed, with every flag
    return p;
  } catch (const CLI::CallForAllHelp& e) {
    p.exit_code = app.exit(e);
    return p;
  } catch (const CLI::CallForVersion& e) {
    std::printf("%s\n", e.what());
    p.exit_code = 0;
    return p;
  } catch (const CLI::ParseError& e) {
    const auto subs = app.get_subcommands();
    print_error(subs.empty() ? "dsa-parity" : "dsa-parity " + subs.front()->get_name(), usage_message(e));
    p.exit_code = 2;
    return p;
  }
  const auto subs = app.get_subcommands();
  if (subs.empty()) {  // only root flags (there is none that does something by itself)
    print_error("dsa-parity", "subcommand: missing (see dsa-parity --help)");
    p.exit_code = 2;
    return p;
  }
  p.name = subs.front()->get_name();
  p.run = p.cli->runs.at(subs.front());
  return p;
}

}  // namespace dsa::cli
