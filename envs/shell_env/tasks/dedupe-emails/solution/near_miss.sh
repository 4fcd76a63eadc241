#!/bin/bash
set -uo pipefail
cd /app
tr 'A-Z' 'a-z' < /app/emails.txt | LC_ALL=C sort -u > /app/unique.txt
