#!/bin/bash
set -uo pipefail
cd /app
{ echo region,total; awk -F, '{t[$1]+=$2} END {for (k in t) print k","t[k]}' /app/sales.csv | sort; } > /app/totals.csv
