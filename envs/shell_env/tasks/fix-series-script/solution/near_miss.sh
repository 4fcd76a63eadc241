#!/bin/bash
set -uo pipefail
cd /app
sed -i 's/i=4; i<n;/i=0; i<n;/' /app/series.sh
