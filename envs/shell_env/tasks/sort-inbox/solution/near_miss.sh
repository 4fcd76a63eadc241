#!/bin/bash
set -uo pipefail
cd /app
cd /app
for f in inbox/*; do ext="${f##*.}"; mkdir -p "sorted/$ext"; cp "$f" "sorted/$ext/"; done
