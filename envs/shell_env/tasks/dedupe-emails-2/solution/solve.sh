#!/bin/bash
set -euo pipefail
cd /app
tr 'A-Z' 'a-z' < /app/emails.txt | sed 's/^ *//; s/ *$//' | LC_ALL=C sort -u > /app/unique.txt
