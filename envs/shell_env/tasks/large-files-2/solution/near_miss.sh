#!/bin/bash
set -uo pipefail
cd /app
cd /app/data && find . -type f -size +1999c | sed 's|^./||' | sort > /app/large.txt
