#!/bin/bash
set -uo pipefail
cd /app
cd /app/photos && for f in IMG_*.JPG; do n="${f#IMG_}"; mv "$f" "photo-$n"; done
