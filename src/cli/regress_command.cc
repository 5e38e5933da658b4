// autopar regress SUITE --baseline FILE [--update] [--json]: each case of a suite searched on
// the analytic path and compared with a recorded baseline; exit 1 when a case's best step got
// worse or its search slower than the rules allow.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include <tbb/global_control.h>

#include "autopar/search/regress_suite.h"
#include "autopar/support/files.h"
#include "autopar/zoo/zoo.h"
#include "autotune.h"

namespace autopar::cli {
namespace {

// A best step more than this fraction slower than the baseline's is a regression. The
// analytic path is deterministic, so any change is the code's, not noise.
constexpr double kStepTolerance = 0.01;
// A search more than this many times the baseline's search time is a regression.
constexpr double kSearchSlowdown = 2.0;
// Baseline search times below this count as this: shorter ones are mostly timer, thread
// start-up and scheduler noise, which a ratio would magnify.
constexpr double kSearchFloorS = 0.25;
// A best step faster than the baseline's by more than this fraction is reported as improved
// (rounding in the last digits is not an improvement).
constexpr double kImprovedBelow = 1e-6;

struct RegressFlags {
  std::string suite;
  std::string baseline;
  bool update = false;
  bool json = false;
  // "check": a search over the time limit is a regression; "report": it is noted only (ctest,
  // whose verdicts must not depend on the machine's load).
  std::string search_time = "check";
  int threads = 0;  // 0: every core
};

enum class Verdict { kPass, kImproved, kRegressed, kRecorded };

struct Outcome {
  const SuiteCase* suite_case = nullptr;
  Recorded now;
  std::optional<Recorded> before;
  Verdict verdict = Verdict::kPass;
  std::vector<std::string> reasons;  // why it regressed
  std::vector<std::string> notes;    // changes that pass
};

// Pretty JSON in the suite's order, keys in a fixed order: diffs of the file show what moved.
Status write_baseline(const std::string& path, const std::vector<Outcome>& outcomes) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  for (const Outcome& o : outcomes) {
    nlohmann::ordered_json entry;
    entry["step_time_s"] = o.now.step_time_s;
    // Milliseconds are all a timing can tell; more digits only churn the file.
    entry["search_time_s"] = std::round(o.now.search_time_s * 1e3) / 1e3;
    entry["scheme"] = o.now.scheme;
    entry["candidates_evaluated"] = o.now.candidates_evaluated;
    root[o.suite_case->name] = std::move(entry);
  }
  std::error_code ec;
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  const Status written = write_file_atomic(path, root.dump(2) + "\n");
  if (!written.is_ok()) return error("--baseline {}", written.message());
  return Status::ok();
}

StatusOr<Recorded> run_case(Tuning& tuning) {
  SearchOptions options;
  options.top = 1;
  options.simulate_top = 0;  // the analytic path: deterministic, and no plan is built
  ASSIGN_OR_RETURN(SearchResult result,
                   search(tuning.space, tuning.problem, *tuning.estimator, options));
  if (result.top.empty()) return error("{}: no scheme of the space fits", tuning.space.source);
  Recorded r;
  r.step_time_s = result.top.front().step_s();
  r.search_time_s = result.search_time_s;
  r.scheme = result.top.front().scheme.to_yaml();
  r.candidates_evaluated = result.candidates_evaluated;
  return r;
}

// Applies the rules to one case against its baseline entry.
void judge(Outcome& o, bool check_search_time) {
  if (!o.before) return;
  const Recorded& was = *o.before;
  const double change = o.now.step_time_s / was.step_time_s - 1;
  if (change > kStepTolerance) {
    o.reasons.push_back(
        fmt::format("best step {} is {:+.2f}% against the baseline's {} (limit +{:g}%)",
                    seconds_text(o.now.step_time_s), change * 100, seconds_text(was.step_time_s),
                    kStepTolerance * 100));
  }
  const double allowed = std::max(was.search_time_s, kSearchFloorS);
  const double slowdown = o.now.search_time_s / allowed;
  if (slowdown > kSearchSlowdown) {
    std::string text =
        fmt::format("search took {}, {:.2f}× the baseline's {}{} (limit {:g}×)",
                    seconds_text(o.now.search_time_s), slowdown, seconds_text(was.search_time_s),
                    was.search_time_s < kSearchFloorS
                        ? fmt::format(", counted as {}", seconds_text(kSearchFloorS))
                        : "",
                    kSearchSlowdown);
    if (check_search_time) {
      o.reasons.push_back(std::move(text));
    } else {
      o.notes.push_back(text + ", reported only (--search-time report)");
    }
  }
  const bool improved = change < -kImprovedBelow;
  o.verdict = !o.reasons.empty() ? Verdict::kRegressed
              : improved         ? Verdict::kImproved
                                 : Verdict::kPass;
  if (improved) {
    o.notes.push_back(fmt::format("best step {} is {:.2f}% faster than the baseline's {}",
                                  seconds_text(o.now.step_time_s), -change * 100,
                                  seconds_text(was.step_time_s)));
  }
  if (o.now.scheme != was.scheme) o.notes.push_back("the best scheme differs from the baseline's");
  if (o.now.candidates_evaluated != was.candidates_evaluated) {
    o.notes.push_back(fmt::format("{} candidates evaluated, the baseline {}",
                                  o.now.candidates_evaluated, was.candidates_evaluated));
  }
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kImproved:
      return "improved";
    case Verdict::kRegressed:
      return "REGRESSED";
    case Verdict::kRecorded:
      return "recorded";
  }
  return "";
}

std::string table(const std::vector<Outcome>& outcomes) {
  size_t width = 4;
  for (const Outcome& o : outcomes) width = std::max(width, o.suite_case->name.size());
  std::string out = fmt::format("{:<{}}  {:>10} {:>10} {:>9}  {:>9} {:>9}  {}\n", "case", width,
                                "best step", "baseline", "change", "search", "baseline", "verdict");
  for (const Outcome& o : outcomes) {
    const bool has = o.before.has_value();
    out += fmt::format(
        "{:<{}}  {:>10} {:>10} {:>9}  {:>9} {:>9}  {}\n", o.suite_case->name, width,
        seconds_text(o.now.step_time_s), has ? seconds_text(o.before->step_time_s) : "-",
        has ? fmt::format("{:+.2f}%", (o.now.step_time_s / o.before->step_time_s - 1) * 100) : "-",
        seconds_text(o.now.search_time_s), has ? seconds_text(o.before->search_time_s) : "-",
        verdict_name(o.verdict));
  }
  return out;
}

nlohmann::ordered_json outcome_json(const Outcome& o) {
  nlohmann::ordered_json j;
  j["name"] = o.suite_case->name;
  j["model"] = o.suite_case->model;
  j["hw"] = o.suite_case->hw;
  j["nodes"] = o.suite_case->nodes;
  j["space"] = o.suite_case->space;
  j["batch"] = o.suite_case->batch;
  j["step_time_s"] = o.now.step_time_s;
  j["search_time_s"] = o.now.search_time_s;
  j["candidates_evaluated"] = o.now.candidates_evaluated;
  j["scheme"] = o.now.scheme;
  if (o.before) {
    j["baseline_step_time_s"] = o.before->step_time_s;
    j["baseline_search_time_s"] = o.before->search_time_s;
    j["step_change"] = o.now.step_time_s / o.before->step_time_s - 1;
  }
  j["verdict"] = verdict_name(o.verdict);
  j["reasons"] = o.reasons;
  j["notes"] = o.notes;
  return j;
}

Status run_regress(const RegressFlags& f, int* exit_code) {
  if (f.threads < 0) return error("--threads {}: must be 1 or more (0: every core)", f.threads);
  // The search gives the same answer at any thread count; this bounds the threads it uses.
  std::optional<tbb::global_control> threads;
  if (f.threads > 0)
    threads.emplace(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(f.threads));
  const auto started = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<SuiteCase> cases, read_regress_suite(f.suite, AUTOPAR_CONFIG_DIR));

  // The baseline is checked whole before any search, so a missing entry fails at once rather
  // than after every search has run. --update only shows the old numbers next to the new.
  std::map<std::string, Recorded> baseline;
  if (f.update) {
    auto old = read_regress_baseline(f.baseline);
    if (old.is_ok()) baseline = std::move(old).value();
  } else {
    ASSIGN_OR_RETURN(baseline, read_regress_baseline(f.baseline));
    for (size_t i = 0; i < cases.size(); ++i) {
      if (!baseline.count(cases[i].name))
        return error(
            "{}: {}: missing: the suite's cases[{}] has no baseline (run with --update "
            "to record it)",
            f.baseline, cases[i].name, i);
    }
  }

  // Every case is made ready before the first search, so a bad profile or space in the last
  // case fails before any search time is spent.
  std::vector<Tuning> tunings;
  for (size_t i = 0; i < cases.size(); ++i) {
    const SuiteCase& c = cases[i];
    PlanSource given;
    given.optimizer = "adam";
    if (c.seq > 0) given.dims.emplace_back(std::string(kZooSeqDim), c.seq);
    auto tuning = prepare_tuning(c.model, c.hw_path, c.nodes, c.space_path, given, c.batch);
    if (!tuning.is_ok())
      return tuning.status().with_context(fmt::format("{}: cases[{}] ({})", f.suite, i, c.name));
    tunings.push_back(std::move(tuning).value());
  }

  const bool tty = isatty(STDERR_FILENO) != 0 && !f.json;
  std::vector<Outcome> outcomes;
  for (size_t i = 0; i < cases.size(); ++i) {
    const SuiteCase& c = cases[i];
    if (tty) {
      fmt::print(stderr, "\r[{}/{}] {}{}", i + 1, cases.size(), c.name, std::string(20, ' '));
      std::fflush(stderr);
    }
    auto recorded = run_case(tunings[i]);
    if (!recorded.is_ok())
      return recorded.status().with_context(fmt::format("{}: cases[{}] ({})", f.suite, i, c.name));
    Outcome o;
    o.suite_case = &c;
    o.now = std::move(recorded).value();
    if (auto it = baseline.find(c.name); it != baseline.end()) o.before = it->second;
    // A search time over the limit is timed again from cold caches and the faster run counts:
    // the least of repeated runs is the measurement least disturbed by other load.
    if (o.before && !f.update && f.search_time == "check" &&
        o.now.search_time_s > kSearchSlowdown * std::max(o.before->search_time_s, kSearchFloorS)) {
      tunings[i].estimator =
          std::make_unique<Estimator>(tunings[i].model_at, tunings[i].options, tunings[i].profile);
      auto again = run_case(tunings[i]);
      if (!again.is_ok())
        return again.status().with_context(fmt::format("{}: cases[{}] ({})", f.suite, i, c.name));
      o.notes.push_back(fmt::format("search timed twice: {} then {}",
                                    seconds_text(o.now.search_time_s),
                                    seconds_text(again->search_time_s)));
      o.now.search_time_s = std::min(o.now.search_time_s, again->search_time_s);
    }
    tunings[i].estimator.reset();  // its caches are this case's alone
    judge(o, f.search_time == "check");
    if (f.update) o.verdict = Verdict::kRecorded;
    outcomes.push_back(std::move(o));
  }
  if (tty) fmt::print(stderr, "\r{}\r", std::string(60, ' '));
  if (f.update) RETURN_IF_ERROR(write_baseline(f.baseline, outcomes));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  std::vector<std::string> regressed;
  for (const Outcome& o : outcomes) {
    if (o.verdict == Verdict::kRegressed) regressed.push_back(o.suite_case->name);
  }
  std::vector<std::string> unused;  // baseline entries the suite no longer has
  if (!f.update) {
    std::set<std::string> names;
    for (const SuiteCase& c : cases) names.insert(c.name);
    for (const auto& [name, r] : baseline) {
      if (!names.count(name)) unused.push_back(name);
    }
  }
  if (!regressed.empty()) *exit_code = 1;

  if (f.json) {
    nlohmann::ordered_json out;
    out["suite"] = f.suite;
    out["baseline"] = f.baseline;
    out["updated"] = f.update;
    out["passed"] = regressed.empty();
    out["regressed"] = regressed;
    out["seconds"] = seconds;
    out["cases"] = nlohmann::ordered_json::array();
    for (const Outcome& o : outcomes) out["cases"].push_back(outcome_json(o));
    if (!unused.empty()) out["baseline_only"] = unused;
    emit_json(out);
    return Status::ok();
  }
  fmt::print("{}", table(outcomes));
  for (const Outcome& o : outcomes) {
    for (const std::string& reason : o.reasons)
      fmt::print("{}: {}: {}\n", o.suite_case->name, f.update ? "accepted" : "regressed", reason);
    for (const std::string& note : o.notes) fmt::print("{}: {}\n", o.suite_case->name, note);
  }
  for (const std::string& name : unused)
    fmt::print("{}: in the baseline, not in the suite (--update drops it)\n", name);
  if (f.update) {
    fmt::print("baseline written to {}: {} cases in {:.1f} s\n", f.baseline, outcomes.size(),
               seconds);
  } else if (regressed.empty()) {
    fmt::print("{} cases in {:.1f} s: no regression\n", outcomes.size(), seconds);
  } else {
    fmt::print("{} of {} cases regressed ({}) in {:.1f} s\n", regressed.size(), outcomes.size(),
               fmt::join(regressed, ", "), seconds);
  }
  return Status::ok();
}

}  // namespace

void add_regress_command(CLI::App& app, Command& command, int* exit_code) {
  auto flags = std::make_shared<RegressFlags>();
  CLI::App* c = app.add_subcommand(
      "regress",
      "search each case of a suite and compare its best predicted step and search time with a "
      "baseline (exit 1 on a regression)");
  c->add_option("suite", flags->suite,
                "suite YAML: cases of name, model, hw, nodes, space, batch (see "
                "configs/regress/suite.yaml)")
      ->required();
  c->add_option("--baseline", flags->baseline,
                "baseline JSON: per case, step_time_s, search_time_s, scheme, "
                "candidates_evaluated")
      ->required();
  c->add_flag("--update", flags->update, "run the suite and rewrite the baseline with its results");
  c->add_option("--threads", flags->threads,
                "threads the search runs on (default 0: every core); the results are the same "
                "at any count");
  c->add_flag("--json", flags->json, "print one JSON object");
  c->add_option("--search-time", flags->search_time,
                "check (default): a search more than 2x slower than the baseline's is a "
                "regression; report: it is only noted (a verdict that does not depend on the "
                "machine's load, as ctest runs it)")
      ->check(CLI::IsMember({"check", "report"}));
  c->callback([flags, &command, exit_code] {
    command = [flags, exit_code] { return run_regress(*flags, exit_code); };
  });
}

}  // namespace autopar::cli
