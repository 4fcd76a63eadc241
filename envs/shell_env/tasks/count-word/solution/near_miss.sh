#!/bin/bash
set -uo pipefail
cd /app
grep -oi 'ember' /app/notes.txt | wc -l > /app/answer.txt
