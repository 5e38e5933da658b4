// autotune's report.html: one self-contained page (inline SVG, no script, nothing fetched)
// that explains the plan it chose.
#pragma once

#include <string>

#include "autopar/cost/hardware_profile.h"
#include "autopar/cost/simulator.h"
#include "autopar/search/engine.h"

namespace autopar::cli {

struct ReportPage {
  std::string title;    // model, cluster, batch, space
  std::string summary;  // what the search did
  const SearchResult* result = nullptr;
  const Candidate* best = nullptr;
  const Simulation* simulation = nullptr;  // the best plan's step, with its events
  const HardwareProfile* profile = nullptr;
};

// The page: the time breakdown of the best plan, its pipeline timeline per rank, its memory per
// rank against the device's capacity, every candidate's step time against its memory (the best
// and the baselines marked), and why each other paradigm family lost.
std::string report_html(const ReportPage& page);

}  // namespace autopar::cli
