// The live screen of `gpuslice top` on a terminal of a given size: the title, one overview line per
// GPU (top_view.h RenderOverview), then the detailed frame scrolled to where the user moved it, and
// a footer with the position, the sort order and the keys; or the help screen. Pure: the command
// (command_top.cc) reads the keys and paints what this returns.
//
// Keys: q quits; ↑/k and ↓/j scroll a line, PgUp/PgDn (or b/space) a page, Home/g and End/G to an
// end; s and S sort by the next or previous key (index, memory, sm, idle); d shows or hides the
// drawings, p the processes; ? or h shows the help screen, and any key leaves it.
//
// Contract: ComposeScreen returns at most `rows` lines (at least the footer when rows > 0), each
// within options.width columns; the scroll position is clamped to the frame, so a key can never
// scroll past its end, and it stays where it was when the frame grows or shrinks under it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "top_view.h"

namespace gpuslice::cli {

enum class TopKey {
  kQuit,
  kUp,
  kDown,
  kPageUp,
  kPageDown,
  kHome,
  kEnd,
  kNextSort,
  kPreviousSort,
  kDrawing,
  kProcesses,
  kHelp,
  kOther,
};

// The keys in bytes read from a terminal: plain keys and the VT100/xterm sequences of the arrows,
// PgUp, PgDn, Home and End (ESC [ A, ESC [ 5 ~, ESC [ H, ESC O F, ...). An unknown sequence is one
// kOther.
std::vector<TopKey> ParseTopKeys(std::string_view bytes);

struct TopScreen {
  std::size_t scroll = 0;  // first line of the detailed frame shown
  TopSort sort = TopSort::kIndex;
  bool help = false;
  bool drawing = true;
  bool processes = false;
  std::size_t page = 1;  // detail lines shown by the last ComposeScreen (what a page key moves)
};

// Applies one key. Returns false for kQuit.
bool ApplyTopKey(TopKey key, TopScreen& screen);

// The lines for a terminal of `rows` rows; sorts `input`'s GPUs by screen.sort and takes the
// drawing and processes settings from `screen` (the rest from `options`). Updates screen.scroll
// (clamped) and screen.page.
std::vector<std::string> ComposeScreen(TopInput input, TopOptions options, TopScreen& screen,
                                       std::size_t rows);

// The help screen's lines.
std::vector<std::string> TopHelp();

}  // namespace gpuslice::cli
