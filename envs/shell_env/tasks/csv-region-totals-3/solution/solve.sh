#!/bin/bash
set -euo pipefail
cd /app
{ echo region,total; tail -n +2 /app/sales.csv | awk -F, '{t[$1]+=$2} END {for (k in t) print k","t[k]}' | sort; } > /app/totals.csv
