#!/bin/bash
set -uo pipefail
cd /app
cd /app/data && find . -type f -size +999c | sed 's|^./||' | sort > /app/large.txt
