#!/bin/bash
set -euo pipefail
cd /app
grep -oiw 'ember' /app/notes.txt | wc -l > /app/answer.txt
