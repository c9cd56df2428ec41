#include "top_screen.h"

#include <algorithm>
#include <utility>

namespace gpuslice::cli {
namespace {

// The key of an escape sequence's body (what follows ESC): "[A", "OA", "[5~", "[1~" ...
TopKey EscapeKey(std::string_view body) {
  if (body.size() >= 2 && (body[0] == '[' || body[0] == 'O')) {
    switch (body[1]) {
      case 'A':
        return TopKey::kUp;
      case 'B':
        return TopKey::kDown;
      case 'H':
        return TopKey::kHome;
      case 'F':
        return TopKey::kEnd;
      default:
        break;
    }
  }
  if (body == "[5~") return TopKey::kPageUp;
  if (body == "[6~") return TopKey::kPageDown;
  if (body == "[1~" || body == "[7~") return TopKey::kHome;
  if (body == "[4~" || body == "[8~") return TopKey::kEnd;
  return TopKey::kOther;
}

TopKey PlainKey(char c) {
  switch (c) {
    case 'q':
    case 'Q':
      return TopKey::kQuit;
    case 'k':
      return TopKey::kUp;
    case 'j':
      return TopKey::kDown;
    case 'b':
      return TopKey::kPageUp;
    case ' ':
      return TopKey::kPageDown;
    case 'g':
      return TopKey::kHome;
    case 'G':
      return TopKey::kEnd;
    case 's':
      return TopKey::kNextSort;
    case 'S':
      return TopKey::kPreviousSort;
    case 'd':
      return TopKey::kDrawing;
    case 'p':
      return TopKey::kProcesses;
    case '?':
    case 'h':
      return TopKey::kHelp;
    default:
      return TopKey::kOther;
  }
}

TopSort Step(TopSort sort, int by) {
  const int next = ((static_cast<int>(sort) + by) % kTopSorts + kTopSorts) % kTopSorts;
  return static_cast<TopSort>(next);
}

std::string Footer(const TopScreen& screen, std::size_t shown, std::size_t total) {
  std::string position = total == 0 ? "no details"
                                    : "lines " + std::to_string(screen.scroll + 1) + "-" +
                                          std::to_string(screen.scroll + shown) + " of " +
                                          std::to_string(total);
  return position + " · sort " + TopSortName(screen.sort) +
         " · ↑↓ PgUp PgDn scroll · s sort · d drawings · p processes · ? help · q quit";
}

}  // namespace

std::vector<TopKey> ParseTopKeys(std::string_view bytes) {
  std::vector<TopKey> keys;
  for (std::size_t i = 0; i < bytes.size();) {
    if (bytes[i] != '\x1b') {
      keys.push_back(PlainKey(bytes[i++]));
      continue;
    }
    // ESC [ or ESC O, parameters, then a final byte in 0x40-0x7e; a lone ESC is kOther.
    std::size_t end = i + 1;
    if (end < bytes.size() && (bytes[end] == '[' || bytes[end] == 'O')) {
      ++end;
      while (end < bytes.size() && (bytes[end] < 0x40 || bytes[end] > 0x7e)) ++end;
      if (end < bytes.size()) ++end;
    }
    keys.push_back(EscapeKey(bytes.substr(i + 1, end - i - 1)));
    i = end;
  }
  return keys;
}

bool ApplyTopKey(TopKey key, TopScreen& screen) {
  const std::size_t page = std::max<std::size_t>(screen.page, 1);
  if (screen.help) {
    screen.help = false;
    return key != TopKey::kQuit;
  }
  switch (key) {
    case TopKey::kQuit:
      return false;
    case TopKey::kUp:
      screen.scroll -= std::min<std::size_t>(screen.scroll, 1);
      break;
    case TopKey::kDown:
      ++screen.scroll;
      break;
    case TopKey::kPageUp:
      screen.scroll -= std::min(screen.scroll, page);
      break;
    case TopKey::kPageDown:
      screen.scroll += page;
      break;
    case TopKey::kHome:
      screen.scroll = 0;
      break;
    case TopKey::kEnd:
      screen.scroll = static_cast<std::size_t>(-1) / 2;  // clamped by the next ComposeScreen
      break;
    case TopKey::kNextSort:
      screen.sort = Step(screen.sort, 1);
      break;
    case TopKey::kPreviousSort:
      screen.sort = Step(screen.sort, -1);
      break;
    case TopKey::kDrawing:
      screen.drawing = !screen.drawing;
      break;
    case TopKey::kProcesses:
      screen.processes = !screen.processes;
      break;
    case TopKey::kHelp:
      screen.help = true;
      break;
    case TopKey::kOther:
      break;
  }
  return true;
}

std::vector<std::string> TopHelp() {
  return {"gpuslice top: keys",
          "",
          "  q            quit",
          "  ↑ k  ↓ j     scroll the details a line",
          "  PgUp b       a page up",
          "  PgDn space   a page down",
          "  Home g       to the top",
          "  End G        to the end",
          "  s  S         sort GPUs by the next or previous key: index, memory, sm, idle",
          "  d            show or hide the MIG drawings",
          "  p            show or hide a line per process",
          "  ? h          this help",
          "",
          "Overview strip: one column per placement unit; █ an instance with processes or a",
          "lease, ▒ an idle instance, · a free unit.",
          "",
          "Any key returns."};
}

std::vector<std::string> ComposeScreen(TopInput input, TopOptions options, TopScreen& screen,
                                       std::size_t rows) {
  std::vector<std::string> out;
  if (rows == 0) return out;
  if (screen.help) {
    for (std::string& line : TopHelp()) out.push_back(FitToWidth(line, options.width));
    if (out.size() > rows) out.resize(rows);
    return out;
  }
  SortGpus(screen.sort, input);
  options.drawing = screen.drawing;
  options.processes = screen.processes;
  std::string title = std::exchange(input.title, "");
  std::vector<std::string> head;
  if (!title.empty()) head.push_back(FitToWidth(title, options.width));
  for (std::string& line : RenderOverview(input, options)) head.push_back(std::move(line));
  head.emplace_back();
  std::vector<std::string> detail = RenderTop(input, options);
  // Room for the head, at least one detail line, and the footer; a short terminal loses the head
  // first.
  if (head.size() + 2 > rows) head.resize(rows >= 2 ? rows - 2 : 0);
  const std::size_t room = rows - head.size() - 1;
  screen.scroll = std::min(screen.scroll, detail.size() > room ? detail.size() - room : 0);
  const std::size_t shown = std::min(room, detail.size() - std::min(detail.size(), screen.scroll));
  screen.page = std::max<std::size_t>(room, 1);
  out = std::move(head);
  for (std::size_t i = 0; i < shown; ++i) out.push_back(std::move(detail[screen.scroll + i]));
  out.push_back(FitToWidth(Footer(screen, shown, detail.size()), options.width));
  return out;
}

}  // namespace gpuslice::cli
