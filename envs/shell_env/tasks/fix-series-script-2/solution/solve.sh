#!/bin/bash
set -euo pipefail
cd /app
sed -i 's/i<n;/i<=n;/' /app/series.sh
