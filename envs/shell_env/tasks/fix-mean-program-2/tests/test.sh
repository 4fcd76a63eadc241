#!/bin/bash
# Harbor verifier: always (re)writes the reward, 1 for a correct end state, 0 otherwise.
mkdir -p "$(dirname /logs/verifier/reward.txt)"
if timeout 60 python3 /tests/check.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
