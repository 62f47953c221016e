// stoker top's view of a coordinator (top.h).
#include "tools/top.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

namespace stoker::tools {
namespace {

// Sum of `name` per pipeline label (the coordinator writes one series per pipeline; a sum is right for more).
std::map<std::string, double> PerPipeline(const std::vector<MetricSample>& samples, const std::string& name) {
  std::map<std::string, double> out;
  for (const MetricSample& s : samples) {
    if (s.name == name) out[s.Label("pipeline")] += s.value;
  }
  return out;
}

// What a counter grew by between two readings; one that went back (a restarted coordinator) counts from zero.
double Grew(double before, double now) { return now - (before > now ? 0 : before); }

// Each pipeline's time by stage, the workers' and its clients' (stoker_coordinator_job_stage_seconds_total):
// pipeline -> stage -> seconds.
std::map<std::string, std::map<std::string, double>> StageSeconds(const std::vector<MetricSample>& samples) {
  std::map<std::string, std::map<std::string, double>> out;
  for (const MetricSample& s : samples) {
    if (s.name == "stoker_coordinator_job_stage_seconds_total") out[s.Label("pipeline")][s.Label("stage")] += s.value;
  }
  return out;
}

// The stage that grew most over the interval, and its part of the growth of all.
void BusiestStage(const std::map<std::string, double>& before, const std::map<std::string, double>& now, TopRow& row) {
  double total = 0, most = 0;
  for (const auto& [stage, seconds] : now) {
    auto was = before.find(stage);
    const double grew = Grew(was == before.end() ? 0 : was->second, seconds);
    if (!(grew > 0)) continue;
    total += grew;
    if (grew > most) {
      most = grew;
      row.stage = stage;
    }
  }
  if (total > 0) row.stage_share = most / total;
}

// The text came from the network: nothing in it may drive the terminal.
std::string Printable(std::string text) {
  for (char& c : text) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return text;
}

// printf into a string of whatever length it takes (a value from the network may print 300 digits).
template <typename... Args>
std::string Format(const char* format, Args... args) {
  const int n = std::snprintf(nullptr, 0, format, args...);
  if (n <= 0) return {};
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), format, args...);
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace

std::string TopMetricsUrl(std::string address) {
  std::string scheme = "http://";
  for (const char* s : {"http://", "https://"}) {
    const std::string_view prefix(s);
    if (address.size() >= prefix.size() &&
        std::equal(prefix.begin(), prefix.end(), address.begin(),
                   [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); })) {
      scheme = s;
      address = address.substr(prefix.size());
    }
  }
  while (!address.empty() && address.back() == '/') address.pop_back();
  const std::string_view path = "/metrics";
  if (address.size() >= path.size() && address.compare(address.size() - path.size(), path.size(), path) == 0) {
    address.resize(address.size() - path.size());
  }
  if (!address.empty() && address[0] == ':') address = "127.0.0.1" + address;
  return scheme + address + "/metrics";
}

TopView MakeTopView(const std::vector<MetricSample>& before, const std::vector<MetricSample>& now, double seconds) {
  TopView view;
  std::map<std::string, TopRow> rows;
  const auto leased_before = PerPipeline(before, "stoker_coordinator_job_samples_leased_total");
  for (const MetricSample& s : now) {
    const std::string pipeline = s.Label("pipeline");
    if (s.name == "stoker_coordinator_workers") {
      const std::string state = s.Label("state");
      if (state == "active") view.workers_active = s.value;
      if (state == "draining") view.workers_draining = s.value;
      if (state == "local") view.workers_local = s.value;
    } else if (s.name == "stoker_coordinator_recommended_workers") {
      view.recommended_workers = s.value;
    } else if (s.name == "stoker_coordinator_worker_busy_ratio") {
      view.busy = s.value;
    } else if (pipeline.empty()) {
      continue;
    } else if (s.name == "stoker_coordinator_epoch") {
      rows[pipeline].epoch = s.value;
    } else if (s.name == "stoker_coordinator_epoch_progress_ratio") {
      rows[pipeline].epoch_progress = s.value;
    } else if (s.name == "stoker_coordinator_ranks") {
      TopRow& row = rows[pipeline];
      row.ranks += s.value;
      if (s.Label("state") == "held") row.ranks_held = s.value;
    } else if (s.name == "stoker_coordinator_job_samples_leased_total") {
      rows[pipeline].team = s.Label("team");
    } else if (s.name == "stoker_coordinator_job_sample_cost_seconds") {
      rows[pipeline].sample_seconds = s.value;
    } else if (s.name == "stoker_coordinator_demand_samples_per_second") {
      rows[pipeline].demand = s.value;
    } else if (s.name == "stoker_coordinator_input_stall_ratio") {
      rows[pipeline].stall = s.value;
    } else if (s.name == "stoker_coordinator_input_bottleneck" && s.value == 1) {
      rows[pipeline].bottleneck = s.Label("cause");
    }
  }
  const auto stages_before = StageSeconds(before);
  for (const auto& [pipeline, stages] : StageSeconds(now)) {
    auto was = stages_before.find(pipeline);
    BusiestStage(was == stages_before.end() ? std::map<std::string, double>{} : was->second, stages, rows[pipeline]);
  }
  for (const auto& [pipeline, total] : PerPipeline(now, "stoker_coordinator_job_samples_leased_total")) {
    auto was = leased_before.find(pipeline);
    const double rate = seconds > 0 ? Grew(was == leased_before.end() ? 0 : was->second, total) / seconds : 0;
    rows[pipeline].leased_per_second = rate;
    view.leased_per_second += rate;
  }
  // Shares of the workers' time when every pipeline that got samples says what they cost, else of the samples.
  bool costs_known = true;
  double time_per_second = 0;
  for (const auto& [pipeline, row] : rows) {
    if (row.leased_per_second > 0 && !(row.sample_seconds > 0)) costs_known = false;
    time_per_second += row.leased_per_second * row.sample_seconds;
  }
  for (auto& [pipeline, row] : rows) {
    row.pipeline = pipeline;
    if (costs_known && time_per_second > 0) {
      row.share = row.leased_per_second * row.sample_seconds / time_per_second;
    } else {
      row.share = view.leased_per_second > 0 ? row.leased_per_second / view.leased_per_second : 0;
    }
    view.rows.push_back(std::move(row));
  }
  return view;
}

std::string RenderTop(const TopView& view, const std::string& source, double seconds) {
  std::string out = "stoker top: " + Printable(source) + ", over the last " + Format("%.1f", seconds) + " s\n";
  out += "pool: " + Format("%.0f", view.workers_active) + " workers";
  if (view.workers_draining > 0) out += " (+" + Format("%.0f", view.workers_draining) + " draining)";
  if (view.workers_local > 0) out += ", " + Format("%.0f", view.workers_local) + " node-local";
  out += view.busy < 0 ? ", busy -" : ", busy " + Format("%.0f", 100 * view.busy) + "%";
  if (view.recommended_workers >= 0) out += ", recommended " + Format("%.0f", view.recommended_workers);
  out += ", " + Format("%.0f", view.leased_per_second) + " samples/s leased\n";
  if (view.rows.empty()) return out + "no pipelines\n";
  size_t name_width = 8, team_width = 4;
  for (const TopRow& r : view.rows) {
    name_width = std::max(name_width, std::min<size_t>(r.pipeline.size(), 32));
    team_width = std::max(team_width, std::min<size_t>(r.team.size(), 24));
  }
  auto cell = [](std::string text, size_t width) {
    text = Printable(std::move(text));
    if (text.size() > width) text = text.substr(0, width - 1) + "~";
    text.resize(width, ' ');
    return text;
  };
  const char* columns = "  %11s  %7s  %9s  %9s  %6s  %9s  %6s  %12s  %s\n";
  out += cell("PIPELINE", name_width) + "  " + cell("TEAM", team_width) +
         Format(columns, "EPOCH", "RANKS", "LEASED/S", "MS/SAMPLE", "SHARE", "DEMAND/S", "STALL", "MOSTLY",
                "HELD BACK BY");
  for (const TopRow& r : view.rows) {
    const std::string line = Format(
        columns, Format("%.0f %3.0f%%", r.epoch, 100 * r.epoch_progress).c_str(),
        Format("%.0f/%.0f", r.ranks_held, r.ranks).c_str(), Format("%.0f", r.leased_per_second).c_str(),
        r.sample_seconds > 0 ? Format("%.2f", 1000 * r.sample_seconds).c_str() : "-",
        Format("%.0f%%", 100 * r.share).c_str(), r.demand < 0 ? "-" : Format("%.0f", r.demand).c_str(),
        r.stall < 0 ? "-" : Format("%.0f%%", 100 * r.stall).c_str(),
        r.stage_share < 0 ? "-"
                          : Format("%s %.0f%%", Printable(r.stage.substr(0, 7)).c_str(), 100 * r.stage_share).c_str(),
        r.bottleneck.empty() ? "-" : Printable(r.bottleneck.substr(0, 24)).c_str());
    out += cell(r.pipeline, name_width) + "  " + cell(r.team.empty() ? "-" : r.team, team_width) + line;
  }
  return out;
}

}  // namespace stoker::tools
