#!/bin/bash
set -euo pipefail
cd /app
sed -i -e 's/^INDIGO=.*/INDIGO=4226/' -e '/^EMBER=/d' /app/app.env
echo DEBUG=false >> /app/app.env
