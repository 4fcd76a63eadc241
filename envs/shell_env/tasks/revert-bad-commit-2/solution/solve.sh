#!/bin/bash
set -euo pipefail
cd /app
cd /app/repo && git revert --no-edit HEAD
