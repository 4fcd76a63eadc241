#!/bin/bash
set -euo pipefail
cd /app
grep -oiw 'juniper' /app/notes.txt | wc -l > /app/answer.txt
