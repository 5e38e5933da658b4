// report.html: inline SVG drawn from the search result, the best plan's estimate and its
// simulated step.
#include "report_html.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "autotune.h"
#include "commands.h"

namespace autopar::cli {
namespace {

constexpr double kWidth = 960;  // drawing width of every figure, in px
constexpr double kLeft = 150;   // room for the row labels

std::string escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// An SVG figure, drawn element by element.
class Svg {
 public:
  explicit Svg(double height) : height_(height) {}
  void rect(double x, double y, double w, double h, std::string_view fill,
            std::string_view title = "") {
    body_ += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.2f}" height="{:.1f}" fill="{}">)",
                         x, y, std::max(w, 0.5), h, fill);
    if (!title.empty()) body_ += fmt::format("<title>{}</title>", escaped(title));
    body_ += "</rect>\n";
  }
  void text(double x, double y, std::string_view s, std::string_view anchor = "start",
            int size = 12) {
    body_ += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="{}" text-anchor="{}">{}</text>)",
                         x, y, size, anchor, escaped(s));
    body_ += "\n";
  }
  void line(double x1, double y1, double x2, double y2, std::string_view stroke,
            std::string_view dash = "") {
    body_ += fmt::format(
        R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" {}/>)", x1, y1, x2, y2,
        stroke, dash.empty() ? "" : fmt::format(R"(stroke-dasharray="{}")", dash));
    body_ += "\n";
  }
  void circle(double x, double y, double r, std::string_view fill, std::string_view title) {
    body_ += fmt::format(
        R"(<circle cx="{:.1f}" cy="{:.1f}" r="{:.1f}" fill="{}" fill-opacity="0.6"><title>{}</title></circle>)",
        x, y, r, fill, escaped(title));
    body_ += "\n";
  }
  void marker(double x, double y, std::string_view shape, std::string_view fill,
              std::string_view label) {
    const double r = 7;
    const std::string points =
        shape == "diamond" ? fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}",
                                         x, y - r, x + r, y, x, y + r, x - r, y)
                           : fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}", x, y - r,
                                         x + r, y + r, x - r, y + r);
    body_ +=
        fmt::format(R"(<polygon points="{}" fill="{}" stroke="black"><title>{}</title></polygon>)",
                    points, fill, escaped(label));
    body_ += "\n";
    text(x + r + 3, y + 4, label);
  }
  std::string str() const {
    return fmt::format(
        R"(<svg xmlns="http://www.w3.org/2000/svg" width="{:.0f}" height="{:.0f}" font-family="sans-serif">)"
        "\n{}</svg>\n",
        kWidth + kLeft + 40, height_, body_);
  }

 private:
  double height_;
  std::string body_;
};

// The colour of a simulated event: its stream, and on the compute stream its program's kind.
std::string_view event_colour(const SimEvent& e) {
  if (e.communication) return "#b279a2";
  switch (e.name.empty() ? ' ' : e.name[0]) {
    case 'F':
      return "#4c78a8";
    case 'B':
      return "#54a24b";
    case 'U':
      return "#f58518";
    default:
      return "#9d755d";
  }
}

void legend(Svg& svg, double y, const std::vector<std::pair<std::string, std::string>>& items) {
  double x = kLeft;
  for (const auto& [colour, label] : items) {
    svg.rect(x, y - 10, 12, 12, colour);
    svg.text(x + 16, y, label);
    x += 30 + 7.0 * static_cast<double>(label.size());
  }
}

// Per rank, a compute lane and a communication lane over the simulated step; runs of events
// closer than half a pixel merge into one bar.
std::string timeline(const Simulation& sim) {
  const size_t roles = sim.roles.size();
  const double lane = 14, row = 2 * lane + 10;
  Svg svg(40 + row * static_cast<double>(roles) + 40);
  const double step = std::max(sim.step_seconds, 1e-12);
  const double px = kWidth / step;
  std::map<std::pair<int32_t, bool>, std::vector<const SimEvent*>> lanes;
  for (const SimEvent& e : sim.events) lanes[{e.role, e.communication}].push_back(&e);
  for (auto& [key, events] : lanes) {
    std::sort(events.begin(), events.end(),
              [](const SimEvent* a, const SimEvent* b) { return a->start < b->start; });
    const double y = 30 + row * key.first + (key.second ? lane : 0);
    for (size_t i = 0; i < events.size();) {
      const std::string_view colour = event_colour(*events[i]);
      const double start = events[i]->start;
      double end = events[i]->end;
      size_t j = i + 1;
      while (j < events.size() && event_colour(*events[j]) == colour &&
             (events[j]->start - end) * px < 0.5) {
        end = std::max(end, events[j]->end);
        ++j;
      }
      svg.rect(
          kLeft + start * px, y, (end - start) * px, lane - 2, colour,
          j == i + 1 ? events[i]->name : fmt::format("{} … ({} nodes)", events[i]->name, j - i));
      i = j;
    }
  }
  for (size_t r = 0; r < roles; ++r) {
    const double y = 30 + row * static_cast<double>(r);
    svg.text(kLeft - 8, y + lane - 3, fmt::format("rank {} compute", r), "end", 11);
    svg.text(kLeft - 8, y + 2 * lane - 3, "communication", "end", 11);
  }
  const double axis = 30 + row * static_cast<double>(roles);
  for (int i = 0; i <= 4; ++i) {
    const double x = kLeft + kWidth * i / 4;
    svg.line(x, 24, x, axis, "#ccc", "2,3");
    svg.text(x, axis + 14, seconds_text(step * i / 4), "middle", 11);
  }
  legend(svg, 16,
         {{"#4c78a8", "forward"},
          {"#54a24b", "backward"},
          {"#f58518", "update"},
          {"#9d755d", "exchange"},
          {"#b279a2", "communication"}});
  return svg.str();
}

// Per rank: state and activations as stacked bars, against the device's capacity.
std::string memory_bars(const Estimate& e, const HardwareProfile& profile) {
  const double capacity = profile.device.memory_bytes;
  const double reserve = profile.device.reserved_bytes;
  double widest = capacity;
  for (const RoleMemory& m : e.memory) widest = std::max(widest, m.total_bytes() + reserve);
  const double px = kWidth / (widest * 1.05);
  const double bar = 18, row = 26;
  Svg svg(40 + row * static_cast<double>(e.memory.size()) + 30);
  for (size_t r = 0; r < e.memory.size(); ++r) {
    const RoleMemory& m = e.memory[r];
    const double y = 30 + row * static_cast<double>(r);
    double x = kLeft;
    for (const auto& [bytes, colour, what] :
         std::vector<std::tuple<double, std::string, std::string>>{
             {m.parameter_bytes, "#4c78a8", "parameters"},
             {m.gradient_bytes, "#72b7b2", "gradients"},
             {m.optimizer_bytes, "#f58518", "optimizer state"},
             {m.activation_bytes, "#54a24b", "activations"},
             {reserve, "#bab0ac", "reserved"}}) {
      svg.rect(x, y, bytes * px, bar, colour, fmt::format("{}: {}", what, human_bytes(bytes)));
      x += bytes * px;
    }
    svg.text(kLeft - 8, y + 13, fmt::format("rank {}", r), "end", 11);
    svg.text(x + 6, y + 13, human_bytes(m.total_bytes() + reserve), "start", 11);
  }
  const double bottom = 30 + row * static_cast<double>(e.memory.size());
  svg.line(kLeft + capacity * px, 22, kLeft + capacity * px, bottom, "#d62728", "4,3");
  svg.text(kLeft + capacity * px, bottom + 14, fmt::format("capacity {}", human_bytes(capacity)),
           "middle", 11);
  legend(svg, 16,
         {{"#4c78a8", "parameters"},
          {"#72b7b2", "gradients"},
          {"#f58518", "optimizer state"},
          {"#54a24b", "activations"},
          {"#bab0ac", "reserved"}});
  return svg.str();
}

// The estimate's step as compute, exposed communication, bubble and update.
std::string breakdown_bar(const Estimate& e) {
  const EstimateBreakdown& b = e.breakdown;
  const double total = std::max(b.compute_s + b.exposed_comm_s + b.bubble_s + b.optimizer_s, 1e-12);
  const double px = kWidth / total;
  Svg svg(80);
  double x = kLeft;
  const std::vector<std::tuple<double, std::string, std::string>> parts = {
      {b.compute_s, "#4c78a8", "compute"},
      {b.exposed_comm_s, "#b279a2", "exposed communication"},
      {b.bubble_s, "#bab0ac", "pipeline bubble"},
      {b.optimizer_s, "#f58518", "update"}};
  for (const auto& [s, colour, what] : parts) {
    svg.rect(x, 28, s * px, 22, colour,
             fmt::format("{}: {} ({:.1f}%)", what, seconds_text(s), 100 * s / total));
    x += s * px;
  }
  svg.text(kLeft - 8, 43, "step (estimate)", "end", 11);
  svg.text(kLeft, 68, fmt::format("{} in all", seconds_text(total)), "start", 11);
  std::vector<std::pair<std::string, std::string>> items;
  for (const auto& [s, colour, what] : parts)
    items.emplace_back(colour, fmt::format("{} {}", what, seconds_text(s)));
  legend(svg, 16, items);
  return svg.str();
}

// Every candidate's step against its memory, coloured by paradigm family, the best and the
// baselines marked; the step axis is logarithmic when the steps span more than 10×.
std::string scatter(const SearchResult& result, const Candidate& best,
                    const HardwareProfile& profile) {
  const double height = 360, top = 30, plot = 280;
  Svg svg(height);
  double lo = best.step_s(), hi = best.step_s(), widest = profile.device.memory_bytes;
  for (const CandidatePoint& p : result.points) {
    lo = std::min(lo, p.step_s);
    hi = std::max(hi, p.step_s);
    widest = std::max(widest, p.memory_bytes);
  }
  for (const Baseline& b : result.baselines) {
    if (!b.candidate) continue;
    lo = std::min(lo, b.candidate->step_s());
    hi = std::max(hi, b.candidate->step_s());
  }
  const bool log = hi > 10 * lo;
  auto y_of = [&](double s) {
    const double f =
        log ? std::log(s / lo) / std::log(hi / lo) : (hi > lo ? (s - lo) / (hi - lo) : 0.5);
    return top + plot - f * plot;
  };
  auto x_of = [&](double bytes) { return kLeft + kWidth * bytes / (widest * 1.05); };
  std::map<std::string, std::string> colours;
  const std::vector<std::string> palette = {"#4c78a8", "#f58518", "#54a24b", "#e45756",
                                            "#72b7b2", "#eeca3b", "#b279a2", "#9d755d"};
  for (const CandidatePoint& p : result.points) {
    auto [it, added] = colours.try_emplace(p.family, palette[colours.size() % palette.size()]);
    svg.circle(
        x_of(p.memory_bytes), y_of(p.step_s), 3, it->second,
        fmt::format("{}: {}, {}", p.family, seconds_text(p.step_s), human_bytes(p.memory_bytes)));
  }
  svg.line(x_of(profile.device.memory_bytes), top, x_of(profile.device.memory_bytes), top + plot,
           "#d62728", "4,3");
  for (const Baseline& b : result.baselines) {
    if (b.candidate)
      svg.marker(x_of(b.candidate->estimate.peak_memory_bytes), y_of(b.candidate->step_s()),
                 "diamond", "white", b.name);
  }
  svg.marker(x_of(best.estimate.peak_memory_bytes), y_of(best.step_s()), "triangle", "black",
             "best");
  svg.line(kLeft, top + plot, kLeft + kWidth, top + plot, "#333");
  svg.line(kLeft, top, kLeft, top + plot, "#333");
  for (int i = 0; i <= 4; ++i) {
    const double bytes = widest * 1.05 * i / 4;
    svg.text(x_of(bytes), top + plot + 16, human_bytes(bytes), "middle", 11);
    const double f = static_cast<double>(i) / 4;
    const double s = log ? lo * std::pow(hi / lo, f) : lo + (hi - lo) * f;
    svg.text(kLeft - 8, y_of(s) + 4, seconds_text(s), "end", 11);
  }
  svg.text(kLeft + kWidth / 2, height - 8, "peak memory per device (dashed: capacity)", "middle",
           12);
  svg.text(12, top + plot / 2, log ? "step (log)" : "step", "start", 12);
  std::vector<std::pair<std::string, std::string>> items;
  for (const auto& [family, colour] : colours) items.emplace_back(colour, family);
  legend(svg, 16, items);
  return svg.str();
}

// What a family's best lost on against the best: its largest excess among the estimate's
// terms.
std::string lost_on(const Candidate& c, const Candidate& best) {
  const EstimateBreakdown& a = c.estimate.breakdown;
  const EstimateBreakdown& b = best.estimate.breakdown;
  const std::vector<std::pair<double, std::string>> terms = {
      {a.compute_s - b.compute_s, "compute"},
      {a.exposed_comm_s - b.exposed_comm_s, "exposed communication"},
      {a.bubble_s - b.bubble_s, "pipeline bubble"},
      {a.optimizer_s - b.optimizer_s, "update"}};
  const auto worst = std::max_element(terms.begin(), terms.end());
  if (worst->first <= 0) return "its estimate ties; the simulation ranked it behind";
  return fmt::format("{} (+{})", worst->second, seconds_text(worst->first));
}

std::string why_table(const SearchResult& result, const Candidate& best) {
  const std::string chosen = paradigm_family(best.scheme);
  std::string out =
      "<table><tr><th>family</th><th>its best scheme</th><th>step (estimate)</th>"
      "<th>vs the best</th><th>lost on</th></tr>\n";
  for (const Candidate& c : result.family_best) {
    const std::string family = paradigm_family(c.scheme);
    const bool same = family == chosen;
    out += fmt::format(
        "<tr><td>{}</td><td>{}, {}, micro {}, ZeRO {}, recompute {}</td><td>{}</td><td>{}</td>"
        "<td>{}</td></tr>\n",
        escaped(family), escaped(mesh_text(c.scheme)), escaped(pipeline_text(c.scheme)),
        c.scheme.micro_batch, c.scheme.zero, recompute_name(c.scheme.recompute),
        seconds_text(c.estimate.step_time_s),
        fmt::format("{:.2f}×", c.estimate.step_time_s / best.estimate.step_time_s),
        same ? "the chosen plan's family" : escaped(lost_on(c, best)));
  }
  return out + "</table>\n";
}

}  // namespace

std::string report_html(const ReportPage& page) {
  const SearchResult& result = *page.result;
  const Candidate& best = *page.best;
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>autotune: {}</title>\n"
      "<style>body{{font-family:sans-serif;margin:24px;max-width:1200px}}"
      "table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;"
      "text-align:left;font-size:13px}}pre{{background:#f6f6f6;padding:8px}}</style>\n"
      "</head><body>\n<h1>autotune: {}</h1>\n<p>{}</p>\n",
      escaped(page.title), escaped(page.title), escaped(page.summary));
  html += fmt::format(
      "<h2>The best plan</h2>\n<p>{}, {}, micro-batch {}, ZeRO {}, recompute {}, {}: step {} "
      "({}), MFU {:.1f}% of the dense bf16 peak, {} per device at most.</p>\n<pre>{}</pre>\n",
      escaped(mesh_text(best.scheme)), escaped(pipeline_text(best.scheme)), best.scheme.micro_batch,
      best.scheme.zero, recompute_name(best.scheme.recompute),
      precision_name(best.scheme.precision), seconds_text(best.step_s()),
      best.simulated_s ? "simulated" : "estimated",
      100 * best.estimate.mfu * best.estimate.step_time_s / best.step_s(),
      human_bytes(best.estimate.peak_memory_bytes), escaped(best.scheme.to_yaml()));
  html += "<h2>Where the step's time goes</h2>\n" + breakdown_bar(best.estimate);
  html += "<h2>Pipeline timeline per rank (simulated step)</h2>\n" + timeline(*page.simulation);
  html += "<h2>Memory per rank</h2>\n" + memory_bars(best.estimate, *page.profile);
  html += "<h2>Candidates: step time against memory</h2>\n" + scatter(result, best, *page.profile);
  html +=
      "<h2>Why this plan</h2>\n<p>The best scheme of each paradigm family the search "
      "priced, and the term of the estimate where it lost most against the best.</p>\n" +
      why_table(result, best);
  html += "<h2>Baselines</h2>\n<ul>\n";
  for (const Baseline& b : result.baselines) {
    html += b.candidate
                ? fmt::format("<li>{}: {}, step {} ({:.2f}× the best's)</li>\n", escaped(b.name),
                              escaped(b.note), seconds_text(b.candidate->step_s()),
                              b.candidate->step_s() / best.step_s())
                : fmt::format("<li>{}: {}</li>\n", escaped(b.name), escaped(b.note));
  }
  return html + "</ul>\n</body></html>\n";
}

}  // namespace autopar::cli
