#!/bin/bash
set -uo pipefail
cd /app
sed -i 's/i=3; i<n;/i=0; i<n;/' /app/series.sh
