// gp-top: the pool live, in the manner of nvitop: per GPU its memory and utilisation, per lease who runs what and
// how hard. Keys: q quit, s sort, r reverse, / filter, c clear the filter, i idle leases only.
//   gp-top [--servers LIST] [--interval SECONDS]   full-screen view (a terminal), refreshed every interval
//   gp-top --once                                  one screen as text, then exit
//   gp-top --json [--history SECONDS]              one snapshot (gp-ls's schema), then exit
// Without a terminal (stdout piped) it prints a screen every interval, as `top -b` does. No colour when stdout is
// not a terminal or NO_COLOR is set.
// Exit status: 0 when at least one server answered (--once, --json) or the view was quit; 1 when no server
// answered; 2 on bad usage or configuration.
#include <curses.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <thread>

#include "output.h"
#include "parse_args.h"
#include "request_args.h"

#include "client/state_json.h"
#include "client/top_view.h"
#include "core/log.h"
#include "core/util.h"
#include "gpupool/gpupool.h"

using gpupool::tools::Print;
using gpupool::tools::PrintError;

namespace {

using namespace gpupool;

// The utilisation sparkline of a wide screen shows up to this much history.
constexpr auto kViewHistory = std::chrono::seconds(60);

std::string LocalClock() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char text[16];
  std::strftime(text, sizeof(text), "%H:%M:%S", &tm);
  return text;
}

bool ColourWanted(int fd) {
  const char* no_colour = std::getenv("NO_COLOR");
  return isatty(fd) && !(no_colour && *no_colour);
}

// Columns for text output: the terminal's, else $COLUMNS, else wide enough for every column.
int TextWidth() {
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    int n = std::atoi(c);
    if (n > 0) return n;
  }
  return 120;
}

// Which agents gp-top shows (--agent: those named; else all), and whether it asks each of them for its leases and
// activity when the pool has a directory (--detail; else the directory's summaries, one look however large the pool).
struct Scope {
  bool detail = false;
  std::vector<std::string> only;
};

PoolState Fetch(Pool& pool, const Scope& scope, std::chrono::seconds history) {
  return ShownPool(pool, scope.detail, scope.only, history);
}

// Fetches the pool's state every interval on a thread of its own, so that a server that does not answer never
// freezes the keys.
class Refresher {
 public:
  Refresher(Pool& pool, std::chrono::milliseconds interval, Scope scope)
      : pool_(pool), interval_(interval), scope_(std::move(scope)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Refresher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // The newest state, if one arrived since the last call.
  bool Take(PoolState* out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fresh_) return false;
    *out = state_;
    fresh_ = false;
    return true;
  }
  void Now() { cv_.notify_all(); }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      PoolState state = Fetch(pool_, scope_, kViewHistory);
      lock.lock();
      state_ = std::move(state);
      fresh_ = true;
      cv_.wait_for(lock, interval_, [this] { return stop_; });
    }
  }

  Pool& pool_;
  std::chrono::milliseconds interval_;
  Scope scope_;
  std::mutex mu_;
  std::condition_variable cv_;
  PoolState state_;
  bool fresh_ = false, stop_ = false;
  std::thread thread_;
};

short PairOf(top::Tone tone) {
  switch (tone) {
    case top::Tone::kGood: return 1;
    case top::Tone::kWarn: return 2;
    case top::Tone::kBad: return 3;
    default: return 0;
  }
}

void Draw(const std::vector<top::Line>& lines, bool colour) {
  erase();
  int rows = LINES, cols = COLS;
  for (int y = 0; y < static_cast<int>(lines.size()) && y < rows; ++y) {
    move(y, 0);
    int x = 0;
    for (const top::Span& s : lines[static_cast<size_t>(y)]) {
      if (x >= cols) break;
      attr_t attr = s.tone == top::Tone::kHeader ? A_BOLD : s.tone == top::Tone::kDim ? A_DIM : A_NORMAL;
      if (colour && PairOf(s.tone) != 0) attr |= COLOR_PAIR(PairOf(s.tone));
      attron(attr);
      std::string text = s.text.substr(0, static_cast<size_t>(cols - x));
      addnstr(text.c_str(), static_cast<int>(text.size()));
      attroff(attr);
      x += static_cast<int>(text.size());
    }
  }
  refresh();
}

// The full-screen view until q. Returns the exit status.
int Interactive(Pool& pool, std::chrono::milliseconds interval, const Scope& scope) {
  if (!initscr()) {
    PrintError("gp-top: cannot start the terminal view (TERM={})\n", std::getenv("TERM") ? std::getenv("TERM") : "");
    return 2;
  }
  cbreak();
  noecho();
  keypad(stdscr, TRUE);
  curs_set(0);
  set_escdelay(25);
  timeout(100);
  const bool colour = has_colors() && !(std::getenv("NO_COLOR") && *std::getenv("NO_COLOR"));
  if (colour) {
    start_color();
    use_default_colors();
    init_pair(1, COLOR_GREEN, -1);
    init_pair(2, COLOR_YELLOW, -1);
    init_pair(3, COLOR_RED, -1);
  }
  top::ViewSettings view;
  PoolState state;
  bool have_state = false, dirty = true;
  Refresher refresher(pool, interval, scope);
  auto last_clock = std::chrono::steady_clock::now();
  for (;;) {
    if (refresher.Take(&state)) {
      have_state = true;
      dirty = true;
      view.message = state.servers_up() == 0 ? "no server answers" : "";
    }
    if (std::chrono::steady_clock::now() - last_clock >= std::chrono::seconds(1)) dirty = true;
    if (dirty) {
      view.clock = LocalClock();
      last_clock = std::chrono::steady_clock::now();
      if (have_state) {
        Draw(top::RenderTop(state, view, COLS, LINES), colour);
      } else {
        Draw({{{"gp-top: asking the pool...", top::Tone::kDim}}}, colour);
      }
      dirty = false;
    }
    int key = getch();
    if (key == ERR) continue;
    dirty = true;
    if (view.typing_filter) {
      if (key == '\n' || key == KEY_ENTER) {
        view.filter = view.editing;
        view.typing_filter = false;
      } else if (key == 27) {  // Esc
        view.typing_filter = false;
      } else if (key == KEY_BACKSPACE || key == 127 || key == 8) {
        if (!view.editing.empty()) view.editing.pop_back();
      } else if (key >= 32 && key < 127) {
        view.editing += static_cast<char>(key);
      }
      continue;
    }
    switch (key) {
      case 'q':
      case 'Q': endwin(); return 0;
      case 's': view.sort = top::NextSortKey(view.sort); break;
      case 'r': view.ascending = !view.ascending; break;
      case '/':
        view.typing_filter = true;
        view.editing = view.filter;
        break;
      case 'c':
      case 27: view.filter.clear(); break;
      case 'i': view.idle_only = !view.idle_only; break;
      case KEY_RESIZE: break;
      case ' ': refresher.Now(); break;
      default: break;
    }
  }
}

}  // namespace

int ToolMain(int argc, char** argv) {
  log::SetProgramName("gp-top");
  CLI::App app{"gp-top: the pool live: GPUs' memory and utilisation, leases and what they do"};
  bool json = false, once = false;
  Scope scope;
  double interval_s = 1.0;
  int history_s = 0;
  tools::ServersArg servers;
  app.add_flag("--once", once, "print one screen as text and exit");
  app.add_flag("--json", json, "print one snapshot as JSON (gp-ls --json's schema, leases included) and exit");
  app.add_option("--history", history_s, "with --json: also each GPU's and lease's last SECONDS of samples (max 600)")
      ->check(CLI::Range(0, 600));
  app.add_flag("--detail", scope.detail,
               "with a directory: ask each agent shown for its leases and activity each refresh (else the "
               "directory's summaries, one look however large the pool)");
  app.add_option("--agent", scope.only, "show only this agent (its name or address; repeatable)");
  app.add_option("--interval", interval_s, "seconds between refreshes (default 1)")->check(CLI::Range(0.2, 3600.0));
  servers.Add(app);
  GP_PARSE_ARGS(app, argc, argv, 2);

  auto pool = servers.ConnectOrSay("gp-top");
  if (!pool.ok()) return 2;
  auto interval = std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000));
  if (json) {
    PoolState state = Fetch(*pool, scope, std::chrono::seconds(history_s));
    Print("{}\n", PoolStateJson(state, {true, history_s > 0}));
    if (state.servers_up() == 0) PrintError("gp-top: no server answered\n");
    return state.servers_up() == 0 ? 1 : 0;
  }
  if (once || !isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO)) {
    // Text: one screen, or (not a terminal) a screen every interval until interrupted, as `top -b`.
    const bool colour = ColourWanted(STDOUT_FILENO);
    for (;;) {
      PoolState state = Fetch(*pool, scope, kViewHistory);
      top::ViewSettings view;
      view.clock = LocalClock();
      Print("{}", top::ToText(top::RenderTop(state, view, TextWidth(), 0), colour));
      gpupool::tools::Flush();  // Each screen as it is drawn; a reader that went away ends the loop.
      if (once) return state.servers_up() == 0 ? 1 : 0;
      Print("\n");
      std::this_thread::sleep_for(interval);
    }
  }
  return Interactive(*pool, interval, scope);
}

int main(int argc, char** argv) {
  return gpupool::tools::RunTool([&] { return ToolMain(argc, argv); });
}
