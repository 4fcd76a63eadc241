#!/bin/bash
set -uo pipefail
cd /app
grep -oi 'xenon' /app/notes.txt | wc -l > /app/answer.txt
