#!/bin/bash
set -euo pipefail
cd /app
sed -i 's|^data_dir = .*|data_dir = /app/service/data|' /app/service/service.ini
