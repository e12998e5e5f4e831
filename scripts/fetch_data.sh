#!/usr/bin/env bash
# Puts the text corpora qkv's training tests, demo and benchmarks use into the git-ignored
# data/ folder, only when missing (idempotent; a second run returns at once).
#   data/kjv.txt   the King James Bible (public domain; its copyright expired: see
#                  /usr/share/doc/bible-kjv/copyright), from the Debian package bible-kjv
#                  (scripts/setup.sh installs it): one verse per line, its reference
#                  ("Ge1:1 ") removed; 31102 lines, about 4.3 MB.
# Usage: scripts/fetch_data.sh [DATA_DIR]   (default: <repo>/data)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="${1:-$root/data}"
dest="$data/kjv.txt"
if [ -s "$dest" ]; then exit 0; fi
if ! command -v bible >/dev/null 2>&1; then
  echo "fetch_data: needs the 'bible' program (Debian package bible-kjv; scripts/setup.sh installs it)" >&2
  exit 1
fi
mkdir -p "$data"
tmp="$dest.partial"
bible -f Gen1:1-Rev22:21 | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' > "$tmp"
lines=$(wc -l < "$tmp")
if [ "$lines" -ne 31102 ]; then
  echo "fetch_data: expected 31102 verses from 'bible', got $lines" >&2
  rm -f "$tmp"
  exit 1
fi
mv "$tmp" "$dest"
echo "fetch_data: $dest ready ($(wc -c < "$dest") bytes)"
