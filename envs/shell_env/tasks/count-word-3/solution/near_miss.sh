#!/bin/bash
set -uo pipefail
cd /app
grep -oi 'juniper' /app/notes.txt | wc -l > /app/answer.txt
