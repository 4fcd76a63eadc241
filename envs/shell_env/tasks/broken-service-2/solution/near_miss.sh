#!/bin/bash
set -uo pipefail
cd /app
sed -i 's|^data_dir = .*|data_dir = /app/service|' /app/service/service.ini
