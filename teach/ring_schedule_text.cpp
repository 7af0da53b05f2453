// `gradsync teach ring`'s text: the schedule of ring_schedule.cpp as tables a reader can
// follow step by step (contributor sets per segment, the numbers, the traffic per rank).
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "common/error.h"
#include "teach/ring_schedule.h"

namespace gradsync::teach {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

char rank_letter(int rank) { return static_cast<char>('a' + rank); }

std::string rank_letters(int workers) {
  std::string s;
  for (int r = 0; r < workers; ++r) s += rank_letter(r);
  return s;
}

// Past this many ranks a table would not fit 100 columns with one letter per rank.
constexpr int kMaxLetterColumns = 8;

// "ab..": letter q when rank q's values are in the sum, a dot where they are not yet. Past
// kMaxLetterColumns ranks, the run of ranks instead: "c..f" = c+d+e+f, "o..b" = o+p+a+b, "all".
// In a ring the ranks summed into a segment always form such a run: each step adds the next
// rank round.
std::string contributor_cell(std::uint32_t mask, int workers) {
  std::string s;
  if (workers > kMaxLetterColumns) {
    const auto has = [&](int q) { return (mask >> mod(q, workers)) & 1u; };
    if (mask == (1u << workers) - 1) return "all";
    int first = -1, last = -1, runs = 0;
    for (int q = 0; q < workers; ++q) {
      if (has(q) && !has(q - 1)) first = q, ++runs;
      if (has(q) && !has(q + 1)) last = q;
    }
    if (runs == 1) {
      if (first == last) return std::string(1, rank_letter(first));
      return std::string(1, rank_letter(first)) + ".." + rank_letter(last);
    }
  }
  for (int q = 0; q < workers; ++q) s += (mask >> q) & 1u ? rank_letter(q) : '.';
  return s;
}

// "a+b+c+d", or "a+b+...+p" past eight ranks.
std::string full_sum_name(int workers) {
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "..." + std::string(...).
  std::string s;
  if (workers > 8) return (s = "a+b+...+") += rank_letter(workers - 1);
  for (int r = 0; r < workers; ++r) {
    if (r > 0) s += '+';
    s += rank_letter(r);
  }
  return s;
}

std::string range_text(const SegmentRange& range) {
  std::string text = "[";
  text += std::to_string(range.begin);
  text += ",";
  text += std::to_string(range.end());
  text += ")";
  return text;
}

std::string pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
}

std::string rank_label(int rank, int workers) {
  return pad("rank " + std::to_string(rank), workers > 10 ? 7 : 6);
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string format_double(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", x);
  std::string s = text;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

std::string rstrip(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// Appends `items` after `prefix`, separated by spaces, wrapping before column 100 with the
// continuation lines indented under the first item.
void wrap_items(std::ostringstream& out, const std::string& prefix,
                const std::vector<std::string>& items) {
  constexpr std::size_t kWidth = 100;
  std::string line = prefix;
  bool first = true;
  for (const std::string& item : items) {
    if (!first && line.size() + 1 + item.size() > kWidth) {
      out << rstrip(line) << "\n";
      line = std::string(prefix.size(), ' ') + item;
    } else {
      line += (first ? "" : " ") + item;
    }
    first = false;
  }
  out << rstrip(line) << "\n";
}

// One table: a row per rank, a column per segment, each cell the contributor set of that
// rank's copy of the segment; `arrived` (per rank, -1 for none) gets a "*".
void render_table(std::ostringstream& out, const RingSchedule& s, const RingBuffers& buffers,
                  const std::vector<int>& arrived) {
  const int n = s.workers;
  const std::size_t letters = n > kMaxLetterColumns ? 4 : std::size_t(n);  // "o..b"
  const std::size_t cell = std::max<std::size_t>(letters + 1, n > 10 ? 6 : 5);
  const std::string indent = "  " + std::string(rank_label(0, n).size(), ' ') + "  ";
  std::string header = indent;
  for (int seg = 0; seg < n; ++seg) {
    header += (seg ? "  " : "") + pad("seg " + std::to_string(seg), cell);
  }
  while (!header.empty() && header.back() == ' ') header.pop_back();
  out << header << "\n";
  for (int r = 0; r < n; ++r) {
    std::string row = "  " + rank_label(r, n) + "  ";
    for (int seg = 0; seg < n; ++seg) {
      const SegmentRange& range = s.segments[std::size_t(seg)];
      std::string text = "-";  // an empty segment holds nothing
      if (range.size > 0) {
        text = contributor_cell(buffers.contributors[std::size_t(r)][range.begin], n);
        if (arrived[std::size_t(r)] == seg) text += "*";
      }
      row += (seg ? "  " : "") + pad(text, cell);
    }
    while (row.back() == ' ') row.pop_back();
    out << row << "\n";
  }
}

// Every rank's numbers, segments separated by "|".
void render_numbers(std::ostringstream& out, const RingSchedule& s, const RingBuffers& buffers) {
  for (int r = 0; r < s.workers; ++r) {
    std::vector<std::string> items;
    for (int seg = 0; seg < s.workers; ++seg) {
      const SegmentRange& range = s.segments[std::size_t(seg)];
      if (range.size == 0) continue;
      if (!items.empty()) items.push_back("|");
      for (std::size_t i = range.begin; i < range.end(); ++i) {
        items.push_back(std::to_string(buffers.values[std::size_t(r)][i]));
      }
    }
    if (items.empty()) items.push_back("(empty)");
    wrap_items(out, "  " + rank_label(r, s.workers) + ": ", items);
  }
}

void render_split(std::ostringstream& out, const RingSchedule& s) {
  const int n = s.workers;
  const std::size_t e = s.elements;
  const std::size_t base = e / std::size_t(n);
  const std::size_t extra = e % std::size_t(n);
  out << "The buffer is cut into " << plural(std::size_t(n), "segment", "segments")
      << ", one per rank, as TcpRing cuts it.\n"
      << e << " = " << n << " x " << base;
  if (extra == 0) {
    out << ": every segment has " << plural(base, "element", "elements") << ".\n";
  } else if (base == 0) {
    out << " + " << extra << ": "
        << (extra == 1 ? std::string("segment 0 holds the one element")
                       : "the first " + std::to_string(extra) + " segments hold one element each")
        << ", the other " << (std::size_t(n) - extra)
        << (std::size_t(n) - extra == 1 ? " is" : " are")
        << " empty.\nAn empty segment still takes its turn in every step, but nothing goes on "
           "the wire for it:\nwith fewer elements than ranks some links idle, and the ring "
           "still takes 2(N-1) steps.\n";
  } else {
    out << " + " << extra << ": "
        << (extra == 1 ? std::string("segment 0 takes")
                       : "the first " + std::to_string(extra) + " segments take")
        << " one extra element.\n";
  }
  std::vector<std::string> items;
  for (int seg = 0; seg < n; ++seg) {
    const SegmentRange& range = s.segments[std::size_t(seg)];
    items.push_back(pad("segment " + std::to_string(seg) + ": " + range_text(range), 22));
  }
  wrap_items(out, "  ", items);
}

void render_step(std::ostringstream& out, const RingSchedule& s, const RingStepView& step,
                 const RingRenderOptions& options) {
  const int n = s.workers;
  const int total = int(s.steps.size());
  out << "Step " << step.index + 1 << " of " << total << " ("
      << (step.reduce ? "reduce-scatter" : "all-gather")
      << (step.reduce ? "; the receiver adds it in" : "; the receiver overwrites its copy")
      << "):\n";
  const RingBuffers& before =
      step.index == 0 ? s.initial : s.steps[std::size_t(step.index - 1)].after;
  std::vector<int> arrived(std::size_t(n), -1);
  for (const RingSend& send : step.sends) {
    std::string line = "  " + rank_label(send.from, n) + " -> " + rank_label(send.to, n) +
                       "  segment " + pad(std::to_string(send.segment), n > 10 ? 2 : 1) + "  ";
    if (send.range.size == 0) {
      line += "empty: nothing to send";
    } else {
      line += pad(range_text(send.range), 7) + "  " +
              pad(plural(send.range.size, "element", "elements"), 11) + "  carrying " +
              contributor_cell(before.contributors[std::size_t(send.from)][send.range.begin], n);
      arrived[std::size_t(send.to)] = send.segment;
    }
    out << line << "\n";
  }
  render_table(out, s, step.after, arrived);
  if (options.numeric) render_numbers(out, s, step.after);
  out << "\n";
}

void render_traffic(std::ostringstream& out, const RingSchedule& s) {
  const int n = s.workers;
  const std::size_t bytes = s.elements * sizeof(float);
  out << "Traffic, with S = " << plural(s.elements, "element", "elements") << " = " << bytes
      << " bytes (float32; TcpRing counts these payload bytes):\n";
  out << "  " << pad("", rank_label(0, n).size())
      << "  messages  elements sent  bytes sent  bytes received\n";
  std::size_t busiest_sent = 0, busiest_received = 0, min_sent = bytes * 2, max_sent = 0;
  for (int r = 0; r < n; ++r) {
    const std::size_t sent = s.elements_sent[std::size_t(r)] * sizeof(float);
    // What rank r receives is what its left neighbour sends.
    const std::size_t received = s.elements_sent[std::size_t(mod(r - 1, n))] * sizeof(float);
    if (sent + received > busiest_sent + busiest_received) {
      busiest_sent = sent;
      busiest_received = received;
    }
    min_sent = std::min(min_sent, sent);
    max_sent = std::max(max_sent, sent);
    out << "  " << rank_label(r, n) << "  "
        << pad_left(std::to_string(s.messages_sent[std::size_t(r)]), 8) << "  "
        << pad_left(std::to_string(s.elements_sent[std::size_t(r)]), 13) << "  "
        << pad_left(std::to_string(sent), 10) << "  " << pad_left(std::to_string(received), 14)
        << "\n";
  }
  bool any_empty = false;
  for (const RingStepView& step : s.steps) {
    for (const RingSend& send : step.sends) any_empty = any_empty || send.range.size == 0;
  }
  const double formula = 2.0 * (n - 1) / n * double(bytes);
  out << "  2(N-1)/N * S = 2*" << n - 1 << "/" << n << " * " << bytes
      << " bytes = " << format_double(formula) << " bytes sent, and as many received, per rank";
  if (min_sent == max_sent) {
    out << ".\n";
  } else {
    out << ";\n  here " << (max_sent - min_sent > sizeof(float) ? "from " : "") << min_sent
        << (max_sent - min_sent > sizeof(float) ? " to " : " or ") << max_sent
        << ": rank r never sends segments r+1 and r+2, and segments differ by one element.\n";
  }
  if (any_empty) out << "  A message of an empty segment carries nothing: TcpRing skips it.\n";
  if (n > 1 && !any_empty) {
    out << (n == 2 ? "  Both" : "  All " + std::to_string(n))
        << " links are busy in every step, each with about S/N: 2(N-1) = " << 2 * (n - 1)
        << " steps of S/N.\n";
  }
  out << "\nCompare with one central node (DESIGN.md's traffic table), N = " << n
      << ", S = " << bytes << " bytes:\n";
  out << "  dp, DataParallel:  replica 0 receives (N-1)*S and sends (N-1)*S: 2(N-1)*S = "
      << 2 * std::size_t(n - 1) * bytes << " bytes.\n";
  out << "  ps, one server:    the server receives N*S and sends N*S: 2N*S = "
      << 2 * std::size_t(n) * bytes << " bytes.\n";
  out << "  allreduce, ring:   the busiest rank moves " << busiest_sent << " out + "
      << busiest_received << " in = " << busiest_sent + busiest_received
      << " bytes, about 4(N-1)/N * S.\n";
  out << "The central node's load grows with N; a ring rank's stays under 4S however many ranks "
         "join.\n";
}

}  // namespace

std::string render_ring_schedule(const RingSchedule& s, const RingRenderOptions& options) {
  const int n = s.workers;
  std::ostringstream out;
  out << "Ring all-reduce of " << plural(s.elements, "element", "elements") << " over "
      << plural(std::size_t(n), "rank", "ranks")
      << ", as TcpRing runs it (allreduce/tcp/tcp_ring.cpp)\n\n";

  const std::string letters = rank_letters(n);
  const std::string goal = full_sum_name(n);
  if (n == 1) {
    out << "One rank holds gradient a, which already is the sum: there is no step and nothing "
           "is sent\n(TcpRing returns at once when the world size is 1).\n\n";
  } else {
    out << "Rank r sends only to rank r+1 and receives only from rank r-1, around the ring:\n  ";
    for (int r = 0; r < n; ++r) out << r << " -> ";
    out << "0\n";
    out << (n == 2 ? "Ranks 0 and 1" : "Ranks 0.." + std::to_string(n - 1))
        << " start with gradients " << letters.front() << (n == 2 ? " and " : "..")
        << letters.back() << "; the goal is " << goal << " on every rank.\n\n";
  }

  if (s.elements == 0 && n > 1) {
    out << "0 elements: there is nothing to add up. The schedule would still be 2(N-1) = "
        << 2 * (n - 1)
        << " steps\nof empty segments; TcpRing skips the whole collective when the count is "
           "0.\n\n";
  } else if (n > 1) {
    render_split(out, s);
    out << "\nA table cell is one rank's copy of one segment, named by the ranks summed into "
           "it:\n";
    if (n > kMaxLetterColumns) {
      out << "\"c..f\" = c+d+e+f, a run of ranks round the ring (\"" << letters.back()
          << "..b\" = " << letters.back() << "+a+b), \"all\" = " << goal;
    } else {
      out << "\"" << contributor_cell(n > 2 ? 3u : 1u, n) << (n > 2 ? "\" = a+b" : "\" = a alone")
          << " (a dot: that rank's values are not in yet), \"" << letters << "\" = " << goal;
    }
    out << ".\nAll elements of a segment move together; * marks what has just arrived"
        << (s.elements < std::size_t(n) ? "; - is an empty segment" : "") << ".\n\n";
    out << "Before the first step every rank holds only its own values:\n";
    render_table(out, s, s.initial, std::vector<int>(std::size_t(n), -1));
    if (options.numeric) render_numbers(out, s, s.initial);
    out << "\n";

    out << "Phase 1, reduce-scatter, " << plural(std::size_t(n - 1), "step", "steps")
        << ": rank r first sends segment r to rank r+1, which adds its\nown values in; then "
           "each rank forwards the segment it has just received, so a partial sum grows\nby "
           "one rank per step.\n\n";
    for (const RingStepView& step : s.steps) {
      if (step.index == n - 1) {
        out << "After reduce-scatter each segment is complete on exactly one rank: rank r holds "
               "the full sum\nof segment r+1 (mod "
            << n << ").\n\n";
        out << "Phase 2, all-gather, " << plural(std::size_t(n - 1), "step", "steps")
            << ": rank r sends its complete segment r+1 on, then forwards what\nit has just "
               "received; the receiver overwrites its partial copy.\n\n";
      }
      render_step(out, s, step, options);
    }
  }

  // The result, checked against the closed form rather than trusted.
  const RingBuffers& final_buffers = s.steps.empty() ? s.initial : s.steps.back().after;
  std::string ranks_sum;
  if (n == 1) {
    ranks_sum = "100*1";
  } else if (n <= 3) {
    ranks_sum = "100*(1";
    for (int r = 2; r <= n; ++r) ranks_sum += "+" + std::to_string(r);
    ranks_sum += ")";
  } else {
    ranks_sum = "100*(1+...+" + std::to_string(n) + ")";
  }
  out << "Result: every rank holds " << goal << " in every element.\n";
  out << "In numbers: element i of rank r started as 100*(r+1) + i, so the exact sum is\n  "
      << ranks_sum << " + " << n << "*i = " << 50 * n * (n + 1) << " + " << n << "*i:\n";
  int wrong_ranks = 0;
  for (int r = 0; r < n; ++r) {
    const auto& values = final_buffers.values[std::size_t(r)];
    std::vector<std::string> items;
    for (std::int64_t v : values) items.push_back(std::to_string(v));
    if (items.empty()) items.push_back("(empty)");
    wrap_items(out, "  " + rank_label(r, n) + ": ", items);
    if (values != s.exact_sum) ++wrong_ranks;
  }
  if (wrong_ranks == 0) {
    out << (n == 1   ? std::string("The rank holds")
            : n == 2 ? std::string("Both ranks hold")
                     : "All " + std::to_string(n) + " ranks hold")
        << " exactly the sum.\n\n";
  } else {
    out << "WRONG: " << wrong_ranks << " of " << n << " ranks differ from the exact sum.\n\n";
  }

  render_traffic(out, s);
  return out.str();
}

}  // namespace gradsync::teach
