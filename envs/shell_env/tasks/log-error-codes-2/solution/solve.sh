#!/bin/bash
set -euo pipefail
cd /app
grep ' ERROR ' /app/app.log | grep -o 'code=E[0-9]*' | cut -d= -f2 | sort -u > /app/errors.txt
