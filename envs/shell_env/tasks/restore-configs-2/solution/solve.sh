#!/bin/bash
set -euo pipefail
cd /app
mkdir -p /app/restored && tar -xzf /app/backup.tar.gz -C /app/restored --wildcards '*.conf'
