#!/bin/bash
set -euo pipefail
cd /app
sed -i -e 's/^WILLOW=.*/WILLOW=3954/' -e '/^MEADOW=/d' /app/app.env
echo DEBUG=false >> /app/app.env
