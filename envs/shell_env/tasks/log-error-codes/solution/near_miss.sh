#!/bin/bash
set -uo pipefail
cd /app
grep -o 'code=E[0-9]*' /app/app.log | cut -d= -f2 | sort -u > /app/errors.txt
