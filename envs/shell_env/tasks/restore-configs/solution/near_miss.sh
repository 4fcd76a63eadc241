#!/bin/bash
set -uo pipefail
cd /app
mkdir -p /app/restored && tar -xzf /app/backup.tar.gz -C /app/restored
