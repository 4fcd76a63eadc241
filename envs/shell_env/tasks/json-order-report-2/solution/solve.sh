#!/bin/bash
set -euo pipefail
cd /app
python3 - <<'PY'
import json
users = json.load(open('/app/users.json'))
orders = json.load(open('/app/orders.json'))
report = {u['name']: sum(o['user_id'] == u['id'] for o in orders) for u in users}
json.dump(report, open('/app/report.json', 'w'))
PY
