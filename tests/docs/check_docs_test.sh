#!/usr/bin/env bash
# Tests scripts/check_docs.sh on small fixtures: it passes when every README figure is in the
# benchmarks file under a section naming its command, and fails (exit 1, naming the figure and its
# README line) when one is missing, has no command, or claims more precision than the source.
# Exits non-zero when any case goes wrong.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
check=scripts/check_docs.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0

cat >"$dir/BENCHMARKS.md" <<'EOF'
# Benchmarks

## Placement

```sh
bench/fgd_replay.sh ../shared/data/alibaba-gpu-v2023
```

gpuslice leaves 255.0 unallocated GPUs, FGD 289.4. One replay takes 0.21 s. Below FGD by 4.3%
(gpushare40) to 18.3% (gpuspec10). Launch rate x0.993.

### Speed

| policy | wall |
|---|---|
| fgd | 0.21 s |

## Notes without a command

The planner once took 7.5 s.
EOF

cat >"$dir/allow" <<'EOF'
# fixture allow-list
polls every 200 ms  # a setting
EOF

cat >"$dir/README.ok.md" <<'EOF'
# Fixture

gpuslice leaves **255 unallocated GPUs where FGD leaves 289.4**. One replay takes 0.21 s, 4.3-18.3%
below FGD, at x0.993 of the native launch rate. The agent polls every 200 ms.

```console
$ gpuslice replay      # figures in code blocks are output, not claims: 12 ms, 99.9%
```

Options such as `--seconds 42 s` are code, not claims.
EOF

# expect NAME WANT_RC README [PATTERN...]: runs the check and wants its exit code and each pattern
# (a fixed string) in its output.
expect() {
  local name=$1 want=$2 readme=$3
  shift 3
  local out rc
  out=$("$check" --allow "$dir/allow" "$readme" "$dir/BENCHMARKS.md" 2>&1)
  rc=$?
  if [[ $rc != "$want" ]]; then
    echo "FAIL $name: exit $rc, want $want; output:"
    sed 's/^/  /' <<<"$out"
    failed=1
    return
  fi
  local pattern
  for pattern in "$@"; do
    if ! grep -qF -- "$pattern" <<<"$out"; then
      echo "FAIL $name: output lacks '$pattern'; output:"
      sed 's/^/  /' <<<"$out"
      failed=1
      return
    fi
  done
  echo "ok   $name"
}

expect "every figure found" 0 "$dir/README.ok.md" "found in"

{ cat "$dir/README.ok.md"; echo; echo "Each decision takes 42 ms on 16 GPUs."; } >"$dir/README.missing.md"
line=$(grep -n "42 ms" "$dir/README.missing.md" | cut -d: -f1)
expect "a made-up figure fails with its line" 1 "$dir/README.missing.md" \
  "README.missing.md:$line: '42 ms' is not in" "README.missing.md:$line: '16 GPUs' is not in"

{ cat "$dir/README.ok.md"; echo; echo "Planning took 7.5 s."; } >"$dir/README.nocommand.md"
expect "a figure in a section naming no command fails" 1 "$dir/README.nocommand.md" \
  "'7.5 s' is in" "names the command"

{ cat "$dir/README.ok.md"; echo; echo "A replay takes 0.210 s."; } >"$dir/README.precise.md"
expect "more precision than the source fails" 1 "$dir/README.precise.md" "'0.210 s' is not in"

{ cat "$dir/README.ok.md"; echo; echo "gpuslice is **3 times** better."; } >"$dir/README.bold.md"
expect "a bold number without a unit is checked" 1 "$dir/README.bold.md" "'3' is not in"

{ cat "$dir/README.ok.md"; echo; echo "A launch costs x0.95 of native."; } >"$dir/README.ratio.md"
expect "a ratio written x0.95 is checked" 1 "$dir/README.ratio.md" "'x0.95' is not in"

{ cat "$dir/README.ok.md"; echo; echo "The engine is 3.2x."; } >"$dir/README.times.md"
expect "a ratio ending a sentence (3.2x.) is checked" 1 "$dir/README.times.md" "'3.2x' is not in"

# An allow-list entry needs a reason.
printf 'polls every 200 ms\n' >"$dir/allow.bad"
out=$("$check" --allow "$dir/allow.bad" "$dir/README.ok.md" "$dir/BENCHMARKS.md" 2>&1)
if [[ $? == 2 ]] && grep -qF "with a reason" <<<"$out"; then
  echo "ok   an allow-list entry without a reason is refused"
else
  echo "FAIL an allow-list entry without a reason: $out"
  failed=1
fi

if "$check" --help | grep -qF "Usage: scripts/check_docs.sh"; then
  echo "ok   --help"
else
  echo "FAIL --help"
  failed=1
fi

# The repository's own README with a made-up claim added: the check must name it.
cp README.md "$dir/README.real.md"
echo "gpuslice places a slice in 0.123 ms on 77,777 GPUs." >>"$dir/README.real.md"
line=$(wc -l <"$dir/README.real.md")
out=$("$check" "$dir/README.real.md" docs/BENCHMARKS.md 2>&1)
if [[ $? == 1 ]] && grep -qF "README.real.md:$line: '0.123 ms' is not in" <<<"$out" &&
  grep -qF "README.real.md:$line: '77,777 GPUs' is not in" <<<"$out"; then
  echo "ok   a made-up figure in a copy of README.md fails"
else
  echo "FAIL a made-up figure in a copy of README.md:"
  sed 's/^/  /' <<<"$out"
  failed=1
fi

exit $failed
