#!/bin/bash
set -euo pipefail
cd /app
cd /app/data && find . -type f -size +1000c | sed 's|^./||' | sort > /app/large.txt
