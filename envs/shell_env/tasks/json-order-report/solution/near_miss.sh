#!/bin/bash
set -uo pipefail
cd /app
python3 - <<'PY'
import json, collections
users = {u['id']: u['name'] for u in json.load(open('/app/users.json'))}
counts = collections.Counter(users[o['user_id']] for o in json.load(open('/app/orders.json')))
json.dump(dict(counts), open('/app/report.json', 'w'))
PY
