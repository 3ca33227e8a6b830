#include "agent/policy.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpupool/units.h"

namespace gpupool::agent {
namespace {

constexpr const char* kDayNames[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

std::tm Local(std::time_t t) {
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

// "HH:MM" -> minutes of the day; "24:00" allowed as the end of the day.
std::optional<int> ParseClock(std::string_view text) {
  int h = 0, m = 0;
  char colon = 0;
  if (std::sscanf(std::string(text).c_str(), "%d%c%d", &h, &colon, &m) != 3 || colon != ':' || h < 0 || h > 24 ||
      m < 0 || m > 59 || (h == 24 && m != 0)) {
    return std::nullopt;
  }
  return h * 60 + m;
}

std::string Fraction(double f) { return fmt::format("{:g}", f); }

}  // namespace

std::string FormatLocal(std::time_t t) {
  std::tm tm = Local(t);
  char text[32];
  std::strftime(text, sizeof(text), "%a %H:%M", &tm);
  return text;
}

bool Personality::ActiveAt(const std::tm& local) const {
  auto on = [this](int wday) { return days.empty() || std::find(days.begin(), days.end(), wday) != days.end(); };
  int minute = local.tm_hour * 60 + local.tm_min;
  if (from_minute <= to_minute) return on(local.tm_wday) && minute >= from_minute && minute < to_minute;
  // A window past midnight: from `from` to the day's end, or, before `to`, the one that began the day before.
  if (minute >= from_minute) return on(local.tm_wday);
  if (minute < to_minute) return on((local.tm_wday + 6) % 7);
  return false;
}

bool UnixGroupHas(const std::string& user, const std::string& group) {
  char buf[16384];
  struct group gr{};
  struct group* found = nullptr;
  if (getgrnam_r(group.c_str(), &gr, buf, sizeof(buf), &found) != 0 || !found) return false;
  for (char** m = found->gr_mem; m && *m; ++m) {
    if (user == *m) return true;
  }
  // A user's primary group lists no members: compare it with the user's own.
  struct passwd pw{};
  struct passwd* me = nullptr;
  char pbuf[4096];
  return getpwnam_r(user.c_str(), &pw, pbuf, sizeof(pbuf), &me) == 0 && me && me->pw_gid == found->gr_gid;
}

Result<Policy> Policy::Read(const TomlFile& file) {
  Policy policy;
  const toml::table& root = file.root();
  if (const toml::node* g = root.get("groups")) {
    if (!g->is_table()) return file.Error(*g, "'groups' must be a table ([groups])");
    for (const auto& [name, members] : *g->as_table()) {
      std::vector<std::string> list;
      if (Status s = file.GetStringList(*g->as_table(), name.str(), &list); !s.ok()) return s;
      policy.groups_[std::string(name.str())] = list;
    }
  }
  const toml::node* ps = root.get("personality");
  if (!ps) return policy;
  if (!ps->is_array_of_tables()) return file.Error(*ps, "'personality' must be an array of tables ([[personality]])");
  for (const toml::node& node : *ps->as_array()) {
    const toml::table& t = *node.as_table();
    if (Status s = file.CheckKeys(t, {"name", "days", "hours", "max_lease", "max_fraction", "max_gpus_per_user",
                                      "max_share_per_user", "on_change", "classes"},
                                  "[[personality]]");
        !s.ok()) {
      return s;
    }
    Personality p;
    if (Status s = file.GetString(t, "name", &p.name); !s.ok()) return s;
    if (p.name.empty()) return file.Error(t, "a [[personality]] needs a name");
    std::vector<std::string> days;
    if (Status s = file.GetStringList(t, "days", &days); !s.ok()) return s;
    for (const std::string& d : days) {
      std::string lower = d.substr(0, 3);
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      auto it = std::find(std::begin(kDayNames), std::end(kDayNames), lower);
      if (it == std::end(kDayNames) || (d.size() != 3 && d.size() < 6)) {
        return file.Error(*t.get("days"), fmt::format("personality {}: '{}' is not a day (mon, tue, ... sun)", p.name, d));
      }
      p.days.push_back(static_cast<int>(it - std::begin(kDayNames)));
    }
    std::string hours;
    if (Status s = file.GetString(t, "hours", &hours); !s.ok()) return s;
    if (!hours.empty()) {
      auto dash = hours.find('-');
      auto from = dash == std::string::npos ? std::nullopt : ParseClock(hours.substr(0, dash));
      auto to = dash == std::string::npos ? std::nullopt : ParseClock(hours.substr(dash + 1));
      if (!from || !to || *from == *to) {
        return file.Error(*t.get("hours"),
                          fmt::format("personality {}: hours '{}' must be \"HH:MM-HH:MM\" (two different times)",
                                      p.name, hours));
      }
      p.from_minute = *from;
      p.to_minute = *to;
    }
    if (t.get("max_lease")) {
      std::chrono::milliseconds d{0};
      if (Status s = file.GetDuration(t, "max_lease", &d); !s.ok()) return s;
      if (d.count() < 1000) return file.Error(*t.get("max_lease"), "max_lease must be at least 1s");
      p.max_lease = d;
    }
    if (const toml::node* f = t.get("max_fraction")) {
      auto v = f->value<double>();
      if (!v || *v < 0.05 || *v > 1) return file.Error(*f, "max_fraction must be a number within 0.05..1");
      p.max_fraction = *v;
    }
    if (t.get("max_gpus_per_user")) {
      int64_t n = 0;
      if (Status s = file.GetInt(t, "max_gpus_per_user", &n); !s.ok()) return s;
      if (n < 0 || n > 100000) return file.Error(*t.get("max_gpus_per_user"), "max_gpus_per_user must be 0 or more");
      p.max_gpus_per_user = static_cast<int>(n);
    }
    if (const toml::node* f = t.get("max_share_per_user")) {
      auto v = f->value<double>();
      if (!v || *v < 0.05) return file.Error(*f, "max_share_per_user must be a number of GPUs, 0.05 or more");
      p.max_share_per_user = *v;
    }
    std::string change = "keep";
    if (Status s = file.GetString(t, "on_change", &change); !s.ok()) return s;
    if (change == "migrate") {
      p.migrate_on_change = true;
    } else if (change != "keep") {
      auto d = ParseDuration(change);
      if (!d.ok()) {
        return file.Error(*t.get("on_change"),
                          fmt::format("personality {}: on_change must be \"keep\", \"migrate\" or a grace duration "
                                      "such as \"10m\"",
                                      p.name));
      }
      p.grace = *d;
    }
    if (const toml::node* c = t.get("classes")) {
      if (!c->is_table()) return file.Error(*c, "'classes' must be a table ([personality.classes])");
      for (const auto& [cls, who] : *c->as_table()) {
        std::vector<std::string> list;
        if (Status s = file.GetStringList(*c->as_table(), cls.str(), &list); !s.ok()) return s;
        for (const std::string& member : list) {
          if (member.empty()) return file.Error(who, "an empty name in classes");
        }
        p.classes[std::string(cls.str())] = list;
      }
    }
    for (const Personality& other : policy.personalities_) {
      if (other.name == p.name) return file.Error(t, fmt::format("two personalities are named {}", p.name));
    }
    policy.personalities_.push_back(std::move(p));
  }
  return policy;
}

const Personality* Policy::ActiveAt(std::time_t t) const {
  std::tm local = Local(t);
  for (const Personality& p : personalities_) {
    if (p.ActiveAt(local)) return &p;
  }
  return nullptr;
}

std::optional<std::time_t> Policy::NextChange(std::time_t t) const {
  const Personality* now = ActiveAt(t);
  std::time_t minute = t - t % 60;
  for (int i = 1; i <= 7 * 24 * 60; ++i) {
    std::time_t at = minute + 60 * i;
    if (ActiveAt(at) != now) return at;
  }
  return std::nullopt;
}

std::time_t Policy::InForceSince(std::time_t t) const {
  const Personality* now = ActiveAt(t);
  std::time_t minute = t - t % 60;
  for (int i = 0; i < 7 * 24 * 60; ++i) {
    if (ActiveAt(minute - 60) != now) return minute;
    minute -= 60;
  }
  return minute;
}

bool Policy::InGroup(const std::string& user, const std::string& member, const GroupLookup& groups) const {
  if (member == user || member == "*") return true;
  if (member.size() > 1 && member[0] == '@') return groups(user, member.substr(1));
  auto it = groups_.find(member);
  if (it == groups_.end()) return false;
  for (const std::string& m : it->second) {
    if (m == user || (m.size() > 1 && m[0] == '@' && groups(user, m.substr(1)))) return true;
  }
  return false;
}

std::string Policy::Refusal(const Personality* p, const PolicyRequest& r, const GroupLookup& groups) const {
  if (!p) return "";
  for (size_t i = 0; i < r.slice_fractions.size(); ++i) {
    if (r.slice_fractions[i] > p->max_fraction + 1e-9) {
      return fmt::format("personality {} allows slices of at most {} of a GPU, not {}", p->name,
                         Fraction(p->max_fraction), Fraction(r.slice_fractions[i]));
    }
  }
  if (p->max_gpus_per_user &&
      r.gpus_held + static_cast<int>(r.slice_fractions.size()) > *p->max_gpus_per_user) {
    return fmt::format("personality {} allows {} at most {} GPU slice(s) at once on this agent; {} held, {} asked",
                       p->name, r.user, *p->max_gpus_per_user, r.gpus_held, r.slice_fractions.size());
  }
  if (p->max_share_per_user) {
    double asked = 0;
    for (double f : r.slice_fractions) asked += f;
    if (r.share_held + asked > *p->max_share_per_user + 1e-9) {
      return fmt::format("personality {} allows {} at most {} GPU(s) of compute at once on this agent; {} held, {} "
                         "asked", p->name, r.user, Fraction(*p->max_share_per_user), Fraction(r.share_held),
                         Fraction(asked));
    }
  }
  if (!p->classes.empty()) {
    for (const std::string& cls : r.slice_classes) {
      auto it = p->classes.find(cls);
      if (it == p->classes.end()) it = p->classes.find("*");
      std::string shown = cls.empty() ? "without a class" : "of class " + cls;
      if (it == p->classes.end()) {
        return fmt::format("personality {} names no one who may use GPUs {}", p->name, shown);
      }
      bool allowed = false;
      for (const std::string& member : it->second) allowed = allowed || InGroup(r.user, member, groups);
      if (!allowed) {
        return fmt::format("personality {}: GPUs {} are for {}; {} is not among them", p->name, shown,
                           fmt::join(it->second, ", "), r.user);
      }
    }
  }
  return "";
}

Status Policy::Check(const PolicyRequest& request, std::time_t now, const GroupLookup& groups) const {
  const Personality* active = ActiveAt(now);
  std::string why = Refusal(active, request, groups);
  if (why.empty()) return Status::Ok();
  // When would it be allowed? Walk the week's changes of personality.
  std::time_t t = now;
  for (int changes = 0; changes < 7 * 24 * 60; ++changes) {
    auto next = NextChange(t);
    if (!next || *next - now > 7 * 24 * 3600) break;
    t = *next;
    const Personality* then = ActiveAt(t);
    if (Refusal(then, request, groups).empty()) {
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("{}; from {} {} would allow it", why, FormatLocal(t),
                                then ? "personality " + then->name : "the agent's default (no personality)"));
    }
  }
  return Status(StatusCode::kPermissionDenied, why + "; no personality of the week allows it");
}

std::string Policy::Breaks(const Personality& p, const PolicyRequest& held, std::chrono::milliseconds age,
                           const GroupLookup& groups) const {
  PolicyRequest alone = held;
  alone.gpus_held = 0;  // A lease held is not checked against the user's totals: they only stop new ones.
  alone.share_held = 0;
  std::string why = Refusal(&p, alone, groups);
  if (!why.empty()) return why;
  if (p.max_lease && age > *p.max_lease) {
    return fmt::format("personality {} allows leases of at most {}", p.name, FormatDuration(*p.max_lease));
  }
  return "";
}

std::string Policy::Describe() const {
  if (personalities_.empty()) return "no personalities: nothing restricted";
  std::string out;
  for (const Personality& p : personalities_) {
    std::vector<std::string> days;
    for (int d : p.days) days.push_back(kDayNames[d]);
    out += fmt::format("{}: {} {:02d}:{:02d}-{:02d}:{:02d}", p.name, days.empty() ? "every day" : fmt::format("{}", fmt::join(days, ",")),
                       p.from_minute / 60, p.from_minute % 60, p.to_minute / 60, p.to_minute % 60);
    if (p.max_lease) out += ", leases up to " + FormatDuration(*p.max_lease);
    if (p.max_fraction < 1) out += ", slices up to " + Fraction(p.max_fraction);
    if (p.max_gpus_per_user) out += fmt::format(", {} GPU(s) per user", *p.max_gpus_per_user);
    if (p.max_share_per_user) out += ", " + Fraction(*p.max_share_per_user) + " GPU(s) of compute per user";
    for (const auto& [cls, who] : p.classes) out += fmt::format(", class {}: {}", cls, fmt::join(who, " "));
    out += p.grace              ? ", on change: grace " + FormatDuration(*p.grace)
           : p.migrate_on_change ? ", on change: migrate"
                                 : ", on change: keep";
    out += "\n";
  }
  return out;
}

}  // namespace gpupool::agent
