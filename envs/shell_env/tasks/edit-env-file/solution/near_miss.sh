#!/bin/bash
set -uo pipefail
cd /app
sed -i -e 's/^WILLOW=.*/WILLOW=3954/' /app/app.env
echo DEBUG=false >> /app/app.env
