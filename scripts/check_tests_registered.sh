#!/usr/bin/env bash
# Fails when a tests/**/*_test.cc file is not listed in tests/CMakeLists.txt (a test that is not
# built is never run).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
while IFS= read -r file; do
  relative="${file#tests/}"
  if ! grep -q "$relative" tests/CMakeLists.txt; then
    echo "not registered in tests/CMakeLists.txt: $file"
    status=1
  fi
done < <(git ls-files 'tests/*_test.cc')
exit $status
