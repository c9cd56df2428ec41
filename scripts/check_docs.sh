#!/usr/bin/env bash
# Checks that every performance figure README.md quotes is in docs/BENCHMARKS.md, in a section
# that names the command that produced it. Run with --help for the rules.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/check_docs.sh [--allow FILE] [--verbose] [README [BENCHMARKS]]

Checks that every figure README quotes appears in BENCHMARKS, in a section that names the command
that produced it. Defaults: README.md, docs/BENCHMARKS.md and scripts/check_docs.allow of this
repository. Exit 0 when every figure is found (or allowed), 1 when one is not (each is printed
with its README line number), 2 on bad usage or a malformed allow-list.

What counts as a figure in README (outside fenced code blocks and `inline code`):
  - a number, or a range "A-B", with a unit: x or × (3.2x), %, ns, us, µs, ms, s, min, minutes,
    hours, GPUs, GiB, MiB, GB, MB, KB, points, seeds, traces, nodes, workloads, requests, cores,
    req/s, calls/s, ops/s, launches/s, USD (for example "12 ms", "16 GPUs", "99.9%", "±5 points");
  - a ratio written x0.99 or ×0.99, and a tolerance written ±0.05;
  - any other number inside **bold** text (a headline claim without a unit).
Numbers are compared by value (10,000 = 10000, 255 = 255.0), units after normalisation
(seconds = s, µs = us, GPU = GPUs, ...); a figure without a unit matches a number without one.
README may write fewer decimals than BENCHMARKS (255 for 255.0), never more.
A range is found when both ends are in one section.

Found means: the figure is in BENCHMARKS, and the section holding it (the text under its heading
of level 2 or deeper, or under a parent heading of that section) names a command: a line of a
fenced code block, or an `inline code` span, that starts (after "$ " or "# " and any VAR=value
assignments) with ./build..., build.../, bench/, scripts/, tests/, fuzz/, gpuslice, cmake, ninja,
valgrind, perf, nice, time, /usr/bin/time or git clone.

The allow-list (--allow FILE; default scripts/check_docs.allow) holds numbers that are not
performance claims (settings, thresholds, versions, ports, hardware facts). One entry a line:
    PHRASE  # REASON
PHRASE is literal text of a README line; a figure inside one of its occurrences is not checked.
Every entry needs a reason. Lines starting with # and blank lines are ignored. An entry that
matches nothing is reported as a warning.

Options:
  --allow FILE   the allow-list (use /dev/null for none)
  --verbose      print every figure checked and where it was found
  -h, --help     this text
EOF
}

root=$(cd "$(dirname "$0")/.." && pwd)
allow="$root/scripts/check_docs.allow"
verbose=0
positional=()
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --allow) [[ $# -ge 2 ]] || { echo "check_docs: --allow needs a file" >&2; exit 2; }; allow=$2; shift 2 ;;
    --allow=*) allow=${1#--allow=}; shift ;;
    --verbose | -v) verbose=1; shift ;;
    --) shift; positional+=("$@"); break ;;
    -*) echo "check_docs: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) positional+=("$1"); shift ;;
  esac
done
((${#positional[@]} <= 2)) || { echo "check_docs: at most two paths: README and BENCHMARKS (see --help)" >&2; exit 2; }
readme=${positional[0]:-$root/README.md}
benchmarks=${positional[1]:-$root/docs/BENCHMARKS.md}
for f in "$readme" "$benchmarks" "$allow"; do
  [[ -r $f ]] || { echo "check_docs: cannot read $f" >&2; exit 2; }
done

exec python3 - "$readme" "$benchmarks" "$allow" "$verbose" <<'PYTHON'
import re
import sys
from decimal import Decimal

readme_path, bench_path, allow_path, verbose = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"

NUM = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
# Longer alternatives first; each maps to a canonical unit.
UNITS = [
    ("req/s", "req/s"), ("calls/s", "calls/s"), ("ops/s", "ops/s"), ("launches/s", "launches/s"),
    ("seconds", "s"), ("second", "s"), ("sec", "s"), ("minutes", "min"), ("minute", "min"),
    ("min", "min"), ("hours", "h"), ("hour", "h"), ("ms", "ms"), ("µs", "us"), ("μs", "us"),
    ("us", "us"), ("ns", "ns"), ("s", "s"), ("GPUs", "GPU"), ("GPU", "GPU"), ("GiB", "GiB"),
    ("MiB", "MiB"), ("GB", "GB"), ("MB", "MB"), ("KB", "KB"), ("kB", "KB"), ("points", "point"),
    ("point", "point"), ("seeds", "seed"), ("seed", "seed"), ("traces", "trace"),
    ("trace", "trace"), ("nodes", "node"), ("node", "node"), ("workloads", "workload"),
    ("workload", "workload"), ("requests", "request"), ("request", "request"), ("cores", "core"),
    ("core", "core"), ("USD", "USD"), ("%", "%"),
]
UNIT_RE = "|".join(re.escape(u) for u, _ in UNITS)
CANON = dict(UNITS)
# A number (or range) with a unit after it; x/× must touch the number (3.2x), other units may
# follow a space. The number must not continue a word, a model name (A100-80GB) or a path.
FIGURE = re.compile(
    r"(?<![\w.\-/])(?P<pm>±\s*)?(?P<a>" + NUM + r")"
    r"(?:\s*(?:-|–|—)\s*(?P<b>" + NUM + r"))?"
    r"(?:(?P<x>[x×])(?!\w|\.\d)|\s*(?P<u>" + UNIT_RE + r")(?![\w/]))"
)
RATIO = re.compile(r"(?<![\w.])[x×](?P<a>\d+\.\d+)(?!\w|\.\d)")
PLUS_MINUS = re.compile(r"±\s*(?P<a>" + NUM + r")(?!\w|\.\d)")
BARE = re.compile(r"(?<![\w.\-/])(?P<a>" + NUM + r")(?![\w])")
CODE = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
FENCE = re.compile(r"^\s*(```|~~~)")
COMMAND = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*"
    r"(?:(?:nice(?:\s+-n\s*-?\d+)?|/usr/bin/time|time|env)\s+)*"
    r"(?:\./)?(?:build[\w.-]*/|bench/|scripts/|tests/|fuzz/|\.ci/|"
    r"(?:gpuslice|cmake|ninja|valgrind|perf|git\s+clone)(?:\s|$))"
)


def value(text):
    return Decimal(text.replace(",", ""))


def decimals(text):
    return len(text.partition(".")[2])


def blank(match):
    return " " * (match.end() - match.start())


def figures(line, strip_code):
    """Returns ([(start, end, text, [(number, unit)], is_range)], spans taken, the line scanned)."""
    scan = line
    if strip_code:
        scan = CODE.sub(blank, scan)
        scan = LINK_TARGET.sub(blank, scan)
    taken = []
    found = []
    for m in FIGURE.finditer(scan):
        unit = "x" if m.group("x") else CANON[m.group("u")]
        ends = [(m.group("a"), unit)]
        if m.group("b"):
            ends.append((m.group("b"), unit))
        found.append((m.start(), m.end(), m.group(0).strip(), ends, bool(m.group("b"))))
        taken.append((m.start(), m.end()))
    for m in RATIO.finditer(scan):
        if not any(s <= m.start() < e for s, e in taken):
            found.append((m.start(), m.end(), m.group(0), [(m.group("a"), "x")], False))
            taken.append((m.start(), m.end()))
    for m in PLUS_MINUS.finditer(scan):  # a tolerance without a unit: ±0.05
        if not any(s <= m.start() < e for s, e in taken):
            found.append((m.start(), m.end(), m.group(0), [(m.group("a"), "")], False))
            taken.append((m.start(), m.end()))
    return found, taken, scan


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


# --- the allow-list ---------------------------------------------------------------------------
allow = []  # (phrase, reason, line number)
for n, raw in enumerate(read_lines(allow_path), 1):
    entry = raw.strip()
    if not entry or entry.startswith("#"):
        continue
    phrase, sep, reason = entry.partition(" # ")
    phrase, reason = phrase.strip(), reason.strip()
    if not sep or not reason or not phrase:
        print(f"{allow_path}:{n}: an entry is 'PHRASE  # REASON', with a reason: {raw}", file=sys.stderr)
        sys.exit(2)
    allow.append((phrase, reason, n))
allow_used = set()


def allowed(line, start, end):
    for phrase, _, n in allow:
        pos = line.find(phrase)
        while pos >= 0:
            if pos <= start and end <= pos + len(phrase):
                allow_used.add(n)
                return True
            pos = line.find(phrase, pos + 1)
    return False


# --- BENCHMARKS: sections, commands, figures --------------------------------------------------
bench = read_lines(bench_path)
headings = []  # (line index, level, title)
in_fence = False
fenced = [False] * len(bench)
for i, line in enumerate(bench):
    if FENCE.match(line):
        in_fence = not in_fence
        fenced[i] = True
        continue
    fenced[i] = in_fence
    if not in_fence:
        h = HEADING.match(line)
        if h:
            headings.append((i, len(h.group(1)), h.group(2).strip()))

# Each heading's own text: up to the next heading of any level.
own_end = {}
for k, (i, _, _) in enumerate(headings):
    own_end[i] = headings[k + 1][0] if k + 1 < len(headings) else len(bench)


def has_command(start, end):
    for i in range(start, end):
        line = bench[i]
        candidates = []
        if fenced[i] and not FENCE.match(line):
            candidates.append(re.sub(r"^\s*(?:[$#]\s*)?", "", line))
        if not fenced[i]:
            candidates.extend(m.group(0)[1:-1].strip() for m in CODE.finditer(line))
        if any(COMMAND.match(c) for c in candidates):
            return True
    return False


section_has_command = {i: has_command(i, own_end[i]) for i, _, _ in headings}


def chain(line_index):
    """The headings (level >= 2) holding a line, innermost first."""
    out = []
    level = 7
    for i, lvl, title in reversed(headings):
        if i <= line_index and lvl < level:
            if lvl >= 2:
                out.append((i, lvl, title))
            level = lvl
    return out


def innermost(line_index):
    c = chain(line_index)
    return c[0][0] if c else None


# Where each (value, unit) occurs, unit "" for a number without one (a table cell, ±0.05):
# {(value, unit): {line index: most decimals written there}}.
occurs = {}


def note(key, i, text):
    lines = occurs.setdefault(key, {})
    lines[i] = max(lines.get(i, 0), decimals(text))


for i, line in enumerate(bench):
    found, taken, _ = figures(line, strip_code=False)
    for _, _, _, ends, _ in found:
        for text, u in ends:
            note((value(text), u), i, text)
    for m in BARE.finditer(line):
        if not any(s <= m.start() < e for s, e in taken):
            note((value(m.group("a")), ""), i, m.group("a"))


def lines_of(text, u):
    """Lines holding the number with the same unit (none when README gives none), written with at
    least as many decimals as README gives it (README may drop a trailing zero, never add
    precision: 255 matches 255.0, 1.0 does not match 1)."""
    table = occurs.get((value(text), u), {})
    return {i for i, d in table.items() if d >= decimals(text)}


def where(i):
    c = chain(i)
    return f"§ {c[0][2]}, line {i + 1}" if c else f"line {i + 1}, under no section"


def credited(i):
    return any(section_has_command[h] for h, _, _ in chain(i))


def check(ends, is_range):
    """Returns (ok, found_at): ok when found in a section naming its command."""
    if not is_range:
        hits = sorted(lines_of(*ends[0]))
        good = [i for i in hits if credited(i)]
        return (bool(good), good[0] if good else (hits[0] if hits else None))
    # A range: both ends in the own text of one section.
    by_section = {}
    for k, (v, u) in enumerate(ends):
        for i in lines_of(v, u):
            by_section.setdefault(innermost(i), {}).setdefault(k, i)
    both = [(s, hit) for s, hit in by_section.items() if len(hit) == len(ends)]
    good = [hit[0] for s, hit in both if credited(hit[0])]
    if good:
        return True, min(good)
    return False, (min(hit[0] for _, hit in both) if both else None)


# --- README -----------------------------------------------------------------------------------
readme = read_lines(readme_path)
failures = []
checked = allowed_count = 0
in_fence = bold = False
for n, line in enumerate(readme, 1):
    if FENCE.match(line):
        in_fence = not in_fence
        bold = False
        continue
    if in_fence:
        continue
    if not line.strip():
        bold = False  # emphasis never crosses a paragraph
    found, taken, scan = figures(line, strip_code=True)
    # Numbers in bold text without a unit are claims too (bold may span lines of a paragraph).
    pieces = scan.split("**")
    offset = 0
    for k, piece in enumerate(pieces):
        if k > 0:
            bold = not bold
            offset += 2
        if bold:
            for m in BARE.finditer(piece):
                s, e = offset + m.start(), offset + m.end()
                if not any(ts <= s < te for ts, te in taken):
                    found.append((s, e, m.group(0), [(m.group("a"), "")], False))
        offset += len(piece)
    for start, end, text, ends, is_range in sorted(found):
        if allowed(line, start, end):
            allowed_count += 1
            if verbose:
                print(f"{readme_path}:{n}: {text!r} allowed")
            continue
        checked += 1
        ok, at = check(ends, is_range)
        if ok:
            if verbose:
                print(f"{readme_path}:{n}: {text!r} found ({where(at)})")
        elif at is None:
            failures.append(f"{readme_path}:{n}: {text!r} is not in {bench_path}")
        else:
            failures.append(
                f"{readme_path}:{n}: {text!r} is in {bench_path} ({where(at)}), but no section "
                "holding it names the command that produced it")

for phrase, _, n in allow:
    if n not in allow_used:
        print(f"check_docs: warning: {allow_path}:{n}: matched nothing in {readme_path}: {phrase}",
              file=sys.stderr)

for f in failures:
    print(f)
if failures:
    print(f"check_docs: {len(failures)} of {checked} README figures not backed by {bench_path} "
          f"(fix the figure, add it to {bench_path} with its command, or, if it is not a "
          f"performance claim, allow it in {allow_path} with a reason)")
    sys.exit(1)
print(f"check_docs: {checked} README figures found in {bench_path} with their commands "
      f"({allowed_count} allowed by {allow_path})")
PYTHON
