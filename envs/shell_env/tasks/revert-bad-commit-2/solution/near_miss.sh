#!/bin/bash
set -uo pipefail
cd /app
cd /app/repo && git reset -q --hard HEAD~1
