#!/bin/bash
set -euo pipefail
cd /app
grep -oiw 'xenon' /app/notes.txt | wc -l > /app/answer.txt
