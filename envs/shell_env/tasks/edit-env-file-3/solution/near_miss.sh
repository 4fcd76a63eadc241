#!/bin/bash
set -uo pipefail
cd /app
sed -i -e 's/^INDIGO=.*/INDIGO=4226/' /app/app.env
echo DEBUG=false >> /app/app.env
