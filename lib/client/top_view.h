// gp-top's screen, as lines of styled text: what the terminal front end (tools/gp-top) draws with curses, and what
// --once prints. Pure: a pool state and the view's settings in, lines out, so that the layout is tested without a
// terminal and fits any width from 80 columns up (columns of lesser use give way first on narrow screens).
#ifndef GPUPOOL_CLIENT_TOP_VIEW_H_
#define GPUPOOL_CLIENT_TOP_VIEW_H_

#include <string>
#include <vector>

#include "gpupool/state.h"

namespace gpupool::top {

// What the lease rows are ordered by (the key `s` turns through them).
enum class SortKey { kUtilization, kMemory, kCalls, kBytes, kAge, kUser };
const char* SortKeyName(SortKey key);
SortKey NextSortKey(SortKey key);

struct ViewSettings {
  SortKey sort = SortKey::kUtilization;
  bool ascending = false;      // Largest first by default (the busiest lease on top).
  std::string filter;          // Only leases whose user, host, command or id contains it.
  bool idle_only = false;      // Only leases flagged idle.
  std::string editing;         // The filter being typed (shown in the footer); empty: not editing.
  bool typing_filter = false;
  std::string clock;           // Shown in the header (the front end's local time); may be empty.
  std::string message;         // A one-line notice in the footer (e.g. a refresh error); may be empty.
};

enum class Tone { kPlain, kHeader, kGood, kWarn, kBad, kDim };

struct Span {
  std::string text;
  Tone tone = Tone::kPlain;
};
using Line = std::vector<Span>;

// The screen for `state`: at most `height` lines (0: as many as it takes), each at most `width` characters.
std::vector<Line> RenderTop(const PoolState& state, const ViewSettings& settings, int width, int height);

// The lines as plain text, or with ANSI colours.
std::string ToText(const std::vector<Line>& lines, bool colour);

}  // namespace gpupool::top

#endif  // GPUPOOL_CLIENT_TOP_VIEW_H_
