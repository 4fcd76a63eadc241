#!/bin/bash
set -euo pipefail
cd /app
cd /app
for f in inbox/*; do ext="${f##*.}"; mkdir -p "sorted/$ext"; mv "$f" "sorted/$ext/"; done
