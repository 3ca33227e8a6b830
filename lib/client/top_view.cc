#include "client/top_view.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace gpupool::top {
namespace {

// Sizes in at most 5 characters: "0", "512B", "4.0K", "12M", "1.5G", "80G", "1.2T".
std::string Bytes(double bytes) {
  static const char* units[] = {"B", "K", "M", "G", "T", "P"};
  int u = 0;
  while (bytes >= 1000 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  if (bytes <= 0) return "0";
  if (u == 0) return fmt::format("{:.0f}B", bytes);
  return bytes < 10 ? fmt::format("{:.1f}{}", bytes, units[u]) : fmt::format("{:.0f}{}", bytes, units[u]);
}

// Counts in at most 5 characters: "0", "999", "12k", "1.2M".
std::string Count(double n) {
  if (n < 999.5) return fmt::format("{:.0f}", n);
  if (n < 9950) return fmt::format("{:.1f}k", n / 1000);
  if (n < 999500) return fmt::format("{:.0f}k", n / 1000);
  return fmt::format("{:.1f}M", n / 1e6);
}

// Durations in at most 4 characters: "59s", "12m", "3h", "2d".
std::string Age(double seconds) {
  if (seconds < 60) return fmt::format("{:.0f}s", std::max(0.0, seconds));
  if (seconds < 3600) return fmt::format("{:.0f}m", seconds / 60);
  if (seconds < 86400) return fmt::format("{:.0f}h", seconds / 3600);
  return fmt::format("{:.0f}d", seconds / 86400);
}

std::string Percent(const std::optional<double>& v) { return v ? fmt::format("{:.0f}%", *v * 100) : "-"; }

// `text` cut or padded to `width` columns ('~' marks a cut).
std::string Fit(std::string_view text, int width, bool right = false) {
  if (width <= 0) return "";
  size_t w = static_cast<size_t>(width);
  if (text.size() > w) return std::string(text.substr(0, w - 1)) + "~";
  std::string pad(w - text.size(), ' ');
  return right ? pad + std::string(text) : std::string(text) + pad;
}

Tone LoadTone(double fraction) {
  return fraction >= 0.9 ? Tone::kBad : fraction >= 0.5 ? Tone::kWarn : Tone::kGood;
}

// "[##==....]": `filled` of the width as '#', then up to `marked` as '=', the rest '.'.
std::string Bar(int width, double filled, double marked = 0) {
  int inner = std::max(1, width - 2);
  auto cells = [inner](double f) { return static_cast<int>(std::lround(std::clamp(f, 0.0, 1.0) * inner)); };
  int hashes = cells(filled), eqs = std::max(0, cells(std::max(filled, marked)) - hashes);
  return "[" + std::string(hashes, '#') + std::string(eqs, '=') + std::string(inner - hashes - eqs, '.') + "]";
}

// A sparkline of utilisation samples, `width` characters for the newest ones.
std::string Sparkline(const std::vector<Activity>& history, int width) {
  static const char levels[] = "_.:-=+*#%@";  // "_": idle, still drawn so the timeline shows.
  std::string out;
  size_t n = std::min<size_t>(static_cast<size_t>(width), history.size());
  for (size_t i = history.size() - n; i < history.size(); ++i) {
    double u = history[i].utilization.value_or(0);
    out += levels[static_cast<int>(std::lround(std::clamp(u, 0.0, 1.0) * 9))];
  }
  return Fit(std::string(static_cast<size_t>(width) - n, ' ') + out, width);
}

// A command line as a narrow column best shows it: the program's name without its directory, then its arguments.
std::string ShortCommand(const std::string& label) {
  if (label.empty()) return "-";
  size_t end = label.find(' ');
  std::string program = label.substr(0, end);
  size_t slash = program.rfind('/');
  if (slash != std::string::npos && slash + 1 < program.size()) program = program.substr(slash + 1);
  return end == std::string::npos ? program : program + label.substr(end);
}

struct LeaseRow {
  const ServerInfo* server;
  const LeaseInfo* lease;
};

double SortValue(const LeaseRow& r, SortKey key) {
  const Activity& a = r.lease->activity;
  switch (key) {
    case SortKey::kUtilization: return a.utilization.value_or(-1);
    case SortKey::kMemory: return static_cast<double>(a.memory_used);
    case SortKey::kCalls: return a.calls_per_s;
    case SortKey::kBytes: return a.bytes_to_device_per_s + a.bytes_from_device_per_s;
    case SortKey::kAge: return r.lease->age_s;
    case SortKey::kUser: return 0;
  }
  return 0;
}

bool Matches(const LeaseRow& r, const std::string& filter) {
  if (filter.empty()) return true;
  for (const std::string* field : {&r.lease->user, &r.lease->host, &r.lease->label, &r.lease->id, &r.server->name}) {
    if (field->find(filter) != std::string::npos) return true;
  }
  return false;
}

enum class Field { kLease, kUser, kHost, kGpus, kMemory, kUtil, kCalls, kBytes, kAge, kExpiry, kState };

// A lease table column: what it shows, its title and width, and on a narrow screen its title and width there and
// how readily it gives way (0: never; 1 first).
struct Column {
  Field field;
  const char* title;
  int width;
  const char* narrow_title;
  int narrow_width;
  bool right;
  int give_way;
};

}  // namespace

const char* SortKeyName(SortKey key) {
  switch (key) {
    case SortKey::kUtilization: return "util";
    case SortKey::kMemory: return "memory";
    case SortKey::kCalls: return "calls";
    case SortKey::kBytes: return "bytes";
    case SortKey::kAge: return "age";
    case SortKey::kUser: return "user";
  }
  return "?";
}

SortKey NextSortKey(SortKey key) {
  return key == SortKey::kUser ? SortKey::kUtilization : static_cast<SortKey>(static_cast<int>(key) + 1);
}

std::vector<Line> RenderTop(const PoolState& state, const ViewSettings& settings, int width, int height) {
  width = std::max(width, 40);
  // Leases shown, in order.
  std::vector<LeaseRow> rows;
  int lease_count = 0, idle_count = 0, gpus = 0, up = 0;
  for (const ServerInfo& s : state.servers) {
    if (!s.up) continue;
    ++up;
    gpus += static_cast<int>(s.devices.size());
    if (s.summary) lease_count += static_cast<int>(s.lease_count);  // The directory counts them; gp-top --detail lists.
    for (const LeaseInfo& l : s.leases) {
      ++lease_count;
      idle_count += l.idle ? 1 : 0;
      LeaseRow r{&s, &l};
      if (Matches(r, settings.filter) && (!settings.idle_only || l.idle)) rows.push_back(r);
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [&](const LeaseRow& a, const LeaseRow& b) {
    if (settings.sort == SortKey::kUser) {
      int c = a.lease->user.compare(b.lease->user);
      if (c != 0) return settings.ascending ? c > 0 : c < 0;  // Users read A to Z unless reversed.
      return a.lease->age_s > b.lease->age_s;
    }
    double va = SortValue(a, settings.sort), vb = SortValue(b, settings.sort);
    if (va != vb) return settings.ascending ? va < vb : va > vb;
    return a.lease->age_s > b.lease->age_s;
  });

  std::vector<Line> out;
  std::string title = fmt::format("gp-top  {}/{} servers up  {} GPUs  {} leases ({} idle)  sort {} {}", up,
                                  state.servers.size(), gpus, lease_count, idle_count, SortKeyName(settings.sort),
                                  settings.ascending ? "asc" : "desc");
  int clock_room = width - static_cast<int>(title.size()) - 1;
  if (!settings.clock.empty() && clock_room >= static_cast<int>(settings.clock.size())) {
    title += std::string(static_cast<size_t>(clock_room) - settings.clock.size() + 1, ' ') + settings.clock;
  }
  out.push_back({{Fit(title, width), Tone::kHeader}});

  // Devices: "  0 server   model        [mem bar] alloc/total used [util bar] util temp [history]".
  const int bar = width >= 100 ? 16 : 12, util_bar = width >= 100 ? 12 : 10;
  const int spark = width >= 120 ? std::min(60, width - 110) : 0;
  const int server_w = width >= 100 ? 14 : 8;
  const int fixed = 3 + server_w + bar + 9 + 5 + util_bar + 4 + 4 + 8 + (spark > 0 ? spark + 1 : 0);
  const int model_w = std::clamp(width - fixed, 6, 32);
  std::string head = fmt::format("{} {} {} {} {} {} {} {} {}", Fit("GPU", 3, true), Fit("SERVER", server_w),
                                 Fit("MODEL", model_w), Fit(bar >= 16 ? "MEM #used =alloc" : "MEMORY", bar), Fit("ALLOC/TOT", 9),
                                 Fit("USED", 5, true), Fit("UTIL", util_bar), Fit("", 4), Fit("TEMP", 4, true));
  if (spark > 0) head += " " + Fit(fmt::format("UTIL, last {} s", spark), spark);
  out.push_back({{Fit(head, width), Tone::kHeader}});
  std::vector<Line> devices;
  for (const ServerInfo& s : state.servers) {
    if (!s.up) {
      devices.push_back({{Fit(fmt::format("  ! {} down: {}", s.address, s.error), width), Tone::kBad}});
      continue;
    }
    if (s.devices.empty()) {
      devices.push_back({{Fit(fmt::format("    {} has no devices{}", s.name, s.draining ? " (draining)" : ""), width),
                          Tone::kDim}});
    }
    for (const DeviceInfo& d : s.devices) {
      double total = static_cast<double>(std::max<uint64_t>(1, d.memory_total));
      double used = static_cast<double>(d.activity.memory_used) / total;
      double allocated = static_cast<double>(d.memory_allocated) / total;
      double util = d.activity.utilization.value_or(0);
      std::string temp = d.activity.temperature_c ? fmt::format("{:.0f}C", *d.activity.temperature_c) : "-";
      Line line;
      line.push_back({fmt::format("{} {} {} ", Fit(std::to_string(d.index), 3, true),
                                  Fit(s.name + (s.draining ? "*" : ""), server_w), Fit(d.model, model_w)),
                      Tone::kPlain});
      line.push_back({Bar(bar, used, allocated), LoadTone(allocated)});
      line.push_back({fmt::format(" {} {} ", Fit(Bytes(static_cast<double>(d.memory_allocated)) + "/" +
                                                     Bytes(static_cast<double>(d.memory_total)),
                                                 9),
                                  Fit(Bytes(static_cast<double>(d.activity.memory_used)), 5, true)),
                      Tone::kPlain});
      line.push_back({Bar(util_bar, util), LoadTone(util)});
      line.push_back({fmt::format(" {} {}", Fit(Percent(d.activity.utilization), 4, true), Fit(temp, 4, true)),
                      Tone::kPlain});
      if (spark > 0) line.push_back({" " + Sparkline(d.history, spark), Tone::kGood});
      devices.push_back(std::move(line));
    }
  }

  // Leases: the whole lease id always (what `gp-agent ctl revoke` and `gp-lease` take), and at 80 columns the
  // command at 14 characters or more; narrower screens drop the byte rate, the host and the expiry, in that order.
  // Wider screens show every column and give the command the rest.
  std::vector<Column> columns = {
      {Field::kLease, "LEASE", 16, "LEASE", 16, false, 0}, {Field::kUser, "USER", 8, "USER", 7, false, 0},
      {Field::kHost, "HOST", 8, "HOST", 6, false, 2},      {Field::kGpus, "GPUS", 8, "GPUS", 6, false, 0},
      {Field::kMemory, "MEM USE/LIM", 11, "USED/LIM", 9, true, 0},
      {Field::kUtil, "UTIL", 4, "UTIL", 4, true, 0},       {Field::kCalls, "CALL/S", 6, "CALL/S", 6, true, 0},
      {Field::kBytes, "BYTE/S", 6, "BYTE/S", 6, true, 1},  {Field::kAge, "AGE", 4, "AGE", 4, true, 0},
      {Field::kExpiry, "EXP", 4, "EXP", 4, true, 3},       {Field::kState, "ST", 4, "ST", 4, false, 0}};
  auto needed = [&columns] {
    int w = 0;
    for (const Column& c : columns) w += c.width + 1;
    return w;
  };
  constexpr int kCommandMin = 14;
  // Narrow screens: shrink the generous columns first, then drop those that give way.
  if (width - needed() < kCommandMin) {
    for (Column& c : columns) {
      c.title = c.narrow_title;
      c.width = c.narrow_width;
    }
  }
  for (int level = 1; level <= 3 && width - needed() < kCommandMin; ++level) {
    columns.erase(std::remove_if(columns.begin(), columns.end(), [level](const Column& c) { return c.give_way == level; }),
                  columns.end());
  }
  const int command_w = std::max(4, width - needed());
  std::string lease_head;
  for (const Column& c : columns) lease_head += Fit(c.title, c.width, c.right) + " ";
  lease_head += Fit("COMMAND", command_w);
  std::vector<Line> leases;
  for (const LeaseRow& r : rows) {
    const LeaseInfo& l = *r.lease;
    std::string gpus_text = r.server->name + ":";
    for (size_t i = 0; i < l.devices.size(); ++i) gpus_text += (i ? "," : "") + std::to_string(l.devices[i]);
    Line line;
    for (const Column& c : columns) {
      std::string cell;
      Tone tone = Tone::kPlain;
      switch (c.field) {
        case Field::kLease: cell = l.id; break;
        case Field::kUser: cell = l.user; break;
        case Field::kHost: cell = l.host; break;
        case Field::kGpus: cell = gpus_text; break;
        case Field::kMemory:
          cell = Bytes(static_cast<double>(l.activity.memory_used)) + "/" + Bytes(static_cast<double>(l.memory_bytes));
          break;
        case Field::kUtil:
          cell = Percent(l.activity.utilization);
          if (l.activity.utilization) tone = LoadTone(*l.activity.utilization);
          break;
        case Field::kCalls: cell = Count(l.activity.calls_per_s); break;
        case Field::kBytes: cell = Bytes(l.activity.bytes_to_device_per_s + l.activity.bytes_from_device_per_s); break;
        case Field::kAge: cell = Age(l.age_s); break;
        case Field::kExpiry: cell = Age(l.expires_in_s); break;
        case Field::kState:
          cell = !l.committed ? "resv" : l.suspended ? "susp" : l.idle ? "idle" : "run";
          tone = l.idle || l.suspended ? Tone::kWarn : !l.committed ? Tone::kDim : Tone::kGood;
          break;
      }
      line.push_back({Fit(cell, c.width, c.right) + " ", tone});
    }
    line.push_back({Fit(ShortCommand(l.label), command_w), Tone::kPlain});
    leases.push_back(std::move(line));
  }

  // Fit the two tables into the height: devices take at most half of what is left while leases wait.
  std::string footer;
  if (settings.typing_filter) {
    footer = fmt::format("filter: {}_   Enter apply  Esc cancel", settings.editing);
  } else {
    // What narrows the lease list comes first: the keys are the same every time.
    if (!settings.filter.empty()) footer += fmt::format("filter \"{}\"  ", settings.filter);
    if (settings.idle_only) footer += "idle only  ";
    if (!settings.message.empty()) footer += settings.message + "  ";
    footer += fmt::format("q quit  s sort  r reverse  / filter  c clear  i idle");
  }
  const int fixed_lines = static_cast<int>(out.size()) + 2 /* blank + lease head */ + 1 /* footer */;
  int room = height > 0 ? std::max(0, height - fixed_lines) : static_cast<int>(devices.size() + leases.size()) + 2;
  auto take = [](std::vector<Line>& from, int limit, const char* what, int width) {
    std::vector<Line> kept;
    if (static_cast<int>(from.size()) <= limit) return from;
    int show = std::max(0, limit - 1);
    kept.assign(from.begin(), from.begin() + show);
    if (limit > 0) {
      kept.push_back({{Fit(fmt::format("    ... {} more {}", from.size() - static_cast<size_t>(show), what), width),
                       Tone::kDim}});
    }
    return kept;
  };
  int device_room = leases.empty() ? room : std::max(std::min<int>(static_cast<int>(devices.size()), room / 2),
                                                     room - static_cast<int>(leases.size()));
  device_room = std::min(device_room, room);
  for (Line& l : take(devices, device_room, "GPUs", width)) out.push_back(std::move(l));
  int shown_devices = std::min(device_room, static_cast<int>(devices.size()));
  out.push_back({{"", Tone::kPlain}});
  out.push_back({{Fit(lease_head, width), Tone::kHeader}});
  if (leases.empty()) {
    bool summary = false;
    for (const ServerInfo& s : state.servers) summary = summary || s.summary;
    leases.push_back({{summary && lease_count > 0 ? "    leases not listed: from the directory (gp-top --detail lists them)"
                       : lease_count == 0         ? "    no leases"
                                                  : "    no lease matches",
                       Tone::kDim}});
  }
  for (Line& l : take(leases, room - shown_devices, "leases", width)) out.push_back(std::move(l));
  out.push_back({{Fit(footer, width), settings.typing_filter ? Tone::kWarn : Tone::kDim}});
  return out;
}

std::string ToText(const std::vector<Line>& lines, bool colour) {
  std::string out;
  for (const Line& line : lines) {
    std::string text;
    for (const Span& s : line) {
      const char* code = nullptr;
      switch (s.tone) {
        case Tone::kHeader: code = "\x1b[1m"; break;
        case Tone::kGood: code = "\x1b[32m"; break;
        case Tone::kWarn: code = "\x1b[33m"; break;
        case Tone::kBad: code = "\x1b[31m"; break;
        case Tone::kDim: code = "\x1b[2m"; break;
        case Tone::kPlain: break;
      }
      text += colour && code ? std::string(code) + s.text + "\x1b[0m" : s.text;
    }
    // Trailing blanks are the padding of the last column: not worth printing.
    while (!colour && !text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  }
  return out;
}

}  // namespace gpupool::top
